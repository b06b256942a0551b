"""Differential cases of ``tinax.checkpointing.legacy.v0``: each release reads what the other wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
from diff_cases_checkpointing import _states
from diff_common import Cases

import tinax.checkpointing.legacy.v0 as legacy

M = "tinax.checkpointing.legacy.v0"

#: States saved as V0 PyTrees; the ones whose save fails under 0.2 run last (see build).
SAVED = (
    "params",
    "numpy",
    "scalars",
    "sharded",
    "nested_lists",
    "namedtuple",
    "optax_adam",
    "optax_sgd_momentum",
    "optax_masked_adam",
    "nnx_pure_linear",
    "nnx_linear",
    "dtype_bfloat16",
    "dtype_int8",
    "dtype_uint64",
    "dtype_float16",
    "key",
    "empty_dict",
)
FAILING_IN_02 = ("optax_empty_state", "zero_size", "mixed_leaves")


def _target(state: Any, how: str) -> Any:
    if how == "none":
        return None
    if how == "concrete":
        return state
    return jax.tree.map(
        lambda leaf: (
            np.zeros(leaf.shape, leaf.dtype)
            if isinstance(leaf, jax.Array | np.ndarray) and not jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)
            else leaf
        ),
        state,
    )


def _pytrees(cases: Cases, last: list[Any]) -> None:
    save = f"{M}.save_legacy_v0_pytree"
    load = f"{M}.load_legacy_v0_pytree"
    states = _states()
    for name in (*SAVED, *FAILING_IN_02):
        for how in ("none", "concrete"):
            if how == "concrete" and name in FAILING_IN_02:
                continue

            def add(n: str = name, h: str = how) -> None:
                cases.add(
                    save,
                    f"state-{n}-target_{h}",
                    lambda folder: legacy.save_legacy_v0_pytree(folder / "ckpt", states[n]()),
                    files="readback",
                    read=lambda folder: legacy.load_legacy_v0_pytree(folder / "ckpt", _target(states[n](), h)),
                    also=(load,),
                )

            if name in FAILING_IN_02:
                last.append(add)
            else:
                add()
    cases.add(
        load,
        "target-zeros",
        lambda folder: (
            legacy.save_legacy_v0_pytree(folder / "ckpt", states["params"]())
            or legacy.load_legacy_v0_pytree(folder / "ckpt", _target(states["params"](), "zeros"))
        ),
    )
    refused: dict[str, Any] = {
        "existing": lambda folder: (folder / "ckpt").mkdir() or legacy.save_legacy_v0_pytree(folder / "ckpt", {"a": 1}),
        "tmp_suffix": lambda folder: legacy.save_legacy_v0_pytree(folder / "a.orbax-checkpoint-tmp-3", {"a": 1}),
        "int_path": lambda folder: legacy.save_legacy_v0_pytree(3, {"a": 1}),
        "str_path": lambda folder: legacy.save_legacy_v0_pytree(str(folder / "ckpt"), {"a": jnp.ones(1)}),
        "none_state": lambda folder: legacy.save_legacy_v0_pytree(folder / "ckpt", None),
        "array_state": lambda folder: legacy.save_legacy_v0_pytree(folder / "ckpt", jnp.ones(2)),
        "list_state": lambda folder: legacy.save_legacy_v0_pytree(folder / "ckpt", [jnp.ones(2), 3]),
    }
    for name, call in refused.items():
        cases.add(save, f"refused-{name}", call)

    def saved_then(folder: Path, target: Any) -> Any:
        legacy.save_legacy_v0_pytree(folder / "ckpt", {"a": jnp.arange(3.0), "b": {"c": 1}})
        return legacy.load_legacy_v0_pytree(folder / "ckpt", target)

    targets: dict[str, Any] = {
        "wrong_shape": {"a": np.zeros(4, np.float32), "b": {"c": 0}},
        "wrong_structure": {"x": np.zeros(3, np.float32)},
        "subset": {"a": np.zeros(3, np.float32)},
        "shape_dtype_struct": {"a": jax.ShapeDtypeStruct((3,), jnp.float32), "b": {"c": 0}},
        "jax_array": {"a": jnp.zeros(3), "b": {"c": 0}},
        "int_target": 3,
    }
    for name, target in targets.items():
        cases.add(load, f"target-{name}", lambda folder, t=target: saved_then(folder, t))
    cases.add(load, "missing", lambda folder: legacy.load_legacy_v0_pytree(folder / "nothing"))
    cases.add(
        load, "file", lambda folder: (folder / "f").write_bytes(b"x") or legacy.load_legacy_v0_pytree(folder / "f")
    )
    cases.add(load, "tmp_suffix", lambda folder: legacy.load_legacy_v0_pytree(folder / "x.orbax-checkpoint-tmp-1"))


def _iterator(count: int = 9, advance: int = 4) -> Any:
    iterator = iter(grain.MapDataset.range(count).shuffle(seed=3).map(lambda value: value + 100).to_iter_dataset())
    for _ in range(advance):
        next(iterator)
    return iterator


def _iterators(cases: Cases) -> None:
    save = f"{M}.save_legacy_v0_grain_iterator"
    load = f"{M}.load_legacy_v0_grain_iterator"
    for advance in (0, 1, 4, 7, 9):

        def loaded(folder: Path) -> Any:
            restored = legacy.load_legacy_v0_grain_iterator(folder / "iter", _iterator(advance=0))
            return {"restored": restored, "rest": list(restored)}

        cases.add(
            save,
            f"advance-{advance}",
            lambda folder, a=advance: legacy.save_legacy_v0_grain_iterator(folder / "iter", _iterator(advance=a)),
            files="readback",
            read=loaded,
            also=(load,),
        )
    refused: dict[str, Any] = {
        "dataset": lambda folder: legacy.save_legacy_v0_grain_iterator(folder / "iter", grain.MapDataset.range(2)),
        "list": lambda folder: legacy.save_legacy_v0_grain_iterator(folder / "iter", [1]),
        "python_iterator": lambda folder: legacy.save_legacy_v0_grain_iterator(folder / "iter", iter([1, 2])),
        "existing": lambda folder: (
            (folder / "iter").mkdir() or legacy.save_legacy_v0_grain_iterator(folder / "iter", _iterator())
        ),
        "tmp_suffix": lambda folder: legacy.save_legacy_v0_grain_iterator(
            folder / "i.orbax-checkpoint-tmp-2", _iterator()
        ),
    }
    for name, call in refused.items():
        cases.add(save, f"refused-{name}", call)

    def other_pipeline(folder: Path) -> Any:
        legacy.save_legacy_v0_grain_iterator(folder / "iter", _iterator())
        other = iter(grain.MapDataset.range(50).to_iter_dataset())
        restored = legacy.load_legacy_v0_grain_iterator(folder / "iter", other)
        return {"restored": restored, "rest": list(restored)[:10]}

    def batched(folder: Path) -> Any:
        def make() -> Any:
            return iter(grain.MapDataset.range(10).batch(3).to_iter_dataset())

        iterator = make()
        next(iterator)
        legacy.save_legacy_v0_grain_iterator(folder / "iter", iterator)
        restored = legacy.load_legacy_v0_grain_iterator(folder / "iter", make())
        return {"restored": restored, "rest": list(restored)}

    loads: dict[str, Any] = {
        "batched": batched,
        "other_pipeline": other_pipeline,
        "missing": lambda folder: legacy.load_legacy_v0_grain_iterator(folder / "none", _iterator()),
        "not_iterator": lambda folder: legacy.load_legacy_v0_grain_iterator(folder / "none", [1]),
        "pytree_checkpoint": lambda folder: (
            legacy.save_legacy_v0_pytree(folder / "p", {"a": 1})
            or legacy.load_legacy_v0_grain_iterator(folder / "p", _iterator())
        ),
    }
    for name, call in loads.items():
        cases.add(load, name, call)


def build(cases: Cases) -> None:
    """Every case of ``tinax.checkpointing.legacy.v0``."""
    last: list[Any] = []
    _pytrees(cases, last)
    _iterators(cases)
    for add in last:
        add()
