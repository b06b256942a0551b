"""``bounded_jit``: ``jax.jit`` with a trace budget checked at wrap time."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar, cast

import jax
from jax.sharding import Mesh

from tinax._core import validation
from tinax._jit._budget import TraceBudget, function_name, wrap_site
from tinax._jit._wrapped import BudgetedFunction, require_mesh

__all__ = ["bounded_jit"]

P = ParamSpec("P")
R = TypeVar("R")

_KEYWORD_KINDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def bounded_jit(
    function: Callable[P, R],
    *,
    max_traces: int,
    static_argnames: Sequence[str] = (),
    donate_argnames: Sequence[str] = (),
    mesh: Mesh | None = None,
) -> Callable[P, R]:
    """Compiles ``function`` with ``jax.jit`` and limits how often it is traced.

    Every argument is checked at wrap time, so a bad or doubly listed name fails here, not on a
    later call. Each trace of the Python body (the first call, and calls with new abstract
    arguments or static values) spends one trace; the call that would go over budget raises
    instead of compiling again. Cached calls do no extra work.

    Args:
      function: The function to compile.
      max_traces: How many times the function may be traced, at least 0 (0 runs only calls that
        trace nothing). Which traces count, and how chex switches and re-wrapping at the same place
        share budgets as in tinax 0.2: see the guide, "Compiling with a trace budget".
      static_argnames: Compile-time constant parameters, as for ``jax.jit``; a single ``str`` is one
        name. Each must be passable by keyword, unless ``function`` takes ``**kwargs``.
      donate_argnames: Parameters whose buffers may be reused for outputs, as for ``jax.jit``, with
        the same rules; a name may not be both static and donated.
      mesh: If given, every call (and ``lower``) runs inside ``jax.set_mesh(mesh)``; inside another
        trace, the enclosing trace must already run under it.

    Returns:
      A callable with ``function``'s signature, plus read-only ``trace_count`` (including wrappers
      sharing the budget), ``max_traces``, ``mesh``, ``__wrapped__``, and everything a ``jax.jit``
      function has (tinax 0.2 returned it): ``lower(...)`` (so ``.lower(...).compile()`` works),
      ``trace(...)``, ``eval_shape(...)`` and ``clear_cache()``, the first three under ``mesh``.

    Raises:
      TypeError: If ``function`` is not callable, or another argument has the wrong type.
      ValueError: If ``max_traces`` is negative, or a name or ``mesh`` is unusable (some also ``TypeError``, as in 0.2).
      TraceBudgetExceededError: When a call (or ``lower``, ``trace``, ...) would trace more than ``max_traces`` times.

    Examples:
      >>> import jax.numpy as jnp
      >>> from tinax.jit import bounded_jit
      >>> def scale(x, factor):
      ...     return x * factor
      >>> step = bounded_jit(scale, max_traces=1, static_argnames="factor")
      >>> step(jnp.ones(2), factor=3).tolist()
      [3.0, 3.0]
      >>> step(jnp.zeros(2), factor=3).tolist(), step.trace_count  # same shapes: no new trace
      ([0.0, 0.0], 1)
      >>> step(jnp.ones(2), factor=4)
      Traceback (most recent call last):
      ...
      tinax...TraceBudgetExceededError: ...
    """
    validation.require_callable(function, "function")
    # tinax 0.2 refused NumPy integers and a single str of names as the wrong type.
    widened = validation.is_non_python_int(max_traces) or isinstance(static_argnames, str)
    with validation.reported_as_both(widened or isinstance(donate_argnames, str)):
        budget_size = validation.require_non_negative_int(max_traces, "max_traces")
        static = _require_argnames(static_argnames, "static_argnames", function)
        donated = _require_argnames(donate_argnames, "donate_argnames", function)
        overlap = [name for name in donated if name in static]
        if overlap:
            raise ValueError(
                validation.expectation_message("donate_argnames", "disjoint from static_argnames", donate_argnames)
                + f"; both name {', '.join(repr(name) for name in overlap)}"
            )
        checked_mesh = require_mesh(mesh, "mesh")

    budget = TraceBudget(function, budget_size, static, site=wrap_site("bounded_jit"))
    # None, not empty lists: jax.jit refuses even those for a function without an inspectable signature.
    jitted = jax.jit(budget.counting(function), static_argnames=static or None, donate_argnames=donated or None)
    wrapped = BudgetedFunction(function, jitted, budget, checked_mesh, "bounded_jit")
    return cast("Callable[P, R]", wrapped)


def _require_argnames(value: object, name: str, function: Callable[..., Any]) -> tuple[str, ...]:
    """Checks ``static_argnames`` or ``donate_argnames`` against ``function``."""
    if isinstance(value, str):
        names: tuple[str, ...] = (validation.require_str(value, name),)
        labels: tuple[str, ...] = (name,)
    else:
        names = validation.require_sequence(
            value, name, item_check=validation.require_str, description="a str or a sequence of str"
        )
        labels = tuple(f"{name}[{index}]" for index in range(len(names)))
    validation.require_unique(names, name)
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return names  # Nothing to check against; jax.jit has the last word.
    if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters):
        return names
    keyword_names = [parameter.name for parameter in parameters if parameter.kind in _KEYWORD_KINDS]
    listed = ", ".join(repr(keyword) for keyword in keyword_names) or "none"
    for label, argname in zip(labels, names, strict=True):
        if argname not in keyword_names:
            validation.fail_value(
                label,
                f"a parameter of {function_name(function)} that can be passed by keyword ({listed})",
                argname,
            )
    return names
