"""``batched_jit``: ``jax.jit`` of ``jax.vmap`` under one trace budget."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import jax
import numpy as np
from jax.sharding import Mesh

from tinax._core import validation
from tinax._core.shapes import require_fits
from tinax._jit._budget import TraceBudget, wrap_site
from tinax._jit._wrapped import BudgetedFunction, require_mesh

__all__ = ["batched_jit"]

R = TypeVar("R")


def batched_jit(
    function: Callable[..., R],
    *,
    in_axes: int | None | Sequence[Any] = 0,  # noqa: RUF036 - the order of the tinax 0.2 signature
    out_axes: Any = 0,
    axis_size: int | None = None,
    max_traces: int,
    mesh: Mesh | None = None,
) -> Callable[..., R]:
    """Vectorizes ``function`` with ``jax.vmap`` and compiles it with a trace budget.

    The result is ``jax.jit(jax.vmap(function, ...))`` with :func:`bounded_jit`'s budget and mesh
    handling. The budget counts traces of the batched function, so a new batch size is a new
    trace, and a budget error names the argument whose batched shape (dtype, ...) changed.

    Args:
      function: The per-example function.
      in_axes: The mapped axis of each positional argument, as for ``jax.vmap``: an int, None
        (broadcast), or one entry per positional argument (an int, None or a pytree prefix with
        int or None leaves). Keyword arguments are always mapped over axis 0.
      out_axes: Where the mapped axis goes in the outputs: an int, None, or a pytree prefix of
        the output with int or None leaves.
      axis_size: The batch size, needed only when no argument is mapped.
      max_traces: How many times the batched function may be traced, at least 0. A trace counts
        once ``jax.vmap`` calls ``function``, so a call vmap refuses spends nothing, as in tinax 0.2.
      mesh: If given, every call (and ``lower``, ``trace``, ``eval_shape``) runs inside
        ``jax.set_mesh(mesh)``.

    Returns:
      A callable taking batched arguments, with ``trace_count``, ``max_traces``, ``mesh`` and the
      ``jax.jit`` methods described in :func:`bounded_jit`, which also says which traces count.

    Raises:
      TypeError: If ``function`` is not callable, or another argument has the wrong type.
      ValueError: If an argument is invalid or a batched output cannot fit in memory (NumPy ints: also ``TypeError``).
      TraceBudgetExceededError: When a call would trace the batched function more than ``max_traces`` times.

    Examples:
      >>> import jax.numpy as jnp
      >>> from tinax.jit import batched_jit
      >>> def weighted(weights, example):
      ...     return jnp.dot(weights, example)
      >>> per_example = batched_jit(weighted, in_axes=(None, 0), max_traces=1)
      >>> per_example(jnp.array([1.0, 2.0]), jnp.ones((3, 2))).tolist()
      [3.0, 3.0, 3.0]
    """
    validation.require_callable(function, "function")
    # tinax 0.2 refused NumPy integers as the wrong type, and checked the axes last.
    integers = [axis_size, max_traces, *jax.tree_util.tree_leaves((in_axes, out_axes))]
    with validation.reported_as_both(any(validation.is_non_python_int(value) for value in integers)):
        checked_axis_size = validation.require_optional_positive_int(axis_size, "axis_size")
        if checked_axis_size is not None:
            # Device memory is checked on the traced outputs: looking it up here would start a backend.
            require_fits(
                "axis_size", axis_size, shape=(checked_axis_size,), dtype=np.uint8, devices=None, what="a batched value"
            )
        budget_size = validation.require_non_negative_int(max_traces, "max_traces")
        checked_mesh = require_mesh(mesh, "mesh")
        checked_in_axes = _require_in_axes(in_axes)
        checked_out_axes = _require_axis_tree(out_axes, "out_axes")

    def vectorize(per_example: Callable[..., Any]) -> Callable[..., Any]:
        vectorized = jax.vmap(
            per_example, in_axes=checked_in_axes, out_axes=checked_out_axes, axis_size=checked_axis_size
        )
        return _checking_outputs(vectorized, checked_mesh, axis_size)

    budget = TraceBudget(function, budget_size, static_argnames=(), site=wrap_site("batched_jit"))
    # A trace counts once jax.vmap calls the function, as with tinax 0.2.
    jitted = jax.jit(budget.counting_inside(vectorize, function))
    wrapped = BudgetedFunction(function, jitted, budget, checked_mesh, "batched_jit")
    return cast("Callable[..., R]", wrapped)


def _require_in_axes(value: object) -> int | tuple[Any, ...] | None:
    """Checks ``in_axes``: an int, None, or a sequence of axis pytrees."""
    if value is None:
        return None
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray)):
        # jax.vmap reads a top-level list as one entry per argument, like a tuple.
        return cast("tuple[Any, ...]", _require_axis_tree(tuple(value), "in_axes"))
    return validation.require_int(value, "in_axes", bounds_text="or None, or a sequence of those")


def _require_axis_tree(value: object, name: str) -> Any:
    """Checks every leaf of an axis pytree is an int (not bool) or None; NumPy ints become ``int``."""
    pairs, structure = jax.tree_util.tree_flatten_with_path(value, is_leaf=lambda leaf: leaf is None)
    leaves = [
        None if leaf is None else validation.require_int(leaf, name + jax.tree_util.keystr(path), bounds_text="or None")
        for path, leaf in pairs
    ]
    return jax.tree_util.tree_unflatten(structure, leaves)


def _checking_outputs(vectorized: Callable[..., Any], mesh: Mesh | None, axis_size: object) -> Callable[..., Any]:
    """Checks each trace's output sizes on abstract values, before XLA (which would abort) sees them."""

    @functools.wraps(vectorized)
    def checked(*args: Any, **kwargs: Any) -> Any:
        outputs = vectorized(*args, **kwargs)
        for path, leaf in jax.tree_util.tree_flatten_with_path(outputs)[0]:
            aval = jax.typeof(leaf)
            shape = tuple(int(extent) for extent in getattr(aval, "shape", ()))
            require_fits(
                "the batch" if axis_size is None else "axis_size",
                leaf if axis_size is None else axis_size,
                shape=shape,
                dtype=aval.dtype,
                devices=lambda: tuple(mesh.devices.flat) if mesh is not None else tuple(jax.devices()),
                what=f"batched output{jax.tree_util.keystr(path)}",
            )
        return outputs

    return checked
