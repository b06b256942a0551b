"""Restoring onto other topologies in one process: Explicit axes survive, impossible layouts are refused up front.

Orbax issue #2408 reported checkpoints losing ``AxisType.Explicit``; with the
Orbax installed here the axis types are recorded and restored, and these
tests keep it so. A target sharding that cannot hold an array (an uneven
split, an abstract mesh with no mesh set) is
refused with a ``ValueError`` naming the leaf, the shape and the mesh before
Orbax is asked to read anything: the tests replace Orbax's load with a
function that fails the test if it is called. The multi-process cases (other
process counts, a mesh of another process's devices) are in
``tests-integration/test_resume_topologies.py``.
"""

from __future__ import annotations

import grain
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint.experimental.v1 as ocp
import pytest
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec

from tinax.checkpointing import (
    TrainingCheckpointManager,
    abstract_restore_target,
    load_checkpointables,
    load_training_checkpoint,
)

EXPLICIT = (AxisType.Explicit, AxisType.Explicit)
VALUES = np.arange(96, dtype=np.float32).reshape(8, 12)


def _mesh(shape: tuple[int, int]) -> jax.sharding.Mesh:
    return jax.make_mesh(shape, ("data", "model"), axis_types=EXPLICIT)


def _state(mesh: jax.sharding.Mesh, spec: tuple) -> dict:
    return {
        "w": jax.device_put(VALUES, NamedSharding(mesh, PartitionSpec(*spec))),
        "keys": jax.device_put(jax.random.split(jax.random.key(4), 8), NamedSharding(mesh, PartitionSpec(spec[0]))),
    }


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory):
    """A manager root holding one training checkpoint, step 3, saved on an Explicit 2x4 mesh."""
    folder = tmp_path_factory.mktemp("topologies") / "root"
    manager = TrainingCheckpointManager(
        folder,
        save_interval_steps=1,
        keep_last=1,
        keep_every=None,
        keep_best=None,
        best_mode=None,
        save_in_flight="wait",
        create=True,
    )
    state = _state(_mesh((2, 4)), ("data", "model"))
    manager.save(3, state, {"count": jnp.asarray(2)}, jax.random.key(9), {"seen": 1}, _iterator())
    manager.wait()
    return manager


def _keys() -> jax.Array:
    return jax.random.split(jax.random.key(4), 8)


def _iterator():
    return iter(grain.MapDataset.range(10).to_iter_dataset())


def _load(function: str, manager: TrainingCheckpointManager, model_target: object) -> object:
    """Loads the model part of step 3 through one of the three restoring functions."""
    path = manager.root / "3"
    if function == "load_checkpointables":
        return load_checkpointables(path, {"model": model_target})["model"]
    others = ({"count": np.ndarray}, abstract_restore_target(jax.random.key(0)), {"seen": 0}, _iterator())
    if function == "load_training_checkpoint":
        return load_training_checkpoint(path, model_target, *others).model
    return manager.restore(3, model_target, *others).model


FUNCTIONS = ["load_checkpointables", "load_training_checkpoint", "manager.restore"]


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize(
    ("mesh_shape", "spec"),
    [((2, 4), ("data", "model")), ((4, 2), ("model", "data"))],
    ids=["same-mesh", "transposed-4x2"],
)
def test_explicit_axis_types_survive_a_save_and_restore(root, function, mesh_shape, spec):
    live = _state(_mesh(mesh_shape), spec)
    restored = _load(function, root, abstract_restore_target(live))
    for name in ("w", "keys"):
        assert restored[name].sharding == live[name].sharding
        assert restored[name].sharding.mesh.axis_types == EXPLICIT
        assert jax.typeof(restored[name]).sharding.mesh.axis_types == EXPLICIT
    assert np.array_equal(np.asarray(restored["w"]), VALUES)
    assert np.array_equal(jax.random.key_data(restored["keys"]), jax.random.key_data(live["keys"]))


def test_a_target_without_sharding_restores_onto_the_recorded_explicit_mesh(root):
    # What jax.eval_shape gives for unsharded initial values: no sharding at all.
    target = {"w": jax.ShapeDtypeStruct(VALUES.shape, VALUES.dtype), "keys": jax.eval_shape(_keys)}
    restored = _load("load_checkpointables", root, target)
    assert restored["w"].sharding.mesh.axis_types == EXPLICIT
    assert restored["w"].sharding.spec == PartitionSpec("data", "model")
    assert np.array_equal(np.asarray(restored["w"]), VALUES)


@pytest.fixture
def no_reads(monkeypatch):
    def refuse(*arguments, **keywords):
        raise AssertionError("Orbax was asked to read the checkpoint")

    monkeypatch.setattr(ocp, "load_checkpointables", refuse)


def _with_w(sharding: jax.sharding.Sharding) -> dict:
    keys = jax.ShapeDtypeStruct(
        (8,), jax.random.key(0).dtype, sharding=NamedSharding(_mesh((2, 4)), PartitionSpec("data"))
    )
    return {"w": jax.ShapeDtypeStruct(VALUES.shape, VALUES.dtype, sharding=sharding), "keys": keys}


@pytest.mark.parametrize("function", FUNCTIONS)
def test_a_mesh_axis_that_does_not_divide_a_dimension_is_refused_before_any_read(root, no_reads, function):
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Explicit,))
    with pytest.raises(ValueError, match="Nothing was read") as refused:
        _load(function, root, _with_w(NamedSharding(mesh, PartitionSpec(None, "x"))))
    message = str(refused.value)
    assert isinstance(refused.value, KeyError)
    assert "targets['model']['w']" in message
    assert "shape (8, 12)" in message
    assert "Mesh('x': 8" in message
    assert "mesh axis 'x' (size 8) splits dimension 1 of size 12 into 8 parts" in message


def test_several_mesh_axes_on_one_dimension_are_counted_together(root, no_reads):
    sharding = NamedSharding(_mesh((2, 4)), PartitionSpec(None, ("data", "model")))
    with pytest.raises(
        ValueError, match=r"mesh axes 'data' \(size 2\) x 'model' \(size 4\) split dimension 1 of size 12"
    ):
        _load("load_checkpointables", root, _with_w(sharding))


@pytest.mark.parametrize("function", FUNCTIONS)
def test_an_abstract_mesh_without_a_mesh_set_is_refused_before_any_read(root, no_reads, function):
    abstract = AbstractMesh((2, 4), ("data", "model"), axis_types=EXPLICIT)
    with pytest.raises(ValueError, match=r"no mesh is set; load inside `with jax.set_mesh\(mesh\):`") as refused:
        _load(function, root, _with_w(NamedSharding(abstract, PartitionSpec("data", "model"))))
    assert "abstract mesh AbstractMesh('data': 2, 'model': 4" in str(refused.value)


def test_an_abstract_mesh_target_restores_inside_set_mesh(root):
    abstract = AbstractMesh((2, 4), ("data", "model"), axis_types=EXPLICIT)
    target = _with_w(NamedSharding(abstract, PartitionSpec("data", "model")))
    with jax.set_mesh(_mesh((2, 4))):
        restored = _load("load_checkpointables", root, target)
    assert np.array_equal(np.asarray(restored["w"]), VALUES)
    assert restored["w"].sharding.mesh.axis_types == EXPLICIT
