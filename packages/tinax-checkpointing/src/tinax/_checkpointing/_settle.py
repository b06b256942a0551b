"""Settling a failed Orbax save: no thread left waiting, no temporary folder left behind.

When an Orbax V1 save fails, its ``AsyncResponse`` raises at once, but the
save's other threads go on. Those that wait for the signal that the
checkpoint folder was created wait for it for Orbax's coordination timeout
(five minutes), and they are not daemon threads, so they hold the interpreter
at exit; those already writing leave a ``.orbax-checkpoint-tmp`` folder. This
module ends both: it gives the waiting threads their signal, so they run to
their own (failing) end, joins every thread of the save, and then removes the
temporary folder.

It reaches Orbax internals (its operation ids, signalling threads and
signals) through :mod:`~tinax._checkpointing._upstream_compat`. If they
move, settling does what it still can: the folder is removed either way.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import threading
import time

import jax

from tinax._checkpointing._upstream_compat import release_waiting_threads, save_threads_of

__all__ = ["settle_failed_save"]

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
    for _ in range(_MAX_ROUNDS):
        threads = save_threads_of(operation_id)
        # Signals a folder that never came: the waiting writers then fail on their own.
        if not threads or not release_waiting_threads(operation_id):
            return
        for thread in threads:
            # Thread.join itself: Orbax's join re-raises the thread's error, which the save already reported.
            threading.Thread.join(thread)
