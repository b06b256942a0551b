"""Legacy only: pytree checkpoints in Orbax's V0 format (``PyTreeCheckpointer`` layout).

Saving goes through Orbax's pytree handler, as in tinax 0.2, so strings, ``None`` leaves, NumPy
scalars and a bare leaf as the whole state are kept.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tinax._checkpointing._compat02 import upstream_failure
from tinax._checkpointing._legacy_v0._paths import (
    require_checkpoint_directory,
    require_new_destination,
    save_with_v0,
)
from tinax._checkpointing._locations import checkpoint_location
from tinax._checkpointing._orbax_workarounds import finish_abandoned_reads
from tinax._checkpointing._saving._checks import is_empty_container
from tinax._core import validation

__all__ = ["load_legacy_v0_pytree", "save_legacy_v0_pytree"]

# Leaves Orbax's V0 pytree handler saves, checked first so an error names the key path
# (np.bool_ and other non-number NumPy scalars have no handler).
_SAVABLE_LEAVES = (bool, int, float, str, np.number, np.ndarray, jax.Array)
_LEAF_EXPECTATION = "a jax.Array, a numpy array, a NumPy number, or a Python bool, int, float or str"
_RESTORABLE_LEAVES = (bool, int, float, str, np.ndarray, jax.Array, jax.ShapeDtypeStruct)
_TARGET_LEAF_EXPECTATION = "a jax.Array, a numpy array, a jax.ShapeDtypeStruct, a Python bool, int or float, or a str"

_PYTREE_METADATA = "_METADATA"

# Upstream failures meaning "checkpoint or target does not fit", translated by upstream_failure.
_UPSTREAM_MISMATCH_ERRORS = (ValueError, TypeError, KeyError, IndexError, FileNotFoundError)


def save_legacy_v0_pytree(path: str | os.PathLike[str], state: Any) -> None:
    """Legacy only: writes a pytree checkpoint in Orbax's V0 format.

    Do not use this for new checkpoints; use
    ``tinax.checkpointing.save_checkpointables``. The directory is the one
    ``orbax.checkpoint.PyTreeCheckpointer`` would write, readable with
    ``PyTreeCheckpointer.restore`` (or ``StandardCheckpointer.restore`` when it
    holds no strings). The save is synchronous: committed when this returns.

    Args:
      path: The checkpoint directory to create; it must not exist yet nor contain
        ``.orbax-checkpoint-tmp`` in its name. Missing parents are created. A
        ``gs://`` URL (``str`` or ``etils.epath.Path``) names an empty bucket prefix.
      state: A pytree or a single leaf. Leaves are ``jax.Array``, NumPy arrays,
        Python ``bool``, ``int``, ``float`` or ``str``, or NumPy numbers (restored
        as Python scalars). ``None`` entries and empty containers are kept.

    Raises:
      TypeError: If ``path`` is not a path, or a leaf cannot be saved (also a ``ValueError``, as Orbax's was).
      ValueError: If ``path`` is empty or unusable, ``state`` is None or an empty container, or Orbax refuses the state.
      FileExistsError: If something exists at ``path`` (never replaced); also a ``ValueError``.
      OSError: If the folders of ``path`` cannot be created (``NotADirectoryError``, for one); also a ``ValueError``.
      ImportError: If ``path`` is a ``gs://`` URL and gcsfs is not installed.

    Examples:
      >>> import numpy as np
      >>> from tinax.checkpointing.legacy.v0 import save_legacy_v0_pytree
      >>> save_legacy_v0_pytree("old-run/state", {"w": np.arange(3.0)})  # synchronous: written on return
    """
    requested = checkpoint_location(path, "path", needed_by="tinax.checkpointing.legacy.v0.save_legacy_v0_pytree")
    _require_savable_state(state)
    destination = require_new_destination(requested)
    ocp = _import_orbax()
    save_with_v0(
        destination,
        ocp.PyTreeCheckpointHandler(),
        ocp.args.PyTreeSave(state),
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
      path: The checkpoint directory (for a ``CheckpointManager`` item, its folder
        in the step folder). A ``gs://`` URL (``str`` or ``etils.epath.Path``)
        must hold Orbax's ``commit_success.txt`` there or in the step folder above.
      target: The tree to restore into, or None; its structure must match. A
        sharded ``jax.ShapeDtypeStruct`` restores a ``jax.Array`` so sharded, a
        NumPy array a NumPy array, a scalar or ``str`` the stored value. Array
        leaves must have the stored shape; another dtype casts the values, as in
        tinax 0.2. None restores on the recorded shardings (the writing topology only).

    Returns:
      The restored pytree.

    Raises:
      TypeError: If ``path`` is not a path, or a ``target`` leaf cannot be restored into (also a ``ValueError``).
      FileNotFoundError: If nothing exists at ``path``.
      ValueError: If ``path`` is no V0 pytree checkpoint or ``target`` does not match (some also ``FileNotFoundError``).
      ImportError: If ``path`` is a ``gs://`` URL and gcsfs is not installed.

    Examples:
      >>> import numpy as np
      >>> from tinax.checkpointing.legacy.v0 import load_legacy_v0_pytree, save_legacy_v0_pytree
      >>> save_legacy_v0_pytree("old-run/state", {"w": np.arange(3.0)})
      >>> restored = load_legacy_v0_pytree("old-run/state", {"w": np.zeros(3)})  # shapes must match
      >>> np.asarray(restored["w"]).tolist()
      [0.0, 1.0, 2.0]
    """
    requested = checkpoint_location(path, "path", needed_by="tinax.checkpointing.legacy.v0.load_legacy_v0_pytree")
    if target is not None:
        _require_restorable_target(target)
    source = require_checkpoint_directory(requested)
    ocp = _import_orbax()
    with ocp.Checkpointer(ocp.PyTreeCheckpointHandler()) as checkpointer, finish_abandoned_reads():
        if target is None:
            arguments = ocp.args.PyTreeRestore()
        else:
            _require_stored_layout(ocp, checkpointer, source, target)
            arguments = ocp.args.PyTreeRestore(target, restore_args=ocp.checkpoint_utils.construct_restore_args(target))
        try:
            return checkpointer.restore(source, args=arguments)
        except _UPSTREAM_MISMATCH_ERRORS as error:
            into = "" if target is None else " into target"
            raise upstream_failure(
                f"path {str(source)!r} could not be loaded{into} as a legacy V0 pytree checkpoint", error
            ) from error


def _import_orbax() -> Any:
    import orbax.checkpoint as ocp

    return ocp


def _require_savable_state(state: Any) -> None:
    leaves = jax.tree_util.tree_flatten_with_path(state)[0]
    if not leaves and is_empty_container(state):
        validation.fail_value("state", "a pytree that is neither None nor an empty container", state)
    for key_path, leaf in leaves:
        if not isinstance(leaf, _SAVABLE_LEAVES) or (isinstance(leaf, np.ndarray) and leaf.dtype.hasobject):
            raise validation.TypeAndValueError(
                validation.expectation_message(f"state{jax.tree_util.keystr(key_path)}", _LEAF_EXPECTATION, leaf)
            )


def _require_restorable_target(target: Any) -> None:
    for key_path, leaf in jax.tree_util.tree_flatten_with_path(target)[0]:
        # NumPy scalars other than float64 (a float) are refused: Orbax has no restore arguments for them.
        if not isinstance(leaf, _RESTORABLE_LEAVES):
            raise validation.TypeAndValueError(
                validation.expectation_message(
                    f"target{jax.tree_util.keystr(key_path)}", _TARGET_LEAF_EXPECTATION, leaf
                )
            )


def _require_stored_layout(ocp: Any, checkpointer: Any, source: pathlib.Path, target: Any) -> None:
    """Refuses target array leaves whose shape differs from the stored one (Orbax would reshape NumPy leaves silently).

    Dtypes may differ (Orbax casts, as in tinax 0.2); structure mismatches are left to Orbax.
    """
    try:
        item_metadata = checkpointer.metadata(source).item_metadata
        stored_tree = getattr(item_metadata, "tree", item_metadata)
        if stored_tree is None:
            # Without its metadata file, Orbax fails with FileNotFoundError, as it did in tinax 0.2.
            kind = ValueError if (source / _PYTREE_METADATA).is_file() else FileNotFoundError
            raise kind(f"the checkpoint records no pytree metadata ({_PYTREE_METADATA})")
        stored = ocp.tree.to_flat_dict(stored_tree)
        wanted = ocp.tree.to_flat_dict(ocp.tree.serialize_tree(target, keep_empty_nodes=True))
    except _UPSTREAM_MISMATCH_ERRORS as error:
        raise upstream_failure(f"path {str(source)!r} is not a complete legacy V0 pytree checkpoint", error) from error
    for key, leaf in wanted.items():
        entry = stored.get(key)
        stored_dtype = getattr(entry, "dtype", None)
        target_dtype = getattr(leaf, "dtype", None)
        if stored_dtype is None or target_dtype is None:
            continue
        # PRNG keys are stored as their raw uint32 data; Orbax checks their implementation itself.
        if jnp.issubdtype(target_dtype, jax.dtypes.extended):
            continue
        stored_shape = tuple(getattr(entry, "shape", ()))
        if stored_shape != tuple(np.shape(leaf)):
            location = "target" + "".join(f"[{part!r}]" for part in key)
            stored_text = f"{np.dtype(stored_dtype)}[{', '.join(str(extent) for extent in stored_shape)}]"
            raise ValueError(
                f"{location} must have the stored shape, that of {stored_text}, got {validation.describe(leaf)}"
            )
