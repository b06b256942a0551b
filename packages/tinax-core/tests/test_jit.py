"""Tests for tinax.jit: wrap-time validation, trace budgets, meshes and batching."""

from __future__ import annotations

import inspect
import re
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import tinax.jit
from tinax.jit import TraceBudgetExceededError, batched_jit, bounded_jit
from tinax_testing import TEST_DEVICE_COUNT, import_side_effects

# --------------------------------------------------------------------------- helpers


def scale(x, y):
    return x * 2 + y


def with_mode(x, mode):
    return x + 1 if mode == "train" else x - 1


def keyword_only(x, *, factor, offset=0.0):
    return x * factor + offset


def positional_only(x, y, /, z):
    return x + y + z


def with_var_args(x, *rest):
    return x


def with_var_kwargs(x, **options):
    return x


@pytest.fixture(scope="module")
def mesh() -> jax.sharding.Mesh:
    return jax.make_mesh((TEST_DEVICE_COUNT,), ("data",))


def budget_error(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(TraceBudgetExceededError) as caught:
        call(*args, **kwargs)
    return str(caught.value)


# --------------------------------------------------------------------------- public surface


def test_module_exports_exactly_the_public_api():
    assert sorted(tinax.jit.__all__) == ["TraceBudgetExceededError", "batched_jit", "bounded_jit"]
    for name in tinax.jit.__all__:
        assert getattr(tinax.jit, name) is not None


def test_signatures_match_the_compatible_surface():
    keyword = inspect.Parameter.KEYWORD_ONLY
    bounded = inspect.signature(bounded_jit).parameters
    assert [(name, p.kind) for name, p in bounded.items()] == [
        ("function", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        ("max_traces", keyword),
        ("static_argnames", keyword),
        ("donate_argnames", keyword),
        ("mesh", keyword),
    ]
    assert bounded["max_traces"].default is inspect.Parameter.empty
    assert bounded["static_argnames"].default == ()
    assert bounded["donate_argnames"].default == ()
    assert bounded["mesh"].default is None
    batched = inspect.signature(batched_jit).parameters
    assert [(name, p.kind) for name, p in batched.items()] == [
        ("function", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        ("in_axes", keyword),
        ("out_axes", keyword),
        ("axis_size", keyword),
        ("max_traces", keyword),
        ("mesh", keyword),
    ]
    assert batched["in_axes"].default == 0
    assert batched["out_axes"].default == 0
    assert batched["axis_size"].default is None
    assert batched["max_traces"].default is inspect.Parameter.empty


def test_trace_budget_error_is_a_runtime_error_and_an_assertion_error():
    # tinax 0.2 raised AssertionError for an exceeded budget; code catching that keeps working.
    assert issubclass(TraceBudgetExceededError, RuntimeError)
    assert issubclass(TraceBudgetExceededError, AssertionError)


@pytest.mark.parametrize("wrap", [bounded_jit, batched_jit])
def test_exceeded_budget_is_caught_as_an_assertion_error(wrap):
    wrapped = wrap(lambda x: x * 2, max_traces=1)
    wrapped(jnp.arange(4.0))
    with pytest.raises(AssertionError, match="max_traces=1") as caught:
        wrapped(jnp.arange(6.0))
    assert isinstance(caught.value, TraceBudgetExceededError)
    assert wrapped.trace_count == 1


@pytest.mark.parametrize("wrap", [bounded_jit, batched_jit])
def test_a_budget_of_zero_traces_refuses_the_first_traced_call_as_in_tinax_02(wrap):
    # 0.2 accepted max_traces=0: only calls that trace nothing (no traced argument) could run.
    wrapped = wrap(scale, max_traces=0)
    with pytest.raises(TraceBudgetExceededError):
        wrapped(jnp.ones((2, 2)))


def test_a_budget_of_zero_traces_lets_calls_with_only_static_arguments_run():
    def ramp(n):
        return jnp.arange(3) * n

    wrapped = bounded_jit(ramp, max_traces=0, static_argnames=["n"])
    np.testing.assert_array_equal(wrapped(n=2), [0, 2, 4])


def test_importing_tinax_jit_starts_no_backend_and_no_integration():
    effects = import_side_effects("tinax.jit")
    assert effects["backends_initialized"] is False
    assert effects["integrations"] == []


# --------------------------------------------------------------------------- validation: function and max_traces


@pytest.mark.parametrize("wrap", [bounded_jit, batched_jit])
def test_non_callable_function_not_allowed(wrap):
    with pytest.raises(TypeError, match=r"function must be callable, got 3 \(int\)"):
        wrap(3, max_traces=1)


@pytest.mark.parametrize("wrap", [bounded_jit, batched_jit])
@pytest.mark.parametrize("value", [True, False, np.bool_(True)])
def test_bool_max_traces_not_allowed(wrap, value):
    with pytest.raises(TypeError, match=r"max_traces must be an int >= 0, got (np\.)?(True|False)_? \(bool\)"):
        wrap(scale, max_traces=value)


@pytest.mark.parametrize("wrap", [bounded_jit, batched_jit])
@pytest.mark.parametrize("value", [1.0, "2", None])
def test_non_int_max_traces_not_allowed(wrap, value):
    with pytest.raises(TypeError, match="max_traces must be an int >= 0"):
        wrap(scale, max_traces=value)


@pytest.mark.parametrize("wrap", [bounded_jit, batched_jit])
@pytest.mark.parametrize("value", [-1, -2])
def test_negative_max_traces_not_allowed(wrap, value):
    with pytest.raises(ValueError, match=rf"max_traces must be an int >= 0, got {value} \(int\)"):
        wrap(scale, max_traces=value)


def test_numpy_integer_max_traces_allowed():
    assert bounded_jit(scale, max_traces=np.int64(2)).max_traces == 2


# --------------------------------------------------------------------------- validation: argument names


@pytest.mark.parametrize("argnames", ["static_argnames", "donate_argnames"])
def test_single_string_is_one_argument_name(argnames):
    wrapped = bounded_jit(with_mode, max_traces=1, **{argnames: "mode" if argnames == "static_argnames" else "x"})
    assert wrapped.max_traces == 1


@pytest.mark.parametrize("argnames", ["static_argnames", "donate_argnames"])
def test_bool_in_argnames_not_allowed(argnames):
    with pytest.raises(TypeError, match=rf"{argnames}\[1\] must be a non-empty str, got True \(bool\)"):
        bounded_jit(with_mode, max_traces=1, **{argnames: ["x", True]})


@pytest.mark.parametrize("argnames", ["static_argnames", "donate_argnames"])
@pytest.mark.parametrize("value", [3, None, {"x"}, b"x"])
def test_argnames_that_are_not_a_sequence_not_allowed(argnames, value):
    with pytest.raises(TypeError, match=rf"{argnames} must be a str or a sequence of str"):
        bounded_jit(with_mode, max_traces=1, **{argnames: value})


@pytest.mark.parametrize("argnames", ["static_argnames", "donate_argnames"])
def test_empty_argname_not_allowed(argnames):
    with pytest.raises(ValueError, match=rf"{argnames}\[0\] must be a non-empty str, got '' \(str\)"):
        bounded_jit(with_mode, max_traces=1, **{argnames: [""]})
    with pytest.raises(ValueError, match=rf"{argnames} must be a non-empty str, got '' \(str\)"):
        bounded_jit(with_mode, max_traces=1, **{argnames: ""})


@pytest.mark.parametrize("argnames", ["static_argnames", "donate_argnames"])
def test_repeated_argname_not_allowed(argnames):
    with pytest.raises(ValueError, match=rf"{argnames} must not repeat items, got 'x' more than once"):
        bounded_jit(with_mode, max_traces=1, **{argnames: ("x", "mode", "x")})


@pytest.mark.parametrize("argnames", ["static_argnames", "donate_argnames"])
def test_unknown_argname_not_allowed(argnames):
    with pytest.raises(ValueError, match="nmode") as caught:
        bounded_jit(with_mode, max_traces=1, **{argnames: ("x", "nmode")})
    message = str(caught.value)
    assert message.startswith(f"{argnames}[1] must be a parameter of with_mode that can be passed by keyword")
    assert "'x', 'mode'" in message
    assert "got 'nmode' (str)" in message


@pytest.mark.parametrize("argnames", ["static_argnames", "donate_argnames"])
def test_positional_only_argname_not_allowed(argnames):
    with pytest.raises(ValueError, match=rf"{argnames} must be a parameter of positional_only .*got 'y' \(str\)"):
        bounded_jit(positional_only, max_traces=1, **{argnames: "y"})


def test_var_positional_argname_not_allowed():
    with pytest.raises(ValueError, match=r"static_argnames must be a parameter of with_var_args"):
        bounded_jit(with_var_args, max_traces=1, static_argnames="rest")


def test_keyword_only_argnames_allowed():
    wrapped = bounded_jit(keyword_only, max_traces=1, static_argnames="factor", donate_argnames="offset")
    np.testing.assert_allclose(wrapped(jnp.ones(2), factor=3, offset=jnp.ones(2)), [4.0, 4.0])


def test_any_argname_allowed_with_var_keyword():
    wrapped = bounded_jit(with_var_kwargs, max_traces=1, static_argnames=("anything", "else"))
    assert wrapped(1.0, anything="a", other=2.0) == 1.0


def test_argnames_not_checked_when_signature_cannot_be_inspected():
    class Opaque:
        __signature__ = "not a signature"  # makes inspect.signature raise TypeError

        def __call__(self, *args, **kwargs):
            return args[0] + 1

    with pytest.raises((TypeError, ValueError), match="signature"):
        inspect.signature(Opaque())
    wrapped = bounded_jit(Opaque(), max_traces=1)
    assert wrapped(jnp.float32(1.0)) == 2.0


@pytest.mark.parametrize(
    "arguments",
    [
        {"static_argnames": ""},
        {"donate_argnames": "nmode"},
        {"static_argnames": "x", "donate_argnames": "x"},
        {"static_argnames": "x", "donate_argnames": ["x"]},
        {"static_argnames": "x", "mesh": jax.sharding.Mesh(np.empty((0,), dtype=object), ("data",))},
        {"max_traces": np.int64(-1)},
        {"max_traces": np.int64(1), "static_argnames": [""]},
    ],
    ids=repr,
)
def test_value_errors_after_a_single_str_of_names_or_a_numpy_integer_are_also_type_errors(arguments):
    # tinax 0.2 refused a single str of names and a NumPy integer as the wrong type, before
    # looking further; 0.3 accepts them, and what it refuses after that is both.
    with pytest.raises(ValueError, match="must be") as caught:
        bounded_jit(with_mode, **{"max_traces": 1, **arguments})
    assert isinstance(caught.value, TypeError)


def test_value_errors_after_python_arguments_are_only_value_errors():
    with pytest.raises(ValueError, match="must be disjoint") as caught:
        bounded_jit(with_mode, max_traces=1, static_argnames=["x"], donate_argnames=["x"])
    assert not isinstance(caught.value, TypeError)


@pytest.mark.parametrize(
    "arguments",
    [
        {"axis_size": np.int64(0)},
        {"axis_size": np.int64(2), "max_traces": -1},
        {"max_traces": np.int64(1), "mesh": jax.sharding.Mesh(np.empty((0,), dtype=object), ("data",))},
    ],
    ids=repr,
)
def test_batched_value_errors_after_a_numpy_integer_are_also_type_errors(arguments):
    with pytest.raises(ValueError, match="must be") as caught:
        batched_jit(scale, **{"max_traces": 1, **arguments})
    assert isinstance(caught.value, TypeError)


def test_batched_checks_axis_size_before_the_axes_as_tinax_02_did():
    with pytest.raises(ValueError, match="axis_size"):
        batched_jit(scale, in_axes="a", axis_size=0, max_traces=1)  # type: ignore[arg-type]


def test_overlapping_static_and_donated_names_not_allowed():
    with pytest.raises(ValueError, match="disjoint") as caught:
        bounded_jit(scale, max_traces=1, static_argnames=("x", "y"), donate_argnames=["y", "x"])
    message = str(caught.value)
    assert message.startswith("donate_argnames must be disjoint from static_argnames")
    assert message.endswith("both name 'y', 'x'")


# --------------------------------------------------------------------------- validation: mesh


@pytest.mark.parametrize("wrap", [bounded_jit, batched_jit])
def test_non_mesh_not_allowed(wrap, mesh):
    with pytest.raises(TypeError, match=r"mesh must be None or a jax.sharding.Mesh, got 'data' \(str\)"):
        wrap(scale, max_traces=1, mesh="data")
    with pytest.raises(TypeError, match=r"mesh must be None or a jax.sharding.Mesh, got .*AbstractMesh"):
        wrap(scale, max_traces=1, mesh=mesh.abstract_mesh)


@pytest.mark.parametrize("wrap", [bounded_jit, batched_jit])
def test_empty_mesh_not_allowed_at_wrap_time(wrap):
    empty = jax.sharding.Mesh(np.empty((0,), dtype=object), ("data",), axis_types=(AxisType.Explicit,))
    with pytest.raises(ValueError, match=r"^mesh must be None or a mesh with at least one device, got "):
        wrap(scale, max_traces=1, mesh=empty)


@pytest.mark.parametrize("wrap", [bounded_jit, batched_jit])
def test_mesh_with_manual_axis_not_allowed(wrap):
    devices = np.array(jax.devices()).reshape(2, TEST_DEVICE_COUNT // 2)
    manual = jax.sharding.Mesh(devices, ("a", "b"), axis_types=(AxisType.Auto, AxisType.Manual))
    with pytest.raises(ValueError, match=r"mesh must be None or a mesh without Manual axes"):
        wrap(scale, max_traces=1, mesh=manual)


# --------------------------------------------------------------------------- validation: batched_jit axes


@pytest.mark.parametrize(
    ("in_axes", "name"),
    [
        (True, "in_axes"),
        (1.5, "in_axes"),
        ("0", "in_axes"),
        ({"x": 0}, "in_axes"),
        ((0, True), r"in_axes\[1\]"),
        ([0, "1"], r"in_axes\[1\]"),
        ((0, {"w": False}), r"in_axes\[1\]\['w'\]"),
    ],
)
def test_in_axes_that_are_not_ints_or_none_not_allowed(in_axes, name):
    with pytest.raises(TypeError, match=rf"^{name} must be an int or None"):
        batched_jit(scale, in_axes=in_axes, max_traces=1)


@pytest.mark.parametrize(
    ("out_axes", "name"),
    [(True, "out_axes"), ("0", "out_axes"), ((0, 1.0), r"out_axes\[1\]"), ({"a": np.bool_(False)}, r"out_axes\['a'\]")],
)
def test_out_axes_that_are_not_ints_or_none_not_allowed(out_axes, name):
    with pytest.raises(TypeError, match=rf"^{name} must be an int or None"):
        batched_jit(scale, out_axes=out_axes, max_traces=1)


@pytest.mark.parametrize("value", [True, 2.0, "2"])
def test_non_int_axis_size_not_allowed(value):
    with pytest.raises(TypeError, match=r"axis_size must be an int >= 1 or None"):
        batched_jit(scale, axis_size=value, max_traces=1)


@pytest.mark.parametrize("value", [0, -3])
def test_non_positive_axis_size_not_allowed(value):
    with pytest.raises(ValueError, match=rf"axis_size must be an int >= 1 or None, got {value} \(int\)"):
        batched_jit(scale, axis_size=value, max_traces=1)


# --------------------------------------------------------------------------- wrapping


def test_wrapper_keeps_function_identity():
    wrapped = bounded_jit(scale, max_traces=1)
    assert wrapped.__wrapped__ is scale
    assert wrapped.__name__ == "scale"
    assert wrapped.__qualname__ == "scale"
    assert inspect.signature(wrapped) == inspect.signature(scale)
    assert wrapped.max_traces == 1
    assert wrapped.mesh is None
    assert "scale" in repr(wrapped)


def test_budget_attributes_are_read_only():
    wrapped = bounded_jit(scale, max_traces=1)
    with pytest.raises(AttributeError):
        wrapped.trace_count = 0
    with pytest.raises(AttributeError):
        wrapped.max_traces = 10


def test_results_equal_raw_jit():
    wrapped = bounded_jit(scale, max_traces=2)
    x = jnp.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(wrapped(x, 1.5), jax.jit(scale)(x, 1.5))
    np.testing.assert_array_equal(wrapped(x, y=jnp.ones(3)), jax.jit(scale)(x, jnp.ones(3)))


def test_works_as_a_method():
    class Model:
        def __init__(self, factor):
            self.factor = factor

        @bounded_jit_method
        def apply(self, x):
            return x * self.factor

    model = Model(3.0)
    np.testing.assert_array_equal(model.apply(jnp.ones(2)), [3.0, 3.0])
    np.testing.assert_array_equal(model.apply(x=jnp.zeros(2)), [0.0, 0.0])
    assert Model.apply.trace_count == 2  # positional and keyword calls are traced apart, as in jax.jit


def bounded_jit_method(method):
    return bounded_jit(method, max_traces=2, static_argnames="self")


# --------------------------------------------------------------------------- trace counting


def test_trace_count_counts_traces_not_calls():
    wrapped = bounded_jit(scale, max_traces=3)
    assert wrapped.trace_count == 0
    wrapped(jnp.ones(3), 1.0)
    assert wrapped.trace_count == 1
    wrapped(jnp.zeros(3), 2.0)  # same abstract values: cached
    wrapped(jnp.array([7.0, 8.0, 9.0]), -1.0)
    assert wrapped.trace_count == 1
    wrapped(jnp.ones(4), 1.0)
    assert wrapped.trace_count == 2
    wrapped(jnp.ones(3, jnp.int32), 1)
    assert wrapped.trace_count == 3


def test_exceeding_budget_raises_and_names_function_budget_and_shape_change():
    wrapped = bounded_jit(scale, max_traces=1)
    wrapped(jnp.ones(3), 1.0)
    message = budget_error(wrapped, jnp.ones(4), 1.0)
    assert "scale" in message
    assert "max_traces=1" in message
    assert "argument 'x' changed: shape (3,) -> (4,)" in message
    assert "argument 'y'" not in message


def test_budget_error_names_dtype_change():
    wrapped = bounded_jit(scale, max_traces=1)
    wrapped(jnp.ones(3), 1.0)
    message = budget_error(wrapped, jnp.ones(3, jnp.int32), 1.0)
    assert "argument 'x' changed: dtype float32 -> int32" in message


def test_budget_error_names_weak_type_change():
    wrapped = bounded_jit(scale, max_traces=1)
    wrapped(jnp.ones(3), 1.0)
    message = budget_error(wrapped, jnp.ones(3), jnp.float32(1.0))
    assert "argument 'y' changed: weak_type True -> False" in message


def test_budget_error_names_static_value_change():
    wrapped = bounded_jit(with_mode, max_traces=1, static_argnames="mode")
    wrapped(jnp.ones(3), mode="train")
    message = budget_error(wrapped, jnp.ones(3), mode="eval")
    assert "with_mode" in message
    assert "argument 'mode' changed: static value 'train' -> 'eval'" in message


def test_budget_error_names_static_value_passed_positionally():
    wrapped = bounded_jit(with_mode, max_traces=1, static_argnames="mode")
    wrapped(jnp.ones(3), "train")
    message = budget_error(wrapped, jnp.ones(3), "eval")
    assert "argument 'mode' changed: static value 'train' -> 'eval'" in message


def test_budget_error_names_argument_that_was_not_passed_before():
    wrapped = bounded_jit(keyword_only, max_traces=1, static_argnames="factor")
    wrapped(jnp.ones(3), factor=2)
    message = budget_error(wrapped, jnp.ones(3), factor=2, offset=jnp.ones(3))
    assert "argument 'offset' changed: not passed -> float32[3]" in message


def test_budget_error_names_pytree_leaf():
    def loss(params, batch):
        return (batch @ params["w"] + params["b"]).sum()

    wrapped = bounded_jit(loss, max_traces=1)
    params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
    wrapped(params, jnp.ones((4, 3)))
    message = budget_error(wrapped, {"w": jnp.ones((3, 5)), "b": jnp.zeros(5)}, jnp.ones((4, 3)))
    assert "loss" in message
    assert "argument 'params' at ['b'] changed: shape (2,) -> (5,)" in message
    assert "argument 'params' at ['w'] changed: shape (3, 2) -> (3, 5)" in message
    assert "argument 'batch'" not in message


def test_budget_error_names_pytree_structure_change():
    wrapped = bounded_jit(lambda tree: jax.tree_util.tree_reduce(jnp.add, tree), max_traces=1)
    wrapped((jnp.ones(()), jnp.ones(())))
    message = budget_error(wrapped, [jnp.ones(()), jnp.ones(())])
    assert "argument 'tree' changed: structure" in message


def test_budget_error_names_sharding_change(mesh):
    wrapped = bounded_jit(lambda x: x * 2, max_traces=1, mesh=mesh)
    replicated = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, P()))
    sharded = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, P("data")))
    wrapped(replicated)
    message = budget_error(wrapped, sharded)
    assert "argument 'x' changed: sharding spec P" in message
    assert "'data'" in message


def test_budget_error_when_nothing_changed_mentions_cleared_caches():
    wrapped = bounded_jit(scale, max_traces=1)
    wrapped(jnp.ones(3), 1.0)
    jax.clear_caches()
    message = budget_error(wrapped, jnp.ones(3), 1.0)
    assert "no argument's abstract value" in message
    assert "jax.clear_caches" in message


def test_refused_trace_does_not_count_and_cached_calls_keep_working():
    wrapped = bounded_jit(scale, max_traces=1)
    wrapped(jnp.ones(3), 1.0)
    for _ in range(2):
        with pytest.raises(TraceBudgetExceededError):
            wrapped(jnp.ones(4), 1.0)
    assert wrapped.trace_count == 1
    np.testing.assert_array_equal(wrapped(jnp.ones(3), 2.0), [4.0, 4.0, 4.0])


def test_lower_counts_once_and_later_calls_reuse_the_trace():
    wrapped = bounded_jit(scale, max_traces=1)
    lowered = wrapped.lower(jnp.ones(3), 1.0)
    assert isinstance(lowered, jax.stages.Lowered)
    assert wrapped.trace_count == 1
    np.testing.assert_array_equal(wrapped(jnp.ones(3), 1.0), [3.0, 3.0, 3.0])
    assert wrapped.trace_count == 1
    with pytest.raises(TraceBudgetExceededError, match=r"shape \(3,\) -> \(2,\)"):
        wrapped.lower(jnp.ones(2), 1.0)


def test_lower_compiles_ahead_of_time_like_raw_jit():
    wrapped = bounded_jit(scale, max_traces=1)
    x = jnp.arange(6.0)
    compiled = wrapped.lower(x, 1.0).compile()
    raw = jax.jit(scale).lower(x, 1.0).compile()
    assert isinstance(compiled, jax.stages.Compiled)
    assert compiled.cost_analysis() == raw.cost_analysis()
    np.testing.assert_array_equal(compiled(x, 1.0), raw(x, 1.0))
    assert wrapped.trace_count == 1


def test_wrapped_function_is_a_jax_stages_wrapped_with_the_jit_methods():
    wrapped = bounded_jit(scale, max_traces=1)
    assert isinstance(wrapped, jax.stages.Wrapped)
    raw = jax.jit(scale)
    for name in ("lower", "trace", "eval_shape", "clear_cache", "_cache_size"):
        assert callable(getattr(wrapped, name)), name
        assert name in dir(wrapped)
    assert {name for name in dir(raw) if not name.startswith("__")} <= set(dir(wrapped))


def test_trace_and_eval_shape_give_what_raw_jit_gives():
    wrapped = bounded_jit(scale, max_traces=1)
    x = jnp.ones((2, 3), jnp.float32)
    traced = wrapped.trace(x, 2.0)
    assert isinstance(traced, jax.stages.Traced)
    assert str(traced.jaxpr) == str(jax.jit(scale).trace(x, 2.0).jaxpr)
    assert wrapped.eval_shape(x, 2.0) == jax.jit(scale).eval_shape(x, 2.0)
    assert wrapped.trace_count == 1  # eval_shape reused the trace


@pytest.mark.parametrize("method", ["lower", "trace", "eval_shape"])
def test_new_traces_by_the_jit_methods_count_against_the_budget(method):
    wrapped = bounded_jit(scale, max_traces=1)
    wrapped(jnp.ones(3), 1.0)
    getattr(wrapped, method)(jnp.zeros(3), 5.0)  # cached: no trace
    assert wrapped.trace_count == 1
    with pytest.raises(TraceBudgetExceededError, match=r"shape \(3,\) -> \(4,\)"):
        getattr(wrapped, method)(jnp.ones(4), 1.0)


def test_clear_cache_traces_again_and_does_not_give_the_budget_back():
    wrapped = bounded_jit(scale, max_traces=2)
    wrapped(jnp.ones(3), 1.0)
    assert wrapped._cache_size() == 1
    wrapped.clear_cache()
    assert wrapped._cache_size() == 0
    wrapped(jnp.ones(3), 1.0)
    assert wrapped.trace_count == 2
    wrapped.clear_cache()
    with pytest.raises(TraceBudgetExceededError):
        wrapped(jnp.ones(3), 1.0)


def test_batched_lower_compiles_ahead_of_time():
    wrapped = batched_jit(lambda x: x * 2, max_traces=1)
    compiled = wrapped.lower(jnp.ones((4, 2))).compile()
    assert compiled.cost_analysis() is not None
    np.testing.assert_array_equal(compiled(jnp.ones((4, 2))), np.full((4, 2), 2.0))
    assert wrapped.eval_shape(jnp.ones((4, 2))).shape == (4, 2)
    assert wrapped.trace_count == 1


def test_copying_the_wrapper_does_not_recurse():
    import copy

    wrapped = bounded_jit(scale, max_traces=1)
    with pytest.raises(AttributeError):
        object.__new__(type(wrapped)).lower_something  # noqa: B018 - the attribute lookup is the test
    duplicate = copy.copy(wrapped)
    np.testing.assert_array_equal(duplicate(jnp.ones(2), 1.0), [3.0, 3.0])


# --------------------------------------------------------------------------- which traces count (as in tinax 0.2)


def test_traces_whose_arguments_are_all_static_do_not_count():
    def arange_times(n):
        return jnp.arange(3) * n

    wrapped = bounded_jit(arange_times, max_traces=1, static_argnames="n")
    assert [wrapped(n=n).tolist() for n in range(4)] == [[0, n, 2 * n] for n in range(4)]
    assert wrapped.trace_count == 0


def test_traces_without_array_arguments_do_not_count():
    wrapped = bounded_jit(lambda *tree: jnp.ones(2), max_traces=1)
    for arguments in [(), (None,), ((),), ({},)]:
        np.testing.assert_array_equal(wrapped(*arguments), [1.0, 1.0])
    assert wrapped.trace_count == 0
    wrapped(jnp.ones(1))
    assert wrapped.trace_count == 1
    with pytest.raises(TraceBudgetExceededError):
        wrapped(jnp.ones(2))


def test_a_static_trace_then_traced_arguments_count_from_the_first_traced_one():
    wrapped = bounded_jit(with_mode, max_traces=1, static_argnames=("x", "mode"))
    assert wrapped(1, mode="train") == 2
    assert wrapped(1, mode="eval") == 0
    assert wrapped.trace_count == 0


@pytest.mark.parametrize("wrap", [bounded_jit, batched_jit])
def test_eager_calls_under_disable_jit_do_not_count(wrap):
    wrapped = wrap(lambda x: x * 2, max_traces=1)
    with jax.disable_jit():
        for length in range(1, 4):
            np.testing.assert_array_equal(wrapped(jnp.ones((length, 2))), np.full((length, 2), 2.0))
    assert wrapped.trace_count == 0


def test_importing_tinax_jit_does_not_import_chex():
    assert import_side_effects("tinax.jit", watched=("chex",))["integrations"] == []


def test_traces_inside_an_enclosing_jit_count():
    inner = bounded_jit(lambda x: x + 1, max_traces=1)
    outer = jax.jit(lambda x: inner(x) * 2)
    np.testing.assert_array_equal(outer(jnp.ones(2)), [4.0, 4.0])
    assert inner.trace_count == 1


def test_budget_is_thread_safe():
    budget = 3
    wrapped = bounded_jit(lambda x: x * 2, max_traces=budget)
    barrier = threading.Barrier(8)
    outcomes: list[str] = []
    lock = threading.Lock()

    def worker(length: int) -> None:
        barrier.wait()
        try:
            wrapped(jnp.ones(length))
            outcome = "ok"
        except TraceBudgetExceededError:
            outcome = "refused"
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=worker, args=(length,)) for length in range(1, 9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["ok"] * budget + ["refused"] * (8 - budget)
    assert wrapped.trace_count == budget


# --------------------------------------------------------------------------- wrapping again (as in tinax 0.2)


def _wrap_increment(wrap: Any) -> Any:
    return wrap(lambda x: x + 1, max_traces=1)


@pytest.mark.parametrize("wrap", [bounded_jit, batched_jit])
def test_a_function_wrapped_again_at_the_same_place_shares_its_trace_budget(wrap):
    _wrap_increment(wrap)(jnp.ones((2, 2)))
    again = _wrap_increment(wrap)
    assert again.trace_count == 1
    message = budget_error(again, jnp.ones((2, 2)))
    assert "another wrapper of the same function made at the same place" in message
    assert "wrap the function once and reuse the wrapper" in message


def test_wrapping_one_function_twice_in_one_frame_shares_its_trace_budget():
    first, second = (bounded_jit(scale, max_traces=1) for _ in range(2))
    first(jnp.ones(2), 1.0)
    with pytest.raises(TraceBudgetExceededError):
        second(jnp.ones(2), 1.0)


def test_wrappers_made_in_a_loop_share_their_trace_budget():
    refused = 0
    for _ in range(3):
        try:
            bounded_jit(lambda x: x * 2, max_traces=2)(jnp.ones(2))
        except TraceBudgetExceededError:
            refused += 1
    assert refused == 1


def test_each_sharing_wrapper_compares_the_shared_count_with_its_own_budget():
    for budget in (1, 3):
        wrapped = bounded_jit(scale, max_traces=budget)
        wrapped(jnp.ones(budget), 1.0)
    assert wrapped.trace_count == 2


def test_wrappers_made_at_different_places_have_their_own_budgets():
    def first_place():
        return bounded_jit(scale, max_traces=1)

    def second_place():
        return bounded_jit(scale, max_traces=1)

    first_place()(jnp.ones(2), 1.0)
    np.testing.assert_array_equal(second_place()(jnp.ones(2), 1.0), [3.0, 3.0])
    np.testing.assert_array_equal(batched_jit(scale, max_traces=1)(jnp.ones(2), jnp.ones(2)), [3.0, 3.0])


def test_different_functions_from_the_same_place_have_their_own_budgets():
    for factor in (scale, with_var_args):
        bounded_jit(factor, max_traces=1)(jnp.ones(2), jnp.ones(2))


def test_callables_without_python_code_get_a_budget_per_wrapper():
    import functools

    for _ in range(2):
        wrapped = bounded_jit(functools.partial(scale, y=1.0), max_traces=1)
        np.testing.assert_array_equal(wrapped(jnp.ones(2)), [3.0, 3.0])


def test_chex_clear_trace_counter_gives_a_shared_budget_back():
    chex = pytest.importorskip("chex")
    bounded_jit(scale, max_traces=1)(jnp.ones(2), 1.0)
    chex.clear_trace_counter()
    np.testing.assert_array_equal(bounded_jit(scale, max_traces=1)(jnp.ones(2), 1.0), [3.0, 3.0])


# --------------------------------------------------------------------------- static and donated arguments


def test_static_argnames_select_python_branches():
    wrapped = bounded_jit(with_mode, max_traces=2, static_argnames=("mode",))
    np.testing.assert_array_equal(wrapped(jnp.zeros(2), mode="train"), [1.0, 1.0])
    np.testing.assert_array_equal(wrapped(jnp.zeros(2), mode="eval"), [-1.0, -1.0])
    np.testing.assert_array_equal(wrapped(jnp.ones(2), mode="train"), [2.0, 2.0])
    assert wrapped.trace_count == 2


def test_donated_argument_is_consumed():
    wrapped = bounded_jit(scale, max_traces=1, donate_argnames="x")
    x = jnp.ones(3)
    np.testing.assert_array_equal(wrapped(x, 1.0), [3.0, 3.0, 3.0])
    assert x.is_deleted()


def test_unusable_donation_warns_like_jax():
    wrapped = bounded_jit(lambda x, y: x.sum() + y, max_traces=1, donate_argnames=("x",))
    with pytest.warns(UserWarning, match="Some donated buffers were not usable"):
        result = wrapped(jnp.ones(3), 1.0)
    assert result == 4.0


# --------------------------------------------------------------------------- mesh


def test_mesh_is_ambient_inside_the_function(mesh):
    seen: list[Any] = []

    def total(x):
        seen.append(jax.sharding.get_abstract_mesh())
        return x.sum()

    wrapped = bounded_jit(total, max_traces=1, mesh=mesh)
    x = jnp.arange(16.0)
    assert wrapped(x) == jax.jit(total)(x)
    assert seen[0] == mesh.abstract_mesh
    assert seen[1].empty  # the raw jax.jit call ran outside any mesh
    assert wrapped.mesh is mesh
    assert jax.sharding.get_abstract_mesh().empty  # the mesh is left on return


def test_mesh_results_equal_raw_jit_under_set_mesh(mesh):
    def step(x, w):
        return jnp.tanh(x @ w)

    wrapped = bounded_jit(step, max_traces=1, mesh=mesh)
    x = jax.device_put(jnp.arange(32.0).reshape(8, 4) / 32, NamedSharding(mesh, P("data")))
    w = jnp.ones((4, 2))
    with jax.set_mesh(mesh):
        expected = jax.jit(step)(x, w)
    result = wrapped(x, w)
    np.testing.assert_allclose(np.asarray(result), np.asarray(expected))
    assert result.sharding == expected.sharding


def test_mesh_applies_to_lower(mesh):
    seen: list[Any] = []

    def identity(x):
        seen.append(jax.sharding.get_abstract_mesh())
        return x

    bounded_jit(identity, max_traces=1, mesh=mesh).lower(jnp.ones(8))
    assert seen == [mesh.abstract_mesh]


@pytest.mark.parametrize("method", ["trace", "eval_shape"])
def test_mesh_applies_to_trace_and_eval_shape(mesh, method):
    seen: list[Any] = []

    def identity(x):
        seen.append(jax.sharding.get_abstract_mesh())
        return x

    getattr(bounded_jit(identity, max_traces=1, mesh=mesh), method)(jnp.ones(8))
    assert seen == [mesh.abstract_mesh]


def test_mesh_function_callable_inside_a_trace_under_the_same_mesh(mesh):
    inner = bounded_jit(lambda x: x * 2, max_traces=1, mesh=mesh)
    outer = bounded_jit(lambda x: inner(x) + 1, max_traces=1, mesh=mesh)
    np.testing.assert_array_equal(np.asarray(outer(jnp.ones(8))), np.full(8, 3.0))
    assert inner.trace_count == 1


def test_mesh_function_inside_a_trace_under_another_mesh_not_allowed(mesh):
    inner = bounded_jit(lambda x: x * 2, max_traces=1, mesh=mesh)
    outer = jax.jit(lambda x: inner(x))
    with pytest.raises(ValueError, match=r"called inside another JAX trace"):
        outer(jnp.ones(8))


# --------------------------------------------------------------------------- batched_jit


def test_batched_results_equal_vmap():
    def affine(w, x):
        return jnp.tanh(w @ x)

    w = jnp.arange(6.0).reshape(2, 3) / 6
    xs = jnp.arange(12.0).reshape(4, 3) / 12
    wrapped = batched_jit(affine, in_axes=(None, 0), max_traces=1)
    np.testing.assert_allclose(wrapped(w, xs), jax.vmap(affine, in_axes=(None, 0))(w, xs))
    assert wrapped.trace_count == 1
    assert wrapped.__wrapped__ is affine


def test_batched_default_maps_every_argument_over_axis_0():
    wrapped = batched_jit(scale, max_traces=1)
    xs, ys = jnp.arange(6.0).reshape(3, 2), jnp.arange(3.0)
    np.testing.assert_array_equal(wrapped(xs, ys[:, None]), jax.vmap(scale)(xs, ys[:, None]))


def test_batched_list_in_axes_and_out_axes():
    wrapped = batched_jit(jnp.outer, in_axes=[0, None], out_axes=1, max_traces=1)
    a, b = jnp.arange(6.0).reshape(3, 2), jnp.arange(4.0)
    expected = jax.vmap(jnp.outer, in_axes=(0, None), out_axes=1)(a, b)
    result = wrapped(a, b)
    assert result.shape == (2, 3, 4)
    np.testing.assert_array_equal(result, expected)


def test_batched_in_axes_none_broadcasts_with_axis_size():
    wrapped = batched_jit(lambda x: x * 2, in_axes=None, axis_size=3, max_traces=1)
    result = wrapped(jnp.arange(2.0))
    np.testing.assert_array_equal(result, np.tile([0.0, 2.0], (3, 1)))


def test_batched_pytree_in_axes():
    def apply(params, x):
        return params["w"] * x + params["b"]

    params = {"w": jnp.arange(3.0), "b": jnp.float32(1.0)}
    in_axes = ({"w": 0, "b": None}, 0)
    wrapped = batched_jit(apply, in_axes=in_axes, max_traces=1)
    xs = jnp.arange(3.0)
    np.testing.assert_array_equal(wrapped(params, xs), jax.vmap(apply, in_axes=in_axes)(params, xs))


def test_batched_budget_counts_new_batch_sizes():
    wrapped = batched_jit(lambda w, x: w * x, in_axes=(None, 0), max_traces=1)
    wrapped(2.0, jnp.arange(3.0))
    wrapped(5.0, jnp.ones(3))
    assert wrapped.trace_count == 1
    message = budget_error(wrapped, 2.0, jnp.arange(4.0))
    assert "<lambda>" in message
    assert "max_traces=1" in message
    assert "argument 'x' changed: shape (3,) -> (4,)" in message
    assert wrapped.trace_count == 1


def test_batched_mesh_is_ambient(mesh):
    seen: list[Any] = []

    def double(x):
        seen.append(jax.sharding.get_abstract_mesh())
        return x * 2

    wrapped = batched_jit(double, max_traces=1, mesh=mesh)
    xs = jax.device_put(jnp.arange(16.0).reshape(8, 2), NamedSharding(mesh, P("data")))
    np.testing.assert_array_equal(np.asarray(wrapped(xs)), np.asarray(jax.vmap(double)(xs)))
    assert seen[0] == mesh.abstract_mesh
    assert wrapped.mesh is mesh
    assert re.search(r"batched_jit .*double", repr(wrapped))


def test_batched_call_refused_by_vmap_before_tracing_spends_no_budget():
    wrapped = batched_jit(lambda x, y=1.0: x * y, max_traces=1)
    with pytest.raises(ValueError, match="vmap"):
        wrapped(jnp.ones((3, 2)), jnp.float32(2))  # a scalar cannot be mapped over axis 0
    assert wrapped.trace_count == 0
    np.testing.assert_array_equal(wrapped(jnp.ones((3, 2))), np.ones((3, 2)))
    assert wrapped.trace_count == 1


def test_batched_trace_that_fails_inside_the_function_counts():
    def failing(x):
        raise ZeroDivisionError("in the function")

    wrapped = batched_jit(failing, max_traces=1)
    with pytest.raises(ZeroDivisionError):
        wrapped(jnp.ones((3, 2)))
    assert wrapped.trace_count == 1
    with pytest.raises(TraceBudgetExceededError):
        wrapped(jnp.ones((4, 2)))
