"""The paths record readers and writers are given, checked so that failures keep tinax 0.2's exception types.

tinax 0.2 handed paths straight to the file system, pyarrow or array-record,
so what it raised for a bad path was whatever they raised: an empty path was
a missing file, a destination under a regular file was a
NotADirectoryError, and array-record reported every failure as a
RuntimeError. The checks here raise tinax's own errors (a message that names
the path), each also an instance of what tinax 0.2 raised for the same path.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import pathlib
import stat

from tinax._core import validation
from tinax._data._compat02 import EmptyPathError

__all__ = ["DestinationErrors", "EmptyPathError", "require_record_path", "writable_destination"]


def require_record_path(
    value: object, name: str, *, empty_error: type[EmptyPathError] = EmptyPathError
) -> pathlib.Path:
    """Checks a reader's or writer's path argument.

    Args:
      value: The argument.
      name: Its name, for messages.
      empty_error: What to raise for an empty path (a subclass that is also
        what 0.2's writer raised for one).

    Returns:
      The path.

    Raises:
      TypeError: If the value is not a ``str`` or ``os.PathLike[str]``.
      EmptyPathError: If the path is empty (``empty_error``).
    """
    try:
        return validation.require_path(value, name)
    except TypeError:
        raise
    except ValueError as error:
        raise empty_error(str(error)) from error


@dataclasses.dataclass(frozen=True)
class DestinationErrors:
    """What a writer raises for a destination it cannot create, one class per reason.

    Attributes:
      folder_missing: The folder of the destination does not exist.
      not_a_folder: A part of the destination's folder is a regular file.
      is_folder: The destination is a folder.
    """

    folder_missing: type[FileNotFoundError] = FileNotFoundError
    not_a_folder: type[NotADirectoryError] = NotADirectoryError
    is_folder: type[IsADirectoryError] = IsADirectoryError


def writable_destination(destination: pathlib.Path, errors: DestinationErrors) -> pathlib.Path:
    """Checks that a file can be created at ``destination``, and says where the bytes go.

    tinax 0.2 opened the destination for writing, which follows a symbolic
    link: the linked file received the records and the link stayed. The path
    returned is that file, so that the atomic replacement happens there too.

    Args:
      destination: The path the caller gave.
      errors: The classes to raise.

    Returns:
      The path to write: ``destination``, or the file a symbolic link at
      ``destination`` points to.

    Raises:
      FileNotFoundError: If the destination's folder does not exist
        (``errors.folder_missing``).
      NotADirectoryError: If a part of the destination's folder is a regular
        file (``errors.not_a_folder``).
      IsADirectoryError: If the destination is a folder (``errors.is_folder``).
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
