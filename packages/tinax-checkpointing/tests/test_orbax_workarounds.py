"""The private upstream names the Orbax workarounds use: present on the supported versions, with working fallbacks.

A failure here means Orbax or Python moved a private name: the fallback in
``tinax._checkpointing._orbax_workarounds`` keeps tinax working, but the
guarantee it backs is weaker until the workaround is updated.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

import numpy as np
import pytest

from tinax._checkpointing import _orbax_workarounds as compat
from tinax._checkpointing._saving._response import SaveResponse
from tinax.checkpointing import save_checkpointables


def test_python_still_has_the_shutdown_hook_that_lets_saves_finish_at_exit():
    assert callable(getattr(threading, "_register_atexit", None)), "threading._register_atexit is gone"


def test_the_shutdown_hook_falls_back_to_atexit(monkeypatch):
    registered: list[Any] = []
    monkeypatch.delattr(threading, "_register_atexit")
    monkeypatch.setattr(atexit, "register", registered.append)
    monkeypatch.setattr(compat, "_exit_hook", [])
    monkeypatch.setattr(compat, "_in_flight", set())
    save = object()

    compat.finish_at_exit(save)
    compat.forget_at_exit(save)
    assert registered == [compat._finish_saves]


def test_orbax_still_resolves_handlers_before_a_save():
    lookup = compat.handler_lookup()
    assert lookup is not None, "Orbax's handler registry moved"
    assert lookup({"w": np.ones(2)}, "model") is not None
    with pytest.raises(LookupError):
        lookup(object(), "model")


def test_the_handler_lookup_falls_back_to_orbaxs_own_check(monkeypatch):
    from orbax.checkpoint.experimental.v1._src.handlers import registration

    monkeypatch.delattr(registration, "resolve_handler_for_save")
    assert compat.handler_lookup() is None


def test_orbax_still_names_its_save_operations_and_their_threads():
    from orbax.checkpoint._src.futures import future, synchronization

    assert isinstance(compat.current_operation_id(), str)
    assert hasattr(future, "_SignalingThread"), "Orbax's signalling thread class moved"
    assert callable(getattr(future, "set_signals", None)), "Orbax's set_signals moved"
    names = {signal.name for signal in synchronization.HandlerAwaitableSignal}
    assert "AWAITABLE_SIGNALS_CONTRACT" in names
    assert compat.save_threads_of("no such operation") == []


def test_orbax_internals_that_moved_fall_back_to_doing_nothing(monkeypatch):
    from orbax.checkpoint._src.futures import future, synchronization

    monkeypatch.delattr(synchronization, "OperationIdGenerator")
    monkeypatch.delattr(future, "_SignalingThread")
    monkeypatch.delattr(future, "set_signals")
    assert compat.current_operation_id() is None
    assert compat.save_threads_of("any") == []
    assert compat.release_waiting_threads("any") is False


def test_the_save_response_is_one_class_of_ours(tmp_path):
    first = save_checkpointables(tmp_path / "a", {"model": {"w": np.ones(2)}})
    second = save_checkpointables(tmp_path / "b", {"model": {"w": np.ones(2)}})
    first.result()
    second.result()
    assert type(first) is SaveResponse
    assert type(second) is SaveResponse


def test_orbax_still_runs_its_reads_through_run_sync_which_a_load_wraps(tmp_path):
    from orbax.checkpoint._src import asyncio_utils

    assert callable(getattr(asyncio_utils, "run_sync", None)), "Orbax's asyncio_utils.run_sync moved"
    with compat.finish_abandoned_reads():
        pass
    assert _run_sync_wrapped()
    # Outside a load the wrapper hands every coroutine to Orbax's own run_sync unchanged.
    assert asyncio_utils.run_sync(_answer()) == 42


async def _answer() -> int:
    return 42


def _run_sync_wrapped() -> bool:
    """Whether Orbax's ``run_sync`` is the wrapper a load puts in its place."""
    from orbax.checkpoint._src import asyncio_utils

    return getattr(getattr(asyncio_utils, "run_sync", None), "_tinax_wrapped", None) is not None


def test_a_moved_run_sync_falls_back_to_doing_nothing(monkeypatch):
    from orbax.checkpoint._src import asyncio_utils

    monkeypatch.delattr(asyncio_utils, "run_sync")
    with compat.finish_abandoned_reads():
        pass
    assert not _run_sync_wrapped()
