"""tinax 0.2's behaviour where 0.3 says more: tinax-core's accommodations of 0.2.

0.2 let JAX's, NumPy's and chex's own errors and switches reach the caller. Others live where the
runtime needs them: ``validation.TypeAndValueError``, ``jax_compat.RuntimeValueError`` (and its
TypeError twin), ``TraceBudgetExceededError`` and the ``tinax.device._validation`` alias. This module
imports no JAX, so every member can share its exception types. chex is never imported, only looked
up in ``sys.modules``; its switches have no public reader, so its private state is read here alone.
If chex moves it, every budget is enforced and never reset, and the switch tests fail.
"""

from __future__ import annotations

import collections
import sys
import threading
from typing import Any, TypeVar, cast

from tinax._core import validation

FailureT = TypeVar("FailureT", bound=BaseException)

__all__ = [
    "DLPackBufferError",
    "DTypeEncodingError",
    "MissingPathError",
    "TypeAndAttributeError",
    "ValueOverflowError",
    "also_raised_as",
    "chex_asserts_disabled",
    "chex_counter_clears",
]


class DTypeEncodingError(validation.TypeAndValueError, UnicodeEncodeError):
    """A dtype string NumPy cannot even encode; also the ``UnicodeEncodeError`` tinax 0.2 let through."""

    def __init__(self, message: str, cause: UnicodeEncodeError) -> None:
        UnicodeEncodeError.__init__(self, cause.encoding, cause.object, cause.start, cause.end, cause.reason)
        self.message = message

    def __str__(self) -> str:
        return self.message


class MissingPathError(FileNotFoundError, ValueError):
    """No file at a path, or no usable path: a ValueError, and the FileNotFoundError tinax 0.2 raised.

    Built from a message alone, or as the system's errors are, ``(errno, message, filename)``.
    """


class ValueOverflowError(ValueError, OverflowError):
    """A number out of range, where tinax 0.2 raised OverflowError (an int leaf msgpack cannot store, say)."""


def also_raised_as(kind: type[FailureT], raised: type[BaseException]) -> type[FailureT]:
    """``kind`` that is also a ``raised``: a 0.3 failure that still meets the ``except`` of what 0.2 raised for it.

    One class per pair, built on first use (so the type is the same at every raise), named and pickled as
    ``kind`` with ``raised``; where ``kind`` already is a ``raised``, ``kind`` itself.
    """
    if issubclass(kind, raised):
        return kind
    twin = _PAIRS.get((kind, raised))
    if twin is None:
        namespace = {
            "__module__": kind.__module__,
            "__qualname__": kind.__qualname__,
            "__reduce__": _reduce_pair,
            "_pair": (kind, raised),
        }
        # setdefault: two threads raising it first still share one class.
        twin = _PAIRS.setdefault((kind, raised), type(kind.__name__, (kind, raised), namespace))
    return cast("type[FailureT]", twin)


_PAIRS: dict[tuple[type[BaseException], type[BaseException]], type[BaseException]] = {}


def _reduce_pair(error: BaseException) -> tuple[Any, ...]:
    kind, raised = type(error)._pair  # type: ignore[attr-defined]
    # The arguments and state the classes' own reduction gives (an OSError's filename, say).
    _, arguments, *rest = cast("tuple[Any, ...]", super(type(error), error).__reduce__())
    return (_rebuilt, (kind, raised, arguments), *rest)


def _rebuilt(kind: type[BaseException], raised: type[BaseException], args: tuple[Any, ...]) -> BaseException:
    return also_raised_as(kind, raised)(*args)


#: A ``BufferError`` raised while importing, outside the producer's own methods.
DLPackBufferError = also_raised_as(ValueError, BufferError)
#: A value of the wrong kind where tinax 0.2 let an upstream AttributeError through (a traced value, say).
TypeAndAttributeError = also_raised_as(TypeError, AttributeError)


#: The chex module that holds the switches (``DISABLE_ASSERTIONS`` and ``TRACE_COUNTER``).
CHEX_STATE_MODULE = "chex._src.asserts_internal"

# chex only adds int-hash keys or clears the whole counter, so this key goes exactly on a clear.
_CLEAR_MARKER = "tinax.jit trace budgets"

_lock = threading.Lock()
_marked_counter: collections.Counter[object] | None = None
_clears = 0


def chex_asserts_disabled() -> bool:
    """Returns whether ``chex.disable_asserts()`` is in force (False without chex)."""
    state = sys.modules.get(CHEX_STATE_MODULE)
    return getattr(state, "DISABLE_ASSERTIONS", False) is True


def chex_counter_clears() -> int:
    """How many ``chex.clear_trace_counter()`` runs were seen; budgets restart when it changes, as in 0.2.

    A marker key in chex's counter vanishes exactly when chex clears it; clears count once chex is imported.
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
