"""Legacy only: grain iterator checkpoints through grain's Orbax V0 handler.

These read and write what ``grain.checkpoint.CheckpointHandler`` produces under Orbax's V0
``Checkpointer`` or ``CheckpointManager``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from tinax._checkpointing._compat02 import upstream_failure
from tinax._checkpointing._legacy_v0._paths import (
    require_checkpoint_directory,
    require_new_destination,
    save_with_v0,
)
from tinax._checkpointing._locations import checkpoint_location
from tinax._checkpointing._orbax_workarounds import finish_abandoned_reads
from tinax._core import validation

if TYPE_CHECKING:
    from grain import DatasetIterator

__all__ = ["load_legacy_v0_grain_iterator", "save_legacy_v0_grain_iterator"]

_ITERATOR_EXPECTATION = "a grain.DatasetIterator"

# Upstream failures meaning "state does not fit the pipeline, or no iterator checkpoint".
_UPSTREAM_MISMATCH_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, FileNotFoundError)


def save_legacy_v0_grain_iterator(path: str | os.PathLike[str], iterator: DatasetIterator[Any]) -> None:
    """Legacy only: writes a grain iterator's position as an Orbax V0 checkpoint.

    Do not use this for new checkpoints; pass the iterator as a checkpointable to
    ``tinax.checkpointing.save_checkpointables`` instead. The directory is what
    ``orbax.checkpoint.Checkpointer(grain.checkpoint.CheckpointHandler())``
    writes: one ``process_<i>-of-<n>.json`` per JAX process. The save is
    synchronous: committed when this returns.

    Args:
      path: The checkpoint directory to create; it must not exist yet. Missing
        parents are created. A ``gs://`` URL (``str`` or ``etils.epath.Path``)
        names an empty bucket prefix.
      iterator: The live iterator whose position to save. It is not advanced.

    Raises:
      TypeError: If ``path`` is not a path, or ``iterator`` is not a ``grain.DatasetIterator``.
      ValueError: If ``path`` is empty or unusable, or the iterator's state cannot be taken or written as JSON.
      FileExistsError: If something exists at ``path`` (never replaced); also a ``ValueError``.
      OSError: If the folders of ``path`` cannot be created (``NotADirectoryError``, for one); also a ``ValueError``.
      ImportError: If ``path`` is a ``gs://`` URL and gcsfs is not installed.

    Examples:
      >>> import grain
      >>> from tinax.checkpointing.legacy.v0 import save_legacy_v0_grain_iterator
      >>> iterator = iter(grain.MapDataset.range(10).to_iter_dataset())
      >>> next(iterator)
      0
      >>> save_legacy_v0_grain_iterator("old-run/data", iterator)
    """
    requested = checkpoint_location(
        path, "path", needed_by="tinax.checkpointing.legacy.v0.save_legacy_v0_grain_iterator"
    )
    grain = _import_grain()
    validation.require_instance(iterator, "iterator", grain.DatasetIterator, _ITERATOR_EXPECTATION)
    destination = require_new_destination(requested)
    save_with_v0(
        destination,
        grain.checkpoint.CheckpointHandler(),
        grain.checkpoint.CheckpointSave(iterator),
        what="iterator",
        upstream_errors=_UPSTREAM_MISMATCH_ERRORS,
    )


def load_legacy_v0_grain_iterator(path: str | os.PathLike[str], iterator: DatasetIterator[Any]) -> DatasetIterator[Any]:
    """Legacy only: moves a live grain iterator to the position stored in a V0 checkpoint.

    Do not use this for new checkpoints; use
    ``tinax.checkpointing.load_checkpointables`` with the iterator as the target.
    This reads what :func:`save_legacy_v0_grain_iterator`, grain's
    ``CheckpointHandler`` under Orbax's V0 ``Checkpointer``, or a
    ``CheckpointManager`` iterator item wrote, for this process and process count.

    Args:
      path: The checkpoint directory (for a ``CheckpointManager`` item, its folder
        in the step folder). A ``gs://`` URL (``str`` or ``etils.epath.Path``)
        must hold Orbax's ``commit_success.txt`` there or in the step folder above.
      iterator: A fresh iterator of the same pipeline (dataset, transformations,
        worker count); its state is replaced in place.

    Returns:
      ``iterator`` itself, at the stored position (prefetching started, as grain's handler does).

    Raises:
      TypeError: If ``path`` is not a path, or ``iterator`` is not a ``grain.DatasetIterator``.
      FileNotFoundError: If nothing exists at ``path``.
      ValueError: If ``path`` holds no usable state for this process (some also ``IndexError``/``FileNotFoundError``).
      ImportError: If ``path`` is a ``gs://`` URL and gcsfs is not installed.

    Examples:
      >>> import grain
      >>> from tinax.checkpointing.legacy.v0 import load_legacy_v0_grain_iterator, save_legacy_v0_grain_iterator
      >>> iterator = iter(grain.MapDataset.range(10).to_iter_dataset())
      >>> next(iterator)
      0
      >>> save_legacy_v0_grain_iterator("old-run/data", iterator)
      >>> fresh = load_legacy_v0_grain_iterator("old-run/data", iter(grain.MapDataset.range(10).to_iter_dataset()))
      >>> next(fresh)  # continues after the saved position
      1
    """
    requested = checkpoint_location(
        path, "path", needed_by="tinax.checkpointing.legacy.v0.load_legacy_v0_grain_iterator"
    )
    grain = _import_grain()
    validation.require_instance(iterator, "iterator", grain.DatasetIterator, _ITERATOR_EXPECTATION)
    source = require_checkpoint_directory(requested)
    import orbax.checkpoint as ocp

    try:
        with ocp.Checkpointer(grain.checkpoint.CheckpointHandler()) as checkpointer, finish_abandoned_reads():
            restored: DatasetIterator[Any] = checkpointer.restore(
                source, args=grain.checkpoint.CheckpointRestore(iterator)
            )
    except _UPSTREAM_MISMATCH_ERRORS as error:
        raise upstream_failure(
            f"path {str(source)!r} could not be loaded into iterator as a legacy V0 grain iterator checkpoint", error
        ) from error
    return restored


def _import_grain() -> Any:
    # grain imports orbax and array_record, so it is imported only when a function runs.
    import grain
    import grain.checkpoint

    return grain
