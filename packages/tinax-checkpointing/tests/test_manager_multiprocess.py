"""TrainingCheckpointManager in 2 processes of 4 CPU devices each, joined as one JAX runtime.

The ``_body_*`` functions run inside the child processes (the harness loads
this file there by path) and drive the training job of ``manager_job.py`` or
the manager directly; the tests compare what the children return. The pytest
process never starts the distributed runtime.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import grain
import jax
import pytest

from tinax.checkpointing import TrainingCheckpointManager, abstract_restore_target, load_training_checkpoint
from tinax_testing import run_processes

# Each test here starts several JAX processes: longer than the suite's default limit.
pytestmark = pytest.mark.timeout(600)

TIMEOUT = 300
TOTAL = 8


def _job() -> Any:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import manager_job

    return manager_job


# ---------------------------------------------------------------------------
# Bodies run in the children.


def _body_train_and_agree(root: str) -> dict[str, Any]:
    import jax

    from tinax.checkpointing import TrainingCheckpointManager

    result = _job().run_job(root, TOTAL, 2, 2, None, False, None, 0.0, False)
    fresh = TrainingCheckpointManager(
        root,
        save_interval_steps=2,
        keep_last=2,
        keep_every=None,
        keep_best=None,
        best_mode=None,
        save_in_flight="refuse",
        create=False,
    )
    return {
        "process": jax.process_index(),
        "committed": result["committed"],
        "latest": fresh.latest_committed_step(),
        "scan": [list(fresh.scan(cleanup=False).committed)],
    }


def _body_disagree(roots: list[str]) -> dict[str, Any]:
    import jax

    from tinax.checkpointing import StepDisagreementError, TrainingCheckpointManager

    manager = TrainingCheckpointManager(
        roots[jax.process_index()],
        save_interval_steps=1,
        keep_last=1,
        keep_every=None,
        keep_best=None,
        best_mode=None,
        save_in_flight="wait",
        create=False,
    )
    try:
        latest = manager.latest_committed_step()
    except StepDisagreementError as error:
        return {"process": jax.process_index(), "error": type(error).__name__, "message": str(error)}
    return {"process": jax.process_index(), "latest": latest}


def _body_preempt(reference_root: str, root: str) -> dict[str, Any]:
    import jax

    job = _job()
    reference = job.run_job(reference_root, TOTAL, 100, 2, None, False, None, 0.0, False)
    # Process 0 is signalled before the training step of iteration 2; process 1 only after that
    # iteration's should_save, so process 1 learns of the preemption from process 0 first.
    late = jax.process_index() == 1
    preempted = job.run_job(root, TOTAL, 100, 2, None, True, 2, 0.0, False, signal_late=late)
    return {"process": jax.process_index(), "reference": reference, "preempted": preempted}


def _body_resume(root: str) -> dict[str, Any]:
    import jax

    resumed = _job().run_job(root, TOTAL, 100, 2, None, False, None, 0.0, False)
    return {"process": jax.process_index(), "resumed": resumed}


def _three_process_parts(scale: float) -> tuple[Any, ...]:
    """A model holding ``scale`` * [0..5] split over 3 processes, and an iterator of this process."""
    import grain
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    devices = sorted(jax.devices(), key=lambda device: (device.process_index, device.id))
    mesh = jax.make_mesh((3,), ("data",), devices=devices)
    values = np.arange(6.0, dtype=np.float32) * scale
    weights = jax.make_array_from_callback(
        values.shape, NamedSharding(mesh, PartitionSpec("data")), lambda index: values[index]
    )
    key = jax.jit(lambda: jax.random.key(7), out_shardings=NamedSharding(mesh, PartitionSpec()))()
    iterator = iter(grain.MapDataset.range(30).to_iter_dataset())
    return {"w": weights}, {"m": weights}, key, {"seen": scale}, iterator


def _three_process_manager(root: str) -> Any:
    from tinax.checkpointing import TrainingCheckpointManager

    return TrainingCheckpointManager(
        root,
        save_interval_steps=1,
        keep_last=5,
        keep_every=None,
        keep_best=None,
        best_mode=None,
        save_in_flight="wait",
        create=True,
    )


def _body_save_two_steps_on_three_processes(root: str) -> dict[str, Any]:
    import jax

    manager = _three_process_manager(root)
    model, optimizer, key, auxiliary, iterator = _three_process_parts(1.0)
    for step in (1, 2):
        next(iterator)
        manager.save(step, model, optimizer, key, auxiliary, iterator)
    manager.wait()
    return {"process": jax.process_index(), "committed": list(manager.committed_steps())}


def _body_resume_on_three_processes(root: str) -> dict[str, Any]:
    import jax
    import numpy as np

    from tinax.checkpointing import abstract_restore_target

    manager = _three_process_manager(root)
    latest = manager.latest_committed_step()
    model, optimizer, key, auxiliary, iterator = _three_process_parts(0.0)
    targets = [abstract_restore_target(part) for part in (model, optimizer, key, auxiliary)]
    try:
        manager.restore(2, *targets, iterator)
    except FileNotFoundError as error:
        refused = str(error)
    restored = manager.restore(latest, *targets, iterator)
    shard = restored.model["w"].addressable_shards[0]
    return {
        "process": jax.process_index(),
        "latest": latest,
        "refused": refused,
        "step": restored.step,
        "values": np.asarray(shard.data).tolist(),
        "expected": np.arange(6.0)[shard.index].tolist(),
        "next": int(next(iterator)),
    }


# ---------------------------------------------------------------------------
# The tests.


def _run(body: Any, *args: Any) -> list[Any]:
    return run_processes(body, num_processes=2, devices_per_process=4, args=list(args), timeout=TIMEOUT)


def test_both_processes_agree_on_the_committed_steps(tmp_path):
    results = _run(_body_train_and_agree, str(tmp_path / "run"))
    assert [result["process"] for result in results] == [0, 1]
    for result in results:
        assert result["committed"] == [6, 8]
        assert result["latest"] == 8
        assert result["scan"] == [[6, 8]]
    # Only process 0 locks the root while it writes: one lock file, next to the steps.
    assert sorted(entry.name for entry in (tmp_path / "run").iterdir()) == ["6", "8", "tinax-manager.lock"]


def test_a_process_that_sees_other_steps_makes_both_fail(tmp_path):
    # Built by a single-process run of the job; process 1 is then shown a root with one more committed step.
    seen_by_zero = tmp_path / "zero"
    _run_single(seen_by_zero)
    seen_by_one = tmp_path / "one"
    shutil.copytree(seen_by_zero, seen_by_one)
    shutil.copytree(seen_by_one / "4", seen_by_one / "5")
    results = _run(_body_disagree, [str(seen_by_zero), str(seen_by_one)])
    for result in results:
        assert result.get("error") == "StepDisagreementError", result
        assert "process(es) [1] see a different set than process 0" in result["message"]
        assert (
            "process 0 sees 2 committed steps, newest 4; process 1 sees 3 committed steps, newest 5"
            in (result["message"])
        )


def _run_single(root: Path) -> None:
    import subprocess

    from tinax_testing import cpu_child_environment

    job = Path(__file__).with_name("manager_job.py")
    completed = subprocess.run(
        [sys.executable, str(job), "--root", str(root), "--total", "4", "--interval", "2"],
        capture_output=True,
        text=True,
        env=cpu_child_environment(8),
        timeout=TIMEOUT,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr


def test_both_processes_are_preempted_save_the_same_step_and_resume_bit_identically(tmp_path):
    root = tmp_path / "run"
    first = _run(_body_preempt, str(tmp_path / "reference"), str(root))
    for result in first:
        preempted = result["preempted"]
        assert preempted["preempted"] is True
        assert preempted["handler_restored"] is True
        # Both stop after step 3, the first should_save after process 0's signal, and commit it.
        assert preempted["stopped"] == 3
        assert preempted["committed"] == [3]
    second = _run(_body_resume, str(root))
    for before, after in zip(first, second, strict=True):
        reference, resumed = before["reference"], after["resumed"]
        assert resumed["start"] == 3
        assert {**before["preempted"]["losses"], **resumed["losses"]} == reference["losses"]
        assert resumed["weights"] == reference["weights"]
        assert resumed["momentum"] == reference["momentum"]
        assert resumed["loss_sum"] == reference["loss_sum"]


def test_a_step_that_lost_one_process_iterator_state_is_not_committed_anywhere(tmp_path):
    root = tmp_path / "run"
    saved = run_processes(
        _body_save_two_steps_on_three_processes,
        num_processes=3,
        devices_per_process=1,
        args=[str(root)],
        timeout=TIMEOUT,
    )
    assert [result["committed"] for result in saved] == [[1, 2]] * 3
    assert sorted(path.name for path in (root / "2" / "iterator").iterdir()) == [
        f"process_{index}-of-3.json" for index in range(3)
    ]
    (root / "2" / "iterator" / "process_1-of-3.json").unlink()

    # This process: a manager skips step 2, and neither restore path loads anything from it.
    manager = TrainingCheckpointManager(
        root,
        save_interval_steps=1,
        keep_last=5,
        keep_every=None,
        keep_best=None,
        best_mode=None,
        save_in_flight="wait",
        create=False,
    )
    assert manager.latest_committed_step() == 1
    assert manager.committed_steps() == (1,)
    assert [entry.name for entry in manager.scan(cleanup=False).torn] == ["2"]
    targets = [
        abstract_restore_target({"w": jax.numpy.zeros(6)}),
        abstract_restore_target({"m": jax.numpy.zeros(6)}),
        abstract_restore_target(jax.random.key(0)),
        {"seen": 0.0},
    ]
    iterator = iter(grain.MapDataset.range(30).to_iter_dataset())
    with pytest.raises(FileNotFoundError, match=r"got 2; the committed steps are \[1\]"):
        manager.restore(2, *targets, iterator, redeal=True)
    with pytest.raises(ValueError, match=r"lacks the iterator states of processes \[1\] of 3 \(process_1-of-3\.json\)"):
        load_training_checkpoint(root / "2", *targets, iterator, redeal=True)
    assert next(iterator) == 0

    # Three processes again: all of them resume from step 1, and none restores step 2.
    resumed = run_processes(
        _body_resume_on_three_processes, num_processes=3, devices_per_process=1, args=[str(root)], timeout=TIMEOUT
    )
    assert [result["process"] for result in resumed] == [0, 1, 2]
    for result in resumed:
        assert result["latest"] == 1
        assert "the committed steps are [1]" in result["refused"]
        assert result["step"] == 1
        assert result["values"] == result["expected"]
        assert result["next"] == 1
