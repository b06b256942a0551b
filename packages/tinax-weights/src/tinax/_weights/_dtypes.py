"""The safetensors dtype names, their NumPy / ml_dtypes types, and the name type itself."""

from __future__ import annotations

import sys
from typing import Any

import ml_dtypes
import numpy as np

__all__ = [
    "KNOWN_NAMES",
    "PACKED_DTYPES",
    "SAFETENSORS_DTYPES",
    "SafetensorsDtype",
    "dtype_name",
    "is_big_endian_in_memory",
    "layout_rank",
    "safetensors_dtype",
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

#: Safetensors dtypes that pack several elements into a byte: their size in
#: bits and how they are packed. NumPy and ml_dtypes store one element per
#: byte, so no array type matches their bytes: headers may describe them, but
#: they cannot be loaded into arrays.
PACKED_DTYPES: dict[str, tuple[int, str]] = {
    "F4": (4, "4-bit floats packed two to a byte"),
    "F6_E2M3": (6, "6-bit floats packed four to three bytes"),
    "F6_E3M2": (6, "6-bit floats packed four to three bytes"),
}

_NAME_BY_DTYPE = {dtype: name for name, dtype in SAFETENSORS_DTYPES.items()}
_RANK = {name: position for position, name in enumerate(SAFETENSORS_DTYPES)}


class SafetensorsDtype(str):
    """The name of a safetensors element type, such as ``"F32"`` or ``"BF16"``.

    It is a ``str`` (equal to, and hashing like, the plain name), and it also
    compares equal to the exact NumPy or ml_dtypes type of its elements in
    either byte order, given as a ``numpy.dtype`` or a scalar type:
    ``TensorInfo((2,), "BF16").dtype`` equals ``"BF16"``,
    ``np.dtype(ml_dtypes.bfloat16)`` and ``ml_dtypes.bfloat16``. Hashes follow
    the str, so a set or dict keyed by names finds it.

    Being a str, it must not be handed to NumPy as a dtype: NumPy would read
    ``"U8"`` as a Unicode string type. Use :attr:`numpy_dtype` for that.
    """

    __slots__ = ()

    @property
    def numpy_dtype(self) -> np.dtype[Any] | None:
        """The exact NumPy or ml_dtypes type, in native byte order; None for packed sub-byte types."""
        return SAFETENSORS_DTYPES.get(self)

    @property
    def bits(self) -> int:
        """The size of one element in bits."""
        packed = PACKED_DTYPES.get(self)
        if packed is not None:
            return packed[0]
        return SAFETENSORS_DTYPES[self].itemsize * 8

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return str.__eq__(self, other)
        counterpart = _as_numpy_dtype(other)
        if counterpart is None:
            return NotImplemented
        return dtype_name(counterpart) == str(self)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    # Equal objects must hash alike; the str hash keeps name lookups working,
    # which matter more than hashing like a numpy.dtype (they cannot both hold).
    __hash__ = str.__hash__

    def __repr__(self) -> str:
        return str.__repr__(self)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (safetensors_dtype, (str(self),))


def _as_numpy_dtype(value: object) -> np.dtype[Any] | None:
    if isinstance(value, np.dtype):
        return value
    if isinstance(value, type) and issubclass(value, np.generic):
        return np.dtype(value)
    return None


#: Every safetensors dtype name, exact and packed, as its SafetensorsDtype.
KNOWN_NAMES: dict[str, SafetensorsDtype] = {
    name: SafetensorsDtype(name) for name in (*SAFETENSORS_DTYPES, *PACKED_DTYPES)
}


def safetensors_dtype(name: str) -> SafetensorsDtype:
    """Returns the SafetensorsDtype of a known name.

    Raises:
      ValueError: If ``name`` is not a safetensors dtype name.
    """
    known = KNOWN_NAMES.get(name)
    if known is None:
        raise ValueError(f"dtype must be a safetensors dtype name ({', '.join(KNOWN_NAMES)}), got {name!r}")
    return known


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
