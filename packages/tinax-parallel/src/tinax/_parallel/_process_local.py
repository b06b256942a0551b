"""Assembling a global array from each process's own shard, without a gather."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Literal

import jax
import numpy as np
from jax.sharding import NamedSharding

from tinax._core import validation
from tinax._core.host import apply_copy_policy, require_host_array, require_unmasked
from tinax._core.shapes import require_shape
from tinax._parallel._placement import require_divisible_shape

__all__ = ["cross_process_replicas", "from_process_local_data"]

_POLICIES = ("disallow", "assume_consistent")


def _index_key(index: object, shape: tuple[int, ...]) -> Hashable:
    # Slices are unhashable before Python 3.12; normalise them to ranges.
    if index is None:
        return None
    parts: list[tuple[int, int, int] | int] = []
    for part, size in zip(index, shape, strict=False):  # type: ignore[call-overload]
        parts.append(part.indices(size) if isinstance(part, slice) else int(part))
    return tuple(parts)


def cross_process_replicas(
    indices: Mapping[object, object], shape: tuple[int, ...]
) -> list[tuple[Hashable, tuple[int, ...]]]:
    """Blocks held by devices of several processes: ``(normalised index, sorted process indices)`` pairs.

    ``indices`` maps devices to global indices, as ``Sharding.devices_indices_map`` gives.
    """
    holders: dict[Hashable, set[int]] = {}
    for device, index in indices.items():
        holders.setdefault(_index_key(index, shape), set()).add(int(device.process_index))  # type: ignore[attr-defined]
    return [(key, tuple(sorted(processes))) for key, processes in holders.items() if len(processes) > 1]


def _local_extents(indices: Iterable[object], shape: tuple[int, ...]) -> tuple[int, ...]:
    distinct: list[set[tuple[int, int, int]]] = [set() for _ in shape]
    for index in indices:
        key = _index_key(index, shape)
        for dimension, size in enumerate(shape):
            part = key[dimension] if isinstance(key, tuple) and dimension < len(key) else (0, size, 1)
            distinct[dimension].add(part if isinstance(part, tuple) else (part, part + 1, 1))
    return tuple(sum(len(range(*part)) for part in parts) for parts in distinct)


def from_process_local_data(
    local_data: np.ndarray,
    sharding: NamedSharding,
    global_shape: tuple[int, ...],
    *,
    copy: bool,
    replica_policy: Literal["disallow", "assume_consistent"],
    process_index: int | None = None,
    process_count: int | None = None,
) -> jax.Array:
    """Builds one global array from the block of it that this process holds.

    Every process calls this with its own block and nothing is exchanged, so this is no gather.
    Where the layout replicates a block across processes each supplies it, and the caller must
    make them agree; ``replica_policy`` says whether such a layout is allowed. Checks involving
    other processes' devices use only the sharding, which every process knows.

    Args:
      local_data: This process's block, a ``numpy.ndarray`` whose extents are what this process's
        devices cover of ``global_shape``.
      sharding: The ``jax.sharding.NamedSharding`` of the result.
      global_shape: The assembled shape, with ``local_data``'s rank; the sharding must split it evenly.
      copy: True to snapshot ``local_data`` so later writes do not reach the result; False to share
        its memory (the caller must then not change it while the result lives).
      replica_policy: ``"disallow"`` refuses a layout placing one block on devices of different
        processes; ``"assume_consistent"`` accepts it on the caller's word that the data agree.
      process_index: If given, must match ``jax.process_index()`` (only asked when given).
      process_count: If given, must match ``jax.process_count()`` (only asked when given).

    Returns:
      The global ``jax.Array`` of shape ``global_shape`` laid out by ``sharding``.

    Raises:
      TypeError: If ``local_data`` is not a ``numpy.ndarray`` of a non-object dtype, or an argument has the wrong type.
      ValueError: If an argument is invalid, or ``local_data`` does not match this process's part of the global array.
      RuntimeError: If ``process_index`` or ``process_count`` differs from the JAX runtime's.

    Examples:
      >>> import jax
      >>> from jax.sharding import AxisType
      >>> from tinax.parallel import layout, make_mesh
      >>> mesh = make_mesh(jax.devices(), (jax.device_count(),), ("data",), axis_types=(AxisType.Explicit,))
      >>> import numpy as np
      >>> from tinax.parallel import from_process_local_data
      >>> local = np.ones((2 * jax.device_count(), 3), np.float32)  # in one process, every row is local
      >>> rows = layout(mesh, ("data", None))
      >>> array = from_process_local_data(local, rows, local.shape, copy=True, replica_policy="disallow")
      >>> array.shape == local.shape
      True
    """
    require_host_array(local_data, "local_data")
    validation.require_instance(sharding, "sharding", NamedSharding, "a jax.sharding.NamedSharding")
    shape = require_shape(global_shape, "global_shape")
    validation.require_bool(copy, "copy")
    validation.require_one_of(replica_policy, "replica_policy", _POLICIES)
    declared_count = validation.require_optional_positive_int(process_count, "process_count")
    declared_index = None
    if process_index is not None:
        declared_index = validation.require_non_negative_int(process_index, "process_index")

    # The runtime is asked only about what the caller declared.
    if declared_index is not None:
        runtime_index = jax.process_index()
        if declared_index != runtime_index:
            raise RuntimeError(
                f"process_index is {declared_index}, but the JAX runtime says this is process {runtime_index}"
            )
    if declared_count is not None:
        runtime_count = jax.process_count()
        if declared_count != runtime_count:
            raise RuntimeError(f"process_count is {declared_count}, but the JAX runtime has {runtime_count} processes")

    if local_data.ndim != len(shape):
        raise ValueError(
            f"local_data has rank {local_data.ndim} (shape {local_data.shape}), but global_shape {shape} "
            f"has rank {len(shape)}"
        )
    require_divisible_shape(shape, sharding, "global_shape")
    expected = _local_extents(sharding.addressable_devices_indices_map(shape).values(), shape)
    if tuple(local_data.shape) != expected:
        raise ValueError(
            f"local_data must have shape {expected}, the part of global_shape {shape} that this process's "
            f"devices hold under {sharding.spec}, got {validation.describe(local_data)}"
        )
    if replica_policy == "disallow":
        shared = cross_process_replicas(sharding.devices_indices_map(shape), shape)
        if shared:
            block, processes = shared[0]
            raise ValueError(
                f"sharding {sharding.spec} places block {block} of global_shape {shape} on processes "
                f"{processes}, which replica_policy='disallow' refuses; pass replica_policy='assume_consistent' "
                "if every process supplies identical data for such blocks"
            )

    source = apply_copy_policy(require_unmasked(local_data, "local_data", where="a jax.Array"), copy=copy)
    assembled: jax.Array = jax.make_array_from_process_local_data(  # type: ignore[no-untyped-call]
        sharding, source, shape
    )
    return assembled
