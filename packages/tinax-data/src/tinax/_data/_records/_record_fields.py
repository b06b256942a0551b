"""What a field of a tinax record may hold: its kind and, for arrays, dtype and ndim.

Only the dtypes the format writes are accepted from a stored descriptor, so
reading a crafted header cannot ask NumPy for another type.
"""

from __future__ import annotations

import dataclasses
import re
import struct
from typing import Any

import numpy as np

from tinax._core import dtypes, validation

KIND_NONE = "none"
KIND_BOOL = "bool"
KIND_INT = "int"
KIND_FLOAT = "float"
KIND_STR = "str"
KIND_BYTES = "bytes"
KIND_ARRAY = "array"

_PLAIN_KINDS: dict[type, str] = {
    type(None): KIND_NONE,
    bool: KIND_BOOL,
    int: KIND_INT,
    float: KIND_FLOAT,
    str: KIND_STR,
    bytes: KIND_BYTES,
}
_PLAIN_TYPES: dict[str, type] = {kind: kind_type for kind_type, kind in _PLAIN_KINDS.items()}
_KINDS = frozenset((*_PLAIN_KINDS.values(), KIND_ARRAY))
_KIND_TEXT = {
    KIND_NONE: "None",
    KIND_BOOL: "a bool",
    KIND_INT: "an int",
    KIND_FLOAT: "a float",
    KIND_STR: "a str",
    KIND_BYTES: "bytes",
}
_SUPPORTED_TEXT = (
    "None, a bool, int, float, str, bytes or a numpy.ndarray of a bool, integer, floating, complex or ml_dtypes dtype"
)

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
# NumPy's limit on the number of dimensions (NPY_MAXDIMS in NumPy 2).
_MAX_NDIM = 64

_BOOL = struct.Struct("<?")
_INT = struct.Struct("<q")
_FLOAT = struct.Struct("<d")
_LENGTH = struct.Struct("<Q")

# The descriptors of the NumPy part of tinax-core's dtype table, with byte order: the only
# strings a header may hand to numpy.dtype, so a crafted one cannot ask for another type.
_BUILTIN_DESCRIPTOR = re.compile(r"[<>|](b1|i[1248]|u[1248]|f[248]|c(8|16))")


def _ml_dtype(name: str) -> np.dtype[Any] | None:
    """Returns the ml_dtypes type of that name from tinax-core's dtype table, or None."""
    dtype = dtypes.array_dtypes().get(name)
    return dtype if dtype is not None and dtype.type.__module__.partition(".")[0] == "ml_dtypes" else None


def dtype_descriptor(dtype: np.dtype[Any]) -> str | None:
    """Returns how the format writes ``dtype``, or None if it cannot be stored."""
    if dtypes.array_dtype(dtype) is None:
        return None
    ml_dtype = _ml_dtype(dtype.name)
    if ml_dtype is not None:
        return dtype.name if ml_dtype == dtype else None
    return dtype.str


def dtype_from_descriptor(descriptor: object) -> np.dtype[Any]:
    """A stored dtype descriptor back as a dtype; only those :func:`dtype_descriptor` writes are accepted."""
    if isinstance(descriptor, str):
        if _BUILTIN_DESCRIPTOR.fullmatch(descriptor):
            dtype = np.dtype(descriptor)
            if dtype.str == descriptor:
                return dtype
        known = _ml_dtype(descriptor)
        if known is not None:
            return known
    raise ValueError(f"unknown array dtype {descriptor!r}")


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """One field of a record: its name, kind and, for arrays, dtype and ndim."""

    name: str
    kind: str
    dtype: np.dtype[Any] | None = None
    ndim: int | None = None

    def describe(self) -> str:
        """Says what every value of this field must be, for error messages."""
        if self.kind != KIND_ARRAY:
            return _KIND_TEXT[self.kind]
        return f"a numpy.ndarray of dtype {self.dtype} with {self.ndim} dimension{'s' if self.ndim != 1 else ''}"

    def to_json(self) -> dict[str, Any]:
        """Returns the header entry of the field."""
        entry: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.kind == KIND_ARRAY:
            assert self.dtype is not None
            entry["dtype"] = dtype_descriptor(self.dtype)
            entry["ndim"] = self.ndim
        return entry


def _classify(value: object, where: str) -> FieldSpec:
    """The field a value belongs to (with an empty name); TypeError for an unsupported kind."""
    kind = _PLAIN_KINDS.get(type(value))
    if kind is not None:
        return FieldSpec("", kind)
    if isinstance(value, np.generic):
        validation.fail_type(
            where,
            f"{_SUPPORTED_TEXT}; wrap a NumPy scalar with numpy.asarray(...) for a 0-d array or use .item()",
            value,
        )
    if type(value) is np.ndarray or isinstance(value, np.memmap):
        if dtype_descriptor(value.dtype) is None:
            validation.fail_type(where, _SUPPORTED_TEXT, value)
        return FieldSpec("", KIND_ARRAY, value.dtype, value.ndim)
    raise TypeError(validation.expectation_message(where, _SUPPORTED_TEXT, value))
