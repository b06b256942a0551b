"""Atomic file writes shared by the tinax distributions.

Every file tinax writes goes through :func:`atomic_write`: the bytes land in a
temporary file in the destination folder, are flushed and fsynced, and only
then take the destination name. A crash at any moment leaves either the old
file (or nothing) or the complete new one, never a torn file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import tempfile
from collections.abc import Iterator
from typing import BinaryIO

__all__ = ["atomic_write", "fsync_directory"]

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
    directory = destination.parent
    if not directory.is_dir():
        raise FileNotFoundError(f"the folder of {str(destination)!r} does not exist")
    if not overwrite and (destination.exists() or destination.is_symlink()):
        raise FileExistsError(f"{str(destination)!r} already exists; pass overwrite=True to replace it")
    descriptor, temporary_name = tempfile.mkstemp(prefix=f".{destination.name}.", suffix=".tmp", dir=directory)
    temporary = pathlib.Path(temporary_name)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        if overwrite:
            os.replace(temporary, destination)
        else:
            try:
                os.link(temporary, destination)
            except FileExistsError:
                raise FileExistsError(
                    f"{str(destination)!r} was created by another writer; pass overwrite=True to replace it"
                ) from None
            except OSError as error:
                # File systems without hard links: fall back to a checked rename.
                if error.errno not in _NO_HARD_LINKS or destination.exists():
                    raise
                os.replace(temporary, destination)
            else:
                temporary.unlink()
        fsync_directory(directory)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise
