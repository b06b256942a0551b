"""Argument checks shared by every tinax distribution.

Every public tinax function validates its arguments through these helpers so
that all error messages have one shape::

    <argument> must be <expectation>, got <value> (<type>)

The helpers follow the tinax error contract: a ``TypeError`` when the value is
the wrong kind of object, a ``ValueError`` when it is the right kind with a bad
value. Integers never accept ``bool``, even though ``bool`` subclasses ``int``.

This module is internal to the tinax family. Sibling distributions import it
through their bounded ``tinax-core`` requirement; it is not a public API.
"""

from __future__ import annotations

import contextlib
import operator
import os
import pathlib
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NoReturn, TypeVar

__all__ = [
    "TypeAndValueError",
    "describe",
    "expectation_message",
    "fail_type",
    "fail_type_and_value",
    "fail_value",
    "is_non_python_int",
    "reported_as_both",
    "require_bool",
    "require_callable",
    "require_existing_path",
    "require_instance",
    "require_int",
    "require_non_negative_int",
    "require_one_of",
    "require_optional_positive_int",
    "require_path",
    "require_positive_int",
    "require_sequence",
    "require_str",
    "require_str_mapping",
    "require_str_to_str_mapping",
    "require_unique",
    "require_utf8",
    "utf8_problem",
]

T = TypeVar("T")

_MAX_REPR = 80


class TypeAndValueError(TypeError, ValueError):
    """An argument refused where tinax 0.2 raised the other of the two types.

    The error contract gives a ``TypeError`` for the wrong kind of object and
    a ``ValueError`` for a bad value of the right kind. A few checks draw that
    line elsewhere than 0.2 did: 0.3 accepts a NumPy integer where an int is
    asked for (0.2 refused it as the wrong kind), and calls a dtype that
    NumPy cannot read the wrong kind (0.2 passed on NumPy's ``ValueError``).
    Those refusals are both, so code that catches either keeps working.
    """


def describe(value: object) -> str:
    """Describes a received value for an error message.

    Args:
      value: Any object.

    Returns:
      A short ``repr`` of the value followed by its type name in parentheses,
      for example ``"True (bool)"`` or ``"'abc' (str)"``. Long reprs are cut.
    """
    array_text = _describe_array(value)
    if array_text is not None:
        return array_text
    try:
        text = repr(value)
    except Exception:  # A broken __repr__ must not hide the real error.
        text = "<unrepresentable>"
    if len(text) > _MAX_REPR:
        text = text[: _MAX_REPR - 3] + "..."
    return f"{text} ({type(value).__name__})"


def expectation_message(name: str, expected: str, got: object) -> str:
    """Builds the one message shape that tinax errors use.

    Args:
      name: The argument, as the caller wrote it (for example ``"max_traces"``
        or ``"arrays[2]"``).
      expected: What was expected, phrased to follow "must be".
      got: The received value.

    Returns:
      ``"<name> must be <expected>, got <describe(got)>"``.
    """
    return f"{name} must be {expected}, got {describe(got)}"


def fail_type(name: str, expected: str, got: object) -> NoReturn:
    """Raises a ``TypeError`` in the shared message shape."""
    raise TypeError(expectation_message(name, expected, got))


def fail_value(name: str, expected: str, got: object) -> NoReturn:
    """Raises a ``ValueError`` in the shared message shape."""
    raise ValueError(expectation_message(name, expected, got))


def fail_type_and_value(name: str, expected: str, got: object) -> NoReturn:
    """Raises a :class:`TypeAndValueError` in the shared message shape."""
    raise TypeAndValueError(expectation_message(name, expected, got))


def is_non_python_int(value: object) -> bool:
    """Returns whether ``value`` is an integer other than a Python ``int`` (or bool).

    A NumPy integer scalar, for example: :func:`require_int` accepts those,
    where tinax 0.2 refused them as the wrong type. The answer comes from the
    type, dtype and rank alone: an array's value is never read (that would
    wait for a device).
    """
    if isinstance(value, (int, bool)) or _is_numpy_bool(value) or not hasattr(type(value), "__index__"):
        return False
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return True
    return getattr(dtype, "kind", None) in {"i", "u"} and getattr(value, "ndim", 0) == 0


@contextlib.contextmanager
def reported_as_both(widened: bool) -> Iterator[None]:
    """Reports the checks in the block as :class:`TypeAndValueError` after a widening.

    tinax 0.2 checked its arguments in order and raised at the first it
    refused. Where an argument is one that 0.3 accepts and 0.2 refused (a
    NumPy integer, a single ``str`` of names, a raw key), a later argument's
    plain ``TypeError`` or ``ValueError`` is raised as both, because 0.2
    raised its own error, for the widened argument, with whichever type
    applied there.

    Args:
      widened: Whether some argument of the call was accepted only as a
        widening over tinax 0.2.
    """
    try:
        yield
    except (TypeError, ValueError) as error:
        if not widened or type(error) not in {TypeError, ValueError}:
            raise
        raise TypeAndValueError(*error.args).with_traceback(error.__traceback__) from error.__cause__


def require_bool(value: object, name: str) -> bool:
    """Checks that a flag is a real ``bool``.

    Truthy stand-ins such as ``1`` or ``"yes"`` are refused: a flag that picks
    a copy or overwrite policy must be stated, not inferred.

    Args:
      value: The received value.
      name: The argument name for the message.

    Returns:
      The value.

    Raises:
      TypeError: If the value is not a ``bool``.
    """
    if not isinstance(value, bool):
        fail_type(name, "a bool", value)
    return value


def require_int(
    value: object,
    name: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    bounds_text: str | None = None,
) -> int:
    """Checks that a value is an integer (never a bool) within bounds.

    NumPy integer scalars are accepted and returned as Python ``int``.

    Args:
      value: The received value.
      name: The argument name for the message.
      minimum: Smallest allowed value, inclusive, or None for no bound.
      maximum: Largest allowed value, inclusive, or None for no bound.
      bounds_text: How to write the allowed range in the message; derived
        from the bounds when omitted.

    Returns:
      The value as a Python ``int``.

    Raises:
      TypeError: If the value is a bool or not an integer.
      ValueError: If the value is outside the bounds. For an integer that
        is not a Python ``int`` (a NumPy integer, say) it is a
        :class:`TypeAndValueError`, as tinax 0.2 refused those with a
        ``TypeError``.
    """
    expected = "an int" + (f" {bounds_text}" if bounds_text else _bounds_text(minimum, maximum))
    if isinstance(value, bool) or _is_numpy_bool(value):
        fail_type(name, expected, value)
    try:
        as_int = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        fail_type(name, expected, value)
    if (minimum is not None and as_int < minimum) or (maximum is not None and as_int > maximum):
        if not isinstance(value, int):
            # tinax 0.2 took Python ints only and refused any other integer
            # (NumPy's included) with a TypeError, whatever its value.
            fail_type_and_value(name, expected, value)
        fail_value(name, expected, value)
    return as_int


def require_positive_int(value: object, name: str) -> int:
    """Checks for an integer count that is at least 1 (bool refused)."""
    return require_int(value, name, minimum=1, bounds_text=">= 1")


def require_non_negative_int(value: object, name: str) -> int:
    """Checks for an integer step or index that is at least 0 (bool refused)."""
    return require_int(value, name, minimum=0, bounds_text=">= 0")


def require_optional_positive_int(value: object, name: str) -> int | None:
    """Like :func:`require_positive_int`, but also accepts None."""
    if value is None:
        return None
    return require_int(value, name, minimum=1, bounds_text=">= 1 or None")


def require_str(value: object, name: str, *, allow_empty: bool = False) -> str:
    """Checks for a string, non-empty unless ``allow_empty``.

    Raises:
      TypeError: If the value is not a ``str``.
      ValueError: If the string is empty and that is not allowed.
    """
    expected = "a str" if allow_empty else "a non-empty str"
    if not isinstance(value, str):
        fail_type(name, expected, value)
    if not allow_empty and not value:
        fail_value(name, expected, value)
    return value


def require_one_of(value: T, name: str, choices: Collection[Hashable]) -> T:
    """Checks that a value is one of a fixed set of choices.

    Args:
      value: The received value.
      name: The argument name for the message.
      choices: The allowed values, in the order the message should list them.

    Returns:
      The value.

    Raises:
      TypeError: If the value's type matches none of the choices' types.
      ValueError: If the value has a valid type but is not a choice.
    """
    listed = ", ".join(repr(choice) for choice in choices)
    expected = f"one of {listed}"
    choice_types = {type(choice) for choice in choices}
    if type(value) not in choice_types:
        fail_type(name, expected, value)
    try:
        known = value in choices
    except TypeError:  # Unhashable values cannot be a choice.
        known = False
    if not known:
        fail_value(name, expected, value)
    return value


def require_instance(value: object, name: str, types: type[T] | tuple[type[T], ...], expected: str) -> T:
    """Checks ``isinstance(value, types)``.

    Args:
      value: The received value.
      name: The argument name for the message.
      types: A class or tuple of classes.
      expected: How to describe the expected kind, for example
        ``"a jax.sharding.Mesh"``.

    Returns:
      The value, narrowed to the expected type.

    Raises:
      TypeError: If the value is not an instance.
    """
    if not isinstance(value, types):
        fail_type(name, expected, value)
    return value


def require_callable(value: object, name: str) -> Callable[..., Any]:
    """Checks that a value can be called.

    Raises:
      TypeError: If the value is not callable.
    """
    if not callable(value):
        fail_type(name, "callable", value)
    return value


def require_sequence(
    value: object,
    name: str,
    *,
    item_check: Callable[[object, str], T] | None = None,
    non_empty: bool = False,
    description: str = "a sequence",
) -> tuple[T, ...]:
    """Checks for a finite, ordered sequence and optionally each item.

    A bare ``str`` or ``bytes`` is refused: it is a sequence of characters,
    and treating it as one is almost always a caller mistake.

    Args:
      value: The received value.
      name: The argument name; items are reported as ``name[i]``.
      item_check: Called as ``item_check(item, f"{name}[{i}]")`` for each item;
        its return value replaces the item. It raises for bad items.
      non_empty: Whether an empty sequence is refused.
      description: How to describe the expected sequence in messages.

    Returns:
      The items as a tuple.

    Raises:
      TypeError: If the value is not a sequence, or an item check raises it.
      ValueError: If the sequence is empty and ``non_empty``, or an item
        check raises it.
    """
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, Sequence):
        fail_type(name, description, value)
    items = tuple(value)
    if non_empty and not items:
        fail_value(name, f"a non-empty {description.removeprefix('a ')}", value)
    if item_check is None:
        return items
    return tuple(item_check(item, f"{name}[{index}]") for index, item in enumerate(items))


def require_unique(items: Iterable[Hashable], name: str) -> None:
    """Checks that no item repeats.

    Raises:
      ValueError: Naming the first repeated item.
    """
    seen: set[Hashable] = set()
    for item in items:
        if item in seen:
            raise ValueError(f"{name} must not repeat items, got {item!r} more than once")
        seen.add(item)


def utf8_problem(text: str) -> str | None:
    r"""Says why ``text`` cannot be written as UTF-8, or returns None if it can.

    A Python str that UTF-8 cannot encode holds a lone surrogate (from a
    ``surrogateescape`` decode, or a ``\ud800`` JSON escape, say).

    Args:
      text: The str to check.

    Returns:
      None, or the problem as a phrase to follow the str's name, such as
      ``"contains a lone surrogate '\ud800' at index 3, which UTF-8 cannot encode"``.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"contains a lone surrogate {text[error.start]!r} at index {error.start}, which UTF-8 cannot encode"
    return None


def require_utf8(text: str, name: str) -> bytes:
    """Encodes a str as UTF-8, or refuses it naming the argument.

    Args:
      text: The str to encode.
      name: What the str is, for the message, such as ``"keys of state"``.

    Returns:
      The UTF-8 bytes of ``text``.

    Raises:
      UnicodeEncodeError: If ``text`` holds a lone surrogate. It is a
        ValueError, and its message is ``"<name> contains a lone surrogate ..."``.
    """
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise UnicodeEncodeError(
            error.encoding, error.object, error.start, error.end, f"{name} {utf8_problem(text)}"
        ) from None


def require_path(value: object, name: str) -> pathlib.Path:
    """Checks for a ``str`` or ``os.PathLike[str]`` and returns a ``Path``.

    Raises:
      TypeError: If the value is neither (``bytes`` paths included).
      ValueError: If the path is empty.
    """
    expected = "a str or os.PathLike[str] path"
    if not isinstance(value, (str, os.PathLike)):
        fail_type(name, expected, value)
    text = os.fspath(value)
    if not isinstance(text, str):
        fail_type(name, expected, value)
    if not text:
        fail_value(name, "a non-empty path", value)
    return pathlib.Path(text)


def require_existing_path(value: object, name: str) -> pathlib.Path:
    """Like :func:`require_path`, and the path must exist.

    Raises:
      TypeError: If the value is not a path.
      FileNotFoundError: If nothing exists at the path.
    """
    path = require_path(value, name)
    if not path.exists():
        raise FileNotFoundError(f"{name} must name an existing path, got {str(path)!r} which does not exist")
    return path


def require_str_mapping(value: object, name: str) -> Mapping[str, Any]:
    """Checks for a mapping whose keys are all ``str``.

    Raises:
      TypeError: If the value is not a mapping or a key is not a ``str``.
    """
    if not isinstance(value, Mapping):
        fail_type(name, "a mapping with str keys", value)
    for key in value:
        if not isinstance(key, str):
            fail_type(f"keys of {name}", "str", key)
    return value


def require_str_to_str_mapping(value: object, name: str) -> dict[str, str]:
    """Checks for a mapping of ``str`` to ``str`` (metadata, headers).

    Returns:
      A plain ``dict`` copy, so later mutation of the argument is harmless.

    Raises:
      TypeError: If the value is not a mapping, or a key or value is not a
        ``str``.
    """
    mapping = require_str_mapping(value, name)
    for key, item in mapping.items():
        if not isinstance(item, str):
            fail_type(f"{name}[{key!r}]", "a str", item)
    return dict(mapping)


def _describe_array(value: object) -> str | None:
    # Arrays are shown by their abstract value: printing data is slow for large
    # arrays, impossible for tracers, and rarely what explains the error.
    module = type(value).__module__
    is_numpy_array = module.startswith("numpy") and type(value).__name__ == "ndarray"
    if not (is_numpy_array or module.startswith(("jax", "jaxlib"))) or not hasattr(value, "shape"):
        return None
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return None
    shape = ", ".join(str(extent) for extent in value.shape)
    kind = "numpy.ndarray" if is_numpy_array else "jax.Array"
    if "Tracer" in type(value).__name__:
        kind = "traced jax.Array"
    return f"{dtype}[{shape}] ({kind})"


def _bounds_text(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f" in [{minimum}, {maximum}]"
    if minimum is not None:
        return f" >= {minimum}"
    if maximum is not None:
        return f" <= {maximum}"
    return ""


def _is_numpy_bool(value: object) -> bool:
    # numpy.bool_ implements __index__ in some versions; treat it as a bool.
    return type(value).__name__ in {"bool_", "bool"} and type(value).__module__ == "numpy"
