"""TrainingCheckpointManager in one process: schedule, committed steps, retention, one save in flight, preemption.

The crash and preemption tests run the training job of ``manager_job.py`` in
real child processes, kill them with real signals and judge only what is on
disk and what the children report, never how long anything took.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tinax._checkpointing._manager._step_manager as manager_module
from tinax.checkpointing import (
    CheckpointScan,
    SaveInFlightError,
    TrainingCheckpointManager,
    abstract_restore_target,
    save_checkpointables,
)
from tinax_testing import TEST_DEVICE_COUNT, cpu_child_environment

JOB = Path(__file__).with_name("manager_job.py")
SAFETY_SECONDS = 180  # Bounds a wait that only a hung child would make endless.
CRASH_TRIALS = 5
CRASH_SEED = 20261130


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


def _parts(value: float) -> tuple[Any, Any, Any, Any, Any]:
    iterator = iter(grain.MapDataset.range(8).repeat(None))
    next(iterator)
    return (
        {"w": jnp.full((4,), value, dtype=jnp.float32)},
        {"m": jnp.zeros((4,), dtype=jnp.float32)},
        jax.random.key(0),
        {"value": value},
        iterator,
    )


def _save(manager: TrainingCheckpointManager, step: int, metric: float | None = None) -> Any:
    return manager.save(step, *_parts(float(step)), metric=metric)


def _save_steps(manager: TrainingCheckpointManager, steps: list[int], metrics: dict[int, float] | None = None) -> None:
    for step in steps:
        _save(manager, step, None if metrics is None else metrics[step])
    manager.wait()


def _step_folders(root: Path) -> list[int]:
    return sorted(int(entry.name) for entry in root.iterdir() if entry.name.isdigit())


# ---------------------------------------------------------------------------
# Schedule and committed steps.


def test_should_save_follows_the_interval_and_never_repeats_a_saved_step(tmp_path):
    manager = _manager(tmp_path / "run", save_interval_steps=3)
    saved = []
    for step in range(1, 11):
        if manager.should_save(step):
            _save(manager, step)
            saved.append(step)
    manager.wait()
    assert saved == [3, 6, 9]
    assert manager.committed_steps() == (3, 6, 9)
    assert manager.latest_committed_step() == 9
    assert not manager.should_save(9)
    assert not manager.should_save(6)
    assert manager.should_save(12)
    assert not manager.should_save(np.int64(13))


def test_an_empty_root_has_no_committed_step(tmp_path):
    manager = _manager(tmp_path / "new" / "run")
    assert (tmp_path / "new" / "run").is_dir()
    assert manager.committed_steps() == ()
    assert manager.latest_committed_step() is None


def test_latest_step_ignores_torn_and_temporary_folders_and_stray_names(tmp_path):
    root = tmp_path / "run"
    manager = _manager(root)
    _save_steps(manager, [2, 4])
    # A newer step whose save never committed: a copy of step 4 without its metadata.
    shutil.copytree(root / "4", root / "6")
    (root / "6" / "_CHECKPOINT_METADATA").unlink()
    # A newer step folder holding only part of a checkpoint.
    (root / "7").mkdir()
    (root / "7" / "orbax.checkpoint").write_text("")
    # A save that was interrupted, and one being deleted.
    shutil.copytree(root / "4", root / "8.orbax-checkpoint-tmp")
    (root / "9.orbax-checkpoint-tmp-1234").mkdir()
    # Names that are no step: a file, a non-canonical number, a step-named file, a complete checkpoint elsewhere.
    (root / "notes.txt").write_text("not a checkpoint")
    shutil.copytree(root / "4", root / "010")
    (root / "12").write_text("a file named like a step")
    shutil.copytree(root / "4", root / "best")

    fresh = _manager(root)
    assert fresh.latest_committed_step() == 4
    assert fresh.committed_steps() == (2, 4)
    scan = fresh.scan(cleanup=False)
    assert isinstance(scan, CheckpointScan)
    assert scan.committed == (2, 4)
    assert {entry.name for entry in scan.torn} == {"6", "7", "12"}
    assert {entry.name for entry in scan.temporary} == {"8.orbax-checkpoint-tmp", "9.orbax-checkpoint-tmp-1234"}
    assert {entry.name for entry in scan.unrelated} == {"notes.txt", "010", "best"}
    assert scan.removed == ()
    assert (root / "6").exists()

    cleaned = fresh.scan(cleanup=True)
    assert {entry.name for entry in cleaned.removed} == {
        "6",
        "7",
        "12",
        "8.orbax-checkpoint-tmp",
        "9.orbax-checkpoint-tmp-1234",
    }
    # The manager's lock file is its own, like the metric file, and stays.
    assert sorted(entry.name for entry in root.iterdir()) == [
        "010",
        "2",
        "4",
        "best",
        "notes.txt",
        manager_module.LOCK_FILE,
    ]
    assert fresh.scan(cleanup=False).torn == ()
    # The next save goes after the newest committed step.
    _save(fresh, 5)
    fresh.wait()
    assert fresh.committed_steps() == (2, 4, 5)


def test_a_step_damaged_after_it_was_seen_complete_is_no_longer_committed(tmp_path):
    root = tmp_path / "run"
    manager = _manager(root)
    _save_steps(manager, [1, 2])
    assert manager.committed_steps() == (1, 2)
    shutil.rmtree(root / "2" / "model")
    assert manager.committed_steps() == (1,)


# ---------------------------------------------------------------------------
# Retention.


def test_keep_last_keeps_the_newest_steps(tmp_path):
    manager = _manager(tmp_path / "run", keep_last=2)
    _save_steps(manager, [1, 2, 3, 4, 5, 6])
    assert manager.committed_steps() == (5, 6)
    assert _step_folders(tmp_path / "run") == [5, 6]


def test_keep_every_also_keeps_every_mth_step(tmp_path):
    manager = _manager(tmp_path / "run", keep_last=1, keep_every=3)
    _save_steps(manager, [1, 2, 3, 4, 5, 6, 7, 8])
    assert manager.retained_steps() == (3, 6, 8)


def test_keep_best_also_keeps_the_best_steps_by_metric(tmp_path):
    metrics = {1: 0.5, 2: 0.1, 3: 0.9, 4: 0.3, 5: 0.7, 6: 0.8}
    lowest = _manager(tmp_path / "min", keep_last=1, keep_best=2, best_mode="min")
    _save_steps(lowest, list(metrics), metrics)
    assert lowest.retained_steps() == (2, 4, 6)
    highest = _manager(tmp_path / "max", keep_last=1, keep_best=2, best_mode="max")
    _save_steps(highest, list(metrics), metrics)
    assert highest.retained_steps() == (3, 6)
    # The metric of a deleted step is dropped; those of kept steps stay, for the next run's manager.
    stored = json.loads((tmp_path / "min" / manager_module.METRICS_FILE).read_text())
    assert stored == {"2": 0.1, "4": 0.3, "6": 0.8}
    resumed = _manager(tmp_path / "min", keep_last=1, keep_best=2, best_mode="min")
    _save_steps(resumed, [7, 8], {7: 0.2, 8: 0.95})
    assert resumed.retained_steps() == (2, 7, 8)


def test_the_policies_keep_their_union(tmp_path):
    metrics = {step: float(10 - step) for step in range(1, 11)}
    metrics[1] = -1.0  # The best, and neither recent nor a multiple.
    manager = _manager(tmp_path / "run", keep_last=2, keep_every=4, keep_best=1, best_mode="min")
    _save_steps(manager, list(metrics), metrics)
    assert manager.retained_steps() == (1, 4, 8, 9, 10)


def test_nothing_is_deleted_until_a_newer_save_has_committed(tmp_path, monkeypatch):
    root = tmp_path / "run"
    manager = _manager(root, keep_last=1)
    _save_steps(manager, [1])
    release = threading.Event()
    _delay_commits(monkeypatch, release)
    _save(manager, 2)
    # Step 2 is still in flight: step 1 is the only complete checkpoint and stays.
    assert manager.save_in_flight
    assert _step_folders(root) == [1]
    assert manager.committed_steps() == (1,)
    release.set()
    manager.wait()
    assert manager.committed_steps() == (2,)
    assert _step_folders(root) == [2]


def test_a_failed_save_deletes_nothing(tmp_path, monkeypatch):
    root = tmp_path / "run"
    manager = _manager(root, keep_last=1)
    _save_steps(manager, [1])

    class Failed:
        def result(self, timeout: float | None = None) -> None:
            raise RuntimeError("the disk is full")

    monkeypatch.setattr(manager_module, "save_training_checkpoint", lambda *args, **kwargs: Failed())
    _save(manager, 2)
    with pytest.raises(RuntimeError, match="the disk is full"):
        manager.wait()
    assert manager.committed_steps() == (1,)


class _DelayedResponse:
    """A real save whose completion is reported only once the test releases it."""

    def __init__(self, inner: Any, release: threading.Event) -> None:
        self._inner = inner
        self._release = release

    def result(self, timeout: float | None = None) -> None:
        if not self._release.wait(timeout):
            raise TimeoutError("held by the test")
        self._inner.result()


def _delay_commits(monkeypatch: pytest.MonkeyPatch, release: threading.Event) -> None:
    real = manager_module.save_training_checkpoint

    def delayed(*args: Any, **kwargs: Any) -> Any:
        return _DelayedResponse(real(*args, **kwargs), release)

    monkeypatch.setattr(manager_module, "save_training_checkpoint", delayed)


# ---------------------------------------------------------------------------
# One save in flight.


def test_a_second_save_is_refused_while_the_first_is_in_flight(tmp_path, monkeypatch):
    manager = _manager(tmp_path / "run", save_in_flight="refuse")
    release = threading.Event()
    _delay_commits(monkeypatch, release)
    _save(manager, 1)
    with pytest.raises(SaveInFlightError, match="save of step 1 is still in flight"):
        _save(manager, 2)
    assert isinstance(SaveInFlightError("x"), RuntimeError)
    release.set()
    manager.wait()
    _save(manager, 2)
    manager.wait()
    assert manager.committed_steps() == (1, 2)


def test_a_second_save_waits_for_the_first(tmp_path, monkeypatch):
    manager = _manager(tmp_path / "run", save_in_flight="wait")
    release = threading.Event()
    _delay_commits(monkeypatch, release)
    _save(manager, 1)
    order: list[str] = []

    def release_later() -> None:
        order.append("released")
        release.set()

    timer = threading.Timer(0.2, release_later)
    timer.start()
    _save(manager, 2)
    order.append("second save started")
    timer.join()
    assert order == ["released", "second save started"]
    manager.wait()
    assert manager.committed_steps() == (1, 2)


# ---------------------------------------------------------------------------
# Preemption, in this process.


def test_sigterm_under_the_guard_requests_a_save_and_the_handler_is_restored(tmp_path):
    received: list[int] = []

    def previous(signum: int, frame: Any) -> None:
        received.append(signum)

    before = signal.signal(signal.SIGTERM, previous)
    try:
        manager = _manager(tmp_path / "run", save_interval_steps=100)
        with manager.preemption_guard() as guarded:
            assert guarded is manager
            assert not manager.should_save(1)
            os.kill(os.getpid(), signal.SIGTERM)
            assert manager.should_save(2)
            assert manager.preemption_requested
            _save(manager, 2)
            # The save was waited for: the step is committed before save returns.
            assert not manager.save_in_flight
            assert manager.committed_steps() == (2,)
        assert signal.getsignal(signal.SIGTERM) is previous
        assert received == []
        with pytest.raises(KeyError), manager.preemption_guard():
            raise KeyError("the loop failed")
        assert signal.getsignal(signal.SIGTERM) is previous
        with (
            manager.preemption_guard(),
            pytest.raises(RuntimeError, match="already active"),
            manager.preemption_guard(),
        ):
            pass
        assert signal.getsignal(signal.SIGTERM) is previous
    finally:
        signal.signal(signal.SIGTERM, before)


def test_after_a_sigterm_a_save_waits_for_the_one_in_flight_even_when_the_policy_refuses(tmp_path, monkeypatch):
    manager = _manager(tmp_path / "run", save_interval_steps=100, save_in_flight="refuse")
    release = threading.Event()
    _delay_commits(monkeypatch, release)
    with manager.preemption_guard():
        manager.should_save(1)
        _save(manager, 1)
        os.kill(os.getpid(), signal.SIGTERM)
        assert manager.should_save(2)
        timer = threading.Timer(0.2, release.set)
        timer.start()
        _save(manager, 2)
        timer.join()
    assert not manager.save_in_flight
    assert manager.committed_steps() == (1, 2)


def test_the_guard_needs_the_main_thread(tmp_path):
    manager = _manager(tmp_path / "run")
    errors: list[BaseException] = []

    def enter() -> None:
        try:
            with manager.preemption_guard():
                pass
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    assert len(errors) == 1
    assert isinstance(errors[0], ValueError)
    assert "main thread" in str(errors[0])


# ---------------------------------------------------------------------------
# Errors.


@pytest.mark.parametrize(
    ("overrides", "kind", "match"),
    [
        ({"save_interval_steps": True}, TypeError, "save_interval_steps"),
        ({"save_interval_steps": 0}, ValueError, "save_interval_steps"),
        ({"keep_last": 0}, ValueError, "keep_last"),
        ({"keep_last": 1.0}, TypeError, "keep_last"),
        ({"keep_every": 0}, ValueError, "keep_every"),
        ({"keep_best": 2}, ValueError, "best_mode"),
        ({"best_mode": "min"}, ValueError, "best_mode"),
        ({"keep_best": 1, "best_mode": "lowest"}, ValueError, "best_mode"),
        ({"keep_best": 1, "best_mode": 1}, TypeError, "best_mode"),
        ({"save_in_flight": "queue"}, ValueError, "save_in_flight"),
        ({"save_in_flight": None}, TypeError, "save_in_flight"),
        ({"create": 1}, TypeError, "create"),
        ({"names": "model"}, TypeError, "names"),
    ],
)
def test_bad_arguments_follow_the_error_contract(tmp_path, overrides, kind, match):
    with pytest.raises(kind, match=match):
        _manager(tmp_path / "run", **overrides)


def test_a_missing_root_is_created_only_when_asked(tmp_path):
    with pytest.raises(FileNotFoundError, match="create=False"):
        _manager(tmp_path / "missing", create=False)
    assert not (tmp_path / "missing").exists()
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="root"):
        _manager(tmp_path / "file")
    with pytest.raises(TypeError, match="root"):
        _manager(3)  # type: ignore[arg-type]


def test_bad_steps_and_metrics_are_refused(tmp_path):
    manager = _manager(tmp_path / "run")
    with pytest.raises(TypeError, match="step"):
        manager.should_save(True)
    with pytest.raises(TypeError, match="step"):
        manager.should_save(1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="step"):
        manager.should_save(-1)
    _save_steps(manager, [5])
    with pytest.raises(ValueError, match="newer than the newest saved or committed step 5"):
        _save(manager, 5)
    with pytest.raises(ValueError, match="metric"):
        _save(manager, 6, metric=1.0)
    best = _manager(tmp_path / "best", keep_best=1, best_mode="max")
    with pytest.raises(ValueError, match="metric"):
        _save(best, 1)
    with pytest.raises(ValueError, match="metric"):
        best.save(1, *_parts(1.0), metric=float("nan"))
    with pytest.raises(TypeError, match="metric"):
        best.save(1, *_parts(1.0), metric="high")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cleanup"):
        manager.scan(cleanup=None)  # type: ignore[arg-type]
    model, optimizer, rng, _auxiliary, iterator = _parts(0.0)
    targets = (
        abstract_restore_target(model),
        abstract_restore_target(optimizer),
        abstract_restore_target(rng),
        {"value": 0.0},
        iterator,
    )
    with pytest.raises(FileNotFoundError, match="committed steps are \\[5\\]"):
        manager.restore(4, *targets)
    restored = manager.restore(5, *targets)
    assert restored.step == 5
    assert np.array_equal(np.asarray(restored.model["w"]), np.full((4,), 5.0, dtype=np.float32))


def test_a_restore_checks_the_step_once_when_the_manager_already_found_it_complete(tmp_path, monkeypatch):
    import tinax._checkpointing._training as training_module

    manager = _manager(tmp_path / "run")
    _save_steps(manager, [1, 2])  # Retention's scan found both complete.
    checks: list[Path] = []
    for module in (manager_module, training_module):
        check = module.require_complete_checkpoint
        monkeypatch.setattr(
            module,
            "require_complete_checkpoint",
            lambda source, *rest, check=check: checks.append(source) or check(source, *rest),
        )
    model, optimizer, rng, _auxiliary, iterator = _parts(0.0)
    targets = [abstract_restore_target(part) for part in (model, optimizer, rng)]
    assert manager.restore(2, *targets, {"value": 0.0}, iterator).step == 2
    assert checks == [tmp_path / "run" / "2"]


def test_the_folders_are_plain_training_checkpoints(tmp_path):
    """The manager adds nothing to the checkpoint format: each step folder is what save_training_checkpoint writes."""
    manager = _manager(tmp_path / "run")
    _save_steps(manager, [3])
    reference = tmp_path / "plain"
    from tinax.checkpointing import save_training_checkpoint

    save_training_checkpoint(reference, 3, *_parts(3.0)).result()
    assert sorted(entry.name for entry in (tmp_path / "run" / "3").iterdir()) == sorted(
        entry.name for entry in reference.iterdir()
    )
    save_checkpointables(tmp_path / "run" / "4", {"other": {"x": np.ones(2)}}).result()
    # A complete checkpoint of another kind is still a committed step; restoring it names what is missing.
    assert manager.committed_steps() == (3, 4)


# ---------------------------------------------------------------------------
# Real processes: SIGKILL during saves and retention, SIGTERM during training.


def _start_job(root: Path, *arguments: str) -> subprocess.Popen[str]:
    # stderr goes to a file: Orbax logs enough to fill a pipe nobody reads while the job runs.
    with (root.parent / f"{root.name}-stderr.txt").open("w") as errors:
        return subprocess.Popen(
            [sys.executable, str(JOB), "--root", str(root), "--report", *arguments],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env=cpu_child_environment(TEST_DEVICE_COUNT),
            start_new_session=True,
        )


def _stderr_of(root: Path) -> str:
    return (root.parent / f"{root.name}-stderr.txt").read_text()


def _read_events(child: subprocess.Popen[str], events: list[dict[str, Any]], arrived: threading.Condition) -> None:
    assert child.stdout is not None
    with child.stdout:
        for line in child.stdout:
            with arrived:
                events.append(json.loads(line))
                arrived.notify_all()


def _wait_for(events: list[dict[str, Any]], arrived: threading.Condition, key: str, child: Any) -> None:
    with arrived:
        found = arrived.wait_for(
            lambda: any(key in event for event in events) or child.poll() is not None, timeout=SAFETY_SECONDS
        )
    assert found, f"the job never reported {key!r}"
    assert any(key in event for event in events), f"the job exited before reporting {key!r}"


def _run_job(root: Path, *arguments: str) -> dict[str, Any]:
    completed = subprocess.run(
        [sys.executable, str(JOB), "--root", str(root), *arguments],
        capture_output=True,
        text=True,
        env=cpu_child_environment(TEST_DEVICE_COUNT),
        timeout=SAFETY_SECONDS,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    result: dict[str, Any] = json.loads(completed.stdout.splitlines()[-1])
    return result


@pytest.mark.parametrize("trial", range(CRASH_TRIALS))
def test_a_job_killed_at_any_moment_leaves_a_complete_checkpoint_to_resume_from(tmp_path, trial):
    delay = random.Random(CRASH_SEED + trial).uniform(0.0, 2.5)
    root = tmp_path / "run"
    child = _start_job(root, "--total", "1000", "--interval", "1", "--keep-last", "2", "--keep-every", "3")
    events: list[dict[str, Any]] = []
    arrived = threading.Condition()
    reader = threading.Thread(target=_read_events, args=(child, events, arrived), daemon=True)
    reader.start()
    try:
        _wait_for(events, arrived, "ready", child)
        time.sleep(delay)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        reader.join(SAFETY_SECONDS)
    committed_before_kill = [event["committed"] for event in events if "committed" in event]
    assert child.returncode == -signal.SIGKILL

    manager = _manager(root, keep_last=2, keep_every=3)
    committed = manager.committed_steps()
    if committed_before_kill:
        # Once a save has committed, a complete checkpoint always remains, and the newest one reported is there.
        assert committed, f"no committed step left after trial {trial} (seed {CRASH_SEED + trial}, {delay:.2f} s)"
        assert max(committed_before_kill) in committed
    if not committed:
        return
    manager.scan(cleanup=True)
    assert manager.scan(cleanup=False).temporary == ()
    latest = manager.latest_committed_step()
    assert latest == committed[-1]
    model, optimizer, rng, auxiliary, iterator = _job_targets()
    restored = manager.restore(latest, model, optimizer, rng, auxiliary, iterator)
    assert restored.step == latest
    assert np.isfinite(restored.auxiliary["loss_sum"])
    # The resumed manager saves the next step and applies its policy over what the crash left.
    manager.save(latest + 1, restored.model, restored.optimizer, restored.rng, restored.auxiliary, iterator)
    manager.wait()
    assert manager.latest_committed_step() == latest + 1


def _job_targets() -> tuple[Any, Any, Any, Any, Any]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("_tinax_manager_job", JOB)
    assert spec is not None
    assert spec.loader is not None
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    parts = job.build()
    return (
        {"w": abstract_restore_target(parts["weights"])},
        {"m": abstract_restore_target(parts["momentum"])},
        abstract_restore_target(parts["key"]),
        {"loss_sum": 0.0},
        parts["iterator"],
    )


def test_sigterm_to_a_training_process_saves_once_more_and_the_resume_is_bit_identical(tmp_path):
    total = 12
    root = tmp_path / "preempted"
    child = _start_job(root, "--total", str(total), "--interval", "5", "--guard", "--pause", "0.1")
    events: list[dict[str, Any]] = []
    arrived = threading.Condition()
    reader = threading.Thread(target=_read_events, args=(child, events, arrived), daemon=True)
    reader.start()
    try:
        with arrived:
            assert arrived.wait_for(
                lambda: any(event.get("done", 0) >= 6 for event in events) or child.poll() is not None,
                timeout=SAFETY_SECONDS,
            )
        child.send_signal(signal.SIGTERM)
        child.wait(SAFETY_SECONDS)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        reader.join(SAFETY_SECONDS)
    assert child.returncode == 0, _stderr_of(root)
    preempted = events[-1]
    assert preempted["preempted"] is True
    assert preempted["handler_restored"] is True
    stopped = preempted["stopped"]
    assert 6 <= stopped < total
    # The step it was at when the signal came is committed, next to the interval save at step 5.
    assert preempted["committed"] == [5, stopped]

    resumed = _run_job(root, "--total", str(total), "--interval", "5")
    reference = _run_job(tmp_path / "reference", "--total", str(total), "--interval", "100")
    assert resumed["start"] == stopped
    assert resumed["losses"] == {step: reference["losses"][step] for step in resumed["losses"]}
    assert {**preempted["losses"], **resumed["losses"]} == reference["losses"]
    assert resumed["weights"] == reference["weights"]
    assert resumed["momentum"] == reference["momentum"]
    assert resumed["loss_sum"] == reference["loss_sum"]
