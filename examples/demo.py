"""End-to-end tinax-core demo: a data-parallel regression trained on 8 CPU devices.

Run it with `hatch run demo` (add `--help` for the flags). It shows the
tinax-core policies working together:

- host data enters JAX through `from_numpy(copy=True)`, sharded over a mesh;
- the training step is a `bounded_jit` with a budget of one trace, so any
  accidental retrace fails loudly instead of silently recompiling;
- gradients come from `value_and_grad` with a checked `argnums`;
- per-step noise keys come from `derive_process_step_key`, so a restarted run
  draws exactly the same noise for the same step;
- results leave JAX through `to_numpy(writable=False)`.

This file is a runnable example, not a stable API.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200, help="training steps (default: 200)")
    parser.add_argument("--devices", type=int, default=8, help="CPU devices to shard the batch over (default: 8)")
    parser.add_argument("--batch-size", type=int, default=256, help="global batch size (default: 256)")
    parser.add_argument("--seed", type=int, default=0, help="root seed (default: 0)")
    arguments = parser.parse_args(argv)
    if arguments.steps < 1:
        parser.error(f"--steps must be >= 1, got {arguments.steps}")
    if arguments.devices < 1:
        parser.error(f"--devices must be >= 1, got {arguments.devices}")
    if arguments.batch_size < 1 or arguments.batch_size % arguments.devices:
        parser.error(f"--batch-size must be a positive multiple of --devices, got {arguments.batch_size}")
    return arguments


def main(argv: list[str]) -> int:
    arguments = parse_arguments(argv)
    # The device count must be fixed before JAX starts.
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ["JAX_NUM_CPU_DEVICES"] = str(arguments.devices)

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    from tinax.array import from_numpy, to_numpy
    from tinax.grad import value_and_grad
    from tinax.jit import bounded_jit
    from tinax.random import derive_process_step_key

    features, learning_rate = 16, 0.1
    rng = np.random.default_rng(arguments.seed)
    true_weights = rng.normal(size=(features,)).astype(np.float32)

    mesh = jax.make_mesh((arguments.devices,), ("data",))
    batch_layout = NamedSharding(mesh, PartitionSpec("data"))
    replicated = NamedSharding(mesh, PartitionSpec())
    print(f"mesh: {arguments.devices} CPU devices on axis 'data'; batch {arguments.batch_size}, {features} features")

    def loss(weights: jax.Array, inputs: jax.Array, targets: jax.Array, key: jax.Array) -> jax.Array:
        noisy_targets = targets + 0.01 * jax.random.normal(key, targets.shape)
        return jnp.mean((inputs @ weights - noisy_targets) ** 2)

    loss_and_gradient = value_and_grad(loss, argnums=0)

    def train_step(weights: jax.Array, inputs: jax.Array, targets: jax.Array, key: jax.Array):
        value, gradient = loss_and_gradient(weights, inputs, targets, key)
        return weights - learning_rate * gradient, value

    step_fn = bounded_jit(train_step, max_traces=1)
    root_key = jax.random.key(arguments.seed)
    weights = from_numpy(np.zeros(features, np.float32), copy=True, device=replicated)

    started = time.perf_counter()
    losses = []
    for step in range(arguments.steps):
        inputs = rng.normal(size=(arguments.batch_size, features)).astype(np.float32)
        targets = inputs @ true_weights
        batch_inputs = from_numpy(inputs, copy=True, device=batch_layout)
        batch_targets = from_numpy(targets, copy=True, device=batch_layout)
        key = derive_process_step_key(root_key, process_index=jax.process_index(), step=step)
        weights, value = step_fn(weights, batch_inputs, batch_targets, key)
        losses.append(float(value))
        if step % max(1, arguments.steps // 10) == 0 or step == arguments.steps - 1:
            elapsed = time.perf_counter() - started
            print(f"step {step:5d}  loss {losses[-1]:.6f}  {(step + 1) / elapsed:8.1f} steps/s", flush=True)

    learned = to_numpy(weights, writable=False)
    error = float(np.max(np.abs(learned - true_weights)))
    print()
    print(f"{'steps':<24}{arguments.steps}")
    print(f"{'traces used':<24}{step_fn.trace_count} of {step_fn.max_traces}")
    print(f"{'first / last loss':<24}{losses[0]:.6f} / {losses[-1]:.6f}")
    print(f"{'max weight error':<24}{error:.2e}")
    if not losses[-1] < losses[0]:
        print("demo: the loss did not decrease", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
