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

#: Safetensors dtypes with an exact NumPy or ml_dtypes counterpart, in the order of safetensors'
#: ``Dtype`` enum, on which :func:`in_file_order` relies to align every tensor.
SAFETENSORS_DTYPES: dict[str, np.dtype[Any]] = dtypes.safetensors_dtypes()

#: Safetensors dtypes that pack several elements into a byte (bits, packing): headers may
#: describe them, but no array type matches their bytes, so they cannot be loaded.
PACKED_DTYPES: dict[str, tuple[int, str]] = {
    "F4": (4, "4-bit floats packed two to a byte"),
    "F6_E2M3": (6, "6-bit floats packed four to three bytes"),
    "F6_E3M2": (6, "6-bit floats packed four to three bytes"),
}

_NAME_BY_DTYPE = {dtype: name for name, dtype in SAFETENSORS_DTYPES.items()}
_RANK = {name: position for position, name in enumerate(SAFETENSORS_DTYPES)}


class SafetensorsDtype(str):
    """The name of a safetensors element type (``"F32"``): a ``str`` that also equals its exact NumPy type.

    Never hand it to NumPy as a dtype (``"U8"`` would read as Unicode); use :attr:`numpy_dtype`.
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

    # Hashing like the str keeps name lookups working, which matters more than hashing like a numpy.dtype.
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
    """The SafetensorsDtype of a known name; ValueError for another."""
    known = KNOWN_NAMES.get(name)
    if known is None:
        raise ValueError(f"dtype must be a safetensors dtype name ({', '.join(KNOWN_NAMES)}), got {name!r}")
    return known


def dtype_name(dtype: np.dtype[Any]) -> str | None:
    """The safetensors name of an array dtype in either byte order, or None if it has none."""
    native = dtype if dtype.isnative else dtype.newbyteorder("=")
    return _NAME_BY_DTYPE.get(native)


def require_dtype_name(dtype: np.dtype[Any] | None, name: str, value: object) -> str:
    """The safetensors name of ``dtype``, the dtype of ``value``; TypeError naming ``name`` if it has none."""
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
