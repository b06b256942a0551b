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

    Every argument is checked when the function is wrapped, so a bad argument
    name or a name listed as both static and donated fails here rather than
    on some later call. Each time JAX traces the function's Python body (the
    first call, and every call whose abstract arguments or static values are
    new) one trace of the budget is spent; the call that would go over budget
    raises instead of compiling again. Cached calls do no extra work.

    Args:
      function: The function to compile.
      max_traces: How many times the function may be traced, at least 0
        (0 lets only calls that trace nothing run, as in tinax 0.2).
        Traces started by ``lower``, ``trace`` or ``eval_shape``, by an
        enclosing transformation and traces that fail with an exception all
        count. As in tinax 0.2, a trace in which no argument is traced (all
        of them static, or none given) does not count, and while
        ``chex.disable_asserts()`` is in force no trace is refused (they
        still count); ``chex.clear_trace_counter()`` gives the budget back.
        Also as in tinax 0.2, wrapping the same function again at the same
        place (from the same chain of calling functions, such as in a loop
        or in a function called repeatedly) does not give the budget back:
        those wrappers count their traces together, each against its own
        ``max_traces``. A function made again from the same source (a
        lambda or closure) is the same function.
      static_argnames: Names of parameters that are compile-time constants,
        as for ``jax.jit``. A single ``str`` is one name. Each must be a
        parameter that can be passed by keyword, unless ``function`` takes
        ``**kwargs``.
      donate_argnames: Names of parameters whose buffers may be reused for
        the outputs, as for ``jax.jit``, with the same rules as
        ``static_argnames``. A name may not be both static and donated.
      mesh: If given, every call (and ``lower``) runs inside
        ``jax.set_mesh(mesh)``, so the function sees it as the ambient mesh.
        Called inside another trace, the enclosing trace must already run
        under this mesh.

    Returns:
      A callable with the signature of ``function``. It also has a read-only
      ``trace_count`` (traces so far, with those of the wrappers it shares
      the budget with), ``max_traces``, ``mesh`` and
      ``__wrapped__`` pointing at ``function``, and everything a ``jax.jit``
      function has (tinax 0.2 returned that function itself):
      ``lower(...)`` (so ``.lower(...).compile()`` and its
      ``cost_analysis()`` work), ``trace(...)``, ``eval_shape(...)`` and
      ``clear_cache()``, the first three under ``mesh`` if one is given.

    Raises:
      TypeError: If ``function`` is not callable, ``max_traces`` is not an
        int (bools are refused), an argument name is not a ``str``, or
        ``mesh`` is not a ``jax.sharding.Mesh``.
      ValueError: If ``max_traces`` is below 1, an argument name is empty,
        repeated, not a parameter that can be passed by keyword, or both
        static and donated, or ``mesh`` has no devices or a Manual axis.
        When ``max_traces`` is a NumPy integer or an argument's names are a
        single ``str`` (which tinax 0.2 refused as the wrong type), the
        error is also a ``TypeError``.
      TraceBudgetExceededError: When a call (or ``lower``, ``trace``,
        ``eval_shape``) would trace the function more than ``max_traces``
        times. The message names the argument that differs from the
        previous trace.

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
    # Empty name lists are passed as None: jax.jit refuses even an empty list
    # of names for a function whose signature cannot be inspected.
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
