"""Restore targets: what each loaded value must look like and where it goes.

Targets built from live state keep each array's sharding; an abstract array without one (as from
``jax.eval_shape``) loads where the checkpoint recorded it, as in tinax 0.2.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tinax._checkpointing._compat02 import CheckpointKeyError, NoHandlerError
from tinax._core import validation
from tinax._core._compat02 import TypeAndAttributeError
from tinax._core.jax_compat import is_tracer

__all__ = [
    "abstract_restore_target",
    "lacks_placement",
    "require_placeable",
    "require_restore_target",
    "require_target_fits",
    "with_stored_placements",
]

# Leaves that Orbax restores by value: the target only names their type.
_PLAIN_LEAVES = (bool, int, float, complex, bytes, str, np.generic)


def abstract_restore_target(state: Any) -> Any:
    """Turns live state into a restore target that keeps every placement.

    Works on any pytree and keeps its structure: a ``jax.Array`` (PRNG keys
    included) becomes a ``jax.ShapeDtypeStruct`` with its sharding, a NumPy array
    a placeholder that restores a host array; scalars, ``jax.ShapeDtypeStruct``
    leaves and Orbax stateful checkpointables are kept. A ``jax.ShapeDtypeStruct``
    without a sharding loads where the checkpoint recorded the array. The
    checkpointing user guide's "Restore targets" section describes each leaf kind.

    Args:
      state: The live state, for example the values that were saved.

    Returns:
      A pytree of the same structure holding restore targets.

    Raises:
      TypeError: If a leaf is traced (also ``AttributeError``), an object array, or of a kind Orbax cannot restore.

    Examples:
      >>> import jax.numpy as jnp
      >>> from tinax.checkpointing import abstract_restore_target
      >>> target = abstract_restore_target({"w": jnp.zeros((2, 3))})  # shapes, dtypes and shardings only
      >>> target["w"].shape, str(target["w"].dtype)
      ((2, 3), 'float32')
    """
    return jax.tree_util.tree_map_with_path(_abstract_leaf, state)


def require_restore_target(target: object, name: str) -> None:
    """Checks that a restore target is not None and every leaf is concrete and restorable.

    An unknown leaf raises ``NoHandlerError``: a ``TypeError`` that is also the ``KeyError`` of tinax 0.2.
    """
    if target is None:
        validation.fail_value(
            name,
            "an explicit restore target (build one with abstract_restore_target(live_state))",
            target,
        )
    for path, leaf in jax.tree_util.tree_flatten_with_path(target)[0]:
        where = name + jax.tree_util.keystr(path)
        if is_tracer(leaf):
            validation.fail_type(where, "a concrete restore target, not a traced value", leaf)
        if not _is_target_leaf(leaf):
            raise NoHandlerError(
                validation.expectation_message(
                    where,
                    "a restore target leaf: a jax.ShapeDtypeStruct, jax.Array, numpy.ndarray, a class such as "
                    "numpy.ndarray, a Python or NumPy scalar, str, bytes or an Orbax stateful checkpointable",
                    leaf,
                )
            )


def require_target_fits(
    target: object, stored_shapes: Mapping[tuple[str, ...], tuple[int, ...]], name: str, source: str
) -> None:
    """Checks, before anything loads, every array target's stored shape and placement (:func:`require_placeable`).

    Orbax would check only ``ShapeDtypeStruct`` shapes; unmatched leaves and PRNG keys are left to Orbax.
    """
    for path, leaf in jax.tree_util.tree_flatten_with_path(target)[0]:
        if not isinstance(leaf, (jax.ShapeDtypeStruct, jax.Array, np.ndarray)):
            continue
        if not isinstance(leaf, np.ndarray) and leaf.sharding is not None:
            require_placeable(tuple(leaf.shape), leaf.sharding, name + jax.tree_util.keystr(path), source)
        if jnp.issubdtype(leaf.dtype, jax.dtypes.extended):
            continue
        stored_shape = stored_shapes.get(_leaf_key(path))
        if stored_shape is None:
            continue
        if tuple(leaf.shape) != stored_shape:
            raise CheckpointKeyError(
                f"{name}{jax.tree_util.keystr(path)} is incompatible with the checkpoint at {source!r}: its shape "
                f"{tuple(leaf.shape)} is not compatible with the stored shape {stored_shape}"
            )


def lacks_placement(target: Any) -> bool:
    """Whether a target holds a ``jax.ShapeDtypeStruct`` without a sharding (see :func:`with_stored_placements`)."""
    return any(
        isinstance(leaf, jax.ShapeDtypeStruct) and leaf.sharding is None for leaf in jax.tree_util.tree_leaves(target)
    )


def with_stored_placements(target: Any, stored: object, name: str, source: str) -> Any:
    """Gives every sharding-less ``jax.ShapeDtypeStruct`` the placement the checkpoint recorded for it.

    tinax 0.2 let Orbax do this, with a warning; here it is silent, and a missing placement is an error.
    """
    flat, structure = jax.tree_util.tree_flatten_with_path(target)
    if not any(isinstance(leaf, jax.ShapeDtypeStruct) and leaf.sharding is None for _, leaf in flat):
        return target
    stored_leaves = {} if stored is None else _leaves_by_key(stored)
    placed = []
    for path, leaf in flat:
        if isinstance(leaf, jax.ShapeDtypeStruct) and leaf.sharding is None:
            where = name + jax.tree_util.keystr(path)
            sharding = _stored_sharding(stored_leaves.get(_leaf_key(path)), where, source, len(leaf.shape))
            require_placeable(tuple(leaf.shape), sharding, where, source)
            leaf = jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding)  # type: ignore[no-untyped-call]
        placed.append(leaf)
    return jax.tree_util.tree_unflatten(structure, placed)


def require_placeable(shape: tuple[int, ...], sharding: jax.sharding.Sharding, where: str, source: str) -> None:
    """Checks, before anything loads, that an array of ``shape`` can be laid out as ``sharding`` in this process.

    Orbax finds out mid-read: split dimensions must divide, an abstract mesh needs a set mesh, a device must be local.
    """
    problem = _placement_problem(shape, sharding)
    if problem is not None:
        raise CheckpointKeyError(
            f"{where} cannot hold the array of shape {shape} stored at {source!r} on {_placement_text(sharding)}: "
            f"{problem}. Nothing was read"
        )


def _placement_problem(shape: tuple[int, ...], sharding: jax.sharding.Sharding) -> str | None:
    mesh = getattr(sharding, "mesh", None)
    if isinstance(mesh, jax.sharding.AbstractMesh) and jax.sharding.get_mesh().empty:
        return (
            "an abstract mesh names no devices, and no mesh is set; load inside `with jax.set_mesh(mesh):`, or give "
            "the target a sharding over a concrete jax.sharding.Mesh"
        )
    if isinstance(sharding, jax.sharding.NamedSharding):
        spec = tuple(sharding.spec)
        if len(spec) > len(shape):
            return (
                f"its partition spec {sharding.spec} has {len(spec)} entries, more than the array's {len(shape)} "
                "dimensions"
            )
        sizes = dict(sharding.mesh.shape)
        for dimension, entry in enumerate(spec):
            if entry is None or entry is jax.sharding.PartitionSpec.UNCONSTRAINED:
                continue
            axes = entry if isinstance(entry, tuple) else (entry,)
            parts = math.prod(sizes[axis] for axis in axes)
            if shape[dimension] % parts:
                named = " x ".join(f"{axis!r} (size {sizes[axis]})" for axis in axes)
                cut = f"mesh axes {named} split" if len(axes) > 1 else f"mesh axis {named} splits"
                return (
                    f"{cut} dimension {dimension} of size {shape[dimension]} into {parts} parts, which do not divide "
                    "it; choose a mesh or partition spec whose parts divide every split dimension"
                )
    else:
        try:
            sharding.shard_shape(shape)
        except (ValueError, TypeError) as error:
            return str(error)
    if isinstance(mesh, jax.sharding.AbstractMesh):
        return None
    if not sharding.addressable_devices:
        return (
            f"none of its devices belongs to this process (process {jax.process_index()}); every process restores "
            "only the parts of an array on its own devices, so each array needs at least one of them"
        )
    return None


def _placement_text(sharding: jax.sharding.Sharding) -> str:
    mesh = getattr(sharding, "mesh", None)
    if isinstance(mesh, jax.sharding.AbstractMesh):
        return f"abstract mesh {mesh}"
    if isinstance(mesh, jax.sharding.Mesh):
        processes = sorted({device.process_index for device in mesh.devices.flat})
        return f"mesh {mesh} (devices of process{'es' if len(processes) > 1 else ''} {processes})"
    devices: list[Any] = sorted(sharding.device_set, key=lambda device: device.id)
    if len(devices) == 1:
        return f"device {devices[0]} (of process {devices[0].process_index})"
    return f"{type(sharding).__name__} over {len(devices)} devices"


def _leaves_by_key(stored: object) -> dict[tuple[str, ...], Any]:
    return {_leaf_key(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(stored)[0]}


def _leaf_key(path: tuple[Any, ...]) -> tuple[str, ...]:
    """A leaf's key path as Orbax's metadata tree spells it; attributes match dict keys, by name."""
    names = []
    for entry in path:
        if isinstance(entry, jax.tree_util.DictKey):
            names.append(str(entry.key))
        elif isinstance(entry, jax.tree_util.SequenceKey):
            names.append(str(entry.idx))
        elif isinstance(entry, jax.tree_util.GetAttrKey):
            names.append(entry.name)
        elif isinstance(entry, jax.tree_util.FlattenedIndexKey):
            names.append(str(entry.key))
        else:
            names.append(str(entry))
    return tuple(names)


def _stored_sharding(stored: object, where: str, source: str, rank: int) -> jax.sharding.Sharding:
    advice = "give the jax.ShapeDtypeStruct a sharding=..., or use a numpy.ndarray target to load host NumPy"
    recorded = getattr(stored, "sharding_metadata", None)
    if recorded is None:
        raise CheckpointKeyError(
            f"{where} is a jax.ShapeDtypeStruct without a sharding, and the checkpoint at {source!r} records no "
            f"placement for it to load onto; {advice}"
        )
    try:
        sharding: jax.sharding.Sharding = recorded.to_jax_sharding()
    except (ValueError, TypeError, KeyError) as error:
        raise CheckpointKeyError(
            f"{where} is a jax.ShapeDtypeStruct without a sharding, and the placement the checkpoint at {source!r} "
            f"records for it ({recorded}) names devices this process does not have; {advice}"
        ) from error
    # A PRNG key array's stored key data has one more (never split) axis, dropped here.
    if isinstance(sharding, jax.sharding.NamedSharding) and len(sharding.spec) > rank:
        entries = tuple(sharding.spec)
        if all(entry is None for entry in entries[rank:]):
            spec = jax.sharding.PartitionSpec(*entries[:rank])  # type: ignore[no-untyped-call]
            sharding = jax.sharding.NamedSharding(sharding.mesh, spec)
    return sharding


def _is_target_leaf(leaf: object) -> bool:
    if isinstance(leaf, (type, jax.ShapeDtypeStruct, jax.Array, np.ndarray, *_PLAIN_LEAVES)):
        return True
    # Abstract arrays of other libraries, duck-typed as Orbax does.
    if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
        return True
    return _is_stateful_checkpointable(leaf)


def _abstract_leaf(path: tuple[Any, ...], leaf: Any) -> Any:
    where = "state" + jax.tree_util.keystr(path)
    if is_tracer(leaf):
        raise TypeAndAttributeError(validation.expectation_message(where, "a concrete value, not a traced one", leaf))
    if isinstance(leaf, jax.Array):
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=leaf.sharding)  # type: ignore[no-untyped-call]
    if isinstance(leaf, jax.ShapeDtypeStruct):
        return leaf
    if isinstance(leaf, np.ndarray):
        if leaf.dtype.hasobject:
            validation.fail_type(where, "a numpy.ndarray with a numeric or bool dtype", leaf)
        return np.broadcast_to(np.zeros((), dtype=leaf.dtype), leaf.shape)
    if isinstance(leaf, _PLAIN_LEAVES):
        return leaf
    if _is_stateful_checkpointable(leaf):
        return leaf
    return validation.fail_type(
        where,
        "a jax.Array, numpy.ndarray, Python or NumPy scalar, str, bytes or an Orbax stateful checkpointable",
        leaf,
    )


def _is_stateful_checkpointable(value: object) -> bool:
    # Reached only for non-arrays, so only callers passing such objects pay the Orbax import.
    import orbax.checkpoint.experimental.v1 as ocp

    return isinstance(value, ocp.handlers.StatefulCheckpointable)
