"""The response of a save: a watcher thread waits for Orbax, so the end of a save is never missed.

Imported only when a save runs: it inherits Orbax's ``AsyncResponse`` (the type tinax 0.2 published).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import threading
from collections.abc import Callable
from typing import Any

import orbax.checkpoint.experimental.v1 as ocp

from tinax._checkpointing._compat02 import background_failure, root_message
from tinax._checkpointing._names import ORBAX_TMP_SUFFIX
from tinax._checkpointing._orbax_workarounds import finish_at_exit, forget_at_exit, settle_failed_save

__all__ = ["SaveResponse"]


class SaveResponse(ocp.AsyncResponse[None]):  # type: ignore[misc]  # mypy sees Orbax as untyped (Any)
    """Waits for an Orbax save in its own thread, releasing the destination's claim even if nobody calls ``result``.

    A failed save is settled (threads ended, temporary folder removed) before :meth:`result` may raise.
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
        finish_at_exit(self)
        self._watcher = threading.Thread(target=self._watch, name=f"tinax-save:{destination.name}", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        try:
            self._inner.result()
        except BaseException as error:  # Kept for result(); a save failure must never be swallowed.
            self._error = error
            # Best effort, before result() may raise: no Orbax thread or temporary folder outlives the save.
            with contextlib.suppress(Exception):
                settle_failed_save(
                    self._operation_id, self.destination.with_name(self.destination.name + ORBAX_TMP_SUFFIX)
                )
        finally:
            self._release()
            forget_at_exit(self)
            with self._lock:
                self._done.set()
                callbacks, self._callbacks = self._callbacks, []
        if self._error is None:
            for callback in callbacks:
                callback(None)

    def result(self, timeout: float | None = None) -> None:
        """Waits up to ``timeout`` s (``TimeoutError``); a failure raises ``background_failure``'s error."""
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
                f"({root_message(self._error)}); {outcome}",
                self._error,
            )

    def on_complete(self, callback: Callable[[None], None]) -> None:
        """Calls ``callback(None)`` once the save has succeeded (at once if it has); never if it fails."""
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        if self._error is None:
            callback(None)
