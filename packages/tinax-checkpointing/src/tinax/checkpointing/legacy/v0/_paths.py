"""Destination and source checks shared by the legacy V0 savers and loaders."""

from __future__ import annotations

import contextlib
import pathlib
import shutil
from collections.abc import Iterator

from tinax._core import validation

__all__ = ["removing_orbax_leftovers", "require_checkpoint_directory", "require_new_destination"]

# Orbax V0 stages every save in a sibling folder named "<name>.orbax-checkpoint-tmp",
# possibly followed by a timestamp, and renames it when the save commits.
_ORBAX_STAGING_SUFFIX = ".orbax-checkpoint-tmp"


def require_new_destination(path: pathlib.Path) -> pathlib.Path:
    """Checks that a checkpoint may be written at ``path``.

    Args:
      path: The destination, already checked to be a path.

    Returns:
      The destination as an absolute path (Orbax refuses relative ones).

    Raises:
      FileExistsError: If something already exists at ``path``.
      FileNotFoundError: If the folder that would hold ``path`` does not exist.
    """
    destination = path.absolute()
    if destination.exists() or destination.is_symlink():
        raise FileExistsError(
            f"path must not exist yet, got {str(destination)!r} which already exists; "
            "legacy V0 checkpoints are never overwritten"
        )
    if not destination.parent.is_dir():
        raise FileNotFoundError(
            f"the folder of path must exist, got {str(destination)!r} whose folder "
            f"{str(destination.parent)!r} does not exist"
        )
    return destination


def require_checkpoint_directory(path: pathlib.Path) -> pathlib.Path:
    """Checks that ``path`` names a directory a checkpoint could be read from.

    Args:
      path: The source, already checked to be a path.

    Returns:
      The source as an absolute path.

    Raises:
      FileNotFoundError: If nothing exists at ``path``.
      ValueError: If ``path`` is not a directory.
    """
    source = validation.require_existing_path(path, "path").absolute()
    if not source.is_dir():
        raise ValueError(f"path must be a checkpoint directory, got {str(source)!r} which is not a directory")
    return source


@contextlib.contextmanager
def removing_orbax_leftovers(destination: pathlib.Path) -> Iterator[None]:
    """Removes the staging folders that a failed Orbax save left next to ``destination``.

    Only folders that appeared during the ``with`` block are removed, so a
    staging folder of an earlier, unrelated save is left alone.
    """
    before = set(_staging_folders(destination))
    try:
        yield
    except BaseException:
        for leftover in set(_staging_folders(destination)) - before:
            shutil.rmtree(leftover, ignore_errors=True)
        raise


def _staging_folders(destination: pathlib.Path) -> list[pathlib.Path]:
    prefix = destination.name + _ORBAX_STAGING_SUFFIX
    if not destination.parent.is_dir():
        return []
    return [entry for entry in destination.parent.iterdir() if entry.name.startswith(prefix)]
