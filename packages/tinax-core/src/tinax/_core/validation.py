"""Argument checks shared by every tinax distribution (internal, not a public API).

Messages have one shape, ``<argument> must be <expectation>, got <value> (<type>)``;
a wrong kind of object is a ``TypeError``, a bad value of the right kind a
``ValueError``. Integers never accept ``bool``.
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
    """Refusal where tinax 0.2 raised the other type (NumPy ints, unreadable dtypes), so catching either works."""


def describe(value: object) -> str:
    """Short ``repr`` plus type name for messages, e.g. ``"True (bool)"``; arrays show only dtype and shape."""
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
    """Returns ``"<name> must be <expected>, got <describe(got)>"``."""
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
    """Whether ``value`` is a non-``int`` integer scalar (NumPy's, say), judged without reading device data."""
    if isinstance(value, (int, bool)) or _is_numpy_bool(value) or not hasattr(type(value), "__index__"):
        return False
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return True
    return getattr(dtype, "kind", None) in {"i", "u"} and getattr(value, "ndim", 0) == 0


@contextlib.contextmanager
def reported_as_both(widened: bool) -> Iterator[None]:
    """Re-raises plain TypeError/ValueError as :class:`TypeAndValueError` when ``widened``.

    tinax 0.2 refused the widened argument first, with whichever type applied there.
    """
    try:
        yield
    except (TypeError, ValueError) as error:
        if not widened or type(error) not in {TypeError, ValueError}:
            raise
        raise TypeAndValueError(*error.args).with_traceback(error.__traceback__) from error.__cause__


def require_bool(value: object, name: str) -> bool:
    """Checks for a real ``bool``; truthy stand-ins are refused since policy flags must be stated."""
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
    """Checks for an integer (never bool) within inclusive bounds and returns it as ``int``.

    Out-of-bounds non-``int`` integers raise :class:`TypeAndValueError`: 0.2 refused them as a type.
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
            # tinax 0.2 refused any non-int integer with a TypeError.
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
    """Checks for a ``str``, non-empty unless ``allow_empty``."""
    expected = "a str" if allow_empty else "a non-empty str"
    if not isinstance(value, str):
        fail_type(name, expected, value)
    if not allow_empty and not value:
        fail_value(name, expected, value)
    return value


def require_one_of(value: T, name: str, choices: Collection[Hashable]) -> T:
    """Checks ``value`` is among ``choices``: TypeError if no choice has its type, else ValueError."""
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
    """Checks ``isinstance(value, types)``; ``expected`` describes the kind in the message."""
    if not isinstance(value, types):
        fail_type(name, expected, value)
    return value


def require_callable(value: object, name: str) -> Callable[..., Any]:
    """Checks that a value can be called."""
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
    """Checks for a sequence (``str``/``bytes`` refused); ``item_check(item, "name[i]")`` may replace items."""
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, Sequence):
        fail_type(name, description, value)
    items = tuple(value)
    if non_empty and not items:
        fail_value(name, f"a non-empty {description.removeprefix('a ')}", value)
    if item_check is None:
        return items
    return tuple(item_check(item, f"{name}[{index}]") for index, item in enumerate(items))


def require_unique(items: Iterable[Hashable], name: str) -> None:
    """Raises ValueError naming the first repeated item."""
    seen: set[Hashable] = set()
    for item in items:
        if item in seen:
            raise ValueError(f"{name} must not repeat items, got {item!r} more than once")
        seen.add(item)


def utf8_problem(text: str) -> str | None:
    """Says why ``text`` cannot be UTF-8 encoded (a lone surrogate), as a phrase; None if it can."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"contains a lone surrogate {text[error.start]!r} at index {error.start}, which UTF-8 cannot encode"
    return None


def require_utf8(text: str, name: str) -> bytes:
    """Encodes ``text`` as UTF-8, or raises UnicodeEncodeError (a ValueError) starting with ``name``."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise UnicodeEncodeError(
            error.encoding, error.object, error.start, error.end, f"{name} {utf8_problem(text)}"
        ) from None


def require_path(value: object, name: str) -> pathlib.Path:
    """Checks for a non-empty ``str`` or ``os.PathLike[str]`` (not bytes) and returns a ``Path``."""
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
    """Like :func:`require_path`, and raises FileNotFoundError if nothing exists there."""
    path = require_path(value, name)
    if not path.exists():
        raise FileNotFoundError(f"{name} must name an existing path, got {str(path)!r} which does not exist")
    return path


def require_str_mapping(value: object, name: str) -> Mapping[str, Any]:
    """Checks for a mapping whose keys are all ``str``."""
    if not isinstance(value, Mapping):
        fail_type(name, "a mapping with str keys", value)
    for key in value:
        if not isinstance(key, str):
            fail_type(f"keys of {name}", "str", key)
    return value


def require_str_to_str_mapping(value: object, name: str) -> dict[str, str]:
    """Checks for a ``str`` to ``str`` mapping and returns a plain ``dict`` copy."""
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
