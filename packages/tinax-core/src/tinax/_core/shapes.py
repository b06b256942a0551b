"""Shape and dtype helpers shared by the tinax distributions."""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from tinax._core import validation

__all__ = ["is_extended_dtype", "logical_nbytes", "require_shape"]


def require_shape(value: object, name: str) -> tuple[int, ...]:
    """Checks a shape: a sequence of non-negative ints (bool refused).

    Args:
      value: The received value, for example ``(2, 3)`` or ``[4]``.
      name: The argument name for messages.

    Returns:
      The shape as a tuple of Python ints.

    Raises:
      TypeError: If the value is not a sequence or an extent is not an int.
      ValueError: If an extent is negative.
    """
    return validation.require_sequence(
        value,
        name,
        item_check=validation.require_non_negative_int,
        description="a sequence of ints",
    )


def is_extended_dtype(dtype: Any) -> bool:
    """Returns whether ``dtype`` is a JAX extended dtype (PRNG keys and the like).

    Extended dtypes have no NumPy equivalent: their element size is an
    implementation detail and the data cannot be viewed as plain bytes.
    """
    try:
        return bool(jax.numpy.issubdtype(dtype, jax.dtypes.extended))
    except TypeError:
        return False


def logical_nbytes(shape: tuple[int, ...], dtype: Any) -> int | None:
    """Returns the logical payload size of a value of ``shape`` and ``dtype``.

    Returns:
      ``prod(shape) * itemsize``, or None for extended dtypes, whose payload
      size is not part of their contract.
    """
    if is_extended_dtype(dtype):
        return None
    return int(math.prod(shape)) * int(np.dtype(dtype).itemsize)
