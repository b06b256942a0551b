"""A step manager over a root folder: committed steps, retention, one save at a time, preemption.

How steps commit, how retention deletes, the one-writer lock, ``gs://`` roots and the multi-process
agreement are described in docs/guide/checkpointing.md, section "How the manager commits and keeps steps".
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import pathlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal

from tinax._checkpointing._compat02 import CheckpointExistsError, CheckpointNotFoundError
from tinax._checkpointing._locations import absolute_location, folder_nbytes, is_remote
from tinax._checkpointing._manager._processes import (
    StepDisagreementError,
    agree_on_steps,
    any_process,
    barrier,
    is_process_zero,
    process_count,
)
from tinax._checkpointing._manager._root import (
    LOCK_FILE,
    METRICS_FILE,
    CheckpointScan,
    RemoteRootLock,
    RootLock,
    delete_step,
    exists,
    read_metrics,
    remote_lock_hint,
    remove_entry,
    require_root,
    sort_entries,
    unlink,
    write_metrics,
)
from tinax._checkpointing._metadata._layout import require_complete_checkpoint
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
from tinax._core.logs import Operation, get_logger

if TYPE_CHECKING:
    import orbax.checkpoint.experimental.v1 as ocp
    from grain import DatasetIterator

__all__ = [
    "LOCK_FILE",
    "METRICS_FILE",
    "CheckpointScan",
    "SaveInFlightError",
    "StepDisagreementError",
    "TrainingCheckpointManager",
    "scan_root",
]

_SAVE_IN_FLIGHT_CHOICES = ("wait", "refuse")
_BEST_MODES = ("min", "max")

_logger = get_logger("checkpointing")


class SaveInFlightError(RuntimeError):
    """A save or cleanup was refused because a save into the root has not finished.

    Either the manager's own previous save (with ``save_in_flight="refuse"``), or the
    save or retention of another manager writing into the same root.
    """


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
      ValueError: If a count or mode is invalid, or ``root`` is no folder or cannot be made (then also ``OSError``).
      FileNotFoundError: If ``root`` does not exist and ``create`` is False; also a ``ValueError``.
      ImportError: If ``root`` is a ``gs://`` URL and gcsfs is not installed.

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
        require_root(folder, create=should_create)
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
        # (see _manager_root): a committed checkpoint is checked again only once something in it changed.
        self._complete: dict[str, bytes] = {}
        # Process 0's root lock from the start of a save until its retention has run; None otherwise.
        self._lock: RootLock | RemoteRootLock | None = None

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
          StepDisagreementError: In a multi-process run, if a process sees other committed steps than process 0.
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
            if is_process_zero():
                for entry in (*found.torn, *found.temporary):
                    remove_entry(entry)
                    removed.append(entry)
            barrier("tinax-manager-cleanup")
        finally:
            self._unlock_root()
        return dataclasses.replace(found, removed=tuple(removed))

    def committed_steps(self) -> tuple[int, ...]:
        """The committed steps under the root, ascending, equal on every process.

        Raises:
          StepDisagreementError: In a multi-process run, if a process sees other committed steps than process 0.
        """
        return self._agreed_scan().committed

    def latest_committed_step(self) -> int | None:
        """The newest committed step, or None if no step has committed; equal on every process.

        Raises:
          StepDisagreementError: In a multi-process run, if a process sees other committed steps than process 0.
        """
        committed = self.committed_steps()
        return committed[-1] if committed else None

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
        if any_process(self._signal_received) if self._exchange_preemption else self._signal_received:
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
          TypeError: If an argument is of the wrong kind, or ``metric`` is not a real number.
          ValueError: If ``step`` is not new, ``metric`` is missing, unexpected or not finite, or a value is refused.
          FileExistsError: If ``<root>/<step>`` exists without being a committed step; also a ``ValueError``.
          SaveInFlightError: If a save is in flight and ``save_in_flight="refuse"``, or another manager writes there.
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
          ValueError: If the targets do not fit the checkpoint, or its process count differs and it cannot be re-dealt.
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
        self._exchange_preemption = process_count() > 1
        try:
            yield self
        finally:
            # None means a handler installed outside Python, which Python cannot reinstall.
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
            self._guard_active = False
            self._exchange_preemption = False

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
        if exists(destination):
            raise CheckpointExistsError(
                f"cannot save step {step}: {str(destination)!r} already exists without being a committed step (a "
                "torn folder, or a name that is no folder of its own); scan(cleanup=True) removes it"
            )
        metrics: dict[int, float] | None = None
        existed = False
        if value is not None and is_process_zero():
            metrics = read_metrics(self._root)
            existed = exists(self._root / METRICS_FILE)
            write_metrics(self._root, {**metrics, step: value})
        try:
            return save_training_checkpoint(
                destination, step, model, optimizer, rng, auxiliary, iterator, names=self._names
            )
        except BaseException:
            # The save was refused before it started: the metric file returns to what it was.
            if metrics is not None and existed:
                write_metrics(self._root, metrics)
            elif metrics is not None:
                unlink(self._root / METRICS_FILE)
            raise

    def _lock_root(self, action: str) -> None:
        """Makes this manager the root's one writer until :meth:`_unlock_root`, or refuses on every process."""
        lock, refused = RootLock.acquire(self._root) if is_process_zero() else (None, False)
        if process_count() > 1:
            refused = any_process(refused)
        if refused:
            if lock is not None:
                lock.release()
            raise SaveInFlightError(
                f"cannot {action} under {str(self._root)!r}: another TrainingCheckpointManager is writing into this "
                "root (a save of it is in flight, or its retention or cleanup is running). One root takes the saves "
                "of one job: give each job its own root, or start this one once the other has finished"
                + (remote_lock_hint(self._root) if is_remote(self._root) else "")
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
        if is_process_zero() and committed:
            metrics = read_metrics(self._root) if self._keep_best is not None else {}
            kept = self._kept(committed, metrics)
            newest = committed[-1]
            doomed = [step for step in committed if step not in kept and step < newest]
            for step in doomed:
                folder = self._root / str(step)
                operation = Operation(_logger, "deleted", f"step {step} (retention) at", folder)
                # Counted before the folder goes, and only when the line is shown.
                nbytes = folder_nbytes(folder) if operation.enabled else None
                if delete_step(folder):
                    operation.done(nbytes=nbytes)
            if self._keep_best is not None:
                remaining = {step: value for step, value in metrics.items() if step in kept or step > newest}
                if remaining != metrics:
                    write_metrics(self._root, remaining)
        barrier("tinax-manager-retention")

    def _agreed_scan(self) -> CheckpointScan:
        # Deletions and cleanups of process 0 end before it reaches this barrier.
        barrier("tinax-manager-scan")
        local = scan_root(self._root, self._names.iterator, self._complete)
        agree_on_steps(self._root, local.committed)
        return local


def _finished(response: Any) -> bool:
    try:
        response.result(timeout=0)
    except TimeoutError:
        return False
    except Exception:  # A failure is reported by wait(); the save is over either way.
        return True
    return True


def scan_root(root: pathlib.Path, iterator: str, known_complete: dict[str, bytes] | None = None) -> CheckpointScan:
    """Sorts a root's entries as one process sees them, removing nothing; also used by ``tinax inspect``.

    ``known_complete`` (name -> step tree signature) skips unchanged complete folders; updated in place.
    """

    def require_committed(step: pathlib.Path) -> None:
        if iterator in require_complete_checkpoint(step):
            # Each process of a resume reads its own state file; restore refuses a step lacking one.
            require_iterator_states(step, iterator)

    return sort_entries(root, require_committed, known_complete)
