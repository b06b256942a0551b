"""open_multiprocessing_iterator with real grain worker processes (spawned, so kept to a few tests)."""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grain
import numpy as np
import pytest
from absl import flags
from grain.sharding import NoSharding, ShardOptions

from tinax.data import (
    InMemorySource,
    evaluation_batches,
    open_multiprocessing_iterator,
    read_parquet_record,
    split_by_column,
    training_batches,
    write_parquet_record,
)

ROWS = 24


def _stack_ids(rows: Sequence[dict[str, Any]]) -> np.ndarray:
    # Runs in the workers: a module-level function, pickled by reference.
    return np.asarray([row["id"] for row in rows], dtype=np.int64)


def _pipeline(**overrides: Any) -> grain.MapDataset:
    rows = [{"id": index} for index in range(ROWS)]
    dataset = grain.MapDataset.source(InMemorySource(rows, source_id="worker-rows"))
    arguments: dict[str, Any] = {
        "shard_options": ShardOptions(0, 1, drop_remainder=True),
        "seed": 3,
        "shuffle": True,
        "num_epochs": None,
        "batch_size": 4,
        "batch_fn": _stack_ids,
    }
    arguments.update(overrides)
    return training_batches(dataset, **arguments)


def _child_pids() -> set[int]:
    # grain starts workers from helper threads, so each thread's children
    # list counts: a worker that was never reaped stays listed as a zombie.
    pids: set[int] = set()
    for children in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        pids.update(int(pid) for pid in children.read_text().split())
    return pids


def _grain_worker_pids() -> set[int]:
    return {
        process.pid
        for process in multiprocessing.active_children()
        if process.name.startswith("grain-process-prefetch") and process.pid is not None
    }


class _LeaveBlockError(Exception):
    pass


@pytest.fixture
def unparsed_flags() -> Iterator[None]:
    was_parsed = flags.FLAGS.is_parsed()
    if was_parsed:
        flags.FLAGS.unparse_flags()
    yield
    if was_parsed:
        flags.FLAGS.mark_as_parsed()


@pytest.fixture
def counted_children() -> None:
    if not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists():
        pytest.skip("this kernel does not list child processes in /proc")


def test_unparsed_flags_are_a_clear_error_and_stay_unparsed(unparsed_flags):
    with pytest.raises(RuntimeError, match=r"needs absl flags to be parsed.*absl.app.run"):  # noqa: SIM117
        with open_multiprocessing_iterator(_pipeline().to_iter_dataset(), num_workers=2):
            pass
    assert not flags.FLAGS.is_parsed()


def test_after_a_numpy_worker_count_refusals_are_also_0_2s_type_error(unparsed_flags):
    # tinax 0.2 refused a NumPy integer num_workers with TypeError before anything else.
    with pytest.raises(RuntimeError, match="needs absl flags to be parsed") as caught:  # noqa: SIM117
        with open_multiprocessing_iterator(_pipeline().to_iter_dataset(), num_workers=np.int64(2)):
            pass
    assert isinstance(caught.value, TypeError)
    with pytest.raises(ValueError, match="per_worker_buffer_size must be an int >= 1") as caught:  # noqa: SIM117
        with open_multiprocessing_iterator(
            _pipeline().to_iter_dataset(), num_workers=np.int64(0), per_worker_buffer_size=0
        ):
            pass
    assert isinstance(caught.value, TypeError)
    assert not flags.FLAGS.is_parsed()


def test_zero_workers_need_no_parsed_flags_and_still_go_through_mp_prefetch(unparsed_flags, monkeypatch):
    # As in tinax 0.2: only worker processes read the flags, and the options
    # reach grain's mp_prefetch (which leaves the dataset as it is for 0 workers).
    received = []
    original = grain.IterDataset.mp_prefetch

    def recording(dataset, options=None, worker_init_fn=None, sequential_slice=False):
        received.append(options)
        return original(dataset, options, worker_init_fn=worker_init_fn, sequential_slice=sequential_slice)

    monkeypatch.setattr(grain.IterDataset, "mp_prefetch", recording)
    reference = [batch.tolist() for batch in _pipeline().slice(slice(0, 3))]
    with open_multiprocessing_iterator(
        _pipeline().to_iter_dataset(), num_workers=0, per_worker_buffer_size=3
    ) as iterator:
        assert [next(iterator).tolist() for _ in range(3)] == reference
    assert received == [grain.MultiprocessingOptions(num_workers=0, per_worker_buffer_size=3)]
    assert not flags.FLAGS.is_parsed()


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"dataset": "map"}, TypeError, r"dataset must be a grain.IterDataset \(call .to_iter_dataset\(\)"),
        ({"num_workers": -1}, ValueError, "num_workers must be an int >= 0, got -1"),
        ({"num_workers": True}, TypeError, "num_workers must be an int >= 0, got True"),
        ({"per_worker_buffer_size": 0}, ValueError, "per_worker_buffer_size must be an int >= 1"),
        ({"worker_init_fn": "init"}, TypeError, "worker_init_fn must be callable"),
        ({"sequential_slice": 1}, TypeError, "sequential_slice must be a bool"),
        ({"sequential_slice": True}, ValueError, "sequential_slice must be False for a tinax pipeline"),
    ],
)
def test_arguments_are_checked_before_any_worker_starts(parsed_flags, arguments, error, message):
    dataset = _pipeline()
    keywords = {"dataset": dataset.to_iter_dataset(), "num_workers": 2, **arguments}
    if keywords["dataset"] == "map":
        keywords["dataset"] = dataset
    before = _grain_worker_pids()
    with pytest.raises(error, match=message), open_multiprocessing_iterator(**keywords):
        pass
    assert _grain_worker_pids() == before


def test_zero_workers_iterate_in_process_with_interchangeable_states(parsed_flags):
    reference = [batch.tolist() for batch in _pipeline().slice(slice(0, 4))]
    with open_multiprocessing_iterator(_pipeline().to_iter_dataset(), num_workers=0) as iterator:
        assert next(iterator).tolist() == reference[0]
        state = iterator.get_state()
        assert not _grain_worker_pids()
    plain = iter(_pipeline())
    plain.set_state(state)
    assert next(plain).tolist() == reference[1]


def test_workers_resume_exactly_and_are_joined_on_every_exit(parsed_flags, counted_children):
    consumed = 3
    reference = [batch.tolist() for batch in _pipeline().slice(slice(0, consumed + 4))]

    # Leave the first block by an exception after k batches.
    left_by_exception = False
    try:
        with open_multiprocessing_iterator(_pipeline().to_iter_dataset(), num_workers=2) as iterator:
            assert isinstance(iterator, grain.DatasetIterator)
            got = [next(iterator).tolist() for _ in range(consumed)]
            workers = _grain_worker_pids()
            assert len(workers) == 2
            assert workers <= _child_pids()
            state = json.loads(json.dumps(iterator.get_state()))
            raise _LeaveBlockError
    except _LeaveBlockError:
        left_by_exception = True
    assert left_by_exception
    assert got == reference[:consumed], "workers give the pipeline's batches in the pipeline's order"
    assert not workers & _child_pids(), "every worker is joined (not even a zombie is left)"
    assert not _grain_worker_pids()
    assert state["tinax_pipeline"]["num_workers"] == 2

    # A fresh two-worker iterator continues at batch k + 1; leave normally.
    with open_multiprocessing_iterator(_pipeline().to_iter_dataset(), num_workers=2) as resumed:
        resumed.set_state(state)
        assert [next(resumed).tolist() for _ in range(4)] == reference[consumed : consumed + 4]
        workers = _grain_worker_pids()
        assert len(workers) == 2
        assert workers <= _child_pids()
    assert not workers & _child_pids()
    assert not _grain_worker_pids()


def test_a_worker_state_is_refused_by_other_worker_counts(parsed_flags):
    # Before the first next() no worker has started, and get_state is computed
    # in this process, so this test spawns nothing.
    with open_multiprocessing_iterator(_pipeline().to_iter_dataset(), num_workers=2) as iterator:
        state = iterator.get_state()
    with (
        open_multiprocessing_iterator(_pipeline().to_iter_dataset(), num_workers=3) as three,
        pytest.raises(ValueError, match="num_workers is 2 in the state but 3 here"),
    ):
        three.set_state(state)
    with (
        open_multiprocessing_iterator(_pipeline().to_iter_dataset(), num_workers=0) as none,
        pytest.raises(ValueError, match="num_workers is 2 in the state but 0 here"),
    ):
        none.set_state(state)
    with pytest.raises(ValueError, match="num_workers is 2 in the state but 0 here"):
        iter(_pipeline()).set_state(state)
    plain_state = iter(_pipeline()).get_state()
    with (
        open_multiprocessing_iterator(_pipeline().to_iter_dataset(), num_workers=2) as two,
        pytest.raises(ValueError, match="num_workers is 0 in the state but 2 here"),
    ):
        two.set_state(plain_state)
    assert not _grain_worker_pids()


def test_a_worker_state_checks_the_pipeline_too(parsed_flags):
    with open_multiprocessing_iterator(_pipeline().to_iter_dataset(), num_workers=2) as iterator:
        state = iterator.get_state()
    with (
        open_multiprocessing_iterator(_pipeline(seed=4).to_iter_dataset(), num_workers=2) as other,
        pytest.raises(ValueError, match="seed is 3 in the state but 4 here"),
    ):
        other.set_state(state)


def test_evaluation_with_workers_sees_every_row_once_in_order(parsed_flags):
    def evaluation() -> grain.MapDataset:
        rows = [{"id": index} for index in range(ROWS - 1)]
        dataset = grain.MapDataset.source(InMemorySource(rows, source_id="worker-rows"))
        return evaluation_batches(dataset, shard_options=NoSharding(), batch_size=5, batch_fn=_stack_ids)

    seen: list[int] = []
    with open_multiprocessing_iterator(evaluation().to_iter_dataset(), num_workers=2, worker_init_fn=_noop) as iterator:
        for batch in iterator:
            seen.extend(batch.tolist())
    assert seen == list(range(ROWS - 1))


def _noop(worker_index: int, worker_count: int) -> None:
    assert 0 <= worker_index < worker_count


def test_workers_read_record_files_and_split_parts(parsed_flags, tmp_path):
    # The reader's and the split's datasets (grain source datasets that refuse
    # bool indices) reach the spawned workers by pickle and read there.
    path = tmp_path / "rows.parquet"
    write_parquet_record(path, [{"id": index, "half": index % 2} for index in range(ROWS)])
    even, odd = split_by_column(read_parquet_record(path), "half", values=(0, 1))
    for part, expected in ((read_parquet_record(path), list(range(ROWS))), (odd, list(range(1, ROWS, 2)))):
        batches = evaluation_batches(part, shard_options=NoSharding(), batch_size=5, batch_fn=_stack_ids)
        seen: list[int] = []
        with open_multiprocessing_iterator(batches.to_iter_dataset(), num_workers=2) as iterator:
            for batch in iterator:
                seen.extend(batch.tolist())
        assert seen == expected
    assert even[np.int64(0)] == {"id": 0}
