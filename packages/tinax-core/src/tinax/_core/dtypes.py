"""The one table of array dtypes that tinax's file formats store (safetensors, Flax msgpack, records).

It holds every NumPy bool, (u)int8-64, float16/32/64 and complex64/128 type and every installed
ml_dtypes type, by NumPy name, in native byte order. Safetensors names only the ones its ``Dtype``
enum lists at one byte or more per element (:data:`SAFETENSORS_NAMES`): no complex128, no narrower
ml_dtypes integers or extra float8 variants, and its packed 4/6-bit floats fit no array type.
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

_INTEGER_NAMES = tuple(f"{sign}int{bits}" for sign in ("", "u") for bits in (8, 16, 32, 64))
#: NumPy's own stored types, by name.
_NUMPY_NAMES = ("bool", *_INTEGER_NAMES, "float16", "float32", "float64", "complex64", "complex128")

#: Safetensors' name of each type at least one byte wide -> NumPy/ml_dtypes name, in its enum order.
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
    """Every stored dtype by NumPy name, native order; ml_dtypes is imported only on the first call."""
    import ml_dtypes

    table = {name: np.dtype(name) for name in _NUMPY_NAMES}
    for name in sorted(dir(ml_dtypes)):
        candidate = getattr(ml_dtypes, name)
        if isinstance(candidate, type) and issubclass(candidate, np.generic) and np.dtype(candidate).name == name:
            table[name] = np.dtype(candidate)
    return table


@functools.cache
def safetensors_dtypes() -> dict[str, np.dtype[Any]]:
    """Each safetensors name with its dtype, in safetensors' order."""
    table = array_dtypes()
    return {code: table[name] for code, name in SAFETENSORS_NAMES.items()}


def array_dtype(dtype: np.dtype[Any]) -> np.dtype[Any] | None:
    """``dtype`` in native byte order if the table holds exactly it, else None."""
    native = dtype if dtype.isnative else dtype.newbyteorder("=")
    return native if array_dtypes().get(native.name) == native else None


def is_big_endian_in_memory(dtype: np.dtype[Any]) -> bool:
    """Whether ``dtype``'s elements sit most significant byte first (never for one-byte types)."""
    if dtype.itemsize <= 1:
        return False
    return dtype.byteorder == ">" or (dtype.byteorder == "=" and sys.byteorder == "big")
