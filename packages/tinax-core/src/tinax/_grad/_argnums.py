"""The one ``argnums`` check shared by every tinax differentiation transform.

JAX treats ``argnums=True`` as ``argnums=1`` and only notices an index past
the last parameter when the transformed function is first called. Every
transform in :mod:`tinax.grad` runs its ``argnums`` through
:func:`check_argnums` instead, so those mistakes surface when the function is
wrapped, with the shared tinax message shape.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence

from tinax._core import validation

__all__ = ["check_argnums"]

_POSITIONAL_KINDS = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def check_argnums(argnums: object, function: Callable[..., object]) -> int | tuple[int, ...]:
    """Validates ``argnums`` for a differentiation transform of ``function``.

    A single index stays a single ``int`` and a sequence becomes a ``tuple``,
    because JAX shapes the gradient differently for the two (one gradient
    against a tuple of gradients).

    Args:
      argnums: The positional parameter index, or sequence of indices, to
        differentiate against.
      function: The function being transformed. Its signature bounds the
        indices; when it has ``*args`` or cannot be inspected, only the lower
        bound applies.

    Returns:
      The index as a Python ``int``, or the indices as a tuple of ``int``.

    Raises:
      TypeError: If ``argnums`` is a bool, is neither an integer nor a
        sequence, or holds an item that is a bool or not an integer.
      ValueError: If the sequence is empty, an index is negative, or an index
        repeats.
      TypeAndValueError: If an index names no positional parameter of
        ``function`` (a ``TypeError`` too, as JAX raises at call time).
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
        # JAX raises TypeError for this when the function is called, and tinax
        # 0.2 let that through; refusing it early is a ValueError by our
        # contract, so it is both.
        validation.fail_type_and_value(name, expected, value)
    return index


def _positional_parameter_count(function: Callable[..., object]) -> int | None:
    # None means "no upper bound": either *args takes any number of positional
    # arguments, or the signature is unknown and JAX will check at call time.
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    count = 0
    for parameter in signature.parameters.values():
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            return None
        if parameter.kind in _POSITIONAL_KINDS:
            count += 1
    return count


def _function_name(function: Callable[..., object]) -> str:
    name = getattr(function, "__qualname__", None) or getattr(function, "__name__", None)
    return f"{name}()" if isinstance(name, str) else "the function"
