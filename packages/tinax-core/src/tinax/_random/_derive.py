"""Key derivation by folding in coordinates, and key splitting."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax

from tinax._core import validation
from tinax._core.keys import is_key_array, require_coordinate, require_key
from tinax._core.shapes import devices_of, require_fits

__all__ = ["derive_key", "derive_process_step_key", "split_key"]


def derive_key(key: jax.Array, *coordinates: int | jax.Array) -> jax.Array:
    """Derives a key from ``key`` by folding in each coordinate, in order.

    The same key and coordinates always give the same result, and order matters:
    ``derive_key(key, 1, 2)`` differs from ``derive_key(key, 2, 1)``.

    Args:
      key: One PRNG key: a typed key of shape ``()`` (``jax.random.key``) or a raw ``uint32`` key
        (``jax.random.PRNGKey``).
      *coordinates: Possibly none. A Python int in ``[0, 2**32 - 1]``, or an unsigned integer scalar
        array (concrete or traced) of at most 32 bits; others would wrap into collisions in ``fold_in``.

    Returns:
      A key of the same kind as ``key``; with no coordinates, ``key`` itself (as in tinax 0.2), which
      like any key must not be consumed twice.

    Raises:
      TypeError: If ``key`` is not a key array, or a coordinate is not an integer of the right dtype and shape.
      ValueError: If ``key`` is not a single key, or a coordinate is out of range (NumPy ints: also ``TypeError``).

    Examples:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> from tinax.random import derive_key
      >>> root = jax.random.key(0)
      >>> def same(a, b):
      ...     return bool(jnp.array_equal(jax.random.key_data(a), jax.random.key_data(b)))
      >>> same(derive_key(root, 3, 1), derive_key(root, 3, 1)), same(derive_key(root, 3, 1), derive_key(root, 1, 3))
      (True, False)
    """
    checked_key = require_key(key, "key")
    with validation.reported_as_both(_widened(checked_key, coordinates)):
        checked = [require_coordinate(value, f"coordinates[{index}]") for index, value in enumerate(coordinates)]
    return functools.reduce(jax.random.fold_in, checked, checked_key)


def derive_process_step_key(
    key: jax.Array,
    *,
    process_index: int | jax.Array,
    step: int | jax.Array,
    stream: int | jax.Array = 0,
) -> jax.Array:
    """Derives the key that one process uses at one training step.

    Equals ``derive_key(key, process_index, step, stream)``; each coordinate follows
    :func:`derive_key`'s rules. Use a distinct ``stream`` per independent use of randomness within
    a step (dropout, augmentation, ...).

    Args:
      key: One PRNG key: a typed key of shape ``()`` or a raw ``uint32`` key.
      process_index: The process that uses the key.
      step: The training (or sampling) step.
      stream: Which of the step's independent random streams.

    Returns:
      A key of the same kind as ``key``.

    Raises:
      TypeError: If ``key`` or a coordinate is refused as for :func:`derive_key`.
      ValueError: If ``key`` is not a single key, or a coordinate is out of range (NumPy ints: also ``TypeError``).

    Examples:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> from tinax.random import derive_key, derive_process_step_key
      >>> root = jax.random.key(0)
      >>> step_key = derive_process_step_key(root, process_index=jax.process_index(), step=10)
      >>> expected = derive_key(root, jax.process_index(), 10, 0)
      >>> bool(jnp.array_equal(jax.random.key_data(step_key), jax.random.key_data(expected)))
      True
    """
    checked_key = require_key(key, "key")
    with validation.reported_as_both(_widened(checked_key, (process_index, step, stream))):
        checked = [
            require_coordinate(process_index, "process_index"),
            require_coordinate(step, "step"),
            require_coordinate(stream, "stream"),
        ]
    return functools.reduce(jax.random.fold_in, checked, checked_key)


def split_key(key: jax.Array, *, count: int) -> tuple[jax.Array, jax.Array]:
    """Splits ``key`` into a continuation key and ``count`` operation keys.

    ``key`` is consumed: use the continuation key in its place, and give each operation key to
    one random operation.

    Args:
      key: One PRNG key: a typed key of shape ``()`` or a raw ``uint32`` key.
      count: How many operation keys to make, 0 or more; with 0 the continuation key is still a
        fresh key, different from ``key``.

    Returns:
      ``(continuation, operation_keys)``: one key of ``key``'s kind and a key array of ``count``
      keys along its first axis; together exactly ``jax.random.split(key, count + 1)``.

    Raises:
      TypeError: If ``key`` is not an array or a scalar non-key, or ``count`` is not an int (bool refused).
      ValueError: If ``key``'s shape fits no single key, or ``count`` is negative or too large for memory.

    Examples:
      >>> import jax
      >>> from tinax.random import split_key
      >>> root, operation_keys = split_key(jax.random.key(0), count=2)
      >>> operation_keys.shape
      (2,)
      >>> jax.random.normal(operation_keys[0], (3,)).shape
      (3,)
    """
    checked_key = require_key(key, "key")
    with validation.reported_as_both(_widened(checked_key, ())):
        checked_count = validation.require_non_negative_int(count, "count")
    require_fits(
        "count",
        count,
        shape=(checked_count + 1, *checked_key.shape),
        dtype=checked_key.dtype,
        devices=lambda: devices_of(checked_key),
        what="the split keys",
    )
    keys = jax.random.split(checked_key, checked_count + 1)
    return keys[0], keys[1:]


def _widened(key: jax.Array, coordinates: Sequence[object]) -> bool:
    """Whether tinax 0.2 would refuse ``key`` (raw) or a coordinate (NumPy int); over-approximating is harmless."""
    return not is_key_array(key) or any(validation.is_non_python_int(value) for value in coordinates)
