"""Checks of the paths that tinax.weights reads and writes, with the exception types of tinax 0.2.

tinax 0.2 refused a symbolic link destination with ValueError and reported a directory given as a
file with the system's error; those types are kept (:mod:`._compat02`), folder errors are also
ValueErrors, and a path that cannot lead to any file raises ``MissingPathError``, never a bare OSError.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import pathlib
from collections.abc import Iterator
from typing import BinaryIO

from tinax._core import validation
from tinax._core._compat02 import MissingPathError
from tinax._core.files import (
    DestinationErrors,
    atomic_path,
    atomic_write,
    exists_error,
    open_regular_file,
    require_file_destination,
)
from tinax._weights._compat02 import DirectoryPathError, NotADirectoryPathError

__all__ = [
    "open_file_to_read",
    "path_to_write_atomically",
    "require_destination_path",
    "require_writable_destination",
    "unreachable_path_error",
    "write_file_atomically",
]

_DESTINATION_ERRORS = DestinationErrors(
    folder_missing=FileNotFoundError, not_a_folder=NotADirectoryPathError, is_folder=DirectoryPathError
)
# What each errno says about a path that cannot lead to a file.
_UNREACHABLE = {
    errno.ENOTDIR: "a component of it before the last is not a directory",
    errno.ELOOP: "it runs into a loop of symbolic links (or through too many of them)",
    errno.ENAMETOOLONG: "it, or a name in it, is longer than the file system allows",
}


def unreachable_path_error(error: OSError, message: str, path: pathlib.Path) -> MissingPathError | None:
    """The documented error for an OSError saying no file can exist at ``path``, or None for other errors."""
    reason = _UNREACHABLE.get(error.errno) if error.errno is not None else None
    if reason is None:
        return None
    kind = NotADirectoryPathError if error.errno == errno.ENOTDIR else MissingPathError
    return kind(error.errno, f"{message}: {reason}", str(path))


@contextlib.contextmanager
def _path_errors_translated(path: pathlib.Path, action: str, directory_error: type[OSError]) -> Iterator[None]:
    """Turns the system's errors for a path that leads to no file into documented ones."""
    try:
        yield
    except (DirectoryPathError, MissingPathError):
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
    """Opens an existing regular file to read, with its size, raising path errors of documented types.

    Only opening is covered; errors while reading (EIO, say) come through unchanged.
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
    """Checks a destination and writes it atomically, raising path errors of documented types.

    The block should only write the file it is given: an OSError it raises is treated as the path's.
    """
    with _checked_destination(path), atomic_write(path, overwrite=overwrite) as handle:
        yield handle


@contextlib.contextmanager
def path_to_write_atomically(path: pathlib.Path, *, overwrite: bool) -> Iterator[pathlib.Path]:
    """As :func:`write_file_atomically`, but yields an empty temporary path for writers that open it themselves."""
    with _checked_destination(path), atomic_path(path, overwrite=overwrite) as temporary:
        yield temporary


def require_writable_destination(path: pathlib.Path, *, overwrite: bool) -> None:
    """Runs :func:`write_file_atomically`'s checks only, so every process refuses a bad shared destination alike."""
    with _checked_destination(path):
        if not overwrite and (path.exists() or path.is_symlink()):
            raise exists_error(path, "this write does not replace existing files")


@contextlib.contextmanager
def _checked_destination(path: pathlib.Path) -> Iterator[None]:
    """Refuses a destination that is a symbolic link or lacks its folder, then runs the block with errors translated.

    A link is refused whatever it points to: replacing it or writing through it would both surprise someone.
    """
    with _path_errors_translated(path, "write a file at", DirectoryPathError):
        if path.is_symlink():
            raise ValueError(f"the destination {str(path)!r} must not be a symbolic link; write to the file it names")
        require_file_destination(path, _DESTINATION_ERRORS)
        yield


def require_destination_path(value: object, name: str) -> pathlib.Path:
    """Checks a path to write a file at; the empty path (the current folder) is refused, as tinax 0.2 did."""
    if isinstance(value, (str, os.PathLike)) and os.fspath(value) == "":
        raise DirectoryPathError(
            errno.EISDIR, f"{name} must be a non-empty file path, got '' (the current folder)", os.curdir
        )
    return validation.require_path(value, name)
