"""A training step whose loss runs through ``shard_mapped`` with a real collective, compiled by ``bounded_jit``.

The seam: ``tinax.parallel.shard_mapped`` maps the per-example loss by hand
over the ``data`` axis and averages it with ``pmean``; ``tinax.grad`` takes
the gradient through that collective; ``tinax.jit.bounded_jit`` compiles the
whole step once, under the mesh, and runs it for several steps on batches
that ``place_host_array`` split over ``data``.

Two references check the numbers:

* the same step written with ``jax.shard_map``, ``jax.value_and_grad`` and
  ``jax.jit`` directly, on the same mesh and inputs. It compiles to the same
  program, so losses and parameters must agree bit for bit: the tinax
  wrappers add checks, not arithmetic.
* the same math with no manual sharding at all (one global mean on unsharded
  arrays). The reductions then run in another order (a mean per data shard,
  then a mean of those, against one mean over the batch), so float32 results
  agree only to rounding, and are compared with a tolerance.

Why the mesh's axes are Auto: ``shard_mapped`` runs ``jax.shard_map`` over the
caller's devices with the manual axes retyped to Auto, so its inputs and
outputs live on that Auto mesh. Inside one jitted step, arrays on an Explicit
mesh of the same devices cannot be combined with them (JAX refuses two meshes
that differ only in axis types), and JAX cannot transpose the ``shard_map``
when its inputs carry Explicit shardings. A step built around ``shard_mapped``
therefore places its data on the Auto mesh that the call runs over.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from tinax.grad import value_and_grad
from tinax.jit import bounded_jit
from tinax.parallel import make_mesh, place_host_array, shard_mapped

STEPS = 4
BATCH_SIZE = 16
FEATURES = 5
HIDDEN = 8
TARGETS = 2
LEARNING_RATE = 0.1
AXES = ("data", "model")
SHAPE = (2, 4)

Params = dict[str, jax.Array]


def _initial_parameters() -> dict[str, np.ndarray]:
    generator = np.random.default_rng(0)
    return {
        "w1": (generator.normal(size=(FEATURES, HIDDEN)) / np.sqrt(FEATURES)).astype(np.float32),
        "b1": np.zeros(HIDDEN, np.float32),
        "w2": (generator.normal(size=(HIDDEN, TARGETS)) / np.sqrt(HIDDEN)).astype(np.float32),
        "b2": np.zeros(TARGETS, np.float32),
    }


def _host_batches() -> list[tuple[np.ndarray, np.ndarray]]:
    generator = np.random.default_rng(1)
    teacher = generator.normal(size=(FEATURES, TARGETS)).astype(np.float32)
    batches = []
    for _ in range(STEPS):
        x = generator.normal(size=(BATCH_SIZE, FEATURES)).astype(np.float32)
        batches.append((x, np.tanh(x @ teacher).astype(np.float32)))
    return batches


def _mean_squared_error(params: Params, x: jax.Array, y: jax.Array) -> jax.Array:
    hidden = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((hidden @ params["w2"] + params["b2"] - y) ** 2)


def _shard_loss(params: Params, x: jax.Array, y: jax.Array) -> jax.Array:
    # Each data shard holds the same number of rows, so the mean of the shard
    # means is the mean over the whole batch.
    return jax.lax.pmean(_mean_squared_error(params, x, y), "data")


def _sgd(params: Params, grads: Params) -> Params:
    return {name: params[name] - LEARNING_RATE * grads[name] for name in params}


_SPECS: dict[str, Any] = {
    "in_specs": (PartitionSpec(), PartitionSpec("data"), PartitionSpec("data")),
    "out_specs": PartitionSpec(),
}


def _meshes() -> tuple[Mesh, Mesh]:
    """The Auto mesh the step runs under, and the same devices with 'data' Manual for shard_mapped."""
    devices = jax.devices()
    auto = make_mesh(devices, SHAPE, AXES, axis_types=(AxisType.Auto, AxisType.Auto))
    manual_data = make_mesh(devices, SHAPE, AXES, axis_types=(AxisType.Manual, AxisType.Auto))
    return auto, manual_data


def _place(
    mesh: Mesh, params: dict[str, np.ndarray], batches: list[tuple[np.ndarray, np.ndarray]]
) -> tuple[Params, list[tuple[jax.Array, jax.Array]]]:
    replicated = NamedSharding(mesh, PartitionSpec())
    rows = NamedSharding(mesh, PartitionSpec("data", None))
    placed_params = {name: place_host_array(value, replicated, copy=True) for name, value in params.items()}
    placed_batches = [(place_host_array(x, rows, copy=True), place_host_array(y, rows, copy=True)) for x, y in batches]
    return placed_params, placed_batches


def _run(step: Any, params: Params, batches: list[tuple[jax.Array, jax.Array]]) -> tuple[Params, list[np.ndarray]]:
    losses = []
    for x, y in batches:
        params, loss = step(params, x, y)
        losses.append(np.asarray(loss))
    return params, losses


def test_shard_mapped_loss_in_a_bounded_jit_step_matches_plain_jax() -> None:
    auto, manual_data = _meshes()
    host_params = _initial_parameters()
    host_batches = _host_batches()
    params, batches = _place(auto, host_params, host_batches)

    loss_over_data = shard_mapped(_shard_loss, mesh=manual_data, axis_names=frozenset({"data"}), **_SPECS)

    def train_step(params: Params, x: jax.Array, y: jax.Array) -> tuple[Params, jax.Array]:
        loss, grads = value_and_grad(loss_over_data)(params, x, y)
        return _sgd(params, grads), loss

    step_fn = bounded_jit(train_step, max_traces=1, mesh=auto)
    final, losses = _run(step_fn, params, batches)

    assert step_fn.trace_count == 1
    assert all(loss.shape == () and loss.dtype == np.float32 for loss in losses)
    # The data rows stayed split over 'data'; the parameters stayed replicated on the mesh.
    assert all(x.sharding.spec == PartitionSpec("data", None) for x, _ in batches)
    for name, value in final.items():
        assert value.sharding.is_fully_replicated, name
        assert value.sharding.mesh == auto, name
    # Training did something: the loss went down and the parameters moved.
    assert losses[-1] < losses[0]
    assert not np.array_equal(np.asarray(final["w1"]), host_params["w1"])

    # Reference 1: the same program from raw JAX, bit for bit.
    raw_loss = jax.shard_map(_shard_loss, mesh=auto, axis_names={"data"}, **_SPECS)

    @jax.jit
    def raw_step(params: Params, x: jax.Array, y: jax.Array) -> tuple[Params, jax.Array]:
        loss, grads = jax.value_and_grad(raw_loss)(params, x, y)
        return _sgd(params, grads), loss

    with jax.set_mesh(auto):
        raw_final, raw_losses = _run(raw_step, *_place(auto, host_params, host_batches))
    for loss, raw in zip(losses, raw_losses, strict=True):
        assert loss.tobytes() == raw.tobytes()
    for name in final:
        np.testing.assert_array_equal(np.asarray(final[name]), np.asarray(raw_final[name]), err_msg=name)

    # Reference 2: no manual sharding and one global mean, equal up to float32 rounding.
    @jax.jit
    def global_step(params: Params, x: jax.Array, y: jax.Array) -> tuple[Params, jax.Array]:
        loss, grads = jax.value_and_grad(_mean_squared_error)(params, x, y)
        return _sgd(params, grads), loss

    plain_params = {name: jnp.asarray(value) for name, value in host_params.items()}
    plain_final, plain_losses = _run(
        global_step, plain_params, [(jnp.asarray(x), jnp.asarray(y)) for x, y in host_batches]
    )
    np.testing.assert_allclose(np.stack(losses), np.stack(plain_losses), rtol=1e-5, atol=1e-7)
    for name in final:
        np.testing.assert_allclose(
            np.asarray(final[name]), np.asarray(plain_final[name]), rtol=1e-5, atol=1e-6, err_msg=name
        )
