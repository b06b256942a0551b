"""The callable returned by ``bounded_jit`` and ``batched_jit``."""

from __future__ import annotations

import functools
import operator
import types
from collections.abc import Callable
from typing import Any, cast

import jax
from jax.sharding import AxisType, Mesh

from tinax._core import validation
from tinax._core.jax_compat import tracing_in_progress
from tinax._jit._budget import TraceBudget

__all__ = ["BudgetedFunction", "require_mesh"]


def require_mesh(value: object, name: str) -> Mesh | None:
    """Checks an optional mesh that ``jax.set_mesh`` can enter.

    Raises:
      TypeError: If the value is neither None nor a ``jax.sharding.Mesh``.
      ValueError: If the mesh has no devices or has a Manual axis.
    """
    if value is None:
        return None
    mesh = validation.require_instance(value, name, Mesh, "None or a jax.sharding.Mesh")
    if mesh.devices.size == 0:
        # JAX builds such a mesh without complaint, but nothing can run on it.
        validation.fail_value(name, "None or a mesh with at least one device", mesh)
    if AxisType.Manual in mesh.axis_types:
        validation.fail_value(name, "None or a mesh without Manual axes (jax.set_mesh refuses them)", mesh)
    return mesh


class BudgetedFunction:
    """A jitted function with a trace budget and an optional ambient mesh.

    Calling it calls the jitted function; with a mesh, the call runs inside
    ``jax.set_mesh(mesh)``. ``trace_count`` and ``max_traces`` report the
    budget. Everything else a ``jax.jit`` function offers (``lower``,
    ``trace``, ``eval_shape``, ``clear_cache`` and the rest) is the jitted
    function's own, as in tinax 0.2, which returned the ``jax.jit`` function
    itself; with a mesh, ``lower``, ``trace`` and ``eval_shape`` also run
    under it. Each of them traces the function only where ``jax.jit`` has no
    matching trace cached, and such a trace counts towards the budget.
    """

    # Calls go straight to ``_dispatch``: the property hands back the jitted
    # function (or the mesh-entering method) without running a Python frame,
    # so a cached call without a mesh costs about what a raw ``jax.jit`` call
    # costs (benchmarks/bench_jit.py measures it).
    __call__ = property(operator.attrgetter("_dispatch"))

    _dispatch: Callable[..., Any]

    def __init__(
        self,
        function: Callable[..., Any],
        jitted: Any,
        budget: TraceBudget,
        mesh: Mesh | None,
        kind: str,
    ) -> None:
        # First, so that nothing copied from ``function.__dict__`` shadows the
        # attributes set below.
        functools.update_wrapper(self, function)
        self._jitted = jitted
        self._budget = budget
        self._mesh = mesh
        self._kind = kind
        self._dispatch = jitted if mesh is None else self._call_under_mesh

    @property
    def trace_count(self) -> int:
        """How many traces the budget has admitted, with those of the wrappers sharing it."""
        return self._budget.count

    @property
    def max_traces(self) -> int:
        """The trace budget given at wrap time."""
        return self._budget.max_traces

    @property
    def mesh(self) -> Mesh | None:
        """The mesh entered around every call, or None."""
        return self._mesh

    def lower(self, *args: Any, **kwargs: Any) -> jax.stages.Lowered:
        """Lowers the function for these arguments, as ``jax.jit(...).lower`` does.

        Returns:
          The ``jax.stages.Lowered`` object, ready for ``compile()``.

        Raises:
          TraceBudgetExceededError: If tracing would exceed the budget.
        """
        return self._staged(self._jitted.lower, args, kwargs)  # type: ignore[no-any-return]

    def trace(self, *args: Any, **kwargs: Any) -> jax.stages.Traced:
        """Traces the function for these arguments, as ``jax.jit(...).trace`` does.

        Returns:
          The ``jax.stages.Traced`` object, with its jaxpr and ``lower()``.

        Raises:
          TraceBudgetExceededError: If tracing would exceed the budget.
        """
        return self._staged(self._jitted.trace, args, kwargs)  # type: ignore[no-any-return]

    def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
        """Returns the shapes and dtypes of the outputs, as ``jax.jit(...).eval_shape`` does.

        Returns:
          A pytree of ``jax.ShapeDtypeStruct`` in the structure of the outputs.

        Raises:
          TraceBudgetExceededError: If tracing would exceed the budget.
        """
        return self._staged(self._jitted.eval_shape, args, kwargs)

    def clear_cache(self) -> None:
        """Clears the compiled function's cache, as ``jax.jit(...).clear_cache`` does.

        The budget is not given back: the next call traces again, and that
        trace counts, as in tinax 0.2.
        """
        self._jitted.clear_cache()

    def __getattr__(self, name: str) -> Any:
        # The rest of the jax.jit function's interface (``_cache_size`` and
        # the like, which tests use to count compilations) is its own.
        # Special names are left alone, so copying or pickling an instance
        # never reaches a half-built one's jitted function.
        if name.startswith("__") or name == "_jitted":
            raise AttributeError(name)
        return getattr(self._jitted, name)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(dir(self._jitted)))

    def _staged(self, stage: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self._mesh is None:
            return stage(*args, **kwargs)
        return self._under_mesh(stage, args, kwargs)

    def _call_under_mesh(self, *args: Any, **kwargs: Any) -> Any:
        if tracing_in_progress():
            return self._call_inside_trace(self._jitted, args, kwargs)
        # jax.set_mesh switches the mesh when called; its result is used
        # directly, without a generator-based wrapper, on this hot path.
        with jax.set_mesh(self._mesh):
            return self._jitted(*args, **kwargs)

    def _under_mesh(self, call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if tracing_in_progress():
            return self._call_inside_trace(call, args, kwargs)
        with jax.set_mesh(self._mesh):
            return call(*args, **kwargs)

    def _call_inside_trace(self, call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # jax.set_mesh cannot be entered inside another trace; the call is only
        # correct if the enclosing trace already runs under this mesh.
        mesh = cast("Mesh", self._mesh)
        ambient = jax.sharding.get_abstract_mesh()
        if ambient != mesh.abstract_mesh:
            raise ValueError(
                f"{self._budget.function_name} was wrapped with mesh={mesh} and was called inside another JAX "
                f"trace or transformation whose ambient mesh is {ambient}; jax.set_mesh cannot be entered "
                "there, so enter jax.set_mesh(mesh) around the outer transformation instead"
            )
        return call(*args, **kwargs)

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        # Behaves like a function when used as a method.
        if instance is None:
            return self
        return types.MethodType(self, instance)

    def __repr__(self) -> str:
        return (
            f"<{self._kind} {self._budget.function_name} trace_count={self.trace_count} max_traces={self.max_traces}>"
        )
