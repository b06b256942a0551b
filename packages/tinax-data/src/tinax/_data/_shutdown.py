"""Stops the reads of grain's prefetch threads once the interpreter is shutting down.

An iterator a program stops reading and never closes (a global, a frame
kept by a traceback, a reference cycle) is still alive when the main thread
finishes. grain's prefetch runs on a ``concurrent.futures`` thread pool
whose worker threads the interpreter joins before it exits, and a worker
first runs every batch already queued for it (grain queues up to its
prefetch buffer, 500 by default), so a slow dataset held the process for
minutes. Once the main thread has finished, nothing can read those batches:
the pool takes no new work after that point, so an iterator read on from
another thread fails when its queue runs dry anyway.

So when shutdown starts, tinax's readers and batch reads stop working for
grain's prefetch threads (and for tinax's own threads that read a planned
window ahead, which the interpreter joins too): a queued batch fails at its first read, and a
batch being read stops before its next row group (Parquet) or record
(ArrayRecord), with :class:`ReadsStoppedError`, which nobody sees. Reads in
the main thread (an ``atexit`` handler) and in the program's own threads go
on as before. Work a batch does outside tinax's reads (a slow ``map``
function) is not interrupted; the batch being read when shutdown starts
finishes its current step. Closing an iterator (``iterator.close()``)
remains the documented way to stop it early.

Why a private hook: the interpreter joins the pool's threads from
``threading._shutdown``, before it runs the ``atexit`` handlers, and
``sys.is_finalizing()`` only turns true after that join, so no public
mechanism runs in time. ``threading._register_atexit`` is the hook
``concurrent.futures`` itself uses to join its workers; the hooks run in
reverse order of registration, so this one, registered after
``concurrent.futures.thread`` is imported, runs before that join. Where the
hook does not exist the reads are never stopped (the exit waits, as before).

grain's prefetch threads are told apart by the name grain gives them (its
thread pool's name prefix), which grain sets but does not document; should
grain rename them, reads are no longer stopped (the exit waits, as before)
and ``tests/test_reader_hardening.py`` fails to say so. This module imports
neither grain nor pyarrow.
"""

from __future__ import annotations

import concurrent.futures.thread  # noqa: F401 - imported first, so that the hook here runs before its join.
import threading
from typing import Any

__all__ = ["PREFETCH_THREAD_PREFIX", "WINDOW_THREAD_PREFIX", "ReadsStoppedError", "check_reads_go_on", "shutting_down"]


#: The start of the names of the threads grain's prefetch (``MapDataset.to_iter_dataset``) reads in.
PREFETCH_THREAD_PREFIX = "grain-prefetch"
#: The start of the names of tinax's own threads that read a planned window ahead of the batches.
WINDOW_THREAD_PREFIX = "tinax-data-window"


class ReadsStoppedError(RuntimeError):
    """A read in one of grain's prefetch threads, refused because the interpreter is shutting down."""


_shutting_down = False


def shutting_down() -> bool:
    """Whether the interpreter has started to shut down (the main thread has finished)."""
    return _shutting_down


def check_reads_go_on(what: Any) -> None:
    """Refuses a read in one of grain's prefetch threads once the interpreter is shutting down.

    Cheap enough to call before every row group or record: one global look
    up until shutdown starts.

    Args:
      what: What is being read (a path, a dataset), for the message.

    Raises:
      ReadsStoppedError: If the interpreter is shutting down and the read
        runs in one of grain's prefetch threads.
    """
    if _shutting_down and threading.current_thread().name.startswith((PREFETCH_THREAD_PREFIX, WINDOW_THREAD_PREFIX)):
        raise ReadsStoppedError(
            f"reading {what} stopped: the interpreter is shutting down, and nothing can read what a prefetch "
            "thread reads after that; close an iterator you stop reading early"
        )


def _stop_prefetch_reads() -> None:
    global _shutting_down
    _shutting_down = True


def _register() -> None:
    register = getattr(threading, "_register_atexit", None)
    if register is None:
        return
    try:
        register(_stop_prefetch_reads)
    except RuntimeError:
        # Imported while the interpreter is already shutting down: too late to register.
        _stop_prefetch_reads()


_register()
