"""Destination and source checks shared by the legacy V0 savers and loaders."""

from __future__ import annotations

import contextlib
import pathlib
import shutil
from collections.abc import Iterator
from typing import Any

from tinax._checkpointing._compat02 import CheckpointExistsError, upstream_failure
from tinax._checkpointing._locations import (
    COMMIT_MARKER,
    has_commit_marker,
    is_remote,
    remote_filesystem,
    remote_of,
    remove_remote_folder,
)
from tinax._checkpointing._names import ORBAX_TMP_SUFFIX, is_orbax_temporary_name, refuse_orbax_temporary_destination
from tinax._checkpointing._saving._checks import require_creatable
from tinax._core import files, validation

_NEEDED_BY = "tinax.checkpointing.legacy.v0"

__all__ = ["removing_orbax_leftovers", "require_checkpoint_directory", "require_new_destination", "save_with_v0"]


def require_new_destination(path: pathlib.Path) -> pathlib.Path:
    """Checks that a checkpoint may be written at ``path`` (new, no temporary name, creatable), creating its parents.

    Returns the absolute destination, since Orbax refuses relative ones.
    """
    if is_remote(path):
        return _require_new_remote_destination(path)
    destination = path.absolute()
    refuse_orbax_temporary_destination(destination)
    if destination.exists() or destination.is_symlink():
        raise files.exists_error(
            destination,
            "a legacy V0 save's path must not exist yet (its checkpoints are never overwritten)",
            CheckpointExistsError,
        )
    require_creatable(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    return destination


def require_checkpoint_directory(path: pathlib.Path) -> pathlib.Path:
    """Checks that ``path`` names a directory a checkpoint could be read from; returns it absolute.

    A temporary-looking name is refused whether or not it exists, as tinax 0.2 checked the name first.
    """
    source = path if is_remote(path) else path.absolute()
    if is_orbax_temporary_name(source.name):
        raise ValueError(
            f"path {str(source)!r} is an incomplete checkpoint: its name contains Orbax's reserved temporary suffix "
            f"{ORBAX_TMP_SUFFIX!r}, so it is the folder of a save that has not finished"
        )
    if is_remote(source):
        _require_committed_remote_source(source)
        return source
    validation.require_existing_path(source, "path")
    if not source.is_dir():
        raise ValueError(f"path must be a checkpoint directory, got {str(source)!r} which is not a directory")
    return source


def save_with_v0(
    destination: pathlib.Path, handler: Any, save_args: Any, *, what: str, upstream_errors: tuple[type[Exception], ...]
) -> None:
    """Saves synchronously with Orbax's V0 ``Checkpointer``, translating ``upstream_errors`` by ``upstream_failure``."""
    import orbax.checkpoint as ocp

    with removing_orbax_leftovers(destination):
        try:
            with ocp.Checkpointer(handler) as checkpointer:
                checkpointer.save(destination, args=save_args)
        except upstream_errors as error:
            if destination.exists():
                # Another writer committed the same path between our check and Orbax's.
                raise CheckpointExistsError(
                    f"path must not exist yet, got {str(destination)!r} which another writer created during the save"
                ) from error
            raise upstream_failure(
                f"{what} could not be saved as a legacy V0 checkpoint at {str(destination)!r}", error
            ) from error


@contextlib.contextmanager
def removing_orbax_leftovers(destination: pathlib.Path) -> Iterator[None]:
    """Removes the staging folders a failed Orbax save left next to ``destination``, only those of this block."""
    if is_remote(destination):
        try:
            yield
        except BaseException:
            # A bucket has no staging folder: Orbax wrote into the destination, which holds no commit marker yet.
            fs = remote_filesystem(destination, needed_by=_NEEDED_BY)
            with contextlib.suppress(Exception):
                if not has_commit_marker(fs, destination):
                    remove_remote_folder(fs, destination)
            raise
        return
    before = set(_staging_folders(destination))
    try:
        yield
    except BaseException:
        for leftover in set(_staging_folders(destination)) - before:
            shutil.rmtree(leftover, ignore_errors=True)
        raise


def _staging_folders(destination: pathlib.Path) -> list[pathlib.Path]:
    # Orbax V0 stages a save in "<name>.orbax-checkpoint-tmp", possibly followed by a timestamp.
    prefix = destination.name + ORBAX_TMP_SUFFIX
    if not destination.parent.is_dir():
        return []
    return [entry for entry in destination.parent.iterdir() if entry.name.startswith(prefix)]


def _require_new_remote_destination(destination: pathlib.Path) -> pathlib.Path:
    """:func:`require_new_destination` for a ``gs://`` prefix: its name, and no object under it yet."""
    if is_orbax_temporary_name(destination.name):
        raise ValueError(
            f"path must not name a folder with Orbax's reserved temporary suffix {ORBAX_TMP_SUFFIX!r}, got "
            f"{str(destination)!r}: Orbax treats such a folder as an unfinished save and deletes it later"
        )
    fs = remote_filesystem(destination, needed_by=_NEEDED_BY)
    if fs.exists(remote_of(destination).fs_path):
        raise files.exists_error(
            destination,
            "a legacy V0 save's path must not exist yet (its checkpoints are never overwritten)",
            CheckpointExistsError,
        )
    return destination


def _require_committed_remote_source(source: pathlib.Path) -> None:
    """Refuses a ``gs://`` source that does not exist or that no commit marker covers.

    Orbax puts ``commit_success.txt`` in the folder it saved: the checkpoint's, or a V0 manager's step folder above.
    """
    fs = remote_filesystem(source, needed_by=_NEEDED_BY)
    if not fs.isdir(remote_of(source).fs_path):
        what = "which is an object, not a folder" if fs.exists(remote_of(source).fs_path) else "which does not exist"
        if what.endswith("exist"):
            raise FileNotFoundError(f"path must name an existing checkpoint directory, got {str(source)!r} {what}")
        raise ValueError(f"path must be a checkpoint directory, got {str(source)!r} {what}")
    if not (has_commit_marker(fs, source) or has_commit_marker(fs, source.parent)):
        raise ValueError(
            f"path {str(source)!r} is an incomplete checkpoint: neither it nor its parent holds Orbax's "
            f"{COMMIT_MARKER!r}, so it is a save that has not finished (still running, or interrupted)"
        )
