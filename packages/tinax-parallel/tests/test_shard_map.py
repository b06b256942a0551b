"""Tests for tinax.parallel.shard_mapped."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from tinax.parallel import shard_mapped

DEVICE_COUNT = 8


def _manual_mesh() -> Mesh:
    return Mesh(np.array(jax.devices()[:DEVICE_COUNT]), ("i",), axis_types=(AxisType.Manual,))


def _mixed_mesh(other: AxisType) -> Mesh:
    devices = np.array(jax.devices()[:DEVICE_COUNT]).reshape(2, 4)
    return Mesh(devices, ("x", "y"), axis_types=(AxisType.Manual, other))


def _both(function: Callable[..., Any]) -> list[Callable[..., Any]]:
    return [function, jax.jit(function)]


def _host_data() -> np.ndarray:
    return np.arange(DEVICE_COUNT * 3, dtype=np.float32).reshape(DEVICE_COUNT, 3)


def test_exported() -> None:
    import tinax.parallel

    assert "shard_mapped" in tinax.parallel.__all__


@pytest.mark.parametrize("jitted", [False, True])
def test_psum_and_pmean_match_numpy(jitted: bool) -> None:
    data = _host_data()

    def body(block: jax.Array) -> tuple[jax.Array, jax.Array]:
        return jax.lax.psum(block, "i"), jax.lax.pmean(block, "i")

    wrapped = shard_mapped(body, mesh=_manual_mesh(), in_specs=P("i"), out_specs=(P(), P()))
    run = jax.jit(wrapped) if jitted else wrapped
    total, mean = run(jnp.asarray(data))
    np.testing.assert_allclose(np.asarray(total), data.sum(axis=0, keepdims=True))
    np.testing.assert_allclose(np.asarray(mean), data.mean(axis=0, keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("jitted", [False, True])
def test_all_gather_matches_numpy(jitted: bool) -> None:
    data = _host_data()

    def body(block: jax.Array) -> jax.Array:
        return jax.lax.all_gather(block, "i", tiled=True)

    wrapped = shard_mapped(body, mesh=_manual_mesh(), in_specs=P("i"), out_specs=P("i"))
    run = jax.jit(wrapped) if jitted else wrapped
    gathered = np.asarray(run(data))
    # Every shard holds the whole array; out_specs concatenates the copies.
    np.testing.assert_array_equal(gathered, np.tile(data, (DEVICE_COUNT, 1)))


@pytest.mark.parametrize("jitted", [False, True])
def test_ppermute_matches_numpy(jitted: bool) -> None:
    data = _host_data()
    shift = [(source, (source + 1) % DEVICE_COUNT) for source in range(DEVICE_COUNT)]

    def body(block: jax.Array) -> jax.Array:
        return jax.lax.ppermute(block, "i", shift)

    wrapped = shard_mapped(body, mesh=_manual_mesh(), in_specs=P("i"), out_specs=P("i"))
    run = jax.jit(wrapped) if jitted else wrapped
    np.testing.assert_array_equal(np.asarray(run(data)), np.roll(data, 1, axis=0))


@pytest.mark.parametrize("other", [AxisType.Auto, AxisType.Explicit])
def test_subset_of_manual_axes_runs(other: AxisType) -> None:
    mesh = _mixed_mesh(other)
    data = np.arange(2 * 8, dtype=np.float32).reshape(2, 8)

    def body(block: jax.Array) -> jax.Array:
        assert block.shape == (1, 8)  # Only 'x' is mapped by hand.
        return jax.lax.psum(block, "x")

    wrapped = shard_mapped(body, mesh=mesh, in_specs=P("x"), out_specs=P(), axis_names=frozenset({"x"}))
    for run in _both(wrapped):
        np.testing.assert_allclose(np.asarray(run(data)), data.sum(axis=0, keepdims=True))


def test_subset_accepts_input_sharded_over_other_axis() -> None:
    mesh = _mixed_mesh(AxisType.Explicit)
    retyped = Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto, AxisType.Explicit))
    data = np.arange(2 * 8, dtype=np.float32).reshape(2, 8)
    placed = jax.device_put(data, NamedSharding(retyped, P(None, "y")))
    wrapped = shard_mapped(
        lambda block: jax.lax.pmean(block, "x"), mesh=mesh, in_specs=P("x"), out_specs=P(), axis_names={"x"}
    )
    for run in _both(wrapped):
        np.testing.assert_allclose(np.asarray(run(placed)), data.mean(axis=0, keepdims=True))


def test_pytree_specs_and_static_none_leaf() -> None:
    data = _host_data()

    def body(pair: dict[str, jax.Array], scale: float) -> dict[str, jax.Array]:
        return {"sum": jax.lax.psum(pair["a"], "i") * scale, "local": pair["b"] + 1}

    wrapped = shard_mapped(
        body,
        mesh=_manual_mesh(),
        in_specs=({"a": P("i"), "b": P("i")}, None),
        out_specs={"sum": P(), "local": P("i")},
    )
    out = wrapped({"a": data, "b": data}, 2.0)
    np.testing.assert_allclose(np.asarray(out["sum"]), 2 * data.sum(axis=0, keepdims=True))
    np.testing.assert_array_equal(np.asarray(out["local"]), data + 1)


def test_eval_shape_with_shardings_over_manual_mesh() -> None:
    mesh = _manual_mesh()

    def body(block: jax.Array) -> tuple[jax.Array, jax.Array]:
        return jax.lax.psum(block, "i"), jax.lax.all_gather(block, "i", tiled=True)

    wrapped = shard_mapped(body, mesh=mesh, in_specs=P("i"), out_specs=(P(), P("i")))
    argument = jax.ShapeDtypeStruct((DEVICE_COUNT, 3), jnp.float32, sharding=NamedSharding(mesh, P("i")))
    total, gathered = jax.eval_shape(wrapped, argument)
    assert (total.shape, total.dtype) == ((1, 3), jnp.float32)
    assert (gathered.shape, gathered.dtype) == ((DEVICE_COUNT * DEVICE_COUNT, 3), jnp.float32)


def test_eval_shape_subset_of_manual_axes() -> None:
    mesh = _mixed_mesh(AxisType.Auto)
    wrapped = shard_mapped(
        lambda block: jax.lax.psum(block, "x"), mesh=mesh, in_specs=P("x"), out_specs=P(), axis_names={"x"}
    )
    argument = jax.ShapeDtypeStruct((2, 8), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    assert jax.eval_shape(wrapped, argument).shape == (1, 8)


class _Recorder:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, block: jax.Array) -> jax.Array:
        self.calls += 1
        return block


def test_wrapping_never_calls_the_function() -> None:
    recorder = _Recorder()
    shard_mapped(recorder, mesh=_manual_mesh(), in_specs=P("i"), out_specs=P("i"))
    assert recorder.calls == 0


def test_validation_fails_before_the_function_is_called() -> None:
    recorder = _Recorder()
    with pytest.raises(ValueError, match="'y'"):
        shard_mapped(recorder, mesh=_mixed_mesh(AxisType.Auto), in_specs=P("y"), out_specs=P(), axis_names={"x"})
    assert recorder.calls == 0


def _identity(block: jax.Array) -> jax.Array:
    return block


def test_rejects_non_callable() -> None:
    with pytest.raises(TypeError, match=r"^function must be callable, got 3 \(int\)$"):
        shard_mapped(3, mesh=_manual_mesh(), in_specs=P("i"), out_specs=P("i"))  # type: ignore[call-overload]


def test_rejects_non_mesh() -> None:
    abstract = _manual_mesh().abstract_mesh
    with pytest.raises(TypeError, match=r"^mesh must be a jax.sharding.Mesh, got .*\(AbstractMesh\)$"):
        shard_mapped(_identity, mesh=abstract, in_specs=P("i"), out_specs=P("i"))  # type: ignore[arg-type]


@pytest.mark.parametrize("flag", [1, "yes", None, np.bool_(True)])
def test_rejects_non_bool_check_vma(flag: object) -> None:
    with pytest.raises(TypeError, match=r"^check_vma must be a bool, got "):
        shard_mapped(_identity, mesh=_manual_mesh(), in_specs=P("i"), out_specs=P("i"), check_vma=flag)  # type: ignore[arg-type]


def test_check_vma_false_is_accepted() -> None:
    wrapped = shard_mapped(
        lambda block: jax.lax.psum(block, "i"), mesh=_manual_mesh(), in_specs=P("i"), out_specs=P(), check_vma=False
    )
    data = _host_data()
    np.testing.assert_allclose(np.asarray(wrapped(data)), data.sum(axis=0, keepdims=True))


@pytest.mark.parametrize("names", [("x",), ["x"], "x", None])
def test_rejects_axis_names_that_are_not_a_set(names: object) -> None:
    with pytest.raises(TypeError, match=r"^axis_names must be a frozenset of mesh axis names, got "):
        shard_mapped(_identity, mesh=_mixed_mesh(AxisType.Auto), in_specs=P("x"), out_specs=P("x"), axis_names=names)  # type: ignore[arg-type]


def test_rejects_non_str_axis_name() -> None:
    with pytest.raises(TypeError, match=r"^axis_names must be a frozenset of str mesh axis names, got 0 \(int\)$"):
        shard_mapped(_identity, mesh=_manual_mesh(), in_specs=P("i"), out_specs=P("i"), axis_names=frozenset({0}))  # type: ignore[arg-type]


def test_rejects_unknown_axis_name() -> None:
    expected = r"^axis_names must be a frozenset of axis names of the mesh .*got 'z' \(str\)$"
    with pytest.raises(ValueError, match=expected):
        shard_mapped(_identity, mesh=_manual_mesh(), in_specs=P("i"), out_specs=P("i"), axis_names=frozenset({"z"}))


def test_rejects_non_manual_axis_in_axis_names() -> None:
    with pytest.raises(ValueError, match=r"^mesh axis 'y' must be AxisType.Manual"):
        shard_mapped(_identity, mesh=_mixed_mesh(AxisType.Auto), in_specs=P(), out_specs=P(), axis_names={"x", "y"})


@pytest.mark.parametrize("other", [AxisType.Auto, AxisType.Explicit])
def test_empty_axis_names_requires_every_axis_manual(other: AxisType) -> None:
    with pytest.raises(ValueError, match=r"^mesh axis 'y' must be AxisType.Manual"):
        shard_mapped(_identity, mesh=_mixed_mesh(other), in_specs=P("x"), out_specs=P("x"))


def test_rejects_non_partition_spec_leaf() -> None:
    with pytest.raises(TypeError, match=r"^in_specs\[1\] must be a jax.sharding.PartitionSpec, got 'i' \(str\)$"):
        shard_mapped(_identity, mesh=_manual_mesh(), in_specs=(P("i"), "i"), out_specs=P("i"))
    expected = r"^out_specs\['a'\]\[0\] must be a jax.sharding.PartitionSpec, got 'i' \(str\)$"
    with pytest.raises(TypeError, match=expected):
        # A tuple is a pytree node, not a spec: its leaves are checked.
        shard_mapped(_identity, mesh=_manual_mesh(), in_specs=P("i"), out_specs={"a": ("i",)})


def test_rejects_top_level_none_in_specs() -> None:
    with pytest.raises(TypeError, match=r"^in_specs must be a pytree of jax.sharding.PartitionSpec"):
        shard_mapped(_identity, mesh=_manual_mesh(), in_specs=None, out_specs=P("i"))


def test_rejects_spec_referencing_non_manual_axis() -> None:
    mesh = _mixed_mesh(AxisType.Auto)
    with pytest.raises(ValueError, match=r"^in_specs must be a PartitionSpec over the manual axes \('x',\).*'y'"):
        shard_mapped(_identity, mesh=mesh, in_specs=P("x", "y"), out_specs=P("x"), axis_names={"x"})
    with pytest.raises(ValueError, match=r"^out_specs\[0\] must be .*references axis 'y' \(a non-manual mesh axis\)"):
        shard_mapped(_identity, mesh=mesh, in_specs=P("x"), out_specs=(P(("x", "y")),), axis_names={"x"})


def test_rejects_spec_referencing_unknown_axis() -> None:
    with pytest.raises(ValueError, match=r"references axis 'q' \(not a mesh axis\)"):
        shard_mapped(_identity, mesh=_manual_mesh(), in_specs=P("q"), out_specs=P("i"))
