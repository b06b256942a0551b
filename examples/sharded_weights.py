"""Sharded weights: load a checkpoint straight onto a mesh, run a step, export it (`tinax.weights`).

What it shows:

- `load_sharded_safetensors(index, shardings=..., max_bytes=...)` reads a
  Hugging Face style multi-file checkpoint (files plus a
  `model.safetensors.index.json`) directly into global `jax.Array`s on a
  2x4 mesh of 8 CPU devices. A callable picks each tensor's sharding from its
  name and shape; the result reports how many payload bytes this process
  read: each distinct shard once, so a replicated bias costs its size once,
  not once per device.
- The byte budget is checked against that plan before any data is read.
- One forward step of a two-layer MLP runs under `jax.jit` on the loaded
  arrays and matches the same step computed in NumPy.
- `save_sharded_safetensors` writes the sharded arrays without gathering
  them: one file, byte-identical to what `save_safetensors` writes for the
  same weights on the host, or a multi-file checkpoint with an index under a
  per-file size limit, which loads back exactly.

The example forces 8 CPU devices itself before JAX starts. Files go to a
temporary folder. Run it with `python examples/sharded_weights.py`.
"""

from __future__ import annotations

import json
import pathlib
import sys
import tempfile

import jax

# The device count must be fixed before JAX starts a backend.
jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_num_cpu_devices", 8)

import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

from tinax.weights import (  # noqa: E402
    TensorInfo,
    load_sharded_safetensors,
    save_safetensors,
    save_sharded_safetensors,
)


def report(claim: str, holds: bool) -> None:
    """Prints a claim the example has just checked, or stops if it does not hold."""
    if not holds:
        raise SystemExit(f"sharded_weights: expected, but not observed: {claim}")
    print(claim)


def host_weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "hidden.kernel": rng.normal(size=(16, 32)).astype(np.float32),
        "hidden.bias": rng.normal(size=(32,)).astype(np.float32),
        "output.kernel": rng.normal(size=(32, 8)).astype(np.float32),
        "output.bias": rng.normal(size=(8,)).astype(np.float32),
    }


def write_checkpoint(folder: pathlib.Path, weights: dict[str, np.ndarray]) -> pathlib.Path:
    """Two files and an index, laid out as Hugging Face tools lay out a split checkpoint."""
    parts = {
        "model-00001-of-00002.safetensors": ["hidden.kernel", "hidden.bias"],
        "model-00002-of-00002.safetensors": ["output.kernel", "output.bias"],
    }
    weight_map = {}
    for file_name, names in parts.items():
        save_safetensors(folder / file_name, {name: weights[name] for name in names}, overwrite=False)
        weight_map.update(dict.fromkeys(names, file_name))
    index = folder / "model.safetensors.index.json"
    total = sum(array.nbytes for array in weights.values())
    index.write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}), encoding="utf-8")
    return index


def forward(params: dict[str, jax.Array], inputs: jax.Array) -> jax.Array:
    hidden = jax.nn.relu(inputs @ params["hidden.kernel"] + params["hidden.bias"])
    return hidden @ params["output.kernel"] + params["output.bias"]


def run(folder: pathlib.Path) -> None:
    weights = host_weights()
    index = write_checkpoint(folder, weights)
    mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))

    def choose(name: str, info: TensorInfo) -> NamedSharding:
        # Kernels split along their output columns over 'model'; biases replicated.
        spec = PartitionSpec(None, "model") if len(info.shape) == 2 else PartitionSpec()
        return NamedSharding(mesh, spec)

    try:
        load_sharded_safetensors(index, shardings=choose, max_bytes=1024)
        refused = False
    except ValueError:
        refused = True
    report("load_sharded_safetensors refused a load over max_bytes=1024 before reading any data", refused)

    loaded = load_sharded_safetensors(index, shardings=choose, max_bytes=1 << 20)
    params = loaded.arrays
    kernel = params["hidden.kernel"]
    total = sum(array.nbytes for array in weights.values())
    report(
        f"load_sharded_safetensors: {len(params)} tensors from 2 files onto a 2x4 mesh; hidden.kernel is split into "
        f"{kernel.addressable_shards[0].data.shape} blocks; {loaded.bytes_read} payload bytes read for {total} bytes "
        "of weights (each distinct shard once)",
        all(np.array_equal(np.asarray(params[name]), weights[name]) for name in weights)
        and kernel.addressable_shards[0].data.shape == (16, 8)
        and loaded.bytes_read == total,
    )

    inputs = jax.device_put(
        np.random.default_rng(1).normal(size=(4, 16)).astype(np.float32), NamedSharding(mesh, PartitionSpec("data"))
    )
    logits = jax.jit(forward)(params, inputs)
    hidden = np.maximum(np.asarray(inputs) @ weights["hidden.kernel"] + weights["hidden.bias"], 0)
    expected = hidden @ weights["output.kernel"] + weights["output.bias"]
    report(
        f"one jitted forward step on the sharded weights gave {logits.shape} logits that match NumPy",
        np.allclose(np.asarray(logits), expected, rtol=1e-5, atol=1e-5),
    )

    exported = folder / "exported.safetensors"
    save_sharded_safetensors(exported, params, overwrite=False)
    reference = folder / "reference.safetensors"
    save_safetensors(reference, weights, overwrite=False)
    report(
        "save_sharded_safetensors wrote the sharded weights without gathering them, byte-identical to save_safetensors",
        exported.read_bytes() == reference.read_bytes(),
    )

    split = folder / "split.safetensors.index.json"
    save_sharded_safetensors(split, params, overwrite=False, max_file_bytes=2048)
    files = sorted(set(json.loads(split.read_text(encoding="utf-8"))["weight_map"].values()))
    back = load_sharded_safetensors(split, shardings=choose, max_bytes=1 << 20)
    report(
        f"save_sharded_safetensors(max_file_bytes=2048): {len(files)} files and an index, which load back exactly",
        len(files) > 1 and all(np.array_equal(np.asarray(back.arrays[name]), weights[name]) for name in weights),
    )


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        run(pathlib.Path(folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
