"""Tests for the Flax NNX helpers: abstract_sharded_state, eager_sharded_init, state_shardings."""

from __future__ import annotations

import sys

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

flax = pytest.importorskip("flax", reason="the NNX helpers need the nnx extra: pip install 'tinax-parallel[nnx]'")

from flax import nnx  # noqa: E402

from tinax.parallel import abstract_sharded_state, eager_sharded_init, make_mesh, state_shardings  # noqa: E402

AUTO = AxisType.Auto
EXPLICIT = AxisType.Explicit
MANUAL = AxisType.Manual

# Partitioning annotation of each kernel, by its path in the model's state.
KERNEL_SPECS = {
    ("encoder", "kernel"): PartitionSpec("data", "model"),
    ("decoder", "kernel"): PartitionSpec("model", "data"),
}


class TwoLayers(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        init = nnx.initializers.lecun_normal()
        self.encoder = nnx.Linear(8, 16, kernel_init=nnx.with_partitioning(init, ("data", "model")), rngs=rngs)
        self.decoder = nnx.Linear(16, 8, kernel_init=nnx.with_partitioning(init, ("model", "data")), rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.decoder(self.encoder(x))


def build() -> TwoLayers:
    return TwoLayers(nnx.Rngs(0))


def explicit_mesh() -> Mesh:
    return jax.make_mesh((2, 4), ("data", "model"))


def auto_mesh() -> Mesh:
    return Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"), axis_types=(AUTO, AUTO))


MESHES = pytest.mark.parametrize("mesh_factory", [explicit_mesh, auto_mesh], ids=["explicit", "auto"])


def expected_spec(path: tuple[object, ...]) -> PartitionSpec:
    return KERNEL_SPECS.get(tuple(path), PartitionSpec())


def flat_leaves(tree: object) -> dict[tuple[object, ...], object]:
    # Path (mapping keys only, without the Variable's own attribute) -> leaf.
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {tuple(key.key for key in path if isinstance(key, jax.tree_util.DictKey)): leaf for path, leaf in leaves}


class Recorder:
    """A zero-argument initializer that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> TwoLayers:
        self.calls += 1
        return build()


# abstract_sharded_state ------------------------------------------------------


@MESHES
def test_abstract_state_leaves_carry_the_annotated_sharding_on_the_concrete_mesh(mesh_factory):
    mesh = mesh_factory()
    abstract = abstract_sharded_state(build, mesh)
    assert isinstance(abstract, nnx.GraphState)
    leaves = flat_leaves(abstract)
    assert set(leaves) == {
        ("encoder", "kernel"),
        ("encoder", "bias"),
        ("decoder", "kernel"),
        ("decoder", "bias"),
    }
    for path, leaf in leaves.items():
        assert isinstance(leaf, jax.ShapeDtypeStruct), path
        assert isinstance(leaf.sharding, NamedSharding), path
        assert isinstance(leaf.sharding.mesh, Mesh), path  # Concrete, not an AbstractMesh.
        assert leaf.sharding.mesh == mesh, path
        assert leaf.sharding.spec == expected_spec(path), path
    assert leaves[("encoder", "kernel")].shape == (8, 16)
    assert leaves[("decoder", "kernel")].shape == (16, 8)


def test_abstract_state_merges_back_into_an_abstract_module():
    abstract = abstract_sharded_state(build, explicit_mesh())
    model = nnx.merge(abstract)
    assert isinstance(model, TwoLayers)
    assert isinstance(model.encoder.kernel.get_value(), jax.ShapeDtypeStruct)


def test_abstract_state_only_traces_the_initializer():
    seen = []

    def initializer() -> TwoLayers:
        model = build()
        seen.append(model.encoder.kernel.get_value())
        return model

    abstract = abstract_sharded_state(initializer, explicit_mesh())
    assert len(seen) == 1
    assert isinstance(seen[0], jax.core.Tracer)  # Never a concrete, allocated array.
    assert not any(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(abstract))


def test_abstract_state_refuses_an_initializer_that_returns_no_graph_node():
    with pytest.raises(TypeError, match=r"initializer\(\) must be an NNX graph node"):
        abstract_sharded_state(lambda: 3, explicit_mesh())


@pytest.mark.parametrize(
    "initializer",
    [lambda: {"w": jax.numpy.ones(2)}, lambda: None, lambda: {"w": nnx.Param(jax.numpy.ones(2))}, lambda: [1.0]],
    ids=["dict_of_arrays", "none", "dict_of_variables", "list"],
)
def test_abstract_state_accepts_any_graph_that_nnx_split_accepts(initializer):
    # As in tinax 0.2: a dict, a list or None is split into a GraphDef and a State too.
    abstract = abstract_sharded_state(initializer, auto_mesh())
    assert isinstance(abstract, nnx.GraphState)
    for leaf in jax.tree.leaves(abstract):
        assert isinstance(leaf, jax.ShapeDtypeStruct)
        assert leaf.sharding.mesh == auto_mesh()


# eager_sharded_init ----------------------------------------------------------


@MESHES
def test_eager_init_places_every_variable_as_annotated(mesh_factory):
    mesh = mesh_factory()
    with nnx.use_eager_sharding(False):  # The helper turns it on regardless.
        model = eager_sharded_init(build, mesh)
    assert isinstance(model, TwoLayers)
    leaves = flat_leaves(nnx.state(model))
    assert len(leaves) == 4
    for path, value in leaves.items():
        assert isinstance(value, jax.Array), path
        assert isinstance(value.sharding, NamedSharding), path
        assert value.sharding.mesh == mesh, path
        # Unannotated biases may come out as P(None), the same layout as P().
        assert value.sharding.is_equivalent_to(NamedSharding(mesh, expected_spec(path)), value.ndim), path


def test_eager_init_matches_a_plain_build_in_value():
    model = eager_sharded_init(build, explicit_mesh())
    with jax.set_mesh(explicit_mesh()):
        reference = build()
    np.testing.assert_array_equal(np.asarray(model.encoder.kernel.get_value()), reference.encoder.kernel.get_value())


def test_eager_init_calls_the_initializer_once_and_restores_the_setting():
    recorder = Recorder()
    with nnx.use_eager_sharding(False):
        eager_sharded_init(recorder, explicit_mesh())
        assert not nnx.using_eager_sharding()
    assert recorder.calls == 1


@MESHES
def test_eager_init_returns_what_the_initializer_returns(mesh_factory):
    sentinel = object()
    assert eager_sharded_init(lambda: sentinel, mesh_factory()) is sentinel


class WithReplicated(nnx.Module):
    def __init__(self) -> None:
        self.scale = nnx.Param(jax.numpy.ones(8), out_sharding=(None,))
        self.rows = nnx.Param(jax.numpy.ones((8, 4)), out_sharding=("data", None))
        self.columns = nnx.Param(jax.numpy.ones((8, 4)), out_sharding=(None, "model"))


def test_eager_init_over_an_auto_mesh_gives_specs_without_trailing_none_as_tinax_02():
    # tinax 0.2 built the state under nnx.jit, whose outputs carried the shorter specs.
    mesh = auto_mesh()
    model = eager_sharded_init(WithReplicated, mesh)
    assert model.scale.get_value().sharding.spec == PartitionSpec()
    assert model.rows.get_value().sharding.spec == PartitionSpec("data")
    assert model.columns.get_value().sharding.spec == PartitionSpec(None, "model")
    np.testing.assert_array_equal(np.asarray(model.rows.get_value()), np.ones((8, 4)))
    assert model.rows.get_value().sharding.is_equivalent_to(NamedSharding(mesh, PartitionSpec("data", None)), 2)


def test_eager_init_over_an_explicit_mesh_keeps_the_annotated_specs():
    model = eager_sharded_init(WithReplicated, explicit_mesh())
    assert model.scale.get_value().sharding.spec == PartitionSpec(None)
    assert model.rows.get_value().sharding.spec == PartitionSpec("data", None)


# state_shardings -------------------------------------------------------------


@MESHES
def test_state_shardings_follow_annotations_when_eager_sharding_is_off(mesh_factory):
    mesh = mesh_factory()
    with jax.set_mesh(mesh), nnx.use_eager_sharding(False):
        model = build()
    state = nnx.state(model)
    kernel = model.encoder.kernel.get_value()
    assert kernel.sharding.is_fully_replicated  # The values were not placed.

    shardings = state_shardings(state, mesh)
    assert isinstance(shardings, nnx.State)
    leaves = flat_leaves(shardings)
    assert len(leaves) == 4
    for path, sharding in leaves.items():
        assert isinstance(sharding, NamedSharding), path
        assert sharding.mesh == mesh, path
        assert sharding.spec == expected_spec(path), path


def test_state_shardings_place_state_where_the_annotations_say():
    mesh = explicit_mesh()
    with jax.set_mesh(mesh), nnx.use_eager_sharding(False):
        model = build()
    state = nnx.state(model)
    placed = jax.device_put(state, state_shardings(state, mesh))
    placed_leaves = flat_leaves(placed)
    for path, value in flat_leaves(state).items():
        layout = NamedSharding(mesh, expected_spec(path))
        assert placed_leaves[path].sharding.is_equivalent_to(layout, np.ndim(value)), path
        np.testing.assert_array_equal(np.asarray(placed_leaves[path]), np.asarray(value))


def test_state_shardings_cover_optimizer_state_independently():
    optax = pytest.importorskip("optax")
    mesh = explicit_mesh()
    model = eager_sharded_init(build, mesh)
    with jax.set_mesh(mesh):
        optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    shardings = flat_leaves(state_shardings(nnx.state(optimizer), mesh))
    moments = {path: sharding for path, sharding in shardings.items() if path[-2:] == ("encoder", "kernel")}
    assert moments, sorted(shardings)
    for path, sharding in moments.items():
        assert sharding.spec == PartitionSpec("data", "model"), path


def test_state_shardings_of_plain_arrays_are_replicated():
    mesh = explicit_mesh()
    shardings = state_shardings({"w": np.zeros((4, 4), np.float32)}, mesh)
    assert shardings["w"] == NamedSharding(mesh, PartitionSpec())


# Mesh policy and argument kinds ----------------------------------------------


def manual_mesh() -> Mesh:
    return make_mesh(jax.devices(), (2, 4), ("data", "model"), axis_types=(MANUAL, MANUAL))


def mixed_mesh() -> Mesh:
    return make_mesh(jax.devices(), (2, 4), ("data", "model"), axis_types=(AUTO, EXPLICIT))


def half_manual_mesh() -> Mesh:
    return make_mesh(jax.devices(), (2, 4), ("data", "model"), axis_types=(EXPLICIT, MANUAL))


BAD_MESHES = pytest.mark.parametrize(
    ("mesh_factory", "axes_text"),
    [
        (manual_mesh, "'data' (Manual), 'model' (Manual)"),
        (mixed_mesh, "'data' (Auto), 'model' (Explicit)"),
        (half_manual_mesh, "'data' (Explicit), 'model' (Manual)"),
    ],
    ids=["manual", "auto-explicit", "explicit-manual"],
)


@BAD_MESHES
@pytest.mark.parametrize("helper", [abstract_sharded_state, eager_sharded_init])
def test_initializers_refuse_inhomogeneous_meshes_before_calling(helper, mesh_factory, axes_text):
    recorder = Recorder()
    with pytest.raises(ValueError, match="mesh must have all axes Auto or all axes Explicit") as caught:
        helper(recorder, mesh_factory())
    assert axes_text in str(caught.value)
    assert recorder.calls == 0


@BAD_MESHES
def test_state_shardings_refuses_inhomogeneous_meshes(mesh_factory, axes_text):
    state = nnx.state(eager_sharded_init(build, explicit_mesh()))
    with pytest.raises(ValueError, match="mesh must have all axes Auto or all axes Explicit") as caught:
        state_shardings(state, mesh_factory())
    assert axes_text in str(caught.value)


@pytest.mark.parametrize("helper", [abstract_sharded_state, eager_sharded_init])
def test_initializers_refuse_wrong_kinds(helper):
    with pytest.raises(TypeError, match=r"initializer must be callable, got 3 \(int\)"):
        helper(3, explicit_mesh())
    recorder = Recorder()
    with pytest.raises(TypeError, match="mesh must be a jax.sharding.Mesh"):
        helper(recorder, explicit_mesh().abstract_mesh)
    with pytest.raises(TypeError, match="mesh must be a jax.sharding.Mesh"):
        helper(recorder, None)
    assert recorder.calls == 0


def test_state_shardings_refuses_wrong_kinds():
    state = nnx.state(eager_sharded_init(build, explicit_mesh()))
    with pytest.raises(TypeError, match=r"state must be a mapping of NNX state, got \[1\] \(list\)"):
        state_shardings([1], explicit_mesh())
    with pytest.raises(TypeError, match="mesh must be a jax.sharding.Mesh"):
        state_shardings(state, "mesh")


@pytest.mark.parametrize("helper", [abstract_sharded_state, eager_sharded_init])
def test_initializers_refuse_an_empty_mesh(helper):
    recorder = Recorder()
    with pytest.raises(ValueError, match="mesh must be a non-empty jax.sharding.Mesh"):
        helper(recorder, Mesh(np.empty((0,), dtype=object), ("x",)))
    assert recorder.calls == 0


# Missing flax ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("helper", "arguments"),
    [
        (abstract_sharded_state, lambda: (build, explicit_mesh())),
        (eager_sharded_init, lambda: (build, explicit_mesh())),
        (state_shardings, lambda: ({}, explicit_mesh())),
    ],
    ids=["abstract_sharded_state", "eager_sharded_init", "state_shardings"],
)
def test_missing_flax_names_the_extra(monkeypatch, helper, arguments):
    args = arguments()
    # A None entry in sys.modules makes the import inside the helper fail as if
    # flax were not installed.
    monkeypatch.setitem(sys.modules, "flax", None)
    monkeypatch.setitem(sys.modules, "flax.nnx", None)
    with pytest.raises(ImportError, match=r'pip install "tinax-parallel\[nnx\]"') as caught:
        helper(*args)
    assert helper.__name__ in str(caught.value)
    assert isinstance(caught.value.__cause__, ImportError)
