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
    """Finds blocks of a global array that devices of several processes hold.

    Args:
      indices: Each device (anything with a ``process_index``) mapped to its
        global index, as ``Sharding.devices_indices_map`` gives.
      shape: The global shape the indices refer to.

    Returns:
      For every block held in more than one process, its normalised index and
      the sorted process indices holding it; empty when there are none.
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

    Every process calls this with its own block; nothing is exchanged between
    processes, so this is not a gather. Where the layout replicates a block on
    devices of several processes, each of them supplies that block, and the
    caller must make sure they agree: ``replica_policy`` says whether such a
    layout is allowed at all. Checks against other processes' devices use
    only the sharding, which every process knows.

    Args:
      local_data: This process's block, a ``numpy.ndarray`` whose extent in
        each dimension is what this process's devices cover of
        ``global_shape``.
      sharding: The ``jax.sharding.NamedSharding`` of the result.
      global_shape: The shape of the assembled array, with the rank of
        ``local_data``; the sharding must split it evenly.
      copy: True to snapshot ``local_data`` before returning, so later writes
        to it do not reach the result. False to let the result share its
        memory; the caller then must not change it while the result lives.
      replica_policy: ``"disallow"`` to refuse a layout that places the same
        block on devices of different processes; ``"assume_consistent"`` to
        accept it, on the caller's word that every process passes identical
        data for such blocks.
      process_index: If given, the index this process expects to have; it
        must match ``jax.process_index()``. The runtime is only asked when
        this is given.
      process_count: If given, the number of processes expected; it must
        match ``jax.process_count()``, which is only asked when this is
        given.

    Returns:
      The global ``jax.Array`` of shape ``global_shape`` laid out by
      ``sharding``.

    Raises:
      TypeError: If ``local_data`` is not a ``numpy.ndarray`` (or has an
        object dtype), ``sharding`` is not a ``NamedSharding``,
        ``global_shape`` is not a sequence of ints, ``copy`` is not a bool,
        ``replica_policy`` is not a str, or ``process_index`` /
        ``process_count`` is neither an int nor None (bools are refused).
      ValueError: If ``local_data`` is a masked array with masked elements,
        ``replica_policy`` is not a known policy,
        ``process_index`` is negative, ``process_count`` is below 1, the ranks of ``local_data`` and
        ``global_shape`` differ, the sharding cannot split ``global_shape``,
        ``local_data``'s extents differ from what this process covers, or a
        block is replicated across processes under ``"disallow"``.
      RuntimeError: If ``process_index`` or ``process_count`` differs from
        what the JAX runtime reports (an index that is not below the number
        of processes always does).

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

    # The runtime is asked only about what the caller declared: without a
    # declaration there is nothing to check, and the call stays independent
    # of how the process identity is looked up.
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
