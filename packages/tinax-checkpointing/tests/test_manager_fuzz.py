"""Generated runs of TrainingCheckpointManager over a root that others change too, invariants after every step.

A seeded generator draws a retention policy and a sequence of operations:
the manager's saves, waits, cleanups and restarts (cleanly, or dropped with a
save in flight), a second manager that tries to write meanwhile, and changes
made by hand under the root (a copy of a step, a step name linked to another
step or outside the root, a step folder holding a link, a step damaged after
its commit, an empty step folder, a leftover temporary folder). A model of
the root, written from the user guide's rules rather than from the manager's
code, says what must be there.

After every operation: the committed steps are exactly the model's, so the
policy's steps exist and nothing else survived its retention; the latest
committed step restores, with the values saved for it; the sentinel folder
next to the root is unchanged; and no temporary folder outlives the
operation, save the one of a save still in flight. A second test races two
managers in two processes on one root.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import random
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

SEED = 20261207
EXAMPLES = 8
OPERATIONS = 14
RACE_ROUNDS = 3
RACE_ATTEMPTS = 6
CHILD_SECONDS = 180
TMP = ".orbax-checkpoint-tmp"
PARTS = ("model", "optimizer", "rng", "auxiliary", "iterator")


def _rival_module() -> Any:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import manager_rival

    return manager_rival


def _parts(value: float) -> tuple[Any, Any, Any, Any, Any]:
    parts: tuple[Any, Any, Any, Any, Any] = _rival_module().parts(value)
    return parts


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
            state[str(path.relative_to(folder))] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
    return state


def _kept(policy: dict[str, Any], committed: list[int], metrics: dict[int, float]) -> set[int]:
    """The guide's retention rule: the newest keep_last, the multiples of keep_every, the keep_best best."""
    kept = set(sorted(committed)[-policy["keep_last"] :])
    if policy["keep_every"] is not None:
        kept |= {step for step in committed if step % policy["keep_every"] == 0}
    if policy["keep_best"] is not None:
        sign = 1.0 if policy["best_mode"] == "min" else -1.0
        # Ties go to the newer step.
        scored = sorted((step for step in committed if step in metrics), key=lambda step: (sign * metrics[step], -step))
        kept |= set(scored[: policy["keep_best"]])
    return kept


def _metric_file(root: Path) -> dict[int, float]:
    path = root / manager_module.METRICS_FILE
    return {int(key): value for key, value in json.loads(path.read_text()).items()} if path.exists() else {}


def _restore(manager: TrainingCheckpointManager, step: int) -> tuple[int, float]:
    """Restores ``step``; returns the step stored in it and the value its model holds."""
    model, optimizer, rng, _auxiliary, iterator = _parts(0.0)
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
    return restored.step, float(values[0])


def _make_sentinel(folder: Path) -> None:
    """A folder next to the root holding files and a complete checkpoint, which links may point into."""
    folder.mkdir()
    (folder / "notes.txt").write_text("must stay")
    save_training_checkpoint(folder / "checkpoint", 1000, *_parts(1000.0)).result()


def _policy(rng: random.Random) -> dict[str, Any]:
    keep_best = rng.choice([None, 1, 2])
    return {
        "save_interval_steps": 1,
        "keep_last": rng.randint(1, 3),
        "keep_every": rng.choice([None, 2, 3]),
        "keep_best": keep_best,
        "best_mode": None if keep_best is None else rng.choice(["min", "max"]),
        "save_in_flight": "wait",
        "create": True,
    }


def _damage(step: Path, rng: random.Random) -> None:
    """Damage of a committed step that its completeness check sees, without changing the step folder's own times."""
    kind = rng.choice(["pytree-metadata", "top-metadata", "iterator-state", "part"])
    if kind == "pytree-metadata":
        (step / rng.choice(["model", "optimizer", "rng"]) / "_METADATA").unlink()
    elif kind == "top-metadata":
        with (step / "_CHECKPOINT_METADATA").open("r+b") as handle:
            handle.write(b"[")
            handle.truncate(1)
    elif kind == "iterator-state":
        (step / "iterator" / "process_0-of-1.json").write_text("{")
    else:
        shutil.rmtree(step / rng.choice(PARTS))


class _Run:
    """One generated run: the manager, a model of what its root must hold, and the operations."""

    def __init__(self, case: Path, rng: random.Random, sentinel_template: Path) -> None:
        self.rng = rng
        self.root = case / "run"
        self.sentinel = case / "sentinel"
        shutil.copytree(sentinel_template, self.sentinel, symlinks=True)
        self.untouched = _tree(self.sentinel)
        self.policy = _policy(rng)
        self.manager = TrainingCheckpointManager(self.root, **self.policy)
        self.generation = 0
        self.rival: TrainingCheckpointManager | None = None
        # The model: committed step -> the step whose save it holds (a copy holds its source's).
        self.alive: dict[int, int] = {}
        self.metrics: dict[int, float] = {}
        self.in_flight: int | None = None
        self.response: Any = None
        self.newest = -1  # The manager's newest saved or restored step.
        self.used = -1  # Every step name used so far is at most this.
        self.torn: set[str] = set()
        self.temporary: set[str] = set()
        self.verified: Any = None
        self.log: list[str] = []

    # -- the model's rules

    def retire(self) -> None:
        """The in-flight save commits and retention runs, as the manager's wait() does."""
        if self.in_flight is None:
            return
        self.alive[self.in_flight] = self.in_flight
        self.in_flight = None
        committed = sorted(self.alive)
        kept = _kept(self.policy, committed, self.metrics)
        newest = committed[-1]
        for step in committed:
            if step not in kept and step < newest:
                del self.alive[step]
        if self.policy["keep_best"] is not None:
            self.metrics = {step: value for step, value in self.metrics.items() if step in kept or step > newest}

    def fresh_name(self) -> int:
        self.used += self.rng.randint(1, 2)
        return self.used

    # -- the manager's operations

    def op_save(self) -> None:
        self.retire()
        step = self.fresh_name()
        metric = None if self.policy["keep_best"] is None else float(self.rng.choice([0.5, 1.0, 2.0, 3.5]))
        self.response = self.manager.save(step, *_parts(float(step)), metric=metric)
        self.in_flight = step
        self.newest = step
        if metric is not None:
            self.metrics[step] = metric

    def op_save_again(self) -> None:
        """A save of a step that is not new: refused, and nothing under the root changes."""
        candidates = sorted(self.alive) + ([] if self.in_flight is None else [self.in_flight])
        if not candidates:
            return
        step = self.rng.choice(candidates)
        idle = self.in_flight is None
        before = _tree(self.root) if idle else None
        with pytest.raises(ValueError, match="newer than the newest saved or committed step") as caught:
            self.manager.save(step, *_parts(-1.0), metric=None if self.policy["keep_best"] is None else 0.0)
        assert not isinstance(caught.value, FileExistsError)
        self.retire()
        if before is not None:
            assert _tree(self.root) == before

    def op_save_onto_torn(self) -> None:
        """A save whose step name a torn entry holds: refused, and nothing under the root changes."""
        if not self.torn:
            return
        name = self.rng.choice(sorted(self.torn))
        idle = self.in_flight is None
        before = _tree(self.root) if idle else None
        self.retire()
        newer = int(name) > max(self.newest, max(self.alive, default=-1))
        kind: type[Exception] = FileExistsError if newer else ValueError
        with pytest.raises(kind) as caught:
            self.manager.save(int(name), *_parts(-1.0), metric=None if self.policy["keep_best"] is None else 0.0)
        assert isinstance(caught.value, ValueError)
        assert isinstance(caught.value, FileExistsError) == newer
        if before is not None:
            assert _tree(self.root) == before

    def op_wait(self) -> None:
        self.manager.wait()
        self.retire()

    def op_cleanup(self) -> None:
        removed = self.manager.scan(cleanup=True).removed
        self.retire()
        assert {entry.name for entry in removed} == self.torn | self.temporary
        self.torn.clear()
        self.temporary.clear()

    def op_restart(self) -> None:
        """A new manager on the root: after a clean wait, or with the old one dropped while its save was in flight."""
        if self.rng.random() < 0.5 or self.in_flight is None:
            self.manager.wait()
            self.retire()
        else:
            self.response.result()  # committed, but the dropped manager never ran its retention
            self.alive[self.in_flight] = self.in_flight
            self.in_flight = None
        del self.manager
        gc.collect()
        self.manager = TrainingCheckpointManager(self.root, **self.policy)
        self.generation += 1
        self.newest = -1

    def op_rival(self) -> None:
        """A second manager on the root: refused while a save is in flight, never refused to read."""
        if self.rival is None:
            self.rival = TrainingCheckpointManager(self.root, **self.policy)
        latest = self.rival.latest_committed_step()
        assert latest in {max(self.alive, default=None), self.in_flight}
        if self.in_flight is None:
            return
        metrics = _metric_file(self.root)
        metric = None if self.policy["keep_best"] is None else 0.0
        with pytest.raises(SaveInFlightError, match="another TrainingCheckpointManager"):
            self.rival.save(self.used + 1, *_parts(-1.0), metric=metric)
        with pytest.raises(SaveInFlightError, match="another TrainingCheckpointManager"):
            self.rival.scan(cleanup=True)
        assert _metric_file(self.root) == metrics

    # -- changes made by hand

    def op_copy(self) -> None:
        if not self.alive:
            return
        source = self.rng.choice(sorted(self.alive))
        name = self.fresh_name()
        shutil.copytree(self.root / str(source), self.root / str(name))
        self.alive[name] = self.alive[source]

    def op_link(self) -> None:
        name = self.fresh_name()
        targets: list[Path | str] = [self.sentinel / "checkpoint", self.root / "nowhere"]
        if self.alive:
            source = self.rng.choice(sorted(self.alive))
            targets += [self.root / str(source), str(source)]
        (self.root / str(name)).symlink_to(self.rng.choice(targets))
        self.torn.add(str(name))

    def op_inner_link(self) -> None:
        if not self.alive:
            return
        source = self.rng.choice(sorted(self.alive))
        name = self.fresh_name()
        shutil.copytree(self.root / str(source), self.root / str(name))
        part = self.rng.choice(PARTS)
        shutil.rmtree(self.root / str(name) / part)
        target = self.rng.choice([self.root / str(source) / part, self.sentinel / "checkpoint" / part])
        (self.root / str(name) / part).symlink_to(target)
        self.torn.add(str(name))

    def op_damage(self) -> None:
        if not self.alive:
            return
        step = self.rng.choice(sorted(self.alive))
        _damage(self.root / str(step), self.rng)
        del self.alive[step]
        self.torn.add(str(step))

    def op_empty(self) -> None:
        name = self.fresh_name()
        (self.root / str(name)).mkdir()
        self.torn.add(str(name))

    def op_temporary(self) -> None:
        name = f"{self.fresh_name()}{TMP}"
        (self.root / name).mkdir()
        (self.root / name / "_CHECKPOINT_METADATA").write_text("{}")
        self.temporary.add(name)

    # -- the invariants

    def check(self) -> None:
        assert _tree(self.sentinel) == self.untouched, "something outside the root changed"
        names = {entry.name for entry in self.root.iterdir()}
        allowed = self.temporary | (set() if self.in_flight is None else {f"{self.in_flight}{TMP}"})
        assert {name for name in names if TMP in name} <= allowed, "a temporary folder outlived an operation"
        scan = self.manager.scan(cleanup=False)
        committed = set(scan.committed)
        if self.in_flight is None:
            assert committed == set(self.alive)
        else:
            assert committed - {self.in_flight} == set(self.alive)
        assert {entry.name for entry in scan.torn} == self.torn
        assert scan.unrelated == ()
        assert _metric_file(self.root) == self.metrics
        latest = self.manager.latest_committed_step()
        if self.in_flight is None:
            assert latest == max(self.alive, default=None)
        else:
            assert latest in {max(self.alive, default=None), self.in_flight}
        if latest is None:
            return
        # The same bytes restore alike: a restore is repeated only once the step, its folder or the manager changed.
        key = (latest, self.generation, _tree(self.root / str(latest)))
        if key != self.verified:
            expected = self.alive.get(latest, latest)
            assert _restore(self.manager, latest) == (expected, float(expected))
            self.newest = max(self.newest, latest)
            self.verified = key

    def run(self, operations: int) -> None:
        choices: list[tuple[Callable[[], None], int]] = [
            (self.op_save, 6),
            (self.op_wait, 3),
            (self.op_save_again, 1),
            (self.op_save_onto_torn, 1),
            (self.op_cleanup, 1),
            (self.op_restart, 1),
            (self.op_rival, 1),
            (self.op_copy, 2),
            (self.op_link, 1),
            (self.op_inner_link, 1),
            (self.op_damage, 2),
            (self.op_empty, 1),
            (self.op_temporary, 1),
        ]
        operations_list = [operation for operation, _ in choices]
        weights = [weight for _, weight in choices]
        self.check()
        for _ in range(operations):
            operation = self.rng.choices(operations_list, weights)[0]
            self.log.append(operation.__name__)
            operation()
            self.check()
        self.op_wait()
        self.log.append("op_wait")
        self.check()


@pytest.fixture(scope="module")
def sentinel_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("template") / "sentinel"
    _make_sentinel(folder)
    return folder


@pytest.mark.parametrize("example", range(EXAMPLES))
def test_any_sequence_of_operations_over_a_root_changed_by_hand_keeps_the_managers_invariants(
    tmp_path, sentinel_template, example
):
    rng = random.Random(SEED + example)
    case = tmp_path / "case"
    case.mkdir()
    run = _Run(case, rng, sentinel_template)
    try:
        run.run(OPERATIONS)
    except BaseException as error:
        error.add_note(f"seed {SEED + example}, policy {run.policy}, operations {run.log}")
        raise


def test_two_managers_in_two_processes_racing_on_one_root_fail_only_as_documented_and_keep_the_invariants(
    tmp_path, sentinel_template
):
    rival_module = _rival_module()
    options = rival_module.manager_options()
    root = tmp_path / "run"
    sentinel = tmp_path / "sentinel"
    shutil.copytree(sentinel_template, sentinel, symlinks=True)
    untouched = _tree(sentinel)
    manager = TrainingCheckpointManager(root, **options)
    rival = rival_module.RivalProcess(root, cpu_child_environment(TEST_DEVICE_COUNT), CHILD_SECONDS)

    def outside_untouched() -> None:
        assert _tree(sentinel) == untouched

    outcomes: list[dict[str, Any]] = []
    try:
        for round_index in range(RACE_ROUNDS):
            rival.send({"op": "race", "seed": SEED + round_index, "attempts": RACE_ATTEMPTS})
            outcomes += rival_module.race(manager, SEED + 1000 + round_index, RACE_ATTEMPTS, outside_untouched)
            answer = rival.read()
            assert answer["outcome"] == "ok", answer
            outcomes += answer["value"]
    finally:
        last = rival.close()
    assert last == {"outcome": "ok", "value": None}
    assert rival.child.returncode == 0
    unexpected = [outcome for outcome in outcomes if outcome["outcome"] not in ("ok", "in-flight", "not-newer")]
    assert unexpected == []
    manager.wait()

    # Whichever manager committed last ran the last retention, over every step either of them saved.
    outside_untouched()
    assert not any(TMP in entry.name for entry in root.iterdir())
    scan = manager.scan(cleanup=False)
    assert scan.torn == ()
    assert scan.unrelated == ()
    committed = list(scan.committed)
    assert committed, outcomes
    assert set(committed) == _kept(options, committed, _metric_file(root))
    latest = manager.latest_committed_step()
    assert latest == committed[-1]
    assert _restore(manager, latest) == (latest, float(latest))
