"""Saving and restoring a sharded training state with Orbax V1 (`tinax.checkpointing`).

What it shows:

- `save_checkpointables(path, {name: value})` starts an asynchronous save of
  several named values into one checkpoint folder; `.result()` waits for it.
  The folder appears only once the checkpoint is complete, and a second save
  to the same path is refused: checkpoints are immutable.
- `abstract_restore_target(live_state)` turns live state into a restore
  target that keeps every array's shape, dtype and sharding (PRNG keys
  included), and `load_checkpointables(path, targets)` loads each named
  value into its target.
- A target with another sharding loads the same values laid out that way,
  and names left out of the targets are not loaded.

The state lives on a mesh of 8 CPU devices, which the example forces itself
before JAX starts. Files go to a temporary folder. Run it with
`python examples/checkpoint_roundtrip.py`.
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

import jax

# The device count must be fixed before JAX starts a backend.
jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_num_cpu_devices", 8)

import numpy as np  # noqa: E402
from jax.sharding import AxisType  # noqa: E402

from tinax.checkpointing import abstract_restore_target, load_checkpointables, save_checkpointables  # noqa: E402
from tinax.parallel import layout, make_mesh, place_host_array  # noqa: E402


def report(claim: str, holds: bool) -> None:
    """Prints a claim the example has just checked, or stops if it does not hold."""
    if not holds:
        raise SystemExit(f"checkpoint_roundtrip: expected, but not observed: {claim}")
    print(claim)


def same_values(first: object, second: object) -> bool:
    pairs = zip(jax.tree_util.tree_leaves(first), jax.tree_util.tree_leaves(second), strict=True)
    return all(np.array_equal(np.asarray(left), np.asarray(right)) for left, right in pairs)


def same_shardings(first: object, second: object) -> bool:
    pairs = zip(jax.tree_util.tree_leaves(first), jax.tree_util.tree_leaves(second), strict=True)
    return all(left.sharding == right.sharding for left, right in pairs)


def run(folder: pathlib.Path) -> None:
    mesh = make_mesh(jax.devices(), (2, 4), ("data", "model"), axis_types=(AxisType.Explicit, AxisType.Explicit))
    rng = np.random.default_rng(0)
    model = {
        "kernel": place_host_array(
            rng.normal(size=(8, 16)).astype(np.float32), layout(mesh, ("data", "model")), copy=True
        ),
        "bias": place_host_array(np.zeros(16, np.float32), layout(mesh, (None,)), copy=True),
    }
    noise_key = jax.device_put(jax.random.key(42), layout(mesh, ()))
    path = folder / "step_100"

    response = save_checkpointables(path, {"model": model, "rng": noise_key})
    response.result()
    report(
        "save_checkpointables: the 'model' and 'rng' checkpointables were saved; result() waited for the commit",
        (path / "model").is_dir() and (path / "rng").is_dir(),
    )
    try:
        save_checkpointables(path, {"model": model})
        refused = False
    except FileExistsError:
        refused = True
    report("save_checkpointables refused to write over the existing checkpoint", refused)

    targets = {"model": abstract_restore_target(model), "rng": abstract_restore_target(noise_key)}
    loaded = load_checkpointables(path, targets)
    report(
        "load_checkpointables: model and rng key restored with the same values and the same shardings",
        same_values(loaded["model"], model)
        and same_shardings(loaded["model"], model)
        and same_values(jax.random.key_data(loaded["rng"]), jax.random.key_data(noise_key))
        and loaded["rng"].sharding == noise_key.sharding,
    )

    replicated = layout(mesh, (None, None))
    kernel_only = {
        "model": {
            "kernel": jax.ShapeDtypeStruct((8, 16), np.float32, sharding=replicated),
            "bias": abstract_restore_target(model["bias"]),
        }
    }
    relaid = load_checkpointables(path, kernel_only)
    report(
        "load_checkpointables: a replicated target loaded the same kernel replicated, and 'rng' was not loaded",
        sorted(relaid) == ["model"]
        and relaid["model"]["kernel"].sharding == replicated
        and same_values(relaid["model"]["kernel"], model["kernel"]),
    )


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        run(pathlib.Path(folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
