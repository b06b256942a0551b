"""Mutated safetensors files only ever give ValueError (TypeError for packed tensors); random arrays round-trip."""

from __future__ import annotations

import json
import pathlib
import random
import struct
from collections import Counter
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import safetensors.numpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinax.weights import LoadedSafetensors, SafetensorsInfo, inspect_safetensors, load_safetensors, save_safetensors

CASES = 1500
SEED = 20260
# Generous enough for every metadata the mutations write; 0 would refuse them all.
METADATA_LIMIT = 1000


def base_files(folder: pathlib.Path) -> list[bytes]:
    """Valid files of several shapes: ours with metadata, scalars and empties, and one upstream wrote."""
    rng = np.random.default_rng(0)
    contents = [
        {
            "encoder.weight": rng.standard_normal((4, 3)).astype(np.float32),
            "encoder.bias": rng.standard_normal(3).astype(ml_dtypes.bfloat16),
            "steps": np.arange(5, dtype=np.int64),
            "mask": np.array([True, False, True]),
            "scale": rng.standard_normal(2).astype(ml_dtypes.float8_e4m3fn),
        },
        {"scalar": np.full((), 3.5, dtype=np.float64), "empty": np.zeros((0, 2), dtype=np.float16)},
        {"only": np.arange(7, dtype=np.uint8)},
    ]
    files = []
    for index, tensors in enumerate(contents):
        path = folder / f"base{index}.safetensors"
        save_safetensors(
            path,
            tensors,
            overwrite=False,
            metadata={"index": str(index)} if index == 0 else None,
            max_metadata_bytes=METADATA_LIMIT,
        )
        files.append(path.read_bytes())
    upstream = folder / "upstream.safetensors"
    safetensors.numpy.save_file({"a": np.ones((2, 2), np.int32), "b": np.zeros(3, np.complex64)}, upstream)
    files.append(upstream.read_bytes())
    return files


def header_span(data: bytes) -> tuple[int, int]:
    """Where the header lies, clamped to the data (already mutated data may be short)."""
    if len(data) < 8:
        return len(data), len(data)
    length = struct.unpack("<Q", data[:8])[0]
    return 8, min(8 + length, len(data))


def with_header(data: bytes, header: bytes, length: int | None = None) -> bytes:
    _, end = header_span(data)
    return struct.pack("<Q", len(header) if length is None else length % 2**64) + header + data[end:]


INTERESTING_BYTES = b'{}[]":,0123456789-+eE. \t\n\x00\xff\\'
INTERESTING_NUMBERS: list[Any] = [
    0,
    1,
    2,
    3,
    4,
    7,
    8,
    -1,
    -8,
    2**31,
    2**63,
    2**64 + 5,
    10**30,
    1.5,
    True,
    None,
    "8",
    [],
]


def flip_header_bytes(rng: random.Random, data: bytes) -> bytes:
    start, end = header_span(data)
    if start == end:
        start, end = 0, len(data)
    if not data:
        return b"{"
    mutable = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        position = rng.randrange(start, end)
        mutable[position] = rng.choice(INTERESTING_BYTES) if rng.random() < 0.5 else rng.randrange(256)
    return bytes(mutable)


def rewrite_length_field(rng: random.Random, data: bytes) -> bytes:
    start, end = header_span(data)
    length = end - start
    choice = rng.choice(
        [0, 1, 2, length - 1, length + 1, len(data) - 8, len(data), 100_000_001, 2**63, 2**64 - 1, rng.randrange(2**64)]
    )
    return struct.pack("<Q", choice % 2**64) + data[8:]


def truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(len(data))] if data else data


def extend(rng: random.Random, data: bytes) -> bytes:
    return data + bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))


def mutate_entry(rng: random.Random, data: bytes) -> bytes:
    start, end = header_span(data)
    header = json.loads(data[start:end])
    names = [name for name in header if name != "__metadata__"]
    name = rng.choice(names)
    field = rng.choice(["data_offsets", "shape", "dtype", "extra", "entry"])
    tensor = header[name]
    if field == "data_offsets":
        offsets = list(tensor["data_offsets"])
        position = rng.randrange(2)
        offsets[position] = rng.choice([offsets[position] + rng.choice([-4, -1, 1, 2, 8]), *INTERESTING_NUMBERS])
        if rng.random() < 0.2:
            offsets = offsets[::-1] if rng.random() < 0.5 else [*offsets, 0]
        tensor["data_offsets"] = offsets
    elif field == "shape":
        shape = list(tensor["shape"])
        if shape and rng.random() < 0.7:
            shape[rng.randrange(len(shape))] = rng.choice(INTERESTING_NUMBERS)
        else:
            shape.append(rng.choice(INTERESTING_NUMBERS))
        tensor["shape"] = shape
    elif field == "dtype":
        tensor["dtype"] = rng.choice(["F32", "F64", "BF16", "F8_E5M2", "F4", "F6_E3M2", "I128", "f32", "", 4, None])
    elif field == "extra":
        tensor[rng.choice(["strides", "order", "dtype"])] = rng.choice(INTERESTING_NUMBERS)
    else:
        header[name] = rng.choice(INTERESTING_NUMBERS)
    encoded = json.dumps(header).encode()
    return with_header(data, encoded, None if rng.random() < 0.8 else len(encoded) + rng.choice([-2, -1, 1, 3]))


def mutate_structure(rng: random.Random, data: bytes) -> bytes:
    start, end = header_span(data)
    text = data[start:end].rstrip()
    kind = rng.randrange(6)
    if kind == 0:  # Repeat the first tensor entry under its own name.
        header = json.loads(text)
        name = next(name for name in header if name != "__metadata__")
        duplicate = json.dumps({name: header[name]})[1:-1].encode()
        text = text[:-1] + b"," + duplicate + b"}"
    elif kind == 1:
        text = rng.choice([b"[]", b"null", b"1", b'"x"', b"{", b"{}}", b"NaN", b"\xef\xbb\xbf{}"])
    elif kind == 2:
        header = json.loads(text)
        header["__metadata__"] = rng.choice([{"k": 1}, ["k"], "k", {"k": None}, {"k": "v" * 50}])
        text = json.dumps(header).encode()
    elif kind == 3:
        depth = rng.randint(1, 50_000)
        text = b"[" * depth + b"]" * depth
    elif kind == 4:
        cut = rng.randrange(len(text))
        text = text[:cut] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 8))) + text[cut:]
    else:
        text = text.replace(b'"', b"'", 1) if rng.random() < 0.5 else text.replace(b"data_offsets", b"offsets", 1)
    return with_header(data, text)


def corrupt_payload(rng: random.Random, data: bytes) -> bytes:
    # Payload bytes are opaque: a changed payload still describes a valid file.
    _, end = header_span(data)
    if end == len(data):
        return data
    mutable = bytearray(data)
    mutable[rng.randrange(end, len(data))] ^= 0xFF
    return bytes(mutable)


# Byte-level mutations apply to any bytes; structural ones need a valid file.
BYTE_MUTATIONS: dict[str, Callable[[random.Random, bytes], bytes]] = {
    "flip_header_bytes": flip_header_bytes,
    "rewrite_length_field": rewrite_length_field,
    "truncate": truncate,
    "extend": extend,
    "corrupt_payload": corrupt_payload,
}
MUTATIONS: dict[str, Callable[[random.Random, bytes], bytes]] = {
    **BYTE_MUTATIONS,
    "mutate_entry": mutate_entry,
    "mutate_structure": mutate_structure,
}


def test_mutated_files_give_only_value_errors(tmp_path: pathlib.Path) -> None:
    rng = random.Random(SEED)
    originals = base_files(tmp_path)
    target = tmp_path / "case.safetensors"
    outcomes: Counter[str] = Counter()
    unexpected: list[str] = []
    for case in range(CASES):
        data = rng.choice(originals)
        applied = [rng.choice(list(MUTATIONS))]
        data = MUTATIONS[applied[0]](rng, data)
        if rng.random() < 0.25:
            applied.append(rng.choice(list(BYTE_MUTATIONS)))
            data = BYTE_MUTATIONS[applied[1]](rng, data)
        target.write_bytes(data)
        try:
            info = inspect_safetensors(target, max_metadata_bytes=METADATA_LIMIT)
        except ValueError:
            info = None
        except Exception as error:
            unexpected.append(f"case {case} {applied}: inspect raised {type(error).__name__}: {error}")
            continue
        try:
            loaded = load_safetensors(target, max_bytes=len(data), max_metadata_bytes=METADATA_LIMIT)
        except ValueError:
            loaded = None
        except TypeError as error:
            # A valid header may describe packed sub-byte tensors, which no array type holds.
            if info is None or all(tensor.numpy_dtype is not None for tensor in info.tensors.values()):
                unexpected.append(f"case {case} {applied}: load raised TypeError: {error}")
            outcomes["accepted"] += 1
            continue
        except Exception as error:
            unexpected.append(f"case {case} {applied}: load raised {type(error).__name__}: {error}")
            continue
        # Both read the same header, so they must agree on whether the file is valid.
        assert (info is None) == (loaded is None), f"case {case} {applied}: inspect and load disagree"
        if info is not None and loaded is not None:
            assert isinstance(info, SafetensorsInfo)
            assert isinstance(loaded, LoadedSafetensors)
            assert loaded.info == info
            assert sum(array.nbytes for array in loaded.tensors.values()) == info.nbytes
            assert len(data) - info.nbytes >= 8 + 2
            outcomes["accepted"] += 1
        else:
            outcomes["rejected"] += 1
    assert not unexpected, "\n".join(unexpected[:20])
    assert sum(outcomes.values()) == CASES
    # The mutations must mostly produce invalid files, or the test proves little.
    assert outcomes["rejected"] > CASES // 2
    assert outcomes["accepted"] > 0


# --- property: anything we save loads back exactly ----------------------------------------------------------------

STORABLE = [
    np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64, np.float16,
    np.float32, np.float64, np.complex64, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
    ml_dtypes.float8_e8m0fnu, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz,
]  # fmt: skip


@st.composite
def stored_arrays(draw: st.DrawFn) -> np.ndarray[Any, Any]:
    dtype = np.dtype(draw(st.sampled_from(STORABLE)))
    shape = tuple(draw(st.lists(st.integers(0, 5), max_size=3)))
    count = int(np.prod(shape))
    if dtype == np.bool_:
        array = np.array(draw(st.lists(st.booleans(), min_size=count, max_size=count)), dtype=np.bool_)
    else:
        raw = draw(st.binary(min_size=count * dtype.itemsize, max_size=count * dtype.itemsize))
        array = np.frombuffer(raw, dtype=np.uint8).view(dtype).copy()
    array = array.reshape(shape)
    view = draw(st.sampled_from(["plain", "transpose", "reverse", "step"]))
    if view == "transpose":
        array = array.T
    elif view == "reverse" and array.ndim:
        array = array[::-1]
    elif view == "step" and array.ndim:
        array = array[::2]
    if draw(st.booleans()) and array.dtype.byteorder == "=" and array.dtype.kind in "iufc":
        array = array.astype(array.dtype.newbyteorder(">"))
    return array


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tensors=st.dictionaries(st.text(min_size=1, max_size=12).filter(lambda name: name != "__metadata__"),
                            stored_arrays(), max_size=5),
    metadata=st.none() | st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
)  # fmt: skip
def test_saved_arrays_load_back_exactly(
    tmp_path: pathlib.Path, tensors: dict[str, np.ndarray[Any, Any]], metadata: dict[str, str] | None
) -> None:
    path = tmp_path / "property.safetensors"
    save_safetensors(path, tensors, overwrite=True, metadata=metadata, max_metadata_bytes=METADATA_LIMIT)
    loaded = load_safetensors(
        path, max_bytes=sum(array.nbytes for array in tensors.values()), max_metadata_bytes=METADATA_LIMIT
    )
    assert loaded.info.metadata == (metadata or {})
    assert set(loaded.tensors) == set(tensors)
    for name, array in tensors.items():
        result = loaded.tensors[name]
        assert result.dtype == array.dtype.newbyteorder("=")
        assert result.shape == array.shape
        expected = np.ascontiguousarray(array).astype(result.dtype)
        assert result.tobytes() == expected.tobytes()
