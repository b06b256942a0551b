"""Trace counting with a budget, and the explanation given when it runs out."""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import threading
import types
import weakref
from collections.abc import Callable, Collection, Mapping
from typing import Any, NamedTuple, TypeVar

import jax

from tinax._core._compat02 import chex_asserts_disabled, chex_counter_clears
from tinax._core.jax_compat import is_tracer

__all__ = ["TraceBudget", "TraceBudgetExceededError", "function_name", "wrap_site"]

R = TypeVar("R")

# At most this many changes are spelled out in a budget error.
_MAX_REPORTED_CHANGES = 5


class TraceBudgetExceededError(RuntimeError, AssertionError):
    """A function wrapped by ``tinax.jit`` was about to be traced too often.

    An unexpected retrace usually means an argument's shape, dtype, weak type,
    sharding or static value varies between calls; the message names the function,
    its budget and the argument that differs from the previous trace. It is also an
    ``AssertionError``, the type tinax 0.2 raised, so code catching that still works.
    """


class _ArraySignature(NamedTuple):
    shape: tuple[int, ...]
    dtype: Any
    weak_type: bool
    sharding: Any

    def text(self) -> str:
        return f"{self.dtype}{list(self.shape)}" + (" (weak type)" if self.weak_type else "")


class _ValueSignature(NamedTuple):
    text_value: str

    def text(self) -> str:
        return self.text_value


class _Argument(NamedTuple):
    static: bool
    structure: Any  # A PyTreeDef for traced arguments, None for static ones.
    leaves: tuple[tuple[str, _ArraySignature | _ValueSignature], ...]

    def text(self) -> str:
        if len(self.leaves) == 1 and not self.leaves[0][0]:
            return self.leaves[0][1].text()
        return f"a pytree of {len(self.leaves)} leaves"


_Record = dict[str, _Argument]


def function_name(function: object) -> str:
    """Returns a readable name for a wrapped function, for messages."""
    for attribute in ("__qualname__", "__name__"):
        name = getattr(function, attribute, None)
        if isinstance(name, str) and name:
            return name
    text = _safe_repr(function)
    return text if len(text) <= 80 else text[:77] + "..."


def _ordinal(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def _safe_repr(value: object) -> str:
    try:
        return repr(value)
    except Exception:  # A broken __repr__ must not replace the budget error.
        return f"<unrepresentable {type(value).__name__}>"


def _leaf_record(leaf: object) -> _ArraySignature | _ValueSignature:
    if is_tracer(leaf):
        aval = jax.typeof(leaf)
        return _ArraySignature(
            shape=tuple(getattr(aval, "shape", ())),
            dtype=getattr(aval, "dtype", None),
            weak_type=bool(getattr(aval, "weak_type", False)),
            sharding=getattr(aval, "sharding", None),
        )
    return _ValueSignature(_safe_repr(leaf))


def _argument_record(value: object, *, static: bool) -> _Argument:
    if static:
        return _Argument(static=True, structure=None, leaves=(("", _ValueSignature(_safe_repr(value))),))
    pairs, structure = jax.tree_util.tree_flatten_with_path(value)
    leaves = tuple((jax.tree_util.keystr(path), _leaf_record(leaf)) for path, leaf in pairs)
    return _Argument(static=False, structure=structure, leaves=leaves)


def _sharding_change(old: _ArraySignature, new: _ArraySignature) -> str | None:
    if old.sharding == new.sharding:
        return None
    old_mesh, new_mesh = getattr(old.sharding, "mesh", None), getattr(new.sharding, "mesh", None)
    old_spec, new_spec = getattr(old.sharding, "spec", None), getattr(new.sharding, "spec", None)
    if old_mesh is None or old_mesh != new_mesh or old_spec is None or new_spec is None:
        return f"sharding {old.sharding} -> {new.sharding}"
    if len(old.shape) != len(new.shape) and _trimmed(old_spec) == _trimmed(new_spec):
        return None  # Only the rank differs, and the shape change already says so.
    # Within one mesh the partition specs tell the difference.
    return f"sharding spec {old_spec} -> {new_spec}"


def _trimmed(spec: Any) -> tuple[Any, ...]:
    entries = list(spec)
    while entries and entries[-1] is None:
        entries.pop()
    return tuple(entries)


def _leaf_changes(old: _ArraySignature | _ValueSignature, new: _ArraySignature | _ValueSignature) -> list[str]:
    if isinstance(old, _ArraySignature) and isinstance(new, _ArraySignature):
        changes = [
            f"{field} {getattr(old, field)} -> {getattr(new, field)}"
            for field in ("shape", "dtype", "weak_type")
            if getattr(old, field) != getattr(new, field)
        ]
        sharding_change = _sharding_change(old, new)
        if sharding_change is not None:
            changes.append(sharding_change)
        return changes
    if old != new:
        kind = "static value" if isinstance(old, _ValueSignature) and isinstance(new, _ValueSignature) else "value"
        return [f"{kind} {old.text()} -> {new.text()}"]
    return []


def _describe_changes(old: _Record, new: _Record) -> list[str]:
    changes: list[str] = []
    names = list(new) + [name for name in old if name not in new]
    for name in names:
        before, after = old.get(name), new.get(name)
        label = f"argument {name!r}"
        if before is None or after is None:
            before_text, after_text = ("not passed" if side is None else side.text() for side in (before, after))
            changes.append(f"{label} changed: {before_text} -> {after_text}")
            continue
        if before.static != after.static or before.structure != after.structure:
            changes.append(f"{label} changed: structure {before.structure} -> {after.structure}")
            continue
        for (path, old_leaf), (_, new_leaf) in zip(before.leaves, after.leaves, strict=True):
            leaf_changes = _leaf_changes(old_leaf, new_leaf)
            if leaf_changes:
                where = f"{label} at {path}" if path else label
                changes.append(f"{where} changed: {', '.join(leaf_changes)}")
    return changes


class _Spent:
    """Traces spent on one budget, shared by wrappers made at one place, as 0.2's ``chex.assert_max_traces`` did."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.previous: _Record | None = None
        self.previous_by: object = None
        self.clears = chex_counter_clears()


_sites_lock = threading.Lock()
# Code object -> (place of wrapping -> spent traces); weak, so counts go with the code.
_sites: weakref.WeakKeyDictionary[types.CodeType, dict[tuple[str, ...], _Spent]] = weakref.WeakKeyDictionary()


def wrap_site(kind: str) -> tuple[str, ...]:
    """Names of the calling functions (outermost first, ``tinax._jit`` frames skipped) plus ``kind``.

    No line numbers, matching tinax 0.2's per-place trace counts.
    """
    names: list[str] = []
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__")
        if not (isinstance(module, str) and module.startswith("tinax._jit")):
            names.append(frame.f_code.co_name)
        frame = frame.f_back
    names.reverse()
    names.append(kind)
    return tuple(names)


def _spent_for(function: Callable[..., Any], site: tuple[str, ...] | None) -> _Spent:
    """Shared count keyed by code object and site; callables without Python code get their own."""
    code = getattr(function, "__code__", None)
    if site is None or not isinstance(code, types.CodeType):
        return _Spent()
    with _sites_lock:
        places = _sites.setdefault(code, {})
        if site not in places:
            places[site] = _Spent()
        return places[site]


class TraceBudget:
    """Counts traces of one function and refuses those over budget, as tinax 0.2 did.

    Only traces with a tracer leaf count; chex switches apply (see ``tinax._core._compat02``), and budgets
    for the same code at the same :func:`wrap_site` share one count.
    """

    def __init__(
        self,
        function: Callable[..., Any],
        max_traces: int,
        static_argnames: Collection[str],
        site: tuple[str, ...] | None = None,
    ) -> None:
        self.function_name = function_name(function)
        self.max_traces = max_traces
        self._static_argnames = frozenset(static_argnames)
        try:
            self._signature: inspect.Signature | None = inspect.signature(function)
        except (TypeError, ValueError):
            self._signature = None
        self._spent = _spent_for(function, site)
        self._pending = threading.local()

    @property
    def count(self) -> int:
        """Traces admitted so far, including those of budgets sharing the count."""
        return self._spent.count

    def counting(self, inner: Callable[..., R]) -> Callable[..., R]:
        """Wraps ``inner`` to admit each trace first; ``__wrapped__`` keeps the signature for ``jax.jit``."""

        @functools.wraps(inner)
        def traced(*args: Any, **kwargs: Any) -> R:
            self.admit(args, kwargs)
            return inner(*args, **kwargs)

        return traced

    def counting_inside(
        self, outer: Callable[[Callable[..., Any]], Callable[..., R]], inner: Callable[..., Any]
    ) -> Callable[..., R]:
        """Returns ``outer(wrapped inner)`` that admits a trace only once ``inner`` runs.

        So a call the transformation refuses (``jax.vmap`` checking axes) spends nothing, as with tinax 0.2.
        """
        pending = self._pending

        @functools.wraps(inner)
        def admitted(*args: Any, **kwargs: Any) -> Any:
            stack = getattr(pending, "stack", None)
            if stack and stack[-1] is not None:
                record, stack[-1] = stack[-1], None
                self._admit_record(record)
            return inner(*args, **kwargs)

        transformed = outer(admitted)

        @functools.wraps(transformed)
        def traced(*args: Any, **kwargs: Any) -> R:
            stack = getattr(pending, "stack", None)
            if stack is None:
                stack = pending.stack = []
            stack.append(self._record_if_traced(args, kwargs))
            try:
                result: R = transformed(*args, **kwargs)
            finally:
                stack.pop()
            return result

        return traced

    def admit(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        """Counts one trace if any argument is traced; raises TraceBudgetExceededError over budget."""
        record = self._record_if_traced(args, kwargs)
        if record is not None:
            self._admit_record(record)

    def _record_if_traced(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> _Record | None:
        if not any(is_tracer(leaf) for leaf in jax.tree_util.tree_leaves((args, kwargs))):
            return None
        return self._record(args, kwargs)

    def _admit_record(self, record: _Record) -> None:
        clears = chex_counter_clears()
        enforced = not chex_asserts_disabled()
        spent = self._spent
        with spent.lock:
            if clears != spent.clears:
                spent.clears = clears
                spent.count = 0
            if enforced and spent.count >= self.max_traces:
                raise TraceBudgetExceededError(self._exceeded_message(record))
            spent.count += 1
            spent.previous = record
            spent.previous_by = weakref.ref(self)

    def _record(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> _Record:
        named: list[tuple[str, object]] = []
        bound = None
        if self._signature is not None:
            with contextlib.suppress(TypeError):
                bound = self._signature.bind(*args, **kwargs)
        if bound is None:
            named.extend((f"args[{index}]", value) for index, value in enumerate(args))
            named.extend(kwargs.items())
        else:
            for name, value in bound.arguments.items():
                kind = bound.signature.parameters[name].kind
                if kind is inspect.Parameter.VAR_POSITIONAL:
                    named.extend((f"{name}[{index}]", item) for index, item in enumerate(value))
                elif kind is inspect.Parameter.VAR_KEYWORD:
                    named.extend(value.items())
                else:
                    named.append((name, value))
        return {name: _argument_record(value, static=name in self._static_argnames) for name, value in named}

    def _exceeded_message(self, record: _Record) -> str:
        spent = self._spent
        attempt = _ordinal(spent.count + 1)
        head = (
            f"{self.function_name} was about to be traced for the {attempt} time, "
            f"over its budget of max_traces={self.max_traces}"
        )
        previous_by = spent.previous_by() if isinstance(spent.previous_by, weakref.ref) else None
        if spent.previous is not None and previous_by is not self:
            return (
                f"{head}; the previous trace was by another wrapper of the same function made at the same place "
                "(wrapped again, for example inside a loop or a function called more than once), and wrappers "
                "made there share one budget: wrap the function once and reuse the wrapper"
            )
        changes = [] if spent.previous is None else _describe_changes(spent.previous, record)
        if not changes:
            return (
                f"{head}; no argument's abstract value (shape, dtype, weak_type, sharding) or static value "
                "differs from the previous trace, so JAX's caches were probably cleared "
                "(jax.clear_caches) or a JAX configuration option changed"
            )
        if len(changes) > _MAX_REPORTED_CHANGES:
            hidden = len(changes) - _MAX_REPORTED_CHANGES
            changes = [*changes[:_MAX_REPORTED_CHANGES], f"and {hidden} more"]
        return f"{head}; compared with the previous trace, " + "; ".join(changes)
