"""The one ``argnums`` check shared by every tinax differentiation transform.

JAX reads ``argnums=True`` as 1 and notices an index past the last parameter only at the first
call; :func:`check_argnums` catches both at wrap time.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence

from tinax._core import validation

__all__ = ["check_argnums"]

_POSITIONAL_KINDS = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def check_argnums(argnums: object, function: Callable[..., object]) -> int | tuple[int, ...]:
    """Validates ``argnums`` against ``function``'s positional parameters (no upper bound with ``*args``).

    An int stays an int and a sequence becomes a tuple, since JAX shapes the gradients differently;
    an index past the parameters is a :class:`TypeAndValueError` (JAX raises TypeError at call time).
    """
    limit = _positional_parameter_count(function)
    if isinstance(argnums, Sequence) and not isinstance(argnums, (str, bytes, bytearray)):
        indices = validation.require_sequence(
            argnums,
            "argnums",
            item_check=lambda item, name: _check_index(item, name, function, limit),
            non_empty=True,
            description="a sequence of ints >= 0",
        )
        validation.require_unique(indices, "argnums")
        return indices
    return _check_index(argnums, "argnums", function, limit)


def _check_index(value: object, name: str, function: Callable[..., object], limit: int | None) -> int:
    index = validation.require_non_negative_int(value, name)
    if limit is not None and index >= limit:
        owner = _function_name(function)
        if limit == 0:
            expected = f"the index of a positional parameter, but {owner} takes none"
        else:
            plural = "" if limit == 1 else "s"
            expected = f"an int in [0, {limit - 1}] because {owner} takes {limit} positional parameter{plural}"
        # JAX (and so tinax 0.2) raises TypeError at call time; our contract says ValueError: both.
        validation.fail_type_and_value(name, expected, value)
    return index


def _positional_parameter_count(function: Callable[..., object]) -> int | None:
    # None: no upper bound (*args, or an unknown signature JAX checks at call time).
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    kinds = [parameter.kind for parameter in signature.parameters.values()]
    if inspect.Parameter.VAR_POSITIONAL in kinds:
        return None
    return sum(kind in _POSITIONAL_KINDS for kind in kinds)


def _function_name(function: Callable[..., object]) -> str:
    name = getattr(function, "__qualname__", None) or getattr(function, "__name__", None)
    return f"{name}()" if isinstance(name, str) else "the function"
