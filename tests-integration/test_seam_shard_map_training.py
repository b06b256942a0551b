"""A full training step whose loss runs through ``shard_mapped``, on data laid out by ``layout``.

The seam: a Flax NNX MLP is built with ``eager_sharded_init`` on an Explicit
``(data, model)`` mesh, its kernels split over ``model``; batches are laid out
over ``data`` with ``layout`` (``place_host_array`` in one process,
``from_process_local_data`` in two); ``tinax.parallel.shard_mapped`` maps the
loss by hand over ``data`` (its mesh types ``data`` Manual) and averages it
with ``pmean``; ``tinax.grad.value_and_grad`` differentiates through that
collective; optax's adam updates the model; ``tinax.jit.bounded_jit`` compiles
the whole step once, with and without its ``mesh`` argument.

Two references check the numbers:

* the same step written with ``jax.shard_map`` over the Explicit mesh,
  ``jax.value_and_grad`` and ``jax.jit`` directly, on the same inputs. It is
  the same program, so losses and the final state must agree bit for bit: the
  tinax wrappers add checks, not arithmetic.
* the same model and optimizer with no manual sharding (one global mean over
  the batch). The reductions then run in another order, so float32 results
  agree only to rounding.

The same step also runs in two processes of four CPU devices each (one JAX
runtime, the ``_body_*`` function below runs in the children), where every
process feeds its own rows and must see the losses and final parameters of
the single-process run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh, PartitionSpec

from tinax_testing import array_digest, run_processes, sharded_mlp_class

pytest.importorskip("flax", reason="the training step uses a Flax NNX model")
pytest.importorskip("optax", reason="the training step uses an optax optimizer")

STEPS = 4
BATCH_SIZE = 16
FEATURES = 6
HIDDEN = 8
TARGETS = 2
LEARNING_RATE = 0.05
INIT_SEED = 0
AXES = ("data", "model")
MESH_SHAPES = [pytest.param((2, 4), id="2x4"), pytest.param((4, 2), id="4x2")]


def _host_batches() -> list[tuple[np.ndarray, np.ndarray]]:
    generator = np.random.default_rng(1)
    teacher = generator.normal(size=(FEATURES, TARGETS)).astype(np.float32)
    batches = []
    for _ in range(STEPS):
        x = generator.normal(size=(BATCH_SIZE, FEATURES)).astype(np.float32)
        batches.append((x, np.tanh(x @ teacher).astype(np.float32)))
    return batches


def _meshes(devices: list[jax.Device], shape: tuple[int, int]) -> tuple[Mesh, Mesh]:
    """The Explicit mesh the data lives on, and the same devices with 'data' Manual for shard_mapped."""
    from tinax.parallel import make_mesh

    explicit = make_mesh(devices, shape, AXES, axis_types=(AxisType.Explicit, AxisType.Explicit))
    manual_data = make_mesh(devices, shape, AXES, axis_types=(AxisType.Manual, AxisType.Explicit))
    return explicit, manual_data


class _Trainer:
    """Builds the model, optimizer and the three steps over one mesh.

    Everything the steps share (the model graph, the loss body, the
    optimizer) is built here once, so ours and the references differ only in
    how the loss is mapped, differentiated and compiled.
    """

    def __init__(self, devices: list[jax.Device], shape: tuple[int, int]) -> None:
        import optax
        from flax import nnx

        from tinax.parallel import eager_sharded_init

        self.explicit, self.manual_data = _meshes(devices, shape)

        mlp_class = sharded_mlp_class(FEATURES, HIDDEN, TARGETS, activation=jnp.tanh, output_spec=(None, None))

        def build() -> tuple[Any, Any]:
            model = mlp_class(nnx.Rngs(INIT_SEED))
            return model, nnx.Optimizer(model, optax.adam(LEARNING_RATE), wrt=nnx.Param)

        self.build = lambda: eager_sharded_init(build, self.explicit)
        model, optimizer = self.build()
        self.model_graphdef = nnx.graphdef(model)
        self.graphdef = nnx.graphdef((model, optimizer))

    def initial_state(self) -> Any:
        from flax import nnx

        return nnx.state(self.build())

    def mean_squared_error(self, params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
        from flax import nnx

        return jnp.mean((nnx.merge(self.model_graphdef, params)(x) - y) ** 2)

    def shard_loss(self, params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
        # Every data shard holds as many rows, so the mean of the shard means is the batch mean.
        return jax.lax.pmean(self.mean_squared_error(params, x, y), "data")

    def specs(self) -> dict[str, Any]:
        return {
            "in_specs": (PartitionSpec(), PartitionSpec("data"), PartitionSpec("data")),
            "out_specs": PartitionSpec(),
            "axis_names": frozenset({"data"}),
        }

    def step(self, loss: Callable[..., jax.Array], grad: Callable[..., Any]) -> Callable[..., Any]:
        from flax import nnx

        def train_step(state: Any, x: jax.Array, y: jax.Array) -> tuple[Any, jax.Array]:
            model, optimizer = nnx.merge(self.graphdef, state)
            value, grads = grad(loss)(nnx.state(model, nnx.Param), x, y)
            optimizer.update(model, grads)
            return nnx.state((model, optimizer)), value

        return train_step

    def tinax_step(self, with_mesh: bool) -> Any:
        from tinax.grad import value_and_grad
        from tinax.jit import bounded_jit
        from tinax.parallel import shard_mapped

        loss = shard_mapped(self.shard_loss, mesh=self.manual_data, **self.specs())
        return bounded_jit(self.step(loss, value_and_grad), max_traces=1, mesh=self.explicit if with_mesh else None)

    def raw_step(self) -> Callable[..., Any]:
        specs = self.specs()
        specs["axis_names"] = set(specs["axis_names"])
        loss = jax.shard_map(self.shard_loss, mesh=self.explicit, **specs)
        return jax.jit(self.step(loss, jax.value_and_grad))

    def global_step(self) -> Callable[..., Any]:
        return jax.jit(self.step(self.mean_squared_error, jax.value_and_grad))


def _train(step: Any, state: Any, batches: list[tuple[jax.Array, jax.Array]]) -> tuple[Any, list[jax.Array]]:
    losses = []
    for x, y in batches:
        state, loss = step(state, x, y)
        losses.append(loss)
    return state, losses


def _placed_batches(trainer: _Trainer) -> list[tuple[jax.Array, jax.Array]]:
    from tinax.parallel import layout, place_host_array

    rows = layout(trainer.explicit, ("data", None))
    return [(place_host_array(x, rows, copy=True), place_host_array(y, rows, copy=True)) for x, y in _host_batches()]


def _params(state: Any) -> dict[str, np.ndarray]:
    from flax import nnx

    model_state = state[0]
    return {
        jax.tree_util.keystr(path): np.asarray(leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(model_state))[0]
    }


@pytest.mark.parametrize("shape", MESH_SHAPES)
@pytest.mark.parametrize("with_mesh", [False, True], ids=["bounded_jit", "bounded_jit-with-mesh"])
def test_shard_mapped_loss_on_layout_batches_trains_like_plain_jax(shape: tuple[int, int], with_mesh: bool) -> None:
    trainer = _Trainer(jax.devices(), shape)
    batches = _placed_batches(trainer)
    initial = _params(trainer.initial_state())

    step = trainer.tinax_step(with_mesh)
    final, losses = _train(step, trainer.initial_state(), batches)

    assert step.trace_count == 1
    for loss in losses:
        assert loss.shape == ()
        assert loss.dtype == jnp.float32
        # The loss lives on the batches' Explicit mesh: it mixes with them.
        assert loss.sharding.mesh == trainer.explicit
        assert loss.sharding.spec == PartitionSpec()
    kernels = {"hidden": PartitionSpec(None, "model"), "output": PartitionSpec("model", None)}
    for name, spec in kernels.items():
        kernel = final[0][name]["kernel"][...]
        assert kernel.sharding.mesh == trainer.explicit
        assert kernel.sharding.spec == spec
    host_losses = [float(np.asarray(loss)) for loss in losses]
    assert host_losses[-1] < host_losses[0]
    params = _params(final)
    assert any(not np.array_equal(params[name], initial[name]) for name in params)

    # Reference 1: the same program from raw JAX over the Explicit mesh, bit for bit.
    with jax.set_mesh(trainer.explicit):
        raw_final, raw_losses = _train(trainer.raw_step(), trainer.initial_state(), batches)
    for loss, raw in zip(losses, raw_losses, strict=True):
        assert np.asarray(loss).tobytes() == np.asarray(raw).tobytes()
    raw_params = _params(raw_final)
    for name in params:
        np.testing.assert_array_equal(params[name], raw_params[name], err_msg=name)

    # Reference 2: no manual sharding, one global mean: equal up to float32 rounding.
    with jax.set_mesh(trainer.explicit):
        plain_final, plain_losses = _train(trainer.global_step(), trainer.initial_state(), batches)
    np.testing.assert_allclose(host_losses, [float(np.asarray(loss)) for loss in plain_losses], rtol=1e-5)
    plain_params = _params(plain_final)
    for name in params:
        np.testing.assert_allclose(params[name], plain_params[name], rtol=1e-4, atol=1e-6, err_msg=name)


# ---------------------------------------------------------------------------
# Two processes of four devices: the body runs in the children.


def _body_train_across_processes(shape: list[int]) -> dict[str, Any]:
    from jax.experimental import multihost_utils

    from tinax.parallel import from_process_local_data, layout

    # Process-major order: each 'data' row of the 2x4 mesh is one process's devices.
    devices = sorted(jax.devices(), key=lambda device: (device.process_index, device.id))
    trainer = _Trainer(devices, (shape[0], shape[1]))
    rows = layout(trainer.explicit, ("data", None))
    count, index = jax.process_count(), jax.process_index()
    per_process = BATCH_SIZE // count
    own = slice(index * per_process, (index + 1) * per_process)
    batches = [
        tuple(
            from_process_local_data(array[own].copy(), rows, array.shape, copy=True, replica_policy="disallow")
            for array in pair
        )
        for pair in _host_batches()
    ]

    step = trainer.tinax_step(with_mesh=False)
    final, losses = _train(step, trainer.initial_state(), batches)
    # Both wrappers are made at one place, so they share one trace budget, as
    # tinax 0.2's chex counters did; each run here gets the budget afresh.
    from tinax._jit import _budget

    _budget._sites.clear()
    _, mesh_losses = _train(trainer.tinax_step(with_mesh=True), trainer.initial_state(), batches)
    with jax.set_mesh(trainer.explicit):
        raw_final, raw_losses = _train(trainer.raw_step(), trainer.initial_state(), batches)

    def gathered(state: Any) -> dict[str, np.ndarray]:
        from flax import nnx

        # Gathered to be compared: every process sees the whole value.
        return {
            jax.tree_util.keystr(path): np.asarray(multihost_utils.process_allgather(leaf, tiled=True))
            for path, leaf in jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(state[0]))[0]
        }

    params = gathered(final)

    def local(loss: jax.Array) -> str:
        return array_digest(np.asarray(loss.addressable_shards[0].data))

    return {
        "process": index,
        "trace_count": step.trace_count,
        "loss_mesh_is_explicit": all(loss.sharding.mesh == trainer.explicit for loss in losses),
        "losses": [float(np.asarray(loss.addressable_shards[0].data)) for loss in losses],
        "loss_bits": [local(loss) for loss in losses],
        "raw_loss_bits": [local(loss) for loss in raw_losses],
        "with_mesh_loss_bits": [local(loss) for loss in mesh_losses],
        "param_bits": {name: array_digest(value) for name, value in params.items()},
        "raw_param_bits": {name: array_digest(value) for name, value in gathered(raw_final).items()},
        "params": {name: value.tolist() for name, value in params.items()},
    }


# Starts two JAX processes: longer than the suite's default limit.
@pytest.mark.timeout(600)
def test_the_same_step_in_two_processes_of_four_devices() -> None:
    results = run_processes(
        _body_train_across_processes, num_processes=2, devices_per_process=4, args=[[2, 4]], timeout=240.0
    )

    # The single-process run of the same step on the same mesh shape. Its
    # collectives run in-process rather than across processes, so it agrees to
    # float32 rounding rather than bit for bit.
    trainer = _Trainer(jax.devices(), (2, 4))
    final, losses = _train(trainer.tinax_step(with_mesh=False), trainer.initial_state(), _placed_batches(trainer))
    expected_params = _params(final)

    assert [result["process"] for result in results] == [0, 1]
    for result in results:
        assert result["trace_count"] == 1
        assert result["loss_mesh_is_explicit"] is True
        assert result["loss_bits"] == result["raw_loss_bits"] == result["with_mesh_loss_bits"]
        assert result["param_bits"] == result["raw_param_bits"]
        assert result["losses"][-1] < result["losses"][0]
        np.testing.assert_allclose(result["losses"], [float(np.asarray(loss)) for loss in losses], rtol=1e-6)
        assert set(result["params"]) == set(expected_params)
        for name, value in result["params"].items():
            np.testing.assert_allclose(np.asarray(value), expected_params[name], rtol=1e-5, atol=1e-6, err_msg=name)
    assert results[0]["loss_bits"] == results[1]["loss_bits"]
    assert results[0]["param_bits"] == results[1]["param_bits"]
