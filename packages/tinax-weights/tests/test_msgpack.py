"""Tests for save_msgpack and load_msgpack."""

from __future__ import annotations

import enum
import io
import os
import pathlib

import jax
import jax.numpy as jnp
import ml_dtypes
import msgpack
import numpy as np
import pytest

from tinax._weights._msgpack import _write_state
from tinax.weights import load_msgpack, save_msgpack
from tinax_testing import import_side_effects, parameter_summary

# Every dtype the format carries; values are compared bytewise, so NaNs that
# some of the narrow float formats produce from arange do not matter.
DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
    ml_dtypes.bfloat16,
    ml_dtypes.float8_e4m3fn,
    ml_dtypes.float8_e5m2,
    ml_dtypes.float8_e4m3fnuz,
    ml_dtypes.float8_e5m2fnuz,
    ml_dtypes.float8_e8m0fnu,
    ml_dtypes.float4_e2m1fn,
    ml_dtypes.int4,
    ml_dtypes.uint4,
    ml_dtypes.int2,
]


def rich_state() -> dict[str, object]:
    """A nested state with every kind of leaf, in a deliberately unsorted key order."""
    return {
        "params": {
            "kernel": np.arange(12, dtype=np.float32).reshape(3, 4),
            "bias": np.zeros((0,), np.int8),
            "embedding": np.arange(300, dtype=ml_dtypes.bfloat16).reshape(30, 10),
            "scale": np.array(2.5, np.float32),
        },
        "step": 7,
        "learning_rate": 0.25,
        "name": "tiny-model é",
        "blob": b"\x00\x01\xff",
        "flag": True,
        "nothing": None,
        "phase": 1.5 - 2j,
        "ema_decay": np.float32(0.999),
        "seen": np.int64(-3),
        "done": np.bool_(False),
        "half": ml_dtypes.bfloat16(1.5),
        "quantized": np.array([0.5, -1, 448], ml_dtypes.float8_e4m3fn),
    }


def assert_same_state(actual: object, expected: object) -> None:
    """Compares nested states exactly: types, dtypes, shapes and bytes."""
    assert type(actual) is type(expected) or (isinstance(actual, dict) and isinstance(expected, dict))
    if isinstance(expected, dict):
        assert list(actual) == list(expected)  # type: ignore[call-overload]
        for key in expected:
            assert_same_state(actual[key], expected[key])  # type: ignore[index]
    elif isinstance(expected, (np.ndarray, np.generic)):
        assert actual.dtype == expected.dtype  # type: ignore[union-attr]
        assert actual.shape == expected.shape  # type: ignore[union-attr]
        assert np.asarray(actual).tobytes() == np.ascontiguousarray(expected).tobytes()
    else:
        assert actual == expected


def reference_bytes(state: dict[str, object]) -> bytes:
    """Encodes a state in flax's format with msgpack's own one-shot packer.

    Independent of flax and of the streaming writer: msgpack picks every
    header itself.
    """

    def ndarray_payload(array: np.ndarray) -> bytes:
        return msgpack.packb((array.shape, array.dtype.name, array.tobytes("C")), use_bin_type=True)

    def encode(value: object) -> object:
        if isinstance(value, np.ndarray):
            return msgpack.ExtType(1, ndarray_payload(value))
        if isinstance(value, np.generic):
            return msgpack.ExtType(3, ndarray_payload(np.asarray(value)))
        if isinstance(value, complex):
            return msgpack.ExtType(2, msgpack.packb((value.real, value.imag)))
        return value

    return msgpack.packb(state, default=encode, strict_types=True)


def test_signatures_match_the_02_api():
    assert parameter_summary(save_msgpack) == [
        ("path", "POSITIONAL_OR_KEYWORD", None),
        ("state", "POSITIONAL_OR_KEYWORD", None),
        ("overwrite", "KEYWORD_ONLY", None),
    ]
    assert parameter_summary(load_msgpack) == [
        ("path", "POSITIONAL_OR_KEYWORD", None),
        ("target", "POSITIONAL_OR_KEYWORD", None),
        ("max_bytes", "KEYWORD_ONLY", None),
    ]


def test_importing_imports_neither_msgpack_nor_flax():
    assert import_side_effects("tinax.weights") == {"backends_initialized": False, "integrations": []}


def test_round_trip_keeps_structure_types_and_values(tmp_path):
    state = rich_state()
    path = tmp_path / "state.msgpack"
    save_msgpack(path, state, overwrite=False)
    loaded = load_msgpack(path, rich_state(), max_bytes=path.stat().st_size)
    assert_same_state(loaded, state)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda dtype: np.dtype(dtype).name)
def test_every_supported_dtype_round_trips_as_a_fresh_writable_array(tmp_path, dtype):
    array = np.arange(6).astype(dtype).reshape(2, 3)
    path = tmp_path / "state.msgpack"
    save_msgpack(path, {"a": array, "s": array[0, 1]}, overwrite=False)
    loaded = load_msgpack(path, {"a": array, "s": array[0, 1]}, max_bytes=1 << 20)
    assert_same_state(loaded, {"a": array, "s": array[0, 1]})
    result = loaded["a"]
    assert result.flags.writeable
    assert result.flags.owndata
    assert result.flags.c_contiguous
    assert result.flags.aligned
    result[...] = array[0, 0]  # Writable in place.


def test_strided_and_big_endian_arrays_keep_their_values(tmp_path):
    base = np.arange(24, dtype=np.int32).reshape(4, 6)
    state = {"transposed": base.T, "strided": base[::2, ::3], "big_endian": base.astype(">i4")}
    path = tmp_path / "state.msgpack"
    save_msgpack(path, state, overwrite=False)
    target = {key: np.zeros(value.shape, np.int32) for key, value in state.items()}
    loaded = load_msgpack(path, target, max_bytes=1 << 20)
    for key, value in state.items():
        np.testing.assert_array_equal(loaded[key], value)
        assert loaded[key].dtype == np.dtype(np.int32)


def test_bytes_equal_msgpacks_own_encoding_at_every_header_boundary(tmp_path):
    # Sizes chosen so the extension payloads cross msgpack's fixext 1/2/4/8/16,
    # ext8/16/32 and bin8/16/32 boundaries (a uint8[n] payload is n + 11 bytes).
    sizes = [*range(24), 240, 243, 244, 245, 246, 255, 256, 65520, 65523, 65524, 65525, 65526, 65536, 70000]
    state: dict[str, object] = {f"u{size}": np.arange(size, dtype=np.uint8) for size in sizes}
    state |= {"f32": np.array(1.0, np.float32), "i8": np.int8(1), "u64": np.array(7, np.uint64)}
    state |= {"ints": {"a": 0, "b": -1, "c": 2**63 - 1, "d": -(2**63), "e": 2**64 - 1, "f": 200, "g": -33}}
    state |= {"many": {f"k{index}": index for index in range(70000)}}  # A map16 header... and map32.
    state |= {"text": "x" * 70000, "blob": b"y" * 300, "complex": complex(1e300, -0.0)}
    path = tmp_path / "state.msgpack"
    save_msgpack(path, state, overwrite=False)
    assert path.read_bytes() == reference_bytes(state)


def test_arrays_over_the_chunk_size_are_split_as_flax_splits_them(tmp_path):
    array = np.arange(30, dtype=np.float32).reshape(5, 6)  # 120 bytes, chunks of 16 bytes = 4 elements.
    buffer = io.BytesIO()
    _write_state(buffer, {"w": array, "small": np.arange(4, dtype=np.float32)}, max_chunk_bytes=16)
    raw = msgpack.unpackb(buffer.getvalue(), ext_hook=lambda code, data: (code, msgpack.unpackb(data)))
    assert raw["small"][0] == 1
    chunked = raw["w"]
    assert list(chunked) == ["__msgpack_chunked_array__", "shape", "chunks"]
    assert chunked["__msgpack_chunked_array__"] is True
    assert chunked["shape"] == {"0": 5, "1": 6}
    assert list(chunked["chunks"]) == [str(index) for index in range(8)]
    assert [piece[1][0] for piece in chunked["chunks"].values()] == [[4]] * 7 + [[2]]
    path = tmp_path / "chunked.msgpack"
    path.write_bytes(buffer.getvalue())
    loaded = load_msgpack(path, {"w": array, "small": np.zeros(4, np.float32)}, max_bytes=1 << 20)
    np.testing.assert_array_equal(loaded["w"], array)


def test_existing_file_is_kept_unless_overwrite(tmp_path):
    path = tmp_path / "state.msgpack"
    save_msgpack(path, {"version": 1}, overwrite=False)
    with pytest.raises(FileExistsError, match="already exists"):
        save_msgpack(path, {"version": 2}, overwrite=False)
    assert load_msgpack(path, {"version": 0}, max_bytes=100) == {"version": 1}
    save_msgpack(path, {"version": 3}, overwrite=True)
    assert load_msgpack(path, {"version": 0}, max_bytes=100) == {"version": 3}
    assert os.listdir(tmp_path) == ["state.msgpack"]


def test_missing_folder_is_reported(tmp_path):
    with pytest.raises(FileNotFoundError):
        save_msgpack(tmp_path / "absent" / "state.msgpack", {"a": 1}, overwrite=False)


@pytest.mark.parametrize("overwrite", [True, False])
def test_symbolic_link_and_folder_destinations_are_refused(tmp_path, overwrite):
    # As tinax 0.2 refused them: a link with a ValueError, a folder with the
    # operating system's IsADirectoryError (which here is a ValueError too).
    target = tmp_path / "target"
    target.write_bytes(b"unchanged")
    for name, points_to in (("link", target), ("dangling", tmp_path / "nowhere")):
        (tmp_path / name).symlink_to(points_to)
        with pytest.raises(ValueError, match="must not be a symbolic link"):
            save_msgpack(tmp_path / name, {"a": 1}, overwrite=overwrite)
    assert target.read_bytes() == b"unchanged"
    assert not (tmp_path / "nowhere").exists()
    with pytest.raises(IsADirectoryError) as caught:
        save_msgpack(tmp_path, {"a": 1}, overwrite=overwrite)
    assert isinstance(caught.value, ValueError)


class Color(enum.IntEnum):
    RED = 1


class Row(list):  # type: ignore[type-arg]
    """A list subclass: neither flax nor tinax can rebuild it from a file."""


class Pair(tuple):  # type: ignore[type-arg]
    """A tuple subclass that is not a namedtuple."""


@pytest.mark.parametrize(
    ("leaf", "error", "expected"),
    [
        (jax.random.key(0), TypeError, "dtype"),
        (np.array([object()]), TypeError, "dtype"),
        (np.array(["text"]), TypeError, "dtype"),
        (np.zeros(2, dtype=[("x", np.int32)]), TypeError, "dtype"),
        (np.str_("text"), TypeError, "dtype"),
        (np.ma.masked_array([1, 2], mask=[0, 1]), TypeError, "not a subclass"),
        (Row([1, 2]), TypeError, "mapping, list, tuple or namedtuple"),
        (Pair((1, 2)), TypeError, "mapping, list, tuple or namedtuple"),
        ({1, 2}, TypeError, "mapping"),
        (bytearray(b"x"), TypeError, "mapping"),
        (Color.RED, TypeError, "mapping"),
        (object(), TypeError, "mapping"),
        (2**64, ValueError, "range msgpack can store"),
        (-(2**63) - 1, ValueError, "range msgpack can store"),
        ("\ud800", ValueError, "UTF-8"),
    ],
    ids=lambda value: type(value).__name__,
)
def test_unstorable_leaves_are_refused_by_key_path_before_writing(tmp_path, leaf, error, expected):
    path = tmp_path / "state.msgpack"
    with pytest.raises(error, match=expected) as info:
        save_msgpack(path, {"ok": np.zeros(2), "outer": {"inner": leaf}}, overwrite=False)
    assert "state['outer']['inner']" in str(info.value)
    assert os.listdir(tmp_path) == []


def test_bad_keys_arguments_and_cycles_are_refused(tmp_path):
    path = tmp_path / "state.msgpack"
    with pytest.raises(ValueError, match=r"keys of state\['a'\] must have distinct text.*\[1\] and \['1'\]"):
        save_msgpack(path, {"a": {1: 2, "1": 3}}, overwrite=False)
    with pytest.raises(ValueError, match="UTF-8"):
        save_msgpack(path, {"\udcff": 1}, overwrite=False)
    with pytest.raises(ValueError, match="__msgpack_chunked_array__"):
        save_msgpack(path, {"a": {"__msgpack_chunked_array__": True}}, overwrite=False)
    cyclic: dict[str, object] = {}
    cyclic["self"] = {"again": cyclic}
    with pytest.raises(ValueError, match="contains itself"):
        save_msgpack(path, cyclic, overwrite=False)
    looped: list[object] = []
    looped.append((looped,))
    with pytest.raises(ValueError, match=r"state\['l'\]\[0\]\[0\] contains itself"):
        save_msgpack(path, {"l": looped}, overwrite=False)
    with pytest.raises(TypeError, match="state must be a mapping"):
        save_msgpack(path, [("a", 1)], overwrite=False)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="overwrite must be a bool"):
        save_msgpack(path, {"a": 1}, overwrite=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="path must be"):
        save_msgpack(b"state.msgpack", {"a": 1}, overwrite=False)  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


def saved(tmp_path: pathlib.Path, state: dict[str, object], name: str = "state.msgpack") -> pathlib.Path:
    path = tmp_path / name
    save_msgpack(path, state, overwrite=False)
    return path


def test_max_bytes_is_checked_before_the_file_is_decoded(tmp_path):
    path = saved(tmp_path, {"w": np.zeros(100, np.float32)})
    size = path.stat().st_size
    assert load_msgpack(path, {"w": np.zeros(100, np.float32)}, max_bytes=size)["w"].shape == (100,)
    with pytest.raises(ValueError, match=f"holds {size} bytes, more than max_bytes={size - 1}"):
        load_msgpack(path, {"w": np.zeros(100, np.float32)}, max_bytes=size - 1)
    garbage = tmp_path / "garbage.msgpack"
    garbage.write_bytes(b"\xc1" * 64)  # 0xc1 is never valid msgpack; the size is what is reported.
    with pytest.raises(ValueError, match="more than max_bytes=63"):
        load_msgpack(garbage, {}, max_bytes=63)


@pytest.mark.parametrize(
    ("max_bytes", "error"),
    [(True, TypeError), (1.0, TypeError), ("10", TypeError), (None, TypeError), (0, ValueError), (-5, ValueError)],
)
def test_max_bytes_must_be_a_positive_int(tmp_path, max_bytes, error):
    path = saved(tmp_path, {"a": 1})
    with pytest.raises(error, match="max_bytes must be an int >= 1"):
        load_msgpack(path, {"a": 0}, max_bytes=max_bytes)


def test_missing_path_folder_and_bad_path_are_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_msgpack(tmp_path / "absent.msgpack", {}, max_bytes=10)
    # tinax 0.2 reported a folder as a missing file; it is a ValueError as well.
    with pytest.raises(FileNotFoundError, match="not a directory") as caught:
        load_msgpack(tmp_path, {}, max_bytes=10)
    assert isinstance(caught.value, ValueError)
    with pytest.raises(TypeError, match="path must be"):
        load_msgpack(None, {}, max_bytes=10)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ([("a", 1)], "target must be a mapping"),
        ({"a": Row([1, 2])}, r"target\['a'\] must be"),
        ({"a": object()}, r"target\['a'\] must be"),
        ({"a": np.array([object()])}, r"target\['a'\] must be an array or scalar"),
        ({"a": jax.random.key(0)}, r"target\['a'\] must be an array or scalar"),
    ],
    ids=["list", "list-subclass-leaf", "object-leaf", "object-dtype", "prng-key"],
)
def test_targets_of_the_wrong_kind_are_refused_before_reading(tmp_path, target, expected):
    path = tmp_path / "never-read.msgpack"
    path.write_bytes(b"\xc1")
    with pytest.raises(TypeError, match=expected):
        load_msgpack(path, target, max_bytes=10)


class _ArrayLike:
    """A target leaf described only by ``shape`` and ``dtype``, as a jax.ShapeDtypeStruct is."""

    def __init__(self, shape, dtype):
        self.shape = shape
        self.dtype = dtype


@pytest.mark.parametrize(
    ("shape", "dtype", "error", "expected"),
    [
        ("12", np.float32, TypeError, r"target\['a'\].shape must be a sequence of ints, got '12'"),
        ("ab", np.float32, TypeError, r"target\['a'\].shape must be a sequence of ints"),
        (b"\x02\x03", np.float32, TypeError, r"target\['a'\].shape must be a sequence of ints"),
        (3, np.float32, TypeError, r"target\['a'\].shape must be a sequence of ints"),
        ({"0": 2}, np.float32, TypeError, r"target\['a'\].shape must be a sequence of ints"),
        ((2, 1.5), np.float32, TypeError, r"target\['a'\].shape\[1\] must be an int"),
        ((2, "3"), np.float32, TypeError, r"target\['a'\].shape\[1\] must be an int"),
        ((True, 2), np.float32, TypeError, r"target\['a'\].shape\[0\] must be an int"),
        ((2, -1), np.float32, ValueError, r"target\['a'\].shape\[1\] must be an int >= 0"),
        ((1,) * 65, np.float32, ValueError, r"target\['a'\].shape is not a shape of any array: .*65 dimensions"),
        ((0, 2**63), np.uint8, ValueError, r"target\['a'\].shape is not a shape of any array"),
        ((0, 2**61), np.float64, ValueError, r"target\['a'\].shape is not a shape of any array"),
        ((2,), [("a", "f4"), ("a", "f4")], TypeError, r"target\['a'\] must be an array or scalar"),
        ((2,), (np.int32, -1), TypeError, r"target\['a'\] must be an array or scalar"),
        ((2,), "f4,,", TypeError, r"target\['a'\] must be an array or scalar"),
        ((2,), (np.void, 2**63), TypeError, r"target\['a'\] must be an array or scalar"),
    ],
    ids=[
        "str-shape", "letters-shape", "bytes-shape", "int-shape", "mapping-shape", "float-extent", "str-extent",
        "bool-extent", "negative-extent", "65-dims", "extent-past-intp", "bytes-past-intp", "repeated-field-dtype",
        "negative-subarray-dtype", "dtype-syntax", "void-too-large",
    ],
)  # fmt: skip
def test_array_like_targets_with_malformed_shapes_or_dtypes_are_refused_before_reading(
    tmp_path, shape, dtype, error, expected
):
    path = tmp_path / "never-read.msgpack"
    path.write_bytes(b"\xc1")
    with pytest.raises(error, match=expected):
        load_msgpack(path, {"a": _ArrayLike(shape, dtype)}, max_bytes=10)


def test_array_like_targets_with_integer_like_extents_still_load(tmp_path):
    path = tmp_path / "state.msgpack"
    save_msgpack(path, {"a": np.ones((2, 3), np.float32), "e": np.zeros((0, 4), np.int8)}, overwrite=False)
    target = {
        "a": _ArrayLike([np.int64(2), 3], np.dtype(np.float32)),
        "e": jax.ShapeDtypeStruct((0, 4), jnp.int8),
    }
    loaded = load_msgpack(path, target, max_bytes=1000)
    assert loaded["a"].shape == (2, 3)
    assert loaded["e"].shape == (0, 4)


def test_every_mismatch_is_reported_at_once(tmp_path):
    path = saved(
        tmp_path,
        {
            "params": {"kernel": np.zeros((4, 3), np.float32), "bias": np.zeros(3, np.float16), "extra": 1},
            "step": "one",
            "count": np.int32(3),
            "scale": np.float32(2),
            "nested": np.zeros(2),
            "leftover": {"deep": None},
        },
    )
    target = {
        "params": {"kernel": np.zeros((3, 4), np.float32), "bias": np.zeros(3, np.float32), "absent": 0},
        "step": 0,
        "count": np.zeros(2, np.int32),
        "scale": None,
        "nested": {"x": 0},
        "gone": {"deeper": 1},
    }
    with pytest.raises(ValueError, match="does not match target") as info:
        load_msgpack(path, target, max_bytes=1 << 20)
    message = str(info.value)
    assert str(path) in message
    assert "extra" not in message
    assert "leftover" not in message
    # A dtype of its own is no mismatch: flax loads the float16 bias where target has float32.
    assert "bias" not in message
    for expected in [
        "missing from the file: ['params']['absent'], ['gone']",
        "['params']['kernel']: expected an array or number of shape (3, 4) (target holds a float32[3, 4] array), "
        "got float32[4, 3] (numpy.ndarray)",
        "['step']: expected an array or number of shape () (target holds a Python int), got 'one' (str)",
        "['count']: expected an array or number of shape (2,) (target holds a int32[2] array), got np.int32(3) (int32)",
        "['scale']: expected None, got np.float32(2.0) (float32)",
        "['nested']: expected a mapping, got float64[2] (numpy.ndarray)",
    ]:
        assert expected in message


def test_keys_the_target_lacks_are_left_out(tmp_path):
    # As flax (and tinax 0.2) restore: a target may ask for part of a state dict.
    path = saved(
        tmp_path,
        {"params": {"kernel": np.arange(4, dtype=np.float32), "extra": 1}, "optimizer": {"mu": np.zeros(2)}},
    )
    restored = load_msgpack(path, {"params": {"kernel": np.zeros(4, np.float32)}}, max_bytes=1 << 20)
    assert list(restored) == ["params"]
    assert list(restored["params"]) == ["kernel"]
    np.testing.assert_array_equal(restored["params"]["kernel"], np.arange(4, dtype=np.float32))
    assert load_msgpack(path, {}, max_bytes=1 << 20) == {}


def test_array_like_targets_load_as_numpy_arrays(tmp_path):
    path = saved(tmp_path, {"a": np.arange(8, dtype=np.float32), "b": np.ones((2, 2), ml_dtypes.bfloat16)})
    target = {"a": jnp.zeros(8, jnp.float32), "b": jax.ShapeDtypeStruct((2, 2), jnp.bfloat16)}
    loaded = load_msgpack(path, target, max_bytes=1 << 20)
    assert type(loaded["a"]) is np.ndarray
    assert type(loaded["b"]) is np.ndarray
    np.testing.assert_array_equal(loaded["a"], np.arange(8, dtype=np.float32))
    assert loaded["b"].dtype == np.dtype(ml_dtypes.bfloat16)


def write(tmp_path: pathlib.Path, content: bytes, name: str = "bad.msgpack") -> pathlib.Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


def test_truncated_files_are_refused_at_every_cut(tmp_path):
    whole = saved(tmp_path, rich_state()).read_bytes()
    for cut in range(1, len(whole)):
        path = write(tmp_path, whole[:cut], f"cut{cut}.msgpack")
        with pytest.raises(ValueError, match="truncated") as info:
            load_msgpack(path, rich_state(), max_bytes=len(whole))
        assert str(path) in str(info.value)
        assert isinstance(info.value.__cause__, Exception)


def ndarray_extension(shape: object, name: object, data: bytes, code: int = 1) -> bytes:
    return msgpack.packb({"a": msgpack.ExtType(code, msgpack.packb([shape, name, data]))})


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"a": 1}', "bytes after its msgpack value"),
        (b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ", "bytes after its msgpack value"),
        (b"\xc1\xc1\xc1", "well-formed"),
        (msgpack.packb({1: 2}), "well-formed"),
        (msgpack.packb({"a": msgpack.ExtType(9, b"x")}), "unknown msgpack extension type 9"),
        (ndarray_extension([2], "float32", b"\x00" * 4), "4 bytes of data for shape"),
        (ndarray_extension([1], "object", b"\x00" * 8), "unsupported dtype name"),
        (ndarray_extension([1], "str", b"\x00" * 8), "unsupported dtype name"),
        (ndarray_extension([-1], "int8", b""), "invalid shape"),
        (ndarray_extension([True], "int8", b"\x00"), "invalid shape"),
        (ndarray_extension([2], "int8", b"\x00\x00", code=3), "holds an array of shape"),
        (msgpack.packb({"a": msgpack.ExtType(1, msgpack.packb([[1], "int8"]))}), "must hold"),
        (msgpack.packb({"a": msgpack.ExtType(1, msgpack.packb([[1], "int8", 5]))}), "must be msgpack bin"),
        (msgpack.packb({"a": msgpack.ExtType(1, b"\x93\x91")}), "ends inside its shape"),
        (msgpack.packb({"a": msgpack.ExtType(2, msgpack.packb(["x", 1]))}), "real, imag"),
        (b"\xdd\xff\xff\xff\xff", "exceeds max_array_len"),
        (b"\xdf\xff\xff\xff\xff", "exceeds max_map_len"),
        # A claimed length larger than the file never grows the buffer past the file size.
        (b"\xc6\xff\xff\xff\xff", "truncated|exceeds max_bin_len"),
        (b"\xc9\xff\xff\xff\xff\x01", "truncated|exceeds max_ext_len"),
        (b"\x81\xa1a" * 5000 + b"\xc0", "well-formed"),
    ],
    ids=[
        "json",
        "safetensors-like",
        "never-used-marker",
        "int-key",
        "unknown-extension",
        "short-data",
        "object-dtype",
        "str-dtype",
        "negative-extent",
        "bool-extent",
        "scalar-with-shape",
        "two-field-ndarray",
        "int-data",
        "cut-ndarray-header",
        "bad-complex",
        "huge-array-header",
        "huge-map-header",
        "huge-bin-header",
        "huge-extension-header",
        "deep-nesting",
    ],
)
def test_malformed_and_foreign_files_raise_value_error_naming_the_file(tmp_path, content, expected):
    path = write(tmp_path, content)
    with pytest.raises(ValueError, match=expected) as info:
        load_msgpack(path, {"a": np.zeros(1, np.int8)}, max_bytes=1 << 20)
    assert str(path) in str(info.value)


def test_decoder_problems_keep_msgpacks_error_types(tmp_path):
    # tinax 0.2 let msgpack's errors through; ours are those types too.
    with pytest.raises(msgpack.ExtraData, match="3 bytes after its msgpack value") as trailing:
        load_msgpack(write(tmp_path, msgpack.packb({"a": 1}) + b"xyz", "tail.msgpack"), {"a": 0}, max_bytes=100)
    assert isinstance(trailing.value, ValueError)
    with pytest.raises(msgpack.FormatError, match="well-formed") as garbage:
        load_msgpack(write(tmp_path, b"\xc1\xc1\xc1", "garbage.msgpack"), {}, max_bytes=100)
    assert isinstance(garbage.value, ValueError)
    assert isinstance(garbage.value.__cause__, msgpack.FormatError)


def test_structural_problems_without_a_decoder_error(tmp_path):
    with pytest.raises(ValueError, match="is empty"):
        load_msgpack(write(tmp_path, b"", "empty.msgpack"), {}, max_bytes=10)
    with pytest.raises(ValueError, match="3 bytes after its msgpack value"):
        load_msgpack(write(tmp_path, msgpack.packb({"a": 1}) + b"xyz", "tail.msgpack"), {"a": 0}, max_bytes=100)
    with pytest.raises(ValueError, match="holds a msgpack list, not a state dict"):
        load_msgpack(write(tmp_path, msgpack.packb([1, 2]), "list.msgpack"), {}, max_bytes=100)


def chunked_file(tmp_path: pathlib.Path, chunked: dict[str, object]) -> pathlib.Path:
    def encode(value: object) -> object:
        return msgpack.ExtType(1, msgpack.packb((value.shape, value.dtype.name, value.tobytes())))  # type: ignore[attr-defined]

    return write(tmp_path, msgpack.packb({"w": chunked}, default=encode), "chunked.msgpack")


def test_malformed_chunked_arrays_are_reported_as_mismatches(tmp_path):
    pieces = {"0": np.arange(4, dtype=np.float32), "1": np.arange(2, dtype=np.float32)}
    good = {"__msgpack_chunked_array__": True, "shape": {"0": 2, "1": 3}, "chunks": pieces}
    loaded = load_msgpack(chunked_file(tmp_path, good), {"w": np.zeros((2, 3), np.float32)}, max_bytes=1000)
    np.testing.assert_array_equal(loaded["w"], np.arange(6).reshape(2, 3) % 4)
    for broken, expected in [
        ({**good, "shape": {"0": 7}}, "hold 6 elements"),
        ({**good, "shape": {"1": 6}}, "keys '0', '1'"),
        ({**good, "chunks": {}}, "one or more flat arrays"),
        ({**good, "chunks": {"0": np.zeros(3, np.float32), "1": np.zeros(3, np.int32)}}, "different dtypes"),
        ({**good, "__msgpack_chunked_array__": 1}, "expected the keys"),
    ]:
        with pytest.raises(ValueError, match=expected) as info:
            load_msgpack(chunked_file(tmp_path, broken), {"w": np.zeros((2, 3), np.float32)}, max_bytes=1000)
        assert "['w']: a malformed chunked array" in str(info.value)


# Byte compatibility with flax itself. The isolation check installs
# tinax-weights without flax, so these skip there.


@pytest.fixture
def flax_serialization():
    return pytest.importorskip(
        "flax.serialization", reason="flax is not installed (tinax-weights is checked in isolation without it)"
    )


def test_flax_writes_the_same_bytes_and_reads_ours(tmp_path, flax_serialization):
    state = rich_state()
    path = saved(tmp_path, state)
    ours = path.read_bytes()
    assert ours == flax_serialization.to_bytes(state)
    assert_same_state(flax_serialization.msgpack_restore(ours), state)
    assert_same_state(flax_serialization.from_bytes(rich_state(), ours), state)


def test_we_read_what_flax_writes(tmp_path, flax_serialization):
    state = rich_state()
    for name, content in [
        ("to_bytes.msgpack", flax_serialization.to_bytes(state)),
        ("serialize.msgpack", flax_serialization.msgpack_serialize(state)),  # Keys sorted by jax's tree_map.
    ]:
        loaded = load_msgpack(write(tmp_path, content, name), rich_state(), max_bytes=1 << 20)
        assert_same_state(loaded, state)
    float8 = {"a": np.array([1, 2], ml_dtypes.float8_e5m2), "b": np.array([3], ml_dtypes.int4)}
    loaded = load_msgpack(write(tmp_path, flax_serialization.to_bytes(float8), "narrow.msgpack"), float8, max_bytes=999)
    assert_same_state(loaded, float8)


def test_chunked_arrays_cross_between_flax_and_us(tmp_path, flax_serialization):
    array = np.arange(30, dtype=np.int16).reshape(3, 10)
    buffer = io.BytesIO()
    _write_state(buffer, {"w": array}, max_chunk_bytes=8)
    np.testing.assert_array_equal(flax_serialization.msgpack_restore(buffer.getvalue())["w"], array)
    # flax's own chunked form of a small array: one chunk, under flax's name for the marker.
    flax_chunked = flax_serialization._chunk(array)
    content = flax_serialization.msgpack_serialize({"w": flax_chunked})
    loaded = load_msgpack(write(tmp_path, content), {"w": np.zeros((3, 10), np.int16)}, max_bytes=1 << 20)
    np.testing.assert_array_equal(loaded["w"], array)


def test_big_endian_arrays_survive_where_flax_misreads_them(tmp_path, flax_serialization):
    array = np.arange(4, dtype=">f4")
    assert not np.array_equal(flax_serialization.msgpack_restore(flax_serialization.to_bytes({"a": array}))["a"], array)
    ours = saved(tmp_path, {"a": array}).read_bytes()
    np.testing.assert_array_equal(flax_serialization.msgpack_restore(ours)["a"], array)
