"""Settling a failed Orbax save: no thread left waiting, no temporary folder left behind.

When an Orbax V1 save fails, its ``AsyncResponse`` raises at once, but the
save's other threads go on. Those that wait for the signal that the
checkpoint folder was created wait for it for Orbax's coordination timeout
(five minutes), and they are not daemon threads, so they hold the interpreter
at exit; those already writing leave a ``.orbax-checkpoint-tmp`` folder. This
module ends both: it gives the waiting threads their signal, so they run to
their own (failing) end, joins every thread of the save, and then removes the
temporary folder.

It uses Orbax internals (``_SignalingThread`` and its signals). If they move,
settling does what it still can: the folder is removed either way.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import threading
import time
from typing import Any

import jax

__all__ = ["current_operation_id", "settle_failed_save"]

# Each round joins the threads alive at its start; a thread may start others
# while it ends, so a few rounds are allowed. Orbax starts two levels.
_MAX_ROUNDS = 8
# TensorStore may still finish writes that Orbax abandoned (in its own native
# threads, which no Python handle reaches) after every Python thread of the
# save has ended, and it recreates the folders it writes into. The folder is
# removed until it stays away for _QUIET_CHECKS checks _PAUSE_SECONDS apart,
# for at most _MAX_REMOVALS removals.
_MAX_REMOVALS = 200
_QUIET_CHECKS = 3
_PAUSE_SECONDS = 0.02


def current_operation_id() -> str | None:
    """The id of the Orbax operation started last in this process, or None if Orbax's internals moved."""
    try:
        from orbax.checkpoint._src.futures import synchronization
    except ImportError:  # pragma: no cover - depends on the Orbax release
        return None
    generator: Any = getattr(synchronization, "OperationIdGenerator", None)
    if generator is None:  # pragma: no cover - depends on the Orbax release
        return None
    return str(generator.get_current_operation_id())


def settle_failed_save(operation_id: str | None, temporary: pathlib.Path) -> None:
    """Ends every thread of a failed save and removes its temporary folder.

    Args:
      operation_id: The Orbax operation id of the save, or None if unknown
        (then only the folder is removed).
      temporary: The save's ``<path>.orbax-checkpoint-tmp`` folder.
    """
    if operation_id is None and not os.path.lexists(temporary):
        return  # Orbax started nothing that could still write there.
    if operation_id is not None:
        _end_threads(operation_id)
    # Only the primary process writes the folder's metadata and renames it; it alone removes it.
    if jax.process_index() == 0:
        _remove_until_gone(temporary)


def _remove_until_gone(temporary: pathlib.Path) -> None:
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
            if os.path.lexists(temporary):  # A writer was still adding files: try again.
                time.sleep(_PAUSE_SECONDS)
            continue
        time.sleep(_PAUSE_SECONDS)


def _end_threads(operation_id: str) -> None:
    try:
        from orbax.checkpoint._src.futures import future, synchronization
    except ImportError:  # pragma: no cover - depends on the Orbax release
        return
    thread_class: Any = getattr(future, "_SignalingThread", None)
    signal_class: Any = getattr(synchronization, "HandlerAwaitableSignal", None)
    if thread_class is None or signal_class is None:  # pragma: no cover - depends on the Orbax release
        return
    # The contract signal lists the others; setting it would garble that list.
    signals = [signal for signal in signal_class if signal.name != "AWAITABLE_SIGNALS_CONTRACT"]
    current = threading.current_thread()
    for _ in range(_MAX_ROUNDS):
        threads = [
            thread
            for thread in threading.enumerate()
            if isinstance(thread, thread_class)
            and thread is not current
            and getattr(thread, "_operation_id", None) == operation_id
        ]
        if not threads:
            return
        try:
            # Signals a folder that never came: the waiting writers then fail on their own.
            future.set_signals(signals, operation_id=operation_id)
        except Exception:  # pragma: no cover - a coordination service gone away; the threads time out
            return
        for thread in threads:
            # Thread.join itself: Orbax's join re-raises the thread's error, which the save already reported.
            threading.Thread.join(thread)
