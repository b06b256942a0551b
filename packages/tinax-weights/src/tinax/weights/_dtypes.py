"""The safetensors dtype names and the exact NumPy / ml_dtypes type of each."""

from __future__ import annotations

import sys
from typing import Any

import ml_dtypes
import numpy as np

__all__ = [
    "PACKED_DTYPES",
    "SAFETENSORS_DTYPES",
    "dtype_name",
    "is_big_endian_in_memory",
    "layout_rank",
]

#: Every safetensors dtype that has an exact element-for-element NumPy or
#: ml_dtypes counterpart, listed in safetensors' own order (the order of its
#: ``Dtype`` enum, smallest element first). The upstream writer lays tensors
#: out by descending position in this order, so every tensor starts at a
#: multiple of its element size; :func:`layout_rank` exposes the position.
SAFETENSORS_DTYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype(np.uint8),
    "I8": np.dtype(np.int8),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E8M0": np.dtype(ml_dtypes.float8_e8m0fnu),
    "F8_E4M3FNUZ": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "F8_E5M2FNUZ": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "I16": np.dtype(np.int16),
    "U16": np.dtype(np.uint16),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "I32": np.dtype(np.int32),
    "U32": np.dtype(np.uint32),
    "F32": np.dtype(np.float32),
    "C64": np.dtype(np.complex64),
    "F64": np.dtype(np.float64),
    "I64": np.dtype(np.int64),
    "U64": np.dtype(np.uint64),
}

#: Safetensors dtypes that pack several elements into a byte. NumPy and
#: ml_dtypes store one element per byte, so no array type matches their bytes.
PACKED_DTYPES: dict[str, str] = {
    "F4": "4-bit floats packed two to a byte",
    "F6_E2M3": "6-bit floats packed four to three bytes",
    "F6_E3M2": "6-bit floats packed four to three bytes",
}

_NAME_BY_DTYPE = {dtype: name for name, dtype in SAFETENSORS_DTYPES.items()}
_RANK = {name: position for position, name in enumerate(SAFETENSORS_DTYPES)}


def dtype_name(dtype: np.dtype[Any]) -> str | None:
    """Returns the safetensors name of an array dtype, or None if it has none.

    Byte order does not matter: ``>f4`` and ``<f4`` are both ``F32``.
    """
    native = dtype if dtype.isnative else dtype.newbyteorder("=")
    return _NAME_BY_DTYPE.get(native)


def layout_rank(name: str) -> int:
    """Returns the position of a safetensors dtype name in safetensors' order."""
    return _RANK[name]


def is_big_endian_in_memory(dtype: np.dtype[Any]) -> bool:
    """Returns whether elements of ``dtype`` sit in memory most significant byte first.

    Safetensors stores little-endian bytes, so such data needs a byte swap.
    One-byte types have no byte order.
    """
    if dtype.itemsize <= 1:
        return False
    return dtype.byteorder == ">" or (dtype.byteorder == "=" and sys.byteorder == "big")
