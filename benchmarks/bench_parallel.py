"""Cost of tinax.parallel's checked placement against the raw upstream calls.

Run from the repository root with ``hatch run bench:parallel``. Options:
``--repeats N`` (interleaved rounds), ``--sizes-mib A,B`` (payload sizes),
``--seed N``.

Comparisons, each in one run over an 8-device ``data`` mesh:
  place_host_array(copy=False)  vs  jax.device_put(x, sharding)
  place_host_array(copy=True)   vs  jax.device_put(np.array(x, copy=True), sharding)
  make_mesh(...)                vs  jax.sharding.Mesh(np.array(devices).reshape(...), ...)
  layout(mesh, ("data", None))  vs  NamedSharding(mesh, P("data", None))
  shard_mapped psum, eager       vs  jax.shard_map over the Explicit mesh, eager
  jit(shard_mapped psum)         vs  jit(jax.shard_map ...), both compiled once
Each placement call waits for the transfer, so the time is the whole transfer.
The shard_mapped calls take an array laid out by ``layout`` on a 2x4
Explicit mesh and waits for its result; the eager call pays the per-call
choice of the mesh to run over, the jitted one only dispatch.
"""

from __future__ import annotations

import os

# Eight CPU devices, as in the test suites; must be set before JAX starts.
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["JAX_NUM_CPU_DEVICES"] = "8"

import argparse
import sys

import jax
import numpy as np
from _timing import report, run
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from tinax.parallel import layout, make_mesh, place_host_array, shard_mapped


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--sizes-mib", default="1,256")
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()
    sizes = [int(size) for size in options.sizes_mib.split(",")]

    devices = jax.devices()
    print(f"jax {jax.__version__}, python {sys.version.split()[0]}, {len(devices)} CPU devices")
    mesh = make_mesh(devices, (len(devices),), ("data",), axis_types=(AxisType.Explicit,))
    sharding = layout(mesh, ("data", None))

    large_ratios: list[float] = []
    for size in sizes:
        rows = size * 1024 * 1024 // (4 * 1024)
        host = np.random.default_rng(0).standard_normal((rows, 1024), dtype=np.float32)
        calls = max(1, 64 // size)
        samples = run(
            {
                "place_host_array(copy=False)": lambda host=host: place_host_array(host, sharding, copy=False),
                "jax.device_put": lambda host=host: jax.device_put(host, sharding),
                "place_host_array(copy=True)": lambda host=host: place_host_array(host, sharding, copy=True),
                "jax.device_put(explicit copy)": lambda host=host: jax.device_put(np.array(host, copy=True), sharding),
            },
            calls,
            options.repeats,
            options.seed,
        )
        ratios = report(
            f"{size} MiB float32 sharded over {len(devices)} devices ({calls} calls per batch):",
            samples,
            [
                ("place_host_array(copy=False)", "jax.device_put"),
                ("place_host_array(copy=True)", "jax.device_put(explicit copy)"),
            ],
            unit="ms",
        )
        if size >= 64:
            large_ratios += ratios

    shape, names, types = (len(devices),), ("data",), (AxisType.Explicit,)
    device_grid = np.array(devices)
    validation = run(
        {
            "make_mesh": lambda: make_mesh(devices, shape, names, axis_types=types),
            "jax.sharding.Mesh": lambda: Mesh(device_grid.reshape(shape), names, axis_types=types),
            "layout": lambda: layout(mesh, ("data", None)),
            "NamedSharding": lambda: NamedSharding(mesh, P("data", None)),
        },
        2000,
        options.repeats,
        options.seed,
    )
    report(
        "Validation overhead per call:",
        validation,
        [("make_mesh", "jax.sharding.Mesh"), ("layout", "NamedSharding")],
    )

    grid_shape, grid_axes = (2, 4), ("data", "model")
    explicit = make_mesh(devices, grid_shape, grid_axes, axis_types=(AxisType.Explicit,) * 2)
    manual = make_mesh(devices, grid_shape, grid_axes, axis_types=(AxisType.Manual,) * 2)
    grid = place_host_array(np.ones((64, 64), np.float32), layout(explicit, grid_axes), copy=True)

    def row_sums(block: jax.Array) -> jax.Array:
        return jax.lax.psum(block.sum(axis=1), "model")

    specs = {"in_specs": P(*grid_axes), "out_specs": P("data")}
    ours = shard_mapped(row_sums, mesh=manual, **specs)
    raw = jax.shard_map(row_sums, mesh=explicit, **specs)
    ours_jit, raw_jit = jax.jit(ours), jax.jit(raw)
    # Each call waits for its result: many collective programs in flight at
    # once can starve XLA's CPU rendezvous on a machine with few cores.
    eager = run(
        {
            "shard_mapped (eager)": lambda: jax.block_until_ready(ours(grid)),
            "jax.shard_map (eager)": lambda: jax.block_until_ready(raw(grid)),
        },
        4,
        options.repeats,
        options.seed,
    )
    report(
        "shard_mapped psum on a layout array, 2x4 Explicit mesh, eager:",
        eager,
        [("shard_mapped (eager)", "jax.shard_map (eager)")],
        unit="ms",
    )
    compiled = run(
        {
            "jit(shard_mapped)": lambda: jax.block_until_ready(ours_jit(grid)),
            "jit(jax.shard_map)": lambda: jax.block_until_ready(raw_jit(grid)),
        },
        100,
        options.repeats,
        options.seed,
    )
    report(
        "The same under jax.jit, compiled once:",
        compiled,
        [("jit(shard_mapped)", "jit(jax.shard_map)")],
    )
    if large_ratios:
        print(f"\nlarge transfers: worst median ratio {max(large_ratios):.3f} (goal <= 1.05)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
