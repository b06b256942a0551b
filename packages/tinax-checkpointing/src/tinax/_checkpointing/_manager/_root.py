"""A manager's root on storage: its entries sorted into steps, their removal, the metric file and the writer lock.

Local folders and ``gs://`` prefixes follow one rule; docs/guide/checkpointing.md, section "How the manager
commits and keeps steps", describes it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import pathlib
import posixpath
import shutil
import socket
import stat
import sys
import tempfile
import time
import weakref
from collections.abc import Callable
from typing import Any

from tinax._checkpointing._compat02 import CheckpointNotFoundError, uncreatable_destination
from tinax._checkpointing._locations import CLAIM_SUFFIX, is_remote, remote_filesystem, remote_of, remove_remote_folder
from tinax._checkpointing._names import ORBAX_TMP_SUFFIX, is_orbax_temporary_name
from tinax._checkpointing._training import MAX_STEP
from tinax._core import validation
from tinax._core.files import atomic_write
from tinax._core.storage import publish_file, remote_write

if sys.platform != "win32":
    import fcntl

__all__ = [
    "LOCK_FILE",
    "METRICS_FILE",
    "CheckpointScan",
    "RemoteRootLock",
    "RootLock",
    "delete_step",
    "exists",
    "read_metrics",
    "remote_lock_hint",
    "remove_entry",
    "require_root",
    "sort_entries",
    "unlink",
    "write_metrics",
]

# The caller-supplied metric of each step, kept next to the step folders (never
# inside a checkpoint, whose format stays save_training_checkpoint's).
METRICS_FILE = "tinax-step-metrics.json"
# Process 0's advisory lock file while its manager writes; empty, and never deleted
# (deleting a lock file races with the next process that opens it).
LOCK_FILE = "tinax-manager.lock"
# A step being deleted is renamed to this first, so scans take it for an unfinished save.
_DELETING_SUFFIX = ORBAX_TMP_SUFFIX + "-tinax-deleting"


@dataclasses.dataclass(frozen=True)
class CheckpointScan:
    """What a scan of the root folder found.

    Attributes:
      committed: The steps whose folder is a complete checkpoint, ascending.
      torn: Step-named entries that are not complete checkpoints (damaged,
        half-deleted, missing an iterator state file, or a file).
      temporary: Unfinished saves: names containing ``.orbax-checkpoint-tmp`` or ending in ``.tinax-save-claim``.
      unrelated: Every other name, never touched; the manager's own files are not listed.
      removed: The torn and temporary entries removed with ``cleanup=True``, else empty.
    """

    committed: tuple[int, ...]
    torn: tuple[pathlib.Path, ...]
    temporary: tuple[pathlib.Path, ...]
    unrelated: tuple[pathlib.Path, ...]
    removed: tuple[pathlib.Path, ...]


def sort_entries(
    root: pathlib.Path,
    require_committed: Callable[[pathlib.Path], object],
    known_complete: dict[str, bytes] | None = None,
) -> CheckpointScan:
    """Sorts a root's entries; ``require_committed`` raises ``OSError`` or ``ValueError`` for a step not committed.

    ``known_complete`` (name -> :func:`_step_signature`) skips unchanged complete local folders; updated in place.
    """
    if is_remote(root):
        # A listing carries no inodes, so every step is checked at every scan.
        fs = _filesystem(root)
        listing = fs.ls(remote_of(root).fs_path, detail=False)
        names = sorted({posixpath.basename(entry.rstrip("/")) for entry in listing})

        def require_step(entry: pathlib.Path) -> None:
            if fs.isfile(remote_of(entry).fs_path):
                raise ValueError(f"step {str(entry)!r} is an object, not a folder of its own")
            require_committed(entry)

        return _classify(root, names, require_step)
    cache = {} if known_complete is None else known_complete
    real_root = os.path.realpath(root)

    def require_unchanged_or_committed(entry: pathlib.Path) -> None:
        signature = _step_signature(entry, real_root)
        if cache.get(entry.name) != signature:
            require_committed(entry)
            # The signature taken before the check: a change during the check is seen at the next scan.
            cache[entry.name] = signature

    found = _classify(root, [entry.name for entry in sorted(root.iterdir())], require_unchanged_or_committed)
    for name in set(cache) - {str(step) for step in found.committed}:
        del cache[name]
    return found


def _classify(root: pathlib.Path, names: list[str], require_step: Callable[[pathlib.Path], None]) -> CheckpointScan:
    """The one rule for a root's entry names: unfinished save, not a step, or a step committed or torn."""
    committed: list[int] = []
    torn: list[pathlib.Path] = []
    temporary: list[pathlib.Path] = []
    unrelated: list[pathlib.Path] = []
    for name in names:
        entry = root / name
        step = step_of(name)
        if is_orbax_temporary_name(name) or name.endswith(CLAIM_SUFFIX):
            temporary.append(entry)
        elif step is None:
            if name not in (METRICS_FILE, LOCK_FILE):
                unrelated.append(entry)
        else:
            try:
                require_step(entry)
            except (OSError, ValueError):
                torn.append(entry)
            else:
                committed.append(step)
    return CheckpointScan(tuple(sorted(committed)), tuple(torn), tuple(temporary), tuple(unrelated), ())


def step_of(name: str) -> int | None:
    """The step a name stands for: canonical ASCII decimal only ("7", not "07" or "+7")."""
    if not name.isascii() or not name.isdigit() or (len(name) > 1 and name[0] == "0"):
        return None
    step = int(name)
    return step if step <= MAX_STEP else None


def _step_signature(folder: pathlib.Path, real_root: str) -> bytes:
    """A digest of a step folder's whole tree (path, kind, inode, size, times of each entry); any change alters it.

    Raises ValueError when the folder is not a real folder of the root or its tree holds a symbolic link.
    """
    status = os.lstat(folder)
    if not stat.S_ISDIR(status.st_mode) or os.path.realpath(folder) != os.path.join(real_root, folder.name):
        raise ValueError(f"step {str(folder)!r} is not a folder of its own under the root")
    digest = hashlib.blake2b(digest_size=20)
    digest.update(f"{status.st_ino} {status.st_mtime_ns} {status.st_ctime_ns}\n".encode())
    pending = [folder]
    while pending:
        current = pending.pop()
        with os.scandir(current) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
        for entry in entries:
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                raise ValueError(f"step {str(folder)!r} holds a symbolic link, {entry.path!r}")
            relative = os.path.relpath(entry.path, folder)
            digest.update(os.fsencode(relative))
            digest.update(
                f"\0{info.st_mode} {info.st_ino} {info.st_size} {info.st_mtime_ns} {info.st_ctime_ns}\n".encode()
            )
            if stat.S_ISDIR(info.st_mode):
                pending.append(pathlib.Path(entry.path))
    return digest.digest()


def require_root(root: pathlib.Path, *, create: bool) -> None:
    """Checks a root: a folder (made if missing and ``create``), or on ``gs://`` a prefix (or nothing if ``create``)."""
    if is_remote(root):
        fs = _filesystem(root)
        location = remote_of(root)
        if fs.isfile(location.fs_path):
            validation.fail_value("root", "a folder", str(root))
        if not create and not fs.exists(location.fs_path):
            raise CheckpointNotFoundError(
                f"root must name an existing folder when create=False, got {str(root)!r} which holds no object"
            )
    elif os.path.lexists(root):
        if not root.is_dir():
            validation.fail_value("root", "a folder", str(root))
    elif not create:
        raise CheckpointNotFoundError(
            f"root must name an existing folder when create=False, got {str(root)!r} which does not exist"
        )
    else:
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise uncreatable_destination(
                f"root {str(root)!r} cannot be created as a folder: {error.strerror or error}", error
            ) from error


def read_metrics(root: pathlib.Path) -> dict[int, float]:
    """The metric file's metric of each step; empty when there is no file."""
    path = root / METRICS_FILE
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise ValueError(f"the metric file {str(path)!r} cannot be read; it holds no JSON object") from error
    if not isinstance(stored, dict):
        raise ValueError(f"the metric file {str(path)!r} holds no JSON object")
    metrics: dict[int, float] = {}
    for key, value in stored.items():
        if step_of(key) is None or type(value) not in (int, float):
            raise ValueError(
                f"the metric file {str(path)!r} holds an entry that is not a step and a number: {key!r}: {value!r}"
            )
        metrics[int(key)] = float(value)
    return metrics


def write_metrics(root: pathlib.Path, metrics: dict[int, float]) -> None:
    """Replaces the metric file whole: a reader sees the old or the new file, never a part."""
    encoded = json.dumps({str(step): metrics[step] for step in sorted(metrics)}).encode("utf-8")
    if is_remote(root):
        with remote_write(_filesystem(root), remote_of(root / METRICS_FILE), overwrite=True) as handle:
            handle.write(encoded)
        return
    with atomic_write(root / METRICS_FILE, overwrite=True) as handle:
        handle.write(encoded)


def remove_entry(entry: pathlib.Path) -> None:
    """Removes one root entry: a real folder with its tree, anything else (a link included) by name."""
    if is_remote(entry):
        fs = _filesystem(entry)
        location = remote_of(entry)
        if fs.isfile(location.fs_path):
            with contextlib.suppress(FileNotFoundError):
                fs.rm_file(location.fs_path)
        else:
            remove_remote_folder(fs, entry)
        return
    try:
        is_folder = stat.S_ISDIR(os.lstat(entry).st_mode)
    except FileNotFoundError:
        return
    if not is_folder:
        entry.unlink(missing_ok=True)
        return

    def skip_vanished(function: Callable[..., Any], path: str, error: BaseException) -> None:
        # An entry removed meanwhile by someone else is as good as removed.
        if not isinstance(error, FileNotFoundError):
            raise error

    # rmtree never follows a link inside the folder: it removes the link.
    if sys.version_info >= (3, 12):
        shutil.rmtree(entry, onexc=skip_vanished)
    else:
        shutil.rmtree(entry, onerror=lambda function, path, info: skip_vanished(function, path, info[1]))


def delete_step(folder: pathlib.Path) -> bool:
    """Deletes a committed step folder (renamed to a temporary name first); returns whether this call deleted it.

    Only a real folder is deleted, never through a link; on a bucket the commit marker goes first.
    """
    if is_remote(folder):
        fs = _filesystem(folder)
        if not fs.exists(remote_of(folder).fs_path):
            return False
        remove_remote_folder(fs, folder)
        return True
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return False
    except FileNotFoundError:
        return False
    # The rename is atomic: from here on every scan takes the folder for an unfinished save.
    doomed = folder.with_name(folder.name + _DELETING_SUFFIX)
    remove_entry(doomed)  # A leftover of an interrupted deletion of the same name would block the rename.
    try:
        os.replace(folder, doomed)
    except FileNotFoundError:
        return False
    remove_entry(doomed)
    return True


def exists(path: pathlib.Path) -> bool:
    """Whether anything is at ``path``: a local entry (a broken link included), or an object or prefix."""
    if is_remote(path):
        return bool(_filesystem(path).exists(remote_of(path).fs_path))
    return os.path.lexists(path)


def unlink(path: pathlib.Path) -> None:
    """Removes the file or object at ``path``, if any."""
    if is_remote(path):
        with contextlib.suppress(FileNotFoundError):
            _filesystem(path).rm_file(remote_of(path).fs_path)
    else:
        path.unlink(missing_ok=True)


def _filesystem(path: pathlib.Path) -> Any:
    return remote_filesystem(path, needed_by="tinax.checkpointing.TrainingCheckpointManager")


class RootLock:
    """An advisory lock (``flock``) on the root's lock file, held by process 0 of the manager that writes."""

    def __init__(self, descriptor: int) -> None:
        # Closing the descriptor releases the lock; a manager dropped while it holds one releases it too.
        self._finalizer = weakref.finalize(self, os.close, descriptor)

    @classmethod
    def acquire(cls, root: pathlib.Path) -> tuple[RootLock | RemoteRootLock | None, bool]:
        """Tries to lock without waiting: (None, False) where ``flock`` is unavailable; flag True if held elsewhere."""
        if is_remote(root):
            return RemoteRootLock.acquire(root)
        if sys.platform == "win32":  # pragma: no cover - no flock: the root is written unlocked
            return None, False
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            descriptor = os.open(root / LOCK_FILE, flags, 0o666)
        except OSError:
            return None, False
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            return None, True
        except OSError:  # ENOLCK, EINVAL, ...: this file system has no such locks.
            os.close(descriptor)
            return None, False
        return cls(descriptor), False

    def release(self) -> None:
        self._finalizer()


class RemoteRootLock:
    """The ``gs://`` lock object ``<root>/tinax-manager.lock``: created only if absent, deleted on release.

    A holder killed without releasing leaves it behind; the root then refuses writers until it is deleted by hand.
    """

    def __init__(self, root: pathlib.Path) -> None:
        self._root = root

    @classmethod
    def acquire(cls, root: pathlib.Path) -> tuple[RemoteRootLock | None, bool]:
        """Creates the lock object; the flag is True when it exists already (another writer holds it)."""
        fs = _filesystem(root)
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        holder = f"host {socket.gethostname()}, process {os.getpid()}, since {since}"
        with tempfile.TemporaryDirectory(prefix="tinax-lock-") as folder:
            content = pathlib.Path(folder) / LOCK_FILE
            content.write_text(holder, encoding="utf-8")
            try:
                publish_file(fs, content, remote_of(root / LOCK_FILE), overwrite=False)
            except FileExistsError:
                return None, True
        return cls(root), False

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            _filesystem(self._root).rm_file(remote_of(self._root / LOCK_FILE).fs_path)


def remote_lock_hint(root: pathlib.Path) -> str:
    """Names the holder of a ``gs://`` root's lock object and how to free a root its holder left."""
    lock = remote_of(root / LOCK_FILE)
    try:
        holder = bytes(_filesystem(root).cat_file(lock.fs_path)[:200]).decode("utf-8", "replace")
    except Exception:  # Gone meanwhile, or unreadable: the hint then names no holder.
        holder = "unknown"
    return (
        f". Its lock object {lock.url!r} names the writer ({holder}); if that job is gone (killed before it "
        "released the lock), delete the object to free the root"
    )
