"""Differential cases of ``tinax.jit``: wrapping, then calling what was wrapped."""

from __future__ import annotations

import functools
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
from diff_common import Cases, jax_scalars, python_and_numpy_scalars, random_array, rng
from diff_describe import attempt

import tinax.jit as tj

M = "tinax.jit"
AXIS = jax.sharding.AxisType


def _mesh(kind: str) -> Any:
    devices = jax.devices()
    if kind == "explicit":
        return jax.make_mesh((4, 2), ("data", "model"), axis_types=(AXIS.Explicit,) * 2)
    if kind == "auto":
        return jax.make_mesh((8,), ("data",), axis_types=(AXIS.Auto,))
    if kind == "manual":
        return jax.make_mesh((2,), ("data",), axis_types=(AXIS.Manual,), devices=devices[:2])
    if kind == "mixed":
        return jax.make_mesh((2, 4), ("a", "b"), axis_types=(AXIS.Explicit, AXIS.Auto))
    if kind == "single":
        return jax.make_mesh((1,), ("data",), axis_types=(AXIS.Explicit,), devices=devices[:1])
    if kind == "empty":
        return jax.sharding.Mesh(np.empty((0,), dtype=object), ("data",))
    if kind == "abstract":
        return jax.sharding.AbstractMesh((2,), ("data",), axis_types=(AXIS.Explicit,))
    if kind == "string":
        return "data"
    if kind == "devices":
        return devices
    raise AssertionError(kind)


MESH_KINDS = ("explicit", "auto", "manual", "mixed", "single", "empty", "abstract", "string", "devices")

#: Argument sequences a training loop passes: same shapes, new shapes, new dtypes, Python scalars.
CALL_SEQUENCES: dict[str, list[Any]] = {
    "same_shape": [lambda: jnp.arange(3.0), lambda: jnp.ones(3), lambda: jnp.zeros(3)],
    "new_shapes": [lambda: jnp.arange(2.0), lambda: jnp.arange(3.0), lambda: jnp.arange(4.0), lambda: jnp.arange(2.0)],
    "new_dtypes": [
        lambda: jnp.arange(3, dtype=jnp.int32),
        lambda: jnp.arange(3.0),
        lambda: jnp.arange(3, dtype=jnp.int8),
    ],
    "python_scalars": [lambda: 1.0, lambda: 2.0, lambda: 3, lambda: True],
    "numpy_inputs": [lambda: np.arange(3.0, dtype=np.float32), lambda: np.float32(2), lambda: np.arange(4.0)],
    "weak_then_strong": [lambda: jnp.asarray(2.0), lambda: jnp.asarray(2.0, jnp.float32)],
    "empty": [lambda: jnp.zeros((0,)), lambda: jnp.zeros((0, 2))],
}


class _Fresh(Cases):
    """Cases whose calls start from cleared trace counters.

    tinax 0.2 counted traces with ``chex.assert_max_traces``, which keys its
    counter by where the function was wrapped and by its source, so two
    wrappers of the same lambda share one budget. Every case here starts with
    ``chex.clear_trace_counter()`` so that it does not depend on the cases
    before it; the ``recreated-*`` cases test the sharing itself.
    """

    def __init__(self, inner: Cases) -> None:
        self.inner = inner

    def add(self, function: str, group: str, call: Any, **keywords: Any) -> Any:  # type: ignore[override]
        def fresh(folder: Any, call: Any = call) -> Any:
            chex.clear_trace_counter()
            return call(folder)

        return self.inner.add(function, group, fresh, **keywords)


def _scaled(x: Any) -> Any:
    return x * 2 + 1


def _calls(function: Any, makers: list[Any]) -> list[Any]:
    return [attempt(function, make()) for make in makers]


def _bounded(cases: Cases) -> None:
    function = f"{M}.bounded_jit"
    for name, value in [*python_and_numpy_scalars(), *jax_scalars()]:
        cases.add(
            function,
            f"max_traces-{name}",
            lambda _, v=value: _calls(tj.bounded_jit(lambda x: x + 1, max_traces=v), CALL_SEQUENCES["new_shapes"]),
        )
    r = rng(function)
    for sequence_name, makers in CALL_SEQUENCES.items():
        for budget in sorted(r.sample(range(4), 2)):
            cases.add(
                function,
                f"budget-{sequence_name}",
                lambda _, b=budget, m=makers: _calls(tj.bounded_jit(lambda x: _scaled(x), max_traces=b), m),
            )
    functions = {
        "none": None,
        "int": 3,
        "string": "f",
        "builtin": abs,
        "partial": functools.partial(jnp.multiply, 3.0),
        "class": float,
        "lambda": lambda x: x - 1,
        "method": jnp.arange(2.0).__add__,
    }
    for name, wrapped in functions.items():
        cases.add(
            function,
            f"function-{name}",
            lambda _, f=wrapped: _calls(tj.bounded_jit(f, max_traces=2), [lambda: jnp.arange(3.0)]),
        )
    argnames = {
        "empty": ((), ()),
        "list": (["n"], []),
        "tuple": (("n",), ()),
        "string": ("n", ()),
        "donate_string": ((), "x"),
        "duplicate": (["n", "n"], []),
        "empty_name": ([""], []),
        "non_string": ([1], []),
        "bytes_name": ([b"n"], []),
        "overlap": (["n"], ["n"]),
        "unknown_static": (["missing"], []),
        "unknown_donate": ([], ["missing"]),
        "generator": ((name for name in ["n"]), ()),
        "set": ({"n"}, ()),
        "none": (None, ()),
        "donate_x": ([], ["x"]),
        "static_and_donate": (["n"], ["x"]),
    }

    def with_names(static: Any, donate: Any) -> Any:
        def body(x: Any, n: int = 1) -> Any:
            return x * n

        wrapped = tj.bounded_jit(body, max_traces=3, static_argnames=static, donate_argnames=donate)
        x = jnp.arange(3.0)
        first = attempt(wrapped, x=x, n=2)
        second = attempt(wrapped, x=jnp.arange(3.0), n=3)
        third = attempt(wrapped, jnp.arange(3.0))
        return {"first": first, "second": second, "third": third, "x_after": x}

    for name, (static, donate) in argnames.items():
        cases.add(function, f"argnames-{name}", lambda _, s=static, d=donate: with_names(s, d))

    def with_mesh(kind: str) -> Any:
        wrapped = tj.bounded_jit(lambda x: jnp.sum(x * 2), max_traces=2, mesh=_mesh(kind))
        return _calls(wrapped, [lambda: jnp.arange(8.0), lambda: jnp.arange(8.0)])

    for kind in MESH_KINDS:
        cases.add(function, f"mesh-{kind}", lambda _, k=kind: with_mesh(k))

    def mesh_sharded_input(_: Any) -> Any:
        mesh = _mesh("explicit")
        sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
        wrapped = tj.bounded_jit(lambda x: x * 3, max_traces=1, mesh=mesh)
        return wrapped(jax.device_put(jnp.arange(8.0), sharding))

    cases.add(function, "mesh-sharded-input", mesh_sharded_input)

    def ahead_of_time(_: Any) -> Any:
        wrapped = tj.bounded_jit(lambda x, y: x @ y, max_traces=2)
        x, y = jnp.ones((2, 3)), jnp.arange(6.0).reshape(3, 2)
        return {
            "eval_shape": attempt(lambda: wrapped.eval_shape(x, y)),
            "eval_shape_sds": attempt(lambda: jax.eval_shape(wrapped, jax.ShapeDtypeStruct((4, 3), jnp.float32), y)),
            "compiled": attempt(lambda: wrapped.lower(x, y).compile()(x, y)),
            "traced_out": attempt(lambda: wrapped.trace(x, y).out_info),
            "call": attempt(wrapped, x, y),
        }

    cases.add(function, "ahead-of-time", ahead_of_time)

    def disabled_asserts(_: Any) -> Any:
        wrapped = tj.bounded_jit(lambda x: x + 1, max_traces=1)
        chex.disable_asserts()
        try:
            return _calls(wrapped, CALL_SEQUENCES["new_shapes"])
        finally:
            chex.enable_asserts()

    cases.add(function, "chex-disable-asserts", disabled_asserts)

    def cleared(_: Any) -> Any:
        wrapped = tj.bounded_jit(lambda x: x + 1, max_traces=1)
        first = _calls(wrapped, CALL_SEQUENCES["new_shapes"][:2])
        chex.clear_trace_counter()
        return [first, _calls(wrapped, CALL_SEQUENCES["new_shapes"][2:])]

    cases.add(function, "chex-clear-trace-counter", cleared)

    def pytree_arguments(_: Any) -> Any:
        wrapped = tj.bounded_jit(lambda tree: jax.tree.map(lambda leaf: leaf * 2, tree), max_traces=2)
        return _calls(
            wrapped,
            [
                lambda: {"a": jnp.ones(2), "b": (jnp.zeros(1), 3.0)},
                lambda: {"a": jnp.ones(2), "b": (jnp.zeros(1), 4.0)},
                lambda: {"a": jnp.ones(3), "b": (jnp.zeros(1), 4.0)},
                dict,
                list,
            ],
        )

    cases.add(function, "pytree-arguments", pytree_arguments)
    cases.add(
        function,
        "returned-type",
        lambda _: {"type": type(tj.bounded_jit(lambda x: x, max_traces=1)), "callable": True},
    )
    cases.add(
        function,
        "random-key-argument",
        lambda _: tj.bounded_jit(lambda key: jax.random.normal(key, (3,)), max_traces=1)(jax.random.key(5)),
    )


def _batched(cases: Cases) -> None:
    function = f"{M}.batched_jit"
    for name, value in [*python_and_numpy_scalars(), *jax_scalars()]:
        cases.add(
            function,
            f"axis_size-{name}",
            lambda _, v=value: _calls(
                tj.batched_jit(lambda x: x * 2, axis_size=v, max_traces=2), [lambda: jnp.arange(3.0)]
            ),
        )
        cases.add(
            function,
            f"max_traces-{name}",
            lambda _, v=value: _calls(tj.batched_jit(lambda x: x.sum(), max_traces=v), CALL_SEQUENCES["new_shapes"]),
        )
    axes = {
        "zero": (0, 0),
        "one": (1, 0),
        "minus_one": (-1, 0),
        "none": (None, 0),
        "tuple": ((0, None), 0),
        "list": ([0, None], 0),
        "out_one": (0, 1),
        "out_none": (0, None),
        "out_tuple": (0, (0, 0)),
        "dict": ({"a": 0}, 0),
        "bool": (True, 0),
        "float": (0.0, 0),
        "string": ("0", 0),
        "too_big": (3, 0),
    }

    def with_axes(in_axes: Any, out_axes: Any) -> Any:
        def body(x: Any, y: Any = 1.0) -> Any:
            return (x * y, x.sum()) if out_axes == (0, 0) else x * y

        wrapped = tj.batched_jit(body, in_axes=in_axes, out_axes=out_axes, max_traces=2)
        x = random_array("float32", (3, 2), "batched")
        return [
            attempt(wrapped, jnp.asarray(x), jnp.float32(2)),
            attempt(wrapped, {"a": jnp.asarray(x)}, jnp.float32(2)),
            attempt(wrapped, jnp.asarray(x)),
        ]

    for name, (in_axes, out_axes) in axes.items():
        cases.add(function, f"axes-{name}", lambda _, i=in_axes, o=out_axes: with_axes(i, o))
    r = rng(function)
    for sequence_name, makers in CALL_SEQUENCES.items():
        budget = r.choice(range(4))
        cases.add(
            function,
            f"budget-{sequence_name}",
            lambda _, b=budget, m=makers: _calls(tj.batched_jit(lambda x: _scaled(x), max_traces=b), m),
        )
    for kind in MESH_KINDS:
        cases.add(
            function,
            f"mesh-{kind}",
            lambda _, k=kind: _calls(
                tj.batched_jit(lambda x: x.sum(), max_traces=1, mesh=_mesh(k)), [lambda: jnp.ones((8, 2))]
            ),
        )
    for name, wrapped in {"none": None, "int": 1, "builtin": abs, "partial": functools.partial(jnp.add, 1.0)}.items():
        cases.add(
            function,
            f"function-{name}",
            lambda _, f=wrapped: _calls(tj.batched_jit(f, max_traces=1), [lambda: jnp.arange(3.0)]),
        )

    def disabled_jit(_: Any) -> Any:
        wrapped = tj.batched_jit(lambda x: x * 2, max_traces=1)
        with jax.disable_jit():
            return _calls(wrapped, CALL_SEQUENCES["same_shape"])

    cases.add(function, "disable-jit", disabled_jit)

    def ahead_of_time(_: Any) -> Any:
        wrapped = tj.batched_jit(lambda x: x.sum(), max_traces=2)
        x = jnp.ones((4, 3))
        return {
            "eval_shape": attempt(lambda: wrapped.eval_shape(x)),
            "eval_shape_sds": attempt(lambda: jax.eval_shape(wrapped, jax.ShapeDtypeStruct((5, 2), jnp.bfloat16))),
            "compiled": attempt(lambda: wrapped.lower(x).compile()(x)),
            "call": attempt(wrapped, x),
        }

    cases.add(function, "ahead-of-time", ahead_of_time)
    cases.add(
        function,
        "returned-type",
        lambda _: {"type": type(tj.batched_jit(lambda x: x, max_traces=1)), "callable": True},
    )
    cases.add(
        function,
        "keys",
        lambda _: tj.batched_jit(lambda key: jax.random.uniform(key, (2,)), max_traces=1)(
            jax.random.split(jax.random.key(3), 4)
        ),
    )


def _recreated(cases: Cases) -> None:
    """A wrapper made again for the same function, as a loop that builds its step function does."""

    def loop(wrap: Any, makers: list[Any], rounds: int) -> Any:
        results = []
        for _ in range(rounds):
            wrapped = wrap()
            results.append([attempt(wrapped, make()) for make in makers])
        return results

    wraps = {
        "bounded_jit": lambda budget: lambda: tj.bounded_jit(lambda x: x * 3, max_traces=budget),
        "batched_jit": lambda budget: lambda: tj.batched_jit(lambda x: x * 3, max_traces=budget),
    }
    for name, wrap in wraps.items():
        for budget in (1, 2, 3):
            for sequence in ("same_shape", "new_shapes"):
                cases.add(
                    f"{M}.{name}",
                    f"recreated-{sequence}",
                    lambda _, w=wrap, b=budget, s=sequence: loop(w(b), CALL_SEQUENCES[s][:2], 3),
                )

    def two_sites(_: Any) -> Any:
        first = tj.bounded_jit(_scaled, max_traces=1)
        second = tj.bounded_jit(_scaled, max_traces=1)
        return [attempt(first, jnp.ones(2)), attempt(second, jnp.ones(2)), attempt(first, jnp.ones(3))]

    cases.add(f"{M}.bounded_jit", "recreated-same-function-twice", two_sites)


def build(cases: Cases) -> None:
    """Every case of ``tinax.jit``."""
    fresh = _Fresh(cases)
    _bounded(fresh)  # type: ignore[arg-type]
    _batched(fresh)  # type: ignore[arg-type]
    _recreated(fresh)  # type: ignore[arg-type]
