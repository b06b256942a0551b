"""PRNG key helpers shared by the tinax distributions."""

from __future__ import annotations

import functools

import jax
import numpy as np

from tinax._core import validation

__all__ = [
    "COORDINATE_MAX",
    "is_key_array",
    "require_coordinate",
    "require_key",
]

#: Largest coordinate: ``fold_in`` takes 32 bits, so wider values would silently collide.
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
    """Checks for one PRNG key: a typed key of shape ``()`` or a raw ``uint32`` key of the default impl.

    Batches are refused. As in tinax 0.2, a keyless shape is a ValueError, any other non-key a TypeError.
    """
    expected = "a single PRNG key (a typed key of shape () or a raw uint32 key vector)"
    if not isinstance(value, (jax.Array, np.ndarray)):
        validation.fail_type(name, expected, value)
    if is_key_array(value):
        if value.shape != ():
            validation.fail_value(name, expected, value)
        return value  # type: ignore[return-value]  # NumPy has no key dtypes: this is a jax.Array.
    if isinstance(value, jax.Array) and value.dtype == np.uint32 and value.shape == _raw_key_shape():
        return value
    if value.ndim == 0:
        validation.fail_type(name, expected, value)
    raise ValueError(validation.expectation_message(name, expected, value))


def _raw_key_shape() -> tuple[int, ...]:
    """The shape of a raw key of the configured default PRNG implementation."""
    return _raw_key_shape_of(str(jax.config.jax_default_prng_impl))  # type: ignore[attr-defined]


@functools.cache
def _raw_key_shape_of(implementation: str) -> tuple[int, ...]:
    # Abstract evaluation only: no key is computed and no backend is needed.
    data = jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0, impl=implementation)))
    return tuple(data.shape)


def require_coordinate(value: object, name: str) -> int | jax.Array:
    """Checks one coordinate: an int in ``[0, 2**32 - 1]`` (returned as ``int``) or an unsigned scalar array.

    Arrays must be at most 32 bits: ``fold_in`` silently truncates wider or signed data under ``jit``.
    """
    if isinstance(value, (jax.Array, np.ndarray)):
        dtype = np.dtype(value.dtype) if not is_key_array(value) else None
        if dtype is None or dtype.kind != "u" or dtype.itemsize > 4 or value.ndim != 0:
            validation.fail_type(name, "an unsigned integer scalar array of at most 32 bits", value)
        return value if isinstance(value, jax.Array) else int(value)
    return validation.require_int(value, name, minimum=0, maximum=COORDINATE_MAX, bounds_text="in [0, 2**32 - 1]")
