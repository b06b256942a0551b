"""TrainingCheckpointManager over roots that are not as it left them, and next to a second manager.

Each test states one promise of the manager: a refused save changes nothing
under the root; a step is only ever a real folder of its own (a link is never
committed, counted or deleted through); a step damaged after its commit stops
counting at once; a root that cannot be created is refused with the error the
other checkpoint functions give; and one manager writes into a root at a time,
in this process or another, while reading is never refused.
"""

from __future__ import annotations

import errno
import gc
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tinax._checkpointing._manager._step_manager as manager_module
from tinax.checkpointing import (
    SaveInFlightError,
    TrainingCheckpointManager,
    abstract_restore_target,
    save_training_checkpoint,
)
from tinax_testing import TEST_DEVICE_COUNT, cpu_child_environment

CHILD_SECONDS = 180  # Bounds a wait that only a hung child would make endless.
DELETING = ".orbax-checkpoint-tmp-tinax-deleting"


def _rival_module() -> Any:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import manager_rival

    return manager_rival


def _manager(root: Path, **overrides: Any) -> TrainingCheckpointManager:
    options: dict[str, Any] = {
        "save_interval_steps": 1,
        "keep_last": 100,
        "keep_every": None,
        "keep_best": None,
        "best_mode": None,
        "save_in_flight": "wait",
        "create": True,
    }
    options.update(overrides)
    return TrainingCheckpointManager(root, **options)


def _save(manager: TrainingCheckpointManager, step: int, metric: float | None = None) -> Any:
    return manager.save(step, *_rival_module().parts(float(step)), metric=metric)


def _restored_value(manager: TrainingCheckpointManager, step: int) -> float:
    """Restores ``step`` and returns the value its model holds (a save of step N holds N)."""
    model, optimizer, rng, _auxiliary, iterator = _rival_module().parts(0.0)
    restored = manager.restore(
        step,
        abstract_restore_target(model),
        abstract_restore_target(optimizer),
        abstract_restore_target(rng),
        {"value": 0.0},
        iterator,
    )
    values = np.asarray(restored.model["w"])
    assert np.all(values == values[0])
    return float(values[0])


def _tree(folder: Path) -> dict[str, Any]:
    """Every entry below ``folder`` with its kind, link target or content digest, and modification time."""
    state: dict[str, Any] = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        if path.is_symlink():
            state[str(path.relative_to(folder))] = ("link", os.readlink(path))
        elif path.is_dir():
            state[str(path.relative_to(folder))] = ("folder", info.st_mtime_ns)
        else:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            state[str(path.relative_to(folder))] = ("file", digest, info.st_mtime_ns)
    return state


def _names(root: Path) -> set[str]:
    return {entry.name for entry in root.iterdir()}


# ---------------------------------------------------------------------------
# A refused save changes nothing.


def test_a_committed_step_zero_is_refused_before_anything_under_the_root_changes(tmp_path):
    root = tmp_path / "run"
    policy = {"keep_last": 1, "keep_best": 1, "best_mode": "min"}
    first = _manager(root, **policy)
    _save(first, 0, metric=1.0)
    first.wait()
    before = _tree(root)
    fresh = _manager(root, **policy)
    with pytest.raises(ValueError, match="newer than the newest saved or committed step 0, got 0"):
        _save(fresh, 0, metric=99.0)
    assert _tree(root) == before
    # Step 0 is still the best step by its own metric, so retention keeps it.
    _save(fresh, 1, metric=5.0)
    _save(fresh, 2, metric=6.0)
    fresh.wait()
    assert fresh.committed_steps() == (0, 2)
    assert json.loads((root / manager_module.METRICS_FILE).read_text()) == {"0": 1.0, "2": 6.0}
    assert _restored_value(fresh, 0) == 0.0


def test_a_save_onto_a_step_name_taken_by_no_committed_step_is_refused_without_touching_the_root(tmp_path):
    root = tmp_path / "run"
    manager = _manager(root, keep_best=1, best_mode="max")
    _save(manager, 1, metric=1.0)
    manager.wait()
    (root / "5").mkdir()  # torn: an empty folder named like a step
    before = _tree(root)
    with pytest.raises(FileExistsError, match=r"scan\(cleanup=True\) removes it") as caught:
        _save(manager, 5, metric=2.0)
    assert isinstance(caught.value, ValueError)
    assert _tree(root) == before
    # A value the save refuses before it starts leaves the metric file holding what it held (the metric is
    # recorded before the save starts, so that a crash after the commit never loses it, and put back).
    metrics = (root / manager_module.METRICS_FILE).read_bytes()
    _model, optimizer, rng, auxiliary, iterator = _rival_module().parts(6.0)
    with pytest.raises(TypeError):
        manager.save(6, {"w": object()}, optimizer, rng, auxiliary, iterator, metric=3.0)
    assert (root / manager_module.METRICS_FILE).read_bytes() == metrics
    assert _names(root) == {"1", "5", manager_module.METRICS_FILE, manager_module.LOCK_FILE}
    assert manager.scan(cleanup=True).removed == (root / "5",)
    _save(manager, 5, metric=2.0)
    manager.wait()
    assert manager.committed_steps() == (1, 5)


def test_a_refused_first_save_leaves_no_metric_file_behind(tmp_path):
    root = tmp_path / "run"
    manager = _manager(root, keep_best=1, best_mode="min")
    _model, optimizer, rng, auxiliary, iterator = _rival_module().parts(1.0)
    with pytest.raises(TypeError):
        manager.save(1, {"w": object()}, optimizer, rng, auxiliary, iterator, metric=3.0)
    assert manager_module.METRICS_FILE not in _names(root)
    assert manager.committed_steps() == ()


# ---------------------------------------------------------------------------
# A step is a real folder of its own.


@pytest.mark.parametrize("keep_last", [1, 2])
@pytest.mark.parametrize("relative", [False, True], ids=["absolute-link", "relative-link"])
def test_a_step_name_linked_to_another_step_is_never_committed_counted_or_deleted_through(
    tmp_path, keep_last, relative
):
    root = tmp_path / "run"
    manager = _manager(root, keep_last=keep_last)
    _save(manager, 4)
    manager.wait()
    (root / "6").symlink_to("4" if relative else root / "4")
    assert manager.committed_steps() == (4,)
    assert [entry.name for entry in manager.scan(cleanup=False).torn] == ["6"]
    assert _manager(root).latest_committed_step() == 4
    _save(manager, 7)
    manager.wait()
    # keep_last=2 keeps 4 and 7; keep_last=1 deletes the real folder 4 (the policy's choice), never through the link.
    assert manager.committed_steps() == ((4, 7) if keep_last == 2 else (7,))
    assert (root / "6").is_symlink()
    assert not any(DELETING in name for name in _names(root))
    if keep_last == 2:
        assert _restored_value(manager, 4) == 4.0
    assert _restored_value(manager, 7) == 7.0
    # A cleanup removes the link itself, as a torn entry.
    assert manager.scan(cleanup=True).removed == (root / "6",)
    assert manager.committed_steps() == ((4, 7) if keep_last == 2 else (7,))


def test_a_step_name_linked_outside_the_root_is_never_committed_and_its_target_is_never_touched(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    save_training_checkpoint(elsewhere / "9", 9, *_rival_module().parts(9.0)).result()
    untouched = _tree(elsewhere)
    root = tmp_path / "run"
    manager = _manager(root, keep_last=1)
    _save(manager, 1)
    manager.wait()
    (root / "9").symlink_to(elsewhere / "9")
    assert manager.latest_committed_step() == 1
    for step in (10, 11):
        _save(manager, step)
        manager.wait()
    assert manager.committed_steps() == (11,)
    assert _tree(elsewhere) == untouched
    assert manager.scan(cleanup=True).removed == (root / "9",)
    assert _tree(elsewhere) == untouched
    assert _names(root) == {"11", manager_module.LOCK_FILE}


def test_a_step_folder_holding_a_link_into_another_step_is_torn(tmp_path):
    root = tmp_path / "run"
    manager = _manager(root, keep_last=1)
    _save(manager, 4)
    manager.wait()
    # A complete-looking step 6 whose model is step 4's: deleting step 4 would break it.
    shutil.copytree(root / "4", root / "6", symlinks=True)
    shutil.rmtree(root / "6" / "model")
    (root / "6" / "model").symlink_to(root / "4" / "model")
    assert manager.committed_steps() == (4,)
    assert [entry.name for entry in manager.scan(cleanup=False).torn] == ["6"]
    _save(manager, 7)
    manager.wait()
    assert manager.committed_steps() == (7,)
    manager.scan(cleanup=True)
    assert _names(root) == {"7", manager_module.LOCK_FILE}


def test_a_root_reached_through_a_link_still_commits_its_steps(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    manager = _manager(tmp_path / "alias" / "run", keep_last=1)
    _save(manager, 1)
    _save(manager, 2)
    manager.wait()
    assert manager.committed_steps() == (2,)
    assert _manager(tmp_path / "real" / "run").committed_steps() == (2,)


# ---------------------------------------------------------------------------
# A step damaged after its commit.


def _without_pytree_metadata(step: Path) -> None:
    (step / "model" / "_METADATA").unlink()


def _top_metadata_rewritten_in_place(step: Path) -> None:
    with (step / "_CHECKPOINT_METADATA").open("r+b") as handle:
        handle.write(b"{")
        handle.truncate(1)


def _iterator_state_rewritten_in_place(step: Path) -> None:
    (step / "iterator" / "process_0-of-1.json").write_text("not json")


def _iterator_state_deleted(step: Path) -> None:
    (step / "iterator" / "process_0-of-1.json").unlink()


def _without_a_part(step: Path) -> None:
    shutil.rmtree(step / "optimizer")


def _pytree_metadata_replaced(step: Path) -> None:
    (step / "model" / "replacement").write_text("[]")
    os.replace(step / "model" / "replacement", step / "model" / "_METADATA")


_DAMAGE: dict[str, Callable[[Path], None]] = {
    "pytree-metadata-deleted": _without_pytree_metadata,
    "top-metadata-rewritten-in-place": _top_metadata_rewritten_in_place,
    "iterator-state-rewritten-in-place": _iterator_state_rewritten_in_place,
    "iterator-state-deleted": _iterator_state_deleted,
    "part-deleted": _without_a_part,
    "pytree-metadata-replaced": _pytree_metadata_replaced,
}


@pytest.mark.parametrize("damage", sorted(_DAMAGE))
def test_a_step_damaged_after_commit_stops_counting_for_the_same_manager_and_latest_always_restores(tmp_path, damage):
    root = tmp_path / "run"
    manager = _manager(root)
    for step in (1, 2):
        _save(manager, step)
    manager.wait()
    assert manager.latest_committed_step() == 2  # seen complete once, so its verdict is cached
    _DAMAGE[damage](root / "2")
    assert manager.latest_committed_step() == 1
    assert manager.committed_steps() == _manager(root).committed_steps() == (1,)
    assert [entry.name for entry in manager.scan(cleanup=False).torn] == ["2"]
    assert _restored_value(manager, manager.latest_committed_step()) == 1.0
    with pytest.raises(FileNotFoundError, match="committed steps are \\[1\\]"):
        _restored_value(manager, 2)


def test_a_step_that_lost_its_iterator_state_is_torn_left_by_retention_and_removed_by_cleanup(tmp_path):
    root = tmp_path / "run"
    manager = _manager(root, keep_last=2)
    for step in (1, 2, 3):
        _save(manager, step)
    manager.wait()
    assert manager.committed_steps() == (2, 3)
    _iterator_state_deleted(root / "3")
    fresh = _manager(root, keep_last=2)
    assert manager.latest_committed_step() == fresh.latest_committed_step() == 2
    with pytest.raises(FileNotFoundError, match="committed steps are \\[2\\]"):
        _restored_value(fresh, 3)
    # A manager that resumed from step 2 cannot save over the torn step: only a cleanup removes it.
    with pytest.raises(FileExistsError, match="scan\\(cleanup=True\\) removes it"):
        _save(fresh, 3)
    # Saving goes on after the newest step; retention counts committed steps only, so it keeps step 2 next to 4
    # and leaves the torn step 3 alone.
    _save(manager, 4)
    manager.wait()
    assert manager.committed_steps() == (2, 4)
    assert _names(root) >= {"2", "3", "4"}
    assert [entry.name for entry in fresh.scan(cleanup=True).removed] == ["3"]
    assert _restored_value(fresh, fresh.latest_committed_step()) == 4.0


# ---------------------------------------------------------------------------
# A root that cannot be created.


@pytest.mark.parametrize("below", ["steps", "runs/a/steps"])
def test_a_root_below_a_regular_file_is_refused_as_a_value_error_that_is_also_a_not_a_directory_error(tmp_path, below):
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="root .* cannot be created as a folder") as caught:
        _manager(tmp_path / "file" / below)
    assert isinstance(caught.value, ValueError)
    assert caught.value.errno == errno.ENOTDIR
    assert isinstance(caught.value.__cause__, NotADirectoryError)
    assert (tmp_path / "file").read_text() == "x"
    assert _names(tmp_path) == {"file"}


# ---------------------------------------------------------------------------
# One manager writes into a root at a time.


def test_a_second_manager_on_the_same_root_is_refused_while_the_first_writes_and_may_write_after(tmp_path):
    root = tmp_path / "run"
    first = _manager(root, keep_last=1)
    second = _manager(root, keep_last=1)
    _save(first, 1)  # in flight: the root is the first manager's until its wait()
    with pytest.raises(SaveInFlightError, match="another TrainingCheckpointManager is writing into this root"):
        _save(second, 2)
    with pytest.raises(SaveInFlightError, match="cannot clean up"):
        second.scan(cleanup=True)
    first.wait()
    # Reading was never refused, and now the second may write.
    assert second.latest_committed_step() == 1
    assert _restored_value(second, 1) == 1.0
    _save(second, 2)
    with pytest.raises(SaveInFlightError, match="cannot save step 3"):
        _save(first, 3)
    second.wait()
    assert first.committed_steps() == (2,)
    with pytest.raises(ValueError, match="newer than the newest saved or committed step 2"):
        _save(first, 2)


def test_a_manager_dropped_with_a_save_in_flight_no_longer_holds_the_root(tmp_path):
    root = tmp_path / "run"
    first = _manager(root)
    response = _save(first, 1)
    second = _manager(root)
    with pytest.raises(SaveInFlightError):
        _save(second, 2)
    response.result()
    del first
    gc.collect()
    _save(second, 2)
    second.wait()
    assert second.committed_steps() == (1, 2)


def _start_rival(root: Path) -> Any:
    return _rival_module().RivalProcess(root, cpu_child_environment(TEST_DEVICE_COUNT), CHILD_SECONDS)


def test_a_manager_in_another_process_is_refused_while_this_one_writes_and_the_other_way_round(tmp_path):
    root = tmp_path / "run"
    options = _rival_module().manager_options()
    manager = TrainingCheckpointManager(root, **options)
    rival = _start_rival(root)
    try:
        _save(manager, 1, metric=1.0)  # held in flight until wait()
        assert rival.ask({"op": "save", "step": 2, "metric": 0.5})["outcome"] == "in-flight"
        assert rival.ask({"op": "cleanup"})["outcome"] == "in-flight"
        manager.wait()
        assert rival.ask({"op": "latest"}) == {"outcome": "ok", "value": 1}
        assert rival.ask({"op": "save", "step": 2, "metric": 0.5}) == {"outcome": "ok", "value": 2}
        # The rival's save is in flight until its wait: now this process is refused, and may still read.
        with pytest.raises(SaveInFlightError, match="cannot save step 3"):
            _save(manager, 3, metric=0.1)
        with pytest.raises(SaveInFlightError, match="cannot clean up"):
            manager.scan(cleanup=True)
        assert manager.latest_committed_step() in (1, 2)
        assert _restored_value(manager, 1) == 1.0
        assert rival.ask({"op": "wait"}) == {"outcome": "ok", "value": None}
        _save(manager, 3, metric=0.1)
        manager.wait()
    finally:
        answer = rival.close()
    assert answer == {"outcome": "ok", "value": None}
    assert rival.child.returncode == 0
    # Both ran the same policy: keep_last=2 keeps 2 and 3, and 3 also has the lowest metric.
    assert manager.committed_steps() == (2, 3)
    assert _restored_value(manager, 3) == 3.0
