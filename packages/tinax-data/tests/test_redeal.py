"""redeal_state: a training pipeline resumes its interrupted epoch on another number of processes.

Several processes are simulated in this one: each builds the pipeline with
its own ``ShardOptions(shard_index, shard_count)``, as ``ShardByJaxProcess``
gives each process of a multi-process job.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import grain
import numpy as np
import pytest
from grain.sharding import ShardOptions

from tinax.data import (
    InMemorySource,
    evaluation_batches,
    open_multiprocessing_iterator,
    read_array_record,
    read_parquet_record,
    redeal_state,
    training_batches,
    write_array_record,
    write_parquet_record,
)

ROWS = 53
SEED = 5
# (old shard count, old batch size, steps read before the checkpoint, new shard count, batch_size passed)
TRANSITIONS = [
    pytest.param(2, 4, 8, 1, None, id="2to1"),  # in the second epoch (6 steps per epoch)
    pytest.param(1, 6, 3, 2, None, id="1to2"),
    pytest.param(2, 4, 1, 4, None, id="2to4"),
    pytest.param(4, 2, 4, 2, None, id="4to2"),
    pytest.param(2, 3, 5, 4, 2, id="2to4-new-global-batch"),
]


def stack_ids(rows: Sequence[dict[str, Any]]) -> np.ndarray:
    # Runs in worker processes too: a module-level function, pickled by reference.
    return np.asarray([row["id"] for row in rows], dtype=np.int64)


def _records(count: int = ROWS) -> list[dict[str, Any]]:
    # 2-d arrays: records written in the tinax format, in row groups of _ROW_GROUP_MAX_ROWS.
    return [{"id": index, "x": np.full((1, 2), index, np.float32)} for index in range(count)]


def _dataset(kind: str, tmp_path, monkeypatch) -> tuple[grain.MapDataset, int | None]:
    """One epoch of ROWS rows, and the shuffle window to use with it."""
    if kind == "memory":
        return grain.MapDataset.source(InMemorySource(_records(), source_id="redeal-rows")), None
    if kind.startswith("array_record"):
        pytest.importorskip("array_record.python.array_record_module", reason="the arrayrecord extra is not installed")
        if kind == "array_record-files":
            return read_array_record(_shards(tmp_path, write_array_record, ".array_record")), None
        path = tmp_path / "rows.array_record"
        write_array_record(path, _records())
        return read_array_record(path), None
    from tinax._data._records import _parquet_write

    monkeypatch.setattr(_parquet_write, "_ROW_GROUP_MAX_ROWS", 6)
    window = 2 if kind.startswith("parquet-window") else None
    if kind.endswith("-files"):
        return read_parquet_record(_shards(tmp_path, write_parquet_record, ".parquet")), window
    path = tmp_path / "rows.parquet"
    write_parquet_record(path, _records())
    return read_parquet_record(path), window


def _shards(tmp_path, write, suffix: str):
    """The rows written as a folder of 3 uneven files (a dataset of many files)."""
    folder = tmp_path / "shards"
    folder.mkdir()
    records = _records()
    for index, (start, stop) in enumerate([(0, 20), (20, 37), (37, ROWS)]):
        write(folder / f"part-{index:05d}{suffix}", records[start:stop])
    return folder


SOURCES = [
    "memory",
    "array_record",
    "parquet",
    "parquet-window",
    "parquet-files",
    "parquet-window-files",
    "array_record-files",
]


def _pipeline(
    dataset: grain.MapDataset, window: int | None, shard_index: int, shard_count: int, batch_size: int
) -> grain.MapDataset:
    return training_batches(
        dataset,
        shard_options=ShardOptions(shard_index, shard_count, drop_remainder=True),
        seed=SEED,
        shuffle=True,
        num_epochs=4,
        batch_size=batch_size,
        batch_fn=stack_ids,
        shuffle_window=window,
    )


def _shard(shard_index: int, shard_count: int) -> ShardOptions:
    return ShardOptions(shard_index, shard_count, drop_remainder=True)


def _run_old(
    dataset: grain.MapDataset, window: int | None, shard_count: int, batch_size: int, steps: int
) -> tuple[list[int], list[dict[str, Any]]]:
    """Runs shard_count processes for steps steps; returns the rows read in the last epoch and their states."""
    epoch_steps = ROWS // (shard_count * batch_size)
    epoch_start = steps // epoch_steps * epoch_steps
    read: list[int] = []
    states = []
    for shard_index in range(shard_count):
        iterator = iter(_pipeline(dataset, window, shard_index, shard_count, batch_size))
        for step in range(steps):
            batch = next(iterator)
            if step >= epoch_start:
                read.extend(batch.tolist())
        states.append(json.loads(json.dumps(iterator.get_state())))
    return read, states


def _next_index(state: dict[str, Any]) -> int:
    grain_state = state["grain"]
    if "next_index" in grain_state:
        return grain_state["next_index"]
    return sum(worker["grain"]["next_index"] for worker in grain_state["iterators_in_use_states"])


def _assert_fresh_run_continues(
    iterators: Sequence[grain.DatasetIterator],
    dataset: grain.MapDataset,
    window: int | None,
    shard_count: int,
    batch_size: int,
    next_epoch_start: int,
) -> None:
    """The next epoch of every new process is the one a fresh run on shard_count processes reads, state included."""
    epoch_steps = ROWS // (shard_count * batch_size)
    for shard_index, iterator in enumerate(iterators):
        fresh = iter(_pipeline(dataset, window, shard_index, shard_count, batch_size))
        for _ in range(next_epoch_start):
            next(fresh)
        assert iterator.get_state() == fresh.get_state(), "past the re-dealt rows, the state is a fresh run's"
        for _ in range(epoch_steps):
            assert np.array_equal(next(iterator), next(fresh))


@pytest.mark.parametrize("kind", SOURCES)
@pytest.mark.parametrize(("old_count", "old_batch", "steps", "new_count", "new_batch"), TRANSITIONS)
def test_a_redeal_reads_each_remaining_row_of_the_epoch_once_then_runs_as_a_fresh_run(
    kind, old_count, old_batch, steps, new_count, new_batch, tmp_path, monkeypatch
):
    dataset, window = _dataset(kind, tmp_path, monkeypatch)
    read, states = _run_old(dataset, window, old_count, old_batch, steps)
    epoch = steps // (ROWS // (old_count * old_batch))

    new_states = [
        redeal_state(states, shard_options=_shard(shard_index, new_count), batch_size=new_batch)
        for shard_index in range(new_count)
    ]
    batch_size = new_states[0]["tinax_pipeline"]["batch_size"]
    assert batch_size == (new_batch or old_count * old_batch // new_count)
    assert json.loads(json.dumps(new_states)) == new_states
    epoch_end = (epoch + 1) * (ROWS // (new_count * batch_size))
    first = new_states[0]["grain"]["next_index"]
    assert all(state["grain"]["next_index"] == first for state in new_states), "every process runs the same steps"

    iterators = []
    for shard_index, state in enumerate(new_states):
        iterator = iter(_pipeline(dataset, window, shard_index, new_count, batch_size))
        iterator.set_state(state)
        for _ in range(first, epoch_end):
            batch = next(iterator)
            assert batch.shape == (batch_size,)
            read.extend(batch.tolist())
        iterators.append(iterator)

    assert len(read) == len(set(read)), "no row of the epoch is read twice"
    assert ROWS - len(read) < new_count * batch_size, "only rows that fill no global batch sit out"
    _assert_fresh_run_continues(iterators, dataset, window, new_count, batch_size, epoch_end)


def test_one_state_stands_for_the_common_position_of_all_old_processes():
    dataset, _ = _dataset("memory", None, None)
    _, states = _run_old(dataset, None, 2, 4, 2)
    for state in states:
        alone = redeal_state(state, shard_options=_shard(1, 4))
        assert alone == redeal_state(states, shard_options=_shard(1, 4))
        assert redeal_state([states[1], states[0]], shard_options=_shard(1, 4)) == alone


def test_a_redeal_onto_the_same_layout_gives_back_the_saved_states():
    dataset, _ = _dataset("memory", None, None)
    _, states = _run_old(dataset, None, 2, 4, 2)
    for shard_index, state in enumerate(states):
        assert redeal_state(states, shard_options=_shard(shard_index, 2)) == state


def test_at_an_epoch_boundary_a_redeal_is_a_fresh_run_of_the_new_layout():
    dataset, _ = _dataset("memory", None, None)
    _, states = _run_old(dataset, None, 2, 4, 6)  # 6 steps: the first epoch is over
    state = redeal_state(states, shard_options=_shard(0, 1))
    assert "tinax_redeal" not in state
    assert state["grain"] == {"next_index": ROWS // 8}


def test_a_re_dealt_iterator_resumes_exactly_on_the_same_layout():
    dataset, _ = _dataset("memory", None, None)
    _, states = _run_old(dataset, None, 2, 4, 1)
    state = redeal_state(states, shard_options=_shard(0, 1))
    iterator = iter(_pipeline(dataset, None, 0, 1, 8))
    iterator.set_state(state)
    next(iterator)
    saved = json.loads(json.dumps(iterator.get_state()))
    assert saved["tinax_redeal"] == state["tinax_redeal"], "the record stays while re-dealt batches remain"
    expected = [next(iterator).tolist() for _ in range(8)]

    resumed = iter(_pipeline(dataset, None, 0, 1, 8))
    resumed.set_state(saved)
    assert [next(resumed).tolist() for _ in range(8)] == expected
    # The same iterator restored to a plain state reads the plain batches again.
    resumed.set_state(iter(_pipeline(dataset, None, 0, 1, 8)).get_state())
    assert np.array_equal(next(resumed), next(iter(_pipeline(dataset, None, 0, 1, 8))))


def test_a_re_dealt_epoch_can_be_re_dealt_again():
    dataset, _ = _dataset("memory", None, None)
    read, states = _run_old(dataset, None, 2, 4, 1)
    # 2 -> 3 processes of 2 rows, one step each, then -> 1 process of 6.
    middle = []
    for shard_index in range(3):
        iterator = iter(_pipeline(dataset, None, shard_index, 3, 2))
        iterator.set_state(redeal_state(states, shard_options=_shard(shard_index, 3), batch_size=2))
        read.extend(next(iterator).tolist())
        middle.append(json.loads(json.dumps(iterator.get_state())))
    assert all("tinax_redeal" in state for state in middle)
    final = redeal_state(middle, shard_options=_shard(0, 1), batch_size=6)
    iterator = iter(_pipeline(dataset, None, 0, 1, 6))
    iterator.set_state(final)
    epoch_end = ROWS // 6
    for _ in range(_next_index(final), epoch_end):
        read.extend(next(iterator).tolist())
    assert len(read) == len(set(read))
    assert ROWS - len(read) < 6
    _assert_fresh_run_continues([iterator], dataset, None, 1, 6, epoch_end)


def test_a_state_refuses_another_process_count_unless_re_dealt():
    dataset, _ = _dataset("memory", None, None)
    _, states = _run_old(dataset, None, 2, 4, 2)
    iterator = iter(_pipeline(dataset, None, 0, 1, 8))
    with pytest.raises(ValueError, match=r"shard_count is 2 in the state but 1 here.*redeal_state"):
        iterator.set_state(states[0])
    assert next(iterator).tolist() == next(iter(_pipeline(dataset, None, 0, 1, 8))).tolist(), "nothing moved"
    # A re-dealt state restores only into the pipeline it was dealt for.
    redealt = redeal_state(states, shard_options=_shard(0, 2), batch_size=3)
    with pytest.raises(ValueError, match="batch_size is 3 in the state but 4 here"):
        iter(_pipeline(dataset, None, 0, 2, 4)).set_state(redealt)
    with pytest.raises(ValueError, match="shard_index is 0 in the state but 1 here"):
        iter(_pipeline(dataset, None, 1, 2, 3)).set_state(redealt)
    other_seed = training_batches(
        dataset, shard_options=_shard(0, 2), seed=SEED + 1, shuffle=True, num_epochs=4, batch_size=3, batch_fn=stack_ids
    )
    with pytest.raises(ValueError, match="seed is 5 in the state but 6 here"):
        iter(other_seed).set_state(redealt)


def test_a_global_batch_the_new_count_does_not_divide_needs_a_batch_size():
    dataset, _ = _dataset("memory", None, None)
    _, states = _run_old(dataset, None, 2, 3, 2)
    with pytest.raises(
        ValueError, match=r"batch_size must be given.*global batch of 6 rows.*\[1, 2, 3, 6\]"
    ) as refused:
        redeal_state(states, shard_options=_shard(0, 4))
    assert "batch_size=1 (a global batch of 4) or batch_size=2 (a global batch of 8)" in str(refused.value)
    assert redeal_state(states, shard_options=_shard(0, 4), batch_size=2)["tinax_pipeline"]["batch_size"] == 2
    with pytest.raises(ValueError, match=r"batch_size must be at most 13 for 4 processes"):
        redeal_state(states, shard_options=_shard(0, 4), batch_size=14)
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        redeal_state(states, shard_options=_shard(0, 4), batch_size=0)
    with pytest.raises(TypeError, match="batch_size must be an int"):
        redeal_state(states, shard_options=_shard(0, 4), batch_size=True)


def test_states_must_be_all_processes_at_one_step_of_one_pipeline():
    dataset, _ = _dataset("memory", None, None)
    _, states = _run_old(dataset, None, 2, 4, 2)
    _, later = _run_old(dataset, None, 2, 4, 3)
    with pytest.raises(ValueError, match="must all be saved at the same step"):
        redeal_state([states[0], later[1]], shard_options=_shard(0, 1))
    with pytest.raises(ValueError, match=r"each of the 2 old processes exactly once.*repeating \[0\]"):
        redeal_state([states[0], states[0]], shard_options=_shard(0, 1))
    _, four = _run_old(dataset, None, 4, 2, 2)
    with pytest.raises(ValueError, match=r"got shard indices \[0, 1, 2\], missing \[3\]"):
        redeal_state(four[:3], shard_options=_shard(0, 1))
    other = json.loads(json.dumps(states[1]))
    other["tinax_pipeline"]["seed"] = 99
    with pytest.raises(ValueError, match="must all come from one pipeline.*seed 99"):
        redeal_state([states[0], other], shard_options=_shard(0, 1))
    with pytest.raises(ValueError, match="must not be an empty|not an empty sequence"):
        redeal_state([], shard_options=_shard(0, 1))
    with pytest.raises(TypeError, match="states must be an iterator state"):
        redeal_state("state", shard_options=_shard(0, 1))
    with pytest.raises(ValueError, match="shard_options.drop_remainder must be True"):
        redeal_state(states, shard_options=ShardOptions(0, 1, drop_remainder=False))
    with pytest.raises(TypeError, match="shard_options must be a grain.sharding.ShardOptions"):
        redeal_state(states, shard_options=(0, 1))
    with pytest.raises(ValueError, match="num_workers must be an int >= 0"):
        redeal_state(states, shard_options=_shard(0, 1), num_workers=-1)
    with pytest.raises(TypeError, match="num_workers must be an int"):
        redeal_state(states, shard_options=_shard(0, 1), num_workers=True)


def test_states_without_a_training_description_are_not_re_dealt():
    dataset, _ = _dataset("memory", None, None)
    _, states = _run_old(dataset, None, 1, 4, 2)
    with pytest.raises(ValueError, match="without a 'tinax_pipeline' entry.*cannot be re-dealt"):
        redeal_state(states[0]["grain"], shard_options=_shard(0, 2))  # as tinax 0.2 saved it
    evaluation = iter(evaluation_batches(dataset, shard_options=ShardOptions(0, 1), batch_size=4, batch_fn=stack_ids))
    with pytest.raises(ValueError, match="'training_batches': only training states are re-dealt"):
        redeal_state(evaluation.get_state(), shard_options=_shard(0, 2))


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (lambda record: record.update(consumed=[[0, 8], [4, 12]]), ValueError, r"\['consumed'\]\[1\]\[0\]"),
        (lambda record: record.update(consumed=[[0, 8], [8, 12]]), ValueError, r"\['consumed'\]\[1\]\[0\]"),
        (lambda record: record.update(consumed=[[0, ROWS + 1]]), ValueError, r"\['consumed'\]\[0\]\[1\]"),
        (lambda record: record.update(epoch=0.0), TypeError, r"\['epoch'\] must be an int"),
        (lambda record: record.update(extra=1), ValueError, "exactly the keys"),
        (lambda record: record.update(epoch=3), ValueError, "next batch must be one of them"),
    ],
)
def test_a_tampered_re_deal_record_is_refused(change, error, message):
    dataset, _ = _dataset("memory", None, None)
    _, states = _run_old(dataset, None, 2, 4, 2)
    state = redeal_state(states, shard_options=_shard(0, 1))
    change(state["tinax_redeal"])
    with pytest.raises(error, match=message):
        iter(_pipeline(dataset, None, 0, 1, 8)).set_state(state)
    with pytest.raises(error, match=message):
        redeal_state(state, shard_options=_shard(0, 2))


def test_evaluation_pipelines_refuse_a_re_deal_record():
    dataset, _ = _dataset("memory", None, None)
    evaluation = iter(evaluation_batches(dataset, shard_options=ShardOptions(0, 1), batch_size=4, batch_fn=stack_ids))
    state = evaluation.get_state()
    state["tinax_redeal"] = {"epoch": 0, "consumed": [[0, 4]]}
    with pytest.raises(ValueError, match="only training states are re-dealt"):
        evaluation.set_state(state)


# ---------------------------------------------------------------------------
# Worker processes (spawned, so few of them: one old and one new iterator per source)


@pytest.mark.parametrize(
    ("kind", "old_workers", "new_workers"),
    [("memory", 2, 1), ("array_record", 1, 2), ("parquet-window", 2, 2), ("parquet-files", 2, 1)],
)
def test_worker_states_are_re_dealt_into_worker_processes(
    kind, old_workers, new_workers, parsed_flags, tmp_path, monkeypatch
):
    dataset, window = _dataset(kind, tmp_path, monkeypatch)
    # Two old processes, the first with workers, the second without: 2 steps each.
    read: list[int] = []
    states = []
    first_pipeline = _pipeline(dataset, window, 0, 2, 4).to_iter_dataset()
    with open_multiprocessing_iterator(first_pipeline, num_workers=old_workers) as first:
        for _ in range(2):
            read.extend(next(first).tolist())
        states.append(json.loads(json.dumps(first.get_state())))
    second = iter(_pipeline(dataset, window, 1, 2, 4))
    for _ in range(2):
        read.extend(next(second).tolist())
    states.append(second.get_state())

    # One new process with workers.
    state = redeal_state(states, shard_options=_shard(0, 1), num_workers=new_workers)
    epoch_end = ROWS // 8
    pipeline = _pipeline(dataset, window, 0, 1, 8)
    with open_multiprocessing_iterator(pipeline.to_iter_dataset(), num_workers=new_workers) as iterator:
        iterator.set_state(state)
        read.extend(next(iterator).tolist())
        middle = json.loads(json.dumps(iterator.get_state()))
        rest = [next(iterator) for _ in range(_next_index(state) + 1, epoch_end + 2)]
        end_state = iterator.get_state()
    read.extend(row for batch in rest[:-2] for row in batch.tolist())
    assert len(read) == len(set(read))
    assert ROWS - len(read) < 8

    # The same batches without workers, and a fresh run's next epoch.
    in_process = iter(pipeline)
    in_process.set_state(redeal_state(states, shard_options=_shard(0, 1)))
    next(in_process)
    assert [batch.tolist() for batch in rest] == [next(in_process).tolist() for _ in rest]
    fresh = iter(pipeline)
    fresh.set_state({**fresh.get_state(), "grain": {"next_index": epoch_end}})
    assert [batch.tolist() for batch in rest[-2:]] == [next(fresh).tolist() for _ in range(2)]
    assert all("tinax_redeal" not in worker for worker in end_state["grain"]["iterators_in_use_states"])

    if kind in {"parquet-window", "parquet-files"}:
        # A worker state saved within the re-dealt batches restores into new workers.
        with open_multiprocessing_iterator(pipeline.to_iter_dataset(), num_workers=new_workers) as resumed:
            resumed.set_state(middle)
            assert [next(resumed).tolist() for _ in rest] == [batch.tolist() for batch in rest]


# ---------------------------------------------------------------------------
# The layout arithmetic against a direct count of positions


@pytest.mark.parametrize("seed", range(24))
def test_the_re_dealt_positions_are_the_unread_ones_in_order_dealt_in_blocks(seed):
    from tinax._data._pipelines._epoch_layout import RedealtEpoch, epoch_progress, resume_point

    rng = np.random.default_rng(seed)
    num_rows = int(rng.integers(20, 90))
    new_count, new_batch = int(rng.integers(1, 5)), int(rng.integers(1, 4))
    if seed % 2:
        # Any set of read positions, as a chain of re-deals can leave.
        read = rng.random(num_rows) < rng.uniform(0, 0.8)
        edges = np.flatnonzero(np.diff(np.concatenate([[0], read.astype(np.int8), [0]])))
        record = RedealtEpoch(0, tuple(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True)))
    else:
        old_count, old_batch = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        steps = int(rng.integers(0, num_rows // (old_count * old_batch)))
        epoch, consumed = epoch_progress(num_rows, old_count, old_batch, steps, None)
        read = np.zeros(num_rows, dtype=bool)
        for start, stop in consumed:
            read[start:stop] = True
        assert read.sum() == steps * old_count * old_batch
        next_index, found = resume_point(num_rows, new_count, new_batch, epoch, consumed)
        record = found or RedealtEpoch(epoch, consumed)
        assert next_index == record.region(num_rows, new_count, new_batch)[0] or found is None
    unread = np.flatnonzero(~read)
    rest = len(unread) // (new_count * new_batch)
    first, stop = record.region(num_rows, new_count, new_batch)
    assert stop - first == rest
    dealt = [
        record.batch_positions(num_rows, shard, new_count, new_batch, step).tolist()
        for shard in range(new_count)
        for step in range(rest)
    ]
    assert [position for batch in dealt for position in batch] == unread[: rest * new_count * new_batch].tolist()
    # After some steps of every new process, the read positions are the old ones and each block's first batches.
    done = int(rng.integers(0, rest + 1))
    after = np.zeros(num_rows, dtype=bool)
    for start, stop in record.consumed_after(num_rows, new_count, new_batch, done):
        after[start:stop] = True
    expected = read.copy()
    for shard in range(new_count):
        expected[unread[shard * rest * new_batch : shard * rest * new_batch + done * new_batch]] = True
    assert np.array_equal(after, expected)
