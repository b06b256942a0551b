"""Saving and loading named checkpointables through Orbax V1, with explicit policies.

Orbax V1 writes a checkpoint into ``<path>.orbax-checkpoint-tmp`` and renames
it to ``<path>`` only after every value and its metadata are on disk, so a
process killed mid-save leaves no folder at ``<path>``. (Orbax 0.12.8 and
later also write a ``commit_success.txt`` marker before the rename; 0.12.1,
which tinax 0.2 pinned, does not, so the marker is not required.) This module
adds what Orbax leaves to the caller: an immutable destination that is never
one of Orbax's temporary names, one save at a time per destination,
background failures that always surface, explicit restore targets, and a
completeness check before any byte is loaded.

Orbax is imported when a function runs, never when this module is imported.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import json
import os
import pathlib
import stat
import sys
import threading
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

import jax
import numpy as np

from tinax._checkpointing._errors import (
    CheckpointExistsError,
    CheckpointKeyError,
    CheckpointNotFoundError,
    NoHandlerError,
    UnsupportedLeafError,
    background_failure,
    uncreatable_destination,
)
from tinax._checkpointing._names import (
    ORBAX_TMP_SUFFIX,
    is_orbax_temporary_name,
    refuse_orbax_temporary_destination,
    require_distinct_on_case_insensitive_systems,
    validate_checkpointable_name,
)
from tinax._checkpointing._quiet import (
    ENSURE_FUTURE_WRAPPER_NEVER_AWAITED,
    retire_abandoned_work,
    take_abandoned_orbax_task_reports,
)
from tinax._checkpointing._settle import current_operation_id, settle_failed_save
from tinax._checkpointing._targets import require_restore_target, require_target_fits
from tinax._core import validation
from tinax._core.jax_compat import is_tracer

if TYPE_CHECKING:
    import orbax.checkpoint.experimental.v1 as ocp

__all__ = ["load_checkpointables", "save_checkpointables"]

# Files every committed Orbax V1 checkpoint holds at its top level. Orbax
# publishes the folder by renaming it only once they and every checkpointable
# are written; Orbax's commit marker (commit_success.txt) is not among them,
# because Orbax 0.12.1 writes none.
_CHECKPOINT_METADATA = "_CHECKPOINT_METADATA"
_ORBAX_INDICATOR = "orbax.checkpoint"
_PYTREE_METADATA = "_METADATA"
_PYTREE_HANDLER_SUFFIX = ".PyTreeHandler"
# Further JSON files Orbax writes into a pytree checkpointable's folder.
_PYTREE_SHARDING = "_sharding"
_ARRAY_METADATAS = "array_metadatas"
_RANDOM_KEY_IMPL = "random_key_impl"
# Orbax's key kinds in a pytree's metadata, and the value types it gives to
# empty containers and None (checked against Orbax's own constants by a test).
_SEQUENCE_KEY = 1
_DICT_KEY = 2
_EMPTY_VALUE_TYPES = frozenset({"None", "Dict", "List", "Tuple", "NamedTuple"})
# Python ints Orbax saves: it stores them as int64, or as uint64 above 2**63 - 1.
_MIN_INT = -(2**63)
_MAX_INT = 2**64 - 1
# NumPy dtype kinds Orbax (TensorStore) saves: bool, integers, floats and
# complex numbers. ml_dtypes' types (bfloat16, float8, int4, ...) have kind
# "V" but a scalar type of their own, which tells them from raw and
# structured void data.
_SAVEABLE_KINDS = frozenset("biufc")
_SAVEABLE_LEAVES = "bool, int, float, str, or a numpy.ndarray or jax.Array of bool or numbers"

# Starts of saves, one at a time, so that the Orbax operation id read right
# after a start is that save's.
_start_lock = threading.Lock()
# Destinations (resolved, case-normalized) whose save has started in this
# process and not yet finished. Orbax would let a second save to the same
# destination delete the first one's temporary folder and both would fail.
_saves_in_flight: set[str] = set()
_saves_in_flight_lock = threading.Lock()


def _orbax() -> Any:
    import orbax.checkpoint.experimental.v1 as orbax_v1

    return orbax_v1


def save_checkpointables(path: str | os.PathLike[str], checkpointables: Mapping[str, Any]) -> ocp.AsyncResponse[None]:
    """Starts one asynchronous save of several named values into one checkpoint.

    Every name becomes a subfolder of ``path`` and is checked by
    :func:`validate_checkpointable_name`; no two names may differ only in
    case. The values are pytrees of ``jax.Array``, ``numpy.ndarray``, Python
    scalars and ``str``, or objects that implement Orbax's stateful
    checkpointable protocol (such as a Grain dataset iterator). Every leaf
    and key is checked before the save starts: arrays must hold bool or
    numbers (ml_dtypes types such as bfloat16 included) and at least one
    element, ints must fit in [-2**63, 2**64 - 1], and strings and keys must
    be encodable as UTF-8. The destination is checked too: its nearest
    existing folder must be writable, and every folder name to create, the
    temporary one included, must fit the file system.

    Device data is copied to the host before this function returns, so the
    caller may update its arrays at once; writing continues in the background.
    The checkpoint appears at ``path`` only when it is complete: until then it
    lives in ``<path>.orbax-checkpoint-tmp``, which a failed save removes
    before its ``result()`` raises, and which a later save to ``path``
    removes if a crash left it behind. For that reason ``path`` itself may not
    be named like such a folder. In a multi-process run every process calls
    this function with the same arguments, in the same order.

    The destination is immutable: an existing ``path`` is refused, and so is
    a second save to a ``path`` whose save is still in flight in this process
    (two spellings of one folder count as one). The claim on ``path`` ends
    when the save finishes or fails, whether or not ``result()`` is called.
    Call ``result()`` before the program exits. A save still in flight at
    exit is finished where Python still starts threads during shutdown (3.11)
    and reported on stderr as lost where it does not (3.12 and later), in
    which case Orbax's own threads may hold the exit for minutes.

    Args:
      path: Folder to create for the checkpoint. Missing parent folders are
        created.
      checkpointables: The values to save, by name. At least one.

    Returns:
      An Orbax ``AsyncResponse``. Its ``result(timeout=None)`` waits for the
      save and returns None. If the save failed it raises a ``RuntimeError``
      that is also of the background error's class (an ``OSError`` for a
      full disk, for example), with that error chained as its cause, once
      every thread of the save has ended and its temporary folder is gone
      (so a failed save never holds the interpreter's exit); it raises
      ``TimeoutError`` if ``timeout`` seconds pass first (the save goes on).
      ``on_complete`` registers a callback for a successful save.

    Raises:
      TypeError: If ``path`` is not a path, ``checkpointables`` is not a
        mapping with ``str`` keys, or a value is something Orbax cannot save,
        such as ``bytes`` or a NumPy array of strings, objects or datetimes
        (that error is also the ``KeyError`` or ``ValueError`` Orbax raised
        for it, which tinax 0.2 let through).
      ValueError: If ``checkpointables`` is empty, a name is not valid, two
        names differ only in case, a value is None or holds nothing to save,
        a leaf holds a value Orbax cannot store (an int outside 64 bits, a
        string or key with a lone surrogate, an empty array), ``path`` is
        named like an Orbax temporary folder (it contains
        ``.orbax-checkpoint-tmp``), or Orbax refuses to start the save (its
        error is the cause).
      OSError: If ``path`` cannot be created: its way passes through a
        regular file, a broken link or a symbolic link loop, its nearest
        existing folder is not writable, or a folder name is too long. The
        error is of the class creating the folder would raise
        (``NotADirectoryError``, ``PermissionError``, ...), carries its
        ``errno``, and is also a ``ValueError``.
      FileExistsError: If ``path`` exists, or a save to it is still in flight
        in this process. It is also a ``ValueError``.

    Examples:
      >>> import pathlib
      >>> import jax.numpy as jnp
      >>> from tinax.checkpointing import save_checkpointables
      >>> response = save_checkpointables("run/step-1", {"params": {"w": jnp.ones(3)}})
      >>> response.result()  # returns once every file is written and the checkpoint committed
      >>> pathlib.Path("run/step-1").is_dir()
      True
    """
    # Orbax accepts only absolute paths; a relative one means "from here", as it would for open().
    destination = validation.require_path(path, "path").absolute()
    refuse_orbax_temporary_destination(destination)
    named = validation.require_str_mapping(checkpointables, "checkpointables")
    if not named:
        validation.fail_value("checkpointables", "a mapping with at least one checkpointable", named)
    for name in named:
        validate_checkpointable_name(name)
    require_distinct_on_case_insensitive_systems(named, "checkpointables")
    for name, value in named.items():
        _require_saveable_leaves(name, value)
    orbax_v1 = _orbax()

    claim = os.path.normcase(os.path.realpath(destination))
    with _saves_in_flight_lock:
        if claim in _saves_in_flight:
            raise CheckpointExistsError(
                f"path {str(destination)!r} is the destination of a save that is still in flight in this process; "
                "wait for its result() before saving there again"
            )
        _saves_in_flight.add(claim)
    temporary = destination.with_name(destination.name + ORBAX_TMP_SUFFIX)
    try:
        _require_absent(destination)
        _require_creatable(destination)
        with _start_lock:
            before = current_operation_id()
            try:
                response = orbax_v1.save_checkpointables_async(destination, dict(named))
            except Exception as error:
                # Whatever Orbax had begun for the save ends here, folder included.
                started = current_operation_id()
                settle_failed_save(started if started != before else None, temporary)
                if os.path.lexists(destination):
                    raise _exists_error(destination) from error
                kind = UnsupportedLeafError if isinstance(error, TypeError) else ValueError
                raise kind(
                    f"Orbax refused to save checkpointables {sorted(named)} to {str(destination)!r}: "
                    f"{_root_message(error)}"
                ) from error
            operation_id = current_operation_id()
    except BaseException:
        _release(claim)
        raise
    guarded: ocp.AsyncResponse[None] = _response_class()(
        response, destination, sorted(named), lambda: _release(claim), operation_id
    )
    return guarded


def load_checkpointables(path: str | os.PathLike[str], targets: Mapping[str, Any]) -> dict[str, Any]:
    """Loads named values from a complete checkpoint into explicit targets.

    Every name to load needs a restore target that says where each array goes
    (:func:`abstract_restore_target` builds one from live state). Arrays load
    with the target's sharding, which may differ from the sharding they were
    saved with: a ``jax.ShapeDtypeStruct`` with a sharding gives a
    ``jax.Array`` placed that way, and a ``numpy.ndarray`` target (or the
    class ``numpy.ndarray``) gives a host NumPy array. A target's dtype is the
    dtype loaded (Orbax converts). Objects implementing Orbax's stateful
    checkpointable protocol, such as Grain iterators, are restored in place.
    Every array target, of whatever kind, must have the shape that was saved:
    this is checked against the checkpoint's metadata before anything loads.

    Names left out of ``targets`` are not loaded, so a subset of a checkpoint
    can be read (for example the model without the optimizer). Before loading,
    the folder is checked to be a complete checkpoint: not an Orbax temporary
    folder, with its metadata and every checkpointable the metadata lists.
    Orbax's ``commit_success.txt`` marker is not required: Orbax 0.12.1, which
    tinax 0.2 used, commits by renaming the folder and writes no marker. In a
    multi-process run every process calls this function with the same
    arguments, in the same order.

    Args:
      path: The checkpoint folder written by :func:`save_checkpointables`.
      targets: A restore target per name to load. At least one.

    Returns:
      A dict of the loaded values, by name.

    Raises:
      TypeError: If ``path`` is not a path, ``targets`` is not a mapping with
        ``str`` keys, a target leaf is a traced value or of a kind no restore
        target takes (``object()``, for one), or Orbax rejects a target's
        kind (its error is the cause). The last two are also a ``KeyError``,
        as Orbax's error was.
      ValueError: If ``targets`` is empty, a target is None or holds an
        abstract array without a sharding, the folder is not a complete
        checkpoint (an unfinished save, a missing metadata file or
        checkpointable), a name was not saved (the message lists the saved
        names), an array target's shape or rank differs from the saved one,
        or the values do not fit the targets otherwise (Orbax's error is the
        cause). A missing checkpointable, an unsaved name and values that do
        not fit are also ``KeyError``, as Orbax's errors were.
      FileNotFoundError: If nothing exists at ``path``. It is also a
        ``ValueError``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from tinax.checkpointing import abstract_restore_target, load_checkpointables, save_checkpointables
      >>> params = {"w": jnp.arange(3.0)}
      >>> save_checkpointables("run/step-1", {"params": params}).result()
      >>> restored = load_checkpointables("run/step-1", {"params": abstract_restore_target(params)})
      >>> restored["params"]["w"].tolist()
      [0.0, 1.0, 2.0]
    """
    source = validation.require_path(path, "path").absolute()
    named = validation.require_str_mapping(targets, "targets")
    if not named:
        validation.fail_value("targets", "a mapping with a restore target for at least one checkpointable", named)
    for name, target in named.items():
        require_restore_target(target, f"targets[{name!r}]")
    saved = _require_complete_checkpoint(source)
    unknown = sorted(name for name in named if name not in saved)
    if unknown:
        raise CheckpointKeyError(
            f"targets names checkpointables {unknown} that {str(source)!r} does not hold; it holds {sorted(saved)}"
        )
    orbax_v1 = _orbax()
    take_abandoned_orbax_task_reports()
    # Orbax's TypeError means that it rejected a target's kind only where it read the metadata
    # of every pytree to load; otherwise it stumbled over damaged metadata or iterator state.
    metadata_read = True
    for name, target in named.items():
        stored = _stored_tree(orbax_v1, source, name)
        if stored is not None:
            require_target_fits(target, stored, f"targets[{name!r}]", str(source))
        else:
            metadata_read = False
    try:
        loaded = orbax_v1.load_checkpointables(source, dict(named))
    except Exception as error:
        retire_abandoned_work(error)
        rejected_kind = metadata_read and isinstance(_root_cause(error), TypeError)
        kind = NoHandlerError if rejected_kind else CheckpointKeyError
        raise kind(
            f"could not load checkpointables {sorted(named)} from {str(source)!r} into the given targets: "
            f"{_root_message(error)}"
        ) from error
    return dict(loaded)


class _GuardedSaveResponse:
    """Waits for an Orbax save in a thread of its own, so its end is never missed.

    The thread ends the claim on the destination as soon as Orbax finishes,
    successfully or not, even if nobody ever calls :meth:`result`.
    """

    def __init__(
        self,
        inner: Any,
        destination: pathlib.Path,
        names: list[str],
        release: Callable[[], None],
        operation_id: str | None = None,
    ) -> None:
        self._inner = inner
        self.destination = destination
        self._operation_id = operation_id
        self._names = names
        self._release = release
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[None], None]] = []
        with _saves_in_flight_lock:
            _unfinished_responses.add(self)
        self._watcher = threading.Thread(target=self._watch, name=f"tinax-save:{destination.name}", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        try:
            self._inner.result()
        except BaseException as error:  # Kept for result(); a save failure must never be swallowed.
            self._error = error
            # Before result() may raise: no Orbax thread of the save, and no temporary folder, outlives it.
            # Settling is best effort; the save's own failure is what result() reports.
            with contextlib.suppress(Exception):
                settle_failed_save(
                    self._operation_id, self.destination.with_name(self.destination.name + ORBAX_TMP_SUFFIX)
                )
        finally:
            self._release()
            with _saves_in_flight_lock:
                _unfinished_responses.discard(self)
            with self._lock:
                self._done.set()
                callbacks, self._callbacks = self._callbacks, []
        if self._error is None:
            for callback in callbacks:
                callback(None)

    def result(self, timeout: float | None = None) -> None:
        """Waits for the save to finish.

        Args:
          timeout: Seconds to wait, or None to wait as long as it takes.

        Raises:
          TimeoutError: If ``timeout`` passes first; the save continues.
          RuntimeError: If the save failed. The original error is the cause,
            and the error raised is also an instance of its class.
        """
        if not self._done.wait(timeout):
            raise TimeoutError(
                f"saving checkpointables to {str(self.destination)!r} did not finish within {timeout} s; "
                "it continues in the background"
            )
        if self._error is not None:
            outcome = (
                "the destination exists, but the save did not confirm that every process finished"
                if os.path.lexists(self.destination)
                else "nothing was committed at the destination"
            )
            raise background_failure(
                f"saving checkpointables {self._names} to {str(self.destination)!r} failed in the background "
                f"({_root_message(self._error)}); {outcome}",
                self._error,
            )

    def on_complete(self, callback: Callable[[None], None]) -> None:
        """Calls ``callback(None)`` once the save has succeeded.

        Called at once if it already has; never called if the save fails.
        """
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        if self._error is None:
            callback(None)


_response_classes: list[type[_GuardedSaveResponse]] = []
_response_class_lock = threading.Lock()
_unfinished_responses: set[_GuardedSaveResponse] = set()


def _response_class() -> type[_GuardedSaveResponse]:
    # The response must be an Orbax AsyncResponse, but Orbax may only be
    # imported when a save runs: the subclass is made on first use.
    with _response_class_lock:
        if not _response_classes:
            orbax_v1 = _orbax()
            _response_classes.append(type("SaveResponse", (_GuardedSaveResponse, orbax_v1.AsyncResponse), {}))
            _wait_for_saves_at_exit()
        return _response_classes[0]


def _wait_for_saves_at_exit() -> None:
    """Makes interpreter shutdown finish, or at least report, the saves still in flight.

    Orbax writes through ``concurrent.futures`` thread pools, which stop
    taking work in the first step of shutdown, before non-daemon threads are
    joined and before ``atexit`` runs. Only a hook of that same first step,
    registered after the pools' own (hooks run last-registered first), runs
    while Orbax can still finish. Orbax has been imported at this point, so
    its pools registered theirs already. Where Python no longer starts
    threads at shutdown (3.12 and later), Orbax cannot finish either: the
    hook then names the saves that are lost instead of waiting for them.
    """
    register = getattr(threading, "_register_atexit", None)
    if register is None:  # pragma: no cover - every supported Python has it
        return

    def finish_saves() -> None:
        with _saves_in_flight_lock:
            unfinished = list(_unfinished_responses)
        if not unfinished:
            return
        if not _threads_can_start():
            for response in unfinished:
                print(
                    f"tinax.checkpointing: the save to {str(response.destination)!r} was still in flight when the "
                    "interpreter exited and cannot finish, because Python starts no threads during shutdown; "
                    "nothing is committed there. Call result() on the response of save_checkpointables before "
                    "exiting.",
                    file=sys.stderr,
                    flush=True,
                )
            return
        for response in unfinished:
            try:
                response.result()
            except Exception as error:
                print(f"tinax.checkpointing: {error}", file=sys.stderr, flush=True)

    register(finish_saves)


def _threads_can_start() -> bool:
    try:
        probe = threading.Thread(target=int)
        probe.start()
    except RuntimeError:
        return False
    probe.join()
    return True


def _release(claim: str) -> None:
    with _saves_in_flight_lock:
        _saves_in_flight.discard(claim)


def _exists_error(destination: pathlib.Path) -> CheckpointExistsError:
    return CheckpointExistsError(
        f"path {str(destination)!r} already exists; checkpoints are immutable, so save to a new path "
        "(or delete the old checkpoint first)"
    )


def _require_absent(destination: pathlib.Path) -> None:
    if os.path.lexists(destination):
        raise _exists_error(destination)


def _require_creatable(destination: pathlib.Path) -> None:
    """Refuses, before anything starts, a destination whose folder cannot be created.

    Walks up to the nearest existing ancestor, which must be a searchable,
    writable folder, and checks that every folder still to create (the
    temporary one included) has a name the file system takes. A path through
    a regular file, a symbolic link loop or a broken link fails here, not in
    a background thread.
    """
    missing: list[str] = [destination.name + ORBAX_TMP_SUFFIX]
    ancestor = destination.parent
    while True:
        try:
            status = os.stat(ancestor)
        except FileNotFoundError as error:
            if os.path.islink(ancestor):
                _fail_uncreatable(destination, f"{str(ancestor)!r} is a broken symbolic link", error)
            if ancestor.parent == ancestor:  # pragma: no cover - the root always exists
                _fail_uncreatable(destination, "no folder on it exists", error)
            missing.append(ancestor.name)
            ancestor = ancestor.parent
            continue
        except OSError as error:
            _fail_uncreatable(destination, f"{str(ancestor)!r} cannot be reached ({error.strerror})", error)
        except ValueError as error:  # An embedded NUL, for one.
            raise ValueError(f"path {str(destination)!r} cannot be created: {error}") from error
        break
    if not stat.S_ISDIR(status.st_mode):
        _fail_uncreatable(
            destination,
            f"{str(ancestor)!r} is not a folder",
            NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(ancestor)),
        )
    if not os.access(ancestor, os.W_OK | os.X_OK):
        _fail_uncreatable(
            destination,
            f"folder {str(ancestor)!r} is not writable",
            PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(ancestor)),
        )
    try:
        longest = os.pathconf(ancestor, "PC_NAME_MAX")
    except (OSError, ValueError):  # pragma: no cover - every POSIX file system answers
        longest = 255
    for name in missing:
        if len(os.fsencode(name)) > longest:
            _fail_uncreatable(
                destination,
                f"the folder name {name!r} is longer than the {longest} bytes the file system allows",
                OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), name),
            )


def _fail_uncreatable(destination: pathlib.Path, reason: str, error: OSError) -> NoReturn:
    raise uncreatable_destination(
        f"path {str(destination)!r} cannot be created as a checkpoint folder: {reason}", error
    ) from error


def _require_saveable_leaves(name: str, value: object) -> None:
    """Checks every leaf and key of one checkpointable before anything is written.

    Python scalars, strings and arrays are judged here, by kind (TypeError)
    and value (ValueError); any other leaf is put to Orbax's handler lookup.
    """
    argument = f"checkpointables[{name!r}]"
    flat = jax.tree_util.tree_flatten_with_path(value)[0]
    if not flat:
        validation.fail_value(argument, "a value holding something to save", value)
    ask_orbax = False
    for path, leaf in flat:
        where = argument + jax.tree_util.keystr(path)
        for entry in path:
            key = entry.key if isinstance(entry, jax.tree_util.DictKey) else getattr(entry, "name", None)
            if isinstance(key, str) and not _is_utf8(key):
                validation.fail_value(f"the keys of {argument}", "encodable as UTF-8 (no lone surrogates)", key)
        kind = type(leaf)
        if kind is bool or kind is float:
            continue
        if kind is int:
            if not _MIN_INT <= leaf <= _MAX_INT:
                validation.fail_value(where, "an int in [-2**63, 2**64 - 1], the range Orbax stores", leaf)
        elif kind is str:
            if not _is_utf8(leaf):
                validation.fail_value(where, "a str encodable as UTF-8 (no lone surrogates)", leaf)
        elif isinstance(leaf, (bytes, bytearray, memoryview)):
            raise UnsupportedLeafError(validation.expectation_message(where, _SAVEABLE_LEAVES, leaf))
        elif isinstance(leaf, np.ndarray) or (isinstance(leaf, jax.Array) and not is_tracer(leaf)):
            _require_saveable_array(where, leaf)
        else:
            ask_orbax = True
    if ask_orbax:
        _require_saveable(name, value)


def _require_saveable_array(where: str, array: Any) -> None:
    dtype = array.dtype
    if isinstance(array, np.ndarray) and not (
        dtype.kind in _SAVEABLE_KINDS or (dtype.kind == "V" and dtype.type is not np.void)
    ):
        raise UnsupportedLeafError(
            validation.expectation_message(where, f"{_SAVEABLE_LEAVES} (not dtype {dtype})", array)
        )
    if array.size == 0:
        validation.fail_value(where, "an array with at least one element (Orbax saves no empty arrays)", array)


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _require_saveable(name: str, value: object) -> None:
    """Asks Orbax, before anything is written, whether it has a handler for ``value``.

    Orbax resolves handlers only after it has scheduled the folder creation,
    and a failure then leaves that work dangling. The lookup builds every
    registered handler (milliseconds), so it only runs for values that hold
    something other than arrays, Python scalars and strings. It uses Orbax
    internals; if they move, Orbax's own check still applies.
    """
    try:
        from orbax.checkpoint.experimental.v1._src.context import context as orbax_context
        from orbax.checkpoint.experimental.v1._src.handlers import registration
    except ImportError:  # pragma: no cover - depends on the Orbax release
        return
    registry = orbax_context.get_context().checkpointables_options.registry
    try:
        registration.resolve_handler_for_save(registry, value, name=name)
    except (LookupError, ValueError) as error:
        # Keep the class of Orbax's error (0.2 let it through): a KeyError when no handler matched.
        kind = NoHandlerError if isinstance(error, LookupError) else UnsupportedLeafError
        raise kind(
            validation.expectation_message(
                f"checkpointables[{name!r}]",
                "a pytree of jax.Array, numpy.ndarray, Python scalars and str, or an Orbax stateful checkpointable",
                value,
            )
        ) from error


def _stored_tree(orbax_v1: Any, source: pathlib.Path, name: str) -> Any:
    """The metadata tree Orbax keeps of a saved pytree, or None where there is none to read.

    A checkpointable that is no pytree (a Grain iterator, for one), or
    metadata Orbax cannot read, gives None: the load itself then reports
    whatever is wrong.

    Where array data is damaged, Orbax logs that it cannot read an array's
    metadata and carries on; on Python 3.12.1 the read it gave up leaves a
    wrapper coroutine that ``asyncio.ensure_future`` never closes (a CPython
    bug, fixed in later 3.12 releases). Its warning says nothing the load
    will not report, so it is not shown.
    """
    if not (source / name / _PYTREE_METADATA).is_file():
        return None
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ENSURE_FUTURE_WRAPPER_NEVER_AWAITED, RuntimeWarning)
        try:
            stored = orbax_v1.metadata(source, checkpointable_name=name).metadata
        except Exception as error:
            retire_abandoned_work(error)
            return None
        if stored is None:
            # Orbax gave up reading (it logged why): collect the reads it abandoned while the filter holds.
            gc.collect()
    return stored


def _require_complete_checkpoint(source: pathlib.Path) -> set[str]:
    """Checks that ``source`` is a committed checkpoint and returns its names."""
    if not os.path.lexists(source):
        leftover = source.with_name(source.name + ORBAX_TMP_SUFFIX)
        hint = (
            f"; {str(leftover)!r} holds a save that has not finished (still running, or interrupted)"
            if leftover.exists()
            else ""
        )
        raise CheckpointNotFoundError(
            f"path must name an existing checkpoint, got {str(source)!r} which does not exist{hint}"
        )
    if not source.is_dir():
        raise ValueError(f"path must name a checkpoint folder, got {str(source)!r} which is not a folder")
    if is_orbax_temporary_name(source.name):
        raise ValueError(
            f"path {str(source)!r} is an incomplete checkpoint: it is the temporary folder of a save that has not "
            "finished (still running, or interrupted)"
        )
    missing = [name for name in (_CHECKPOINT_METADATA, _ORBAX_INDICATOR) if not (source / name).is_file()]
    if missing:
        raise ValueError(
            f"path {str(source)!r} is an incomplete checkpoint: it lacks {missing}, so it is no Orbax checkpoint "
            "or the folder was damaged"
        )
    metadata = _read_json_object(source, pathlib.PurePath(_CHECKPOINT_METADATA))
    handlers = metadata.get("item_handlers") if isinstance(metadata, dict) else None
    if not isinstance(handlers, dict) or not all(isinstance(name, str) for name in handlers):
        raise ValueError(
            f"path {str(source)!r} is an incomplete checkpoint: its {_CHECKPOINT_METADATA} does not list the "
            "checkpointables it holds"
        )
    for name, handler in handlers.items():
        folder = source / name
        if name in ("", ".", "..") or "/" in name or os.sep in name or "\0" in name:
            raise ValueError(
                f"path {str(source)!r} is an incomplete checkpoint: its {_CHECKPOINT_METADATA} lists {name!r}, "
                "which cannot name a checkpointable folder, so the file was damaged"
            )
        try:
            present = folder.is_dir()
        except OSError as error:  # a name the file system refuses (too long, for one)
            raise ValueError(
                f"path {str(source)!r} is an incomplete checkpoint: its {_CHECKPOINT_METADATA} lists {name!r}, "
                f"which this file system cannot look up ({error.strerror}), so the file was damaged"
            ) from error
        if not present:
            # Orbax reports a checkpointable it cannot find with a KeyError, which 0.2 let through.
            raise CheckpointKeyError(
                f"path {str(source)!r} is an incomplete checkpoint: checkpointable {name!r}, listed in its metadata, "
                "is missing"
            )
        is_pytree = isinstance(handler, str) and handler.endswith(_PYTREE_HANDLER_SUFFIX)
        if is_pytree and not (folder / _PYTREE_METADATA).is_file():
            raise ValueError(
                f"path {str(source)!r} is an incomplete checkpoint: checkpointable {name!r} lacks its "
                f"{_PYTREE_METADATA} file"
            )
        for relative in _json_files_of(source, name):
            content = _read_json_object(source, relative)
            if relative.parent.name == _ARRAY_METADATAS:
                _require_array_metadatas(source, relative, content)
            elif is_pytree and relative.name == _PYTREE_METADATA:
                _require_tree_metadata(source, relative, content)
    return set(handlers)


def _require_array_metadatas(source: pathlib.Path, relative: pathlib.PurePath, content: dict[str, Any]) -> None:
    """Checks a per-process array metadata file the way Orbax will use it, since Orbax reads it unchecked.

    Orbax turns every entry into its array metadata record by indexing
    ``param_name``, ``write_shape`` and ``chunk_shape``; a missing or mistyped
    field fails inside a read it has already started, so it is refused here.
    """
    entries = content.get("array_metadatas", [])
    valid = isinstance(entries, list) and all(
        _is_array_metadata(entry.get("array_metadata")) for entry in entries if isinstance(entry, dict)
    )
    if not valid or not all(isinstance(entry, dict) for entry in entries):
        raise ValueError(
            f"path {str(source)!r} is an incomplete checkpoint: its metadata file {relative.as_posix()!r} cannot be "
            "used: it does not hold a list of array metadata objects, each with a string param_name, integer "
            "write_shape and chunk_shape lists, and string key implementations"
        )


def _require_tree_metadata(source: pathlib.Path, relative: pathlib.PurePath, content: dict[str, Any]) -> None:
    """Checks a pytree's ``_METADATA`` entries the way Orbax will use them, since Orbax reads them unchecked.

    Each entry's key path must spell its nested keys, and its value type must
    be one Orbax can restore. Orbax discovers either kind of damage only
    after it has started reading the other arrays, and abandons those reads.
    """
    import orbax.checkpoint as ocp

    tree = content.get("tree_metadata")
    problem = None if isinstance(tree, dict) else "it has no tree_metadata object"
    for flag in ("use_ocdbt", "use_zarr3", "store_array_data_equal_to_fill_value"):
        if content.get(flag) is not None and not isinstance(content[flag], bool):
            problem = f"its {flag} is {content[flag]!r:.50}, not a bool"
    for keypath, entry in tree.items() if isinstance(tree, dict) else ():
        keys = _nested_keys(entry.get("key_metadata") if isinstance(entry, dict) else None)
        if keys is None or str(tuple(keys)) != keypath:
            problem = f"the key metadata of entry {keypath!r} does not spell its key path"
            break
        value = entry.get("value_metadata")
        value = value if isinstance(value, dict) else {}
        value_type = value.get("value_type")
        known = isinstance(value_type, str) and (
            value_type in _EMPTY_VALUE_TYPES or ocp.type_handlers.has_type_handler(value_type)
        )
        if not known or not isinstance(value.get("skip_deserialize", False), bool):
            problem = f"entry {keypath!r} has value metadata Orbax cannot restore ({value!r:.200})"
            break
    if problem is not None:
        raise ValueError(
            f"path {str(source)!r} is an incomplete checkpoint: its metadata file {relative.as_posix()!r} cannot be "
            f"used: {problem}"
        )


def _nested_keys(key_metadata: object) -> list[str] | None:
    """The keys a pytree metadata entry lists, or None where they are malformed."""
    if not isinstance(key_metadata, list):
        return None
    keys = []
    for level in key_metadata:
        if not isinstance(level, dict) or not isinstance(level.get("key"), str):
            return None
        kind = level.get("key_type")
        if type(kind) is not int or kind not in (_SEQUENCE_KEY, _DICT_KEY):
            return None
        if kind == _SEQUENCE_KEY and not (level["key"].isascii() and level["key"].isdigit()):
            return None
        keys.append(level["key"])
    return keys


def _is_array_metadata(array: object) -> bool:
    if not isinstance(array, dict) or not isinstance(array.get("param_name"), str):
        return False
    for key in ("write_shape", "chunk_shape"):
        shape = array.get(key)
        if not isinstance(shape, list) or not all(type(size) is int and 0 <= size < 2**63 for size in shape):
            return False
    extra = array.get("ext_metadata")
    return extra is None or (isinstance(extra, dict) and isinstance(extra.get(_RANDOM_KEY_IMPL, ""), str))


def _json_files_of(source: pathlib.Path, name: str) -> list[pathlib.PurePath]:
    """The JSON files Orbax and Grain read from one checkpointable, relative to ``source``.

    These are the pytree metadata, the sharding and per-process array
    metadata files, and the ``.json`` state files of stateful checkpointables
    (a Grain iterator's ``process_<i>-of-<n>.json``). Array data is not JSON
    and is left to Orbax.
    """
    folder = source / name
    found = [folder / _PYTREE_METADATA, folder / _PYTREE_SHARDING]
    with contextlib.suppress(OSError):
        found.extend(entry for entry in folder.iterdir() if entry.name.endswith(".json"))
    with contextlib.suppress(OSError):
        found.extend((folder / _ARRAY_METADATAS).iterdir())
    return [entry.relative_to(source) for entry in found if entry.is_file()]


def _read_json_object(source: pathlib.Path, relative: pathlib.PurePath) -> dict[str, Any]:
    """Reads one JSON metadata file of the checkpoint at ``source``, refusing anything but a JSON object.

    Every way such a file can be damaged (unreadable, not UTF-8, not JSON,
    nested deeper than the parser recurses, not an object at the top) gives
    the same ``ValueError``, naming the file, with the parser's error as its
    cause; nothing else escapes.

    Args:
      source: The checkpoint folder.
      relative: The file, relative to ``source``.

    Returns:
      The file's top-level JSON object.

    Raises:
      ValueError: If the file cannot be read or holds no JSON object.
    """
    file = source / relative
    reason: str
    cause: BaseException | None = None
    try:
        decoded = json.loads(file.read_bytes().decode("utf-8"))
    except RecursionError as error:
        reason, cause = "its JSON is nested deeper than can be parsed", error
    except UnicodeDecodeError as error:
        reason, cause = f"it is not UTF-8 text ({error.reason} at byte {error.start})", error
    except (OSError, ValueError) as error:
        reason, cause = f"it is not readable JSON ({type(error).__name__}: {error})", error
    else:
        if isinstance(decoded, dict):
            return decoded
        reason = f"it holds a JSON {type(decoded).__name__}, not an object"
    raise ValueError(
        f"path {str(source)!r} is an incomplete checkpoint: its metadata file {relative.as_posix()!r} cannot be used: "
        f"{reason}"
    ) from cause


def _root_cause(error: BaseException) -> BaseException:
    seen = {id(error)}
    while error.__cause__ is not None and id(error.__cause__) not in seen:
        error = error.__cause__
        seen.add(id(error))
    return error


def _root_message(error: BaseException) -> str:
    root = _root_cause(error)
    text = str(root).strip() or "no message"
    return f"{type(root).__name__}: {text}"
