"""PRNG key helpers shared by the tinax distributions."""

from __future__ import annotations

import jax
import numpy as np

from tinax._core import validation

__all__ = [
    "COORDINATE_MAX",
    "is_key_array",
    "require_coordinate",
    "require_key",
]

#: Largest Python coordinate accepted by key derivation: ``fold_in`` consumes
#: 32 bits, and anything wider would silently collide with a smaller value.
COORDINATE_MAX = 2**32 - 1


def is_key_array(value: object) -> bool:
    """Returns whether ``value`` is a typed PRNG key array (``jax.random.key``)."""
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return False
    try:
        return bool(jax.numpy.issubdtype(dtype, jax.dtypes.prng_key))
    except TypeError:
        return False


def require_key(value: object, name: str) -> jax.Array:
    """Checks for a single PRNG key.

    Accepts a typed key of shape ``()`` (from ``jax.random.key``) or a raw
    ``uint32`` key vector (from the legacy ``jax.random.PRNGKey``). Batches of
    keys are refused: deriving from a batch would fold the same coordinate into
    every key, which is rarely what the caller meant.

    Raises:
      TypeError: If the value is not a single key.
    """
    expected = "a single PRNG key (a typed key of shape () or a raw uint32 key vector)"
    if not isinstance(value, jax.Array):
        validation.fail_type(name, expected, value)
    if is_key_array(value):
        if value.shape != ():
            validation.fail_type(name, expected, value)
        return value
    if value.dtype != np.uint32 or value.ndim != 1:
        validation.fail_type(name, expected, value)
    return value


def require_coordinate(value: object, name: str) -> int | jax.Array:
    """Checks one key-derivation coordinate.

    A Python (or NumPy scalar) integer must lie in ``[0, 2**32 - 1]``. An array
    (concrete or traced) must be an unsigned integer scalar of at most 32 bits,
    because wider or signed data is silently truncated by ``fold_in`` under
    ``jit``.

    Returns:
      A Python int, or the array unchanged.

    Raises:
      TypeError: If the value is a bool, not an integer, or an array of the
        wrong dtype or shape.
      ValueError: If a Python integer is out of range.
    """
    if isinstance(value, (jax.Array, np.ndarray)):
        dtype = np.dtype(value.dtype) if not is_key_array(value) else None
        if dtype is None or dtype.kind != "u" or dtype.itemsize > 4 or value.ndim != 0:
            validation.fail_type(name, "an unsigned integer scalar array of at most 32 bits", value)
        return value if isinstance(value, jax.Array) else int(value)
    return validation.require_int(value, name, minimum=0, maximum=COORDINATE_MAX, bounds_text="in [0, 2**32 - 1]")
