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

from tinax.grad import value_and_grad
from tinax.jit import bounded_jit
from tinax.parallel import layout, make_mesh, place_host_array, shard_mapped

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


# ---------------------------------------------------------------------------
# Inputs laid out by `layout` on an Explicit mesh of the same devices.

MESH_SHAPES = [pytest.param((2, 4), id="2x4"), pytest.param((4, 2), id="4x2")]
AXES = ("data", "model")
LOSS_SPECS: dict[str, Any] = {"in_specs": (P(), P("data")), "out_specs": P()}


def _explicit_and_manual(shape: tuple[int, int]) -> tuple[Mesh, Mesh]:
    devices = jax.devices()[:DEVICE_COUNT]
    explicit = make_mesh(devices, shape, AXES, axis_types=(AxisType.Explicit, AxisType.Explicit))
    manual_data = make_mesh(devices, shape, AXES, axis_types=(AxisType.Manual, AxisType.Auto))
    return explicit, manual_data


def _laid_out(explicit: Mesh) -> tuple[jax.Array, jax.Array]:
    generator = np.random.default_rng(3)
    weights = generator.normal(size=(5, 3)).astype(np.float32)
    rows = generator.normal(size=(16, 5)).astype(np.float32)
    return (
        place_host_array(weights, layout(explicit, (None, None)), copy=True),
        place_host_array(rows, layout(explicit, ("data", None)), copy=True),
    )


def _shard_loss(weights: jax.Array, rows: jax.Array) -> jax.Array:
    return jax.lax.pmean(jnp.mean(jnp.tanh(rows @ weights) ** 2), "data")


def _mixed_step(loss: Callable[..., jax.Array]) -> Callable[..., tuple[jax.Array, jax.Array]]:
    # The result of the mapped call meets the laid-out input in one computation.
    def step(weights: jax.Array, rows: jax.Array) -> tuple[jax.Array, jax.Array]:
        value = loss(weights, rows)
        return value, rows * value

    return step


def _same_bits(left: object, right: object) -> None:
    left_leaves, right_leaves = jax.tree_util.tree_leaves(left), jax.tree_util.tree_leaves(right)
    assert len(left_leaves) == len(right_leaves)
    for ours, raw in zip(left_leaves, right_leaves, strict=True):
        assert np.asarray(ours).tobytes() == np.asarray(raw).tobytes()
        assert ours.sharding == raw.sharding


@pytest.mark.parametrize("shape", MESH_SHAPES)
@pytest.mark.parametrize("mode", ["eager", "jit", "bounded_jit", "bounded_jit_with_mesh"])
def test_layout_inputs_mix_with_the_results(shape: tuple[int, int], mode: str) -> None:
    explicit, manual_data = _explicit_and_manual(shape)
    weights, rows = _laid_out(explicit)
    ours = shard_mapped(_shard_loss, mesh=manual_data, axis_names=frozenset({"data"}), **LOSS_SPECS)
    raw = jax.shard_map(_shard_loss, mesh=explicit, axis_names={"data"}, **LOSS_SPECS)
    wrap: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
        "eager": lambda step: step,
        "jit": jax.jit,
        "bounded_jit": lambda step: bounded_jit(step, max_traces=1),
        "bounded_jit_with_mesh": lambda step: bounded_jit(step, max_traces=1, mesh=explicit),
    }
    value, scaled = wrap[mode](_mixed_step(ours))(weights, rows)

    assert value.sharding == NamedSharding(explicit, P())
    assert scaled.sharding == rows.sharding
    if mode == "eager":
        expected = _mixed_step(raw)(weights, rows)
    else:
        with jax.set_mesh(explicit):
            expected = jax.jit(_mixed_step(raw))(weights, rows)
    _same_bits((value, scaled), expected)


@pytest.mark.parametrize("shape", MESH_SHAPES)
@pytest.mark.parametrize("mode", ["jit", "bounded_jit", "bounded_jit_with_mesh", "eager_under_set_mesh"])
def test_value_and_grad_matches_raw_shard_map_bit_for_bit(shape: tuple[int, int], mode: str) -> None:
    explicit, manual_data = _explicit_and_manual(shape)
    weights, rows = _laid_out(explicit)
    ours = value_and_grad(shard_mapped(_shard_loss, mesh=manual_data, axis_names=frozenset({"data"}), **LOSS_SPECS))
    raw = jax.jit(jax.value_and_grad(jax.shard_map(_shard_loss, mesh=explicit, axis_names={"data"}, **LOSS_SPECS)))
    expected = raw(weights, rows)
    if mode == "jit":
        got = jax.jit(ours)(weights, rows)
    elif mode == "bounded_jit":
        got = bounded_jit(ours, max_traces=1)(weights, rows)
    elif mode == "bounded_jit_with_mesh":
        got = bounded_jit(ours, max_traces=1, mesh=explicit)(weights, rows)
    else:
        # Eager differentiation of Explicit arrays needs the mesh in context, for any JAX computation.
        with jax.set_mesh(explicit):
            got = ours(weights, rows)
            expected = jax.value_and_grad(jax.shard_map(_shard_loss, mesh=explicit, axis_names={"data"}, **LOSS_SPECS))(
                weights, rows
            )
    _same_bits(got, expected)
    # And the gradient is the gradient: the same math on host, to float32 rounding.
    host_weights, host_rows = np.asarray(weights, np.float64), np.asarray(rows, np.float64)
    activation = np.tanh(host_rows @ host_weights)
    host_gradient = host_rows.T @ (2 * activation * (1 - activation**2)) / activation.size
    np.testing.assert_allclose(np.asarray(got[1]), host_gradient, rtol=1e-4, atol=1e-6)


def test_full_manual_mesh_over_layout_inputs() -> None:
    explicit, _ = _explicit_and_manual((2, 4))
    manual = make_mesh(jax.devices()[:DEVICE_COUNT], (2, 4), AXES, axis_types=(AxisType.Manual, AxisType.Manual))
    grid = place_host_array(np.arange(8 * 16, dtype=np.float32).reshape(8, 16), layout(explicit, AXES), copy=True)
    row_sums = shard_mapped(
        lambda block: jax.lax.psum(block.sum(axis=1), "model"), mesh=manual, in_specs=P(*AXES), out_specs=P("data")
    )
    expected = np.arange(8 * 16, dtype=np.float32).reshape(8, 16).sum(axis=1)
    for run in _both(lambda block: row_sums(block) - jnp.max(block, axis=1)):
        result = run(grid)
        assert result.sharding == NamedSharding(explicit, P("data"))
        np.testing.assert_array_equal(np.asarray(result), expected - np.asarray(grid).max(axis=1))


def test_host_values_next_to_layout_inputs_are_placed_as_in_specs_say() -> None:
    explicit, manual_data = _explicit_and_manual((2, 4))
    weights, rows = _laid_out(explicit)
    ours = shard_mapped(_shard_loss, mesh=manual_data, axis_names=frozenset({"data"}), **LOSS_SPECS)
    for run in _both(ours):
        expected = np.asarray(run(weights, rows))
        for pair in [(np.asarray(weights), rows), (weights, np.asarray(rows))]:
            result = run(*pair)
            assert result.sharding == NamedSharding(explicit, P())
            assert np.asarray(result).tobytes() == expected.tobytes()


def test_host_and_auto_inputs_still_run_on_auto_axes() -> None:
    _, manual_data = _explicit_and_manual((2, 4))
    auto = Mesh(manual_data.devices, AXES, axis_types=(AxisType.Auto, AxisType.Auto))
    weights, rows = (np.asarray(array) for array in _laid_out(_explicit_and_manual((2, 4))[0]))
    ours = shard_mapped(_shard_loss, mesh=manual_data, axis_names=frozenset({"data"}), **LOSS_SPECS)
    on_auto = (
        jax.device_put(weights, NamedSharding(auto, P())),
        jax.device_put(rows, NamedSharding(auto, P("data"))),
    )
    for run in _both(ours):
        for arguments in [(weights, rows), (jnp.asarray(weights), jnp.asarray(rows)), on_auto]:
            result = run(*arguments)
            assert isinstance(result.sharding, NamedSharding)
            assert result.sharding.mesh.axis_types == (AxisType.Auto, AxisType.Auto)


def _other_meshes() -> dict[str, Mesh]:
    devices = jax.devices()[:DEVICE_COUNT]
    explicit = (AxisType.Explicit, AxisType.Explicit)
    return {
        "other-device-order": make_mesh(devices[::-1], (2, 4), AXES, axis_types=explicit),
        "other-axis-names": make_mesh(devices, (2, 4), ("data", "tensor"), axis_types=explicit),
        "other-axis-sizes": make_mesh(devices, (4, 2), AXES, axis_types=explicit),
    }


@pytest.mark.parametrize("which", ["other-device-order", "other-axis-names", "other-axis-sizes"])
@pytest.mark.parametrize("mode", ["eager", "bounded_jit_with_mesh", "jit"])
def test_inputs_on_another_mesh_are_a_value_error_naming_both(which: str, mode: str) -> None:
    other = _other_meshes()[which]
    _, manual_data = _explicit_and_manual((2, 4))
    weights, rows = _laid_out(other)
    ours = shard_mapped(_shard_loss, mesh=manual_data, axis_names=frozenset({"data"}), **LOSS_SPECS)
    if mode == "eager":
        call: Callable[..., Any] = ours
    elif mode == "bounded_jit_with_mesh":
        call = bounded_jit(ours, max_traces=1, mesh=other)
    else:
        call = jax.jit(ours)
    if mode == "jit" and which == "other-device-order":
        # Inside a plain jax.jit the arguments are abstract and carry no devices;
        # JAX itself refuses the mix and names both device lists.
        with pytest.raises(ValueError, match=r"incompatible devices.*\[7, 6, 5, 4, 3, 2, 1, 0\].*\[0, 1, 2, 3, 4, 5"):
            call(weights, rows)
        return
    expected = r"^a shard_mapped function runs on the devices and axes of its mesh Mesh\('data': 2 \(Manual\)"
    with pytest.raises(ValueError, match=expected) as caught:
        call(weights, rows)
    message = str(caught.value)
    assert "Mesh for all inputs should be equal" not in message
    assert "device ids [[0, 1, 2, 3], [4, 5, 6, 7]]" in message
    other_text = {
        "other-device-order": "device ids [[7, 6, 5, 4], [3, 2, 1, 0]]",
        "other-axis-names": "'tensor': 4 (Explicit)",
        "other-axis-sizes": "'data': 4 (Explicit), 'model': 2 (Explicit)",
    }[which]
    assert other_text in message


def test_inputs_on_two_explicit_meshes_typed_differently_are_a_value_error() -> None:
    explicit, manual_data = _explicit_and_manual((2, 4))
    weights, rows = _laid_out(explicit)
    half = Mesh(explicit.devices, AXES, axis_types=(AxisType.Explicit, AxisType.Auto))
    ours = shard_mapped(_shard_loss, mesh=manual_data, axis_names=frozenset({"data"}), **LOSS_SPECS)
    with pytest.raises(ValueError, match=r"^the inputs of a shard_mapped function must share one mesh: args\[0\]"):
        ours(weights, jax.device_put(np.asarray(rows), NamedSharding(half, P("data"))))


def test_eval_shape_of_layout_inputs_carries_the_declared_output_sharding() -> None:
    explicit, manual_data = _explicit_and_manual((2, 4))
    weights, rows = _laid_out(explicit)

    def body(weights: jax.Array, rows: jax.Array) -> tuple[jax.Array, jax.Array]:
        return _shard_loss(weights, rows), rows @ weights

    ours = shard_mapped(
        body, mesh=manual_data, axis_names=frozenset({"data"}), in_specs=(P(), P("data")), out_specs=(P(), P("data"))
    )
    abstract = [jax.ShapeDtypeStruct(array.shape, array.dtype, sharding=array.sharding) for array in (weights, rows)]
    loss, projected = jax.eval_shape(ours, *abstract)
    assert (loss.shape, projected.shape) == ((), (16, 3))
    assert loss.sharding.spec == P()
    assert projected.sharding.spec == P("data", None)
    assert projected.sharding.mesh == explicit.abstract_mesh


def test_bounded_jit_over_an_auto_mesh_still_runs_on_it() -> None:
    _, manual_data = _explicit_and_manual((2, 4))
    auto = Mesh(manual_data.devices, AXES, axis_types=(AxisType.Auto, AxisType.Auto))
    weights, rows = (np.asarray(array) for array in _laid_out(_explicit_and_manual((2, 4))[0]))
    ours = shard_mapped(_shard_loss, mesh=manual_data, axis_names=frozenset({"data"}), **LOSS_SPECS)
    step = bounded_jit(value_and_grad(ours), max_traces=1, mesh=auto)
    value, gradient = step(weights, rows)
    assert value.sharding.mesh == auto
    assert gradient.sharding.mesh == auto
    raw = jax.jit(jax.value_and_grad(jax.shard_map(_shard_loss, mesh=auto, axis_names={"data"}, **LOSS_SPECS)))
    with jax.set_mesh(auto):
        _same_bits((value, gradient), raw(weights, rows))


def test_keyword_arguments_are_a_type_error() -> None:
    wrapped = shard_mapped(_identity, mesh=_manual_mesh(), in_specs=P("i"), out_specs=P("i"))
    with pytest.raises(TypeError, match=r"^a shard_mapped function takes its arguments by position only"):
        wrapped(block=_host_data())
