"""Decoding flax msgpack state dicts: the whole file, its array extensions and chunked arrays.

The decoder reads the file in pieces under limits that follow its size; arrays
stay in flax's chunked form until :func:`unchunk` joins them.
"""

from __future__ import annotations

import math
import pathlib
from typing import Any

import numpy as np

from tinax._core import dtypes
from tinax._weights._compat02 import malformed_msgpack, trailing_msgpack_data
from tinax._weights._remote import RemotePath
from tinax._weights._safetensors._header import ReadableFile

__all__ = [
    "CHUNKED_ARRAY_MARKER",
    "COMPLEX_EXTENSION",
    "NDARRAY_EXTENSION",
    "SCALAR_EXTENSION",
    "read_state_tree",
    "unchunk",
]

NDARRAY_EXTENSION = 1
COMPLEX_EXTENSION = 2
SCALAR_EXTENSION = 3

#: The key flax puts in the map that stands for a chunked array.
CHUNKED_ARRAY_MARKER = "__msgpack_chunked_array__"

#: How much the reader asks the file for at a time.
_READ_SIZE = 1 << 20

#: The ndarray header (shape and dtype name) always fits in this many bytes:
#: at most 64 dimensions of at most 9 bytes each, and a short name.
_NDARRAY_HEADER_BYTES = 1024


def read_state_tree(handle: ReadableFile, size: int, source: pathlib.Path | RemotePath) -> dict[Any, Any]:
    """Decodes a whole msgpack state dict under limits that follow the file's size.

    Arrays stay in flax's chunked form where the file chunks them; also used by ``tinax inspect``.
    """
    import msgpack

    if size == 0:
        raise ValueError(f"{str(source)!r} is empty, not a msgpack state dict")
    # Limits follow the file size, so a crafted header cannot make the decoder preallocate much beyond it.
    unpacker = msgpack.Unpacker(
        handle,
        read_size=min(size, _READ_SIZE),
        max_buffer_size=size,
        max_str_len=size,
        max_bin_len=size,
        max_array_len=size,
        max_map_len=size // 2,
        max_ext_len=size,
        raw=False,
        strict_map_key=True,
        ext_hook=_decode_extension,
    )
    try:
        tree = unpacker.unpack()
        consumed = unpacker.tell()
    except msgpack.OutOfData as error:
        raise ValueError(f"{str(source)!r} ends in the middle of a value; it is truncated") from error
    except (msgpack.UnpackException, ValueError, TypeError, OverflowError, RecursionError) as error:
        cause = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        message = f"{str(source)!r} is not a well-formed msgpack state dict: {cause}"
        raise malformed_msgpack(message, error) from error
    if consumed != size:
        raise trailing_msgpack_data(
            f"{str(source)!r} has {size - consumed} bytes after its msgpack value; it is not a single state dict"
        )
    if not isinstance(tree, dict):
        raise ValueError(f"{str(source)!r} holds a msgpack {type(tree).__name__}, not a state dict (a map)")
    return tree


def _decode_extension(code: int, payload: bytes) -> object:
    if code == NDARRAY_EXTENSION:
        return _decode_ndarray(payload)
    if code == SCALAR_EXTENSION:
        array = _decode_ndarray(payload)
        if array.ndim != 0:
            raise ValueError(f"a NumPy scalar extension holds an array of shape {array.shape}")
        return array[()]
    if code == COMPLEX_EXTENSION:
        import msgpack

        parts = msgpack.unpackb(payload)
        if not (isinstance(parts, list) and len(parts) == 2 and all(type(part) in (int, float) for part in parts)):
            raise ValueError(f"a complex extension must hold [real, imag], got {parts!r}")
        return complex(parts[0], parts[1])
    raise ValueError(f"unknown msgpack extension type {code}; flax state dicts use types 1, 2 and 3")


def _decode_ndarray(payload: bytes) -> np.ndarray[Any, Any]:
    """Decodes flax's ``[shape, dtype name, bytes]`` into a fresh, writable array."""
    import msgpack

    header = msgpack.Unpacker(raw=True, max_buffer_size=_NDARRAY_HEADER_BYTES)
    header.feed(payload[:_NDARRAY_HEADER_BYTES])
    try:
        if header.read_array_header() != 3:
            raise ValueError("an ndarray extension must hold [shape, dtype name, bytes]")
        shape = header.unpack()
        name = header.unpack()
    except msgpack.OutOfData as error:
        raise ValueError("an ndarray extension ends inside its shape or dtype name") from error
    offset = header.tell()
    if not (isinstance(shape, list) and all(type(extent) is int and extent >= 0 for extent in shape)):
        raise ValueError(f"an ndarray extension has an invalid shape {shape!r}")
    dtype = dtypes.array_dtypes().get(name.decode("ascii", "replace")) if isinstance(name, bytes) else None
    if dtype is None:
        raise ValueError(f"an ndarray extension has an unsupported dtype name {name!r}")
    start, length = _buffer_span(payload, offset)
    if start + length != len(payload):
        raise ValueError("an ndarray extension's data does not end where the extension ends")
    if math.prod(shape) * dtype.itemsize != length:
        raise ValueError(f"an ndarray extension has {length} bytes of data for shape {tuple(shape)} of {dtype}")
    array = np.empty(shape, dtype)
    if length:
        array.reshape(-1).view(np.uint8)[:] = np.frombuffer(payload, np.uint8, length, start)
    return array


def _buffer_span(payload: bytes, offset: int) -> tuple[int, int]:
    """Where an ndarray extension's raw bytes start, and how many; pre-bin files hold them as a raw string."""
    if offset >= len(payload):
        raise ValueError("an ndarray extension ends before its data")
    marker = payload[offset]
    if 0xA0 <= marker <= 0xBF:
        return offset + 1, marker & 0x1F
    widths = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4}
    if marker not in widths:
        raise ValueError(f"an ndarray extension's data must be msgpack bin, got marker 0x{marker:02x}")
    width = widths[marker]
    if offset + 1 + width > len(payload):
        raise ValueError("an ndarray extension ends inside its data header")
    return offset + 1 + width, int.from_bytes(payload[offset + 1 : offset + 1 + width], "big")


def unchunk(data: dict[Any, Any]) -> np.ndarray[Any, Any]:
    """Joins flax's chunked form of a large array back into one array."""
    if set(data) != {CHUNKED_ARRAY_MARKER, "shape", "chunks"} or data[CHUNKED_ARRAY_MARKER] is not True:
        expected = f"the keys {CHUNKED_ARRAY_MARKER!r}, 'shape' and 'chunks'"
        raise ValueError(f"expected {expected}, got {sorted(map(str, data))}")
    shape = _numbered_values(data["shape"], "shape")
    chunks = _numbered_values(data["chunks"], "chunks")
    if not all(type(extent) is int and extent >= 0 for extent in shape):
        raise ValueError(f"its shape must hold non-negative ints, got {shape!r}")
    if not chunks or not all(isinstance(chunk, np.ndarray) and chunk.ndim == 1 for chunk in chunks):
        raise ValueError("its chunks must be one or more flat arrays")
    if len({chunk.dtype for chunk in chunks}) != 1:
        raise ValueError(f"its chunks have different dtypes: {sorted({str(chunk.dtype) for chunk in chunks})}")
    total = sum(chunk.size for chunk in chunks)
    if total != math.prod(shape):
        raise ValueError(f"its chunks hold {total} elements, but its shape {tuple(shape)} needs {math.prod(shape)}")
    joined: np.ndarray[Any, Any] = np.concatenate(chunks).reshape(shape)
    return joined


def _numbered_values(value: object, name: str) -> list[Any]:
    """Reads flax's ``{"0": a, "1": b, ...}`` encoding of a tuple."""
    if not isinstance(value, dict) or set(value) != {str(index) for index in range(len(value))}:
        raise ValueError(f"its {name} must be a map with keys '0', '1', ...")
    return [value[str(index)] for index in range(len(value))]
