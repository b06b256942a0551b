"""Host NumPy data on its way into JAX, shared by every placement function."""

from __future__ import annotations

from typing import Any

import numpy as np

from tinax._core import validation

__all__ = ["host_source", "require_host_array"]


def require_host_array(value: object, name: str) -> np.ndarray[Any, Any]:
    """Checks for a ``numpy.ndarray`` that JAX can hold (no object dtype).

    Raises:
      TypeError: If the value is not an ndarray or has an object dtype.
    """
    array = validation.require_instance(value, name, np.ndarray, "a numpy.ndarray")
    if array.dtype.hasobject:
        validation.fail_type(name, "a numpy.ndarray with a numeric or bool dtype", array)
    return array


def host_source(array: np.ndarray[Any, Any], *, copy: bool) -> np.ndarray[Any, Any]:
    """Returns what to hand to JAX under a copy policy.

    ``jax.device_put`` (and the process-local constructors built on it) may
    share a 64-byte-aligned NumPy buffer on CPU even when asked not to
    (jax#37830). With ``copy=True`` the data is snapshotted into a private
    buffer that nothing else can reach, so later writes to ``array`` never
    show through; with ``copy=False`` the array itself is returned.
    """
    return np.array(array, copy=True, order="C") if copy else array
