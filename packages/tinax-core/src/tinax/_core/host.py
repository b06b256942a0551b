"""Host NumPy data on its way into JAX, shared by every placement function."""

from __future__ import annotations

from typing import Any

import numpy as np

from tinax._core import validation

__all__ = ["has_masked_elements", "apply_copy_policy", "require_host_array", "require_unmasked"]


def require_host_array(value: object, name: str) -> np.ndarray[Any, Any]:
    """Checks for a ``numpy.ndarray`` that JAX can hold (no object dtype).

    Raises:
      TypeError: If the value is not an ndarray or has an object dtype.
    """
    array = validation.require_instance(value, name, np.ndarray, "a numpy.ndarray")
    if array.dtype.hasobject:
        validation.fail_type(name, "a numpy.ndarray with a numeric or bool dtype", array)
    return array


def apply_copy_policy(array: np.ndarray[Any, Any], *, copy: bool) -> np.ndarray[Any, Any]:
    """Returns what to hand to JAX under a copy policy.

    ``jax.device_put`` (and the process-local constructors built on it) may
    share a 64-byte-aligned NumPy buffer on CPU even when asked not to
    (jax#37830). With ``copy=True`` the data is snapshotted into a private
    buffer that nothing else can reach, so later writes to ``array`` never
    show through; with ``copy=False`` the array itself is returned.
    """
    return np.array(array, copy=True, order="C") if copy else array


def has_masked_elements(array: np.ndarray[Any, Any]) -> bool:
    """Returns whether ``array`` is a ``numpy.ma.MaskedArray`` with a masked element.

    Structured masks (one flag per field) count too: any masked field of
    any element is a masked element.
    """
    if not isinstance(array, np.ma.MaskedArray):
        return False
    mask = np.ma.getmask(array)
    return mask is not np.ma.nomask and _any_flag(np.asarray(mask))


def _any_flag(mask: np.ndarray[Any, Any]) -> bool:
    if mask.dtype.names:
        return any(_any_flag(mask[field]) for field in mask.dtype.names)
    return bool(mask.any())


def require_unmasked(array: np.ndarray[Any, Any], name: str, *, where: str) -> np.ndarray[Any, Any]:
    """Refuses a masked array with masked elements; returns the plain data otherwise.

    JAX arrays (and the files tinax writes) have no place for a mask: masked
    elements would silently become ordinary values. A masked array without
    any masked element is just its data.

    Args:
      array: A host array, possibly a ``numpy.ma.MaskedArray``.
      name: The argument name for the message.
      where: What cannot hold the mask, for the message (``"a jax.Array"``).

    Returns:
      ``array`` itself, or a masked array's data as a plain ``numpy.ndarray``.

    Raises:
      ValueError: If an element is masked.
    """
    if not isinstance(array, np.ma.MaskedArray):
        return array
    if has_masked_elements(array):
        validation.fail_value(name, f"an array without masked elements ({where} cannot hold a mask)", array)
    data: np.ndarray[Any, Any] = np.ma.getdata(array)
    return data
