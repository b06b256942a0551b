"""Saving named checkpointables through Orbax V1: one asynchronous save per destination.

Orbax commits by renaming ``<path>.orbax-checkpoint-tmp`` to ``<path>``. This adds what it leaves to the
caller: immutable destinations that are never temporary names, one save at a time per destination,
checks before writing (``_save_checks``) and a response whose failure always surfaces (``_response``).
Orbax is imported when a save runs, never when this module is imported.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pathlib
import tempfile
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tinax._checkpointing._compat02 import CheckpointExistsError, upstream_failure
from tinax._checkpointing._locations import (
    CLAIM_SUFFIX,
    absolute_location,
    folder_nbytes,
    has_commit_marker,
    is_remote,
    remote_filesystem,
    remote_of,
    remove_remote_folder,
)
from tinax._checkpointing._names import (
    ORBAX_TMP_SUFFIX,
    refuse_orbax_temporary_destination,
    require_distinct_on_case_insensitive_systems,
    validate_checkpointable_name,
)
from tinax._checkpointing._orbax_workarounds import current_operation_id, settle_failed_save
from tinax._checkpointing._saving._checks import (
    exists_error,
    require_absent,
    require_creatable,
    require_saveable_leaves,
)
from tinax._core import validation
from tinax._core.logs import Operation, get_logger
from tinax._core.storage import RemotePath, publish_file

if TYPE_CHECKING:
    import orbax.checkpoint.experimental.v1 as ocp

__all__ = ["save_checkpointables", "start_save"]

_logger = get_logger("checkpointing")

# One save start at a time, so the Orbax operation id read right after is that save's.
_start_lock = threading.Lock()
# Destinations (resolved, case-normalized) with a save in flight in this process: Orbax would let
# a second save delete the first one's temporary folder, and both would fail.
_saves_in_flight: set[str] = set()
_saves_in_flight_lock = threading.Lock()


def save_checkpointables(path: str | os.PathLike[str], checkpointables: Mapping[str, Any]) -> ocp.AsyncResponse[None]:
    """Starts one asynchronous save of several named values into one checkpoint.

    Every name becomes a subfolder of ``path``. Names, leaves and the destination
    are checked first; device data is copied to the host before this returns and
    writing continues in the background. The checkpoint appears at ``path`` only
    when complete, and an existing ``path`` (or one with a save in flight) is
    refused. Call ``result()`` before the program exits. Once committed, the save
    logs one INFO line to the ``tinax.checkpointing`` logger (bytes, seconds,
    time the call blocked). The checkpointing user guide's "What a save checks
    and promises" section gives the rules.

    Args:
      path: Folder to create for the checkpoint; missing parents are created. A
        ``gs://`` URL (``str`` or ``etils.epath.Path``) names a bucket prefix,
        committed by ``commit_success.txt``; a ``<path>.tinax-save-claim`` object
        keeps other writers out (a killed save leaves both behind).
      checkpointables: The values to save, by name. At least one.

    Returns:
      An Orbax ``AsyncResponse``. ``result(timeout=None)`` waits and returns None;
      if the save failed it raises a ``RuntimeError`` that is also of the
      background error's class (cause chained), once the save's threads have
      ended and its temporary folder is gone; ``TimeoutError`` if ``timeout``
      passes first. ``on_complete`` registers a callback for a successful save.

    Raises:
      TypeError: If an argument's kind is wrong or Orbax cannot save a value (also its ``KeyError``/``ValueError``).
      ValueError: If ``checkpointables`` is empty, a name or value is bad, or Orbax refuses (some also ``KeyError``).
      OSError: If ``path`` cannot be created (of the class creating it would raise); also a ``ValueError``.
      FileExistsError: If ``path`` exists, or a save to it is in flight in this process; also a ``ValueError``.
      ImportError: If ``path`` is a ``gs://`` URL and gcsfs is not installed.

    Examples:
      >>> import pathlib
      >>> import jax.numpy as jnp
      >>> from tinax.checkpointing import save_checkpointables
      >>> response = save_checkpointables("run/step-1", {"params": {"w": jnp.ones(3)}})
      >>> response.result()  # returns once every file is written and the checkpoint committed
      >>> pathlib.Path("run/step-1").is_dir()
      True
    """
    return start_save(path, checkpointables)


def start_save(
    path: str | os.PathLike[str], checkpointables: Mapping[str, Any], *, description: str | None = None
) -> ocp.AsyncResponse[None]:
    """Does what :func:`save_checkpointables` documents, naming what it saved as ``description`` in its log line."""
    operation = Operation(_logger, "saved", "", "")
    # Orbax accepts only absolute paths; a relative one means "from here", as it would for open().
    destination = absolute_location(path, "path", needed_by="tinax.checkpointing.save_checkpointables")
    remote = is_remote(destination)
    refuse_orbax_temporary_destination(destination)
    named = validation.require_str_mapping(checkpointables, "checkpointables")
    if not named:
        validation.fail_value("checkpointables", "a mapping with at least one checkpointable", named)
    for name in named:
        validate_checkpointable_name(name)
    require_distinct_on_case_insensitive_systems(named, "checkpointables")
    for name, value in named.items():
        require_saveable_leaves(name, value)
    import orbax.checkpoint.experimental.v1 as orbax  # Imported only when a save runs: it is slow to import.

    operation.what = f"checkpointables {sorted(named)} to" if description is None else description
    operation.target = str(destination)

    claim = os.fspath(destination) if remote else os.path.normcase(os.path.realpath(destination))
    with _saves_in_flight_lock:
        if claim in _saves_in_flight:
            raise CheckpointExistsError(
                f"path {str(destination)!r} is the destination of a save that is still in flight in this process; "
                "wait for its result() before saving there again"
            )
        _saves_in_flight.add(claim)
    temporary = destination.with_name(destination.name + ORBAX_TMP_SUFFIX)
    release = functools.partial(_release, claim)
    try:
        if remote:
            release = functools.partial(_release_remote, claim, destination, _claim_remote(destination))
        else:
            require_absent(destination)
            require_creatable(destination)
        with _start_lock:
            before = current_operation_id()
            try:
                response = orbax.save_checkpointables_async(destination, dict(named))
            except Exception as error:
                # Whatever Orbax had begun for the save ends here, folder included.
                started = current_operation_id()
                settle_failed_save(started if started != before else None, temporary)
                if not remote and os.path.lexists(destination):
                    raise exists_error(destination) from error
                raise upstream_failure(
                    f"Orbax refused to save checkpointables {sorted(named)} to {str(destination)!r}", error
                ) from error
            operation_id = current_operation_id()
    except BaseException:
        release()
        raise
    # Imported here: the response inherits Orbax's protocol, and Orbax is imported only when a save runs.
    from tinax._checkpointing._saving._response import SaveResponse

    logged = _LoggedOnCommit(response, operation, destination)
    return SaveResponse(logged, destination, sorted(named), release, operation_id)


class _LoggedOnCommit:
    """Orbax's save response, logging the save's line on commit (in the watcher thread, before waiters are released)."""

    def __init__(self, inner: Any, operation: Operation, destination: pathlib.Path) -> None:
        self._inner = inner
        self._operation = operation
        self._destination = destination
        self._blocked = operation.seconds()

    def result(self, timeout: float | None = None) -> Any:
        outcome = self._inner.result(timeout)
        # A log line must never turn a committed save into a failed one.
        with contextlib.suppress(Exception):
            nbytes = folder_nbytes(self._destination) if self._operation.enabled else None
            blocked = f"the call returned after {self._blocked:.3f} s, the rest was written in the background"
            self._operation.done(nbytes=nbytes, detail=blocked)
        return outcome


def _release(claim: str) -> None:
    with _saves_in_flight_lock:
        _saves_in_flight.discard(claim)


def _claim_object(destination: pathlib.Path) -> RemotePath:
    return remote_of(destination).parent / (destination.name + CLAIM_SUFFIX)


def _claim_remote(destination: pathlib.Path) -> bool:
    """Refuses a non-empty ``gs://`` destination and claims it with a create-if-absent object; returns whether claimed.

    Orbax writes into the prefix itself, so racing writers would mix objects. Multi-process runs take no claim.
    """
    import jax

    fs = remote_filesystem(destination, needed_by="tinax.checkpointing.save_checkpointables")
    _require_empty_prefix(fs, destination)
    if jax.process_count() > 1:
        return False
    claim = _claim_object(destination)
    with tempfile.TemporaryDirectory(prefix="tinax-claim-") as folder:
        content = pathlib.Path(folder) / "claim"
        content.write_text(f"saving {destination}\n", encoding="utf-8")
        try:
            publish_file(fs, content, claim, overwrite=False)
        except FileExistsError:
            raise CheckpointExistsError(
                f"path {str(destination)!r} is the destination of another writer's save in flight (it holds the "
                f"claim {str(claim)!r}; delete that object only if no save is running)"
            ) from None
    try:
        # Again under the claim: a writer may have committed here and dropped its claim since the first look.
        _require_empty_prefix(fs, destination)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(claim.fs_path)
        raise
    return True


def _require_empty_prefix(fs: Any, destination: pathlib.Path) -> None:
    """Refuses a ``gs://`` destination under which any object exists, committed or not."""
    fs.invalidate_cache(remote_of(destination).fs_path)
    if not fs.exists(remote_of(destination).fs_path):
        return
    if has_commit_marker(fs, destination):
        raise exists_error(destination)
    raise CheckpointExistsError(
        f"path {str(destination)!r} holds objects of a save that has not finished (still running, or "
        "interrupted); checkpoints are immutable, so save to a new path or delete those objects first"
    )


def _release_remote(claim: str, destination: pathlib.Path, claimed: bool) -> None:
    """Ends a ``gs://`` save: an uncommitted prefix it left is removed, then its claim object."""
    _release(claim)
    if not claimed:
        return
    fs = remote_filesystem(destination, needed_by="tinax.checkpointing.save_checkpointables")
    # A failed save leaves its objects in place (no temporary folder on a bucket), and they would block the path.
    with contextlib.suppress(Exception):
        if not has_commit_marker(fs, destination):
            remove_remote_folder(fs, destination)
    with contextlib.suppress(FileNotFoundError):
        fs.rm_file(_claim_object(destination).fs_path)
