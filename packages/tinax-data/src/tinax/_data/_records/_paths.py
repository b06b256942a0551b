"""The paths record readers and writers are given, checked so that failures keep tinax 0.2's exception types.

0.2 raised whatever the file system, pyarrow or array-record raised; each error here names the path and
is also an instance of that type.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import pathlib
import stat

from tinax._core import validation
from tinax._core._compat02 import MissingPathError

__all__ = ["DestinationErrors", "require_record_path", "writable_destination"]


def require_record_path(value: object, name: str, *, empty_error: type[Exception] = MissingPathError) -> pathlib.Path:
    """Checks a reader's or writer's path argument; an empty one raises ``empty_error`` (0.2's type for its caller)."""
    try:
        return validation.require_path(value, name)
    except TypeError:
        raise
    except ValueError as error:
        raise empty_error(str(error)) from error


@dataclasses.dataclass(frozen=True)
class DestinationErrors:
    """What a writer raises for a destination it cannot create: one class per reason, each also of its default."""

    folder_missing: type[OSError] = FileNotFoundError
    not_a_folder: type[OSError] = NotADirectoryError
    is_folder: type[OSError] = IsADirectoryError


def writable_destination(destination: pathlib.Path, errors: DestinationErrors) -> pathlib.Path:
    """Checks a file can be created at ``destination``; returns it, or the file a symbolic link there points to.

    0.2 wrote through a link (the link stayed), so the atomic replacement happens at the linked file too.
    """
    if destination.is_symlink():
        destination = pathlib.Path(os.path.realpath(destination))
    folder = destination.parent
    try:
        mode = os.stat(folder).st_mode
    except OSError as error:
        if error.errno == errno.ENOTDIR:
            raise errors.not_a_folder(
                f"the folder of {str(destination)!r} cannot exist: a part of it is a regular file"
            ) from error
        if error.errno == errno.ENOENT:
            raise errors.folder_missing(f"the folder of {str(destination)!r} does not exist") from error
        raise
    if not stat.S_ISDIR(mode):
        raise errors.not_a_folder(f"the folder of {str(destination)!r} is a regular file, not a folder")
    if destination.is_dir():
        raise errors.is_folder(f"path must be a file to create, got the folder {str(destination)!r}")
    return destination
