"""The one table of array dtypes that tinax's file formats store.

Safetensors, Flax msgpack and tinax records all read their dtypes from here,
so each format stores the same set of element types, except where the format
itself has no name for one:

* every NumPy bool, (u)int8 to (u)int64, float16/32/64 and complex64/128
  type, and every element type of the installed ml_dtypes (bfloat16, the
  float8, float6 and float4 formats, int4 and so on), by its NumPy name;
* of these, safetensors names only those its ``Dtype`` enum lists with
  one element per byte or more (:data:`SAFETENSORS_NAMES`): it has no
  complex128, none of the narrower ml_dtypes integers or float8 variants,
  and stores its 4- and 6-bit floats packed, which no array type holds.

The table holds native byte order; how a format marks byte order is the
format's own business.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "SAFETENSORS_NAMES",
    "array_dtype",
    "array_dtypes",
    "is_big_endian_in_memory",
    "safetensors_dtypes",
]

_NUMPY_TYPES: tuple[type[np.generic], ...] = (
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
)

#: Safetensors' name for each element type it stores one or more bytes
#: wide, mapped to the NumPy or ml_dtypes name, in safetensors' own order
#: (its ``Dtype`` enum, smallest element first).
SAFETENSORS_NAMES: Mapping[str, str] = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "F8_E5M2": "float8_e5m2",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E8M0": "float8_e8m0fnu",
    "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "I16": "int16",
    "U16": "uint16",
    "F16": "float16",
    "BF16": "bfloat16",
    "I32": "int32",
    "U32": "uint32",
    "F32": "float32",
    "C64": "complex64",
    "F64": "float64",
    "I64": "int64",
    "U64": "uint64",
}


@functools.cache
def array_dtypes() -> dict[str, np.dtype[Any]]:
    """Returns every dtype the formats store, by its NumPy name, in native byte order.

    ml_dtypes is imported on the first call, so importing a module that
    uses the table does not import it.
    """
    import ml_dtypes

    table = {np.dtype(kind).name: np.dtype(kind) for kind in _NUMPY_TYPES}
    for name in sorted(dir(ml_dtypes)):
        candidate = getattr(ml_dtypes, name)
        if isinstance(candidate, type) and issubclass(candidate, np.generic) and np.dtype(candidate).name == name:
            table[name] = np.dtype(candidate)
    return table


@functools.cache
def safetensors_dtypes() -> dict[str, np.dtype[Any]]:
    """Returns each safetensors name with its dtype, in safetensors' order."""
    table = array_dtypes()
    return {code: table[name] for code, name in SAFETENSORS_NAMES.items()}


def array_dtype(dtype: np.dtype[Any]) -> np.dtype[Any] | None:
    """Returns ``dtype`` in native byte order if the table holds it, else None.

    Structured, subarray, object, string and datetime dtypes are never held,
    nor is a dtype that merely shares a held dtype's name.
    """
    native = dtype if dtype.isnative else dtype.newbyteorder("=")
    return native if array_dtypes().get(native.name) == native else None


def is_big_endian_in_memory(dtype: np.dtype[Any]) -> bool:
    """Returns whether elements of ``dtype`` sit in memory most significant byte first.

    One-byte types have no byte order.
    """
    if dtype.itemsize <= 1:
        return False
    return dtype.byteorder == ">" or (dtype.byteorder == "=" and sys.byteorder == "big")
