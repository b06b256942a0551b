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
"""

from __future__ import annotations

import os

# Eight CPU devices, as in the test suites; must be set before JAX starts.
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["JAX_NUM_CPU_DEVICES"] = "8"

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint.experimental.v1 as ocp
from _timing import report, run
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from tinax.checkpointing import (
    abstract_restore_target,
    load_checkpointables,
    save_checkpointables,
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--directory", type=Path, default=None)
    options = parser.parse_args()

    print(f"jax {jax.__version__}, python {sys.version.split()[0]}, {jax.device_count()} CPU devices")
    assert jax.device_count() == 8, "JAX started before the device count was set"
    state = _state(options.size_mib)
    checkpointables = {"state": state}
    targets = {"state": abstract_restore_target(state)}
    scratch = Path(tempfile.mkdtemp(prefix="tinax-bench-checkpointing-", dir=options.directory))
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
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    names = run({"validate_checkpointable_name": lambda: validate_checkpointable_name("optimizer_state")}, 5000, 5, 0)
    report("Name validation per call:", names, [])
    print(f"\nworst median ratio {max(save_ratio + load_ratio):.3f} (goal <= 1.05)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
