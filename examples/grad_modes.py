"""Gradients with checked arguments and an explicit Jacobian mode (`tinax.grad`).

What it shows:

- `value_and_grad(loss, argnums=(0, 1))` returns the loss together with one
  gradient per listed parameter; they match the closed-form gradient.
- `jacobian(function, mode=...)` has no default mode: forward mode suits tall
  Jacobians, reverse mode wide ones, and both give the same matrix.
- Bad arguments fail when the function is wrapped, not at the first call:
  `argnums=True` (which `jax.grad` reads as 1) and an unknown mode.

Run it with `python examples/grad_modes.py`.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np

from tinax.grad import jacobian, value_and_grad


def report(claim: str, holds: bool) -> None:
    """Prints a claim the example has just checked, or stops if it does not hold."""
    if not holds:
        raise SystemExit(f"grad_modes: expected, but not observed: {claim}")
    print(claim)


def squared_error(weights: jax.Array, bias: jax.Array, inputs: jax.Array, targets: jax.Array) -> jax.Array:
    residual = inputs @ weights + bias - targets
    return 0.5 * jnp.sum(residual**2)


def polar_to_cartesian_and_radius(point: jax.Array) -> jax.Array:
    radius, angle = point[0], point[1]
    return jnp.stack([radius * jnp.cos(angle), radius * jnp.sin(angle), radius])


def main() -> int:
    inputs = jnp.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    targets = jnp.array([1.0, 0.0, -1.0])
    weights, bias = jnp.array([0.5, -0.25]), jnp.float32(0.1)

    loss_and_grads = value_and_grad(squared_error, argnums=(0, 1))
    loss, (weights_grad, bias_grad) = loss_and_grads(weights, bias, inputs, targets)
    residual = np.asarray(inputs @ weights + bias - targets)
    report(
        f"value_and_grad(argnums=(0, 1)): loss {float(loss):.4f} with gradients for weights and bias, "
        "equal to the closed form",
        np.allclose(weights_grad, np.asarray(inputs).T @ residual) and np.isclose(float(bias_grad), residual.sum()),
    )

    point = jnp.array([2.0, 0.3])
    forward = jacobian(polar_to_cartesian_and_radius, mode="forward")(point)
    reverse = jacobian(polar_to_cartesian_and_radius, mode="reverse")(point)
    report(
        f"jacobian: mode='forward' and mode='reverse' give the same {forward.shape[0]}x{forward.shape[1]} matrix",
        forward.shape == (3, 2) and np.allclose(forward, reverse),
    )

    try:
        value_and_grad(squared_error, argnums=True)
        bool_message = ""
    except TypeError as error:
        bool_message = str(error)
    print(f"value_and_grad(argnums=True) raised TypeError: {bool_message}")
    try:
        jacobian(polar_to_cartesian_and_radius, mode="backward")
        mode_message = ""
    except ValueError as error:
        mode_message = str(error)
    print(f"jacobian(mode='backward') raised ValueError: {mode_message}")
    report(
        "bad argnums and mode were refused when wrapping, before any call",
        "argnums" in bool_message and "mode" in mode_message,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
