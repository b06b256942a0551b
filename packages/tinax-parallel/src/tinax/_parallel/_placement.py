"""Placing host data on a mesh under a stated ownership policy."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding

from tinax._core import validation
from tinax._core._compat02 import also_raised_as
from tinax._core.host import apply_copy_policy, require_host_array, require_unmasked

__all__ = ["ShardingRankError", "place_host_array", "require_divisible_shape"]


#: A sharding describes more dimensions than the array has; also ``IndexError``, as tinax 0.2 raised.
ShardingRankError = also_raised_as(ValueError, IndexError)


def require_divisible_shape(shape: tuple[int, ...], sharding: NamedSharding, name: str) -> None:
    """Checks ``sharding`` splits ``shape`` evenly: ShardingRankError for too many entries, else ValueError."""
    spec = tuple(sharding.spec)
    if len(spec) > len(shape):
        raise ShardingRankError(
            f"{name} has rank {len(shape)} (shape {shape}), but the sharding describes {len(spec)} "
            f"dimensions ({sharding.spec})"
        )
    mesh_sizes = dict(sharding.mesh.shape)
    for dimension, entry in enumerate(spec):
        axes: tuple[str, ...] = (entry,) if isinstance(entry, str) else tuple(entry or ())
        parts = 1
        for axis in axes:
            parts *= mesh_sizes[axis]
        if shape[dimension] % parts:
            raise ValueError(
                f"{name} dimension {dimension} of extent {shape[dimension]} cannot be split evenly over "
                f"mesh axes {axes} ({parts} parts); shape {shape}, sharding {sharding.spec}"
            )


def _require_no_manual_axes(sharding: NamedSharding, name: str) -> None:
    """Refuses a sharding over Manual axes, which only ``jax.shard_map`` can use."""
    mesh = sharding.mesh
    manual = [
        f"{axis!r}" for axis, kind in zip(mesh.axis_names, mesh.axis_types, strict=True) if kind == AxisType.Manual
    ]
    if manual:
        raise ValueError(
            f"{name} must be over a mesh without Manual axes (those are only for jax.shard_map), "
            f"got a sharding over Manual axes {', '.join(manual)}"
        )


def require_fully_addressable(sharding: NamedSharding, name: str) -> None:
    """Raises ValueError if some of the sharding's devices belong to other processes."""
    if not sharding.is_fully_addressable:
        raise ValueError(
            f"{name} must be fully addressable from this process, got a sharding over "
            f"{len(sharding.device_set)} devices of which {len(sharding.addressable_devices)} are local"
        )


def place_host_array(array: np.ndarray, sharding: NamedSharding, *, copy: bool) -> jax.Array:
    """Transfers a host array to the devices of a layout, asynchronously.

    The call returns once the transfer is scheduled. ``jax.device_put`` may share an aligned
    NumPy buffer on CPU even when told not to (jax#37830), so ``copy=True`` takes a private
    snapshot before returning. A layout with fewer entries than ``array`` has dimensions
    replicates the rest; one with more is refused.

    Args:
      array: The host data, a ``numpy.ndarray`` with a numeric or bool dtype.
      sharding: A ``jax.sharding.NamedSharding`` whose devices all belong to this process.
      copy: True to snapshot ``array`` now, making the result independent of it. False to share
        its memory; the caller must then leave ``array`` unchanged while the result lives.

    Returns:
      A ``jax.Array`` with ``array``'s shape, laid out as ``sharding`` says.

    Raises:
      TypeError: If ``array`` is not a ``numpy.ndarray`` or has an object dtype, or another argument's type is wrong.
      ValueError: If ``array`` has masked elements, or ``sharding`` cannot place it here (some also ``IndexError``).

    Examples:
      >>> import jax
      >>> from jax.sharding import AxisType
      >>> from tinax.parallel import layout, make_mesh
      >>> mesh = make_mesh(jax.devices(), (jax.device_count(),), ("data",), axis_types=(AxisType.Explicit,))
      >>> import numpy as np
      >>> from tinax.parallel import place_host_array
      >>> host = np.zeros((2 * jax.device_count(), 3), np.float32)
      >>> placed = place_host_array(host, layout(mesh, ("data", None)), copy=True)
      >>> host[:] = 1.0  # the placed array has storage of its own
      >>> float(placed.sum())
      0.0
    """
    require_host_array(array, "array")
    validation.require_instance(sharding, "sharding", NamedSharding, "a jax.sharding.NamedSharding")
    validation.require_bool(copy, "copy")
    require_fully_addressable(sharding, "sharding")
    _require_no_manual_axes(sharding, "sharding")
    require_divisible_shape(array.shape, sharding, "array")
    source = apply_copy_policy(require_unmasked(array, "array", where="a jax.Array"), copy=copy)
    placed: jax.Array = jax.device_put(source, sharding, may_alias=not copy)
    return placed
