"""Interpreter exit with saves still in flight: finish them where Python allows, report them where not.

Orbax writes through ``concurrent.futures`` thread pools, which stop taking
work in the first step of shutdown, before non-daemon threads are joined and
before ``atexit`` runs. Only a hook of that same first step, registered after
the pools' own (hooks run last-registered first), runs while Orbax can still
finish. Where Python no longer starts threads at shutdown (3.12 and later),
Orbax cannot finish either: the hook then names the saves that are lost
instead of waiting for them.
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING

from tinax._checkpointing._upstream_compat import register_before_thread_shutdown

if TYPE_CHECKING:
    from tinax._checkpointing._response import SaveResponse

__all__ = ["save_finished", "save_started"]

_lock = threading.Lock()
_unfinished: set[SaveResponse] = set()
_hook_registered: list[bool] = []


def save_started(save: SaveResponse) -> None:
    """Records a save in flight, and registers the exit hook on the first one.

    Orbax has been imported by then, so its pools registered their own hooks
    first and this one runs before theirs.

    Args:
      save: The save's response.
    """
    with _lock:
        _unfinished.add(save)
        if _hook_registered:
            return
        _hook_registered.append(True)
    register_before_thread_shutdown(_finish_saves)


def save_finished(save: SaveResponse) -> None:
    """Forgets a save that has succeeded or failed.

    Args:
      save: The save's response.
    """
    with _lock:
        _unfinished.discard(save)


def _finish_saves() -> None:
    with _lock:
        unfinished = list(_unfinished)
    if not unfinished:
        return
    if not _threads_can_start():
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


def _threads_can_start() -> bool:
    try:
        probe = threading.Thread(target=int)
        probe.start()
    except RuntimeError:
        return False
    probe.join()
    return True
