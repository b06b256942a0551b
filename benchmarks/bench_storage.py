"""Cost of tinax's gs:// and s3:// paths against the raw upstream clients, on real servers on the loopback interface.

Run from the repository root with ``hatch run bench:storage``. Options:
``--size-mib N`` (safetensors file size, default 256), ``--tensors N`` (equal
float32 tensors in it, default 64), ``--checkpoint-mib N`` (checkpoint state
size, default 64), ``--repeats N`` (interleaved rounds), ``--seed N``,
``--only weights|checkpoints``.

The servers are the ones the tests use (the GCS emulator and moto's S3
server, started here as child processes), so the figures say what tinax adds
over the client on the same wire, not what a real bucket costs.

Comparisons, each pair timed in the same rounds:
  load_safetensors(url)                 vs  fs.cat_file(url), then safetensors.numpy.load(bytes)
                                            (gcsfs for gs://, s3fs for s3://; goal: at most 1.1x)
  load_safetensors(url, names=[one])    bytes on the wire against the tensor's bytes (goal: at most 2x),
                                        counted as the loopback interface's received bytes
  save_checkpointables(gs://...)        vs  ocp.save_checkpointables(gs://...)   (goal: at most 1.1x)
  load_checkpointables(gs://..., t)     vs  ocp.load_checkpointables(gs://..., t) (goal: at most 1.1x)
Orbax has no s3:// support (google/orbax#359), so checkpoints run on gs:// only.
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")

import argparse
import itertools
import pathlib
import sys
from typing import Any

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _timing import report, run

from tinax_testing.object_storage import start_object_stores

MIB = 1024 * 1024
_NAMES = itertools.count()


def _loopback_received() -> int:
    """Bytes received on the loopback interface so far (every byte a client reads from the servers)."""
    for line in pathlib.Path("/proc/net/dev").read_text().splitlines():
        name, _, counters = line.partition(":")
        if name.strip() == "lo":
            return int(counters.split()[0])
    raise RuntimeError("no loopback interface in /proc/net/dev")


def _weights_cases(prefix: str, size_mib: int, tensors: int, repeats: int, seed: int) -> list[float]:
    import fsspec
    import safetensors.numpy

    from tinax.weights import load_safetensors, save_safetensors

    rows = size_mib * MIB // 4 // tensors // 256
    arrays = {
        f"layer{index:03d}": np.random.default_rng(index).standard_normal((rows, 256), np.float32)
        for index in range(tensors)
    }
    url = f"{prefix}/model.safetensors"
    save_safetensors(url, arrays, overwrite=False)
    fs = fsspec.filesystem(url.partition("://")[0])
    key = url.partition("://")[2]
    scheme = url.partition("://")[0]

    def upstream() -> Any:
        return safetensors.numpy.load(fs.cat_file(key))

    def tinax() -> Any:
        return load_safetensors(url, max_bytes=1 << 40)

    loaded = tinax()
    assert all(np.array_equal(loaded.tensors[name], arrays[name]) for name in arrays)
    samples = run(
        {f"tinax load_safetensors {scheme}": tinax, f"cat_file + safetensors.numpy.load {scheme}": upstream},
        1,
        repeats,
        seed,
    )
    ratios = report(
        f"{scheme}:// load of a {size_mib} MiB safetensors file ({tensors} tensors)",
        samples,
        [(f"tinax load_safetensors {scheme}", f"cat_file + safetensors.numpy.load {scheme}")],
        unit="ms",
    )
    name = "layer031" if tensors > 31 else "layer000"
    before = _loopback_received()
    one = load_safetensors(url, names=[name], max_bytes=1 << 40)
    wire = _loopback_received() - before
    assert np.array_equal(one.tensors[name], arrays[name])
    share = wire / arrays[name].nbytes
    tensor_mib, wire_mib = arrays[name].nbytes / MIB, wire / MIB
    print(f"  one of {tensors} tensors ({tensor_mib:.2f} MiB): {wire_mib:.2f} MiB on the wire, {share:.2f}x its bytes")
    fs.rm(key)
    return [*ratios, share]


def _checkpoint_cases(prefix: str, size_mib: int, repeats: int, seed: int) -> list[float]:
    import jax
    import orbax.checkpoint.experimental.v1 as ocp
    from etils import epath

    from tinax.checkpointing import load_checkpointables, save_checkpointables

    mesh = jax.make_mesh((4, 2), ("data", "model"))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data", "model"))
    rows = size_mib * MIB // 4 // 4 // 1024
    state = {
        f"w{index}": jax.device_put(np.random.default_rng(index).standard_normal((rows, 1024), np.float32), sharding)
        for index in range(4)
    }
    targets = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=leaf.sharding), state)

    def fresh() -> str:
        return f"{prefix}/checkpoints/{next(_NAMES)}"

    def tinax_save() -> Any:
        return save_checkpointables(fresh(), {"state": state}).result()

    def orbax_save() -> Any:
        return ocp.save_checkpointables(epath.Path(fresh()), {"state": state})

    saved = fresh()
    save_checkpointables(saved, {"state": state}).result()
    restored = load_checkpointables(saved, {"state": targets})
    assert all(np.array_equal(np.asarray(restored["state"][name]), np.asarray(state[name])) for name in state)

    samples = run(
        {"tinax save_checkpointables gs": tinax_save, "ocp.save_checkpointables gs": orbax_save}, 1, repeats, seed
    )
    ratios = report(
        f"gs:// checkpoint save, {size_mib} MiB over a 4x2 mesh",
        samples,
        [("tinax save_checkpointables gs", "ocp.save_checkpointables gs")],
        unit="ms",
    )
    samples = run(
        {
            "tinax load_checkpointables gs": lambda: load_checkpointables(saved, {"state": targets}),
            "ocp.load_checkpointables gs": lambda: ocp.load_checkpointables(epath.Path(saved), {"state": targets}),
        },
        1,
        repeats,
        seed,
    )
    ratios += report(
        f"gs:// checkpoint restore, {size_mib} MiB over a 4x2 mesh",
        samples,
        [("tinax load_checkpointables gs", "ocp.load_checkpointables gs")],
        unit="ms",
    )
    return ratios


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--tensors", type=int, default=64)
    parser.add_argument("--checkpoint-mib", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", choices=["weights", "checkpoints"])
    arguments = parser.parse_args()
    stores = start_object_stores()
    if arguments.only in (None, "weights"):
        for scheme in ("gs", "s3"):
            _weights_cases(
                stores.new_prefix(scheme), arguments.size_mib, arguments.tensors, arguments.repeats, arguments.seed
            )
    if arguments.only in (None, "checkpoints"):
        _checkpoint_cases(stores.new_prefix("gs"), arguments.checkpoint_mib, arguments.repeats, arguments.seed)
    stores.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
