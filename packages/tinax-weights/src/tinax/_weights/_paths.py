"""Checks of the paths that tinax.weights reads and writes, with the exception types of tinax 0.2.

tinax 0.2 refused a symbolic link as a save destination with a ValueError,
and reported a directory given as a file path with the operating system's
error. These checks keep those types (declared in :mod:`._compat02`), and
the folder errors are ValueErrors too, since a folder where a file is needed
is a bad value. A path that cannot lead to any file (one that runs through a
regular file, a loop of symbolic links, a name longer than the file system
allows) is reported as an ``UnreachablePathError``, never as the operating
system's bare OSError.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import pathlib
import stat
from collections.abc import Iterator
from typing import BinaryIO

from tinax._core import validation
from tinax._core.files import atomic_path, atomic_write, exists_error, open_regular_file
from tinax._weights._compat02 import (
    DirectoryPathError,
    MissingFilePathError,
    NotADirectoryPathError,
    UnreachablePathError,
)

__all__ = [
    "open_file_to_read",
    "path_to_write_atomically",
    "require_destination_path",
    "require_writable_destination",
    "unreachable_path_error",
    "write_file_atomically",
]

# What each errno says about a path that cannot lead to a file.
_UNREACHABLE = {
    errno.ENOTDIR: "a component of it before the last is not a directory",
    errno.ELOOP: "it runs into a loop of symbolic links (or through too many of them)",
    errno.ENAMETOOLONG: "it, or a name in it, is longer than the file system allows",
}


def unreachable_path_error(error: OSError, message: str, path: pathlib.Path) -> UnreachablePathError | None:
    """Returns the documented error for an OSError that says no file can exist at ``path``.

    Args:
      error: The operating system's error, to chain as the cause.
      message: What could not be done, such as ``"cannot read a file at this
        path"``; the reason follows it.
      path: The path, as the error's ``filename``.

    Returns:
      An :class:`UnreachablePathError` (a :class:`NotADirectoryPathError` for
      ENOTDIR), or None if ``error`` says something else (no permission, say).
    """
    reason = _UNREACHABLE.get(error.errno) if error.errno is not None else None
    if reason is None:
        return None
    kind = NotADirectoryPathError if error.errno == errno.ENOTDIR else UnreachablePathError
    return kind(error.errno, f"{message}: {reason}", str(path))


@contextlib.contextmanager
def _path_errors_translated(path: pathlib.Path, action: str, directory_error: type[OSError]) -> Iterator[None]:
    """Turns the operating system's errors for a path that leads to no file into documented ones.

    Args:
      path: The path being opened.
      action: What was being done, for the message, such as ``"read a msgpack file at"``.
      directory_error: The class to raise, with EISDIR or ENOENT as its class
        says, where the system reports a directory in the way.
    """
    try:
        yield
    except (UnreachablePathError, DirectoryPathError, MissingFilePathError):
        raise
    except IsADirectoryError as error:  # A folder took the name after the checks.
        raise _directory_error(directory_error, f"cannot {action} this path: it is a directory", path) from error
    except OSError as error:
        translated = unreachable_path_error(error, f"cannot {action} this path", path)
        if translated is None:
            raise
        raise translated from error


@contextlib.contextmanager
def open_file_to_read(
    path: pathlib.Path, *, kind: str, directory_error: type[OSError] = DirectoryPathError
) -> Iterator[tuple[io.FileIO, int]]:
    """Opens an existing regular file to read, with path errors of documented types.

    Only opening is covered: errors while reading the open file (EIO, say)
    come through unchanged.

    Args:
      path: The file to read.
      kind: What the file should be, for messages, such as ``"safetensors file"``.
      directory_error: The class to raise if ``path`` is a directory, an
        OSError that is also a ValueError.

    Yields:
      The open unbuffered file and its size in bytes.

    Raises:
      FileNotFoundError: If nothing exists at ``path``, or no file can
        (:class:`UnreachablePathError`, also a ValueError).
      OSError: Of class ``directory_error`` (also a ValueError), if ``path``
        is a directory.
      ValueError: If ``path`` is not a regular file (a device, say).
    """
    with contextlib.ExitStack() as stack:
        with _path_errors_translated(path, f"read a {kind} at", directory_error):
            if path.is_dir():
                raise _directory_error(directory_error, f"path must name a {kind}, not a directory", path)
            opened = stack.enter_context(open_regular_file(path, kind=kind))
        yield opened


def _directory_error(error: type[OSError], message: str, path: pathlib.Path) -> OSError:
    """An ``error`` for a directory found where a file is needed, with the errno its class says."""
    return error(errno.ENOENT if issubclass(error, FileNotFoundError) else errno.EISDIR, message, str(path))


@contextlib.contextmanager
def write_file_atomically(path: pathlib.Path, *, overwrite: bool) -> Iterator[BinaryIO]:
    """Checks a destination and writes it atomically, with path errors of documented types.

    The block should only write to the file it is given: an OSError that it
    raises is treated like one from the path.

    Args:
      path: The destination file.
      overwrite: Whether an existing file may be replaced.

    Yields:
      A binary file to write the content to; it takes the name ``path`` when
      the block ends without an error.

    Raises:
      ValueError: If ``path`` is a symbolic link.
      IsADirectoryError: If ``path`` is a directory, or becomes one before the
        file takes its name (also a ValueError).
      FileExistsError: If ``path`` exists and ``overwrite`` is False.
      FileNotFoundError: If the folder of ``path`` does not exist, or no file
        can exist at ``path`` (:class:`UnreachablePathError`, also a
        ValueError; where the path runs through a regular file, a
        :class:`NotADirectoryPathError`, also a NotADirectoryError).
    """
    with _checked_destination(path), atomic_write(path, overwrite=overwrite) as handle:
        yield handle


@contextlib.contextmanager
def path_to_write_atomically(path: pathlib.Path, *, overwrite: bool) -> Iterator[pathlib.Path]:
    """Checks a destination and gives a temporary path that atomically becomes it.

    As :func:`write_file_atomically`, for writers that open the file
    themselves (several processes writing parts of one file): the temporary
    file exists, empty, in the destination's folder, and takes the name
    ``path`` when the block ends without an error; if the block raises, it
    is removed.

    Raises:
      The errors of :func:`write_file_atomically`.
    """
    with _checked_destination(path), atomic_path(path, overwrite=overwrite) as temporary:
        yield temporary


def require_writable_destination(path: pathlib.Path, *, overwrite: bool) -> None:
    """Runs the checks of :func:`write_file_atomically` without writing anything.

    Several processes that write one file all run them first, so that on a
    shared file system each refuses a bad destination with the same error.

    Raises:
      The errors of :func:`write_file_atomically`.
    """
    with _checked_destination(path):
        if not overwrite and (path.exists() or path.is_symlink()):
            raise exists_error(path, "this write does not replace existing files")


@contextlib.contextmanager
def _checked_destination(path: pathlib.Path) -> Iterator[None]:
    """Checks that a file may be written at ``path``, then runs the block, with path errors translated.

    A symbolic link is refused, whatever it points to, because replacing the
    link and writing through it would both surprise someone: the caller
    named one file, and the link says it is another. The folder must exist
    and be a directory (else a FileNotFoundError, or a
    :class:`NotADirectoryPathError`).
    """
    with _path_errors_translated(path, "write a file at", DirectoryPathError):
        if path.is_symlink():
            raise ValueError(f"the destination {str(path)!r} must not be a symbolic link; write to the file it names")
        if path.is_dir():
            raise DirectoryPathError(errno.EISDIR, "the destination must be a file path, not a directory", str(path))
        _require_folder(path)
        yield


def _require_folder(path: pathlib.Path) -> None:
    folder = path.parent
    try:
        mode = os.stat(folder).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"the folder of {str(path)!r} does not exist") from None
    if not stat.S_ISDIR(mode):
        raise NotADirectoryPathError(
            errno.ENOTDIR, f"cannot write a file at this path: its folder {str(folder)!r} is not a directory", str(path)
        )


def require_destination_path(value: object, name: str) -> pathlib.Path:
    """Checks a path to write a file at, and returns it as a ``Path``.

    The empty path names the current folder, so it is refused as a folder
    given where a file path is needed, as tinax 0.2's writers refused it.

    Args:
      value: The path argument.
      name: The argument's name, for the message.

    Returns:
      The path.

    Raises:
      TypeError: If ``value`` is not a ``str`` or ``os.PathLike[str]``.
      IsADirectoryError: If ``value`` is empty (also a ValueError).
    """
    if isinstance(value, (str, os.PathLike)) and os.fspath(value) == "":
        raise DirectoryPathError(
            errno.EISDIR, f"{name} must be a non-empty file path, got '' (the current folder)", os.curdir
        )
    return validation.require_path(value, name)
