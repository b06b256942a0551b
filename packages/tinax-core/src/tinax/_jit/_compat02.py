"""The chex switches that tinax 0.2's trace budgets obeyed, kept for code written against 0.2.

tinax 0.2 counted traces with ``chex.assert_max_traces``, so two chex calls
reached its budgets, and reach ours when the program uses chex:

- ``chex.disable_asserts()`` lets every trace through. Traces are still
  counted, so once ``chex.enable_asserts()`` is called a budget spent in the
  meantime refuses the next trace.
- ``chex.clear_trace_counter()`` gives every budget back in full.

chex is an optional companion, never a dependency: it is looked up in
``sys.modules`` only, never imported. A program that has not imported chex
cannot have called either switch.

chex offers no public way to read either switch, so this module reads its
private state, and only here. When a chex release moves those names, the
fallback is to enforce every budget and never reset one; the tests of this
module fail once that fallback is taken.
"""

from __future__ import annotations

import collections
import sys
import threading

__all__ = ["chex_asserts_disabled", "chex_counter_clears"]

#: The chex module that holds the switches (``DISABLE_ASSERTIONS`` and ``TRACE_COUNTER``).
CHEX_STATE_MODULE = "chex._src.asserts_internal"

# A key placed in chex's trace counter. chex keys its own entries by integer
# hashes and only ever adds to them or clears the whole counter, so the key
# disappears exactly when chex.clear_trace_counter() runs.
_CLEAR_MARKER = "tinax.jit trace budgets"

_lock = threading.Lock()
_marked_counter: collections.Counter[object] | None = None
_clears = 0


def chex_asserts_disabled() -> bool:
    """Returns whether ``chex.disable_asserts()`` is in force (False without chex)."""
    state = sys.modules.get(CHEX_STATE_MODULE)
    return getattr(state, "DISABLE_ASSERTIONS", False) is True


def chex_counter_clears() -> int:
    """Returns how many runs of ``chex.clear_trace_counter()`` have been seen so far.

    A trace budget remembers this number when it counts a trace; a different
    number at its next trace means that chex's counters were cleared since,
    and the budget starts afresh as tinax 0.2's did. A clear is seen from the
    first trace counted after chex was imported onwards.
    """
    global _clears, _marked_counter
    state = sys.modules.get(CHEX_STATE_MODULE)
    counter = getattr(state, "TRACE_COUNTER", None)
    if not isinstance(counter, collections.Counter):
        return _clears
    with _lock:
        if _CLEAR_MARKER not in counter:
            if counter is _marked_counter:
                _clears += 1
            counter[_CLEAR_MARKER] = 0
            _marked_counter = counter
        return _clears
