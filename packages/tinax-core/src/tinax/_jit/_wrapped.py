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
    budget, and ``lower`` lowers the function as ``jax.jit`` would.
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
        """How many times the function's Python body has been traced."""
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
        """Lowers the function for these arguments, under the mesh if any.

        Lowering traces the function when no matching trace is cached, and
        that trace counts towards the budget.

        Returns:
          The ``jax.stages.Lowered`` object from the underlying ``jax.jit``.

        Raises:
          TraceBudgetExceededError: If tracing would exceed the budget.
        """
        if self._mesh is None:
            lowered: jax.stages.Lowered = self._jitted.lower(*args, **kwargs)
            return lowered
        return self._under_mesh(self._jitted.lower, args, kwargs)  # type: ignore[no-any-return]

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
