"""Atomic file writes and checked opens to read, shared by the tinax distributions.

Writes land in a fsynced temporary file in the destination folder before taking its name, so
a crash leaves the old file or the new one, never a torn one. Temporary names record the writer
(host/PID namespace, pid, start time); the next write removes leftovers of writers certainly
dead, never when that cannot be told. Published files get ``0o666 & ~umask``, or the replaced
file's permissions, set before any byte is written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import hashlib
import io
import os
import pathlib
import re
import stat
import tempfile
import threading
from collections.abc import Iterator
from typing import BinaryIO, NamedTuple

__all__ = [
    "DestinationErrors",
    "atomic_path",
    "atomic_write",
    "exists_error",
    "fsync_directory",
    "open_regular_file",
    "require_file_destination",
]

_NO_HARD_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK}
_NOT_REPLACED = "this write does not replace existing files"


def exists_error(
    path: pathlib.PurePath | str, reason: str, error_type: type[FileExistsError] = FileExistsError
) -> FileExistsError:
    """The one error for an existing destination: ``"'<path>' already exists; <reason>"``."""
    return error_type(f"{str(path)!r} already exists; {reason}")


@dataclasses.dataclass(frozen=True)
class DestinationErrors:
    """The OSError classes a distribution raises for a file destination it cannot create (its 0.2 types)."""

    folder_missing: type[OSError] = FileNotFoundError
    not_a_folder: type[OSError] = NotADirectoryError
    is_folder: type[OSError] = IsADirectoryError


def require_file_destination(destination: pathlib.Path, errors: DestinationErrors) -> None:
    """Refuses a destination that is a folder, or whose folder is missing or not a folder, with ``errors``' classes.

    Each error carries the errno of its kind, the path, and a message saying which of the three it is.
    """
    where = str(destination)
    try:
        mode = os.stat(destination.parent).st_mode
    except OSError as error:
        if error.errno == errno.ENOTDIR:
            message = f"cannot write a file at {where!r}: a part of its folder is a regular file, not a directory"
            raise errors.not_a_folder(errno.ENOTDIR, message, where) from error
        if error.errno == errno.ENOENT:
            raise errors.folder_missing(errno.ENOENT, f"the folder of {where!r} does not exist", where) from error
        raise
    if not stat.S_ISDIR(mode):
        message = f"cannot write a file at {where!r}: its folder is a regular file, not a directory"
        raise errors.not_a_folder(errno.ENOTDIR, message, where)
    if destination.is_dir():
        raise errors.is_folder(errno.EISDIR, f"the destination must be a file path, not a directory: {where!r}", where)


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
        destination: The final path; its folder must exist.
        overwrite: Whether an existing destination may be replaced; without it, publishing is a
            hard link that fails rather than clobbers a file another writer created meanwhile.

    Yields:
        A binary file object to write the content to.

    Raises:
        FileExistsError: If the destination exists and ``overwrite`` is False.
        FileNotFoundError: If the destination's folder does not exist.
    """
    with _publishing(destination, overwrite=overwrite) as (descriptor, _), os.fdopen(descriptor, "wb") as handle:
        yield handle
        handle.flush()
        os.fsync(handle.fileno())


@contextlib.contextmanager
def atomic_path(destination: pathlib.Path, *, overwrite: bool) -> Iterator[pathlib.Path]:
    """Like :func:`atomic_write`, but yields a temporary path for writers that open it themselves.

    The caller writes and closes the (already created, empty) file within the block; it is then
    fsynced and published. Raises as :func:`atomic_write` does.
    """
    with _publishing(destination, overwrite=overwrite) as (descriptor, temporary):
        os.close(descriptor)
        yield temporary
        # fsync on a fresh descriptor flushes the same inode the writer wrote.
        written = os.open(temporary, os.O_RDONLY)
        try:
            os.fsync(written)
        finally:
            os.close(written)


@contextlib.contextmanager
def _publishing(destination: pathlib.Path, *, overwrite: bool) -> Iterator[tuple[int, pathlib.Path]]:
    """Yields an open temporary file, published as ``destination`` after the block, removed on failure."""
    descriptor, temporary = _open_temporary(destination, overwrite=overwrite)
    try:
        yield descriptor, temporary
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
        raise exists_error(destination, _NOT_REPLACED)
    stem = _temporary_stem(destination.name)
    _remove_leftovers_of_dead_writers(directory, stem)
    owner = _this_writer()
    mode = _published_mode(destination, overwrite=overwrite)
    descriptor, temporary_name = tempfile.mkstemp(
        prefix=f".{stem}.tinax-{owner.host}-{owner.pid}-{owner.start}.", suffix=".tmp", dir=directory
    )
    try:
        # mkstemp makes 0o600; other readers expect what open() would have made.
        os.fchmod(descriptor, mode)
    except BaseException:
        os.close(descriptor)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary_name)
        raise
    return descriptor, pathlib.Path(temporary_name)


def _published_mode(destination: pathlib.Path, *, overwrite: bool) -> int:
    """The permissions of the file about to be published at ``destination``."""
    if overwrite:
        try:
            replaced = os.stat(destination)
        except OSError:
            pass
        else:
            if stat.S_ISREG(replaced.st_mode):
                return stat.S_IMODE(replaced.st_mode)
    return 0o666 & ~_current_umask()


_UMASK_LOCK = threading.Lock()


def _current_umask() -> int:
    """The umask from ``/proc/self/status``, else set-and-restored under a lock.

    Outside code creating files at that instant may see 0o077, which only makes its files stricter.
    """
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        umask = os.umask(0o077)
        os.umask(umask)
    return umask


#: Longer destination names are shortened (prefix + hash) so temporary names fit NAME_MAX.
_LONGEST_STEM = 150
#: Host token when machine and PID namespace are unknown; such a process removes no leftovers.
_UNKNOWN_HOST = "00000000"


def _temporary_stem(name: str) -> str:
    if len(name) <= _LONGEST_STEM:
        return name
    return f"{name[:100]}-{hashlib.sha256(name.encode('utf-8', 'surrogateescape')).hexdigest()[:16]}"


class _Writer(NamedTuple):
    """Who wrote a temporary file: host token, process id and process start time."""

    host: str
    pid: int
    start: int


def _this_writer() -> _Writer:
    pid = os.getpid()  # Not cached: a forked child is another writer.
    start = _process_start(pid)
    return _Writer(_host_token(), pid, 0 if start is None else start)


@functools.cache
def _host_token() -> str:
    # A pid only means something on its machine and PID namespace; folders may be shared.
    try:
        boot = pathlib.Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return _UNKNOWN_HOST
    return hashlib.sha256(f"{boot}|{namespace}".encode()).hexdigest()[:8]


def _process_start(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot, or None if unknown."""
    try:
        status = pathlib.Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # The command name (field 2) is parenthesised and may hold spaces or ')'.
    fields = status[status.rfind(")") + 2 :].split()
    try:
        return int(fields[19])  # Field 22 of the whole line.
    except (IndexError, ValueError):
        return None


def _writer_is_gone(pid: int, start: int) -> bool:
    """Whether the writer (``pid`` started at ``start``) has certainly stopped running."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # Exists but belongs to someone else: alive as far as we can tell.
    current = _process_start(pid)
    # The same id on a process that started at another time: the id was reused.
    return current is not None and current != start


def _remove_leftovers_of_dead_writers(directory: pathlib.Path, stem: str) -> None:
    host = _host_token()
    if host == _UNKNOWN_HOST:
        return
    pattern = re.compile(rf"\.{re.escape(stem)}\.tinax-([0-9a-f]{{8}})-(\d+)-(\d+)\.\w+\.tmp")
    this_process = os.getpid()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None or match.group(1) != host:
            continue
        pid, start = int(match.group(2)), int(match.group(3))
        # Another thread of this process may be writing it right now.
        if pid == this_process or not entry.is_file(follow_symlinks=False):
            continue
        if _writer_is_gone(pid, start):
            with contextlib.suppress(FileNotFoundError):  # Another writer cleaned it first.
                os.unlink(entry.path)


def _publish(temporary: pathlib.Path, destination: pathlib.Path, *, overwrite: bool) -> None:
    # The temporary file is complete and fsynced; give it the destination name.
    if overwrite:
        os.replace(temporary, destination)
    else:
        try:
            os.link(temporary, destination)
        except FileExistsError:
            raise exists_error(destination, f"another writer created it meanwhile, and {_NOT_REPLACED}") from None
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
    """Yields an unbuffered binary handle on a regular file and its size (from the descriptor).

    The type is checked before opening, since opening a FIFO would block. Raises FileNotFoundError
    if nothing is there, ValueError if it is not a regular file; ``kind`` names it in messages.
    """
    try:
        status = path.stat()
    except FileNotFoundError:
        raise FileNotFoundError(f"path must name an existing {kind}, got {str(path)!r}, which does not exist") from None
    if not stat.S_ISREG(status.st_mode):
        raise ValueError(f"path must be a regular {kind} (not a directory or device), got {str(path)!r}")
    with open(path, "rb", buffering=0) as handle:
        yield handle, os.fstat(handle.fileno()).st_size
