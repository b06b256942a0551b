"""Training checkpoints saved by another number of processes: refused, or re-dealt on request.

A training checkpoint keeps one iterator state per saving process
(``iterator/process_{i}-of-{P}.json``, grain's layout). These tests write the
checkpoint in this single process and then put the states of a real
two-process run (two ``training_batches`` iterators, shards 0 and 1 of 2, at
the same step) in its place, as two saving processes would have.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tinax.checkpointing import (
    TrainingCheckpointManager,
    abstract_restore_target,
    load_training_checkpoint,
    save_training_checkpoint,
)

# Re-dealing needs tinax-data's pipelines; tinax-checkpointing installed alone
# (its isolation check) has none, and skips these tests.
pytest.importorskip("tinax.data", reason="re-dealing an iterator needs tinax-data")
from tinax.data import InMemorySource, open_multiprocessing_iterator, training_batches
from tinax_testing.flags import absl_flags_parsed

ROWS = 40
OLD_BATCH = 4  # per process, on two processes: a global batch of 8 rows
SAVED_STEPS = 2
STEP = 7


def _rows(batch: list[dict[str, int]]) -> list[int]:
    return [row["row"] for row in batch]


def _pipeline(shard_index: int, shard_count: int, batch_size: int) -> Any:
    dataset = grain.MapDataset.source(InMemorySource([{"row": i} for i in range(ROWS)], source_id="redeal-rows-v1"))
    return training_batches(
        dataset,
        shard_options=grain.sharding.ShardOptions(shard_index, shard_count, drop_remainder=True),
        seed=3,
        shuffle=True,
        num_epochs=1,
        batch_size=batch_size,
        batch_fn=_rows,
    )


def _batches(shard_index: int, shard_count: int, batch_size: int) -> Any:
    return iter(_pipeline(shard_index, shard_count, batch_size))


def _state() -> dict[str, Any]:
    return {
        "model": {"w": jnp.arange(4.0)},
        "optimizer": {"count": jnp.asarray(2)},
        "rng": jax.random.key(0),
        "auxiliary": {"ema": jnp.ones(3)},
    }


def _targets() -> dict[str, Any]:
    return {f"{part}_target": abstract_restore_target(value) for part, value in _state().items()}


def _manager(root: pathlib.Path) -> TrainingCheckpointManager:
    return TrainingCheckpointManager(
        root,
        save_interval_steps=1,
        keep_last=2,
        keep_every=None,
        keep_best=None,
        best_mode=None,
        save_in_flight="wait",
        create=False,
    )


def _two_process_run() -> tuple[list[int], list[dict[str, Any]]]:
    """The rows two processes read in SAVED_STEPS steps, and their iterator states after them."""
    read: list[int] = []
    states = []
    for index in range(2):
        iterator = _batches(index, 2, OLD_BATCH)
        for _ in range(SAVED_STEPS):
            read.extend(next(iterator))
        states.append(iterator.get_state())
    return read, states


def _as_saved_by_two_processes(path: pathlib.Path, states: list[dict[str, Any]]) -> None:
    folder = path / "iterator"
    (folder / "process_0-of-1.json").unlink()
    for index, state in enumerate(states):
        (folder / f"process_{index}-of-2.json").write_text(json.dumps(state, indent=4))


@pytest.fixture
def two_process_checkpoint(tmp_path: pathlib.Path) -> tuple[pathlib.Path, list[int], list[dict[str, Any]]]:
    path = tmp_path / "run" / str(STEP)
    save_training_checkpoint(path, STEP, **_state(), iterator=_batches(0, 1, 2 * OLD_BATCH)).result()
    read, states = _two_process_run()
    _as_saved_by_two_processes(path, states)
    return path, read, states


def test_redeal_resumes_a_two_process_checkpoint_in_one_process_reading_every_row_once(two_process_checkpoint):
    path, read, _ = two_process_checkpoint
    iterator = _batches(0, 1, 2 * OLD_BATCH)
    restored = load_training_checkpoint(path, **_targets(), iterator=iterator, redeal=True)
    assert restored.step == STEP
    assert restored.iterator is iterator
    np.testing.assert_array_equal(restored.model["w"], np.arange(4.0))
    rest = [row for batch in iterator for row in batch]
    assert len(read) + len(rest) == ROWS
    assert sorted(read + rest) == list(range(ROWS))


def test_manager_restore_with_redeal_resumes_a_two_process_checkpoint_in_one_process(two_process_checkpoint):
    path, read, _ = two_process_checkpoint
    manager = _manager(path.parent)
    iterator = _batches(0, 1, 2 * OLD_BATCH)
    restored = manager.restore(STEP, *_targets().values(), iterator, redeal=True)
    assert restored.step == STEP
    rest = [row for batch in iterator for row in batch]
    assert sorted(read + rest) == list(range(ROWS))


def test_a_checkpoint_of_another_process_count_is_refused_without_redeal_and_the_iterator_stays(
    two_process_checkpoint,
):
    path, _, _ = two_process_checkpoint
    iterator = _batches(0, 1, 2 * OLD_BATCH)
    first = next(iterator)
    with pytest.raises(ValueError, match=r"saved by 2 processes and this run has 1.*redeal=True") as caught:
        load_training_checkpoint(path, **_targets(), iterator=iterator)
    assert isinstance(caught.value, KeyError)  # tinax 0.2 let Orbax's NoEntryError (a KeyError) through.
    manager = _manager(path.parent)
    with pytest.raises(ValueError, match="redeal=True"):
        manager.restore(STEP, *_targets().values(), iterator)
    # Nothing moved the iterator: it continues after its own first batch.
    fresh = _batches(0, 1, 2 * OLD_BATCH)
    next(fresh)
    assert next(iterator) == next(fresh) != first


def test_redeal_on_the_saving_process_count_restores_the_saved_position(tmp_path: pathlib.Path):
    path = tmp_path / "checkpoint"
    saved = _batches(0, 1, 2 * OLD_BATCH)
    next(saved)
    save_training_checkpoint(path, STEP, **_state(), iterator=saved).result()
    iterator = _batches(0, 1, 2 * OLD_BATCH)
    load_training_checkpoint(path, **_targets(), iterator=iterator, redeal=True)
    assert list(iterator) == list(saved)


def test_redeal_refuses_a_checkpoint_missing_a_process_state(two_process_checkpoint):
    path, _, _ = two_process_checkpoint
    (path / "iterator" / "process_1-of-2.json").unlink()
    with pytest.raises(ValueError, match=r"lacks the iterator states of processes \[1\] of 2"):
        load_training_checkpoint(path, **_targets(), iterator=_batches(0, 1, 2 * OLD_BATCH), redeal=True)


def test_redeal_refuses_states_taken_at_different_steps(tmp_path: pathlib.Path):
    path = tmp_path / "checkpoint"
    save_training_checkpoint(path, STEP, **_state(), iterator=_batches(0, 1, 2 * OLD_BATCH)).result()
    _, states = _two_process_run()
    ahead = _batches(1, 2, OLD_BATCH)
    for _ in range(SAVED_STEPS + 1):
        next(ahead)
    _as_saved_by_two_processes(path, [states[0], ahead.get_state()])
    with pytest.raises(ValueError, match="could not re-deal"):
        load_training_checkpoint(path, **_targets(), iterator=_batches(0, 1, 2 * OLD_BATCH), redeal=True)


def test_redeal_needs_a_training_batches_iterator(two_process_checkpoint):
    path, _, _ = two_process_checkpoint
    plain = iter(grain.MapDataset.range(10).to_iter_dataset())
    with pytest.raises(ValueError, match="training_batches iterator"):
        load_training_checkpoint(path, **_targets(), iterator=plain, redeal=True)
    assert next(plain) == 0


@pytest.mark.parametrize("redeal", [1, "yes", None])
def test_redeal_must_be_a_bool(two_process_checkpoint, redeal):
    path, _, _ = two_process_checkpoint
    with pytest.raises(TypeError, match="redeal"):
        load_training_checkpoint(path, **_targets(), iterator=_batches(0, 1, 2 * OLD_BATCH), redeal=redeal)


@pytest.fixture
def parsed_flags() -> Iterator[None]:
    with absl_flags_parsed():
        yield


def test_redeal_restores_into_an_iterator_with_worker_processes(two_process_checkpoint, parsed_flags):
    path, read, _ = two_process_checkpoint
    pipeline = _pipeline(0, 1, 2 * OLD_BATCH).to_iter_dataset()
    with open_multiprocessing_iterator(pipeline, num_workers=2) as iterator:
        load_training_checkpoint(path, **_targets(), iterator=iterator, redeal=True)
        rest = [row for batch in iterator for row in batch]
    assert sorted(read + rest) == list(range(ROWS))
