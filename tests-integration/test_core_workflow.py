"""tinax-core's modules working together the way a training loop combines them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from tinax.array import from_numpy, to_numpy
from tinax.grad import value_and_grad
from tinax.jit import bounded_jit
from tinax.random import derive_process_step_key, split_key


def loss(weights, inputs, targets, key):
    noise = 0.01 * jax.random.normal(key, targets.shape)
    return jnp.mean((inputs @ weights - targets - noise) ** 2)


def test_sharded_training_step_matches_raw_jax_bit_for_bit():
    mesh = jax.make_mesh((2, 4), ("data", "model"))
    batch_layout = NamedSharding(mesh, PartitionSpec(("data", "model")))
    rng = np.random.default_rng(0)
    inputs = rng.normal(size=(64, 8)).astype(np.float32)
    targets = rng.normal(size=(64,)).astype(np.float32)
    root = jax.random.key(7)

    def step(weights, inputs, targets, key):
        value, gradient = value_and_grad(loss)(weights, inputs, targets, key)
        return weights - 0.1 * gradient, value

    def raw_step(weights, inputs, targets, key):
        value, gradient = jax.value_and_grad(loss)(weights, inputs, targets, key)
        return weights - 0.1 * gradient, value

    bounded = bounded_jit(step, max_traces=1, mesh=mesh)
    raw = jax.jit(raw_step)
    weights = from_numpy(np.zeros(8, np.float32), copy=True, device=NamedSharding(mesh, PartitionSpec()))
    raw_weights = jax.device_put(jnp.zeros(8, jnp.float32), NamedSharding(mesh, PartitionSpec()))
    for index in range(5):
        key = derive_process_step_key(root, process_index=0, step=index)
        batch_x = from_numpy(inputs, copy=True, device=batch_layout)
        batch_y = from_numpy(targets, copy=True, device=batch_layout)
        weights, value = bounded(weights, batch_x, batch_y, key)
        raw_key = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(root, 0), index), 0)
        with jax.set_mesh(mesh):
            raw_weights, raw_value = raw(raw_weights, batch_x, batch_y, raw_key)
        assert float(value) == float(raw_value)
    assert bounded.trace_count == 1
    np.testing.assert_array_equal(to_numpy(weights, writable=False), np.asarray(raw_weights))


def test_split_keys_feed_independent_streams():
    next_root, operation_keys = split_key(jax.random.key(0), count=3)
    draws = [float(jax.random.uniform(key)) for key in operation_keys]
    assert len(set(draws)) == 3
    assert float(jax.random.uniform(next_root)) not in draws
