"""Sharded loads and exports across 2 real processes of 4 CPU devices each.

The ``_body_*`` functions run in the child processes (the harness loads this
file there by path) and return JSON; the tests check it. Each child records
the byte ranges that the reader and the writer touch, by wrapping their one
read and one write primitive, so the tests can assert that a process reads
and writes only its own shards.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
from typing import Any

import jax
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from tinax.weights import inspect_safetensors, load_sharded_safetensors, save_safetensors, save_sharded_safetensors
from tinax_testing import DistributedRunError, run_processes

# Each test here starts several JAX processes: longer than the suite's default limit.
pytestmark = pytest.mark.timeout(600)

PROCESSES = 2
DEVICES_PER_PROCESS = 4
METADATA = {"format": "np"}
# Every kind of layout on a mesh whose 'x' axis runs across the processes
# (on 2x4 each process holds one row of the mesh; on 4x2, two).
SPECS = {
    "rows": ("x", None),
    "cols": (None, "x"),
    "both": ("x", "y"),
    "inner": ("y", None),  # Split inside each process, copied across them.
    "cols_inner": (None, "y"),
    "replicated": (),
    "scaled": (None, ("x", "y")),
}
DTYPES = {
    "rows": np.float32,
    "cols": ml_dtypes.bfloat16,
    "both": np.int8,
    "inner": ml_dtypes.float8_e4m3fn,
    "cols_inner": np.float16,
    "replicated": np.uint32,
    "scaled": np.complex64,
}


def source_tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    tensors = {}
    for name, dtype in DTYPES.items():
        itemsize = np.dtype(dtype).itemsize
        raw = rng.integers(0, 256, size=(8, 8 * itemsize), dtype=np.uint8)
        tensors[name] = raw.view(dtype).reshape(8, 8)
    return tensors


def process_mesh(shape: tuple[int, int]) -> Mesh:
    devices = sorted(jax.devices(), key=lambda device: (device.process_index, device.id))
    return Mesh(np.array(devices).reshape(shape), ("x", "y"))


def shardings_on(mesh: Mesh) -> dict[str, NamedSharding]:
    return {name: NamedSharding(mesh, PartitionSpec(*spec)) for name, spec in SPECS.items()}


def needed_bytes(path: str, name: str, sharding: NamedSharding, shape: tuple[int, ...], itemsize: int) -> set[int]:
    """Every file byte of the distinct shards this process's devices hold, computed element by element."""
    data = pathlib.Path(path).read_bytes()
    payload_start = 8 + int.from_bytes(data[:8], "little")
    start = payload_start + inspect_safetensors(path, max_metadata_bytes=64).tensors[name].data_offsets[0]
    needed: set[int] = set()
    for index in sharding.addressable_devices_indices_map(shape).values():
        elements = np.arange(np.prod(shape)).reshape(shape)[index].reshape(-1)
        for element in elements.tolist():
            needed.update(range(start + element * itemsize, start + (element + 1) * itemsize))
    return needed


# ---------------------------------------------------------------------------
# Bodies run in the children.


def _body_load(path: str, index_path: str) -> dict[str, Any]:
    from tinax._weights._safetensors import _sharded_load

    reads: list[tuple[str, int, int]] = []
    real = _sharded_load.read_payload

    def recording(handle: Any, destination: memoryview, offset: int, *, name: str, source: str) -> None:
        reads.append((name, offset, destination.nbytes))
        real(handle, destination, offset, name=name, source=source)

    _sharded_load.read_payload = recording  # type: ignore[assignment]
    default_batch = _sharded_load.STAGING_BATCH_BYTES
    default_placement = _sharded_load.BATCHED_PLACEMENT_BYTES
    source = source_tensors()
    total = sum(array.nbytes for array in source.values())
    result: dict[str, Any] = {"process": jax.process_index(), "total": total}
    for shape, batch in (((2, 4), None), ((4, 2), None), ((2, 4), 0)):
        # The default stages these small tensors together; 0 stages one shard at a time.
        _sharded_load.STAGING_BATCH_BYTES = default_batch if batch is None else batch
        _sharded_load.BATCHED_PLACEMENT_BYTES = default_placement if batch is None else batch
        key = f"{shape[0]}x{shape[1]}" + ("" if batch is None else "-shard-by-shard")
        shardings = shardings_on(process_mesh(shape))
        reads.clear()
        loaded = load_sharded_safetensors(path, shardings=shardings, max_bytes=total, max_metadata_bytes=64)
        values_ok = all(
            np.asarray(shard.data).tobytes() == source[name][shard.index].tobytes()
            for name, array in loaded.arrays.items()
            for shard in array.addressable_shards
        ) and all(loaded.arrays[name].sharding == shardings[name] for name in SPECS)
        per_tensor = {}
        for name in SPECS:
            read = [(offset, length) for tensor, offset, length in reads if tensor == name]
            touched = [byte for offset, length in read for byte in range(offset, offset + length)]
            needed = needed_bytes(path, name, shardings[name], (8, 8), source[name].itemsize)
            per_tensor[name] = {
                "read": len(touched),
                "own_ranges_only": sorted(touched) == sorted(needed),
                "whole": source[name].nbytes,
            }
        result[key] = {
            "values_ok": bool(values_ok),
            "bytes_read": loaded.bytes_read,
            "counted": len(reads) and sum(length for _, _, length in reads),
            "tensors": per_tensor,
        }
        # A budget one byte short of this process's share is refused before any read.
        reads.clear()
        try:
            load_sharded_safetensors(path, shardings=shardings, max_bytes=loaded.bytes_read - 1, max_metadata_bytes=64)
        except ValueError as error:
            result[key]["short_budget"] = [str(error)[:60], len(reads)]
    _sharded_load.STAGING_BATCH_BYTES = default_batch
    _sharded_load.BATCHED_PLACEMENT_BYTES = default_placement
    shardings = shardings_on(process_mesh((2, 4)))
    from_index = load_sharded_safetensors(index_path, shardings=shardings, max_bytes=total, max_metadata_bytes=64)
    result["index_ok"] = all(
        np.asarray(shard.data).tobytes() == source[name][shard.index].tobytes()
        for name, array in from_index.arrays.items()
        for shard in array.addressable_shards
    )
    result["index_bytes_read"] = from_index.bytes_read
    return result


def _global_arrays() -> dict[str, jax.Array]:
    source = source_tensors()
    shardings = shardings_on(process_mesh((2, 4)))
    return {
        name: jax.make_array_from_callback(array.shape, shardings[name], lambda index, array=array: array[index])
        for name, array in source.items()
    }


def _body_export(folder: str) -> dict[str, Any]:
    from tinax._weights._safetensors import _sharded_save

    writes: list[tuple[int, int]] = []
    real = _sharded_save._write_at

    def recording(descriptor: int, view: memoryview, offset: int) -> None:
        writes.append((offset, view.nbytes))
        real(descriptor, view, offset)

    _sharded_save._write_at = recording  # type: ignore[assignment]
    arrays = _global_arrays()
    save_sharded_safetensors(
        pathlib.Path(folder) / "single.safetensors",
        arrays,
        overwrite=False,
        metadata=METADATA,
        max_metadata_bytes=64,
    )
    single_writes = list(writes)
    save_sharded_safetensors(
        pathlib.Path(folder) / "multi.safetensors.index.json",
        arrays,
        overwrite=False,
        metadata=METADATA,
        max_metadata_bytes=64,
        max_file_bytes=300,
    )
    _export_then_replace(pathlib.Path(folder), arrays)
    return {"process": jax.process_index(), "writes": single_writes}


def _export_then_replace(folder: pathlib.Path, arrays: dict[str, jax.Array]) -> None:
    """A multi-file export, then its replacement: processes must agree on the new files' names by themselves."""
    index = folder / "again.safetensors.index.json"
    save_sharded_safetensors(index, arrays, overwrite=False, max_file_bytes=300)
    save_sharded_safetensors(
        index, arrays, overwrite=True, metadata={"round": "two"}, max_metadata_bytes=64, max_file_bytes=300
    )


def _body_export_killed(folder: str, victim: int) -> str:
    from tinax._weights._safetensors import _sharded_save

    if jax.process_index() == victim:
        real = _sharded_save._write_at
        count = [0]

        def dying(descriptor: int, view: memoryview, offset: int) -> None:
            real(descriptor, view, offset)
            count[0] += 1
            if count[0] == 2:  # Part of the file is written, the rest never will be.
                os.kill(os.getpid(), signal.SIGKILL)

        _sharded_save._write_at = dying  # type: ignore[assignment]
    save_sharded_safetensors(pathlib.Path(folder) / "model.safetensors", _global_arrays(), overwrite=True)
    return "finished"


# ---------------------------------------------------------------------------
# Tests, in the pytest process (which never starts the distributed runtime).


def run(body: Any, *args: object) -> list[Any]:
    return run_processes(body, num_processes=PROCESSES, devices_per_process=DEVICES_PER_PROCESS, args=args, timeout=240)


def test_each_process_reads_only_its_own_byte_ranges(tmp_path):
    source = source_tensors()
    path = tmp_path / "model.safetensors"
    save_safetensors(path, source, overwrite=False, metadata=METADATA, max_metadata_bytes=64)
    # The same tensors as a multi-file checkpoint of the index convention.
    index = tmp_path / "split.safetensors.index.json"
    weight_map = {}
    for number, names in enumerate((["rows", "cols", "both"], ["inner", "cols_inner", "replicated", "scaled"])):
        file_name = f"split-{number + 1:05d}-of-00002.safetensors"
        save_safetensors(tmp_path / file_name, {name: source[name] for name in names}, overwrite=False)
        weight_map.update(dict.fromkeys(names, file_name))
    index.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))

    results = run(_body_load, str(path), str(index))

    total = sum(array.nbytes for array in source.values())
    for result in results:
        for mesh in ("2x4", "4x2", "2x4-shard-by-shard"):
            outcome = result[mesh]
            assert outcome["values_ok"], (result["process"], mesh)
            assert outcome["bytes_read"] == outcome["counted"]
            for name, tensor in outcome["tensors"].items():
                assert tensor["own_ranges_only"], (result["process"], mesh, name)
            tensors = outcome["tensors"]
            # Split across the processes: each reads half, the strided columns included.
            for name in ("rows", "cols", "both", "scaled"):
                assert tensors[name]["read"] == tensors[name]["whole"] // 2, (mesh, name)
            # Held whole by every process (split only inside it, or replicated): read once per process.
            for name in ("inner", "cols_inner", "replicated"):
                assert tensors[name]["read"] == tensors[name]["whole"], (mesh, name)
            assert outcome["bytes_read"] < total
            message, reads_before_refusal = outcome["short_budget"]
            assert message.startswith("loading 7 tensors from")
            assert reads_before_refusal == 0
        assert result["index_ok"]
        assert result["index_bytes_read"] == result["2x4"]["bytes_read"]


def test_export_across_processes_is_byte_identical_to_a_gathered_save(tmp_path):
    source = source_tensors()
    results = run(_body_export, str(tmp_path))

    reference = tmp_path / "reference"
    reference.mkdir()
    save_safetensors(
        reference / "single.safetensors", source, overwrite=False, metadata=METADATA, max_metadata_bytes=64
    )
    assert (tmp_path / "single.safetensors").read_bytes() == (reference / "single.safetensors").read_bytes()

    # Every byte of the file was written exactly once, and by both processes together.
    size = (tmp_path / "single.safetensors").stat().st_size
    spans = sorted((offset, offset + length) for result in results for offset, length in result["writes"])
    cursor = 0
    for start, end in spans:
        assert start == cursor, (start, cursor)
        cursor = end
    assert cursor == size
    payload = [sum(length for offset, length in result["writes"] if offset) for result in results]
    assert all(0 < share < size for share in payload), payload

    # The multi-file export equals the same export made by one process holding all 8 devices.
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    arrays = {name: jax.device_put(array, shardings_on(mesh)[name]) for name, array in source.items()}
    save_sharded_safetensors(
        reference / "multi.safetensors.index.json",
        arrays,
        overwrite=False,
        metadata=METADATA,
        max_metadata_bytes=64,
        max_file_bytes=300,
    )
    written = sorted(path.name for path in reference.iterdir() if path.name.startswith("multi"))
    assert len(written) > 2
    for name in written:
        assert (tmp_path / name).read_bytes() == (reference / name).read_bytes(), name
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []

    # The replacement's files have the same tagged names and bytes as one
    # process's replacement, and only the new set is left.
    _export_then_replace(reference, arrays)
    replaced = sorted(path.name for path in reference.iterdir() if path.name.startswith("again"))
    assert replaced == sorted(path.name for path in tmp_path.iterdir() if path.name.startswith("again"))
    assert not any(name.startswith("again-0000") for name in replaced)
    for name in replaced:
        assert (tmp_path / name).read_bytes() == (reference / name).read_bytes(), name


@pytest.mark.parametrize(("victim", "old_file"), [(1, False), (0, True)], ids=["worker-no-old-file", "leader-old-file"])
def test_a_process_killed_mid_export_leaves_no_file_or_the_old_one(tmp_path, victim, old_file):
    destination = tmp_path / "model.safetensors"
    old = {"old": np.arange(4, dtype=np.int32)}
    if old_file:
        save_safetensors(destination, old, overwrite=False)
        before = destination.read_bytes()

    with pytest.raises(DistributedRunError) as failure:
        run(_body_export_killed, str(tmp_path), victim)

    reports = {report.process_id: report for report in failure.value.reports}
    assert reports[victim].returncode == -signal.SIGKILL
    assert not reports[victim].killed  # It died on its own, mid-export.
    if old_file:
        assert destination.read_bytes() == before
    else:
        assert not destination.exists()
    visible = [path.name for path in tmp_path.iterdir() if not path.name.startswith(".")]
    assert visible == (["model.safetensors"] if old_file else [])
    # The next write removes what the dead writers left.
    save_safetensors(destination, old, overwrite=True)
    assert [path.name for path in tmp_path.iterdir()] == ["model.safetensors"]
