"""Cost of tinax.checkpointing's checked save and load against the raw Orbax V1 calls.

Run from the repository root with ``hatch run bench:checkpointing``. Options:
``--repeats N`` (interleaved rounds), ``--size-mib N`` (state size),
``--seed N``, ``--directory PATH`` (where checkpoints are written; a fresh
temporary folder by default, removed at the end).

Comparisons, each in one run, on a state of four float32 arrays sharded over
a 4x2 mesh of 8 CPU devices, plus a PRNG key and a step:
  save_checkpointables(path, c).result()  vs  ocp.save_checkpointables_async(path, c).result()
  load_checkpointables(path, targets)     vs  ocp.load_checkpointables(path, targets)
Every save writes a fresh folder; creating its name and deleting it afterwards
are not timed. Both loads read the same checkpoint into the same targets.

TrainingCheckpointManager, on the same state as a training checkpoint (two
layers as the model, two as the optimizer, the key, an auxiliary step and a
Grain iterator):
  manager.should_save(step) when no save is due  vs  step % interval == 0
  manager.save(step, ...); manager.wait()       vs  save_training_checkpoint(path, ...).result()
  manager.restore(step, ...)                    vs  load_training_checkpoint(path, ...)
  manager.committed_steps() alone: the bookkeeping a save adds, twice per save
The manager keeps every step (no deletion is timed); each sample's step
folder is removed, untimed, after the sample, as the plain save's is.

Resharding, on the same state saved from a 2x4 mesh (goal: at most 1.2x):
  load_checkpointables into targets on a 4x2 mesh  vs  into targets on the saving 2x4 mesh
  load_checkpointables into NumPy targets          vs  into targets on the saving 2x4 mesh
``--only resharding`` runs these alone.

Restores against Orbax's one call, ``--only restores`` (goal at 1 and 8 MiB,
``--size-mib 1`` and ``--size-mib 8``: at most 1.15x). Each pair runs once per
round, the side that goes first flipping every round; the figure is the
median of the rounds' ratios:
  load_checkpointables(path, targets)  vs  ocp.load_checkpointables(path, targets)
  load_training_checkpoint(path, ...)  vs  ocp.load_checkpointables(path, the five parts' targets)
  manager.restore(step, ...)           vs  the same ocp.load_checkpointables call
The manager's root holds that one step, already checked by an earlier scan.
"""

from __future__ import annotations

import os

# Eight CPU devices, as in the test suites; must be set before JAX starts.
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["JAX_NUM_CPU_DEVICES"] = "8"

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grain
import jax
import numpy as np
import orbax.checkpoint.experimental.v1 as ocp
from _timing import report, run
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from tinax.checkpointing import (
    TrainingCheckpointManager,
    abstract_restore_target,
    load_checkpointables,
    load_training_checkpoint,
    save_checkpointables,
    save_training_checkpoint,
    validate_checkpointable_name,
)


def _state(size_mib: int) -> dict[str, Any]:
    mesh = jax.make_mesh((4, 2), ("rows", "cols"), axis_types=(AxisType.Explicit,) * 2, devices=jax.devices())
    rows = size_mib * 1024 * 1024 // (4 * 4 * 1024)
    rng = np.random.default_rng(0)
    arrays = {
        f"layer{index}": jax.device_put(
            rng.standard_normal((rows, 1024), dtype=np.float32), NamedSharding(mesh, PartitionSpec("rows", "cols"))
        )
        for index in range(4)
    }
    key = jax.device_put(jax.random.key(0), NamedSharding(mesh, PartitionSpec()))
    return {"params": arrays, "key": key, "step": 1000}


def _resharding_cases(state: dict[str, Any], scratch: Path, repeats: int, seed: int) -> list[float]:
    """Restores onto another mesh and into host NumPy against the restore onto the saving mesh; returns both ratios."""
    saving_mesh = jax.make_mesh((2, 4), ("rows", "cols"), axis_types=(AxisType.Explicit,) * 2, devices=jax.devices())
    spec = PartitionSpec("rows", "cols")
    on_saving_mesh = {
        **state,
        "params": {
            name: jax.device_put(array, NamedSharding(saving_mesh, spec)) for name, array in state["params"].items()
        },
    }
    path = scratch / "resharding"
    save_checkpointables(path, {"state": on_saving_mesh}).result()
    same = {"state": abstract_restore_target(on_saving_mesh)}
    del on_saving_mesh
    other = {"state": abstract_restore_target(state)}  # the same arrays on the 4x2 mesh
    host = {"state": {**other["state"], "params": dict.fromkeys(state["params"], np.ndarray)}}
    size = sum(array.nbytes for array in state["params"].values()) // (1024 * 1024)
    loads = run(
        {
            "load onto the saving 2x4 mesh": lambda: load_checkpointables(path, same),
            "load onto a 4x2 mesh": lambda: load_checkpointables(path, other),
            "load into host NumPy": lambda: load_checkpointables(path, host),
        },
        1,
        repeats,
        seed,
    )
    return report(
        f"Resharding restore of a {size} MiB checkpoint saved from a 2x4 mesh (one load per sample; goal <= 1.2x):",
        loads,
        [
            ("load onto a 4x2 mesh", "load onto the saving 2x4 mesh"),
            ("load into host NumPy", "load onto the saving 2x4 mesh"),
        ],
        unit="ms",
    )


def _time_fresh_saves(
    variants: dict[str, Callable[[Path], Any]], scratch: Path, repeats: int, seed: int
) -> dict[str, list[float]]:
    """Interleaved rounds like ``_timing.run``, with an untimed fresh path per save."""
    order = list(variants)
    rng = random.Random(seed)
    for name, save in variants.items():  # warm up: first-use set-up in both paths
        save(scratch / f"warm-up-{name}")
        shutil.rmtree(scratch / f"warm-up-{name}")
    samples: dict[str, list[float]] = {name: [] for name in order}
    for round_index in range(repeats):
        rng.shuffle(order)
        for name in order:
            path = scratch / f"{name}-{round_index}"
            start = time.perf_counter()
            variants[name](path)
            samples[name].append(time.perf_counter() - start)
            shutil.rmtree(path)
    return samples


def _manager(root: Path, interval: int) -> TrainingCheckpointManager:
    return TrainingCheckpointManager(
        root,
        save_interval_steps=interval,
        keep_last=1_000_000,
        keep_every=None,
        keep_best=None,
        best_mode=None,
        save_in_flight="wait",
        create=True,
    )


def _manager_cases(state: dict[str, Any], scratch: Path, repeats: int, seed: int) -> list[float]:
    """The manager against the plain training-checkpoint functions it wraps; returns the save and load ratios."""
    layers = state["params"]
    names = sorted(layers)
    model = {name: layers[name] for name in names[:2]}
    optimizer = {name: layers[name] for name in names[2:]}
    iterator = iter(grain.MapDataset.range(1000).shuffle(seed=0).repeat(None))
    parts = (model, optimizer, state["key"], {"step": state["step"]}, iterator)

    interval = 1_000_000
    idle = _manager(scratch / "idle", interval)
    steps = iter(range(1, 2**62))
    should_save = idle.should_save
    checks = run(
        {
            "manager.should_save": lambda: should_save(next(steps)),
            "step % interval == 0": lambda: next(steps) % interval == 0,
        },
        200_000,
        repeats,
        seed,
    )
    report(
        "should_save when no save is due, per call (goal < 1 us):",
        checks,
        [("manager.should_save", "step % interval == 0")],
        unit="us",
    )

    manager = _manager(scratch / "managed", 1)
    plain_root = scratch / "plain"
    plain_root.mkdir()
    counter = iter(range(1, 2**62))

    def managed_save() -> Path:
        step = next(counter)
        manager.save(step, *parts)
        manager.wait()
        return manager.root / str(step)

    def plain_save() -> Path:
        path = plain_root / str(next(counter))
        save_training_checkpoint(path, 1000, *parts).result()
        return path

    variants = {"manager.save + wait": managed_save, "save_training_checkpoint": plain_save}
    order = list(variants)
    rng = random.Random(seed)
    for save in variants.values():  # warm up
        shutil.rmtree(save())
    saves: dict[str, list[float]] = {name: [] for name in order}
    for _ in range(repeats):
        rng.shuffle(order)
        for name in order:
            start = time.perf_counter()
            written = variants[name]()
            saves[name].append(time.perf_counter() - start)
            shutil.rmtree(written)
    save_ratio = report(
        "Training checkpoint save then wait (one save per sample):",
        saves,
        [("manager.save + wait", "save_training_checkpoint")],
        unit="ms",
    )

    kept = next(counter)
    manager.save(kept, *parts)
    manager.wait()
    targets = (
        abstract_restore_target(model),
        abstract_restore_target(optimizer),
        abstract_restore_target(state["key"]),
        {"step": 0},
        iterator,
    )
    loads = run(
        {
            "manager.restore": lambda: manager.restore(kept, *targets),
            "load_training_checkpoint": lambda: load_training_checkpoint(manager.root / str(kept), *targets),
        },
        1,
        repeats,
        seed,
    )
    load_ratio = report(
        "Training checkpoint load (one load per sample):",
        loads,
        [("manager.restore", "load_training_checkpoint")],
        unit="ms",
    )
    small = _manager(scratch / "small", 1)
    tiny = ({"w": np.ones(4, np.float32)}, {"m": np.ones(4, np.float32)}, np.zeros(2, np.uint32), {}, iterator)
    for step in range(1, 4):
        small.save(step, *tiny)
    small.wait()
    scans = run({"manager.committed_steps()": small.committed_steps}, 100, repeats, seed)
    report(
        "The manager's own work per scan, a root of 3 committed steps already checked (two scans per save):",
        scans,
        [],
        unit="us",
    )
    return save_ratio + load_ratio


def _paired(
    pairs: dict[str, tuple[Callable[[], Any], Callable[[], Any]]], repeats: int
) -> dict[str, tuple[list[float], list[float]]]:
    """Each pair's seconds per round (ours, Orbax's), both timed once per round, the first side flipping every round."""
    for ours, orbax in pairs.values():  # warm up: first-use set-up on both sides
        ours()
        orbax()
    samples: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in pairs}
    for round_index in range(repeats):
        for name, sides in pairs.items():
            order = (0, 1) if round_index % 2 == 0 else (1, 0)
            for side in order:
                start = time.perf_counter()
                jax.block_until_ready(sides[side]())
                samples[name][side].append(time.perf_counter() - start)
    return samples


def _restore_cases(state: dict[str, Any], scratch: Path, repeats: int) -> dict[str, float]:
    """The three restores against Orbax's own load of the same folder; returns each median ratio."""
    layers = state["params"]
    names = sorted(layers)
    model = {name: layers[name] for name in names[:2]}
    optimizer = {name: layers[name] for name in names[2:]}
    iterator = iter(grain.MapDataset.range(1000).shuffle(seed=0).repeat(None))
    saved = scratch / "restores-checkpointables"
    save_checkpointables(saved, {"state": state}).result()
    targets = {"state": abstract_restore_target(state)}
    manager = _manager(scratch / "restores-root", 1)
    manager.save(1, model, optimizer, state["key"], {"step": state["step"]}, iterator)
    manager.wait()
    step = manager.root / "1"
    training = (
        abstract_restore_target(model),
        abstract_restore_target(optimizer),
        abstract_restore_target(state["key"]),
        {"step": 0},
    )
    manager.committed_steps()  # The step is checked once, as after the manager's own save.

    def orbax_training() -> Any:
        parts = dict(zip(("model", "optimizer", "rng"), training[:3], strict=True))
        return ocp.load_checkpointables(
            step, {**parts, "auxiliary": {"state": training[3], "step": 0}, "iterator": iterator}
        )

    samples = _paired(
        {
            "load_checkpointables": (
                lambda: load_checkpointables(saved, targets),
                lambda: ocp.load_checkpointables(saved, targets),
            ),
            "load_training_checkpoint": (lambda: load_training_checkpoint(step, *training, iterator), orbax_training),
            "manager.restore": (lambda: manager.restore(1, *training, iterator), orbax_training),
        },
        repeats,
    )
    size = sum(array.nbytes for array in layers.values()) / (1024 * 1024)
    print(
        f"\nRestores of {size:g} MiB against ocp.load_checkpointables, median of {repeats} paired rounds "
        "(goal <= 1.15):"
    )
    medians = {}
    for name, (ours, orbax) in samples.items():
        ratios = [mine / theirs for mine, theirs in zip(ours, orbax, strict=True)]
        medians[name] = statistics.median(ratios)
        print(
            f"  {name:<26} {statistics.median(ours) * 1e3:8.2f} ms / ocp {statistics.median(orbax) * 1e3:8.2f} ms: "
            f"ratio median {medians[name]:.3f}, spread {min(ratios):.3f}-{max(ratios):.3f}"
        )
    return medians


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--directory", type=Path, default=None)
    parser.add_argument(
        "--only", choices=("all", "resharding", "restores"), default="all", help="the comparisons to run"
    )
    options = parser.parse_args()

    print(f"jax {jax.__version__}, python {sys.version.split()[0]}, {jax.device_count()} CPU devices")
    assert jax.device_count() == 8, "JAX started before the device count was set"
    state = _state(options.size_mib)
    checkpointables = {"state": state}
    targets = {"state": abstract_restore_target(state)}
    scratch = Path(tempfile.mkdtemp(prefix="tinax-bench-checkpointing-", dir=options.directory))
    if options.only == "restores":
        try:
            _restore_cases(state, scratch, options.repeats)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return 0
    if options.only == "resharding":
        try:
            ratios = _resharding_cases(state, scratch, options.repeats, options.seed)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        print(f"\nresharding ratios: 4x2 / same mesh {ratios[0]:.3f} (goal <= 1.2), NumPy / same mesh {ratios[1]:.3f}")
        return 0
    try:
        saves = _time_fresh_saves(
            {
                "tinax save_checkpointables": lambda path: save_checkpointables(path, checkpointables).result(),
                "ocp.save_checkpointables_async": lambda path: ocp.save_checkpointables_async(
                    path, checkpointables
                ).result(),
            },
            scratch,
            options.repeats,
            options.seed,
        )
        save_ratio = report(
            f"Save then result(), {options.size_mib} MiB sharded over 8 devices (one save per sample):",
            saves,
            [("tinax save_checkpointables", "ocp.save_checkpointables_async")],
            unit="ms",
        )

        saved = scratch / "loaded"
        save_checkpointables(saved, checkpointables).result()
        loads = run(
            {
                "tinax load_checkpointables": lambda: load_checkpointables(saved, targets),
                "ocp.load_checkpointables": lambda: ocp.load_checkpointables(saved, targets),
            },
            1,
            options.repeats,
            options.seed,
        )
        load_ratio = report(
            f"Load into sharded targets, {options.size_mib} MiB (one load per sample):",
            loads,
            [("tinax load_checkpointables", "ocp.load_checkpointables")],
            unit="ms",
        )
        manager_ratios = _manager_cases(state, scratch, options.repeats, options.seed)
        resharding = _resharding_cases(state, scratch, options.repeats, options.seed)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    names = run({"validate_checkpointable_name": lambda: validate_checkpointable_name("optimizer_state")}, 5000, 5, 0)
    report("Name validation per call:", names, [])
    print(f"\nworst median ratio {max(save_ratio + load_ratio + manager_ratios):.3f} (goal <= 1.05)")
    print(
        f"resharding ratios: 4x2 / same mesh {resharding[0]:.3f} (goal <= 1.2), NumPy / same mesh {resharding[1]:.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
