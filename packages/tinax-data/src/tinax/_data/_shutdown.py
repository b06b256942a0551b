"""Stops the reads of grain's prefetch threads once the interpreter is shutting down.

The interpreter joins grain's prefetch pool at exit, running every queued batch of an unclosed iterator
first (minutes for a slow dataset). From shutdown on, reads in prefetch and window threads raise
:class:`ReadsStoppedError`. ``threading._register_atexit`` (private, as ``concurrent.futures`` uses it) is
the only hook that runs before that join; without it, or should grain rename its threads (undocumented
names, see ``tests/test_reader_hardening.py``), the exit waits as before. See docs/guide/data.md, section
"Iterating a dataset, and stopping early".
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
    """Refuses a read in a prefetch thread once shutdown started; one global lookup until then, so cheap per read."""
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
