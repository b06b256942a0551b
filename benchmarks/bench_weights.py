"""Cost of tinax.weights' safetensors loading against the raw upstream calls.

Run from the repository root with ``hatch run bench:weights``. Options:
``--size-mib N`` (file size, default 1024), ``--tensors N`` (how many equal
float32 tensors share it), ``--fraction F`` (share of the tensors the
selective load picks, default 0.01), ``--repeats N`` (interleaved rounds),
``--seed N``.

Comparisons, in one run over one file written to a temporary folder (and
removed at the end), so both sides read it from the same page cache:
  load_safetensors(path, max_bytes=...)             vs  safetensors.numpy.load_file(path)
  load_safetensors(path, names=..., max_bytes=...)  vs  safe_open(path, framework="numpy").get_tensor(name)
                                                         for the same names
  load_sharded_safetensors(path, shardings=...)    vs  safetensors.numpy.load_file(path), then jax.device_put
                                                         of each tensor with the same sharding (8 CPU devices)
  save_sharded_safetensors(path, arrays)            vs  jax.device_get of every array, then save_safetensors
Writers, on the tensors of that file (``--cases write``):
  save_safetensors(path, tensors)                   vs  safetensors.serialize_file of the same arrays (as
                                                         safetensors.numpy.save_file calls it) into atomic_path
  save_msgpack(path, state)                         vs  msgpack.Packer with msgpack.ExtType per array (the
                                                         same bytes) into atomic_write
The upstream sides are what adopting them would cost: the same atomic
publication, so both sides fsync the same bytes.
The sharded cases split every tensor along its rows over the 8 devices (one
contiguous read per shard); a third load variant splits along the columns.
Column blocks of a tensor within 16 MiB tile it, so it is read in long runs;
with fewer, larger tensors (``--tensors 8``) each column block is read row by
row. ``--cases sharded`` (or ``plain``, ``write``) runs
only those cases.
A header that was validated is remembered (keyed by its bytes), so repeated
loads of one file skip its validation; a third selective variant forgets it
before each call, to show the cost of a first load.

Peak memory: each variant runs once in a fresh subprocess, and the figure is
the growth of ``ru_maxrss`` over a baseline taken after the imports. The goal
for tinax is at most 1.1 x the selected bytes plus a fixed 64 MiB. For the
sharded cases the figure is the host staging memory: the growth less the
bytes the arrays hold on the (CPU) devices, since those live in host memory
too; the goal is at most 1/8 of the naive path's plus 16 MiB. Linux
carries a parent's peak RSS into the ``ru_maxrss`` of the children it starts,
so the file is written by a child too and the memory runs come first, while
this process is still small.
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")

import argparse
import json
import pathlib
import random
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import safetensors
import safetensors.numpy
from safetensors import safe_open

from tinax._weights._safetensors._header import forget_validated_headers
from tinax.weights import (
    load_safetensors,
    load_sharded_safetensors,
    save_msgpack,
    save_safetensors,
    save_sharded_safetensors,
)

MIB = 1024 * 1024
WRITERS = ("save_safetensors", "serialize_file via atomic_path", "save_msgpack", "msgpack ExtType via atomic_write")
MEMORY_SLOPE = 1.1
MEMORY_OVERHEAD = 64 * MIB
STAGING_SHARE = 1 / 8
STAGING_OVERHEAD = 16 * MIB


def variants(path: pathlib.Path, selected: list[str], total: int, part: int) -> dict[str, Callable[[], Any]]:
    def upstream_selective() -> dict[str, np.ndarray]:
        with safe_open(path, framework="numpy") as reader:
            return {name: reader.get_tensor(name) for name in selected}

    def cold_selective() -> Any:
        forget_validated_headers()
        return load_safetensors(path, max_bytes=part, names=selected)

    return {
        "load_safetensors (all)": lambda: load_safetensors(path, max_bytes=total),
        "safetensors.numpy.load_file": lambda: safetensors.numpy.load_file(path),
        "load_safetensors (selected)": lambda: load_safetensors(path, max_bytes=part, names=selected),
        "safe_open.get_tensor (selected)": upstream_selective,
        "load_safetensors (selected, cold)": cold_selective,
    }


def writers(folder: pathlib.Path, tensors: dict[str, np.ndarray]) -> dict[str, Callable[[], Any]]:
    from tinax._core.files import atomic_path, atomic_write

    def upstream_safetensors() -> None:
        specs = {
            name: safetensors.TensorSpec(dtype=array.dtype.name, shape=array.shape, data_ptr=array.ctypes.data,
                                         data_len=array.nbytes)
            for name, array in tensors.items()
        }  # fmt: skip
        with atomic_path(folder / "upstream.safetensors", overwrite=True) as temporary:
            safetensors.serialize_file(specs, temporary)

    def upstream_msgpack() -> None:
        import msgpack

        packer = msgpack.Packer(use_bin_type=True, strict_types=True, autoreset=True)
        with atomic_write(folder / "upstream.msgpack", overwrite=True) as handle:
            handle.write(packer.pack_map_header(len(tensors)))
            for name, array in tensors.items():
                # ExtType holds bytes: the array's bytes are copied into it, then into the packer's buffer.
                payload = packer.pack([list(array.shape), array.dtype.name, array.tobytes()])
                handle.write(packer.pack(name))
                handle.write(packer.pack(msgpack.ExtType(1, payload)))

    return {
        "save_safetensors": lambda: save_safetensors(folder / "ours.safetensors", tensors, overwrite=True),
        "serialize_file via atomic_path": upstream_safetensors,
        "save_msgpack": lambda: save_msgpack(folder / "ours.msgpack", tensors, overwrite=True),
        "msgpack ExtType via atomic_write": upstream_msgpack,
    }


def row_shardings(path: pathlib.Path, spec: tuple[str | None, ...]) -> dict[str, Any]:
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = jax.make_mesh((len(jax.devices()),), ("x",))
    names = safe_open(path, framework="numpy").keys()
    return {name: NamedSharding(mesh, PartitionSpec(*spec)) for name in names}


def sharded_loads(path: pathlib.Path, total: int) -> dict[str, Callable[[], Any]]:
    rows = row_shardings(path, ("x", None))
    columns = row_shardings(path, (None, "x"))

    def naive() -> dict[str, jax.Array]:
        tensors = safetensors.numpy.load_file(path)
        return {name: jax.device_put(tensors.pop(name), rows[name]) for name in list(tensors)}

    return {
        "load_sharded_safetensors (rows)": lambda: (
            load_sharded_safetensors(path, shardings=rows, max_bytes=total).arrays
        ),
        "load_file + jax.device_put (rows)": naive,
        "load_sharded_safetensors (columns)": (
            lambda: load_sharded_safetensors(path, shardings=columns, max_bytes=total).arrays
        ),
    }


def sharded_saves(folder: pathlib.Path, arrays: dict[str, jax.Array]) -> dict[str, Callable[[], Any]]:
    def ours() -> None:
        save_sharded_safetensors(folder / "sharded.safetensors", arrays, overwrite=True)

    def gathered() -> None:
        save_safetensors(folder / "gathered.safetensors", jax.device_get(arrays), overwrite=True)

    return {"save_sharded_safetensors": ours, "jax.device_get + save_safetensors": gathered}


def device_bytes(arrays: Any) -> int:
    leaves = jax.tree_util.tree_leaves(arrays)
    return sum(shard.data.nbytes for array in leaves for shard in array.addressable_shards)


def write_file(options: argparse.Namespace) -> int:
    """Writes the benchmark file (in a child, so this process's peak stays small)."""
    generator = np.random.default_rng(options.seed)
    tensors = {
        name: generator.standard_normal((options.rows, 1024), dtype=np.float32) for name in tensor_names(options)
    }
    save_safetensors(pathlib.Path(options.path), tensors, overwrite=False)
    return 0


def tensor_names(options: argparse.Namespace) -> list[str]:
    return [f"layer{index:04d}.weight" for index in range(options.tensors)]


def child(options: argparse.Namespace) -> int:
    """Runs one variant once and prints the peak-memory growth it caused."""
    path = pathlib.Path(options.path)
    # ru_maxrss is in KiB on Linux and in bytes on macOS.
    unit = 1 if sys.platform == "darwin" else 1024
    if options.child in WRITERS:
        tensors = load_safetensors(path, max_bytes=options.total).tensors
        call = writers(path.parent, dict(tensors))[options.child]
        baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        call()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"growth": (peak - baseline) * unit, "loaded": options.total}))
        return 0
    if options.child in sharded_loads(path, options.total) or options.child.startswith(("save_", "jax.device_get")):
        jax.devices()  # The backend's own memory is not the variant's.
        if options.child in sharded_loads(path, options.total):
            call = sharded_loads(path, options.total)[options.child]
            held = None
        else:
            held = load_sharded_safetensors(path, shardings=row_shardings(path, ("x", None)), max_bytes=options.total)
            call = sharded_saves(path.parent, held.arrays)[options.child]
        baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result = call()
        jax.block_until_ready(result)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        on_devices = device_bytes(result) if held is None else 0
        print(json.dumps({"growth": (peak - baseline) * unit, "loaded": options.total, "devices": on_devices}))
        return 0
    selected = options.names.split(",") if options.names else []
    call = variants(path, selected, options.total, options.part)[options.child]
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = call()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tensors = result.tensors if hasattr(result, "tensors") else result
    loaded = sum(array.nbytes for array in tensors.values())
    print(json.dumps({"growth": (peak - baseline) * unit, "loaded": loaded}))
    return 0


def measure_memory(
    script: str, path: pathlib.Path, name: str, selected: list[str], total: int, part: int
) -> dict[str, int]:
    command = [sys.executable, script, "--child", name, "--path", str(path), "--names", ",".join(selected),
               "--total", str(total), "--part", str(part)]  # fmt: skip
    completed = subprocess.run(command, capture_output=True, text=True, check=True, timeout=600)
    return json.loads(completed.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--tensors", type=int, default=100)
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", choices=["all", "plain", "sharded", "write"], default="all")
    # Internal: one variant in a fresh process, for its peak memory, or writing the file.
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--write", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--names", help=argparse.SUPPRESS)
    parser.add_argument("--total", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--part", type=int, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.write:
        return write_file(options)
    if options.child:
        return child(options)

    # A multiple of the device count, so every tensor splits evenly along its rows.
    devices = int(os.environ["JAX_NUM_CPU_DEVICES"])
    options.rows = max(devices, options.size_mib * MIB // options.tensors // 4096 // devices * devices)
    names = tensor_names(options)
    count = max(1, round(options.fraction * options.tensors))
    selected = sorted(random.Random(options.seed).sample(names, count))
    print(f"safetensors {safetensors.__version__}, numpy {np.__version__}, python {sys.version.split()[0]}")

    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "bench.safetensors"
        subprocess.run(
            [sys.executable, __file__, "--write", "--path", str(path), "--rows", str(options.rows),
             "--tensors", str(options.tensors), "--seed", str(options.seed)],
            check=True,
            timeout=1200,
        )  # fmt: skip
        total = path.stat().st_size
        part = count * options.rows * 1024 * 4
        print(f"file: {len(names)} float32 tensors of {options.rows} x 1024, {total / MIB:.1f} MiB; selecting {count} "
              f"({part / MIB:.1f} MiB)")  # fmt: skip

        if options.cases in ("all", "plain"):
            plain(options, path, names, selected, total, part)
        if options.cases in ("all", "sharded"):
            sharded(options, path, total)
        if options.cases in ("all", "write"):
            write(options, path, total)
    return 0


def plain(
    options: argparse.Namespace, path: pathlib.Path, names: list[str], selected: list[str], total: int, part: int
) -> None:
    count = len(selected)
    print("\nPeak memory (ru_maxrss growth over the post-import baseline, one fresh process each):")
    calls = variants(path, selected, total, part)
    met = True
    for name in calls:
        figures = measure_memory(__file__, path, name, selected, total, part)
        growth, loaded = figures["growth"], figures["loaded"]
        line = f"  {name:<34} {growth / MIB:9.1f} MiB for {loaded / MIB:9.1f} MiB loaded ({growth / loaded:.3f} x)"
        if name.startswith("load_safetensors"):
            limit = MEMORY_SLOPE * loaded + MEMORY_OVERHEAD
            met = met and growth <= limit
            line += f"  goal <= {limit / MIB:.1f} MiB: {'met' if growth <= limit else 'MISSED'}"
        print(line)

    from _timing import report, run

    full = ["load_safetensors (all)", "safetensors.numpy.load_file"]
    ratios = report(
        "Full load (1 call per batch):",
        run({name: calls[name] for name in full}, 1, options.repeats, options.seed),
        [(full[0], full[1])],
        unit="ms",
    )
    selective = [
        "load_safetensors (selected)",
        "safe_open.get_tensor (selected)",
        "load_safetensors (selected, cold)",
    ]
    selective_calls = max(1, min(50, round(1 / options.fraction)))
    selective_ratios = report(
        f"Selective load of {count} of {len(names)} tensors ({selective_calls} calls per batch):",
        run({name: calls[name] for name in selective}, selective_calls, options.repeats, options.seed),
        [(selective[0], selective[1]), (selective[2], selective[1])],
        unit="ms",
    )
    ratios.append(selective_ratios[0])
    cold_ratio = selective_ratios[1]
    print(
        f"\ntime: worst median ratio {max(ratios):.3f} (goal <= 1.05; the header of an unchanged file is validated "
        f"once, a load that must validate it anew has ratio {cold_ratio:.3f}); memory goal {'met' if met else 'MISSED'}"
    )


def write(options: argparse.Namespace, path: pathlib.Path, total: int) -> None:
    print("\nWriters (peak memory: ru_maxrss growth over the loaded tensors, one fresh process each):")
    growth: dict[str, int] = {}
    for name in WRITERS:
        growth[name] = measure_memory(__file__, path, name, [], total, 0)["growth"]
        print(f"  {name:<36} {growth[name] / MIB:9.1f} MiB for {total / MIB:9.1f} MiB written")

    from _timing import report, run

    calls = writers(path.parent, dict(load_safetensors(path, max_bytes=total).tensors))
    ratios = report(
        "Write (1 call per batch):",
        run(calls, 1, options.repeats, options.seed),
        [("save_safetensors", "serialize_file via atomic_path"), ("save_msgpack", "msgpack ExtType via atomic_write")],
        unit="ms",
    )
    print(
        f"\nwrite: safetensors time ratio {ratios[0]:.3f}, memory {growth['save_safetensors'] / MIB:.1f} MiB against "
        f"{growth['serialize_file via atomic_path'] / MIB:.1f} MiB; msgpack time ratio {ratios[1]:.3f}, memory "
        f"{growth['save_msgpack'] / MIB:.1f} MiB against {growth['msgpack ExtType via atomic_write'] / MIB:.1f} MiB"
    )


def sharded(options: argparse.Namespace, path: pathlib.Path, total: int) -> None:
    print(f"\nSharded over {len(jax.devices())} CPU devices (jax {jax.__version__}); host staging memory is the "
          "ru_maxrss growth less the bytes the arrays hold on the devices, one fresh process each:")  # fmt: skip
    staging: dict[str, float] = {}
    for name in [*sharded_loads(path, total), *sharded_saves(path.parent, {})]:
        figures = measure_memory(__file__, path, name, [], total, 0)
        staging[name] = max(0, figures["growth"] - figures["devices"])
        print(f"  {name:<38} growth {figures['growth'] / MIB:8.1f} MiB, on devices {figures['devices'] / MIB:8.1f} "
              f"MiB, staging {staging[name] / MIB:8.1f} MiB")  # fmt: skip
    load_limit = STAGING_SHARE * staging["load_file + jax.device_put (rows)"] + STAGING_OVERHEAD
    save_limit = STAGING_SHARE * staging["jax.device_get + save_safetensors"] + STAGING_OVERHEAD
    load_met = staging["load_sharded_safetensors (rows)"] <= load_limit
    save_met = staging["save_sharded_safetensors"] <= save_limit

    from _timing import report, run

    loads = sharded_loads(path, total)
    load_ratios = report(
        "Sharded load (1 call per batch):",
        run(loads, 1, options.repeats, options.seed),
        [
            ("load_sharded_safetensors (rows)", "load_file + jax.device_put (rows)"),
            ("load_sharded_safetensors (columns)", "load_file + jax.device_put (rows)"),
        ],
        unit="ms",
    )
    arrays = loads["load_sharded_safetensors (rows)"]()
    save_ratios = report(
        "Sharded export (1 call per batch):",
        run(sharded_saves(path.parent, arrays), 1, options.repeats, options.seed),
        [("save_sharded_safetensors", "jax.device_get + save_safetensors")],
        unit="ms",
    )
    print(
        f"\nsharded load: time ratio {load_ratios[0]:.3f} (goal <= 1.0; split along the columns: "
        f"{load_ratios[1]:.3f}); staging {staging['load_sharded_safetensors (rows)'] / MIB:.1f} MiB, goal <= "
        f"{load_limit / MIB:.1f} MiB: {'met' if load_met else 'MISSED'}\n"
        f"sharded export: time ratio {save_ratios[0]:.3f}; staging {staging['save_sharded_safetensors'] / MIB:.1f} "
        f"MiB against {staging['jax.device_get + save_safetensors'] / MIB:.1f} MiB gathered "
        f"(goal <= {save_limit / MIB:.1f} MiB: {'met' if save_met else 'MISSED'})"
    )


if __name__ == "__main__":
    raise SystemExit(main())
