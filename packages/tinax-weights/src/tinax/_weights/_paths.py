"""Checks of the paths that tinax.weights reads and writes, with the exception types of tinax 0.2.

tinax 0.2 refused a symbolic link as a save destination with a ValueError,
and reported a directory given as a file path with the operating system's
error. These checks keep those types, and the folder errors are ValueErrors
too, since a folder where a file is needed is a bad value.
"""

from __future__ import annotations

import errno
import pathlib

__all__ = ["DirectoryPathError", "MissingFilePathError", "require_file_destination", "require_not_a_directory"]


class DirectoryPathError(IsADirectoryError, ValueError):
    """A directory was given where a file path is needed."""


class MissingFilePathError(FileNotFoundError, ValueError):
    """A directory was given where an existing file is needed, reported as no such file."""


def require_file_destination(path: pathlib.Path) -> None:
    """Checks that a file may be written at ``path``.

    A symbolic link is refused, whatever it points to, because replacing the
    link and writing through it would both surprise someone: the caller
    named one file, and the link says it is another.

    Raises:
      ValueError: If ``path`` is a symbolic link.
      IsADirectoryError: If ``path`` is a directory (also a ValueError).
    """
    if path.is_symlink():
        raise ValueError(f"the destination {str(path)!r} must not be a symbolic link; write to the file it names")
    if path.is_dir():
        raise DirectoryPathError(errno.EISDIR, "the destination must be a file path, not a directory", str(path))


def require_not_a_directory(path: pathlib.Path, *, kind: str, error: type[OSError] = DirectoryPathError) -> None:
    """Checks that a path to read does not name a directory.

    Args:
      path: The path to read.
      kind: What the file should be, for the message, such as ``"safetensors file"``.
      error: The exception class to raise, an OSError that is also a ValueError.

    Raises:
      OSError: Of class ``error`` (also a ValueError), if ``path`` is a directory.
    """
    if path.is_dir():
        code = errno.ENOENT if issubclass(error, FileNotFoundError) else errno.EISDIR
        raise error(code, f"path must name a {kind}, not a directory", str(path))
