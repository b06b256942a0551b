"""Compilation with a trace budget (`tinax.jit`).

What it shows:

- `bounded_jit(function, max_traces=1)` compiles once; calls with new values
  of the same shapes and dtypes reuse that compilation.
- A call that would trace again (here, a longer input) is refused with
  `TraceBudgetExceededError`, whose message names the argument that changed
  and shows its old and new shape, instead of silently recompiling.
- `batched_jit` vectorizes a per-example function under the same kind of
  budget, so a new batch size is a retrace that is refused as well.

Run it with `python examples/jit_budgets.py`.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp

from tinax.jit import TraceBudgetExceededError, batched_jit, bounded_jit


def report(claim: str, holds: bool) -> None:
    """Prints a claim the example has just checked, or stops if it does not hold."""
    if not holds:
        raise SystemExit(f"jit_budgets: expected, but not observed: {claim}")
    print(claim)


def scaled_total(values: jax.Array, scale: jax.Array) -> jax.Array:
    return jnp.sum(values * scale)


def squared_distance(center: jax.Array, point: jax.Array) -> jax.Array:
    return jnp.sum((point - center) ** 2)


def main() -> int:
    total = bounded_jit(scaled_total, max_traces=1)
    first = total(jnp.ones(4), jnp.float32(2.0))
    second = total(jnp.arange(4.0), jnp.float32(3.0))
    report(
        f"bounded_jit: two calls with new values of the same shapes used {total.trace_count} of "
        f"max_traces={total.max_traces} traces",
        total.trace_count == 1 and float(first) == 8.0 and float(second) == 18.0,
    )
    try:
        total(jnp.ones(8), jnp.float32(2.0))
        message = ""
    except TraceBudgetExceededError as error:
        message = str(error)
    print(f"TraceBudgetExceededError: {message}")
    report(
        "bounded_jit refused the retrace with TraceBudgetExceededError naming argument 'values'",
        "argument 'values' changed: shape (4,) -> (8,)" in message,
    )

    distances = batched_jit(squared_distance, in_axes=(None, 0), max_traces=1)
    center = jnp.zeros(3)
    batch = jnp.arange(15.0).reshape(5, 3)
    result = distances(center, batch)
    report(
        f"batched_jit: one trace gave {result.shape[0]} per-example distances",
        result.shape == (5,) and distances.trace_count == 1,
    )
    try:
        distances(center, jnp.ones((6, 3)))
        refused = False
    except TraceBudgetExceededError as error:
        refused = "argument 'point' changed: shape (5, 3) -> (6, 3)" in str(error)
    report("batched_jit refused a new batch size as a retrace of argument 'point'", refused)
    return 0


if __name__ == "__main__":
    sys.exit(main())
