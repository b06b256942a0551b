"""Behaviour of tinax.debug: non-finite observation, profiled calls and sharding tables."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

import tinax.debug as debug_api
from tinax.debug import observe_nonfinite, profile_call, visualize_array_sharding
from tinax_testing import OPTIONAL_INTEGRATIONS, TEST_DEVICE_COUNT, import_side_effects


class Reports:
    """Collects what observe_nonfinite hands to its callback, as host values."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, list[int]]] = []

    def __call__(self, count: object, indices: object) -> None:
        self.calls.append((int(np.asarray(count)), np.asarray(indices).tolist()))


def observe(values: jax.Array, max_indices: int, *, jit: bool) -> tuple[jax.Array, Reports]:
    reports = Reports()

    def watch(array: jax.Array) -> jax.Array:
        return observe_nonfinite(array, callback=reports, max_indices=max_indices)

    result = (jax.jit(watch) if jit else watch)(values)
    jax.block_until_ready(result)
    jax.effects_barrier()
    return result, reports


# Drawing needs the `debug` extra; tinax-core installed alone (the isolation
# check) still tests the refusals and the ImportError that names the extra.
NEEDS_RICH = pytest.mark.skipif(importlib.util.find_spec("rich") is None, reason='needs the "debug" extra (rich)')
EAGER_AND_JIT = pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])


def test_public_names():
    assert {name for name in vars(debug_api) if not name.startswith("_")} == {
        "observe_nonfinite",
        "profile_call",
        "visualize_array_sharding",
    }
    assert sorted(debug_api.__all__) == ["observe_nonfinite", "profile_call", "visualize_array_sharding"]


def test_import_starts_no_backend_and_no_integration():
    assert import_side_effects("tinax.debug", watched=(*OPTIONAL_INTEGRATIONS, "rich")) == {
        "backends_initialized": False,
        "integrations": [],
    }


# observe_nonfinite ------------------------------------------------------------------


@EAGER_AND_JIT
def test_reports_the_count_and_first_flat_indices_padded(jit):
    values = jnp.asarray([[1.0, jnp.nan, 3.0], [jnp.inf, 5.0, -jnp.inf]], dtype=jnp.float32)

    result, reports = observe(values, 4, jit=jit)

    np.testing.assert_array_equal(result, values)
    assert reports.calls == [(3, [1, 3, 5, -1])]


@EAGER_AND_JIT
def test_reports_only_the_first_indices_when_there_are_more(jit):
    values = jnp.asarray([jnp.nan, 1.0, jnp.nan, jnp.nan, jnp.inf])
    _, reports = observe(values, 2, jit=jit)
    assert reports.calls == [(4, [0, 2])]


def test_a_zero_index_budget_still_reports_the_count():
    _, reports = observe(jnp.asarray([1.0, jnp.nan]), 0, jit=False)
    assert reports.calls == [(1, [])]


def test_returns_the_input_array_itself_when_eager():
    values = jnp.asarray([1.0, 2.0])
    assert observe_nonfinite(values, callback=Reports(), max_indices=1) is values


@EAGER_AND_JIT
@pytest.mark.parametrize(
    "values",
    [
        jnp.arange(4, dtype=jnp.float32),
        jnp.zeros((0,), dtype=jnp.float32),
        jnp.arange(4),
        jnp.asarray([True, False]),
        jnp.asarray(np.iinfo(np.int32).max),
    ],
    ids=["finite-floats", "empty", "ints", "bools", "int-scalar"],
)
def test_finite_values_never_invoke_the_callback(values, jit):
    result, reports = observe(values, 2, jit=jit)
    np.testing.assert_array_equal(result, values)
    assert reports.calls == []


@pytest.mark.parametrize(
    "dtype", [jnp.float16, jnp.bfloat16, jnp.float64, jnp.complex64, ml_dtypes.float8_e5m2], ids=str
)
def test_every_inexact_dtype_is_observed(dtype):
    with jax.enable_x64(dtype == jnp.float64):
        values = jnp.asarray([1.0, np.inf], dtype=dtype)
        _, reports = observe(values, 2, jit=True)
    assert reports.calls == [(1, [1, -1])]


def test_scalars_are_observed():
    _, reports = observe(jnp.float32(np.nan), 2, jit=False)
    assert reports.calls == [(1, [0, -1])]


def test_summary_dtypes_are_jax_default_integers():
    seen: list[tuple[np.dtype, np.dtype, tuple[int, ...]]] = []

    def capture(count: object, indices: object) -> None:
        seen.append((np.asarray(count).dtype, np.asarray(indices).dtype, np.asarray(count).shape))

    observe_nonfinite(jnp.asarray([np.nan]), callback=capture, max_indices=1)
    jax.effects_barrier()
    assert seen == [(np.dtype(np.int32), np.dtype(np.int32), ())]


def test_under_vmap_only_elements_with_nonfinite_values_are_reported():
    reports = Reports()
    batch = jnp.asarray([[1.0, jnp.nan], [2.0, 3.0], [jnp.inf, jnp.nan]])

    result = jax.vmap(lambda row: observe_nonfinite(row, callback=reports, max_indices=2))(batch)
    jax.block_until_ready(result)
    jax.effects_barrier()

    np.testing.assert_array_equal(result, batch)
    assert sorted(reports.calls) == [(1, [1, -1]), (2, [0, 1])]


def test_gradients_flow_through_unchanged():
    reports = Reports()

    def loss(values: jax.Array) -> jax.Array:
        return jnp.sum(observe_nonfinite(values, callback=reports, max_indices=1) * 3.0)

    gradient = jax.grad(loss)(jnp.asarray([1.0, jnp.inf]))
    jax.effects_barrier()

    np.testing.assert_array_equal(gradient, [3.0, 3.0])
    assert reports.calls == [(1, [1])]


def test_observations_keep_their_program_order():
    order: list[str] = []

    @jax.jit
    def two_observations(values: jax.Array) -> jax.Array:
        values = observe_nonfinite(values, callback=lambda *_: order.append("first"), max_indices=1)
        return observe_nonfinite(values * 2, callback=lambda *_: order.append("second"), max_indices=1)

    jax.block_until_ready(two_observations(jnp.asarray([jnp.nan])))
    jax.effects_barrier()
    assert order == ["first", "second"]


def test_an_unused_result_is_still_observed():
    reports = Reports()

    @jax.jit
    def ignore_result(values: jax.Array) -> jax.Array:
        observe_nonfinite(values, callback=reports, max_indices=1)
        return values + 1

    jax.block_until_ready(ignore_result(jnp.asarray([jnp.nan])))
    jax.effects_barrier()
    assert reports.calls == [(1, [0])]


@EAGER_AND_JIT
@pytest.mark.parametrize("axis_type", [AxisType.Explicit, AxisType.Auto], ids=["explicit", "auto"])
def test_sharded_arrays_are_observed_as_a_whole(axis_type, jit):
    mesh = jax.make_mesh((2, TEST_DEVICE_COUNT // 2), ("rows", "columns"), axis_types=(axis_type, axis_type))
    host = np.arange(4 * TEST_DEVICE_COUNT, dtype=np.float32).reshape(4, TEST_DEVICE_COUNT)
    host[0, 1] = np.nan
    host[3, TEST_DEVICE_COUNT - 1] = np.inf
    sharding = NamedSharding(mesh, PartitionSpec("rows", "columns"))
    values = jax.device_put(host, sharding)

    result, reports = observe(values, 3, jit=jit)

    assert result.sharding.is_equivalent_to(sharding, ndim=2)
    np.testing.assert_array_equal(np.asarray(result), host)
    assert reports.calls == [(2, [1, host.size - 1, -1])]


def test_callback_errors_surface_when_the_computation_is_waited_on():
    def fail(*_: object) -> None:
        raise ValueError("callback failed")

    def run_and_wait() -> None:
        jax.block_until_ready(observe_nonfinite(jnp.asarray([np.nan]), callback=fail, max_indices=1))
        jax.effects_barrier()

    with pytest.raises(RuntimeError, match="callback failed"):
        run_and_wait()


@pytest.mark.parametrize("max_indices", [True, 1.5, "1", None, np.bool_(True)])
def test_max_indices_must_be_an_integer(max_indices):
    with pytest.raises(TypeError, match="max_indices"):
        observe_nonfinite(jnp.ones(1), callback=Reports(), max_indices=max_indices)


def test_max_indices_accepts_numpy_integers():
    _, reports = observe(jnp.asarray([np.nan]), np.int64(2), jit=False)
    assert reports.calls == [(1, [0, -1])]


def test_max_indices_must_not_be_negative():
    with pytest.raises(ValueError, match="max_indices"):
        observe_nonfinite(jnp.ones(1), callback=Reports(), max_indices=-1)


@pytest.mark.parametrize("values", [np.ones(2), 1.0, [1.0], np.float32(np.nan), object()], ids=repr)
def test_values_must_be_a_jax_array(values):
    with pytest.raises(TypeError, match="values"):
        observe_nonfinite(values, callback=Reports(), max_indices=1)


def test_callback_must_be_callable_and_is_checked_first():
    with pytest.raises(TypeError, match="callback"):
        observe_nonfinite(object(), callback=None, max_indices=-1)


def test_max_indices_is_checked_before_values():
    # The argument checks run in a fixed order: callback, max_indices, values.
    with pytest.raises(ValueError, match="max_indices"):
        observe_nonfinite(object(), callback=Reports(), max_indices=-1)


# profile_call ----------------------------------------------------------------------


def trace_files(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(path for path in folder.glob("plugins/profile/*/*") if path.is_file())


def test_profile_call_writes_a_trace_and_returns_the_result(tmp_path):
    log_dir = tmp_path / "profiles" / "step-1"

    result = profile_call(log_dir, lambda left, *, right: {"sum": left + right}, jnp.ones(3), right=jnp.ones(3))

    np.testing.assert_array_equal(result["sum"], [2.0, 2.0, 2.0])
    assert result["sum"].is_ready()
    assert any(path.name.endswith(".xplane.pb") for path in trace_files(log_dir))


def test_profile_call_accepts_a_str_path(tmp_path):
    assert profile_call(str(tmp_path), lambda: 7) == 7
    assert trace_files(tmp_path)


def test_profile_call_waits_for_staged_effects_before_returning(tmp_path):
    observed: list[float] = []

    @jax.jit
    def step(values: jax.Array) -> jax.Array:
        jax.debug.callback(lambda total: observed.append(float(total)), jnp.sum(values))
        return values * 2

    profile_call(tmp_path, step, jnp.arange(4.0))

    # No effects_barrier here: profile_call already waited for the callback.
    assert observed == [6.0]


def test_profile_call_passes_keywords_named_like_its_own_parameters(tmp_path):
    result = profile_call(tmp_path, lambda **kwargs: kwargs, log_dir="a", function="b")
    assert result == {"log_dir": "a", "function": "b"}


def test_profile_call_returns_results_without_arrays(tmp_path):
    payload = {"text": "s", "nothing": None, "host": np.ones(2)}
    assert profile_call(tmp_path, lambda: payload) is payload


def test_profile_call_closes_the_trace_when_the_function_raises(tmp_path):
    def fail() -> None:
        raise KeyError("step failed")

    with pytest.raises(KeyError):
        profile_call(tmp_path / "failed", fail)
    # A second trace can start, so the first one was stopped.
    assert profile_call(tmp_path / "next", lambda: 1) == 1


def test_profile_call_refuses_to_nest_and_closes_the_outer_trace(tmp_path):
    with pytest.raises(RuntimeError):
        profile_call(tmp_path / "outer", profile_call, tmp_path / "inner", lambda: 1)
    assert profile_call(tmp_path / "after", lambda: 2) == 2


@pytest.mark.parametrize("log_dir", [3, None, b"profiles"], ids=["int", "None", "bytes"])
def test_profile_call_refuses_a_log_dir_that_is_not_a_path(tmp_path, monkeypatch, log_dir):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError, match="log_dir"):
        profile_call(log_dir, lambda: 1)
    assert list(tmp_path.iterdir()) == []


def test_profile_call_refuses_an_empty_log_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="log_dir"):
        profile_call("", lambda: 1)
    assert list(tmp_path.iterdir()) == []


def test_profile_call_requires_a_callable(tmp_path):
    with pytest.raises(TypeError, match="function"):
        profile_call(tmp_path, None)
    # The function is checked first.
    with pytest.raises(TypeError, match="function"):
        profile_call("", None)


# visualize_array_sharding ------------------------------------------------------------


@NEEDS_RICH
def test_visualize_prints_one_cell_per_shard(capsys):
    mesh = Mesh(np.asarray(jax.devices()), ("data",), axis_types=(AxisType.Explicit,))
    values = jax.device_put(jnp.arange(2.0 * TEST_DEVICE_COUNT), NamedSharding(mesh, PartitionSpec("data")))

    assert visualize_array_sharding(values) is None

    table = capsys.readouterr().out
    for index in range(TEST_DEVICE_COUNT):
        assert f"CPU {index}" in table


@NEEDS_RICH
def test_visualize_prints_a_replicated_array_as_one_cell(capsys):
    visualize_array_sharding(jax.device_put(jnp.ones((2, 2)), jax.devices()[0]))
    table = capsys.readouterr().out
    assert "CPU 0" in table
    assert "CPU 1" not in table


@NEEDS_RICH
def test_visualize_works_on_traced_arrays(capsys):
    jax.jit(lambda values: (visualize_array_sharding(values), values * 2)[1])(jnp.arange(4.0))
    assert "CPU 0" in capsys.readouterr().out


@pytest.mark.parametrize("array", [np.arange(4), [1, 2], object()], ids=["numpy", "list", "object"])
def test_visualize_requires_a_jax_array(array):
    with pytest.raises(TypeError, match="jax.Array"):
        visualize_array_sharding(array)


@NEEDS_RICH
def test_visualize_refuses_arrays_jax_cannot_draw():
    with pytest.raises(ValueError, match="dimensions"):
        visualize_array_sharding(jnp.ones((2, 2, 2)))


def test_visualize_without_rich_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "rich", None)
    with pytest.raises(ImportError, match=r'pip install "tinax-core\[debug\]"') as caught:
        visualize_array_sharding(jnp.ones(2))
    assert isinstance(caught.value.__cause__, ImportError)
