"""Atomic file writes, and checked opens of files to read, shared by the tinax distributions.

Every file tinax writes goes through :func:`atomic_write` (or, for native
writers that open a path themselves, :func:`atomic_path`): the bytes land in a
temporary file in the destination folder, are flushed and fsynced, and only
then take the destination name. A crash at any moment leaves either the old
file (or nothing) or the complete new one, never a torn file.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import pathlib
import stat
import tempfile
from collections.abc import Iterator
from typing import BinaryIO

__all__ = ["atomic_path", "atomic_write", "fsync_directory", "open_regular_file"]

_NO_HARD_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK}


def fsync_directory(directory: pathlib.Path) -> None:
    """Flushes a directory entry so a completed rename survives power loss."""
    try:
        descriptor = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # Some platforms cannot open directories; nothing to flush.
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


@contextlib.contextmanager
def atomic_write(destination: pathlib.Path, *, overwrite: bool) -> Iterator[BinaryIO]:
    """Opens a temporary file that atomically becomes ``destination`` on success.

    Args:
      destination: The final path. Its folder must exist.
      overwrite: Whether an existing destination may be replaced. Without it,
        an existing destination is refused before anything is written, and the
        final step is a hard link that fails rather than clobbers if another
        writer created the file in the meantime.

    Yields:
      A binary file object to write the content to.

    Raises:
      FileExistsError: If the destination exists and ``overwrite`` is False.
      FileNotFoundError: If the destination's folder does not exist.
    """
    descriptor, temporary = _open_temporary(destination, overwrite=overwrite)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        _publish(temporary, destination, overwrite=overwrite)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise


@contextlib.contextmanager
def atomic_path(destination: pathlib.Path, *, overwrite: bool) -> Iterator[pathlib.Path]:
    """Gives a temporary path that atomically becomes ``destination`` on success.

    For writers that insist on opening a path themselves (native libraries
    such as array-record). The caller writes the complete file at the yielded
    path and closes it before the block ends; the file is then fsynced and
    published exactly as :func:`atomic_write` publishes its file. If the block
    raises, the temporary file is removed and ``destination`` is untouched.

    Args:
      destination: The final path. Its folder must exist.
      overwrite: Whether an existing destination may be replaced; see
        :func:`atomic_write`.

    Yields:
      A path in the destination's folder. An empty file already exists there,
      so a writer that truncates and rewrites it is fine.

    Raises:
      FileExistsError: If the destination exists and ``overwrite`` is False.
      FileNotFoundError: If the destination's folder does not exist, or the
        block removed the temporary file.
    """
    descriptor, temporary = _open_temporary(destination, overwrite=overwrite)
    os.close(descriptor)
    try:
        yield temporary
        # The writer's own descriptor is closed by now; a fresh one reaches the
        # same inode, and fsync flushes that inode whatever descriptor asks.
        written = os.open(temporary, os.O_RDONLY)
        try:
            os.fsync(written)
        finally:
            os.close(written)
        _publish(temporary, destination, overwrite=overwrite)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise


def _open_temporary(destination: pathlib.Path, *, overwrite: bool) -> tuple[int, pathlib.Path]:
    directory = destination.parent
    if not directory.is_dir():
        raise FileNotFoundError(f"the folder of {str(destination)!r} does not exist")
    if not overwrite and (destination.exists() or destination.is_symlink()):
        raise FileExistsError(f"{str(destination)!r} already exists, and this write does not replace existing files")
    descriptor, temporary_name = tempfile.mkstemp(prefix=f".{destination.name}.", suffix=".tmp", dir=directory)
    return descriptor, pathlib.Path(temporary_name)


def _publish(temporary: pathlib.Path, destination: pathlib.Path, *, overwrite: bool) -> None:
    # The temporary file is complete and fsynced; give it the destination name.
    if overwrite:
        os.replace(temporary, destination)
    else:
        try:
            os.link(temporary, destination)
        except FileExistsError:
            raise FileExistsError(
                f"{str(destination)!r} was created by another writer meanwhile, "
                "and this write does not replace existing files"
            ) from None
        except OSError as error:
            # File systems without hard links: fall back to a checked rename.
            if error.errno not in _NO_HARD_LINKS or destination.exists():
                raise
            os.replace(temporary, destination)
        else:
            temporary.unlink()
    fsync_directory(destination.parent)


@contextlib.contextmanager
def open_regular_file(path: pathlib.Path, *, kind: str) -> Iterator[tuple[io.FileIO, int]]:
    """Opens an existing regular file for unbuffered binary reading, with its size.

    The file type is checked before the file is opened, because opening a FIFO
    for reading would block until some writer appears.

    Args:
      path: The file to read.
      kind: What the file should be, for messages, such as ``"safetensors file"``.

    Yields:
      The open raw file (callers read in large blocks, so it has no buffer of
      its own) and its size in bytes, taken from the open descriptor.

    Raises:
      FileNotFoundError: If nothing exists at ``path``.
      ValueError: If ``path`` is not a regular file (a directory, a device).
    """
    try:
        status = path.stat()
    except FileNotFoundError:
        raise FileNotFoundError(f"path must name an existing {kind}, got {str(path)!r}, which does not exist") from None
    if not stat.S_ISREG(status.st_mode):
        raise ValueError(f"path must be a regular {kind} (not a directory or device), got {str(path)!r}")
    with open(path, "rb", buffering=0) as handle:
        yield handle, os.fstat(handle.fileno()).st_size
