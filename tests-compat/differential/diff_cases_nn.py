"""Differential cases of ``tinax.nn``: snapshots, restores and clones of Flax NNX modules."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
import optax
from diff_common import Cases, nnx_modules
from diff_describe import attempt
from flax import nnx

import tinax.nn as tn

M = "tinax.nn"


class _WithNumpy(nnx.Module):
    def __init__(self) -> None:
        self.table = nnx.Variable(np.arange(4.0, dtype=np.float32))
        self.scale = nnx.Param(jnp.asarray(2.0))
        self.host = np.ones(2, dtype=np.int32)
        self.name = "with-numpy"


class _Nested(nnx.Module):
    def __init__(self) -> None:
        self.layers = nnx.List([nnx.Linear(2, 2, rngs=nnx.Rngs(index)) for index in range(2)])
        self.lookup = nnx.Dict({"a": nnx.Param(jnp.ones(1)), "b": nnx.BatchStat(jnp.zeros(1))})
        self.empty = nnx.List([])


def _modules() -> dict[str, Any]:
    made = dict(nnx_modules())
    made["with_numpy"] = _WithNumpy
    made["nested"] = _Nested
    return made


def _first_param(module: Any) -> Any:
    return next(iter(nnx.state(module, nnx.Param).flat_state()))[1]


def _bump(module: Any) -> None:
    """Changes one parameter of ``module`` in place."""
    variable = _first_param(module)
    variable.value = variable.value + 1


def _aliases(module: Any) -> Any:
    return {"first_is_second": module.first is module.second} if hasattr(module, "first") else {}


def _snapshot(cases: Cases) -> None:
    function = f"{M}.snapshot_graph"

    def snapshot(make: Any) -> Any:
        module = make()
        taken = tn.snapshot_graph(module)
        _bump(module)
        return {"snapshot": taken, "module_after_bump": module}

    for name, make in _modules().items():
        cases.add(function, f"module-{name}", lambda _, m=make: snapshot(m))
    inputs = {
        "none": lambda: None,
        "dict": lambda: {"w": jnp.ones(2)},
        "state": lambda: nnx.state(nnx.Linear(1, 1, rngs=nnx.Rngs(0))),
        "graphdef": lambda: nnx.graphdef(nnx.Linear(1, 1, rngs=nnx.Rngs(0))),
        "variable": lambda: nnx.Param(jnp.ones(1)),
        "rngs": lambda: nnx.Rngs(0),
        "optax_state": lambda: optax.adam(1e-3).init({"w": jnp.ones(2)}),
        "optimizer": lambda: nnx.Optimizer(nnx.Linear(2, 1, rngs=nnx.Rngs(0)), optax.sgd(0.1), wrt=nnx.Param),
        "module_class": lambda: nnx.Linear,
        "array": lambda: jnp.ones(2),
    }
    for name, make in inputs.items():
        cases.add(function, f"input-{name}", lambda _, m=make: tn.snapshot_graph(m()))


def _restore(cases: Cases) -> None:
    function = f"{M}.restore_graph"

    def restore(make: Any, copy: Any) -> Any:
        snapshot = tn.snapshot_graph(make())
        restored = tn.restore_graph(snapshot, copy=copy)
        again = tn.restore_graph(snapshot, copy=copy)
        _bump(restored)
        return {
            "restored": restored,
            "type": type(restored),
            "aliases": _aliases(restored),
            "second_restore_after_bump": again,
            "shares_variables": _first_param(restored) is _first_param(again),
        }

    for name, make in _modules().items():
        for copy in (True, False):
            cases.add(function, f"module-{name}", lambda _, m=make, c=copy: restore(m, c))
    for name, copy in {"none": None, "int1": 1, "np_bool": np.bool_(True), "string": "yes"}.items():
        cases.add(
            function,
            f"copy-{name}",
            lambda _, c=copy: tn.restore_graph(tn.snapshot_graph(nnx.Linear(1, 1, rngs=nnx.Rngs(0))), copy=c),
        )
    snapshots = {
        "none": lambda: None,
        "state": lambda: nnx.state(nnx.Linear(1, 1, rngs=nnx.Rngs(0))),
        "split_tuple": lambda: nnx.split(nnx.Linear(1, 1, rngs=nnx.Rngs(0))),
        "module": lambda: nnx.Linear(1, 1, rngs=nnx.Rngs(0)),
        "dict": dict,
        "pure_dict": lambda: nnx.state(nnx.Linear(1, 1, rngs=nnx.Rngs(0))).to_pure_dict(),
        "eval_shape_state": lambda: tn.snapshot_graph(nnx.eval_shape(lambda: nnx.Linear(2, 2, rngs=nnx.Rngs(0)))),
    }
    for name, make in snapshots.items():
        cases.add(function, f"snapshot-{name}", lambda _, m=make: attempt(tn.restore_graph, m(), copy=True))
    cases.add(
        function, "copy-missing", lambda _: tn.restore_graph(tn.snapshot_graph(nnx.Linear(1, 1, rngs=nnx.Rngs(0))))
    )  # type: ignore[call-arg]

    def not_a_module(_: Any) -> Any:
        graphdef, state = nnx.split(nnx.Rngs(0))
        return tn.restore_graph(nnx.GraphState(graphdef, state), copy=True)  # type: ignore[attr-defined]

    cases.add(function, "snapshot-of-non-module", not_a_module)


def _clone(cases: Cases) -> None:
    function = f"{M}.clone_graph"

    def clone(make: Any) -> Any:
        original = make()
        copied = tn.clone_graph(original)
        _bump(copied)
        return {
            "clone": copied,
            "type": type(copied),
            "aliases": _aliases(copied),
            "original_after_bump": original,
            "shares_variables": _first_param(copied) is _first_param(original),
        }

    for name, make in _modules().items():
        cases.add(function, f"module-{name}", lambda _, m=make: clone(m))
    inputs = {
        "none": lambda: None,
        "dict": lambda: {"w": jnp.ones(2)},
        "state": lambda: nnx.state(nnx.Linear(1, 1, rngs=nnx.Rngs(0))),
        "variable": lambda: nnx.Param(jnp.ones(1)),
        "rngs": lambda: nnx.Rngs(0),
        "optimizer": lambda: nnx.Optimizer(nnx.Linear(2, 1, rngs=nnx.Rngs(0)), optax.adam(0.1), wrt=nnx.Param),
        "module_class": lambda: nnx.Linear,
    }
    for name, make in inputs.items():
        cases.add(function, f"input-{name}", lambda _, m=make: tn.clone_graph(m()))

    def jitted_then_cloned(_: Any) -> Any:
        model = nnx.Linear(2, 2, rngs=nnx.Rngs(5))

        @nnx.jit
        def step(model: Any) -> None:
            model.kernel.value = model.kernel.value * 2

        step(model)
        return tn.clone_graph(model)

    cases.add(function, "after-nnx-jit", jitted_then_cloned)
    cases.add(
        function,
        "eval_shape-module",
        lambda _: tn.clone_graph(nnx.eval_shape(lambda: nnx.Linear(3, 2, rngs=nnx.Rngs(0)))),
    )
    cases.add(
        function,
        "call-after-clone",
        lambda _: tn.clone_graph(nnx.Linear(2, 3, rngs=nnx.Rngs(1)))(jnp.ones((1, 2))),
    )


def build(cases: Cases) -> None:
    """Every case of ``tinax.nn``."""
    _snapshot(cases)
    _restore(cases)
    _clone(cases)
