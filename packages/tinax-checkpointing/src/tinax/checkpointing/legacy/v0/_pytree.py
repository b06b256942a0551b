"""Legacy only: pytree checkpoints in Orbax's V0 format (``StandardCheckpointer`` layout).

Do not use these functions for new checkpoints; ``tinax.checkpointing`` writes
Orbax V1 checkpoints. They read and write the directories that
``orbax.checkpoint.StandardCheckpointer`` and ``PyTreeCheckpointer`` produce,
so older pipelines keep working while they migrate.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tinax._core import validation
from tinax.checkpointing.legacy.v0._paths import (
    require_checkpoint_directory,
    require_new_destination,
    save_with_v0,
)

__all__ = ["load_legacy_v0_pytree", "save_legacy_v0_pytree"]

# What Orbax's StandardCheckpointHandler accepts as leaves; checked here first so
# that a bad leaf is a TypeError naming its key path, not an Orbax ValueError.
_LEAF_EXPECTATION = "a jax.Array, a numpy array or an int or float scalar"
_TARGET_LEAF_EXPECTATION = "a jax.Array, a numpy array, a jax.ShapeDtypeStruct or an int or float scalar"

# Upstream failures that mean "this checkpoint or target does not fit"; they
# are re-raised as ValueError with the cause chained.
_UPSTREAM_MISMATCH_ERRORS = (ValueError, TypeError, KeyError, IndexError, FileNotFoundError)


def save_legacy_v0_pytree(path: str | os.PathLike[str], state: Any) -> None:
    """Legacy only: writes a pytree checkpoint in Orbax's V0 format.

    Do not use this for new checkpoints; use
    ``tinax.checkpointing.save_checkpointables``. The directory written here is
    the one ``orbax.checkpoint.StandardCheckpointer`` would write, so pipelines
    still on Orbax's V0 API can read it with ``StandardCheckpointer.restore``.
    The save is synchronous: when this returns, the checkpoint is committed.

    Args:
      path: The checkpoint directory to create. It must not exist yet; its
        parent folder must.
      state: A pytree container (dict, list, dataclass pytree, ...) whose
        leaves are ``jax.Array``, NumPy arrays, or ``int``/``float`` scalars.

    Raises:
      TypeError: If ``path`` is not a ``str`` or ``os.PathLike[str]``,
        ``state`` is a bare leaf rather than a container, or a leaf has a type
        Orbax's V0 standard handler cannot save (the message names its key
        path).
      ValueError: If ``path`` is empty, ``state`` has no leaves, or Orbax
        refuses the state for another reason (the Orbax error is chained).
      FileExistsError: If something already exists at ``path``. It is never
        replaced.
      FileNotFoundError: If the parent folder of ``path`` does not exist.
    """
    requested = validation.require_path(path, "path")
    _require_savable_state(state)
    destination = require_new_destination(requested)
    ocp = _import_orbax()
    save_with_v0(
        destination,
        ocp.StandardCheckpointHandler(),
        ocp.args.StandardSave(state),
        what="state",
        upstream_errors=_UPSTREAM_MISMATCH_ERRORS,
    )


def load_legacy_v0_pytree(path: str | os.PathLike[str], target: Any | None = None) -> Any:
    """Legacy only: reads a pytree checkpoint written with Orbax's V0 API.

    Do not use this for new checkpoints; use
    ``tinax.checkpointing.load_checkpointables``. This reads what
    ``StandardCheckpointer.save``, ``PyTreeCheckpointer.save``, a
    ``CheckpointManager`` pytree item or :func:`save_legacy_v0_pytree` wrote.

    Args:
      path: The checkpoint directory (for a ``CheckpointManager`` item, the
        item's folder inside the step folder).
      target: The tree to restore into, or None. Its structure must match the
        checkpoint. A ``jax.ShapeDtypeStruct`` leaf with a sharding restores a
        ``jax.Array`` with that sharding; a NumPy array leaf restores a NumPy
        array. Each array leaf's shape and dtype must equal the stored ones: tinax
        refuses the silent cast or reshape Orbax would otherwise apply. With None, Orbax
        restores every array on the sharding recorded in the checkpoint,
        which only works on the topology that wrote it.

    Returns:
      The restored pytree.

    Raises:
      TypeError: If ``path`` is not a ``str`` or ``os.PathLike[str]``, or a
        ``target`` leaf is of a kind Orbax cannot restore into.
      FileNotFoundError: If nothing exists at ``path``.
      ValueError: If ``path`` is not a directory or not a complete V0 pytree
        checkpoint, or ``target`` does not match it in structure, shape or
        dtype (the Orbax error, if any, is chained).
    """
    requested = validation.require_path(path, "path")
    if target is not None:
        _require_restorable_target(target)
    source = require_checkpoint_directory(requested)
    ocp = _import_orbax()
    with ocp.Checkpointer(ocp.StandardCheckpointHandler()) as checkpointer:
        if target is not None:
            _require_stored_layout(ocp, checkpointer, source, target)
        try:
            return checkpointer.restore(source, args=ocp.args.StandardRestore(target))
        except _UPSTREAM_MISMATCH_ERRORS as error:
            into = "" if target is None else " into target"
            raise ValueError(
                f"path {str(source)!r} could not be loaded{into} as a legacy V0 pytree checkpoint: {error}"
            ) from error


def _import_orbax() -> Any:
    import orbax.checkpoint as ocp

    return ocp


def _require_savable_state(state: Any) -> None:
    leaves = jax.tree_util.tree_flatten_with_path(state)[0]
    if not leaves:
        validation.fail_value("state", "a pytree with at least one array or scalar leaf", state)
    if len(leaves) == 1 and leaves[0][0] == ():
        validation.fail_type("state", "a pytree container (such as a dict) of arrays and scalars", state)
    for key_path, leaf in leaves:
        if isinstance(leaf, (int, float, np.ndarray, jax.Array)) or hasattr(leaf, "__array__"):
            continue
        validation.fail_type(f"state{jax.tree_util.keystr(key_path)}", _LEAF_EXPECTATION, leaf)


def _require_restorable_target(target: Any) -> None:
    for key_path, leaf in jax.tree_util.tree_flatten_with_path(target)[0]:
        if not isinstance(leaf, (int, float, np.ndarray, jax.Array, jax.ShapeDtypeStruct)):
            validation.fail_type(f"target{jax.tree_util.keystr(key_path)}", _TARGET_LEAF_EXPECTATION, leaf)


def _require_stored_layout(ocp: Any, checkpointer: Any, source: pathlib.Path, target: Any) -> None:
    """Refuses target leaves whose shape or dtype differs from the stored one.

    Orbax V0 casts a stored array to the target's dtype without a word (a
    float32 checkpoint restored into a bfloat16 target loses precision), and
    a NumPy target leaf of another shape silently restores the stored shape.
    Leaves missing on either side are left to Orbax's own structure check.
    """
    try:
        item_metadata = checkpointer.metadata(source).item_metadata
        stored_tree = getattr(item_metadata, "tree", item_metadata)
        if stored_tree is None:
            raise ValueError("the checkpoint records no pytree metadata")
        stored = ocp.tree.to_flat_dict(stored_tree)
        wanted = ocp.tree.to_flat_dict(ocp.tree.serialize_tree(target, keep_empty_nodes=True))
    except _UPSTREAM_MISMATCH_ERRORS as error:
        raise ValueError(f"path {str(source)!r} is not a complete legacy V0 pytree checkpoint: {error}") from error
    for key, leaf in wanted.items():
        entry = stored.get(key)
        stored_dtype = getattr(entry, "dtype", None)
        target_dtype = getattr(leaf, "dtype", None)
        if stored_dtype is None or target_dtype is None:
            continue
        # PRNG keys are stored as their raw uint32 data; Orbax checks their implementation itself.
        if jnp.issubdtype(target_dtype, jax.dtypes.extended):
            continue
        location = "target" + "".join(f"[{part!r}]" for part in key)
        stored_shape = tuple(getattr(entry, "shape", ()))
        if np.dtype(stored_dtype) != np.dtype(target_dtype) or stored_shape != tuple(np.shape(leaf)):
            stored_text = f"{np.dtype(stored_dtype)}[{', '.join(str(extent) for extent in stored_shape)}]"
            raise ValueError(
                f"{location} must have the stored shape and dtype {stored_text}, got {validation.describe(leaf)}"
            )
