"""The safetensors dtype names over tinax-core's dtype table, the packed types, and the name type itself."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from tinax._core import dtypes, validation
from tinax._core.dtypes import is_big_endian_in_memory

__all__ = [
    "KNOWN_NAMES",
    "PACKED_DTYPES",
    "SAFETENSORS_DTYPES",
    "SafetensorsDtype",
    "dtype_name",
    "in_file_order",
    "is_big_endian_in_memory",
    "require_dtype_name",
    "safetensors_dtype",
    "tensor_nbytes",
]

#: Every safetensors dtype that has an exact element-for-element NumPy or
#: ml_dtypes counterpart, from tinax-core's one dtype table, in safetensors'
#: own order (the order of its ``Dtype`` enum, smallest element first). The
#: upstream writer lays tensors out by descending position in this order, so
#: every tensor starts at a multiple of its element size (see
#: :func:`in_file_order`).
SAFETENSORS_DTYPES: dict[str, np.dtype[Any]] = dtypes.safetensors_dtypes()

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


def require_dtype_name(dtype: np.dtype[Any] | None, name: str, value: object) -> str:
    """Returns the safetensors name of ``dtype``, the dtype of ``value``.

    Raises:
      TypeError: Naming ``name``, if ``dtype`` is None or has no safetensors name.
    """
    text = None if dtype is None else dtype_name(dtype)
    if text is None:
        known = ", ".join(f"{dtype!s} ({text})" for text, dtype in SAFETENSORS_DTYPES.items())
        validation.fail_type(name, f"an array of a dtype safetensors stores exactly: {known}", value)
    return text


_Described = TypeVar("_Described", bound=tuple[Any, ...])


def in_file_order(tensors: Sequence[_Described]) -> list[_Described]:
    """Sorts ``(name, dtype name, ...)`` items as the upstream writer lays them out: larger elements, then name."""
    return sorted(tensors, key=lambda item: (-_RANK[item[1]], item[0]))


def tensor_nbytes(name: str, shape: Sequence[int]) -> int:
    """The bytes of a tensor of dtype ``name`` and ``shape``."""
    return math.prod(shape) * KNOWN_NAMES[name].bits // 8
