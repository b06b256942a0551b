"""Behaviour of tinax.nn: snapshots, restores and clones of Flax NNX graphs."""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from tinax_testing import TEST_DEVICE_COUNT, import_side_effects

flax = pytest.importorskip("flax", reason="tinax.nn needs the nnx extra: pip install 'tinax-parallel[nnx]'")

from flax import nnx  # noqa: E402

import tinax.nn as nn_api  # noqa: E402
from tinax.nn import clone_graph, restore_graph, snapshot_graph  # noqa: E402


class Counter(nnx.Module):
    def __init__(self) -> None:
        self.total = nnx.BatchStat(jnp.asarray(0, dtype=jnp.int32))


class SharedCounters(nnx.Module):
    """Two attributes holding one submodule, so graph aliases can be checked."""

    def __init__(self) -> None:
        shared = Counter()
        self.left = shared
        self.right = shared


class Mixed(nnx.Module):
    """Parameters, a random stream and NumPy values (in a Variable and bare)."""

    def __init__(self) -> None:
        self.rngs = nnx.Rngs(0)
        self.linear = nnx.Linear(2, 2, rngs=self.rngs)
        self.host_stat = nnx.Variable(np.zeros(3))
        self.host_buffer = np.zeros(2)


def total(module: nnx.Module) -> int:
    return int(module.left.total[...])


def test_public_names():
    assert sorted(nn_api.__all__) == ["clone_graph", "restore_graph", "snapshot_graph"]


def test_import_starts_no_backend_and_does_not_import_flax():
    assert import_side_effects("tinax.nn") == {"backends_initialized": False, "integrations": []}


# snapshot_graph / restore_graph ---------------------------------------------------------


def test_snapshot_restores_type_state_and_aliases():
    module = SharedCounters()
    module.left.total[...] = 4

    snapshot = snapshot_graph(module)
    module.left.total[...] = 8
    restored = restore_graph(snapshot, copy=True)

    assert isinstance(snapshot, nnx.GraphState)
    assert isinstance(restored, SharedCounters)
    assert restored.left is restored.right
    assert restored.left is not module.left
    assert total(restored) == 4
    assert total(module) == 8


def host_values(tree: object) -> list[np.ndarray]:
    """The leaves of a state as NumPy arrays (key arrays as their key data)."""
    leaves = jax.tree.leaves(tree)
    return [
        np.asarray(jax.random.key_data(leaf) if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key) else leaf)
        for leaf in leaves
    ]


def test_snapshot_holds_the_module_state_and_leaves_the_module_alone():
    module = Mixed()
    live_state = nnx.state(module)
    expected = host_values(live_state)

    snapshot = snapshot_graph(module)

    captured = host_values(snapshot)
    assert len(captured) == len(expected)
    for snapshot_leaf, live_leaf in zip(captured, expected, strict=True):
        np.testing.assert_array_equal(snapshot_leaf, live_leaf)
    assert jax.tree.structure(nnx.state(module)) == jax.tree.structure(live_state)


def test_restoring_with_copy_gives_independent_modules():
    snapshot = snapshot_graph(SharedCounters())

    first = restore_graph(snapshot, copy=True)
    second = restore_graph(snapshot, copy=True)
    first.left.total[...] = 11

    assert total(second) == 0
    assert total(restore_graph(snapshot, copy=True)) == 0
    assert first.left.total is not second.left.total


def test_restoring_without_copy_shares_the_snapshots_variables():
    snapshot = snapshot_graph(SharedCounters())

    first = restore_graph(snapshot, copy=False)
    second = restore_graph(snapshot, copy=False)
    first.left.total[...] = 7

    assert first is not second
    assert first.left.total is second.left.total
    assert total(second) == 7
    # The snapshot itself changed, so even a copying restore now sees 7.
    assert total(restore_graph(snapshot, copy=True)) == 7


def test_snapshots_and_clones_copy_numpy_values():
    module = Mixed()
    snapshot = snapshot_graph(module)
    clone = clone_graph(module)

    module.host_stat.get_value()[0] = 5.0
    module.host_buffer[1] = 6.0
    restored = restore_graph(snapshot, copy=True)

    np.testing.assert_array_equal(restored.host_stat.get_value(), np.zeros(3))
    np.testing.assert_array_equal(restored.host_buffer, np.zeros(2))
    np.testing.assert_array_equal(clone.host_stat.get_value(), np.zeros(3))
    np.testing.assert_array_equal(clone.host_buffer, np.zeros(2))


def test_restoring_with_copy_also_copies_numpy_values():
    snapshot = snapshot_graph(Mixed())
    restored = restore_graph(snapshot, copy=True)
    restored.host_buffer[0] = 1.0
    np.testing.assert_array_equal(restore_graph(snapshot, copy=True).host_buffer, np.zeros(2))


def test_snapshot_restore_and_clone_keep_shardings():
    mesh = jax.make_mesh((TEST_DEVICE_COUNT,), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))

    class Sharded(nnx.Module):
        def __init__(self) -> None:
            self.weights = nnx.Param(jax.device_put(jnp.arange(2.0 * TEST_DEVICE_COUNT), sharding))

    module = Sharded()
    restored = restore_graph(snapshot_graph(module), copy=True)
    cloned = clone_graph(module)

    for copy in (restored, cloned):
        assert copy.weights.get_value().sharding.is_equivalent_to(sharding, ndim=1)
        np.testing.assert_array_equal(copy.weights.get_value(), module.weights.get_value())


def test_snapshot_and_restore_work_inside_nnx_jit():
    @nnx.jit
    def doubled_copy(module: Counter) -> jax.Array:
        copy = restore_graph(snapshot_graph(module), copy=True)
        copy.total[...] = copy.total[...] * 2
        return copy.total[...]

    module = Counter()
    module.total[...] = 21
    assert int(doubled_copy(module)) == 42
    assert int(module.total[...]) == 21


# clone_graph ---------------------------------------------------------------------------


def test_clone_has_independent_variables_and_the_same_aliases():
    module = SharedCounters()
    cloned = clone_graph(module)

    assert isinstance(cloned, SharedCounters)
    assert cloned is not module
    assert cloned.left is cloned.right
    assert cloned.left is not module.left
    assert cloned.left.total is not module.left.total

    cloned.left.total[...] = 9
    assert int(cloned.right.total[...]) == 9
    assert total(module) == 0


def test_clone_continues_the_random_stream_from_the_same_state():
    module = Mixed()
    cloned = clone_graph(module)

    np.testing.assert_array_equal(jax.random.key_data(cloned.rngs()), jax.random.key_data(module.rngs()))
    np.testing.assert_array_equal(cloned.linear.kernel[...], module.linear.kernel[...])


# Arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [object(), None, [nnx.Param(jnp.ones(1))], nnx.Rngs(0), nnx.Param(jnp.ones(1))],
    ids=["object", "None", "list", "rngs", "variable"],
)
@pytest.mark.parametrize("function", [snapshot_graph, clone_graph], ids=["snapshot", "clone"])
def test_only_modules_are_snapshotted_or_cloned(function, value):
    with pytest.raises(TypeError, match=r"nnx\.Module"):
        function(value)


def test_restore_requires_a_graph_state():
    graphdef, state = nnx.split(Counter())
    for value in (object(), graphdef, state, (graphdef, state)):
        with pytest.raises(TypeError, match="GraphState"):
            restore_graph(value, copy=True)


@pytest.mark.parametrize("copy", [1, None, "yes", np.bool_(True)])
def test_restore_requires_a_bool_copy(copy):
    snapshot = snapshot_graph(Counter())
    with pytest.raises(TypeError, match="copy"):
        restore_graph(snapshot, copy=copy)


def test_restore_accepts_a_graph_state_built_by_flax():
    restored = restore_graph(nnx.GraphState(*nnx.split(SharedCounters())), copy=True)
    assert restored.left is restored.right


@pytest.mark.parametrize(
    ("function", "arguments"),
    [
        (snapshot_graph, (object(),)),
        (clone_graph, (object(),)),
        (restore_graph, (object(),)),
    ],
    ids=["snapshot", "clone", "restore"],
)
def test_missing_flax_names_the_extra(monkeypatch, function, arguments):
    monkeypatch.setitem(sys.modules, "flax", None)
    monkeypatch.setitem(sys.modules, "flax.nnx", None)
    keywords = {"copy": True} if function is restore_graph else {}
    with pytest.raises(ImportError, match=r'pip install "tinax-parallel\[nnx\]"') as caught:
        function(*arguments, **keywords)
    assert isinstance(caught.value.__cause__, ImportError)


@pytest.mark.parametrize("copy", [True, False])
def test_restore_graph_refuses_a_snapshot_that_does_not_describe_a_module(copy):
    graphdef, state = nnx.split(nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"snapshot must be a flax.nnx.GraphState that describes a flax.nnx.Module"):
        restore_graph(nnx.GraphState(graphdef, state), copy=copy)
    graphdef, state = nnx.split({"w": nnx.Param(jnp.ones(2))})
    with pytest.raises(TypeError, match="describes a flax.nnx.Module"):
        restore_graph(nnx.GraphState(graphdef, state), copy=copy)


def test_restored_and_cloned_variables_keep_the_metadata_order_of_the_original():
    layer = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    original = list(layer.kernel.get_metadata())
    snapshot = snapshot_graph(layer)
    assert list(restore_graph(snapshot, copy=True).kernel.get_metadata()) == original
    assert list(restore_graph(snapshot, copy=False).kernel.get_metadata()) == original
    assert list(clone_graph(layer).kernel.get_metadata()) == original
    assert repr(nnx.split(clone_graph(layer))[0]) == repr(nnx.split(layer)[0])
