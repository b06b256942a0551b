"""Describing arrays without touching their data."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from tinax._core import validation
from tinax._core.jax_compat import require_concrete
from tinax._core.shapes import logical_nbytes

__all__ = ["ArrayInfo", "inspect_array"]


@dataclasses.dataclass(frozen=True, slots=True)
class ArrayInfo:
    """What an array is, read from its metadata.

    Attributes:
      shape: The global shape.
      dtype: The dtype; an extended dtype object for PRNG key arrays.
      logical_nbytes: ``prod(shape) * itemsize``, or None for extended dtypes, whose storage
        size is not part of their contract.
      committed: Whether the array was placed explicitly, so JAX will not move it implicitly.
      fully_addressable: Whether every shard lives on this process, as host materialization needs.
    """

    shape: tuple[int, ...]
    dtype: Any
    logical_nbytes: int | None
    committed: bool
    fully_addressable: bool


def inspect_array(array: jax.Array) -> ArrayInfo:
    """Describes a concrete array without materializing or waiting for it.

    Args:
      array: A concrete ``jax.Array``, possibly multi-process and still being computed.

    Returns:
      An :class:`ArrayInfo`.

    Raises:
      TypeError: If ``array`` is not a ``jax.Array`` or is traced (``ConcretizationTypeError``).

    Examples:
      >>> import jax.numpy as jnp
      >>> from tinax.array import inspect_array
      >>> info = inspect_array(jnp.zeros((2, 3), jnp.float32))
      >>> info.shape, info.logical_nbytes, info.fully_addressable
      ((2, 3), 24, True)
    """
    validation.require_instance(array, "array", jax.Array, "a jax.Array")
    require_concrete(array, "array", "a concrete jax.Array, not a traced value")
    shape = tuple(int(extent) for extent in array.shape)
    return ArrayInfo(
        shape=shape,
        dtype=array.dtype,
        logical_nbytes=logical_nbytes(shape, array.dtype),
        committed=bool(array.committed),
        fully_addressable=bool(array.is_fully_addressable),
    )
