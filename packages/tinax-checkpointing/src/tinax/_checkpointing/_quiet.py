"""Failed Orbax loads that leave no unretrieved work to report later.

When one value of an Orbax load fails, Orbax raises at once and abandons the
reads it had started for the others: asyncio tasks whose exceptions nobody
retrieves, tasks still pending, and coroutines it never awaited. The error's
traceback keeps them alive, and Python reports each one when it is finally
collected, which may be at interpreter exit, long after the load's own error
was handled ("Task exception was never retrieved", "Task was destroyed but it
is pending!", "coroutine ... was never awaited"). The load's error already
says what failed, so :func:`retire_abandoned_work` retrieves that work on the
spot: it closes the coroutines that never started, releases what the
traceback's frames hold, and collects the tasks.

Some of those tasks ran on event loops that Orbax made and closed in threads
of its own, and another reference may outlive the collection. Their reports
are taken by a filter on asyncio's logger, installed by
:func:`take_abandoned_orbax_task_reports` before the first load: it takes
only reports of abandoned tasks whose coroutine or error comes from Orbax's
code, or from a TensorStore read or write that Orbax started, and lets every
other record through.

Only public asyncio, inspect, gc and logging interfaces are used, so nothing
here belongs in ``_upstream_compat``. What depends on upstream is the wording
of asyncio's reports; the failed-load tests of ``test_hardening.py`` run real
failing loads and fail if any report reaches stderr.
"""

from __future__ import annotations

import gc
import inspect
import logging
import os
import re
import threading
import traceback
import types
import warnings
from collections.abc import Iterable

__all__ = ["ENSURE_FUTURE_WRAPPER_NEVER_AWAITED", "retire_abandoned_work", "take_abandoned_orbax_task_reports"]

#: What Python 3.12.1 warns when ``asyncio.ensure_future`` cannot schedule an
#: awaitable it wrapped: it never closes the wrapper (a CPython bug, fixed in
#: later 3.12 releases), so no caller can retrieve it.
ENSURE_FUTURE_WRAPPER_NEVER_AWAITED = r"coroutine 'ensure_future\.<locals>\._wrap_awaitable' was never awaited"

# What asyncio reports, through its logger, for a task or future that a failed
# load abandoned ("Task exception ...", "_GatheringFuture exception ...").
_ABANDONED_TASK_REPORT = re.compile(r"\w+ exception was never retrieved|Task was destroyed but it is pending!")
# How deep below a frame's locals unstarted coroutines are looked for (Orbax
# keeps them in lists, one level down).
_SEARCH_DEPTH = 3
# Where Orbax's code lives, as it appears in a task's repr and in tracebacks.
_ORBAX_CODE = f"{os.sep}orbax{os.sep}checkpoint{os.sep}"
# What every TensorStore error names; Orbax wraps TensorStore futures in tasks of asyncio's own code.
_TENSORSTORE_ERROR = "tensorstore_spec="

_filter_lock = threading.Lock()
_filters: list[logging.Filter] = []


def retire_abandoned_work(error: BaseException) -> None:
    """Retrieves what a failed Orbax load created and abandoned, so nothing reports it later.

    The traceback of ``error`` (and of the errors linked to it) keeps its
    lines. The coroutines its frames hold that never started are closed, the
    local variables of its finished frames are dropped, and the tasks they
    held are collected at once, their reports taken.

    Args:
      error: The error the Orbax load raised.
    """
    traces: list[types.TracebackType] = []
    seen: set[int] = set()
    pending: list[BaseException] = [error]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if current.__traceback__ is not None:
            traces.append(current.__traceback__)
        pending.extend(linked for linked in (current.__cause__, current.__context__) if linked is not None)
        pending.extend(getattr(current, "exceptions", ()))
    for trace in traces:
        for frame in _frames(trace):
            try:
                values = list(frame.f_locals.values())
            except Exception:  # pragma: no cover - a frame whose locals cannot be read
                continue
            _close_unstarted(values, _SEARCH_DEPTH)
    _close_unstarted_on_closed_loops()
    take_abandoned_orbax_task_reports()
    for trace in traces:
        traceback.clear_frames(trace)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ENSURE_FUTURE_WRAPPER_NEVER_AWAITED, RuntimeWarning)
        gc.collect()


def take_abandoned_orbax_task_reports() -> None:
    """Installs, once, the filter that takes asyncio's reports of tasks Orbax abandoned.

    Called before a load starts, since Orbax may drop such tasks while the
    load is still running.
    """
    with _filter_lock:
        if not _filters:
            report_filter = _AbandonedOrbaxTaskReports()
            logging.getLogger("asyncio").addFilter(report_filter)
            _filters.append(report_filter)


class _AbandonedOrbaxTaskReports(logging.Filter):
    """Takes asyncio's reports of tasks that Orbax abandoned; lets every other record through."""

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


def _close_unstarted_on_closed_loops() -> None:
    """Closes Orbax coroutines that never started and never can: their task's event loop is closed.

    Orbax reads each checkpointable on an event loop of its own and closes
    that loop when the read fails, leaving the tasks it had scheduled there
    pending. Their coroutines are not reachable from the load's traceback.
    A task whose loop is closed can never run, so closing its unstarted
    coroutine takes nothing from anyone; tasks of open loops, which may
    belong to work still in progress, are left alone.
    """
    import asyncio

    for candidate in gc.get_objects():
        if not isinstance(candidate, asyncio.Task) or candidate.done():
            continue
        try:
            closed = candidate.get_loop().is_closed()
        except Exception:  # pragma: no cover - a task whose loop cannot be asked
            continue
        coroutine = candidate.get_coro()
        if (
            closed
            and isinstance(coroutine, types.CoroutineType)
            and _ORBAX_CODE in coroutine.cr_code.co_filename
            and inspect.getcoroutinestate(coroutine) == inspect.CORO_CREATED
        ):
            coroutine.close()


def _close_unstarted(values: Iterable[object], depth: int) -> None:
    """Closes every coroutine among ``values`` (and in their containers) that never started."""
    for value in values:
        if isinstance(value, types.CoroutineType):
            if inspect.getcoroutinestate(value) == inspect.CORO_CREATED:
                value.close()  # Never started: closing it runs nothing, and it no longer warns.
        elif depth > 0 and isinstance(value, (list, tuple, set, frozenset)):
            _close_unstarted(value, depth - 1)
        elif depth > 0 and isinstance(value, dict):
            _close_unstarted(list(value.values()), depth - 1)
