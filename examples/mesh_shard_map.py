"""Meshes, layouts, placement and a real collective on 8 CPU devices (`tinax.parallel`).

What it shows:

- `make_mesh` arranges exactly the devices it is given, with the axis types it
  is given (nothing chosen on the caller's behalf).
- `layout` describes how an array is split over an Explicit mesh, and
  `place_host_array(..., copy=True)` puts host data there; a shape the layout
  cannot split evenly is refused with a message naming the dimension.
- `shard_mapped` runs a per-shard body over the Manual axes of a mesh; the
  body sums its block and a `psum` over the 'model' axis completes each row
  sum, eagerly and under `jax.jit`.

The example forces 8 CPU devices itself before JAX starts. Run it with
`python examples/mesh_shard_map.py`.
"""

from __future__ import annotations

import sys

import jax

# The device count must be fixed before JAX starts a backend.
jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_num_cpu_devices", 8)

import numpy as np  # noqa: E402
from jax.sharding import AxisType, PartitionSpec  # noqa: E402

from tinax.parallel import layout, make_mesh, place_host_array, shard_mapped  # noqa: E402


def report(claim: str, holds: bool) -> None:
    """Prints a claim the example has just checked, or stops if it does not hold."""
    if not holds:
        raise SystemExit(f"mesh_shard_map: expected, but not observed: {claim}")
    print(claim)


def block_row_sums(block: jax.Array) -> jax.Array:
    # Each device holds a (rows / 2, columns / 4) block; the psum adds the
    # partial row sums of the four devices along 'model'.
    return jax.lax.psum(block.sum(axis=1), "model")


def main() -> int:
    devices = jax.devices()
    mesh = make_mesh(devices, (2, 4), ("data", "model"), axis_types=(AxisType.Explicit, AxisType.Explicit))
    report(
        f"make_mesh: {len(devices)} CPU devices as axes {dict(mesh.shape)}",
        len(devices) == 8 and dict(mesh.shape) == {"data": 2, "model": 4},
    )

    grid = layout(mesh, ("data", "model"))
    host = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    placed = place_host_array(host, grid, copy=True)
    host[...] = 0.0  # copy=True took a snapshot, so this write does not reach `placed`.
    shard_shapes = {shard.data.shape for shard in placed.addressable_shards}
    report(
        f"layout + place_host_array: an {placed.shape} array split into {len(placed.addressable_shards)} "
        f"blocks of shape {', '.join(str(shape) for shape in shard_shapes)}",
        len(placed.addressable_shards) == 8 and shard_shapes == {(4, 4)},
    )
    try:
        place_host_array(np.zeros((8, 6), np.float32), grid, copy=True)
        message = ""
    except ValueError as error:
        message = str(error)
    print(f"place_host_array of shape (8, 6) raised ValueError: {message}")
    report("place_host_array refused a dimension that 'model' cannot split evenly", "dimension 1" in message)

    manual_mesh = make_mesh(devices, (2, 4), ("data", "model"), axis_types=(AxisType.Manual, AxisType.Manual))
    row_sums = shard_mapped(
        block_row_sums,
        mesh=manual_mesh,
        in_specs=PartitionSpec("data", "model"),
        out_specs=PartitionSpec("data"),
    )
    expected = np.arange(8 * 16, dtype=np.float32).reshape(8, 16).sum(axis=1)
    eager = np.asarray(row_sums(placed))
    compiled = np.asarray(jax.jit(row_sums)(placed))
    report(
        "shard_mapped with a psum over 'model' gave the row sums of all 8 rows, eagerly and under jit",
        np.array_equal(eager, expected) and np.array_equal(compiled, expected),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
