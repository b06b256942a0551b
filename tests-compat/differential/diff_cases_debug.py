"""Differential cases of ``tinax.debug``."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from diff_common import Cases, jax_scalars, random_array, rng, scaled, size_scalars
from diff_describe import attempt

import tinax.debug as tdb

M = "tinax.debug"


class _Recorder:
    """A callback that keeps what it was given."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def __call__(self, count: Any, indices: Any) -> None:
        self.calls.append((np.asarray(count), np.asarray(indices)))


def _observe(values: Any, max_indices: Any, *, how: str = "eager") -> Any:
    recorder = _Recorder()

    def run(v: Any) -> Any:
        return tdb.observe_nonfinite(v, callback=recorder, max_indices=max_indices)

    if how == "jit":
        returned = jax.jit(run)(values)
    elif how == "vmap":
        returned = jax.vmap(run)(values)
    else:
        returned = run(values)
    jax.effects_barrier()
    return {"returned": returned, "calls": recorder.calls, "same_object": returned is values}


def _mesh_sharding(spec: tuple[Any, ...]) -> Any:
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Explicit,) * 2)
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))


def _observe_nonfinite(cases: Cases) -> None:
    function = f"{M}.observe_nonfinite"
    r = rng(function)
    for _ in range(scaled(24)):
        dtype_name = r.choice(["float32", "float16", "bfloat16", "complex64", "int32", "bool", "float8_e4m3fn"])
        shape = r.choice([(), (0,), (5,), (2, 3), (4, 4)])
        max_indices = r.choice([0, 1, 2, 5, 16])
        how = r.choice(["eager", "eager", "jit"])
        cases.add(
            function,
            f"{dtype_name}-{how}",
            lambda _, d=dtype_name, s=shape, k=max_indices, h=how: _observe(
                jnp.asarray(random_array(d, s, "nonfinite", special=True)), k, how=h
            ),
        )
    for name, value in [*size_scalars(), *jax_scalars()]:
        cases.add(
            function,
            f"max_indices-{name}",
            lambda _, v=value: _observe(jnp.asarray([1.0, np.nan, np.inf]), v),
        )
    callbacks = {"none": None, "int": 1, "string": "print", "list": []}
    for name, callback in callbacks.items():
        cases.add(
            function,
            f"callback-{name}",
            lambda _, c=callback: tdb.observe_nonfinite(jnp.asarray([np.nan]), callback=c, max_indices=1),
        )
    inputs = {
        "numpy": lambda: np.asarray([np.nan, 1.0]),
        "list": lambda: [np.nan],
        "py_float": lambda: float("nan"),
        "np_scalar": lambda: np.float32("inf"),
        "key": lambda: jax.random.key(0),
        "none": lambda: None,
        "all_finite": lambda: jnp.arange(4.0),
        "all_nan": lambda: jnp.full((3,), jnp.nan),
    }
    for name, make in inputs.items():
        cases.add(function, f"input-{name}", lambda _, m=make: _observe(m(), 4))
    cases.add(
        function,
        "vmap",
        lambda _: _observe(jnp.asarray([[1.0, 2.0], [np.nan, 3.0], [4.0, np.inf]]), 2, how="vmap"),
    )
    cases.add(
        function,
        "vmap-finite",
        lambda _: _observe(jnp.ones((3, 2)), 2, how="vmap"),
    )
    cases.add(
        function,
        "sharded",
        lambda _: _observe(
            jax.device_put(jnp.asarray(random_array("float32", (8, 4), "sh", special=True)), _mesh_sharding(("data",))),
            3,
        ),
    )
    cases.add(
        function,
        "eval_shape",
        lambda _: jax.eval_shape(
            lambda v: tdb.observe_nonfinite(v, callback=_Recorder(), max_indices=2),
            jax.ShapeDtypeStruct((3,), jnp.float32),
        ),
    )


def _profile_call(cases: Cases) -> None:
    function = f"{M}.profile_call"

    def profile(folder: Path, log_dir: Any, target: Any, *arguments: Any, **keywords: Any) -> Any:
        result = tdb.profile_call(log_dir(folder) if callable(log_dir) else log_dir, target, *arguments, **keywords)
        traces = sorted({path.name.split(".", 1)[-1] for path in folder.rglob("*") if path.is_file()})
        return {"result": result, "trace_suffixes": traces}

    cases.add(
        function,
        "str-log-dir",
        lambda folder: profile(
            folder, lambda f: str(f / "trace"), lambda x, y: x @ y, jnp.ones((2, 3)), jnp.ones((3, 2))
        ),
    )
    cases.add(
        function,
        "path-log-dir-keywords",
        lambda folder: profile(folder, lambda f: f, lambda x, *, scale: x * scale, jnp.arange(3.0), scale=2.0),
    )
    cases.add(
        function,
        "returns-pytree",
        lambda folder: profile(folder, lambda f: f, lambda: {"a": jnp.ones(2), "b": (1, "x")}),
    )
    cases.add(function, "not-callable", lambda folder: profile(folder, lambda f: f, "f"))

    def raising(folder: Path) -> Any:
        def fail() -> None:
            raise KeyError("inside")

        return profile(folder, lambda f: f, fail)

    cases.add(function, "function-raises", raising)
    cases.add(
        function,
        "jitted-function",
        lambda folder: profile(folder, lambda f: f / "t", jax.jit(lambda x: jnp.cumsum(x)), jnp.arange(5.0)),
    )
    cases.add(
        function,
        "pytree-arguments",
        lambda folder: profile(
            folder, lambda f: f, lambda tree: jax.tree.map(lambda v: v + 1, tree), {"a": jnp.ones(2)}
        ),
    )
    cases.add(function, "returns-none", lambda folder: profile(folder, lambda f: f, lambda: None))
    cases.add(function, "log-dir-none", lambda folder: profile(folder, None, lambda: 1))
    cases.add(function, "log-dir-int", lambda folder: profile(folder, 3, lambda: 1))
    # A trace that cannot start leaves JAX's profiler started under 0.2, so these two run last.
    cases.add(
        function,
        "log-dir-is-a-file",
        lambda folder: profile(folder, lambda f: (f / "file").write_bytes(b"x") and f / "file", lambda: 1),
    )
    cases.add(function, "after-a-failed-start", lambda folder: profile(folder, lambda f: f, lambda: 2))


def _visualize(cases: Cases) -> None:
    function = f"{M}.visualize_array_sharding"

    def shown(make: Any) -> Any:
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            result = attempt(tdb.visualize_array_sharding, make())
        return {"result": result, "printed": buffer.getvalue()}

    inputs = {
        "single_device": lambda: jnp.arange(4.0),
        "rows": lambda: jax.device_put(jnp.zeros((8, 4)), _mesh_sharding(("data",))),
        "grid": lambda: jax.device_put(jnp.zeros((8, 4)), _mesh_sharding(("data", "model"))),
        "columns": lambda: jax.device_put(jnp.zeros((4, 8)), _mesh_sharding((None, "data"))),
        "replicated": lambda: jax.device_put(jnp.zeros((2, 2)), _mesh_sharding(())),
        "vector_sharded": lambda: jax.device_put(jnp.arange(8), _mesh_sharding(("data",))),
        "scalar": lambda: jnp.asarray(1.0),
        "rank3": lambda: jnp.zeros((2, 2, 2)),
        "key": lambda: jax.random.key(0),
        "numpy": lambda: np.zeros((2, 2)),
        "list": lambda: [[1.0]],
        "none": lambda: None,
        "shape_dtype_struct": lambda: jax.ShapeDtypeStruct((2, 2), jnp.float32),
    }
    for name, make in inputs.items():
        cases.add(function, f"input-{name}", lambda _, m=make: shown(m))

    def traced(_: Any) -> Any:
        seen: list[Any] = []

        def body(x: Any) -> Any:
            seen.append(attempt(tdb.visualize_array_sharding, x))
            return x

        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            jax.jit(body)(jnp.ones(4))
        return {"inside": seen, "printed": buffer.getvalue()}

    cases.add(function, "traced", traced)


def build(cases: Cases) -> None:
    """Every case of ``tinax.debug``."""
    _observe_nonfinite(cases)
    _profile_call(cases)
    _visualize(cases)
