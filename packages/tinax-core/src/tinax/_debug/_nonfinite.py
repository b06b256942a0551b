"""Reporting NaN and infinity from inside staged computations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from tinax._core import validation
from tinax._core.shapes import devices_of, require_fits

__all__ = ["observe_nonfinite"]


def observe_nonfinite(values: jax.Array, *, callback: Callable[[Any, Any], None], max_indices: int) -> jax.Array:
    """Calls ``callback`` on the host when ``values`` holds NaN or infinity.

    Works eagerly and inside ``jax.jit``, ``jax.vmap`` and differentiation. Only a bounded summary
    leaves the device: the non-finite count and the first ``max_indices`` flat (row-major)
    indices, padded with ``-1``. The callback runs through ``jax.debug.callback``, asynchronously:
    its exceptions surface when the computation is waited on (``jax.effects_barrier()`` waits).
    Finite arrays (every integer and bool array) never invoke it; under ``jax.vmap`` it runs once
    per batch element holding a non-finite value. Sharded arrays are summarized as a whole.

    Args:
      values: The array to watch; it is returned unchanged.
      callback: Called as ``callback(count, indices)``: a scalar int array and an int array of
        shape ``(max_indices,)``.
      max_indices: How many flat indices to report, at least 0.

    Returns:
      ``values`` itself, so the call can sit inside an expression.

    Raises:
      TypeError: If ``callback`` is not callable, ``max_indices`` not an int, or ``values`` not a ``jax.Array``.
      ValueError: If ``max_indices`` is negative, or the indices would not fit in memory.

    Examples:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> from tinax.debug import observe_nonfinite
      >>> reports = []
      >>> def report(count, indices):
      ...     reports.append((int(count), indices.tolist()))
      >>> @jax.jit
      ... def step(x):
      ...     return observe_nonfinite(x, callback=report, max_indices=2) * 2.0
      >>> _ = step(jnp.array([1.0, jnp.nan, 3.0, jnp.inf, jnp.nan]))
      >>> jax.effects_barrier()  # the callback is asynchronous: wait for it
      >>> reports  # three non-finite values, the first two at flat indices 1 and 3
      [(3, [1, 3])]
    """
    validation.require_callable(callback, "callback")
    index_budget = validation.require_non_negative_int(max_indices, "max_indices")
    validation.require_instance(values, "values", jax.Array, "a JAX array (jax.Array)")
    if not jnp.issubdtype(values.dtype, jnp.inexact):
        # Integers, booleans and keys cannot hold NaN or infinity.
        return values
    require_fits(
        "max_indices",
        max_indices,
        shape=(index_budget,),
        dtype=np.dtype(jax.dtypes.canonicalize_dtype(np.int64)),
        devices=lambda: devices_of(values),
        what="the reported indices",
    )

    nonfinite = _replicated(jnp.logical_not(jnp.isfinite(jnp.ravel(values))))
    count = jnp.count_nonzero(nonfinite)
    (indices,) = jnp.nonzero(nonfinite, size=index_budget, fill_value=-1)

    def report(observed_count: Any, observed_indices: Any) -> None:
        # Under vmap the cond becomes a select and runs for every batch element; filter here.
        if int(observed_count) > 0:
            callback(observed_count, observed_indices)

    jax.lax.cond(count > 0, lambda: jax.debug.callback(report, count, indices), lambda: None)
    return values


def _replicated(mask: jax.Array) -> jax.Array:
    """Replicates a flat mask split over Explicit axes: JAX won't stage the index scan otherwise.

    The one-byte-per-element mask is the cheapest thing to gather.
    """
    sharding = jax.typeof(mask).sharding
    if not isinstance(sharding, NamedSharding) or sharding.mesh.empty:
        return mask
    mesh = sharding.mesh
    explicit_axes = {
        name for name, axis_type in zip(mesh.axis_names, mesh.axis_types, strict=True) if axis_type == AxisType.Explicit
    }
    named: set[object] = set()
    for entry in sharding.spec:
        named.update(entry if isinstance(entry, tuple) else (entry,))
    if not named & explicit_axes:
        return mask
    replicated = NamedSharding(mesh, PartitionSpec())  # type: ignore[no-untyped-call]
    gathered: jax.Array = jax.sharding.reshard(mask, replicated)  # type: ignore[no-untyped-call]
    return gathered
