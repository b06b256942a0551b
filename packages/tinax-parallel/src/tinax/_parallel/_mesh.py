"""Mesh construction and Explicit-axis layouts, with every argument checked."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from tinax._core import validation

__all__ = ["layout", "make_mesh", "require_homogeneous_mesh"]


def _require_device(value: object, name: str) -> jax.Device:
    return validation.require_instance(value, name, jax.Device, "a jax.Device")


def _require_axis_type(value: object, name: str) -> AxisType:
    return validation.require_instance(value, name, AxisType, "a jax.sharding.AxisType")


def make_mesh(
    devices: Sequence[jax.Device],
    shape: Sequence[int],
    axis_names: Sequence[str],
    *,
    axis_types: Sequence[AxisType],
) -> Mesh:
    """Arranges the given devices into a mesh with stated axis types.

    Unlike ``jax.make_mesh``, nothing is chosen for the caller: the devices passed fill the mesh
    in the order passed (row-major), and each axis carries the type it was given.

    Args:
      devices: Distinct ``jax.Device`` objects, all used once each.
      shape: The size of each mesh axis, each at least 1, multiplying to the number of devices.
      axis_names: A distinct, non-empty name for each axis.
      axis_types: The ``jax.sharding.AxisType`` of each axis.

    Returns:
      A ``jax.sharding.Mesh`` over exactly ``devices``.

    Raises:
      TypeError: If an argument is not a sequence (a ``str`` included), or an item of one has the wrong type.
      ValueError: If ``devices`` is empty or repeats one, a size is below 1, a name is bad, or the axes do not fit.

    Examples:
      >>> import jax
      >>> from jax.sharding import AxisType
      >>> from tinax.parallel import make_mesh
      >>> devices = jax.devices()
      >>> mesh = make_mesh(devices, (len(devices),), ("data",), axis_types=(AxisType.Explicit,))
      >>> mesh.axis_names, mesh.size == len(devices)
      (('data',), True)
    """
    device_items = validation.require_sequence(
        devices, "devices", item_check=_require_device, non_empty=True, description="a sequence of jax.Device"
    )
    validation.require_unique(device_items, "devices")
    sizes = validation.require_sequence(
        shape,
        "shape",
        item_check=validation.require_positive_int,
        non_empty=True,
        description="a sequence of ints",
    )
    names = validation.require_sequence(
        axis_names, "axis_names", item_check=validation.require_str, description="a sequence of str"
    )
    validation.require_unique(names, "axis_names")
    types = validation.require_sequence(
        axis_types, "axis_types", item_check=_require_axis_type, description="a sequence of jax.sharding.AxisType"
    )
    if not len(sizes) == len(names) == len(types):
        raise ValueError(
            "shape, axis_names and axis_types must have one entry per mesh axis, got lengths "
            f"{len(sizes)}, {len(names)} and {len(types)}"
        )
    if math.prod(sizes) != len(device_items):
        raise ValueError(
            f"shape {sizes} must use every device exactly once: its sizes multiply to {math.prod(sizes)}, "
            f"but {len(device_items)} devices were given"
        )
    grid = np.empty(len(device_items), dtype=object)
    grid[:] = device_items
    return Mesh(grid.reshape(sizes), names, axis_types=types)


_ENTRY_EXPECTATION = "a mesh-axis name, a non-empty tuple of names or None"


def _require_partition_entry(value: object, name: str) -> str | tuple[str, ...] | None:
    if value is None or isinstance(value, str):
        return None if value is None else validation.require_str(value, name)
    if not isinstance(value, tuple) or not value:
        # An empty tuple is no kind of entry here (tinax 0.2 raised TypeError too).
        validation.fail_type(name, _ENTRY_EXPECTATION, value)
    return tuple(validation.require_str(item, f"{name}[{index}]") for index, item in enumerate(value))


def layout(mesh: Mesh, partitions: Sequence[str | tuple[str, ...] | None]) -> NamedSharding:
    """Describes how an array is split over a mesh whose axes are all Explicit.

    Args:
      mesh: A ``jax.sharding.Mesh`` whose axes are all ``AxisType.Explicit``.
      partitions: One entry per array dimension (so the rank is ``len(partitions)``): the mesh
        axis splitting it, a non-empty tuple of axes splitting it together (major to minor), or
        None to replicate it. A mesh axis may split at most one dimension.

    Returns:
      The ``jax.sharding.NamedSharding`` for that layout on ``mesh``.

    Raises:
      TypeError: If ``mesh`` is not a ``Mesh``, ``partitions`` is not a sequence, or an entry's type is wrong.
      ValueError: If an axis of ``mesh`` is not Explicit, or an entry names no mesh axis or one already used.

    Examples:
      >>> import jax
      >>> from jax.sharding import AxisType
      >>> from tinax.parallel import layout, make_mesh
      >>> mesh = make_mesh(jax.devices(), (jax.device_count(),), ("data",), axis_types=(AxisType.Explicit,))
      >>> from jax.sharding import PartitionSpec
      >>> rows = layout(mesh, ("data", None))  # rows split over 'data', columns whole
      >>> rows.spec == PartitionSpec("data", None)
      True
    """
    validation.require_instance(mesh, "mesh", Mesh, "a jax.sharding.Mesh")
    not_explicit = _axes_text(mesh, lambda kind: kind != AxisType.Explicit)
    if not_explicit:
        raise ValueError(f"mesh must have only Explicit axes for a layout, got non-Explicit axes {not_explicit}")
    entries = validation.require_sequence(
        partitions,
        "partitions",
        item_check=_require_partition_entry,
        description="a sequence of mesh-axis names, tuples of names or None",
    )
    known = set(mesh.axis_names)
    used: dict[str, int] = {}
    for dimension, entry in enumerate(entries):
        axes = (entry,) if isinstance(entry, str) else (entry or ())
        for axis in axes:
            if axis not in known:
                raise ValueError(
                    f"partitions[{dimension}] names mesh axis {axis!r}, which the mesh does not have; "
                    f"its axes are {tuple(mesh.axis_names)}"
                )
            if axis in used:
                raise ValueError(
                    f"mesh axis {axis!r} may partition only one dimension, but partitions uses it for "
                    f"dimension {used[axis]} and dimension {dimension}"
                )
            used[axis] = dimension
    spec = PartitionSpec(*entries)  # type: ignore[no-untyped-call]
    return NamedSharding(mesh, spec)


def require_homogeneous_mesh(mesh: object, name: str = "mesh") -> Mesh:
    """Checks for a non-empty mesh whose axes are all Auto or all Explicit, before flax sees it.

    Flax NNX cannot handle Manual axes or mixed types; the ValueError lists every axis with its type.
    """
    checked = validation.require_instance(mesh, name, Mesh, "a jax.sharding.Mesh")
    if checked.empty:
        validation.fail_value(name, "a non-empty jax.sharding.Mesh", checked)
    kinds = set(checked.axis_types)
    if kinds not in ({AxisType.Auto}, {AxisType.Explicit}):
        raise ValueError(
            f"{name} must have all axes Auto or all axes Explicit (Manual axes and mixed types are refused), "
            f"got axes {_axes_text(checked, lambda kind: True)}"
        )
    return checked


def _axes_text(mesh: Mesh, selected: Callable[[AxisType], bool]) -> str:
    # "'data' (Explicit), 'model' (Auto)" for the axes whose type is selected.
    return ", ".join(
        f"{name!r} ({kind.name})" for name, kind in zip(mesh.axis_names, mesh.axis_types, strict=True) if selected(kind)
    )
