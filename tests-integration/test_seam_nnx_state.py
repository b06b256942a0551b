"""Sharded Flax NNX state crossing into checkpoints and safetensors files, and back onto meshes.

Two seams, one small MLP whose kernels are annotated over the ``model`` axis:

* ``tinax.parallel.abstract_sharded_state`` describes the model on another
  mesh without allocating it, and ``tinax.checkpointing.load_checkpointables``
  restores a checkpoint saved on a 2x4 mesh into that description (or into
  ``abstract_restore_target`` of a live model) on 4x2 and 8x1 meshes.
* ``tinax.array.to_numpy(writable=True)`` exports each parameter of a model
  built by ``eager_sharded_init`` on a 2x4 mesh, one explicit host copy per
  array, into ``tinax.weights.save_safetensors``; ``load_safetensors`` reads
  them back under a byte budget and ``place_host_array`` puts each one back
  where the original lived.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

pytest.importorskip("flax", reason="the seams carry Flax NNX state")
pytest.importorskip("orbax.checkpoint", reason="checkpoints are written by Orbax")

import jax
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from tinax.array import to_numpy
from tinax.checkpointing import abstract_restore_target, load_checkpointables, save_checkpointables
from tinax.parallel import (
    abstract_sharded_state,
    eager_sharded_init,
    layout,
    make_mesh,
    place_host_array,
    state_shardings,
)
from tinax.weights import inspect_safetensors, load_safetensors, save_safetensors

FEATURES = 6
HIDDEN = 16
TARGETS = 2
BATCH_SIZE = 8
KERNEL_SPECS = {"hidden.kernel": PartitionSpec(None, "model"), "output.kernel": PartitionSpec("model", None)}


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        init = nnx.initializers.lecun_normal()
        self.hidden = nnx.Linear(FEATURES, HIDDEN, kernel_init=nnx.with_partitioning(init, (None, "model")), rngs=rngs)
        self.output = nnx.Linear(HIDDEN, TARGETS, kernel_init=nnx.with_partitioning(init, ("model", None)), rngs=rngs)

    def __call__(self, inputs: jax.Array) -> jax.Array:
        hidden = jax.nn.gelu(self.hidden(inputs))
        # The contraction runs over the model-sharded axis: say where the sum lands.
        return self.output(hidden, out_sharding=PartitionSpec("data", None))


def _builder(seed: int) -> Callable[[], MLP]:
    return lambda: MLP(nnx.Rngs(seed))


def _mesh(shape: tuple[int, int]) -> Mesh:
    return make_mesh(jax.devices(), shape, ("data", "model"), axis_types=(AxisType.Explicit, AxisType.Explicit))


def _name(path: tuple[Any, ...]) -> str:
    """'hidden.kernel' for the tree path of the array inside an NNX Param."""
    parts = [str(getattr(key, "key", getattr(key, "name", key))) for key in path]
    if parts[-1] == "value":
        parts.pop()
    return ".".join(parts)


def _arrays(state: Any) -> dict[str, Any]:
    """The leaves of an NNX state (arrays or abstract arrays) by dotted name."""
    return {_name(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]}


def _expected_sharding(name: str, mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, KERNEL_SPECS.get(name, PartitionSpec()))


def _same_layout(actual: Any, expected: NamedSharding, ndim: int) -> bool:
    """Same mesh and same piece on every device.

    A replicated leaf may say ``P()`` or ``P(None,)`` depending on who built
    it; both mean the same layout, and NamedSharding equality tells them apart.
    """
    return (
        isinstance(actual, NamedSharding) and actual.mesh == expected.mesh and actual.is_equivalent_to(expected, ndim)
    )


def _inputs() -> np.ndarray:
    return np.random.default_rng(8).normal(size=(BATCH_SIZE, FEATURES)).astype(np.float32)


def _outputs(model: MLP, mesh: Mesh) -> np.ndarray:
    with jax.set_mesh(mesh):
        inputs = place_host_array(_inputs(), layout(mesh, ("data", None)), copy=True)
        return np.asarray(model(inputs))


def test_checkpoint_saved_on_2x4_restores_onto_4x2_and_8x1(tmp_path: pathlib.Path) -> None:
    source_mesh = _mesh((2, 4))
    model = eager_sharded_init(_builder(0), source_mesh)
    saved = {name: np.asarray(value) for name, value in _arrays(nnx.state(model)).items()}
    reference_outputs = _outputs(model, source_mesh)
    assert set(saved) == {"hidden.bias", "hidden.kernel", "output.bias", "output.kernel"}
    for name, value in _arrays(nnx.state(model)).items():
        assert _same_layout(value.sharding, _expected_sharding(name, source_mesh), value.ndim), name

    checkpoint = tmp_path / "model-2x4"
    save_checkpointables(checkpoint, {"model": nnx.state(model)}).result()

    for shape in [(4, 2), (8, 1)]:
        mesh = _mesh(shape)
        # Route 1: the abstract state of the model on the new mesh; nothing is allocated to build it.
        abstract = abstract_sharded_state(_builder(0), mesh)
        for name, leaf in _arrays(abstract).items():
            assert isinstance(leaf, jax.ShapeDtypeStruct), name
            assert _same_layout(leaf.sharding, _expected_sharding(name, mesh), len(leaf.shape)), name
        restored_state = load_checkpointables(checkpoint, {"model": abstract})["model"]
        restored_model = nnx.merge(restored_state)

        # Route 2: restore into a live model on the new mesh, built from other weights.
        live = eager_sharded_init(_builder(1), mesh)
        assert not np.array_equal(np.asarray(live.hidden.kernel[...]), saved["hidden.kernel"])
        target = abstract_restore_target(nnx.state(live))
        nnx.update(live, load_checkpointables(checkpoint, {"model": target})["model"])

        for restored in (restored_model, live):
            arrays = _arrays(nnx.state(restored))
            annotated = _arrays(state_shardings(nnx.state(restored), mesh))
            assert arrays.keys() == saved.keys()
            for name, value in arrays.items():
                # The values are the saved bytes; the layout is the new mesh's.
                np.testing.assert_array_equal(np.asarray(value), saved[name], err_msg=f"{shape} {name}")
                assert _same_layout(value.sharding, _expected_sharding(name, mesh), value.ndim), f"{shape} {name}"
                assert _same_layout(value.sharding, annotated[name], value.ndim), f"{shape} {name}"
                assert {shard.data.shape for shard in value.addressable_shards} == {
                    value.sharding.shard_shape(value.shape)
                }
            # Same weights, another partition of the contraction: equal up to float32 rounding.
            np.testing.assert_allclose(_outputs(restored, mesh), reference_outputs, rtol=1e-5, atol=1e-6)
        assert restored_model.hidden.kernel[...].sharding.shard_shape((FEATURES, HIDDEN)) == (
            FEATURES,
            HIDDEN // shape[1],
        )


def test_weights_exported_per_array_reload_onto_the_original_layout(tmp_path: pathlib.Path) -> None:
    mesh = _mesh((2, 4))
    model = eager_sharded_init(_builder(0), mesh)
    originals = _arrays(nnx.state(model))

    # One explicit, owned host copy per array.
    tensors = {name: to_numpy(value, writable=True) for name, value in originals.items()}
    for name, host in tensors.items():
        assert host.flags.writeable, name
        assert host.shape == originals[name].shape, name
        assert host.dtype == originals[name].dtype, name
    path = tmp_path / "model.safetensors"
    save_safetensors(path, tensors, overwrite=False, metadata={"mesh": "2x4"}, max_metadata_bytes=64)

    info = inspect_safetensors(path, max_metadata_bytes=64)
    budget = sum(host.nbytes for host in tensors.values())
    with pytest.raises(ValueError, match="max_bytes"):
        load_safetensors(path, max_bytes=budget - 1, max_metadata_bytes=64)
    loaded = load_safetensors(path, max_bytes=budget, max_metadata_bytes=64)
    assert info.metadata == {"mesh": "2x4"}
    assert set(loaded.tensors) == set(originals)

    shardings = _arrays(state_shardings(nnx.state(model), mesh))
    placed = {}
    for name, host in loaded.tensors.items():
        original = originals[name]
        assert _same_layout(original.sharding, shardings[name], original.ndim), name
        placed[name] = place_host_array(host, original.sharding, copy=True)
        assert placed[name].sharding == original.sharding, name
        assert placed[name].dtype == original.dtype, name
        np.testing.assert_array_equal(np.asarray(placed[name]), np.asarray(original), err_msg=name)
        for shard, original_shard in zip(
            sorted(placed[name].addressable_shards, key=lambda shard: shard.device.id),
            sorted(original.addressable_shards, key=lambda shard: shard.device.id),
            strict=True,
        ):
            assert shard.device == original_shard.device
            assert shard.index == original_shard.index
            np.testing.assert_array_equal(np.asarray(shard.data), np.asarray(original_shard.data))

    # A model built from other weights, given the reloaded parameters, computes the same outputs bit for bit.
    other = eager_sharded_init(_builder(1), mesh)
    reference_outputs = _outputs(model, mesh)
    assert not np.array_equal(_outputs(other, mesh), reference_outputs)
    reloaded_state = jax.tree_util.tree_map_with_path(lambda leaf_path, _: placed[_name(leaf_path)], nnx.state(other))
    nnx.update(other, reloaded_state)
    for name, value in _arrays(nnx.state(other)).items():
        assert value.sharding == originals[name].sharding, name
    np.testing.assert_array_equal(_outputs(other, mesh), reference_outputs)
