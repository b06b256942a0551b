"""Restore targets: what each loaded value must look like and where it goes.

A restore target tells Orbax the shape, dtype and placement of every value it
loads. Targets built from live state keep each array's sharding, so a
checkpoint written on one mesh loads onto whatever mesh the live state uses.
An abstract array without a sharding (what ``jax.eval_shape`` gives) loads
where the checkpoint recorded the saved array, as in tinax 0.2.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tinax._checkpointing._compat02 import CheckpointKeyError, NoHandlerError, TracedValueError
from tinax._core import validation
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
    included) becomes a ``jax.ShapeDtypeStruct`` with its sharding, a NumPy
    array becomes a placeholder that restores a host array, and Python and NumPy
    scalars, ``jax.ShapeDtypeStruct`` leaves and Orbax stateful checkpointables
    are kept. A ``jax.ShapeDtypeStruct`` without a sharding, such as
    ``jax.eval_shape`` gives, loads where the checkpoint recorded the saved
    array. The checkpointing user guide's "Restore targets" section describes
    each kind of leaf.

    Args:
      state: The live state, for example the values that were saved.

    Returns:
      A pytree of the same structure holding restore targets.

    Raises:
      TypeError: If a leaf is a traced value (the error is also the
        ``AttributeError`` tinax 0.2 raised for one), a NumPy array of
        objects, or of a kind Orbax cannot restore.

    Examples:
      >>> import jax.numpy as jnp
      >>> from tinax.checkpointing import abstract_restore_target
      >>> target = abstract_restore_target({"w": jnp.zeros((2, 3))})  # shapes, dtypes and shardings only
      >>> target["w"].shape, str(target["w"].dtype)
      ((2, 3), 'float32')
    """
    return jax.tree_util.tree_map_with_path(_abstract_leaf, state)


def require_restore_target(target: object, name: str) -> None:
    """Checks that a restore target states where every array goes.

    Args:
      target: The target of one checkpointable.
      name: How to refer to it in messages, for example ``"targets['model']"``.

    Raises:
      TypeError: If a leaf is a traced value, or of a kind Orbax has no
        handler for, such as ``object()`` (the error is also the
        ``KeyError`` Orbax raised for it in tinax 0.2).
      ValueError: If the target is None.
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
    """Checks, before anything loads, that every array of a target has the shape that was saved.

    Every array target is checked alike: a ``jax.ShapeDtypeStruct``, a
    ``jax.Array`` and a ``numpy.ndarray`` (Orbax itself would check only the
    first and load the stored shape into the others). Leaves are matched by
    the names along their key path (attributes, keys and indices alike, as
    Orbax stores them); leaves without a stored counterpart are left to Orbax,
    which reports structure mismatches itself. PRNG key targets are left to
    Orbax too, as their stored shape includes the key data.

    Args:
      target: The restore target of one checkpointable.
      stored_shapes: The saved shape of each array of that checkpointable,
        by its keys as Orbax stores them (every key a string, an index
        as its digits).
      name: How to refer to the target in messages, e.g. ``"targets['model']"``.
      source: The checkpoint folder, for messages.

    Every array target's placement is checked too (see
    :func:`require_placeable`), so a topology that cannot hold an array is
    refused before Orbax reads anything.

    Raises:
      ValueError: If an array target's shape differs from the stored one,
        rank included, or its sharding cannot hold it. The error is also a
        ``KeyError``, as Orbax's error for an incompatible target was in
        tinax 0.2.
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
    """Gives every ``jax.ShapeDtypeStruct`` without a sharding the placement the checkpoint recorded for it.

    tinax 0.2 passed such targets to Orbax, which then read each array's
    sharding from the checkpoint (and warned that it did). Reading it here
    from the metadata gives the same placement, silently, and a clear error
    where there is none to give.

    Args:
      target: The restore target of one checkpointable.
      stored: Orbax's metadata tree of that checkpointable, or None where
        there is none.
      name: How to refer to the target in messages, e.g. ``"targets['model']"``.
      source: The checkpoint folder, for messages.

    Returns:
      ``target`` itself where every abstract array has a sharding, else a
      copy in which those without one have the recorded sharding.

    Raises:
      ValueError: If the checkpoint records no sharding for such a leaf (a
        NumPy array was saved there, or no array), or the recorded one names
        devices this process does not have (the checkpoint was written on
        another topology). The error is also a ``KeyError``, as Orbax's
        failure to load was in tinax 0.2.
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

    Orbax finds out only while it reads (an uneven split fails in the middle
    of the reads it has started; an array none of whose devices belongs to
    this process fails after reading nothing useful), so the topology is
    checked first: every dimension a ``NamedSharding`` splits must be a
    multiple of the number of parts its mesh axes cut it into, a sharding
    over an abstract mesh needs a mesh set with ``jax.set_mesh``, and at
    least one device of the sharding must belong to this process.

    Args:
      shape: The array's shape (a PRNG key array's, without its key data).
      sharding: Where the target puts it.
      where: The target leaf, for messages, such as ``"targets['model']['w']"``.
      source: The checkpoint folder, for messages.

    Raises:
      ValueError: If the sharding cannot hold the array here. The message
        names the leaf, the shape and the mesh or device; the error is also a
        ``KeyError``, as Orbax's failure to load was in tinax 0.2.
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
    """A leaf's key path as Orbax's metadata tree spells it.

    Orbax stores every node as a dict or list, so an attribute of a target
    (an NNX ``Variable``'s ``value``, a field of optax's ``ScaleByAdamState``)
    is a dict key in the metadata; comparing names alone matches the two.
    """
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
    # A PRNG key array is stored as its key data, which has one more axis
    # (never split); the key array itself takes the sharding without it.
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
        raise TracedValueError(validation.expectation_message(where, "a concrete value, not a traced one", leaf))
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
    # Only objects that are no array or scalar get here, so the Orbax import
    # is paid only by callers who pass such objects.
    import orbax.checkpoint.experimental.v1 as ocp

    return isinstance(value, ocp.handlers.StatefulCheckpointable)
