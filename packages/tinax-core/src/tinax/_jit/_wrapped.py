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
    """Checks an optional mesh ``jax.set_mesh`` can enter: None or a ``Mesh`` with devices and no Manual axis."""
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
    """A jitted function with a trace budget and an optional mesh entered around each call.

    Other ``jax.jit`` attributes are the jitted function's own, as in tinax 0.2 (which returned it);
    with a mesh, ``lower``, ``trace`` and ``eval_shape`` run under it too. Any new trace they make counts.
    """

    # Calls go straight to ``_dispatch`` without a Python frame, so a cached call costs about
    # what a raw ``jax.jit`` call does (benchmarks/bench_jit.py).
    __call__ = property(operator.attrgetter("_dispatch"))

    _dispatch: Callable[..., Any]

    def __init__(
        self, function: Callable[..., Any], jitted: Any, budget: TraceBudget, mesh: Mesh | None, kind: str
    ) -> None:
        # First, so nothing copied from ``function.__dict__`` shadows the attributes below.
        functools.update_wrapper(self, function)
        self._jitted = jitted
        self._budget = budget
        self._mesh = mesh
        self._kind = kind
        self._dispatch = jitted if mesh is None else self._call_under_mesh

    @property
    def trace_count(self) -> int:
        """Traces the budget has admitted, including those of wrappers sharing it."""
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
        """Lowers for these arguments like ``jax.jit(...).lower``; a new trace counts towards the budget."""
        return self._under_mesh(self._jitted.lower, args, kwargs)  # type: ignore[no-any-return]

    def trace(self, *args: Any, **kwargs: Any) -> jax.stages.Traced:
        """Traces for these arguments like ``jax.jit(...).trace``; a new trace counts towards the budget."""
        return self._under_mesh(self._jitted.trace, args, kwargs)  # type: ignore[no-any-return]

    def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
        """Output shapes and dtypes like ``jax.jit(...).eval_shape``; a new trace counts towards the budget."""
        return self._under_mesh(self._jitted.eval_shape, args, kwargs)

    def clear_cache(self) -> None:
        """Clears the compiled cache; as in tinax 0.2 the budget is not given back."""
        self._jitted.clear_cache()

    def __getattr__(self, name: str) -> Any:
        # The rest (``_cache_size``...) is the jitted function's; special names are left alone
        # so copying or pickling never reaches a half-built instance's jitted function.
        if name.startswith("__") or name == "_jitted":
            raise AttributeError(name)
        return getattr(self._jitted, name)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(dir(self._jitted)))

    def _call_under_mesh(self, *args: Any, **kwargs: Any) -> Any:
        # The cached-call hot path: no extra call layer between the caller and jax.set_mesh.
        if tracing_in_progress():
            return self._call_inside_trace(self._jitted, args, kwargs)
        with jax.set_mesh(self._mesh):
            return self._jitted(*args, **kwargs)

    def _under_mesh(self, call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self._mesh is None:
            return call(*args, **kwargs)
        if tracing_in_progress():
            return self._call_inside_trace(call, args, kwargs)
        with jax.set_mesh(self._mesh):
            return call(*args, **kwargs)

    def _call_inside_trace(self, call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # jax.set_mesh cannot be entered inside a trace; only correct if it already runs under this mesh.
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
