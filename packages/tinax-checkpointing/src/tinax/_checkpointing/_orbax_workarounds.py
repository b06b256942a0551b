"""What Orbax leaves undone around a save or a load, each workaround kept only while a test needs it.

Each section names its test; docs/upstream.md describes each problem. Reached Orbax and Python
internals fall back to doing less where they have moved, and ``tests/test_orbax_workarounds.py`` then
fails, so a fallback is never taken unnoticed. Orbax is imported only when a function here runs.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import gc
import inspect
import logging
import os
import pathlib
import re
import shutil
import sys
import threading
import time
import traceback
import types
import warnings
from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import Any

__all__ = [
    "ENSURE_FUTURE_WRAPPER_NEVER_AWAITED",
    "collect_abandoned_reads",
    "current_operation_id",
    "finish_abandoned_reads",
    "finish_at_exit",
    "forget_at_exit",
    "handler_lookup",
    "retire_abandoned_work",
    "settle_failed_save",
    "take_abandoned_orbax_task_reports",
]

# --- Handlers resolved before anything is written -------------------------------------------------------------
# Orbax resolves handlers after scheduling the folder creation, leaving that work dangling on failure.
# Test: test_checkpointables.py::test_bad_checkpointables_are_refused_before_anything_is_written.


def handler_lookup() -> Callable[[object, str], object] | None:
    """Orbax's handler resolution for a save (raises ``LookupError`` or ``ValueError``); None where it moved."""
    try:
        from orbax.checkpoint.experimental.v1._src.context import context
        from orbax.checkpoint.experimental.v1._src.handlers import registration
    except ImportError:
        return None
    resolve = getattr(registration, "resolve_handler_for_save", None)
    if resolve is None:
        return None
    return lambda value, name: resolve(context.get_context().checkpointables_options.registry, value, name=name)


# --- Saves still in flight at interpreter exit ------------------------------------------------------------------
# Orbax's pools stop at the first step of shutdown; only a threading._register_atexit hook registered after
# theirs can still finish a save (3.11), or report it lost (3.12+, no threads at shutdown). Tests: test_crash.py's
# test_a_save_in_flight_at_exit_is_finished_where_python_allows and ..._where_python_forbids_new_threads.

_in_flight_lock = threading.Lock()
_in_flight: set[Any] = set()
_exit_hook: list[bool] = []


def finish_at_exit(save: Any) -> None:
    """Finishes (or, where Python forbids, reports) ``save`` at exit; it has ``destination`` and ``result()``."""
    with _in_flight_lock:
        _in_flight.add(save)
        if _exit_hook:
            return
        _exit_hook.append(True)
    # Orbax's pools registered their hooks on import, before this; hooks run last-registered first.
    register = getattr(threading, "_register_atexit", None)
    (register or atexit.register)(_finish_saves)  # atexit runs too late to finish, but still reports


def forget_at_exit(save: Any) -> None:
    """Drops ``save``, which has succeeded or failed, from those finished at exit."""
    with _in_flight_lock:
        _in_flight.discard(save)


def _finish_saves() -> None:
    with _in_flight_lock:
        unfinished = list(_in_flight)
    try:
        if unfinished:
            threading.Thread(target=int).start()
    except RuntimeError:  # Python starts no threads during shutdown, and neither can Orbax.
        for save in unfinished:
            print(
                f"tinax.checkpointing: the save to {str(save.destination)!r} was still in flight when the "
                "interpreter exited and cannot finish, because Python starts no threads during shutdown; "
                "nothing is committed there. Call result() on the response of save_checkpointables before "
                "exiting.",
                file=sys.stderr,
                flush=True,
            )
        return
    for save in unfinished:
        try:
            save.result()
        except Exception as error:
            print(f"tinax.checkpointing: {error}", file=sys.stderr, flush=True)


# --- A failed save: no thread left waiting, no temporary folder left behind ---------------------------------------
# A failed save's waiting threads hold the exit for five minutes, and TensorStore may recreate the temporary
# folder after a first removal. Tests: test_hardening.py's
# test_no_background_failure_keeps_the_process_alive_after_result_raised and
# test_a_save_orbax_refuses_at_call_time_leaves_no_temporary_folder.

_MAX_ROUNDS = 8  # A thread may start others as it ends; Orbax starts two levels.
_MAX_REMOVALS = 200
_QUIET_CHECKS = 3  # The folder is gone once it stays away for this many checks _PAUSE_SECONDS apart.
_PAUSE_SECONDS = 0.02


def current_operation_id() -> str | None:
    """The id of the Orbax operation started last in this process; None where Orbax's internals moved."""
    try:
        from orbax.checkpoint._src.futures import synchronization
    except ImportError:
        return None
    generator: Any = getattr(synchronization, "OperationIdGenerator", None)
    return None if generator is None else str(generator.get_current_operation_id())


def settle_failed_save(operation_id: str | None, temporary: pathlib.Path) -> None:
    """Ends every thread of a failed save (if ``operation_id`` is known) and removes its temporary folder."""
    if operation_id is None and not os.path.lexists(temporary):
        return  # Orbax started nothing that could still write there.
    if operation_id is not None:
        for _ in range(_MAX_ROUNDS):
            threads = save_threads_of(operation_id)
            # Signals a folder that never came: the waiting writers then fail on their own.
            if not threads or not release_waiting_threads(operation_id):
                break
            for thread in threads:
                threading.Thread.join(thread)  # Orbax's join re-raises the error the save already reported.
    import jax

    # Only the primary process writes the folder's metadata and renames it; it alone removes it.
    if jax.process_index() != 0:
        return
    quiet = 0
    for _ in range(_MAX_REMOVALS):
        if not os.path.lexists(temporary):
            quiet += 1
            if quiet > _QUIET_CHECKS:
                return
        else:
            quiet = 0
            if os.path.isdir(temporary) and not os.path.islink(temporary):
                shutil.rmtree(temporary, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
        time.sleep(_PAUSE_SECONDS)


def save_threads_of(operation_id: str) -> list[threading.Thread]:
    """The live Orbax threads of one save operation, but the calling one; [] where Orbax's internals moved."""
    try:
        from orbax.checkpoint._src.futures import future
    except ImportError:
        return []
    thread_class: Any = getattr(future, "_SignalingThread", None)
    if thread_class is None:
        return []
    return [
        thread
        for thread in threading.enumerate()
        if isinstance(thread, thread_class)
        and thread is not threading.current_thread()
        and getattr(thread, "_operation_id", None) == operation_id
    ]


def release_waiting_threads(operation_id: str) -> bool:
    """Sets every signal the threads of a save may wait on; False where that failed or Orbax's internals moved."""
    try:
        from orbax.checkpoint._src.futures import future, synchronization
    except ImportError:
        return False
    signal_class: Iterable[Any] | None = getattr(synchronization, "HandlerAwaitableSignal", None)
    set_signals: Any = getattr(future, "set_signals", None)
    if signal_class is None or set_signals is None:
        return False
    # The contract signal lists the others; setting it would garble that list.
    signals = [signal for signal in signal_class if signal.name != "AWAITABLE_SIGNALS_CONTRACT"]
    try:
        set_signals(signals, operation_id=operation_id)
    except Exception:  # A coordination service gone away; the threads time out.
        return False
    return True


# --- A failed load: nothing left to report later ------------------------------------------------------------------
# A failed load abandons unawaited coroutines and unretrieved tasks: unstarted ones are closed, and a logger
# filter takes asyncio's reports of the rest. Tests: test_hardening.py's
# test_failed_loads_leave_nothing_to_report_at_exit and test_only_reports_of_tasks_orbax_abandoned_are_taken.

_ABANDONED_TASK_REPORT = re.compile(r"\w+ exception was never retrieved|Task was destroyed but it is pending!")
_SEARCH_DEPTH = 3  # Orbax keeps unstarted coroutines in lists, one level below a frame's locals.
_ORBAX_CODE = f"{os.sep}orbax{os.sep}checkpoint{os.sep}"
_TENSORSTORE_ERROR = "tensorstore_spec="  # What every TensorStore error names.
_filter_lock = threading.Lock()
_filters: list[logging.Filter] = []


#: Python 3.12.1's warning for an ``ensure_future`` wrapper it never closes (a CPython bug fixed later in 3.12),
#: which Orbax's abandoned reads leave; tested on 3.12.1 by ``test_failed_loads_leave_nothing_to_report_at_exit``.
ENSURE_FUTURE_WRAPPER_NEVER_AWAITED = r"coroutine 'ensure_future\.<locals>\._wrap_awaitable' was never awaited"


def collect_abandoned_reads() -> None:
    """Collects what a failed or abandoned Orbax read left, without Python 3.12.1's wrapper warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ENSURE_FUTURE_WRAPPER_NEVER_AWAITED, RuntimeWarning)
        gc.collect()


def retire_abandoned_work(error: BaseException) -> None:
    """Closes the never-started coroutines held by the tracebacks of ``error`` and its linked errors, then collects."""
    seen: set[int] = set()
    pending = [error]
    traces: list[types.TracebackType] = []
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        pending.extend(linked for linked in (current.__cause__, current.__context__) if linked is not None)
        pending.extend(getattr(current, "exceptions", ()))
        if current.__traceback__ is not None:
            traces.append(current.__traceback__)
        for frame in _frames(current.__traceback__):
            with contextlib.suppress(Exception):
                _close_unstarted(list(frame.f_locals.values()), _SEARCH_DEPTH)
    for trace in traces:
        traceback.clear_frames(trace)
    collect_abandoned_reads()


def take_abandoned_orbax_task_reports() -> None:
    """Installs, once, the filter that takes asyncio's reports of tasks Orbax abandoned (before the first load)."""
    with _filter_lock:
        if not _filters:
            _filters.append(_AbandonedOrbaxTaskReports())
            logging.getLogger("asyncio").addFilter(_filters[0])


class _AbandonedOrbaxTaskReports(logging.Filter):
    """Takes asyncio's reports of tasks whose coroutine or error comes from Orbax or TensorStore; passes the rest."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # pragma: no cover - a record that cannot format is not ours to judge
            return True
        if not _ABANDONED_TASK_REPORT.match(message):
            return True
        if _ORBAX_CODE in message:
            return False
        error = record.exc_info[1] if record.exc_info else None
        if error is not None and _TENSORSTORE_ERROR in str(error):
            return False
        trace = record.exc_info[2] if record.exc_info else None
        return not any(_ORBAX_CODE in frame.f_code.co_filename for frame in _frames(trace))


def _frames(trace: types.TracebackType | None) -> list[types.FrameType]:
    frames = []
    while trace is not None:
        frames.append(trace.tb_frame)
        trace = trace.tb_next
    return frames


def _close_unstarted(values: Iterable[object], depth: int) -> None:
    for value in values:
        if isinstance(value, types.CoroutineType):
            if inspect.getcoroutinestate(value) == inspect.CORO_CREATED:
                value.close()  # Never started: closing it runs nothing, and it no longer warns.
        elif depth > 0 and isinstance(value, (list, tuple, set, frozenset)):
            _close_unstarted(value, depth - 1)
        elif depth > 0 and isinstance(value, dict):
            _close_unstarted(list(value.values()), depth - 1)


# --- A failed load: the reads it abandoned finish before their event loop closes ------------------------------------
# Orbax's run_sync closes its loop when one read fails, with sibling reads pending: TensorStore then calls back
# into the closed loop. Within a tinax load (a context variable), a failing run_sync coroutine first waits for the
# loop's other tasks; cancelling them is not enough. Saves are left alone. Test: test_hardening.py's
# test_repeated_failed_loads_leave_no_warning_and_no_unraisable_error.

# Siblings end by themselves; the bound only stops a read that never ends from holding the failure back.
_FINISH_SECONDS = 60.0
_CANCEL_SECONDS = 1.0  # Enough for a cancelled task to unwind.
_loading: contextvars.ContextVar[bool] = contextvars.ContextVar("tinax_checkpointing_loading", default=False)
_run_sync_lock = threading.Lock()


@contextlib.contextmanager
def finish_abandoned_reads() -> Iterator[None]:
    """While active, a failing Orbax ``run_sync`` lets the reads it started finish before its loop closes."""
    _wrap_run_sync()
    token = _loading.set(True)
    try:
        yield
    finally:
        _loading.reset(token)


def _wrap_run_sync() -> None:
    """Puts, once, a wrapper in place of Orbax's ``run_sync`` that acts only within a load."""
    try:
        from orbax.checkpoint._src import asyncio_utils
    except ImportError:
        return
    with _run_sync_lock:
        original = getattr(asyncio_utils, "run_sync", None)
        if not callable(original) or getattr(original, "_tinax_wrapped", None) is not None:
            return

        def run_sync(coroutine: Any) -> Any:
            if _loading.get() and isinstance(coroutine, types.CoroutineType):
                coroutine = _siblings_finished_on_failure(coroutine)
            return original(coroutine)

        run_sync._tinax_wrapped = original  # type: ignore[attr-defined]
        asyncio_utils.run_sync = run_sync


async def _siblings_finished_on_failure(coroutine: Coroutine[Any, Any, Any]) -> Any:
    try:
        return await coroutine
    except Exception:
        # Orbax closes the loop once this returns: its other tasks finish first, so none is left behind.
        await _finish_other_tasks()
        raise


async def _finish_other_tasks() -> None:
    """Waits for the running loop's other tasks, also those started meanwhile; stragglers are cancelled."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _FINISH_SECONDS
    current = asyncio.current_task()
    while True:
        others = {task for task in asyncio.all_tasks() if task is not current and not task.done()}
        if not others:
            return
        remaining = deadline - loop.time()
        if remaining <= 0:
            for task in others:
                task.cancel()
            await asyncio.wait(others, timeout=_CANCEL_SECONDS)
            return
        done, _ = await asyncio.wait(others, timeout=remaining)
        for task in done:
            if not task.cancelled():
                task.exception()  # Retrieved: the failure the load reports is the first one.
