"""Host NumPy data on its way into JAX, shared by every placement function."""

from __future__ import annotations

from typing import Any

import numpy as np

from tinax._core import validation

__all__ = ["has_masked_elements", "apply_copy_policy", "require_host_array", "require_unmasked"]


def require_host_array(value: object, name: str) -> np.ndarray[Any, Any]:
    """Checks for a ``numpy.ndarray`` JAX can hold (no object dtype)."""
    array = validation.require_instance(value, name, np.ndarray, "a numpy.ndarray")
    if array.dtype.hasobject:
        validation.fail_type(name, "a numpy.ndarray with a numeric or bool dtype", array)
    return array


def apply_copy_policy(array: np.ndarray[Any, Any], *, copy: bool) -> np.ndarray[Any, Any]:
    """With ``copy``, a private C-order snapshot: ``device_put`` may share aligned CPU buffers (jax#37830)."""
    return np.array(array, copy=True, order="C") if copy else array


def has_masked_elements(array: np.ndarray[Any, Any]) -> bool:
    """Whether ``array`` is a masked array with any masked element (any field of a structured mask counts)."""
    if not isinstance(array, np.ma.MaskedArray):
        return False
    mask = np.ma.getmask(array)
    return mask is not np.ma.nomask and _any_flag(np.asarray(mask))


def _any_flag(mask: np.ndarray[Any, Any]) -> bool:
    if mask.dtype.names:
        return any(_any_flag(mask[field]) for field in mask.dtype.names)
    return bool(mask.any())


def require_unmasked(array: np.ndarray[Any, Any], name: str, *, where: str) -> np.ndarray[Any, Any]:
    """Returns plain data, refusing (ValueError) masked elements, which ``where`` would silently unmask."""
    if not isinstance(array, np.ma.MaskedArray):
        return array
    if has_masked_elements(array):
        validation.fail_value(name, f"an array without masked elements ({where} cannot hold a mask)", array)
    data: np.ndarray[Any, Any] = np.ma.getdata(array)
    return data
