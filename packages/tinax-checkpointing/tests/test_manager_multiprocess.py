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

import pytest

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
