"""Cost of tinax.parallel's checked placement against the raw upstream calls.

Run from the repository root with ``hatch run bench:parallel``. Options:
``--repeats N`` (interleaved rounds), ``--sizes-mib A,B`` (payload sizes),
``--seed N``.

Comparisons, each in one run over an 8-device ``data`` mesh:
  place_host_array(copy=False)  vs  jax.device_put(x, sharding)
  place_host_array(copy=True)   vs  jax.device_put(np.array(x, copy=True), sharding)
  make_mesh(...)                vs  jax.sharding.Mesh(np.array(devices).reshape(...), ...)
  layout(mesh, ("data", None))  vs  NamedSharding(mesh, P("data", None))
Each placement call waits for the transfer, so the time is the whole transfer.
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

from tinax.parallel import layout, make_mesh, place_host_array


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
    if large_ratios:
        print(f"\nlarge transfers: worst median ratio {max(large_ratios):.3f} (goal <= 1.05)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
