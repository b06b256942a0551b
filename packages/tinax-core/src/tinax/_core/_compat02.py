"""tinax 0.2's behaviour where 0.3 says more: the accommodations of 0.2 in tinax-core.

tinax 0.2 let JAX's, NumPy's and chex's own behaviour reach the caller, and
code written against 0.2 relies on it. Each item here keeps one 0.2 behaviour
next to what 0.3 documents:

- a dtype string NumPy cannot even encode is also the ``UnicodeEncodeError``
  0.2 let through (:class:`DTypeEncodingError`);
- a ``BufferError`` while importing through DLPack is also a ``ValueError``,
  and a deleted producer also the ``TypeError`` 0.2 let through
  (:class:`DLPackBufferError`, :class:`DeletedProducerError`);
- a size that 0.2 refused as the wrong type stays a ``TypeError``
  (:class:`TooLargeIntegerError`);
- ``chex.disable_asserts()`` and ``chex.clear_trace_counter()`` reach the
  trace budgets of ``tinax.jit``, which 0.2 counted with chex
  (:func:`chex_asserts_disabled`, :func:`chex_counter_clears`).

Four accommodations live elsewhere, because the runtime needs them there:

- ``validation.TypeAndValueError`` (with ``fail_type_and_value`` and
  ``reported_as_both``): modules that must not import JAX (``tinax.device``,
  the ``tinax`` command) raise it, and this module imports JAX;
- ``jax_compat.RuntimeValueError``, also JAX's ``JaxRuntimeError``: building
  JAX's own exception types is ``jax_compat``'s part;
- ``TraceBudgetExceededError``, also 0.2's ``AssertionError``: a public class,
  documented where ``tinax.jit`` defines it;
- the ``sys.modules`` alias that lets 0.2's own tests import the device-index
  checks from ``tinax.device._validation``: it runs as ``tinax.device`` is
  imported.

chex is an optional companion, never a dependency: it is looked up in
``sys.modules`` only, never imported. A program that has not imported chex
cannot have called either switch. chex offers no public way to read either
switch, so this module reads its private state, and only here. When a chex
release moves those names, the fallback is to enforce every budget and never
reset one; the tests of the switches fail once that fallback is taken.
"""

from __future__ import annotations

import collections
import sys
import threading

from tinax._core import validation
from tinax._core.jax_compat import RuntimeValueError

__all__ = [
    "DLPackBufferError",
    "DTypeEncodingError",
    "DeletedProducerError",
    "TooLargeIntegerError",
    "chex_asserts_disabled",
    "chex_counter_clears",
]


class DTypeEncodingError(validation.TypeAndValueError, UnicodeEncodeError):
    """A dtype string that cannot even be encoded (a lone surrogate, say).

    NumPy raises ``UnicodeEncodeError`` there, which tinax 0.2 let through;
    this error is that too, besides the ``TypeError`` and ``ValueError``
    that every other unusable dtype raises.
    """

    def __init__(self, message: str, cause: UnicodeEncodeError) -> None:
        UnicodeEncodeError.__init__(self, cause.encoding, cause.object, cause.start, cause.end, cause.reason)
        self.message = message

    def __str__(self) -> str:
        return self.message


class DLPackBufferError(ValueError, BufferError):
    """A ``BufferError`` raised while importing, outside the producer's own methods."""


class DeletedProducerError(RuntimeValueError, TypeError):
    """A deleted (or donated) ``jax.Array`` handed to ``from_dlpack``.

    Like every deleted array tinax refuses, it is a ValueError that is also
    ``jax.errors.JaxRuntimeError``. It is a ``TypeError`` too, the type the
    deleted array's own ``__dlpack_device__`` raises (and tinax 0.2 let
    through), so code that catches that keeps working.
    """


class TooLargeIntegerError(RuntimeValueError, validation.TypeAndValueError):
    """A size too large for any array that tinax 0.2 refused with a ``TypeError``.

    That is a size given as a NumPy (not a Python) integer, which 0.2
    refused as a size, and a shape with an extent beyond the signed 64-bit
    range, which JAX's shape builders refuse as an argument of the wrong
    type. This error is a ``TypeError`` for those, besides what
    ``shapes.require_fits`` raises for any size that is too large.
    """


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
