"""What saves and loads of checkpoints log: one INFO line each, with bytes and seconds, and nothing by default."""

from __future__ import annotations

import logging
import pathlib

import grain
import jax
import jax.numpy as jnp
import pytest

from tinax._core.logs import tree_nbytes
from tinax.checkpointing import (
    abstract_restore_target,
    load_checkpointables,
    load_training_checkpoint,
    save_checkpointables,
    save_training_checkpoint,
)
from tinax_testing import import_side_effects


def _tinax_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name.startswith("tinax")]


def _only_info(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    records = _tinax_records(caplog)
    assert all(record.name == "tinax.checkpointing" and record.levelno == logging.INFO for record in records)
    return records


def _assert_logged(record: logging.LogRecord, start: str, path: pathlib.Path, nbytes: int) -> None:
    message = record.getMessage()
    assert message.startswith(f"{start} {str(path)!r}: {nbytes} bytes"), message
    assert " in " in message
    assert record.tinax_bytes == nbytes
    assert record.tinax_path == str(path)
    assert record.tinax_seconds >= 0


def _iterator() -> grain.DatasetIterator:
    iterator = iter(grain.MapDataset.range(10).to_iter_dataset())
    next(iterator)
    return iterator


def _training_state() -> tuple[dict[str, jax.Array], dict[str, jax.Array], jax.Array]:
    return {"w": jnp.arange(64.0)}, {"count": jnp.asarray(1)}, jax.random.key(0)


def test_a_save_logs_one_info_line_with_the_checkpoint_bytes_once_committed(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tinax")
    destination = tmp_path / "step-1"
    response = save_checkpointables(destination, {"params": {"w": jnp.ones(256)}, "extra": {"b": jnp.zeros(2)}})
    response.result()
    # Logged before result() returns, so the line is there as soon as the save is known committed.
    [record] = _only_info(caplog)
    _assert_logged(record, "saved checkpointables ['extra', 'params'] to", destination, tree_nbytes(destination))
    assert "the call returned after " in record.getMessage()


def test_a_load_logs_one_info_line_with_the_bytes_of_the_loaded_checkpointables(tmp_path, caplog):
    params = {"w": jnp.ones(256)}
    save_checkpointables(tmp_path / "step-1", {"params": params, "extra": {"b": jnp.zeros(2)}}).result()
    caplog.set_level(logging.INFO, logger="tinax")
    load_checkpointables(tmp_path / "step-1", {"params": abstract_restore_target(params)})
    [record] = _only_info(caplog)
    source = tmp_path / "step-1"
    _assert_logged(record, "loaded checkpointables ['params'] from", source, tree_nbytes(source / "params"))


def test_a_training_checkpoint_logs_one_line_for_its_save_and_one_for_its_load(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tinax")
    model, optimizer, key = _training_state()
    destination = tmp_path / "7"
    save_training_checkpoint(destination, 7, model, optimizer, key, None, _iterator()).result()
    targets = [abstract_restore_target(state) for state in (model, optimizer, key)]
    load_training_checkpoint(destination, *targets, None, _iterator())
    saved, loaded = _only_info(caplog)
    _assert_logged(saved, "saved training checkpoint of step 7 to", destination, tree_nbytes(destination))
    # Every part is loaded, so the bytes are those of the whole checkpoint but its top-level metadata.
    parts = sum(tree_nbytes(folder) for folder in destination.iterdir() if folder.is_dir())
    _assert_logged(loaded, "loaded training checkpoint of step 7 from", destination, parts)


def test_nothing_is_logged_at_the_default_levels(tmp_path, caplog):
    model, optimizer, key = _training_state()
    save_training_checkpoint(tmp_path / "1", 1, model, optimizer, key, None, _iterator()).result()
    targets = [abstract_restore_target(state) for state in (model, optimizer, key)]
    load_training_checkpoint(tmp_path / "1", *targets, None, _iterator())
    save_checkpointables(tmp_path / "2", {"params": model}).result()
    load_checkpointables(tmp_path / "2", {"params": abstract_restore_target(model)})
    assert _tinax_records(caplog) == []


def test_a_refused_save_or_load_logs_nothing(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tinax")
    (tmp_path / "taken").mkdir()
    with pytest.raises(FileExistsError):
        save_checkpointables(tmp_path / "taken", {"params": {"w": jnp.ones(2)}})
    with pytest.raises(FileNotFoundError):
        load_checkpointables(tmp_path / "missing", {"params": abstract_restore_target({"w": jnp.ones(2)})})
    assert _tinax_records(caplog) == []


def test_importing_tinax_checkpointing_imports_no_bar_library():
    assert import_side_effects("tinax.checkpointing", watched=("tqdm", "rich"))["integrations"] == []


def test_retention_logs_one_info_line_per_deleted_step_with_its_bytes(tmp_path, caplog):
    from tinax.checkpointing import TrainingCheckpointManager

    manager = TrainingCheckpointManager(
        tmp_path / "run",
        save_interval_steps=1,
        keep_last=1,
        keep_every=None,
        keep_best=None,
        best_mode=None,
        save_in_flight="wait",
        create=True,
    )
    model, optimizer, key = _training_state()
    manager.save(1, model, optimizer, key, None, _iterator())
    manager.wait()
    step_bytes = tree_nbytes(tmp_path / "run" / "1")
    caplog.set_level(logging.INFO, logger="tinax")
    manager.save(2, model, optimizer, key, None, _iterator())
    manager.wait()
    deleted = [record for record in _only_info(caplog) if record.tinax_action == "deleted"]
    assert len(deleted) == 1
    _assert_logged(deleted[0], "deleted step 1 (retention) at", tmp_path / "run" / "1", step_bytes)
    assert not (tmp_path / "run" / "1").exists()
