"""inspect_safetensors, load_safetensors and save_safetensors against real files and the upstream library."""

from __future__ import annotations

import json
import os
import pathlib
import pickle
import struct
from typing import Any

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
from safetensors import SafetensorError, safe_open

import tinax.weights
from tinax._weights._safetensors._files import _bounded_pieces
from tinax.weights import (
    LoadedSafetensors,
    SafetensorsInfo,
    TensorInfo,
    inspect_safetensors,
    load_safetensors,
    save_safetensors,
)
from tinax_testing import import_side_effects, parameter_summary

# Every safetensors dtype with an exact array type, and that type.
EXACT_DTYPES = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype(np.uint8),
    "I8": np.dtype(np.int8),
    "U16": np.dtype(np.uint16),
    "I16": np.dtype(np.int16),
    "U32": np.dtype(np.uint32),
    "I32": np.dtype(np.int32),
    "U64": np.dtype(np.uint64),
    "I64": np.dtype(np.int64),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F32": np.dtype(np.float32),
    "F64": np.dtype(np.float64),
    "C64": np.dtype(np.complex64),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "F8_E8M0": np.dtype(ml_dtypes.float8_e8m0fnu),
    "F8_E4M3FNUZ": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "F8_E5M2FNUZ": np.dtype(ml_dtypes.float8_e5m2fnuz),
}
# The ones upstream's NumPy loader can return (it fails on the float8 types).
UPSTREAM_NUMPY_LOADABLE = [name for name in EXACT_DTYPES if not name.startswith("F8")]


def random_array(dtype: np.dtype[Any], shape: tuple[int, ...], seed: int = 0) -> np.ndarray[Any, Any]:
    """Arbitrary bit patterns (NaNs and infinities included) of ``dtype``; 0/1 for bool."""
    rng = np.random.default_rng(seed)
    count = int(np.prod(shape))
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    return rng.integers(0, 256, size=count * dtype.itemsize, dtype=np.uint8).view(dtype).reshape(shape)


def assert_bit_identical(actual: np.ndarray[Any, Any], expected: np.ndarray[Any, Any]) -> None:
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert np.ascontiguousarray(actual).tobytes() == np.ascontiguousarray(expected).tobytes()


def raw_file(
    path: pathlib.Path, header: dict[str, Any] | bytes, payload: bytes = b"", length: int | None = None
) -> None:
    """Writes a safetensors file by hand, well-formed or not."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + payload)


def entry(dtype: str, shape: list[int], start: int, end: int) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [start, end]}


# --- public surface ---------------------------------------------------------------------------------------------


def test_public_names() -> None:
    for name in ["LoadedSafetensors", "SafetensorsInfo", "TensorInfo", "inspect_safetensors", "load_safetensors",
                 "save_safetensors"]:  # fmt: skip
        assert name in tinax.weights.__all__
    assert tinax.weights.__all__ == sorted(tinax.weights.__all__)


@pytest.mark.parametrize(
    ("name", "parameters"),
    [
        ("inspect_safetensors", [("path", "POSITIONAL_OR_KEYWORD", None), ("max_metadata_bytes", "KEYWORD_ONLY", 0)]),
        ("load_safetensors", [("path", "POSITIONAL_OR_KEYWORD", None), ("max_bytes", "KEYWORD_ONLY", None),
                              ("names", "KEYWORD_ONLY", None), ("max_metadata_bytes", "KEYWORD_ONLY", 0)]),
        ("save_safetensors", [("path", "POSITIONAL_OR_KEYWORD", None), ("tensors", "POSITIONAL_OR_KEYWORD", None),
                              ("overwrite", "KEYWORD_ONLY", None), ("metadata", "KEYWORD_ONLY", None),
                              ("max_metadata_bytes", "KEYWORD_ONLY", 0)]),
        ("TensorInfo", [("shape", "POSITIONAL_OR_KEYWORD", None), ("dtype", "POSITIONAL_OR_KEYWORD", None),
                        ("data_offsets", "POSITIONAL_OR_KEYWORD", None)]),
        ("SafetensorsInfo", [("tensors", "POSITIONAL_OR_KEYWORD", None), ("metadata", "POSITIONAL_OR_KEYWORD", None)]),
        ("LoadedSafetensors", [("tensors", "POSITIONAL_OR_KEYWORD", None), ("info", "POSITIONAL_OR_KEYWORD", None)]),
    ],
)  # fmt: skip
def test_signatures_match_the_compatible_surface(name: str, parameters: list[tuple[str, str, object]]) -> None:
    assert parameter_summary(getattr(tinax.weights, name)) == parameters


def test_importing_the_module_is_inert() -> None:
    assert import_side_effects("tinax.weights") == {"backends_initialized": False, "integrations": []}
    # Neither the safetensors package (imported only to raise its error type) nor msgpack.
    assert import_side_effects("tinax.weights", watched=["safetensors", "msgpack", "flax"])["integrations"] == []


def test_tensor_info_is_frozen_and_normalises_its_fields() -> None:
    info = TensorInfo([2, 3], np.dtype(np.float32), data_offsets=[0, 24])  # type: ignore[arg-type]
    assert info.shape == (2, 3)
    assert info.data_offsets == (0, 24)
    assert info.nbytes == 24
    with pytest.raises(AttributeError):
        info.shape = (1,)  # type: ignore[misc]
    assert TensorInfo((2,), ml_dtypes.bfloat16).dtype == np.dtype(ml_dtypes.bfloat16)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="dtype must be a safetensors dtype name"):
        TensorInfo((2,), object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shape"):
        TensorInfo((-1,), np.dtype(np.float32))
    with pytest.raises(TypeError, match=r"shape\[0\]"):
        TensorInfo((True,), np.dtype(np.float32))
    with pytest.raises(ValueError, match="start <= end"):
        TensorInfo((1,), np.dtype(np.float32), data_offsets=(4, 0))


def test_tensor_info_dtype_is_the_safetensors_name_and_equals_the_numpy_type() -> None:
    # tinax 0.2 described dtypes by their safetensors names; the name still works
    # both ways, and the exact NumPy type is equal to it too.
    by_name = TensorInfo((2, 3), "F32")
    by_numpy = TensorInfo((2, 3), np.dtype(np.float32))
    assert by_name == by_numpy
    assert hash(by_name) == hash(by_numpy)
    dtype = by_numpy.dtype
    assert isinstance(dtype, str)
    assert dtype == "F32"
    assert "F32" == dtype  # noqa: SIM300 - the reflected comparison is the point.
    assert dtype != "F64"
    assert dtype == np.dtype(np.float32)
    assert np.dtype(np.float32) == dtype
    assert dtype == np.float32
    assert dtype == np.dtype(">f4")  # A description, whatever the byte order.
    assert dtype != np.dtype(np.float64)
    assert dtype != 4
    assert hash(dtype) == hash("F32")
    assert {"F32": "found"}[dtype] == "found"
    assert dtype in {"F32"}
    assert repr(dtype) == "'F32'"
    assert json.dumps({"dtype": dtype}) == '{"dtype": "F32"}'
    assert pickle.loads(pickle.dumps(dtype)) == "F32"
    assert by_name.numpy_dtype == np.dtype(np.float32)
    assert TensorInfo((2,), "BF16").dtype == np.dtype(ml_dtypes.bfloat16)
    assert TensorInfo((2,), "BF16").numpy_dtype == np.dtype(ml_dtypes.bfloat16)
    assert TensorInfo((2,), ml_dtypes.float8_e4m3fn).dtype == "F8_E4M3"  # type: ignore[arg-type]
    # "U8" is uint8 here; NumPy would read the bare name as a text type.
    assert TensorInfo((2,), "U8").numpy_dtype == np.dtype(np.uint8)
    assert TensorInfo((2,), "U8").nbytes == 2


def test_tensor_info_equality_ignores_where_the_data_lies() -> None:
    assert TensorInfo((2,), "F32", (0, 8)) == TensorInfo((2,), "F32", (8, 16)) == TensorInfo((2,), "F32")
    assert len({TensorInfo((2,), "F32", (0, 8)), TensorInfo((2,), "F32")}) == 1
    assert TensorInfo((2,), "F32") != TensorInfo((2,), "I32")
    assert TensorInfo((2,), "F32") != TensorInfo((1, 2), "F32")


def test_tensor_info_accepts_every_safetensors_name_and_refuses_others() -> None:
    for name, dtype in EXACT_DTYPES.items():
        info = TensorInfo((3,), name)
        assert info.dtype == name
        assert info.numpy_dtype == dtype
        assert info.nbytes == 3 * dtype.itemsize
    # Packed sub-byte types can be described (headers may hold them) but have no array type.
    assert TensorInfo((4,), "F4").nbytes == 2
    assert TensorInfo((4,), "F6_E2M3").nbytes == 3
    assert TensorInfo((4,), "F6_E3M2").numpy_dtype is None
    with pytest.raises(ValueError, match="fill whole bytes"):
        TensorInfo((3,), "F4")
    with pytest.raises(ValueError, match="fill whole bytes"):
        TensorInfo((2,), "F6_E2M3")
    for unknown in ("f32", "float32", "C128", "", "I4"):
        with pytest.raises(ValueError, match="safetensors dtype name"):
            TensorInfo((1,), unknown)
    for not_a_dtype in (None, True, 4, object()):
        with pytest.raises(TypeError, match="safetensors dtype name"):
            TensorInfo((1,), not_a_dtype)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="safetensors dtype name"):
        TensorInfo((1,), np.dtype(np.complex128))


def test_safetensors_info_validates_and_totals_its_tensors() -> None:
    info = SafetensorsInfo({"b": TensorInfo((2,), "F32"), "a": TensorInfo((3,), "BF16")}, None)  # type: ignore[arg-type]
    assert info.metadata == {}
    assert info.total_bytes == info.nbytes == 14
    assert SafetensorsInfo({}, {"k": "v"}).total_bytes == 0
    with pytest.raises(TypeError, match=r"tensors\['v'\] must be a TensorInfo"):
        SafetensorsInfo({"v": 1}, {})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="tensors must be a mapping"):
        SafetensorsInfo([], {})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="keys of tensors must be str"):
        SafetensorsInfo({1: TensorInfo((1,), "F32")}, {})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"metadata\['k'\] must be a str"):
        SafetensorsInfo({}, {"k": 1})  # type: ignore[dict-item]


def test_loaded_safetensors_checks_its_tensors_against_its_info() -> None:
    info = SafetensorsInfo({"value": TensorInfo((2,), "F32"), "half": TensorInfo((1,), "BF16")}, {"k": "v"})
    loaded = LoadedSafetensors({"value": np.ones(2, np.float32)}, info)
    assert loaded.metadata == {"k": "v"}
    assert LoadedSafetensors({}, info).tensors == {}
    assert LoadedSafetensors({"half": np.ones(1, ml_dtypes.bfloat16)}, info).tensors["half"].dtype == "bfloat16"
    with pytest.raises(ValueError, match="absent"):
        LoadedSafetensors({"other": np.ones(2, np.float32)}, info)
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        LoadedSafetensors({"value": np.ones(3, np.float32)}, info)
    with pytest.raises(ValueError, match=r"shape \(2,\)"):  # The shape is checked first, as tinax 0.2 did.
        LoadedSafetensors({"value": np.ones(3, np.int32)}, info)
    with pytest.raises(TypeError, match="dtype float32"):
        LoadedSafetensors({"value": np.ones(2, np.int32)}, info)
    with pytest.raises(TypeError, match="dtype float32"):
        LoadedSafetensors({"value": np.ones(2, ">f4")}, info)
    with pytest.raises(TypeError, match="must be a numpy.ndarray"):
        LoadedSafetensors({"value": [1.0, 1.0]}, info)  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="info must be a SafetensorsInfo"):
        LoadedSafetensors({}, {})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tensors must be a mapping"):
        LoadedSafetensors([], info)  # type: ignore[arg-type]
    packed = SafetensorsInfo({"p": TensorInfo((2,), "F4")}, {})
    with pytest.raises(TypeError, match="no array type"):
        LoadedSafetensors({"p": np.zeros(2, np.uint8)}, packed)


# --- round trips ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 3), (2, 0, 4), (3, 1, 2, 2)])
def test_every_dtype_round_trips_bit_for_bit(tmp_path: pathlib.Path, shape: tuple[int, ...]) -> None:
    tensors = {f"t_{name}": random_array(dtype, shape, seed) for seed, (name, dtype) in enumerate(EXACT_DTYPES.items())}
    path = tmp_path / "all.safetensors"
    save_safetensors(path, tensors, overwrite=False)
    loaded = load_safetensors(path, max_bytes=sum(array.nbytes for array in tensors.values()))
    assert set(loaded.tensors) == set(tensors)
    for name, array in tensors.items():
        assert_bit_identical(loaded.tensors[name], array)
        assert loaded.info.tensors[name] == TensorInfo(shape, array.dtype, loaded.info.tensors[name].data_offsets)
    # The header lists the stored safetensors dtype names.
    header_length = struct.unpack("<Q", path.read_bytes()[:8])[0]
    header = json.loads(path.read_bytes()[8 : 8 + header_length])
    assert {name: header[f"t_{name}"]["dtype"] for name in EXACT_DTYPES} == {name: name for name in EXACT_DTYPES}


def test_float8_special_values_survive(tmp_path: pathlib.Path) -> None:
    tensors = {
        "e4m3": np.array([0.0, -0.0, 1.5, 448.0, -448.0, np.nan], dtype=ml_dtypes.float8_e4m3fn),
        "e5m2": np.array([np.inf, -np.inf, np.nan, 57344.0, 2.0**-16], dtype=ml_dtypes.float8_e5m2),
        "bf16": np.array([np.inf, -np.inf, np.nan, 3.0e38, 1.0e-38], dtype=ml_dtypes.bfloat16),
    }
    path = tmp_path / "special.safetensors"
    save_safetensors(path, tensors, overwrite=False)
    loaded = load_safetensors(path, max_bytes=1024).tensors
    for name, array in tensors.items():
        assert_bit_identical(loaded[name], array)


def test_loaded_arrays_are_writable_owned_and_independent(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "w.safetensors"
    save_safetensors(path, {"a": np.arange(4.0), "b": np.arange(4.0) + 10}, overwrite=False)
    loaded = load_safetensors(path, max_bytes=64).tensors
    for array in loaded.values():
        assert array.flags.writeable
        assert array.flags.owndata
        assert array.base is None
    assert not np.shares_memory(loaded["a"], loaded["b"])
    loaded["a"][:] = -1.0
    assert np.array_equal(loaded["b"], np.arange(4.0) + 10)
    assert np.array_equal(load_safetensors(path, max_bytes=64).tensors["a"], np.arange(4.0))


def test_selection_is_returned_in_the_order_asked_and_info_covers_the_whole_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.safetensors"
    tensors = {name: np.full((3,), index, dtype=np.int32) for index, name in enumerate(["w", "x", "y", "z"])}
    save_safetensors(path, tensors, overwrite=False)
    loaded = load_safetensors(path, max_bytes=24, names=iter(["z", "x"]))
    assert isinstance(loaded, LoadedSafetensors)
    assert list(loaded.tensors) == ["z", "x"]
    assert np.array_equal(loaded.tensors["z"], tensors["z"])
    assert list(loaded.info.tensors) == ["w", "x", "y", "z"]
    assert load_safetensors(path, max_bytes=0, names=[]).tensors == {}


@pytest.mark.parametrize(
    "make_view",
    [
        lambda base: base.T,
        lambda base: base[:, ::2],
        lambda base: base[::-1, 1:],
        lambda base: np.asfortranarray(base),
        lambda base: base.reshape(4, 6, 5).transpose(2, 0, 1)[:, 1:3],
        lambda base: np.broadcast_to(base[:1], base.shape),
    ],
    ids=["transpose", "strided", "reversed", "fortran", "3d-transposed-slice", "broadcast"],
)
def test_non_contiguous_arrays_store_their_logical_values(tmp_path: pathlib.Path, make_view: Any) -> None:
    # Upstream's writer stores the raw memory of such arrays (safetensors#825); ours stores the values.
    base = np.arange(120, dtype=np.float32).reshape(12, 10)
    view = make_view(base)
    assert not view.flags.c_contiguous
    path = tmp_path / "view.safetensors"
    save_safetensors(path, {"view": view}, overwrite=False)
    loaded = load_safetensors(path, max_bytes=view.nbytes).tensors["view"]
    assert np.array_equal(loaded, view)
    # Upstream reads the same values back from our file.
    assert np.array_equal(safetensors.numpy.load_file(path)["view"], view)
    assert np.array_equal(base, np.arange(120, dtype=np.float32).reshape(12, 10))


def test_a_large_transposed_array_is_written_in_pieces_with_its_values(tmp_path: pathlib.Path) -> None:
    # Larger than the 16 MiB conversion piece, so the piecewise path runs.
    base = np.arange(4200 * 1100, dtype=np.float32).reshape(4200, 1100)
    path = tmp_path / "big.safetensors"
    save_safetensors(path, {"t": base.T, "s": base[::3, ::-2]}, overwrite=False)
    loaded = load_safetensors(path, max_bytes=base.nbytes * 2).tensors
    assert np.array_equal(loaded["t"], base.T)
    assert np.array_equal(loaded["s"], base[::3, ::-2])


@pytest.mark.parametrize(
    "shape_and_view",
    [((7, 5), lambda a: a.T), ((64,), lambda a: a[::3]), ((3, 40, 2), lambda a: a.transpose(1, 2, 0)), ((), None)],
)
def test_bounded_pieces_concatenate_to_the_c_order_bytes(shape_and_view: Any) -> None:
    shape, make_view = shape_and_view
    base = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    array = base if make_view is None else make_view(base)
    for limit in (8, 24, 40, 1000, 10**9):
        pieces = list(_bounded_pieces(array, limit))
        assert b"".join(np.ascontiguousarray(piece).tobytes() for piece in pieces) == array.tobytes(order="C")
        assert all(piece.nbytes <= max(limit, array.itemsize) for piece in pieces)


@pytest.mark.parametrize("dtype", [">f4", ">i8", ">u2", ">c8", ">f8", "<f4"])
def test_big_endian_arrays_are_stored_little_endian_and_left_untouched(tmp_path: pathlib.Path, dtype: str) -> None:
    array = (np.arange(12).reshape(3, 4) * 3 + 1).astype(dtype)
    snapshot = array.copy()
    path = tmp_path / "endian.safetensors"
    save_safetensors(path, {"x": array, "xt": array.T}, overwrite=False)
    assert array.tobytes() == snapshot.tobytes()
    loaded = load_safetensors(path, max_bytes=2 * array.nbytes).tensors
    native = np.dtype(dtype).newbyteorder("=")
    assert loaded["x"].dtype == native
    assert np.array_equal(loaded["x"], array)
    assert np.array_equal(loaded["xt"], array.T)
    assert np.array_equal(safetensors.numpy.load_file(path)["x"], array)


# --- compatibility with the upstream library --------------------------------------------------------------------


def upstream_tensors() -> dict[str, np.ndarray[Any, Any]]:
    return {f"t_{name}": random_array(dtype, (3, 2), seed) for seed, (name, dtype) in enumerate(EXACT_DTYPES.items())}


def test_upstream_reads_what_we_write(tmp_path: pathlib.Path) -> None:
    tensors = upstream_tensors()
    path = tmp_path / "ours.safetensors"
    save_safetensors(
        path, tensors, overwrite=False, metadata={"format": "np", "note": "ünïcode"}, max_metadata_bytes=64
    )
    loadable = {f"t_{name}" for name in UPSTREAM_NUMPY_LOADABLE}
    with safe_open(path, framework="numpy") as reader:
        assert reader.metadata() == {"format": "np", "note": "ünïcode"}
        assert set(reader.keys()) == set(tensors)
        for name in loadable:
            assert_bit_identical(reader.get_tensor(name), tensors[name])
        for name, array in tensors.items():
            assert list(reader.get_slice(name).get_shape()) == list(array.shape)


def test_upstream_load_file_reads_what_we_write(tmp_path: pathlib.Path) -> None:
    tensors = {name: array for name, array in upstream_tensors().items() if name[2:] in UPSTREAM_NUMPY_LOADABLE}
    path = tmp_path / "ours.safetensors"
    save_safetensors(path, tensors, overwrite=False)
    upstream = safetensors.numpy.load_file(path)
    assert set(upstream) == set(tensors)
    for name, array in tensors.items():
        assert_bit_identical(upstream[name], array)


def test_we_read_what_upstream_writes_including_float8(tmp_path: pathlib.Path) -> None:
    tensors = upstream_tensors()
    path = tmp_path / "upstream.safetensors"
    safetensors.numpy.save_file(tensors, path, metadata={"origin": "upstream"})
    loaded = load_safetensors(path, max_bytes=10**6, max_metadata_bytes=64)
    assert loaded.info.metadata == {"origin": "upstream"}
    for name, array in tensors.items():
        assert_bit_identical(loaded.tensors[name], array)


def test_our_bytes_equal_upstream_bytes(tmp_path: pathlib.Path) -> None:
    tensors = upstream_tensors()
    tensors["empty"] = np.zeros((0, 3), dtype=np.float32)
    tensors["scalar"] = np.full((), 7, dtype=np.int16)
    tensors["ünï"] = np.ones((2,), dtype=np.float64)
    for index, metadata in enumerate([None, {}, {"only": "one entry"}]):
        ours, theirs = tmp_path / f"ours-{index}", tmp_path / f"theirs-{index}"
        save_safetensors(ours, tensors, overwrite=False, metadata=metadata, max_metadata_bytes=64)
        # Upstream stores an empty mapping; tinax 0.2 (and so tinax) stores none.
        safetensors.numpy.save_file(tensors, theirs, metadata=metadata or None)
        assert ours.read_bytes() == theirs.read_bytes()


def test_multi_entry_metadata_matches_upstream_up_to_entry_order(tmp_path: pathlib.Path) -> None:
    # The upstream writer keeps metadata in a hash map, so the order of its
    # entries varies from process to process; everything else is identical.
    tensors = {"a": np.arange(3, dtype=np.float32)}
    metadata = {"z": "1", "b": "2", "é": '"ü'}
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    save_safetensors(ours, tensors, overwrite=False, metadata=metadata, max_metadata_bytes=64)
    safetensors.numpy.save_file(tensors, theirs, metadata=metadata)
    ours_bytes, theirs_bytes = ours.read_bytes(), theirs.read_bytes()
    assert len(ours_bytes) == len(theirs_bytes)
    assert ours_bytes[:8] == theirs_bytes[:8]
    header_end = 8 + struct.unpack("<Q", ours_bytes[:8])[0]
    assert json.loads(ours_bytes[8:header_end]) == json.loads(theirs_bytes[8:header_end])
    assert ours_bytes[header_end:] == theirs_bytes[header_end:]


def test_upstream_quirks_that_are_still_valid_files_are_accepted(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "quirks.safetensors"
    header = b' {"__metadata__": null, "a": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}}\t\n '
    raw_file(path, header, struct.pack("<f", 2.5))
    info = inspect_safetensors(path)
    assert info.metadata == {}
    assert info.tensors == {"a": TensorInfo((), np.dtype(np.float32), (0, 4))}
    assert load_safetensors(path, max_bytes=4).tensors["a"] == np.float32(2.5)
    raw_file(path, {})
    assert inspect_safetensors(path) == SafetensorsInfo(tensors={}, metadata={})
    # Keys other than dtype, shape and data_offsets are ignored, as upstream ignores them.
    raw_file(path, {"a": {**entry("F32", [1], 0, 4), "strides": [1]}}, bytes(4))
    assert inspect_safetensors(path).tensors == {"a": TensorInfo((1,), "F32")}
    # A key repeated with the same value says one thing twice.
    raw_file(path, b'{"a": {"dtype": "F32", "dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', bytes(4))
    assert inspect_safetensors(path).tensors == {"a": TensorInfo((1,), "F32")}
    # Empty metadata is no metadata, so the default limit of 0 accepts it.
    raw_file(path, {"__metadata__": {}, "a": entry("F32", [1], 0, 4)}, bytes(4))
    assert inspect_safetensors(path).metadata == {}


def test_packed_sub_byte_tensors_are_described_but_not_loaded(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "packed.safetensors"
    raw_file(
        path,
        {"f4": entry("F4", [4], 0, 2), "f6": entry("F6_E2M3", [4], 2, 5), "x": entry("F32", [1], 8, 12),
         "pad": entry("U8", [3], 5, 8)},
        bytes(12),
    )  # fmt: skip
    info = inspect_safetensors(path)
    assert info.tensors["f4"] == TensorInfo((4,), "F4")
    assert info.tensors["f6"].nbytes == 3
    assert load_safetensors(path, max_bytes=4, names=["x"]).tensors["x"].dtype == np.float32
    with pytest.raises(TypeError, match="packed sub-byte"):
        load_safetensors(path, max_bytes=100)
    with pytest.raises(ValueError, match="max_bytes"):  # The budget is checked first.
        load_safetensors(path, max_bytes=1, names=["f4"])


# --- inspect ----------------------------------------------------------------------------------------------------


def test_inspect_reports_the_header_sorted_by_name(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "h.safetensors"
    header = {
        "a_second": entry("BF16", [2, 2], 8, 16),
        "__metadata__": {"k": "v"},
        "empty": entry("F8_E4M3", [0], 0, 0),
        "b_first": entry("I32", [2], 0, 8),
    }
    raw_file(path, header, bytes(16))
    info = inspect_safetensors(path, max_metadata_bytes=9)
    assert isinstance(info, SafetensorsInfo)
    # By name, as tinax 0.2 (and the upstream reader) listed them, not by offset.
    assert list(info.tensors) == ["a_second", "b_first", "empty"]
    assert list(load_safetensors(path, max_bytes=16, max_metadata_bytes=9).tensors) == list(info.tensors)
    assert info.tensors["b_first"].data_offsets == (0, 8)
    assert info.tensors["a_second"] == TensorInfo((2, 2), np.dtype(ml_dtypes.bfloat16), (8, 16))
    assert info.tensors["empty"].dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    assert info.metadata == {"k": "v"}
    assert info.nbytes == 16


def test_inspect_reads_only_the_header(tmp_path: pathlib.Path) -> None:
    # A sparse 64 GiB tensor: inspecting it must not touch its data.
    path = tmp_path / "huge.safetensors"
    size = 64 * 2**30
    raw_file(path, {"huge": entry("U8", [size], 0, size)})
    os.truncate(path, path.stat().st_size + size)
    assert inspect_safetensors(path).tensors["huge"].nbytes == size


@pytest.mark.parametrize("function", ["inspect", "load"])
def test_missing_file_and_wrong_paths(tmp_path: pathlib.Path, function: str) -> None:
    def call(path: object) -> object:
        if function == "inspect":
            return inspect_safetensors(path)  # type: ignore[arg-type]
        return load_safetensors(path, max_bytes=1)  # type: ignore[arg-type]

    with pytest.raises(FileNotFoundError, match="missing.safetensors"):
        call(tmp_path / "missing.safetensors")
    # tinax 0.2 let the operating system's error through for a folder.
    with pytest.raises(ValueError, match="not a directory") as caught:
        call(tmp_path)
    assert isinstance(caught.value, IsADirectoryError)
    with pytest.raises(TypeError, match="path must be a str or os.PathLike"):
        call(b"bytes-path")
    with pytest.raises(ValueError, match="non-empty path"):
        call("")


def test_inspect_argument_checks(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "ok.safetensors"
    save_safetensors(path, {"a": np.zeros(1)}, overwrite=False)
    with pytest.raises(TypeError, match="max_metadata_bytes must be an int >= 0, got True"):
        inspect_safetensors(path, max_metadata_bytes=True)
    with pytest.raises(ValueError, match="max_metadata_bytes must be an int >= 0, got -1"):
        inspect_safetensors(path, max_metadata_bytes=-1)


def test_metadata_limit_on_read(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "meta.safetensors"
    metadata = {"key": "x" * 100}
    save_safetensors(path, {"a": np.zeros(1)}, overwrite=False, metadata=metadata, max_metadata_bytes=200)
    encoded = len(json.dumps(metadata, separators=(",", ":")))
    assert inspect_safetensors(path, max_metadata_bytes=encoded).metadata == metadata
    with pytest.raises(ValueError, match=f"encodes to {encoded} bytes, more than max_metadata_bytes={encoded - 1}"):
        inspect_safetensors(path, max_metadata_bytes=encoded - 1)
    with pytest.raises(ValueError, match="max_metadata_bytes"):
        load_safetensors(path, max_bytes=8, max_metadata_bytes=encoded - 1)


def test_metadata_is_returned_sorted_by_name_like_02_whatever_the_files_order(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "meta.safetensors"
    in_file_order = {"zeta": "1", "alpha": "2", "Mid": "3", "é": "4", "_": "5"}
    raw_file(path, {"__metadata__": in_file_order, "a": entry("U8", [1], 0, 1)}, b"\x01")
    by_name = ["Mid", "_", "alpha", "zeta", "é"]  # Code point order, as tinax 0.2 sorted them.
    assert list(inspect_safetensors(path, max_metadata_bytes=100).metadata) == by_name
    loaded = load_safetensors(path, max_bytes=1, max_metadata_bytes=100)
    assert list(loaded.info.metadata) == by_name
    assert list(loaded.metadata) == by_name
    assert loaded.metadata == in_file_order
    # Saved in the caller's order, read back sorted.
    save_safetensors(
        tmp_path / "saved", {"a": np.zeros(1)}, overwrite=False, metadata=in_file_order, max_metadata_bytes=100
    )
    assert list(inspect_safetensors(tmp_path / "saved", max_metadata_bytes=100).metadata) == by_name
    # A SafetensorsInfo made by hand sorts its metadata too, and keeps its tensors' order, as 0.2's did.
    info = SafetensorsInfo({"b": TensorInfo((1,), "F32"), "a": TensorInfo((2,), "U8")}, {"z": "1", "a": "2"})
    assert list(info.metadata) == ["a", "z"]
    assert list(info.tensors) == ["b", "a"]


def test_the_default_metadata_limit_accepts_no_metadata(tmp_path: pathlib.Path) -> None:
    # max_metadata_bytes=0, the default, means "no metadata", as in tinax 0.2:
    # a file from an untrusted source cannot hand over an unbounded mapping unasked.
    path = tmp_path / "meta.safetensors"
    save_safetensors(path, {"a": np.zeros(1)}, overwrite=False, metadata={"k": "v"}, max_metadata_bytes=9)
    for read in (
        lambda: inspect_safetensors(path),
        lambda: load_safetensors(path, max_bytes=8),
        lambda: load_safetensors(path, max_bytes=0, names=[]),
    ):
        with pytest.raises(ValueError, match="encodes to 9 bytes, more than max_metadata_bytes=0") as caught:
            read()
        assert not isinstance(caught.value, SafetensorError)  # A limit, not a malformed file.
    with pytest.raises(ValueError, match="more than max_metadata_bytes=0"):
        save_safetensors(tmp_path / "refused", {}, overwrite=False, metadata={"k": "v"})
    assert not (tmp_path / "refused").exists()
    save_safetensors(tmp_path / "none", {"a": np.zeros(1)}, overwrite=False, metadata={})
    assert inspect_safetensors(tmp_path / "none").metadata == {}


F32_4 = entry("F32", [1], 0, 4)

MALFORMED: dict[str, tuple[bytes | dict[str, Any], bytes, int | None, str]] = {
    # name: (header, payload, length field override, expected message fragment)
    "length-below-2": (b"{}", b"", 1, "header length field says 1 bytes"),
    "length-past-file": ({"a": F32_4}, bytes(4), 10_000, "header length field says 10000 bytes"),
    "not-utf8": (b'{"\xff": 1}', b"", None, "not UTF-8"),
    "not-json": (b"{nope}", b"", None, "not valid JSON"),
    "nan-constant": (b'{"a": NaN}', b"", None, "not valid JSON"),
    "not-object": (b"[1, 2]", b"", None, "must be a JSON object, got a JSON array"),
    "duplicate-tensor": (b'{"a": 1, "a": 2}', b"", None, "repeats the key 'a'"),
    "duplicate-nested": (b'{"a": {"dtype": "F32", "dtype": "I32", "shape": [1], "data_offsets": [0, 4]}}', bytes(4),
                         None, "repeats the key 'dtype'"),
    "deep-nesting": (b"[" * 100_000 + b"]" * 100_000, b"", None, "nests too deeply"),
    "metadata-not-object": ({"__metadata__": [1]}, b"", None, "__metadata__ must be a JSON object"),
    "metadata-value": ({"__metadata__": {"k": 1}}, b"", None, r"__metadata__\['k'\] must be a str, got 1 \(int\)"),
    "metadata-surrogate": (b'{"__metadata__": {"k": "\\ud800"}}', b"", None, "lone surrogate"),
    "name-surrogate": (b'{"\\udc00": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', bytes(4), None,
                       "lone surrogate"),
    "entry-not-object": ({"a": 1}, b"", None, "tensor 'a': its entry must be a JSON object"),
    "entry-array-short": ({"a": ["F32", [1]]}, bytes(4), None, r"tensor 'a': an entry given as a JSON array must hold"),
    "entry-array-long": ({"a": ["F32", [1], [0, 4], 0]}, bytes(4), None, "tensor 'a': an entry given as a JSON array"),
    "entry-array-order": ({"a": [[1], "F32", [0, 4]]}, bytes(4), None, "tensor 'a': dtype must be a str"),
    "missing-key": ({"a": {"dtype": "F32", "shape": [1]}}, bytes(4), None, r"tensor 'a'.*missing \['data_offsets'\]"),
    "dtype-not-str": ({"a": {**F32_4, "dtype": 4}}, bytes(4), None, "tensor 'a': dtype must be a str"),
    "unknown-dtype": ({"a": {**F32_4, "dtype": "F128"}}, bytes(4), None, "tensor 'a': unknown dtype 'F128'"),
    "packed-f4-half-byte": ({"a": entry("F4", [3], 0, 2)}, bytes(2), None, "tensor 'a'.*F4.*does not fill whole bytes"),
    "packed-f6-misaligned": ({"a": entry("F6_E2M3", [3], 0, 3)}, bytes(3), None, "F6_E2M3.*does not fill whole"),
    "shape-not-list": ({"a": {**F32_4, "shape": 1}}, bytes(4), None, "tensor 'a': shape must be"),
    "shape-negative": ({"a": {**F32_4, "shape": [-1]}}, bytes(4), None, "tensor 'a': shape must be"),
    "shape-bool": ({"a": {**F32_4, "shape": [True]}}, bytes(4), None, "tensor 'a': shape must be"),
    "shape-float": ({"a": {**F32_4, "shape": [1.0]}}, bytes(4), None, "tensor 'a': shape must be"),
    "offsets-three": ({"a": {**F32_4, "data_offsets": [0, 4, 4]}}, bytes(4), None, "tensor 'a': data_offsets must"),
    "offsets-negative": ({"a": entry("F32", [1], -4, 0)}, bytes(4), None, "tensor 'a': data_offsets must"),
    "offsets-reversed": ({"a": entry("F32", [0], 4, 0)}, bytes(4), None, "tensor 'a': data_offsets .* end before"),
    "offsets-out-of-bounds": ({"a": entry("F32", [2], 0, 8)}, bytes(4), None, "tensor 'a'.*run past the end"),
    "size-mismatch": ({"a": entry("F32", [2], 0, 4)}, bytes(4), None, r"tensor 'a'.*shape \[2\] of F32 needs 8"),
    "huge-shape": ({"a": entry("U8", [2**62] * 50, 0, 4)}, bytes(4), None, "'a'.*needs more bytes than the whole"),
    "gap": ({"a": entry("F32", [1], 4, 8)}, bytes(8), None, "tensor 'a' starts at 4, leaving bytes 0 to 4"),
    "overlap": ({"a": entry("F32", [2], 0, 8), "b": entry("F32", [1], 4, 8)}, bytes(8), None,
                "tensor 'b'.*overlaps 'a'"),
    "trailing-bytes": ({"a": F32_4}, bytes(12), None, r"last tensor \('a'\) ends at payload byte 4.* 12 bytes"),
    "no-tensors-but-data": ({}, bytes(8), None, "describes no data"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(MALFORMED), ids=list(MALFORMED))
def test_malformed_headers_raise_value_errors_naming_file_and_tensor(tmp_path: pathlib.Path, case: str) -> None:
    header, payload, length, message = MALFORMED[case]
    path = tmp_path / f"{case}.safetensors"
    raw_file(path, header, payload, length)
    with pytest.raises(ValueError, match=message) as inspected:
        inspect_safetensors(path, max_metadata_bytes=1000)
    assert str(path) in str(inspected.value)
    # Also the upstream error type, which tinax 0.2 let through for such files.
    assert isinstance(inspected.value, SafetensorError)
    with pytest.raises(SafetensorError, match=message):
        load_safetensors(path, max_bytes=2**40, max_metadata_bytes=1000)


def test_header_entries_given_as_arrays_of_dtype_shape_and_offsets_load_as_02_loaded_them(tmp_path):
    # The upstream reader (and so tinax 0.2) takes a tensor's three fields as an array in their declared order.
    path = tmp_path / "arrays.safetensors"
    header = {"a": ["U8", [4], [0, 4]], "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}
    payload = bytes([1, 2, 3, 4]) + np.float32(1.5).tobytes()
    raw_file(path, header, payload)
    info = inspect_safetensors(path)
    assert info.tensors == {"a": TensorInfo((4,), "U8"), "b": TensorInfo((1,), "F32")}
    assert info.tensors["a"].data_offsets == (0, 4)
    loaded = load_safetensors(path, max_bytes=8)
    assert loaded.tensors["a"].dtype == np.uint8
    assert loaded.tensors["a"].tolist() == [1, 2, 3, 4]
    assert loaded.tensors["b"].tolist() == [1.5]
    upstream = safetensors.numpy.load_file(str(path))
    assert {name: array.tobytes() for name, array in upstream.items()} == {
        name: array.tobytes() for name, array in loaded.tensors.items()
    }


# Shapes NumPy cannot make an array of, with the dtype and the bytes their header claims: more than 64
# dimensions (with or without data), an extent beyond intp, and zero-size shapes whose other extents
# overflow intp once multiplied by the element size.
UNREPRESENTABLE_SHAPES: dict[str, tuple[str, list[int], int]] = {
    "65-ones": ("F32", [1] * 65, 4),
    "65-zeros": ("F32", [0] * 65, 0),
    "300-dims": ("U8", [0] + [2] * 299, 0),
    "extent-2**63": ("U8", [0, 2**63], 0),
    "extent-2**64": ("F32", [2**64, 0], 0),
    "extent-huge": ("BOOL", [0, 10**40], 0),
    "product-overflow": ("U8", [0, 2**62, 2**62], 0),
    "itemsize-overflow": ("F64", [2**61, 0], 0),
    "itemsize-overflow-c64": ("C64", [0, 2**31, 2**29], 0),
    "packed-f4": ("F4", [0, 2**63 - 1, 2], 0),
}
# Shapes at NumPy's limits, which it does represent: these stay valid.
REPRESENTABLE_SHAPES: dict[str, tuple[str, list[int], int]] = {
    "64-ones": ("F32", [1] * 64, 4),
    "64-zeros": ("I64", [0] * 64, 0),
    "extent-intp-max": ("U8", [0, 2**63 - 1], 0),
    "product-at-limit": ("I16", [2**31, 0, 2**31 - 1], 0),
}


def _shape_file(path: pathlib.Path, dtype: str, shape: list[int], nbytes: int, *, slow: bool) -> None:
    # An unknown extra key sends an entry through the step-by-step checks, not the fast path.
    extra = {"note": 1} if slow else {}
    raw_file(path, {"t": {**entry(dtype, shape, 0, nbytes), **extra}}, bytes(nbytes))


@pytest.mark.parametrize("slow", [False, True], ids=["fast-path", "step-by-step"])
@pytest.mark.parametrize("case", list(UNREPRESENTABLE_SHAPES), ids=list(UNREPRESENTABLE_SHAPES))
def test_shapes_numpy_cannot_represent_are_malformed_headers(tmp_path: pathlib.Path, case: str, slow: bool) -> None:
    dtype, shape, nbytes = UNREPRESENTABLE_SHAPES[case]
    numpy_dtype = EXACT_DTYPES.get(dtype)
    if numpy_dtype is not None:  # The premise: NumPy itself refuses the shape.
        with pytest.raises(ValueError, match="(?i)dimension|too big"):
            np.empty(shape, numpy_dtype)
    path = tmp_path / f"{case}.safetensors"
    _shape_file(path, dtype, shape, nbytes, slow=slow)
    for read in (lambda: inspect_safetensors(path), lambda: load_safetensors(path, max_bytes=2**40)):
        with pytest.raises(ValueError, match="tensor 't'.*(dimensions|NumPy cannot represent|largest NumPy)") as caught:
            read()
        assert isinstance(caught.value, SafetensorError)
        assert str(path) in str(caught.value)


@pytest.mark.parametrize("slow", [False, True], ids=["fast-path", "step-by-step"])
@pytest.mark.parametrize("case", list(REPRESENTABLE_SHAPES), ids=list(REPRESENTABLE_SHAPES))
def test_shapes_at_numpys_limits_still_load(tmp_path: pathlib.Path, case: str, slow: bool) -> None:
    dtype, shape, nbytes = REPRESENTABLE_SHAPES[case]
    path = tmp_path / f"{case}.safetensors"
    _shape_file(path, dtype, shape, nbytes, slow=slow)
    assert inspect_safetensors(path).tensors["t"].shape == tuple(shape)
    loaded = load_safetensors(path, max_bytes=nbytes).tensors["t"]
    assert loaded.shape == tuple(shape)
    assert loaded.dtype == EXACT_DTYPES[dtype]


def test_header_validation_agrees_with_numpy_on_random_extreme_shapes(tmp_path: pathlib.Path) -> None:
    # Seeded shapes around the limits: ranks near 64, a zero extent, others spread over 2**0 .. 2**66.
    rng = np.random.default_rng(13)
    path = tmp_path / "random.safetensors"
    outcomes = set()
    for index in range(300):
        dtype = ["U8", "I16", "F32", "F64", "C64"][index % 5]
        rank = int(rng.integers(1, 70))
        shape = [int(2 ** rng.uniform(0, 66)) if rng.random() < 0.2 else int(rng.integers(1, 4)) for _ in range(rank)]
        shape[int(rng.integers(rank))] = 0
        try:
            np.empty(shape, EXACT_DTYPES[dtype])
            numpy_accepts = True
        except ValueError:
            numpy_accepts = False
        _shape_file(path, dtype, shape, 0, slow=bool(index % 2))
        if numpy_accepts:
            assert load_safetensors(path, max_bytes=0).tensors["t"].shape == tuple(shape)
            outcomes.add("loaded")
        else:
            with pytest.raises(ValueError, match="tensor 't'") as caught:
                load_safetensors(path, max_bytes=0)
            assert isinstance(caught.value, SafetensorError)
            outcomes.add("refused")
    assert outcomes == {"refused", "loaded"}


def test_malformed_file_errors_pickle_with_their_types(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "bad.safetensors"
    path.write_bytes(b"not a Safetensors file")
    with pytest.raises(ValueError, match="not a valid safetensors file") as caught:
        inspect_safetensors(path)
    restored = pickle.loads(pickle.dumps(caught.value))
    assert type(restored) is type(caught.value)
    assert isinstance(restored, SafetensorError)
    assert str(restored) == str(caught.value)


def test_a_file_shorter_than_the_length_field(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "short.safetensors"
    path.write_bytes(b"\x02\x00\x00")
    with pytest.raises(SafetensorError, match="fewer than the 8-byte header length field"):
        inspect_safetensors(path)


def test_a_truncated_file_is_malformed(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "truncated.safetensors"
    save_safetensors(path, {"x": np.arange(4, dtype=np.float32)}, overwrite=False)
    path.write_bytes(path.read_bytes()[:-1])
    for read in (lambda: inspect_safetensors(path), lambda: load_safetensors(path, max_bytes=16)):
        with pytest.raises(ValueError, match="tensor 'x'") as caught:
            read()
        assert isinstance(caught.value, SafetensorError)


def test_the_header_length_cap(tmp_path: pathlib.Path) -> None:
    # A sparse file larger than the cap, whose length field points past it.
    path = tmp_path / "cap.safetensors"
    raw_file(path, b"{}", length=150_000_000)
    os.truncate(path, 200_000_000)
    with pytest.raises(ValueError, match="at most the cap of 100000000 bytes"):
        inspect_safetensors(path)


# --- load planning ----------------------------------------------------------------------------------------------


def sparse_file_with_one_small_tensor(path: pathlib.Path) -> int:
    """A file whose 64 GiB first tensor is a hole on disk; returns that tensor's size."""
    huge = 64 * 2**30
    raw_file(path, {"huge": entry("U8", [huge], 0, huge), "small": entry("I16", [3], huge, huge + 6)})
    with path.open("r+b") as handle:
        handle.seek(0, os.SEEK_END)
        handle.seek(huge, os.SEEK_CUR)
        handle.write(np.array([1, -2, 3], dtype="<i2").tobytes())
    return huge


def test_only_the_selected_bytes_are_read(tmp_path: pathlib.Path) -> None:
    # Allocating or reading the 64 GiB tensor would exhaust memory; selecting
    # the small one must read its 6 bytes only.
    path = tmp_path / "sparse.safetensors"
    sparse_file_with_one_small_tensor(path)
    loaded = load_safetensors(path, max_bytes=6, names=["small"])
    assert list(loaded.tensors) == ["small"]
    assert np.array_equal(loaded.tensors["small"], np.array([1, -2, 3], dtype=np.int16))
    assert list(loaded.info.tensors) == ["huge", "small"]


def test_over_budget_selections_are_refused_before_reading(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "sparse.safetensors"
    huge = sparse_file_with_one_small_tensor(path)
    with pytest.raises(ValueError, match=f"needs {huge + 6} bytes, more than max_bytes={2**30}"):
        load_safetensors(path, max_bytes=2**30)
    with pytest.raises(ValueError, match="needs 6 bytes, more than max_bytes=5"):
        load_safetensors(path, max_bytes=5, names=["small"])


def test_unknown_names_list_close_matches(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "n.safetensors"
    names = ["encoder.layer0.weight", "encoder.layer0.bias", "decoder.weight"]
    save_safetensors(path, {name: np.zeros(2) for name in names}, overwrite=False)
    with pytest.raises(ValueError, match=str(path)) as caught:
        load_safetensors(path, max_bytes=100, names=["encoder.layer0.weigth", "zzz"])
    message = str(caught.value)
    assert "'encoder.layer0.weigth' (did you mean 'encoder.layer0.weight'" in message
    assert "'zzz' (no close match)" in message


def test_load_argument_checks(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a.safetensors"
    save_safetensors(path, {"a": np.zeros(2), "b": np.zeros(2)}, overwrite=False)
    with pytest.raises(TypeError, match="names must be None or an iterable of str"):
        load_safetensors(path, max_bytes=100, names="a")
    with pytest.raises(TypeError, match="names must be None or an iterable of str"):
        load_safetensors(path, max_bytes=100, names=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"names\[1\] must be a str"):
        load_safetensors(path, max_bytes=100, names=["a", 1])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="names must not repeat items, got 'a' more than once"):
        load_safetensors(path, max_bytes=100, names=["a", "a"])
    with pytest.raises(TypeError, match="max_bytes must be an int >= 0, got False"):
        load_safetensors(path, max_bytes=False)
    with pytest.raises(ValueError, match="max_bytes must be an int >= 0, got -1"):
        load_safetensors(path, max_bytes=-1)
    with pytest.raises(TypeError, match="max_bytes"):
        load_safetensors(path)  # type: ignore[call-arg]


# --- save -------------------------------------------------------------------------------------------------------


def test_save_refuses_to_clobber_and_replaces_only_on_request(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "x.safetensors"
    save_safetensors(path, {"a": np.zeros(2)}, overwrite=False)
    before = path.read_bytes()
    with pytest.raises(FileExistsError, match="already exists"):
        save_safetensors(path, {"a": np.ones(2)}, overwrite=False)
    assert path.read_bytes() == before
    save_safetensors(str(path), {"a": np.ones(2)}, overwrite=True)
    assert np.array_equal(load_safetensors(path, max_bytes=16).tensors["a"], np.ones(2))
    assert sorted(os.listdir(tmp_path)) == ["x.safetensors"]


def test_save_path_errors(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        save_safetensors(tmp_path / "no" / "x.safetensors", {}, overwrite=False)
    for overwrite in (True, False):
        with pytest.raises(ValueError, match="not a directory") as caught:
            save_safetensors(tmp_path, {}, overwrite=overwrite)
        assert isinstance(caught.value, IsADirectoryError)  # What tinax 0.2 raised.
    with pytest.raises(TypeError, match="overwrite must be a bool, got 1"):
        save_safetensors(tmp_path / "x", {}, overwrite=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="overwrite"):
        save_safetensors(tmp_path / "x", {})  # type: ignore[call-arg]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (jnp.zeros(2), r"tensors\['w'\] must be a numpy.ndarray, got float32\[2\] \(jax.Array\)"),
        (np.array([object()], dtype=object), r"tensors\['w'\] must be a numpy.ndarray with a numeric or bool dtype"),
        (np.array(["a"]), r"tensors\['w'\] must be an array of a dtype safetensors stores exactly"),
        (np.zeros(2, dtype=np.float16).view("V2"), "safetensors stores exactly"),
        (np.zeros(2, dtype=[("x", "f4")]), "safetensors stores exactly"),
        (np.zeros(2, dtype=np.complex128), "safetensors stores exactly"),
        (np.zeros(2, dtype=ml_dtypes.float4_e2m1fn), "safetensors stores exactly"),
        ([1.0, 2.0], "must be a numpy.ndarray"),
        (np.float32(1.0), "must be a numpy.ndarray"),
    ],
    ids=["jax", "object", "str", "void", "structured", "complex128", "float4", "list", "scalar"],
)
def test_save_accepts_only_host_arrays_of_storable_dtypes(tmp_path: pathlib.Path, value: object, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        save_safetensors(tmp_path / "x", {"w": value}, overwrite=False)  # type: ignore[dict-item]
    assert os.listdir(tmp_path) == []


def test_masked_arrays_are_stored_only_without_masked_elements(tmp_path: pathlib.Path) -> None:
    # The file has no place for a mask: masked elements would come back as
    # ordinary values, so they are refused (tinax 0.2 stored them silently).
    with pytest.raises(ValueError, match="without masked elements"):
        save_safetensors(tmp_path / "x", {"w": np.ma.masked_array([1.0, 2.0], mask=[0, 1])}, overwrite=False)
    assert os.listdir(tmp_path) == []
    unmasked = np.ma.masked_array(np.arange(3, dtype=np.float32), mask=[0, 0, 0])
    save_safetensors(tmp_path / "x", {"w": unmasked, "m": np.ma.masked_array([5], dtype=np.int8)}, overwrite=False)
    loaded = load_safetensors(tmp_path / "x", max_bytes=13).tensors
    assert type(loaded["w"]) is np.ndarray
    assert np.array_equal(loaded["w"], np.arange(3, dtype=np.float32))
    assert loaded["m"].tolist() == [5]


class _TaggedArray(np.ndarray):  # type: ignore[type-arg]
    """An ndarray subclass, as libraries define them."""


def test_ndarray_subclasses_are_stored_by_value(tmp_path: pathlib.Path) -> None:
    tagged = np.arange(4, dtype=np.float32).reshape(2, 2).view(_TaggedArray)
    save_safetensors(tmp_path / "x", {"t": tagged, "tt": tagged.T}, overwrite=False)
    loaded = load_safetensors(tmp_path / "x", max_bytes=32).tensors
    assert type(loaded["t"]) is np.ndarray
    assert loaded["t"].tolist() == [[0.0, 1.0], [2.0, 3.0]]
    assert loaded["tt"].tolist() == [[0.0, 2.0], [1.0, 3.0]]


@pytest.mark.parametrize("overwrite", [True, False])
def test_symbolic_link_destinations_are_refused(tmp_path: pathlib.Path, overwrite: bool) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"unchanged")
    for name, points_to in (("link", target), ("dangling", tmp_path / "nowhere"), ("folder", tmp_path)):
        link = tmp_path / name
        link.symlink_to(points_to)
        with pytest.raises(ValueError, match="must not be a symbolic link"):
            save_safetensors(link, {"x": np.ones(1, dtype=np.float32)}, overwrite=overwrite)
        assert link.is_symlink()
    assert target.read_bytes() == b"unchanged"
    assert not (tmp_path / "nowhere").exists()
    # A link among the folders above the file is fine: the file itself is written.
    (tmp_path / "real").mkdir()
    (tmp_path / "via").symlink_to(tmp_path / "real")
    save_safetensors(tmp_path / "via" / "x", {"x": np.ones(1, dtype=np.float32)}, overwrite=overwrite)
    assert (tmp_path / "real" / "x").is_file()


def test_save_names_and_metadata_checks(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "x"
    with pytest.raises(TypeError, match="tensors must be a mapping with str keys"):
        save_safetensors(target, [np.zeros(1)], overwrite=False)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="keys of tensors must be str, got 1"):
        save_safetensors(target, {1: np.zeros(1)}, overwrite=False)  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="keys of tensors must be non-empty"):
        save_safetensors(target, {"": np.zeros(1)}, overwrite=False)
    with pytest.raises(ValueError, match="other than the reserved '__metadata__'"):
        save_safetensors(target, {"__metadata__": np.zeros(1)}, overwrite=False)
    with pytest.raises(UnicodeEncodeError, match="lone surrogate"):  # A ValueError, as tinax 0.2 raised.
        save_safetensors(target, {"\ud800": np.zeros(1)}, overwrite=False)
    with pytest.raises(TypeError, match=r"metadata\['k'\] must be a str, got 1"):
        save_safetensors(target, {}, overwrite=False, metadata={"k": 1})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="metadata must be a mapping"):
        save_safetensors(target, {}, overwrite=False, metadata=[("k", "v")])  # type: ignore[arg-type]
    with pytest.raises(UnicodeEncodeError, match="metadata entry 'k' contains a lone surrogate"):
        save_safetensors(target, {}, overwrite=False, metadata={"k": "\udfff"}, max_metadata_bytes=100)
    with pytest.raises(ValueError, match="metadata encodes to 9 bytes, more than max_metadata_bytes=8"):
        save_safetensors(target, {}, overwrite=False, metadata={"k": "v"}, max_metadata_bytes=8)
    with pytest.raises(TypeError, match="max_metadata_bytes must be an int"):
        save_safetensors(target, {}, overwrite=False, max_metadata_bytes=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_metadata_bytes must be an int >= 0"):
        save_safetensors(target, {}, overwrite=False, max_metadata_bytes=-5)
    assert os.listdir(tmp_path) == []
    save_safetensors(target, {}, overwrite=False, metadata={"k": "v"}, max_metadata_bytes=9)
    assert inspect_safetensors(target, max_metadata_bytes=9).metadata == {"k": "v"}


def test_empty_metadata_is_stored_as_none(tmp_path: pathlib.Path) -> None:
    # As tinax 0.2 stored it: the two files are byte for byte the same.
    save_safetensors(tmp_path / "empty", {"a": np.zeros(1)}, overwrite=False, metadata={})
    save_safetensors(tmp_path / "none", {"a": np.zeros(1)}, overwrite=False)
    assert (tmp_path / "empty").read_bytes() == (tmp_path / "none").read_bytes()
    assert b"__metadata__" not in (tmp_path / "none").read_bytes()
    assert inspect_safetensors(tmp_path / "empty").metadata == {}


def test_save_layout_is_aligned(tmp_path: pathlib.Path) -> None:
    tensors = {"b": np.zeros(3, np.int8), "a": np.zeros(3, np.float64), "c": np.zeros(1, np.float32)}
    path = tmp_path / "aligned.safetensors"
    save_safetensors(path, tensors, overwrite=False)
    header_length = struct.unpack("<Q", path.read_bytes()[:8])[0]
    assert (8 + header_length) % 8 == 0
    info = inspect_safetensors(path)
    assert sorted(info.tensors, key=lambda name: info.tensors[name].data_offsets or (0, 0)) == ["a", "c", "b"]
    for tensor in info.tensors.values():
        assert tensor.data_offsets is not None
        assert tensor.numpy_dtype is not None
        assert tensor.data_offsets[0] % tensor.numpy_dtype.itemsize == 0


# --- remembered header validations ------------------------------------------------------------------------------


def test_repeated_reads_give_fresh_equal_results(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "r.safetensors"
    save_safetensors(
        path,
        {"a": np.arange(3.0), "b": np.zeros(2, np.int8)},
        overwrite=False,
        metadata={"k": "v"},
        max_metadata_bytes=9,
    )
    first = inspect_safetensors(path, max_metadata_bytes=9)
    first.metadata["k"] = "changed"  # type: ignore[index]
    first.tensors.clear()  # type: ignore[attr-defined]
    second = load_safetensors(path, max_bytes=64, max_metadata_bytes=9)
    assert second.info.metadata == {"k": "v"}
    assert list(second.info.tensors) == ["a", "b"]
    assert np.array_equal(second.tensors["a"], np.arange(3.0))


def test_a_rewritten_header_of_the_same_size_is_validated_again(tmp_path: pathlib.Path) -> None:
    # What is remembered is keyed by the header bytes themselves, so no change can be missed.
    path = tmp_path / "same-size.safetensors"
    save_safetensors(path, {"aa": np.arange(4, dtype=np.int32)}, overwrite=False)
    assert list(load_safetensors(path, max_bytes=16).tensors) == ["aa"]
    original = path.read_bytes()
    renamed = original.replace(b'"aa"', b'"bb"')
    assert len(renamed) == len(original)
    path.write_bytes(renamed)
    assert list(load_safetensors(path, max_bytes=16).tensors) == ["bb"]
    path.write_bytes(original.replace(b'"I32"', b'"U32"'))
    assert load_safetensors(path, max_bytes=16).tensors["aa"].dtype == np.uint32
    path.write_bytes(original.replace(b"[0,16]", b"[0,15]"))
    with pytest.raises(ValueError, match="tensor 'aa'"):
        load_safetensors(path, max_bytes=16)


def test_the_metadata_limit_applies_to_remembered_headers(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.safetensors"
    save_safetensors(path, {}, overwrite=False, metadata={"k": "v"}, max_metadata_bytes=9)
    assert inspect_safetensors(path, max_metadata_bytes=9).metadata == {"k": "v"}
    with pytest.raises(ValueError, match="max_metadata_bytes=8"):
        inspect_safetensors(path, max_metadata_bytes=8)
    with pytest.raises(ValueError, match="max_metadata_bytes=0"):
        inspect_safetensors(path)
