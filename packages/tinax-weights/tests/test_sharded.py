"""load_sharded_safetensors and save_sharded_safetensors in one process over 8 CPU devices.

The multi-process behaviour (each process reading and writing only its own
shards, a killed export) is in test_sharded_multiprocess.py.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import importlib.util
import json
import math
import pathlib
import random
import tracemalloc
from typing import Any

import jax
import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from tinax.weights import (
    LoadedShardedSafetensors,
    TensorInfo,
    load_safetensors,
    load_sharded_safetensors,
    save_safetensors,
    save_sharded_safetensors,
)

MESHES = [pytest.param((8, 1), id="8x1"), pytest.param((2, 4), id="2x4"), pytest.param((4, 2), id="4x2")]

# Tensors of shape (8, 8) and (4, 8, 8), each under every kind of layout: along
# each axis, both axes, replicated, and partially replicated (split over one
# mesh axis, copied over the other).
SPECS_2D = {
    "rows_x": ("x", None),
    "rows_y": ("y", None),
    "cols_x": (None, "x"),
    "cols_y": (None, "y"),
    "both_xy": ("x", "y"),
    "both_yx": ("y", "x"),
    "rows_xy": (("x", "y"), None),
    "cols_xy": (None, ("x", "y")),
    "replicated": (),
}
SPECS_3D = {"middle_x": (None, "x", None), "last_y": (None, None, "y"), "first_and_last": ("y", None, "x")}

EXACT_DTYPES = {
    "BOOL": np.bool_,
    "U8": np.uint8,
    "I8": np.int8,
    "F8_E5M2": ml_dtypes.float8_e5m2,
    "F8_E4M3": ml_dtypes.float8_e4m3fn,
    "F8_E8M0": ml_dtypes.float8_e8m0fnu,
    "F8_E4M3FNUZ": ml_dtypes.float8_e4m3fnuz,
    "F8_E5M2FNUZ": ml_dtypes.float8_e5m2fnuz,
    "I16": np.int16,
    "U16": np.uint16,
    "F16": np.float16,
    "BF16": ml_dtypes.bfloat16,
    "I32": np.int32,
    "U32": np.uint32,
    "F32": np.float32,
    "C64": np.complex64,
    "F64": np.float64,
    "I64": np.int64,
    "U64": np.uint64,
}
WIDE = {"F64", "I64", "U64"}


def make_mesh(shape: tuple[int, int]) -> jax.sharding.Mesh:
    return jax.make_mesh(shape, ("x", "y"))


def values(shape: tuple[int, ...], dtype: Any, seed: int) -> np.ndarray:
    """Random bytes viewed as ``dtype``, NaN payloads included: every comparison is by bytes."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    raw = rng.integers(0, 256, size=(*shape, dtype.itemsize), dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def model(dtype: Any, seed: int = 0) -> dict[str, np.ndarray]:
    tensors = {name: values((8, 8), dtype, seed + index) for index, name in enumerate(SPECS_2D)}
    tensors.update({name: values((4, 8, 8), dtype, seed + 50 + index) for index, name in enumerate(SPECS_3D)})
    tensors["scalar"] = values((), dtype, seed + 99)
    tensors["empty"] = np.zeros((0, 8), dtype)
    return tensors


def shardings_for(mesh: jax.sharding.Mesh) -> dict[str, NamedSharding]:
    specs = {**SPECS_2D, **SPECS_3D, "scalar": (), "empty": (None, "y")}
    return {name: NamedSharding(mesh, PartitionSpec(*spec)) for name, spec in specs.items()}


def distinct_shard_bytes(array: np.ndarray, sharding: jax.sharding.Sharding) -> int:
    """What one process reads: the distinct shards its devices hold, each once."""
    boxes = {
        tuple(part.indices(extent)[:2] for part, extent in zip(index, array.shape, strict=True))
        for index in sharding.addressable_devices_indices_map(array.shape).values()
    }
    return sum(math.prod(stop - start for start, stop in box) * array.itemsize for box in boxes)


def x64(enabled: bool) -> contextlib.AbstractContextManager[Any]:
    return jax.enable_x64(True) if enabled else contextlib.nullcontext()


@pytest.fixture(params=["batched", "read-together", "shard-by-shard"])
def staging(request, monkeypatch):
    """Runs a test through each way of staging and placing shards.

    ``batched``: the defaults, which read these small tensors' local shards
    together and place them in one transfer; ``read-together``: shards that
    tile a box read together, placed one by one;
    ``shard-by-shard``: read and placed one shard at a time.
    """
    from tinax._weights._safetensors import _sharded_load

    if request.param in ("read-together", "shard-by-shard"):
        monkeypatch.setattr(_sharded_load, "BATCHED_PLACEMENT_BYTES", 0)
    if request.param == "shard-by-shard":
        monkeypatch.setattr(_sharded_load, "STAGING_BATCH_BYTES", 0)
    return request.param


@pytest.mark.parametrize("mesh_shape", MESHES)
@pytest.mark.parametrize("dtype_name", sorted(EXACT_DTYPES))
def test_every_layout_and_dtype_loads_exactly_and_exports_byte_identically(tmp_path, mesh_shape, dtype_name, staging):
    mesh = make_mesh(mesh_shape)
    source = model(EXACT_DTYPES[dtype_name])
    path = tmp_path / "model.safetensors"
    save_safetensors(path, source, overwrite=False)
    shardings = shardings_for(mesh)
    expected_read = sum(distinct_shard_bytes(source[name], shardings[name]) for name in source)
    with x64(dtype_name in WIDE):
        loaded = load_sharded_safetensors(path, shardings=shardings, max_bytes=expected_read)
        assert isinstance(loaded, LoadedShardedSafetensors)
        assert list(loaded.arrays) == list(shardings)
        for name, array in loaded.arrays.items():
            assert array.sharding == shardings[name], name
            assert array.dtype == source[name].dtype, name
            for shard in array.addressable_shards:
                assert np.asarray(shard.data).tobytes() == source[name][shard.index].tobytes(), (name, shard.device)
            assert np.asarray(array).tobytes() == source[name].tobytes(), name
            assert loaded.tensors[name] == TensorInfo(source[name].shape, source[name].dtype)
        # A replicated tensor is read once, not once per device.
        assert loaded.bytes_read == expected_read

        exported = tmp_path / "exported.safetensors"
        save_sharded_safetensors(exported, loaded.arrays, overwrite=False)
    assert exported.read_bytes() == path.read_bytes()


def test_the_budget_counts_this_process_reads_and_is_checked_before_any(tmp_path, monkeypatch):
    mesh = make_mesh((2, 4))
    source = model(np.float32)
    path = tmp_path / "model.safetensors"
    save_safetensors(path, source, overwrite=False)
    shardings = shardings_for(mesh)
    needed = sum(distinct_shard_bytes(source[name], shardings[name]) for name in source)
    assert needed == sum(array.nbytes for array in source.values())  # One process holds every shard.

    reads: list[int] = []
    from tinax._weights._safetensors import _sharded_load

    real = _sharded_load.read_payload
    monkeypatch.setattr(_sharded_load, "read_payload", lambda *a, **k: reads.append(1) or real(*a, **k))
    with pytest.raises(ValueError, match=rf"reads {needed} bytes.*max_bytes={needed - 1}") as caught:
        load_sharded_safetensors(path, shardings=shardings, max_bytes=needed - 1)
    assert "'rows_x'" in str(caught.value) or "tensor '" in str(caught.value)
    assert reads == []
    # A replicated tensor costs its size once, whatever the device count.
    one = load_sharded_safetensors(
        path, names=["replicated"], shardings={"replicated": shardings["replicated"]}, max_bytes=256
    )
    assert one.bytes_read == 256
    assert len(one.arrays["replicated"].addressable_shards) == 8


def test_shards_along_later_axes_are_read_row_by_row_not_whole(tmp_path, monkeypatch, staging):
    mesh = make_mesh((2, 4))
    tensor = np.arange(8 * 8, dtype=np.float32).reshape(8, 8)
    path = tmp_path / "model.safetensors"
    save_safetensors(path, {"w": tensor}, overwrite=False)
    from tinax._weights._safetensors import _sharded_load

    lengths: list[int] = []
    real = _sharded_load.read_payload

    def counting(handle: Any, destination: memoryview, offset: int, **names: str) -> None:
        lengths.append(destination.nbytes)
        real(handle, destination, offset, **names)

    monkeypatch.setattr(_sharded_load, "read_payload", counting)
    rows = {"w": NamedSharding(mesh, PartitionSpec("x"))}
    columns = {"w": NamedSharding(mesh, PartitionSpec(None, "y"))}
    if staging == "shard-by-shard":
        load_sharded_safetensors(path, shardings=rows, max_bytes=256)
        assert lengths == [128, 128]  # Two row blocks, one contiguous read each.
        lengths.clear()
        load_sharded_safetensors(path, shardings=columns, max_bytes=256)
        assert lengths == [8] * 32  # 4 column blocks of 8 rows, 2 floats per row.
    else:
        # Row blocks are one read each; column blocks, which tile the whole
        # tensor on this process, are read together in one run.
        load_sharded_safetensors(path, shardings=rows, max_bytes=256)
        load_sharded_safetensors(path, shardings=columns, max_bytes=256)
        assert lengths == [128, 128, 256]


def test_a_callable_chooses_each_sharding_from_the_description(tmp_path):
    mesh = make_mesh((4, 2))
    source = {"big": np.ones((8, 4), np.float32), "small": np.ones((3,), np.float32)}
    path = tmp_path / "model.safetensors"
    save_safetensors(path, source, overwrite=False)
    seen: list[tuple[str, TensorInfo]] = []

    def choose(name: str, info: TensorInfo) -> NamedSharding:
        seen.append((name, info))
        return NamedSharding(mesh, PartitionSpec("x") if info.shape[0] % 4 == 0 else PartitionSpec())

    loaded = load_sharded_safetensors(path, shardings=choose, max_bytes=1 << 20)
    assert sorted(seen) == [("big", TensorInfo((8, 4), "F32")), ("small", TensorInfo((3,), "F32"))]
    assert loaded.arrays["big"].sharding.spec == PartitionSpec("x")
    assert loaded.arrays["small"].sharding.spec == PartitionSpec()
    assert all(np.array_equal(np.asarray(loaded.arrays[name]), source[name]) for name in source)


def test_single_device_and_names_order(tmp_path):
    path = tmp_path / "model.safetensors"
    save_safetensors(path, {"a": np.arange(4, dtype=np.int32), "b": np.arange(3, dtype=np.int8)}, overwrite=False)
    device = jax.devices()[3]
    loaded = load_sharded_safetensors(
        path, names=["b", "a"], shardings=lambda name, info: SingleDeviceSharding(device), max_bytes=19
    )
    assert list(loaded.arrays) == ["b", "a"]
    assert loaded.arrays["a"].devices() == {device}
    assert loaded.bytes_read == 19


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"names": ["w", "nope"]}, ValueError, r"not found: 'nope'"),
        ({"names": ["w"], "shardings": {}}, ValueError, r"missing for \['w'\]"),
        ({"names": ["w"], "shardings": {"w": "rows", "x": None}}, ValueError, r"not loaded: \['x'\]"),
        ({"shardings": {"w": PartitionSpec("x")}}, TypeError, r"shardings\['w'\]"),
        ({"shardings": "x"}, TypeError, r"shardings"),
        ({"max_bytes": True}, TypeError, r"max_bytes"),
        ({"max_bytes": -1}, ValueError, r"max_bytes"),
        ({"names": "w"}, TypeError, r"names"),
    ],
)
def test_bad_arguments_are_refused_naming_them(tmp_path, kwargs, error, match):
    mesh = make_mesh((2, 4))
    path = tmp_path / "model.safetensors"
    save_safetensors(path, {"w": np.zeros((8, 8), np.float32)}, overwrite=False)
    arguments: dict[str, Any] = {"shardings": {"w": NamedSharding(mesh, PartitionSpec("x"))}, "max_bytes": 1 << 20}
    arguments.update(kwargs)
    if arguments["shardings"] == {"w": "rows", "x": None}:
        arguments["shardings"] = {"w": NamedSharding(mesh, PartitionSpec()), "x": NamedSharding(mesh, PartitionSpec())}
    with pytest.raises(error, match=match):
        load_sharded_safetensors(path, **arguments)


def test_a_sharding_that_does_not_divide_the_tensor_is_refused_naming_it(tmp_path):
    mesh = make_mesh((4, 2))
    path = tmp_path / "model.safetensors"
    save_safetensors(path, {"odd": np.zeros((6, 3), np.float32)}, overwrite=False)
    for spec in (PartitionSpec("x"), PartitionSpec(None, "y"), PartitionSpec(None, None, "x")):
        with pytest.raises(ValueError, match=r"shardings\['odd'\] does not fit tensor 'odd' of shape \(6, 3\)"):
            load_sharded_safetensors(path, shardings={"odd": NamedSharding(mesh, spec)}, max_bytes=1 << 20)


def test_dtypes_jax_would_change_are_refused(tmp_path):
    mesh = make_mesh((8, 1))
    path = tmp_path / "model.safetensors"
    save_safetensors(path, {"steps": np.arange(8, dtype=np.int64)}, overwrite=False)
    with pytest.raises(TypeError, match=r"'steps'.*I64.*jax_enable_x64"):
        load_sharded_safetensors(path, shardings=lambda *_: NamedSharding(mesh, PartitionSpec()), max_bytes=64)
    # A packed sub-byte tensor, described by a hand-written header.
    header = json.dumps({"packed": {"dtype": "F4", "shape": [4], "data_offsets": [0, 2]}}).encode()
    header += b" " * (-len(header) % 8)
    packed = tmp_path / "packed.safetensors"
    packed.write_bytes(len(header).to_bytes(8, "little") + header + b"\x12\x34")
    with pytest.raises(TypeError, match=r"'packed'.*F4"):
        load_sharded_safetensors(packed, shardings=lambda *_: NamedSharding(mesh, PartitionSpec()), max_bytes=64)


def test_missing_files_and_directories(tmp_path):
    mesh = make_mesh((8, 1))
    replicated = {"w": NamedSharding(mesh, PartitionSpec())}
    with pytest.raises(FileNotFoundError):
        load_sharded_safetensors(tmp_path / "absent.safetensors", shardings=replicated, max_bytes=1)
    with pytest.raises(IsADirectoryError):
        load_sharded_safetensors(tmp_path, shardings=replicated, max_bytes=1)


def _fuzz_module() -> Any:
    spec = importlib.util.spec_from_file_location(
        "_weights_fuzz", pathlib.Path(__file__).with_name("test_safetensors_fuzz.py")
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def outcome(call: Any) -> tuple[str, str] | dict[str, bytes]:
    """The error's type and message (type only for TypeError), or the loaded bytes."""
    try:
        result = call()
    except (ValueError, TypeError) as error:
        return type(error).__name__, str(error) if isinstance(error, ValueError) else ""
    arrays = result.tensors if hasattr(result, "tensors") and not hasattr(result, "arrays") else result.arrays
    return {name: np.asarray(array).tobytes() for name, array in arrays.items()}


def test_mutated_files_fail_exactly_as_load_safetensors_fails(tmp_path):
    """The sharded loader reads headers through the same validating reader: same errors, same values."""
    fuzz = _fuzz_module()
    rng = random.Random(2027)
    bases = fuzz.base_files(tmp_path)
    mutations = [
        fuzz.flip_header_bytes,
        fuzz.rewrite_length_field,
        fuzz.truncate,
        fuzz.extend,
        fuzz.mutate_entry,
        fuzz.mutate_structure,
        fuzz.corrupt_payload,
    ]
    device = jax.devices()[0]
    kinds = set()
    with jax.enable_x64(True):
        for case in range(300):
            path = tmp_path / f"case{case}.safetensors"
            path.write_bytes(rng.choice(mutations)(rng, rng.choice(bases)))
            plain = outcome(
                functools.partial(load_safetensors, path, max_bytes=1 << 30, max_metadata_bytes=fuzz.METADATA_LIMIT)
            )
            sharded = outcome(
                functools.partial(
                    load_sharded_safetensors,
                    path,
                    shardings=lambda *_: SingleDeviceSharding(device),
                    max_bytes=1 << 30,
                    max_metadata_bytes=fuzz.METADATA_LIMIT,
                )
            )
            assert sharded == plain, case
            kinds.add(type(plain).__name__)
    assert kinds == {"tuple", "dict"}


def test_errors_of_malformed_files_are_safetensor_errors(tmp_path):
    path = tmp_path / "bad.safetensors"
    path.write_bytes((4).to_bytes(8, "little") + b"{}  " + b"x")
    with pytest.raises(safetensors.SafetensorError, match="bad.safetensors"):
        load_sharded_safetensors(path, shardings={}, max_bytes=1)


# ---------------------------------------------------------------------------
# Multi-file checkpoints.


def write_upstream_checkpoint(folder: pathlib.Path, parts: list[dict[str, np.ndarray]]) -> pathlib.Path:
    """Writes the files with upstream safetensors and the index by hand, as Hugging Face tools lay them out."""
    weight_map = {}
    for number, tensors in enumerate(parts, start=1):
        name = f"model-{number:05d}-of-{len(parts):05d}.safetensors"
        safetensors.numpy.save_file(tensors, str(folder / name), metadata={"format": "np"})
        weight_map.update(dict.fromkeys(tensors, name))
    index = folder / "model.safetensors.index.json"
    total = sum(array.nbytes for tensors in parts for array in tensors.values())
    index.write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    return index


def test_reads_multi_file_checkpoints_of_the_index_convention(tmp_path):
    mesh = make_mesh((2, 4))
    parts = [
        {"embed": values((8, 8), np.float16, 1), "norm": values((8,), np.float32, 2)},
        {"head": values((8, 4), ml_dtypes.bfloat16, 3)},
    ]
    index = write_upstream_checkpoint(tmp_path, parts)
    shardings = {
        "embed": NamedSharding(mesh, PartitionSpec("x", "y")),
        "norm": NamedSharding(mesh, PartitionSpec()),
        "head": NamedSharding(mesh, PartitionSpec(None, "y")),
    }
    loaded = load_sharded_safetensors(index, shardings=shardings, max_bytes=1 << 20, max_metadata_bytes=64)
    source = {**parts[0], **parts[1]}
    for name, array in loaded.arrays.items():
        assert array.sharding == shardings[name]
        assert np.asarray(array).tobytes() == source[name].tobytes()
    assert loaded.bytes_read == sum(array.nbytes for array in source.values())


def test_index_problems_name_the_index_and_the_file(tmp_path):
    mesh = make_mesh((8, 1))
    replicated = lambda *_: NamedSharding(mesh, PartitionSpec())  # noqa: E731
    parts = [{"a": np.ones(2, np.float32)}, {"b": np.ones(3, np.float32)}]
    index = write_upstream_checkpoint(tmp_path, parts)
    document = json.loads(index.read_text())

    def load_with(weight_map: dict[str, str] | str) -> None:
        broken = tmp_path / "broken.safetensors.index.json"
        text = weight_map if isinstance(weight_map, str) else json.dumps({"weight_map": weight_map})
        broken.write_text(text)
        load_sharded_safetensors(broken, shardings=replicated, max_bytes=1 << 10, max_metadata_bytes=64)

    first, second = document["weight_map"]["a"], document["weight_map"]["b"]
    with pytest.raises(FileNotFoundError, match=r"broken\.safetensors\.index\.json.*'gone\.safetensors'") as missing:
        load_with({"a": first, "b": "gone.safetensors"})
    assert isinstance(missing.value, ValueError)
    with pytest.raises(ValueError, match=rf"tensor 'a' is in two files.*{first}.*{second}"):
        load_with(f'{{"weight_map": {{"a": "{first}", "b": "{second}", "a": "{second}"}}}}')
    safetensors.numpy.save_file({"a": np.ones(2, np.float32), "c": np.ones(1, np.float32)}, str(tmp_path / "third"))
    with pytest.raises(ValueError, match=rf"tensor 'a' is in two files: the index .* maps it to .*{first}.*third"):
        load_with({"a": first, "b": second, "c": "third"})
    with pytest.raises(ValueError, match=rf"maps tensor 'c' to .*{first}, which does not hold it"):
        load_with({"a": first, "b": second, "c": first})
    for escaping in ("../model.safetensors", "/etc/model.safetensors", ""):
        with pytest.raises(ValueError, match=r"weight_map\['a'\]"):
            load_with({"a": escaping})
    for not_an_index in ("[]", '{"weight_map": []}', "{", '{"weight_map": {"a": 3}}'):
        with pytest.raises(ValueError, match="not a valid safetensors index"):
            load_with(not_an_index)


def test_load_sharded_safetensors_reports_an_index_file_name_too_long_as_file_not_found_and_value_error(tmp_path):
    mesh = make_mesh((8, 1))
    parts = [{"a": np.ones(2, np.float32)}, {"b": np.ones(3, np.float32)}]
    index = write_upstream_checkpoint(tmp_path, parts)
    document = json.loads(index.read_text())
    too_long = "n" * 300 + ".safetensors"  # Beyond the 255 bytes a file system allows in a name.
    document["weight_map"]["b"] = too_long
    index.write_text(json.dumps(document))
    with pytest.raises(FileNotFoundError, match=r"the index .* maps 1 tensors \(first 'b'\) .*longer than") as caught:
        load_sharded_safetensors(
            index, shardings=lambda *_: NamedSharding(mesh, PartitionSpec()), max_bytes=1 << 10, max_metadata_bytes=64
        )
    assert isinstance(caught.value, ValueError)
    assert caught.value.errno == errno.ENAMETOOLONG
    assert caught.value.filename == str(tmp_path / too_long)
    assert isinstance(caught.value.__cause__, OSError)
    assert caught.value.__cause__.errno == errno.ENAMETOOLONG
    # The same name given directly is the same kind of error.
    with pytest.raises(FileNotFoundError) as direct:
        load_sharded_safetensors(tmp_path / too_long, shardings={}, max_bytes=1 << 10)
    assert type(direct.value) is type(caught.value)


# ---------------------------------------------------------------------------
# Export.


def test_multi_file_export_respects_the_limit_and_upstream_reads_it(tmp_path):
    mesh = make_mesh((4, 2))
    source = {f"layer{index}": values((8, 4), np.float32, index) for index in range(5)}
    source["bias"] = values((4,), ml_dtypes.bfloat16, 9)
    shardings = {
        name: NamedSharding(mesh, PartitionSpec("x", "y") if array.ndim == 2 else PartitionSpec())
        for name, array in source.items()
    }
    arrays = {name: jax.device_put(array, shardings[name]) for name, array in source.items()}
    index = tmp_path / "model.safetensors.index.json"
    save_sharded_safetensors(
        index, arrays, overwrite=False, max_file_bytes=300, metadata={"format": "np"}, max_metadata_bytes=64
    )
    document = json.loads(index.read_text())
    files = sorted({*document["weight_map"].values()})
    # 128-byte float32 tensors, two to a file, then the bfloat16 one with the last.
    assert files == [f"model-0000{number}-of-00003.safetensors" for number in range(1, 4)]
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([*files, index.name])
    assert document["metadata"] == {"total_size": sum(array.nbytes for array in source.values())}
    for file_name in files:
        path = tmp_path / file_name
        held = safetensors.numpy.load_file(str(path))
        assert sum(array.nbytes for array in held.values()) <= 300
        for name, array in held.items():
            assert document["weight_map"][name] == file_name
            assert array.tobytes() == source[name].tobytes()
        # Each file is the one save_safetensors writes for its tensors.
        alone = tmp_path.parent / f"alone-{file_name}"
        save_safetensors(
            alone,
            {name: source[name] for name in held},
            overwrite=False,
            metadata={"format": "np"},
            max_metadata_bytes=64,
        )
        assert alone.read_bytes() == path.read_bytes()
    with safetensors.safe_open(str(tmp_path / files[0]), framework="numpy") as reader:
        assert reader.metadata() == {"format": "np"}
    back = load_sharded_safetensors(index, shardings=shardings, max_bytes=1 << 20, max_metadata_bytes=64)
    assert all(np.asarray(back.arrays[name]).tobytes() == source[name].tobytes() for name in source)


def test_a_tensor_larger_than_the_limit_gets_its_own_file(tmp_path):
    arrays = {"big": jax.numpy.ones((64,), np.float32), "small": jax.numpy.ones((2,), np.float32)}
    index = tmp_path / "m.safetensors.index.json"
    save_sharded_safetensors(index, arrays, overwrite=False, max_file_bytes=100)
    weight_map = json.loads(index.read_text())["weight_map"]
    assert weight_map == {"big": "m-00001-of-00002.safetensors", "small": "m-00002-of-00002.safetensors"}


def _checkpoint_files(folder: pathlib.Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def test_replacing_a_multi_file_export_swaps_the_whole_set_at_once(tmp_path):
    mesh = make_mesh((2, 4))
    rows = NamedSharding(mesh, PartitionSpec("x", "y"))
    first = {f"w{index}": jax.device_put(values((8, 4), np.float32, index), rows) for index in range(3)}
    second = {name: array * 2 for name, array in first.items()}
    index = tmp_path / "model.safetensors.index.json"
    save_sharded_safetensors(index, first, overwrite=False, max_file_bytes=128)
    old_files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    assert old_files == [f"model-0000{number}-of-00003.safetensors" for number in range(1, 4)]

    save_sharded_safetensors(index, second, overwrite=True, max_file_bytes=128)
    new_files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    # New names, so no file of the old set was ever overwritten in place.
    assert not set(new_files) & set(old_files)
    assert all(name.startswith("model-") and name.endswith("-of-00003.safetensors") for name in new_files)
    # The old set is gone once the new index is in place.
    assert _checkpoint_files(tmp_path) == sorted([index.name, *new_files])
    loaded = load_sharded_safetensors(index, shardings=dict.fromkeys(second, rows), max_bytes=1 << 20)
    assert all(np.array_equal(np.asarray(loaded.arrays[name]), np.asarray(second[name])) for name in second)
    for name in new_files:
        assert safetensors.numpy.load_file(str(tmp_path / name))

    # A third export replaces the second set the same way.
    save_sharded_safetensors(index, first, overwrite=True, max_file_bytes=128)
    third_files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    assert not set(third_files) & set(new_files)
    assert _checkpoint_files(tmp_path) == sorted([index.name, *third_files])


def test_a_replacement_that_fails_midway_leaves_the_old_checkpoint_whole(tmp_path, monkeypatch):
    from tinax._weights._safetensors import _sharded_save

    mesh = make_mesh((4, 2))
    rows = NamedSharding(mesh, PartitionSpec("x"))
    first = {f"w{index}": jax.device_put(values((8, 4), np.float32, index), rows) for index in range(3)}
    index = tmp_path / "model.safetensors.index.json"
    save_sharded_safetensors(index, first, overwrite=False, max_file_bytes=128)
    old_index = index.read_bytes()
    old_bytes = {name: (tmp_path / name).read_bytes() for name in _checkpoint_files(tmp_path)}

    written: list[pathlib.Path] = []
    real_write_file = _sharded_save._write_file

    def failing_after_one_file(destination, *arguments, **keywords):
        if written:
            raise OSError("disk full")
        real_write_file(destination, *arguments, **keywords)
        written.append(destination)

    monkeypatch.setattr(_sharded_save, "_write_file", failing_after_one_file)
    with pytest.raises(OSError, match="disk full"):
        save_sharded_safetensors(
            index, {name: array + 1 for name, array in first.items()}, overwrite=True, max_file_bytes=128
        )
    monkeypatch.undo()

    # The old index and every file it names are untouched, so it loads exactly.
    assert index.read_bytes() == old_index
    assert all((tmp_path / name).read_bytes() == content for name, content in old_bytes.items())
    loaded = load_sharded_safetensors(index, shardings=dict.fromkeys(first, rows), max_bytes=1 << 20)
    assert all(np.array_equal(np.asarray(loaded.arrays[name]), np.asarray(first[name])) for name in first)
    # What the failed export wrote is one complete file that no index names.
    (orphan,) = set(_checkpoint_files(tmp_path)) - set(old_bytes)
    assert orphan == written[0].name


def test_export_refusals(tmp_path):
    mesh = make_mesh((2, 4))
    array = jax.device_put(np.ones((8, 8), np.float32), NamedSharding(mesh, PartitionSpec("x", "y")))
    path = tmp_path / "model.safetensors"
    save_sharded_safetensors(path, {"w": array}, overwrite=False)
    before = path.read_bytes()
    with pytest.raises(FileExistsError):
        save_sharded_safetensors(path, {"w": array * 2}, overwrite=False)
    assert path.read_bytes() == before
    save_sharded_safetensors(path, {"w": array * 2}, overwrite=True)
    assert load_safetensors(path, max_bytes=256).tensors["w"].tolist() == (np.ones((8, 8)) * 2).tolist()
    with pytest.raises(TypeError, match=r"arrays\['w'\].*save_safetensors"):
        save_sharded_safetensors(tmp_path / "n.safetensors", {"w": np.ones(2)}, overwrite=False)
    with pytest.raises(TypeError, match=r"arrays\['k'\]"):
        save_sharded_safetensors(tmp_path / "n.safetensors", {"k": jax.random.key(0)}, overwrite=False)
    with pytest.raises(ValueError, match=r"\.safetensors\.index\.json"):
        save_sharded_safetensors(tmp_path / "n.json", {"w": array}, overwrite=False, max_file_bytes=10)
    with pytest.raises(ValueError, match="max_file_bytes"):
        save_sharded_safetensors(tmp_path / "n.safetensors.index.json", {"w": array}, overwrite=False, max_file_bytes=0)
    with pytest.raises(ValueError, match="max_metadata_bytes"):
        save_sharded_safetensors(tmp_path / "n.safetensors", {"w": array}, overwrite=False, metadata={"a": "b"})
    (tmp_path / "link.safetensors").symlink_to(path)
    with pytest.raises(ValueError, match="symbolic link"):
        save_sharded_safetensors(tmp_path / "link.safetensors", {"w": array}, overwrite=True)
    deleted = jax.numpy.ones(3)
    deleted.delete()
    with pytest.raises(ValueError, match=r"arrays\['d'\]"):
        save_sharded_safetensors(tmp_path / "n.safetensors", {"d": deleted}, overwrite=False)
    with pytest.raises(TypeError, match=r"arrays\['t'\]"):
        jax.jit(lambda x: save_sharded_safetensors(tmp_path / "n.safetensors", {"t": x}, overwrite=False))(array)
    index = tmp_path / "m.safetensors.index.json"
    (tmp_path / "m-00001-of-00001.safetensors").write_bytes(b"occupied")
    with pytest.raises(FileExistsError):
        save_sharded_safetensors(index, {"w": array}, overwrite=False, max_file_bytes=1 << 20)
    assert not index.exists()
    assert sorted(path.name for path in tmp_path.iterdir() if not path.name.startswith(".")) == [
        "link.safetensors",
        "m-00001-of-00001.safetensors",
        "model.safetensors",
    ]
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []


@pytest.mark.parametrize("batch", [0, 1 << 20, 8 << 20])
def test_staging_memory_is_one_shard_not_the_model(tmp_path, monkeypatch, batch):
    """Host allocations above the arrays' own bytes stay within one shard or the batch (traced by tracemalloc)."""
    from tinax._weights._safetensors import _sharded_load

    monkeypatch.setattr(_sharded_load, "STAGING_BATCH_BYTES", batch)
    monkeypatch.setattr(_sharded_load, "BATCHED_PLACEMENT_BYTES", min(batch, 256 << 10))
    mesh = make_mesh((8, 1))
    tensor = np.arange(1024 * 1024, dtype=np.float32).reshape(1024, 1024)  # 4 MiB, shards of 512 KiB.
    path = tmp_path / "model.safetensors"
    save_safetensors(path, {"w": tensor}, overwrite=False)
    del tensor
    sharding = {"w": NamedSharding(mesh, PartitionSpec("x"))}
    shard = 512 * 1024
    tracemalloc.start()
    try:
        loaded = load_sharded_safetensors(path, shardings=sharding, max_bytes=4 << 20)
        _, load_peak = tracemalloc.get_traced_memory()
        resident, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        save_sharded_safetensors(tmp_path / "out.safetensors", loaded.arrays, overwrite=False)
        _, save_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Staging buffers that a device keeps count as the arrays' own bytes.
    assert load_peak <= resident + max(shard, batch) + (256 << 10)
    assert save_peak - resident <= shard + (256 << 10)
    assert (tmp_path / "out.safetensors").read_bytes() == path.read_bytes()
