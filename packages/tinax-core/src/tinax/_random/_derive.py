"""Key derivation by folding in coordinates, and key splitting."""

from __future__ import annotations

from collections.abc import Sequence

import jax

from tinax._core import validation
from tinax._core.keys import is_key_array, require_coordinate, require_key
from tinax._core.shapes import devices_of, require_fits

__all__ = ["derive_key", "derive_process_step_key", "split_key"]


def derive_key(key: jax.Array, *coordinates: int | jax.Array) -> jax.Array:
    """Derives a key from ``key`` by folding in each coordinate, in order.

    The same key and coordinates always give the same result, and the order
    matters: ``derive_key(key, 1, 2)`` differs from ``derive_key(key, 2, 1)``.

    Args:
      key: One PRNG key: a typed key of shape ``()`` (``jax.random.key``) or
        a raw ``uint32`` key (``jax.random.PRNGKey``).
      *coordinates: The coordinates, possibly none. A Python integer must
        lie in ``[0, 2**32 - 1]``; an array, concrete or traced under
        ``jit``, must be an unsigned integer scalar of at most 32 bits.
        Signed or wider values are refused because ``fold_in`` would
        silently wrap or truncate them into collisions.

    Returns:
      A key of the same kind as ``key``. With no coordinates there is nothing
      to fold in and the result is ``key`` itself, as in tinax 0.2, so that
      ``derive_key(key, *path)`` works for an empty ``path`` too. Like any
      key, that one must not be consumed twice: derive from it, or split it.

    Raises:
      TypeError: If ``key`` is not an array or is a scalar array that is
        no key, or a coordinate is a bool, not an integer, or an array of the
        wrong dtype or shape.
      ValueError: If ``key`` is an array of a shape no single key has (a
        batch of keys, for example), or a coordinate is an integer out of
        range (for a NumPy integer, which tinax 0.2 refused with a
        ``TypeError``, the error is both).

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
    return _fold_in_all(checked_key, checked)


def derive_process_step_key(
    key: jax.Array,
    *,
    process_index: int | jax.Array,
    step: int | jax.Array,
    stream: int | jax.Array = 0,
) -> jax.Array:
    """Derives the key that one process uses at one training step.

    The coordinates are always folded in the order process, step, stream,
    so the result equals ``derive_key(key, process_index, step, stream)``.
    Use a distinct ``stream`` for each independent use of randomness within
    the same step (dropout, data augmentation, ...). Each coordinate follows
    the rules of :func:`derive_key`: a Python integer in ``[0, 2**32 - 1]``,
    or an unsigned integer scalar array of at most 32 bits.

    Args:
      key: One PRNG key: a typed key of shape ``()`` or a raw ``uint32`` key.
      process_index: The process that uses the key.
      step: The training (or sampling) step.
      stream: Which of the step's independent random streams.

    Returns:
      A key of the same kind as ``key``.

    Raises:
      TypeError: If ``key`` is not an array or is a scalar array that is
        no key, or a coordinate is a bool, not an integer, or an array of the
        wrong dtype or shape. The message names the keyword.
      ValueError: If ``key`` is an array of a shape no single key has, or a
        coordinate is an integer out of range (both a ``ValueError`` and a
        ``TypeError`` for a NumPy integer, as for :func:`derive_key`).

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
    return _fold_in_all(checked_key, checked)


def split_key(key: jax.Array, *, count: int) -> tuple[jax.Array, jax.Array]:
    """Splits ``key`` into a continuation key and ``count`` operation keys.

    ``key`` is consumed: keep using the continuation key in its place, and
    hand each operation key to one random operation.

    Args:
      key: One PRNG key: a typed key of shape ``()`` or a raw ``uint32`` key.
      count: How many operation keys to make, 0 or more. With 0 the
        operation keys are an empty key array and the continuation key is
        still a fresh key, different from ``key``.

    Returns:
      ``(continuation, operation_keys)``: one key of the same kind as
      ``key``, then a key array with ``count`` keys along its first axis.
      Together they are exactly ``jax.random.split(key, count + 1)``.

    Raises:
      TypeError: If ``key`` is not an array or is a scalar array that is
        no key, or ``count`` is a bool or not an integer.
      ValueError: If ``key`` is an array of a shape no single key has, or
        ``count`` is negative or so large that the keys could not exist:
        more bytes than XLA can represent in one array (2**63 - 1) or than
        the memory of the key's devices (a CPU counts as the host's physical
        memory). The message names the bytes needed and the limit.

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
    """Returns whether tinax 0.2 would have refused ``key`` or a coordinate as a widening.

    0.2 took typed keys only (a raw key was a ValueError) and refused NumPy
    integers that are not unsigned scalars of at most 32 bits (a TypeError).
    Over-approximating is harmless: it only makes a refusal both types.
    """
    return not is_key_array(key) or any(validation.is_non_python_int(value) for value in coordinates)


def _fold_in_all(key: jax.Array, coordinates: list[int | jax.Array]) -> jax.Array:
    for coordinate in coordinates:
        key = jax.random.fold_in(key, coordinate)
    return key
