"""Sizes and shard positions of JAX arrays, read from metadata only."""

from __future__ import annotations

from typing import Any

import jax

from tinax._core import validation
from tinax._core.jax_compat import require_concrete
from tinax._core.shapes import logical_nbytes

__all__ = ["addressable_indices", "addressable_payload_nbytes", "logical_payload_nbytes"]

Index = tuple[slice | int, ...]


def _require_array(value: object, name: str) -> jax.Array:
    return validation.require_instance(value, name, jax.Array, "a jax.Array")


def _require_placed_array(value: object, name: str) -> jax.Array:
    array = _require_array(value, name)
    require_concrete(array, name, "a concrete jax.Array with a sharding, not a traced value")
    return array


def _extent(index: slice | int, size: int) -> int:
    if isinstance(index, slice):
        return len(range(*index.indices(size)))
    return 1


def logical_payload_nbytes(array: jax.Array) -> int | None:
    """Returns how many bytes the array's elements take, counted once.

    Only shape and dtype are read, so data is never waited on or copied and tracers can be sized.
    Replicas and padding are not counted: this is the nominal size of one full copy.

    Args:
      array: The ``jax.Array`` to size (a tracer is accepted).

    Returns:
      Element count times item size, or None for an extended dtype (a PRNG key array), whose
      storage size JAX does not promise.

    Raises:
      TypeError: If ``array`` is not a ``jax.Array``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from tinax.parallel import logical_payload_nbytes
      >>> logical_payload_nbytes(jnp.zeros((4, 3), jnp.float32))  # 12 float32 values
      48
    """
    _require_array(array, "array")
    return logical_nbytes(tuple(array.shape), array.dtype)


def addressable_payload_nbytes(array: jax.Array) -> int | None:
    """Returns how many bytes this process's devices hold for the array.

    Every addressable device counts, so data replicated over ``n`` local devices counts ``n``
    times: the total stored locally, not the distinct local data. Sizes come from the sharding
    alone; data is never waited on or copied.

    Args:
      array: A concrete ``jax.Array``.

    Returns:
      The sum of the nominal shard sizes on this process's devices, or None for an extended dtype.

    Raises:
      TypeError: If ``array`` is not a ``jax.Array`` or is traced (``ConcretizationTypeError``).

    Examples:
      >>> import jax
      >>> from jax.sharding import AxisType
      >>> from tinax.parallel import layout, make_mesh
      >>> mesh = make_mesh(jax.devices(), (jax.device_count(),), ("data",), axis_types=(AxisType.Explicit,))
      >>> import numpy as np
      >>> from tinax.parallel import addressable_payload_nbytes, place_host_array
      >>> host = np.zeros((2 * jax.device_count(), 3), np.float32)
      >>> replicated = place_host_array(host, layout(mesh, (None, None)), copy=True)
      >>> addressable_payload_nbytes(replicated) == host.nbytes * jax.device_count()  # one copy per device
      True
    """
    _require_placed_array(array, "array")
    shape = tuple(array.shape)
    total = 0
    for index in addressable_indices(array).values():
        if index is None:
            shard_shape = shape
        else:
            shard_shape = tuple(_extent(part, size) for part, size in zip(index, shape, strict=False))
            shard_shape += shape[len(index) :]
        size = logical_nbytes(shard_shape, array.dtype)
        if size is None:
            return None
        total += size
    return total


def addressable_indices(array: jax.Array) -> dict[jax.Device, Index | None]:
    """Maps each of this process's devices to the part of the array it holds.

    Indices are in the array's logical coordinates: for a PRNG key array, without the trailing
    key-data entry that ``Shard.index`` adds.

    Args:
      array: A concrete ``jax.Array``.

    Returns:
      A dict from each addressable ``jax.Device`` to a tuple of slices (or ints) selecting its
      shard, or None where the sharding gives no index.

    Raises:
      TypeError: If ``array`` is not a ``jax.Array`` or is traced (``ConcretizationTypeError``).

    Examples:
      >>> import jax
      >>> from jax.sharding import AxisType
      >>> from tinax.parallel import layout, make_mesh
      >>> mesh = make_mesh(jax.devices(), (jax.device_count(),), ("data",), axis_types=(AxisType.Explicit,))
      >>> import numpy as np
      >>> from tinax.parallel import addressable_indices, place_host_array
      >>> array = place_host_array(np.zeros((2 * jax.device_count(), 3)), layout(mesh, ("data", None)), copy=True)
      >>> addressable_indices(array)[jax.devices()[0]]  # the first two rows
      (slice(0, 2, None), slice(None, None, None))
    """
    _require_placed_array(array, "array")
    indices: Any = array.sharding.addressable_devices_indices_map(tuple(array.shape))
    return dict(indices)
