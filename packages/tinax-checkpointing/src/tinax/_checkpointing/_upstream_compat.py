"""Every private upstream name tinax-checkpointing uses, in one place, each with a fallback.

Orbax's handler registry, its operation ids and signalling threads, and
Python's ``threading._register_atexit`` are not public APIs, so they are
reached only through the functions here. Each one says what it falls back
to where the name has moved, and ``tests/test_upstream_compat.py`` fails
loudly on the supported versions when one has, so a fallback is never taken
unnoticed. Orbax itself is imported only when one of these functions runs.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "HandlerLookup",
    "current_operation_id",
    "handler_lookup",
    "orbax_v1",
    "register_before_thread_shutdown",
    "release_waiting_threads",
    "save_threads_of",
]

#: Resolves the Orbax handler that would save a value: ``lookup(value, name)``
#: returns it, or raises ``LookupError`` (no handler) or ``ValueError``.
HandlerLookup = Callable[[object, str], object]


def orbax_v1() -> Any:
    """Orbax's public V1 module, imported on first use (it is slow to import and starts no backend)."""
    import orbax.checkpoint.experimental.v1 as module

    return module


def handler_lookup() -> HandlerLookup | None:
    """Orbax's own handler resolution for a save, or None where its private registry has moved.

    Orbax resolves handlers only after it has scheduled the folder creation;
    asking first lets a value without a handler be refused before anything
    is written. Fallback: None, and Orbax's own check during the save still
    applies.
    """
    try:
        from orbax.checkpoint.experimental.v1._src.context import context
        from orbax.checkpoint.experimental.v1._src.handlers import registration
    except ImportError:
        return None
    resolve = getattr(registration, "resolve_handler_for_save", None)
    if resolve is None:
        return None

    def lookup(value: object, name: str) -> object:
        registry = context.get_context().checkpointables_options.registry
        return resolve(registry, value, name=name)

    return lookup


def register_before_thread_shutdown(hook: Callable[[], None]) -> None:
    """Runs ``hook`` in the first step of interpreter shutdown, before ``concurrent.futures`` pools stop.

    Uses ``threading._register_atexit``: hooks registered there run
    last-registered first, before non-daemon threads are joined, so a hook
    registered after Orbax's pools registered theirs still sees them take
    work. Fallback: ``atexit.register``, which runs too late for a save to
    finish but still lets ``hook`` report it.
    """
    register = getattr(threading, "_register_atexit", None)
    if register is None:
        atexit.register(hook)
        return
    register(hook)


def current_operation_id() -> str | None:
    """The id of the Orbax operation started last in this process; None where Orbax's internals moved."""
    try:
        from orbax.checkpoint._src.futures import synchronization
    except ImportError:
        return None
    generator: Any = getattr(synchronization, "OperationIdGenerator", None)
    if generator is None:
        return None
    return str(generator.get_current_operation_id())


def save_threads_of(operation_id: str) -> list[threading.Thread]:
    """The live Orbax threads of one save operation, other than the calling thread; [] where Orbax's internals moved."""
    try:
        from orbax.checkpoint._src.futures import future
    except ImportError:
        return []
    thread_class: Any = getattr(future, "_SignalingThread", None)
    if thread_class is None:
        return []
    current = threading.current_thread()
    return [
        thread
        for thread in threading.enumerate()
        if isinstance(thread, thread_class)
        and thread is not current
        and getattr(thread, "_operation_id", None) == operation_id
    ]


def release_waiting_threads(operation_id: str) -> bool:
    """Sets every signal the threads of a save may wait on, so they run to their own end.

    Returns:
      False where Orbax's internals moved or the signals could not be set
      (the threads then end at Orbax's coordination timeout); True otherwise.
    """
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
