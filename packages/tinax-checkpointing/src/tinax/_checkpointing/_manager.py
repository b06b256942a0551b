"""A step manager over a root folder: committed steps, retention, one save at a time, preemption.

How steps commit, how retention deletes, the one-writer lock, ``gs://`` roots and the multi-process
agreement are described in docs/guide/checkpointing.md, section "How the manager commits and keeps steps".
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import pathlib
import posixpath
import shutil
import signal
import socket
import stat
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal

from tinax._checkpointing._compat02 import CheckpointExistsError, CheckpointNotFoundError, uncreatable_destination
from tinax._checkpointing._layout import require_complete_checkpoint
from tinax._checkpointing._locations import (
    CLAIM_SUFFIX,
    absolute_location,
    folder_nbytes,
    is_remote,
    remote_filesystem,
    remote_of,
    remove_remote_folder,
)
from tinax._checkpointing._names import ORBAX_TMP_SUFFIX, is_orbax_temporary_name
from tinax._checkpointing._training import (
    MAX_STEP,
    TrainingCheckpoint,
    TrainingCheckpointNames,
    load_training_checkpoint,
    require_iterator_states,
    require_names,
    require_step,
    save_training_checkpoint,
)
from tinax._core import validation
from tinax._core.files import atomic_write
from tinax._core.logs import Operation, get_logger
from tinax._core.storage import publish_file, remote_write

if TYPE_CHECKING:
    import orbax.checkpoint.experimental.v1 as ocp
    from grain import DatasetIterator

if sys.platform != "win32":
    import fcntl

__all__ = ["CheckpointScan", "SaveInFlightError", "StepDisagreementError", "TrainingCheckpointManager", "scan_root"]

# The caller-supplied metric of each step, kept next to the step folders (never
# inside a checkpoint, whose format stays save_training_checkpoint's).
METRICS_FILE = "tinax-step-metrics.json"
# Process 0's advisory lock file while its manager writes; empty, and never deleted
# (deleting a lock file races with the next process that opens it).
LOCK_FILE = "tinax-manager.lock"
# A step being deleted is renamed to this first, so scans take it for an unfinished save.
_DELETING_SUFFIX = ORBAX_TMP_SUFFIX + "-tinax-deleting"
_SAVE_IN_FLIGHT_CHOICES = ("wait", "refuse")
_BEST_MODES = ("min", "max")

_logger = get_logger("checkpointing")


class SaveInFlightError(RuntimeError):
    """A save or cleanup was refused because a save into the root has not finished.

    Either the manager's own previous save (with ``save_in_flight="refuse"``), or the
    save or retention of another manager writing into the same root.
    """


class StepDisagreementError(RuntimeError):
    """The processes of a multi-process run see different committed steps under the root."""


@dataclasses.dataclass(frozen=True)
class CheckpointScan:
    """What a scan of the root folder found.

    Attributes:
      committed: The steps whose folder is a complete checkpoint, ascending.
      torn: Step-named entries that are not complete checkpoints (damaged,
        half-deleted, missing an iterator state file, or a file).
      temporary: Unfinished saves: names containing ``.orbax-checkpoint-tmp``.
      unrelated: Every other name, never touched; the manager's own files are not listed.
      removed: The torn and temporary entries removed with ``cleanup=True``, else empty.
    """

    committed: tuple[int, ...]
    torn: tuple[pathlib.Path, ...]
    temporary: tuple[pathlib.Path, ...]
    unrelated: tuple[pathlib.Path, ...]
    removed: tuple[pathlib.Path, ...]


class TrainingCheckpointManager:
    """Saves training checkpoints into ``<root>/<step>`` on a schedule and keeps what a policy says.

    Each step is one :func:`save_training_checkpoint` checkpoint, committed once it
    passes the completeness check of :func:`load_checkpointables` and its iterator
    part holds every saving process's state file. After each commit, retention
    keeps the newest ``keep_last`` steps, the steps divisible by ``keep_every`` and
    the ``keep_best`` best by metric, and deletes the other older steps. Every
    process constructs the manager alike and calls its methods in the same order;
    only process 0 deletes. While a save is in flight, saves and cleanups of other
    managers on the root are refused; reading is always allowed. A ``gs://`` root
    works too. The checkpointing user guide's "How the manager commits and keeps
    steps" section gives the rules.

    Args:
      root: The folder holding one subfolder per step, or a ``gs://`` URL.
      save_interval_steps: :meth:`should_save` answers True for steps divisible by this.
      keep_last: How many of the newest committed steps to keep, at least 1.
      keep_every: Also keep every step divisible by this; None keeps none such.
      keep_best: Also keep this many steps with the best metric; None keeps none for their metric.
      best_mode: ``"min"`` or ``"max"``: whether a lower or higher metric is
        better. Given exactly when ``keep_best`` is.
      save_in_flight: What :meth:`save` does while the previous save is still
        written: ``"wait"``, or ``"refuse"`` with :class:`SaveInFlightError`.
      create: Whether to create ``root`` (and missing parents) when it does not exist.
      names: The part names for :func:`save_training_checkpoint` and
        :func:`load_training_checkpoint`; their defaults when None.

    Raises:
      TypeError: If an argument is of the wrong kind (a bool for a count included).
      ValueError: If a count is not positive, ``best_mode`` or ``save_in_flight``
        is not an allowed value, ``best_mode`` and ``keep_best`` are not given
        together, ``root`` exists but is not a folder, ``root`` is an ``s3://`` URL
        (google/orbax#359), or ``create`` is True and ``root`` cannot be created
        (then also the file system's ``OSError``).
      FileNotFoundError: If ``root`` does not exist and ``create`` is False; also a ``ValueError``.
      ImportError: If ``root`` is a ``gs://`` URL and gcsfs is not installed
        (``pip install "tinax-checkpointing[gcs]"``).

    Examples:
      >>> from tinax.checkpointing import TrainingCheckpointManager
      >>> manager = TrainingCheckpointManager(
      ...     "run/steps", save_interval_steps=1000, keep_last=3, keep_every=None, keep_best=None,
      ...     best_mode=None, save_in_flight="wait", create=True,
      ... )
      >>> manager.should_save(2000), manager.latest_committed_step()  # a new run has nothing to resume
      (True, None)
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        save_interval_steps: int,
        keep_last: int,
        keep_every: int | None,
        keep_best: int | None,
        best_mode: Literal["min", "max"] | None,
        save_in_flight: Literal["wait", "refuse"],
        create: bool,
        names: TrainingCheckpointNames | None = None,
    ) -> None:
        folder = absolute_location(root, "root", needed_by="tinax.checkpointing.TrainingCheckpointManager")
        self._interval = validation.require_positive_int(save_interval_steps, "save_interval_steps")
        self._keep_last = validation.require_positive_int(keep_last, "keep_last")
        self._keep_every = validation.require_optional_positive_int(keep_every, "keep_every")
        self._keep_best = validation.require_optional_positive_int(keep_best, "keep_best")
        if best_mode is not None:
            validation.require_str(best_mode, "best_mode")
            validation.require_one_of(best_mode, "best_mode", _BEST_MODES)
        if (best_mode is None) != (self._keep_best is None):
            validation.fail_value(
                "best_mode", "'min' or 'max' exactly when keep_best is given (None when keep_best is None)", best_mode
            )
        self._best_mode = best_mode
        validation.require_str(save_in_flight, "save_in_flight")
        validation.require_one_of(save_in_flight, "save_in_flight", _SAVE_IN_FLIGHT_CHOICES)
        self._wait_for_previous_save = save_in_flight == "wait"
        should_create = validation.require_bool(create, "create")
        self._names = require_names(names)
        if is_remote(folder):
            _require_remote_root(folder, create=should_create)
        elif not os.path.lexists(folder):
            if not should_create:
                raise CheckpointNotFoundError(
                    f"root must name an existing folder when create=False, got {str(folder)!r} which does not exist"
                )
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise uncreatable_destination(
                    f"root {str(folder)!r} cannot be created as a folder: {error.strerror or error}", error
                ) from error
        elif not folder.is_dir():
            validation.fail_value("root", "a folder", str(folder))
        self._root = folder
        # The newest step saved or being saved by this manager; should_save refuses steps up to it.
        self._newest = -1
        self._in_flight: tuple[int, ocp.AsyncResponse[None]] | None = None
        # Set by the SIGTERM handler; read by should_save.
        self._signal_received = False
        self._preemption_requested = False
        self._guard_active = False
        # True while a guard is active in a multi-process run: should_save then exchanges the flag.
        self._exchange_preemption = False
        # Step folders already found complete, by name, with the signature of their whole tree then
        # (see _step_signature): a committed checkpoint is checked again only once something in it changed.
        self._complete: dict[str, bytes] = {}
        # Process 0's root lock from the start of a save until its retention has run; None otherwise.
        self._lock: _RootLock | _RemoteRootLock | None = None

    @property
    def root(self) -> pathlib.Path:
        """The absolute root folder."""
        return self._root

    @property
    def preemption_requested(self) -> bool:
        """Whether a SIGTERM arrived under :meth:`preemption_guard` and :meth:`should_save` has seen it.

        In a multi-process run this turns True on every process at the same
        :meth:`should_save` call; the loop saves as told, then stops.
        """
        return self._preemption_requested

    @property
    def save_in_flight(self) -> bool:
        """Whether the manager's last save is still being written."""
        return self._in_flight is not None and not _finished(self._in_flight[1])

    # ------------------------------------------------------------------
    # Committed steps.

    def scan(self, *, cleanup: bool) -> CheckpointScan:
        """Lists what is under the root, agreed by every process, and optionally removes leftovers.

        With ``cleanup=True``, process 0 removes torn and temporary entries after this
        manager's save in flight has finished; a link is removed as a link. Unrelated
        names are reported, never removed.

        Args:
          cleanup: Whether to remove the torn and temporary entries found. Refused
            while another manager writes into the root; a program writing there
            without a manager must not run meanwhile.

        Returns:
          A :class:`CheckpointScan`; its ``committed`` steps are process 0's, equal on every process.

        Raises:
          TypeError: If ``cleanup`` is not a bool.
          StepDisagreementError: In a multi-process run, if a process sees other
            committed steps than process 0 (raised on every process).
          RuntimeError: If ``cleanup`` is True and the save in flight failed (its error, as :meth:`wait` raises it).
          SaveInFlightError: If ``cleanup`` is True and another manager writes into the root.
        """
        remove = validation.require_bool(cleanup, "cleanup")
        if not remove:
            return self._agreed_scan()
        self.wait()
        self._lock_root("clean up")
        try:
            found = self._agreed_scan()
            removed: list[pathlib.Path] = []
            if _is_process_zero():
                for entry in (*found.torn, *found.temporary):
                    _remove(entry)
                    removed.append(entry)
            _barrier("tinax-manager-cleanup")
        finally:
            self._unlock_root()
        return dataclasses.replace(found, removed=tuple(removed))

    def committed_steps(self) -> tuple[int, ...]:
        """The committed steps under the root, ascending, equal on every process.

        Raises:
          StepDisagreementError: In a multi-process run, if a process sees other
            committed steps than process 0 (raised on every process).
        """
        return self._agreed_scan().committed

    def latest_committed_step(self) -> int | None:
        """The newest committed step, or None if no step has committed; equal on every process.

        Raises:
          StepDisagreementError: In a multi-process run, if a process sees other
            committed steps than process 0 (raised on every process).
        """
        committed = self.committed_steps()
        return committed[-1] if committed else None

    # ------------------------------------------------------------------
    # Saving.

    def should_save(self, step: int) -> bool:
        """Whether ``step`` is to be saved: on the interval, or at once after a SIGTERM.

        A step not newer than the last one this manager saved is never due. Under
        :meth:`preemption_guard` in a multi-process run each call exchanges the SIGTERM
        flag (one small collective) so all processes save the same step; otherwise it
        does no I/O and no communication.

        Args:
          step: The step about to be saved, an int in [0, 2**64 - 1].

        Returns:
          True if :meth:`save` should be called for ``step`` now.

        Raises:
          TypeError: If ``step`` is not an int (bools are refused).
          ValueError: If ``step`` is negative or above 2**64 - 1.
        """
        if type(step) is not int or not 0 <= step <= MAX_STEP:
            step = require_step(step)
        if self._exchange_preemption:
            self._exchange_preemption_flag()
        elif self._signal_received:
            self._preemption_requested = True
        if step <= self._newest:
            return False
        return self._preemption_requested or step % self._interval == 0

    def save(
        self,
        step: int,
        model: Any,
        optimizer: Any,
        rng: Any,
        auxiliary: Any,
        iterator: DatasetIterator[Any],
        *,
        metric: float | None = None,
    ) -> ocp.AsyncResponse[None]:
        """Starts saving ``step`` into ``<root>/<step>`` with :func:`save_training_checkpoint`.

        If the previous save is still written, this waits or refuses as
        ``save_in_flight`` chose; once it has committed, retention runs. After a
        SIGTERM (see :meth:`preemption_guard`) the save is waited for before this
        returns, so the job may exit right after.

        Args:
          step: The training step, newer than every step this manager saved and every committed step.
          model: The model state.
          optimizer: The optimizer state.
          rng: The random state.
          auxiliary: Any other state resume needs; may be empty or None.
          iterator: The live data iterator; its position is saved.
          metric: The step's metric value; required when the manager keeps the best steps, refused otherwise.

        Returns:
          The Orbax ``AsyncResponse`` of :func:`save_training_checkpoint`. Calling its
          ``result()`` is allowed; retention still runs at the next :meth:`wait` or :meth:`save`.

        Raises:
          TypeError: If an argument is of the wrong kind (see :func:`save_training_checkpoint`)
            or ``metric`` is not a real number.
          ValueError: If ``step`` is not new, ``metric`` is missing, unexpected or not
            finite, or the save refuses a value; the root is then left as it was
            (apart from the previous save's retention).
          FileExistsError: If ``<root>/<step>`` exists without being a committed step
            (:meth:`scan` with ``cleanup=True`` removes it); also a ``ValueError``.
          SaveInFlightError: If the previous save has not finished and
            ``save_in_flight="refuse"`` (not after a SIGTERM), or another manager writes into the root.
          RuntimeError: If the previous save failed in the background (its error, cause chained).
          StepDisagreementError: In a multi-process run, if the processes see different committed steps.
        """
        checked = require_step(step)
        value = self._require_metric(metric)
        # A preempted job must get its last save in, so it waits whatever the policy says.
        if self.save_in_flight and not self._wait_for_previous_save and not self._preemption_requested:
            saving = self._in_flight[0] if self._in_flight is not None else None
            raise SaveInFlightError(
                f"cannot save step {checked} under {str(self._root)!r}: the save of step {saving} is still in flight "
                "and this manager was built with save_in_flight='refuse'; call wait() or save later"
            )
        self.wait()
        self._lock_root(f"save step {checked}")
        try:
            response = self._start_save(checked, value, model, optimizer, rng, auxiliary, iterator)
        except BaseException:
            self._unlock_root()
            raise
        self._newest = checked
        self._in_flight = (checked, response)
        if self._preemption_requested:
            self.wait()
        return response

    def wait(self) -> None:
        """Waits for the save in flight, if any, then applies retention.

        Raises:
          RuntimeError: If that save failed in the background (its error, cause chained); nothing is deleted then.
          StepDisagreementError: In a multi-process run, if the processes see different committed steps.
        """
        if self._in_flight is None:
            return
        _, response = self._in_flight
        try:
            try:
                response.result()
            finally:
                self._in_flight = None
            self._apply_retention()
        finally:
            self._unlock_root()

    def retained_steps(self) -> tuple[int, ...]:
        """The committed steps after every finished save's retention: :meth:`wait`, then :meth:`committed_steps`."""
        self.wait()
        return self.committed_steps()

    # ------------------------------------------------------------------
    # Loading.

    def restore(
        self,
        step: int,
        model_target: Any,
        optimizer_target: Any,
        rng_target: Any,
        auxiliary_target: Any,
        iterator: DatasetIterator[Any],
        *,
        redeal: bool = False,
    ) -> TrainingCheckpoint:
        """Loads committed ``step`` with :func:`load_training_checkpoint`.

        Pass :meth:`latest_committed_step` to resume from the newest checkpoint. A
        checkpoint saved by another number of processes restores only with
        ``redeal=True`` (see :func:`load_training_checkpoint`).

        Returns:
          The :class:`TrainingCheckpoint`, with ``iterator`` moved to the saved
          position. Later saves must be of newer steps.

        Raises:
          TypeError: If ``step`` is not an int, or a target or the iterator is of the wrong kind.
          ValueError: If the targets do not fit the checkpoint, or it was saved by
            another number of processes and cannot be re-dealt (or ``redeal`` is False).
          FileNotFoundError: If ``step`` is not a committed step under the root; also a ``ValueError``.
          StepDisagreementError: In a multi-process run, if the processes see different committed steps.
        """
        checked = require_step(step)
        committed = self.committed_steps()
        if checked not in committed:
            raise CheckpointNotFoundError(
                f"step must be a committed step under {str(self._root)!r}, got {checked}; the committed steps are "
                f"{list(committed)}"
            )
        restored = load_training_checkpoint(
            self._root / str(checked),
            model_target,
            optimizer_target,
            rng_target,
            auxiliary_target,
            iterator,
            names=self._names,
            redeal=redeal,
        )
        self._newest = max(self._newest, checked)
        return restored

    # ------------------------------------------------------------------
    # Preemption.

    @contextlib.contextmanager
    def preemption_guard(self) -> Iterator[TrainingCheckpointManager]:
        """Turns a SIGTERM into a request to save now, for the block's lifetime.

        Inside the block the handler only records the signal: the next
        :meth:`should_save` answers True, :attr:`preemption_requested` turns True and
        :meth:`save` waits for the commit. The previous handler is restored on exit
        (the default action if it was installed outside Python). Enter on the main thread.

        Yields:
          This manager.

        Raises:
          RuntimeError: If a guard of this manager is already active.
          ValueError: If entered on a thread other than the main thread.
        """
        if self._guard_active:
            raise RuntimeError("preemption_guard is already active for this manager; it cannot be nested")
        if threading.current_thread() is not threading.main_thread():
            raise ValueError("preemption_guard must be entered on the main thread, where Python handles signals")

        def record(signum: int, frame: FrameType | None) -> None:
            self._signal_received = True

        previous = signal.signal(signal.SIGTERM, record)
        self._guard_active = True
        self._exchange_preemption = _process_count() > 1
        try:
            yield self
        finally:
            # None means a handler installed outside Python, which Python cannot reinstall.
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
            self._guard_active = False
            self._exchange_preemption = False

    # ------------------------------------------------------------------
    # Internals.

    def _start_save(
        self,
        step: int,
        value: float | None,
        model: Any,
        optimizer: Any,
        rng: Any,
        auxiliary: Any,
        iterator: DatasetIterator[Any],
    ) -> ocp.AsyncResponse[None]:
        """Refuses a step that is not new, records its metric, starts its save; the root is locked."""
        latest = self.latest_committed_step()
        newest = max(self._newest, -1 if latest is None else latest)
        if step <= newest:
            validation.fail_value("step", f"a step newer than the newest saved or committed step {newest}", step)
        destination = self._root / str(step)
        if _exists(destination):
            raise CheckpointExistsError(
                f"cannot save step {step}: {str(destination)!r} already exists without being a committed step (a "
                "torn folder, or a name that is no folder of its own); scan(cleanup=True) removes it"
            )
        metrics: dict[int, float] | None = None
        existed = False
        if value is not None and _is_process_zero():
            metrics = self._read_metrics()
            existed = _exists(self._root / METRICS_FILE)
            self._write_metrics({**metrics, step: value})
        try:
            return save_training_checkpoint(
                destination, step, model, optimizer, rng, auxiliary, iterator, names=self._names
            )
        except BaseException:
            # The save was refused before it started: the metric file returns to what it was.
            if metrics is not None and existed:
                self._write_metrics(metrics)
            elif metrics is not None:
                _unlink(self._root / METRICS_FILE)
            raise

    def _lock_root(self, action: str) -> None:
        """Makes this manager the root's one writer until :meth:`_unlock_root`, or refuses on every process."""
        lock, refused = _RootLock.acquire(self._root) if _is_process_zero() else (None, False)
        if _process_count() > 1:
            refused = _any_process(refused)
        if refused:
            if lock is not None:
                lock.release()
            raise SaveInFlightError(
                f"cannot {action} under {str(self._root)!r}: another TrainingCheckpointManager is writing into this "
                "root (a save of it is in flight, or its retention or cleanup is running). One root takes the saves "
                "of one job: give each job its own root, or start this one once the other has finished"
                + (_remote_lock_hint(self._root) if is_remote(self._root) else "")
            )
        self._lock = lock

    def _unlock_root(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    def _require_metric(self, metric: object) -> float | None:
        if self._keep_best is None:
            if metric is not None:
                validation.fail_value("metric", "None, because this manager keeps no best steps", metric)
            return None
        if metric is None:
            validation.fail_value("metric", "a finite number, because this manager keeps the best steps", metric)
        if isinstance(metric, bool):
            validation.fail_type("metric", "a real number", metric)
        try:
            value = float(metric)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            validation.fail_type("metric", "a real number", metric)
        if not math.isfinite(value):
            validation.fail_value("metric", "a finite number", metric)
        return value

    def _read_metrics(self) -> dict[int, float]:
        try:
            stored = json.loads((self._root / METRICS_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as error:
            raise ValueError(
                f"the metric file {str(self._root / METRICS_FILE)!r} cannot be read; it holds no JSON object"
            ) from error
        if not isinstance(stored, dict):
            raise ValueError(f"the metric file {str(self._root / METRICS_FILE)!r} holds no JSON object")
        metrics: dict[int, float] = {}
        for key, value in stored.items():
            if _step_of(key) is None or type(value) not in (int, float):
                raise ValueError(
                    f"the metric file {str(self._root / METRICS_FILE)!r} holds an entry that is not a step and a "
                    f"number: {key!r}: {value!r}"
                )
            metrics[int(key)] = float(value)
        return metrics

    def _write_metrics(self, metrics: dict[int, float]) -> None:
        encoded = json.dumps({str(step): metrics[step] for step in sorted(metrics)}).encode("utf-8")
        if is_remote(self._root):
            # One object, replaced whole: a reader sees the old or the new file, never a part.
            metrics_file = remote_of(self._root / METRICS_FILE)
            with remote_write(_filesystem(self._root), metrics_file, overwrite=True) as handle:
                handle.write(encoded)
            return
        with atomic_write(self._root / METRICS_FILE, overwrite=True) as handle:
            handle.write(encoded)

    def _kept(self, committed: tuple[int, ...], metrics: dict[int, float]) -> set[int]:
        kept = set(committed[-self._keep_last :])
        if self._keep_every is not None:
            kept.update(step for step in committed if step % self._keep_every == 0)
        if self._keep_best is not None:
            scored = [step for step in committed if step in metrics]
            # Ties go to the newer step.
            sign = 1.0 if self._best_mode == "min" else -1.0
            scored.sort(key=lambda step: (sign * metrics[step], -step))
            kept.update(scored[: self._keep_best])
        return kept

    def _apply_retention(self) -> None:
        committed = self.committed_steps()
        if _is_process_zero() and committed:
            metrics = self._read_metrics() if self._keep_best is not None else {}
            kept = self._kept(committed, metrics)
            newest = committed[-1]
            doomed = [step for step in committed if step not in kept and step < newest]
            for step in doomed:
                folder = self._root / str(step)
                operation = Operation(_logger, "deleted", f"step {step} (retention) at", folder)
                # Counted before the folder goes, and only when the line is shown.
                nbytes = folder_nbytes(folder) if operation.enabled else None
                if _delete_step(folder):
                    operation.done(nbytes=nbytes)
            if self._keep_best is not None:
                remaining = {step: value for step, value in metrics.items() if step in kept or step > newest}
                if remaining != metrics:
                    self._write_metrics(remaining)
        _barrier("tinax-manager-retention")

    def _agreed_scan(self) -> CheckpointScan:
        if _process_count() == 1:
            return scan_root(self._root, self._names.iterator, self._complete)
        # Deletions and cleanups of process 0 end before it reaches this barrier.
        _barrier("tinax-manager-scan")
        local = scan_root(self._root, self._names.iterator, self._complete)
        _agree_on_steps(self._root, local.committed)
        return local

    def _exchange_preemption_flag(self) -> None:
        if _any_process(self._signal_received):
            self._preemption_requested = True


def _step_of(name: str) -> int | None:
    """The step a name stands for: canonical ASCII decimal only ("7", not "07" or "+7")."""
    if not name.isascii() or not name.isdigit() or (len(name) > 1 and name[0] == "0"):
        return None
    step = int(name)
    return step if step <= MAX_STEP else None


def _finished(response: Any) -> bool:
    try:
        response.result(timeout=0)
    except TimeoutError:
        return False
    except Exception:  # A failure is reported by wait(); the save is over either way.
        return True
    return True


def _remove(entry: pathlib.Path) -> None:
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


def _delete_step(folder: pathlib.Path) -> bool:
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
    _remove(doomed)  # A leftover of an interrupted deletion of the same name would block the rename.
    try:
        os.replace(folder, doomed)
    except FileNotFoundError:
        return False
    _remove(doomed)
    return True


class _RemoteRootLock:
    """The ``gs://`` lock object ``<root>/tinax-manager.lock``: created only if absent, deleted on release.

    A holder killed without releasing leaves it behind; the root then refuses writers until it is deleted by hand.
    """

    def __init__(self, root: pathlib.Path) -> None:
        self._root = root

    @classmethod
    def acquire(cls, root: pathlib.Path) -> tuple[_RemoteRootLock | None, bool]:
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


def _remote_lock_hint(root: pathlib.Path) -> str:
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


def _filesystem(path: pathlib.Path) -> Any:
    return remote_filesystem(path, needed_by="tinax.checkpointing.TrainingCheckpointManager")


def _exists(path: pathlib.Path) -> bool:
    """Whether anything is at ``path``: a local entry (a broken link included), or an object or prefix."""
    if is_remote(path):
        return bool(_filesystem(path).exists(remote_of(path).fs_path))
    return os.path.lexists(path)


def _unlink(path: pathlib.Path) -> None:
    if is_remote(path):
        with contextlib.suppress(FileNotFoundError):
            _filesystem(path).rm_file(remote_of(path).fs_path)
    else:
        path.unlink(missing_ok=True)


def _require_remote_root(root: pathlib.Path, *, create: bool) -> None:
    """Checks a ``gs://`` root: a prefix, or nothing yet when ``create`` (a bucket needs no folder made)."""
    fs = _filesystem(root)
    location = remote_of(root)
    if fs.isfile(location.fs_path):
        validation.fail_value("root", "a folder", str(root))
    if not create and not fs.exists(location.fs_path):
        raise CheckpointNotFoundError(
            f"root must name an existing folder when create=False, got {str(root)!r} which holds no object"
        )


def _scan_remote_root(root: pathlib.Path, iterator: str) -> CheckpointScan:
    """:func:`scan_root` of a ``gs://`` root: a step counts once its prefix holds Orbax's commit marker and passes.

    Listings carry no inodes, so every step is checked at every scan; save claim objects count as temporary.
    """
    fs = _filesystem(root)
    location = remote_of(root)
    committed: list[int] = []
    torn: list[pathlib.Path] = []
    temporary: list[pathlib.Path] = []
    unrelated: list[pathlib.Path] = []
    names = sorted({posixpath.basename(entry.rstrip("/")) for entry in fs.ls(location.fs_path, detail=False)})
    for name in names:
        entry = root / name
        if is_orbax_temporary_name(name) or name.endswith(CLAIM_SUFFIX):
            temporary.append(entry)
            continue
        step = _step_of(name)
        if step is None:
            if name not in (METRICS_FILE, LOCK_FILE):
                unrelated.append(entry)
            continue
        try:
            if fs.isfile((location / name).fs_path):
                raise ValueError(f"step {str(entry)!r} is an object, not a folder of its own")
            if iterator in require_complete_checkpoint(entry):
                require_iterator_states(entry, iterator)
        except (OSError, ValueError):
            torn.append(entry)
        else:
            committed.append(step)
    return CheckpointScan(tuple(sorted(committed)), tuple(torn), tuple(temporary), tuple(unrelated), ())


class _RootLock:
    """An advisory lock (``flock``) on the root's lock file, held by process 0 of the manager that writes."""

    def __init__(self, descriptor: int) -> None:
        # Closing the descriptor releases the lock; a manager dropped while it holds one releases it too.
        self._finalizer = weakref.finalize(self, os.close, descriptor)

    @classmethod
    def acquire(cls, root: pathlib.Path) -> tuple[_RootLock | _RemoteRootLock | None, bool]:
        """Tries to lock without waiting: (None, False) where ``flock`` is unavailable; flag True if held elsewhere."""
        if is_remote(root):
            return _RemoteRootLock.acquire(root)
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


def _process_count() -> int:
    import jax

    return int(jax.process_count())


def _is_process_zero() -> bool:
    import jax

    return int(jax.process_index()) == 0


def _barrier(name: str) -> None:
    if _process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def _any_process(flag: bool) -> bool:
    """Whether ``flag`` is True on any process, known to every process (one small collective)."""
    import numpy as np
    from jax.experimental import multihost_utils

    flags = multihost_utils.process_allgather(np.array([flag], dtype=np.uint8))
    return bool(np.asarray(flags).any())


def _agree_on_steps(root: pathlib.Path, committed: tuple[int, ...]) -> None:
    """Checks that every process sees process 0's committed steps, failing all processes at once otherwise.

    The summary is bytes (SHA-256, count, newest) so that it survives any JAX integer width.
    """
    import numpy as np
    from jax.experimental import multihost_utils

    digest = hashlib.sha256(json.dumps(list(committed)).encode("ascii")).digest()
    newest = committed[-1] if committed else 0
    summary = digest + len(committed).to_bytes(8, "little") + newest.to_bytes(8, "little")
    gathered = np.asarray(multihost_utils.process_allgather(np.frombuffer(summary, dtype=np.uint8)))
    rows = [bytes(row.tolist()) for row in gathered.reshape(_process_count(), len(summary))]
    if all(row == rows[0] for row in rows):
        return

    def describe(row: bytes) -> str:
        count = int.from_bytes(row[32:40], "little")
        return f"{count} committed steps" + (f", newest {int.from_bytes(row[40:48], 'little')}" if count else "")

    differing = [index for index, row in enumerate(rows) if row != rows[0]]
    views = "; ".join(f"process {index} sees {describe(row)}" for index, row in enumerate(rows))
    raise StepDisagreementError(
        f"the processes disagree on the committed steps under {str(root)!r}: process(es) {differing} see a different "
        f"set than process 0, which decides ({views}). Every process must see the same root folder"
    )


def scan_root(root: pathlib.Path, iterator: str, known_complete: dict[str, bytes] | None = None) -> CheckpointScan:
    """Sorts a root's entries as one process sees them, removing nothing; also used by ``tinax inspect``.

    ``known_complete`` (name -> :func:`_step_signature`) skips unchanged complete folders; updated in place.
    """
    if is_remote(root):
        return _scan_remote_root(root, iterator)
    cache = {} if known_complete is None else known_complete
    real_root = os.path.realpath(root)
    committed: list[int] = []
    torn: list[pathlib.Path] = []
    temporary: list[pathlib.Path] = []
    unrelated: list[pathlib.Path] = []
    for entry in sorted(root.iterdir()):
        name = entry.name
        if is_orbax_temporary_name(name):
            temporary.append(entry)
            continue
        step = _step_of(name)
        if step is None:
            if name not in (METRICS_FILE, LOCK_FILE):
                unrelated.append(entry)
            continue
        try:
            signature = _step_signature(entry, real_root)
            if cache.get(name) != signature:
                cache.pop(name, None)
                if iterator in require_complete_checkpoint(entry):
                    # Each process of a resume reads its own state file; restore refuses a step lacking one.
                    require_iterator_states(entry, iterator)
                # The signature taken before the check: a change during the check is seen at the next scan.
                cache[name] = signature
        except (OSError, ValueError):
            cache.pop(name, None)
            torn.append(entry)
        else:
            committed.append(step)
    for name in set(cache) - {str(step) for step in committed}:
        del cache[name]
    return CheckpointScan(tuple(sorted(committed)), tuple(torn), tuple(temporary), tuple(unrelated), ())


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
