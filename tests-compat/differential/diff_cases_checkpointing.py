"""Differential cases of ``tinax.checkpointing``.

Checkpoint folders hold timestamps and are compared by content: each release
loads what the other saved and must get what 0.2 gets from its own folder.
"""

from __future__ import annotations

import collections
import dataclasses
import unicodedata
from pathlib import Path
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
from diff_common import DTYPE_NAMES, Cases, nnx_modules, optax_states, random_array, rng, scaled
from diff_describe import attempt
from flax import nnx

import tinax.checkpointing as tc

M = "tinax.checkpointing"
_Point = collections.namedtuple("_Point", ["x", "y"])


def _sharded(array: Any, spec: tuple[Any, ...]) -> Any:
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Explicit,) * 2)
    return jax.device_put(array, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec)))


def _states() -> dict[str, Any]:
    """States users checkpoint, each built fresh by its own function."""
    states: dict[str, Any] = {
        "params": lambda: {"dense": {"kernel": jnp.arange(6.0).reshape(2, 3), "bias": jnp.zeros(3)}},
        "numpy": lambda: {"table": random_array("int32", (3, 2), "np"), "mask": np.asarray([True, False])},
        "mixed_leaves": lambda: {"a": jnp.ones(2, jnp.bfloat16), "b": np.float32(1.5), "c": 3, "d": 2.5, "e": "text"},
        "scalars": lambda: {"step": 10, "lr": 1e-3, "flag": True},
        "key": lambda: {"rng": jax.random.key(3)},
        "raw_key": lambda: {"rng": jax.random.PRNGKey(3)},
        "sharded": lambda: {"w": _sharded(jnp.arange(16.0).reshape(8, 2), ("data",))},
        "sharded_grid": lambda: {"w": _sharded(jnp.ones((8, 4), jnp.int8), ("data", "model"))},
        "nested_lists": lambda: {"layers": [jnp.ones(2), (jnp.zeros(1), jnp.arange(3))]},
        "namedtuple": lambda: {"point": _Point(jnp.ones(1), jnp.zeros(2))},
        "empty_dict": lambda: {"empty": {}},
        "none_leaf": lambda: {"a": None, "b": jnp.ones(1)},
        "zero_size": lambda: {"z": jnp.zeros((0, 3))},
    }
    for name, state in optax_states():
        states[f"optax_{name}"] = lambda s=state: s
    for name, make in nnx_modules()[:4]:
        states[f"nnx_{name}"] = lambda m=make: nnx.state(m())
        states[f"nnx_pure_{name}"] = lambda m=make: nnx.state(m()).to_pure_dict()
    for dtype_name in DTYPE_NAMES:
        states[f"dtype_{dtype_name}"] = lambda d=dtype_name: {"x": jnp.asarray(random_array(d, (2, 3), "ck"))}
    return states


def _names(cases: Cases) -> None:
    function = f"{M}.validate_checkpointable_name"
    fixed: dict[str, Any] = {
        "plain": "model",
        "dotted": "model.v1",
        "unicode": "modèle",
        "nfd": unicodedata.normalize("NFD", "modèle"),
        "empty": "",
        "dot": ".",
        "dotdot": "..",
        "slash": "a/b",
        "backslash": "a\\b",
        "colon": "a:b",
        "star": "a*",
        "question": "a?",
        "quote": 'a"',
        "pipe": "a|b",
        "less": "a<b",
        "newline": "a\nb",
        "tab": "a\tb",
        "nul": "a\x00b",
        "surrogate": "a\ud800",
        "trailing_space": "model ",
        "trailing_dot": "model.",
        "leading_space": " model",
        "long_255": "a" * 255,
        "long_256": "a" * 256,
        "long_multibyte": "é" * 128,
        "con": "CON",
        "con_ext": "con.txt",
        "com1": "com1",
        "com0": "com0",
        "lpt9": "LPT9.log",
        "nul_name": "NUL",
        "clock": "clock$",
        "metadata": "_CHECKPOINT_METADATA",
        "metrics": "metrics",
        "orbax": "orbax.checkpoint",
        "auto": "AUTO",
        "tmp_suffix": "x.orbax-checkpoint-tmp",
        "none": None,
        "int": 1,
        "bytes": b"model",
        "path": Path("model"),
        "list": ["model"],
    }
    for name, value in fixed.items():
        cases.add(function, f"fixed-{name}", lambda _, v=value: tc.validate_checkpointable_name(v))
    alphabet = 'abcXYZ019_-.~ é漢<>:"/\\|?*\x01\x7f'
    r = rng(function)
    for _ in range(scaled(80)):
        length = r.choice([1, 2, 3, 5, 8])
        name = "".join(r.choice(alphabet) for _ in range(length))
        cases.add(function, "random", lambda _, n=name: tc.validate_checkpointable_name(n))


def _training_names(cases: Cases) -> None:
    function = f"{M}.TrainingCheckpointNames"

    def facts(**keywords: Any) -> Any:
        names = tc.TrainingCheckpointNames(**keywords)
        return {
            "value": names,
            "repr": repr(names),
            "equal": names == tc.TrainingCheckpointNames(**keywords),
            "hash_equal": hash(names) == hash(tc.TrainingCheckpointNames(**keywords)),
            "fields": [field.name for field in dataclasses.fields(names)],
            "assign": attempt(setattr, names, "model", "other"),
            "has_dict": hasattr(names, "__dict__"),
        }

    variants: dict[str, Any] = {
        "defaults": {},
        "custom": {"model": "net", "optimizer": "opt", "rng": "keys", "auxiliary": "aux2", "iterator": "data"},
        "duplicate": {"model": "state", "optimizer": "state"},
        "casefold_duplicate": {"model": "State", "optimizer": "state"},
        "nfc_duplicate": {"model": "é", "optimizer": unicodedata.normalize("NFD", "é")},
        "reserved": {"model": "metrics"},
        "invalid": {"rng": "a/b"},
        "non_string": {"iterator": 1},
        "none": {"auxiliary": None},
        "positional_like": {"model": "model"},
    }
    for name, keywords in variants.items():
        cases.add(function, name, lambda _, k=keywords: facts(**k))


def _abstract(cases: Cases) -> None:
    function = f"{M}.abstract_restore_target"
    for name, make in _states().items():
        cases.add(function, f"state-{name}", lambda _, m=make: tc.abstract_restore_target(m()))
    others: dict[str, Any] = {
        "none": lambda: None,
        "int": lambda: 3,
        "array": lambda: jnp.ones(2),
        "numpy": lambda: np.ones(2),
        "empty_list": list,
        "empty_tuple": lambda: (),
        "shape_dtype_struct": lambda: {"w": jax.ShapeDtypeStruct((2,), jnp.float32)},
        "eval_shape": lambda: jax.eval_shape(lambda: {"w": jnp.zeros((3, 2)), "k": jax.random.key(0)}),
        "nnx_module": lambda: nnx.Linear(2, 2, rngs=nnx.Rngs(0)),
        "abstract_nnx": lambda: nnx.state(nnx.eval_shape(lambda: nnx.Linear(2, 3, rngs=nnx.Rngs(0)))),
        "numpy_scalar": lambda: {"s": np.int64(4)},
        "zero_d_numpy": lambda: {"s": np.asarray(4.0)},
        "big_endian": lambda: {"b": np.arange(3).astype(">i4")},
        "object_array": lambda: {"o": np.asarray([1, "a"], dtype=object)},
        "iterator": lambda: iter(grain.MapDataset.range(3).to_iter_dataset()),
    }
    for name, make in others.items():
        cases.add(function, f"other-{name}", lambda _, m=make: tc.abstract_restore_target(m()))


#: States whose save fails under 0.2 (Orbax refuses an empty tree, a zero-size array and a str leaf).
#: A failed save leaves Orbax signals pending there, and the next save waits five minutes for them,
#: so these cases run after every other (see ``build``).
FAILING_IN_02 = ("optax_empty_state", "zero_size", "mixed_leaves")

#: The states saved with save_checkpointables, each with the targets it is loaded with.
SAVED = (
    "params",
    "numpy",
    "scalars",
    "key",
    "sharded",
    "nested_lists",
    "namedtuple",
    "optax_adam",
    "optax_chain_clip_adam",
    "optax_masked_adam",
    "optax_empty_state",
    "nnx_linear",
    "nnx_block",
    "dtype_bfloat16",
    "dtype_int4",
    "dtype_float8_e4m3fn",
    "dtype_uint64",
    "dtype_complex64",
    "mixed_leaves",
    "zero_size",
)


def _targets(state: Any, how: str) -> Any:
    if how == "abstract":
        return tc.abstract_restore_target(state)
    if how == "concrete":
        return state
    if how == "shape_dtype":
        return jax.tree.map(
            lambda leaf: (
                jax.ShapeDtypeStruct(leaf.shape, leaf.dtype) if isinstance(leaf, jax.Array | np.ndarray) else leaf
            ),
            state,
        )
    raise AssertionError(how)


def _save_load(cases: Cases, last: list[Any]) -> None:
    save = f"{M}.save_checkpointables"
    load = f"{M}.load_checkpointables"
    states = _states()
    r = rng(save)
    for name in SAVED:
        how = r.choice(["abstract", "abstract", "concrete", "shape_dtype"])

        def saved(folder: Path, n: str = name) -> Any:
            response = tc.save_checkpointables(folder / "ckpt", {"state": states[n](), "meta": {"name": n, "step": 7}})
            return {"type": type(response), "result": response.result()}

        def loaded(folder: Path, n: str = name, h: str = how) -> Any:
            return tc.load_checkpointables(
                folder / "ckpt", {"state": _targets(states[n](), h), "meta": {"name": "", "step": 0}}
            )

        if name in FAILING_IN_02:
            last.append(
                lambda n=name, s=saved, lo=loaded: cases.add(
                    save, f"state-{n}", s, files="readback", read=lo, also=(load,)
                )
            )
        else:
            cases.add(save, f"state-{name}", saved, files="readback", read=loaded, also=(load,))
    refused: dict[str, Any] = {
        "empty": lambda folder: tc.save_checkpointables(folder / "ckpt", {}),
        "not_mapping": lambda folder: tc.save_checkpointables(folder / "ckpt", [("a", 1)]),
        "bad_name": lambda folder: tc.save_checkpointables(folder / "ckpt", {"a/b": {"x": 1}}),
        "reserved_name": lambda folder: tc.save_checkpointables(folder / "ckpt", {"metrics": {"x": 1}}),
        "non_string_name": lambda folder: tc.save_checkpointables(folder / "ckpt", {1: {"x": 1}}),
        "casefold_names": lambda folder: tc.save_checkpointables(folder / "ckpt", {"A": {"x": 1}, "a": {"x": 2}}),
        "tmp_suffix": lambda folder: tc.save_checkpointables(folder / "x.orbax-checkpoint-tmp-1", {"a": {"x": 1}}),
        "existing": lambda folder: (
            (folder / "ckpt").mkdir() or tc.save_checkpointables(folder / "ckpt", {"a": {"x": 1}}).result()
        ),
        "existing_file": lambda folder: (
            (folder / "ckpt").write_bytes(b"x") or tc.save_checkpointables(folder / "ckpt", {"a": {"x": 1}}).result()
        ),
        "none_value": lambda folder: tc.save_checkpointables(folder / "ckpt", {"a": None}).result(),
        "int_path": lambda folder: tc.save_checkpointables(3, {"a": {"x": 1}}),
        "str_path": lambda folder: tc.save_checkpointables(str(folder / "ckpt"), {"a": {"x": 1}}).result(),
        "missing_parent": lambda folder: tc.save_checkpointables(folder / "no" / "ckpt", {"a": {"x": 1}}).result(),
        "scalar_value": lambda folder: tc.save_checkpointables(folder / "ckpt", {"a": 3}).result(),
        "array_value": lambda folder: tc.save_checkpointables(folder / "ckpt", {"a": jnp.ones(2)}).result(),
    }
    for name, call in refused.items():
        cases.add(save, f"refused-{name}", call)

    def with_saved(folder: Path, targets: Any) -> Any:
        tc.save_checkpointables(folder / "ckpt", {"a": {"x": jnp.ones(2)}, "b": {"y": 1}}).result()
        return tc.load_checkpointables(folder / "ckpt", targets)

    loads: dict[str, Any] = {
        "subset": {"a": {"x": jax.ShapeDtypeStruct((2,), jnp.float32)}},
        "empty": {},
        "missing_name": {"c": {"x": 1}},
        "none_target": {"a": None},
        "wrong_shape": {"a": {"x": jax.ShapeDtypeStruct((3,), jnp.float32)}},
        "wrong_dtype": {"a": {"x": jax.ShapeDtypeStruct((2,), jnp.int32)}},
        "wrong_structure": {"a": {"z": jax.ShapeDtypeStruct((2,), jnp.float32)}},
        "numpy_target": {"a": {"x": np.zeros(2, np.float32)}},
        "not_mapping": [("a", {})],
    }
    for name, targets in loads.items():
        cases.add(load, f"targets-{name}", lambda folder, t=targets: with_saved(folder, t))
    cases.add(load, "missing-folder", lambda folder: tc.load_checkpointables(folder / "nothing", {"a": {"x": 1}}))
    cases.add(
        load,
        "file-path",
        lambda folder: (folder / "f").write_bytes(b"x") or tc.load_checkpointables(folder / "f", {"a": {"x": 1}}),
    )


def _iterator(count: int = 10, advance: int = 3) -> Any:
    iterator = iter(grain.MapDataset.range(count).map(lambda value: value * 2).to_iter_dataset())
    for _ in range(advance):
        next(iterator)
    return iterator


def _training(cases: Cases, last: list[Any]) -> None:
    save = f"{M}.save_training_checkpoint"
    load = f"{M}.load_training_checkpoint"
    optimizer_states = dict(optax_states())
    variants: dict[str, Any] = {
        "adam": {"optimizer": "adam", "names": None, "step": 3},
        "sgd_custom_names": {
            "optimizer": "sgd_momentum",
            "names": {"model": "net", "optimizer": "opt", "rng": "keys", "auxiliary": "extra", "iterator": "data"},
            "step": 0,
        },
        "masked_big_step": {"optimizer": "masked_adam", "names": None, "step": 2**40},
        "empty_state": {"optimizer": "empty_state", "names": None, "step": 1},
    }

    def model() -> Any:
        return nnx.state(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))

    def names_of(spec: Any) -> Any:
        return None if spec is None else tc.TrainingCheckpointNames(**spec)

    for name, spec in variants.items():

        def saved(folder: Path, s: Any = spec) -> Any:
            response = tc.save_training_checkpoint(
                folder / "ckpt",
                s["step"],
                model(),
                optimizer_states[s["optimizer"]],
                jax.random.key(11),
                {"epoch": 2, "history": [0.5, 0.25]},
                _iterator(),
                names=names_of(s["names"]),
            )
            return response.result()

        def loaded(folder: Path, s: Any = spec) -> Any:
            restored = tc.load_training_checkpoint(
                folder / "ckpt",
                tc.abstract_restore_target(model()),
                tc.abstract_restore_target(optimizer_states[s["optimizer"]]),
                jax.random.key(0),
                {"epoch": 0, "history": [0.0, 0.0]},
                _iterator(advance=0),
                names=names_of(s["names"]),
            )
            return {"checkpoint": restored, "next": [next(restored.iterator) for _ in range(2)]}

        if spec["optimizer"] == "empty_state":
            last.append(
                lambda n=name, s=saved, lo=loaded: cases.add(save, n, s, files="readback", read=lo, also=(load,))
            )
        else:
            cases.add(save, name, saved, files="readback", read=loaded, also=(load,))
    refusals: dict[str, Any] = {
        "step_negative": {"step": -1},
        "step_bool": {"step": True},
        "step_numpy": {"step": np.int64(3)},
        "step_float": {"step": 3.0},
        "iterator_list": {"iterator": [1, 2]},
        "iterator_dataset": {"iterator": grain.MapDataset.range(3).to_iter_dataset()},
        "names_dict": {"names": {"model": "m"}},
        "names_tuple": {"names": ("a", "b", "c", "d", "e")},
    }

    def save_with(folder: Path, overrides: dict[str, Any]) -> Any:
        arguments = {"step": 1, "iterator": _iterator(), "names": None, **overrides}
        return tc.save_training_checkpoint(
            folder / "ckpt",
            arguments["step"],
            model(),
            optimizer_states["sgd"],
            jax.random.key(1),
            {},
            arguments["iterator"],
            names=arguments["names"],
        ).result()

    for name, overrides in refusals.items():
        cases.add(save, f"refused-{name}", lambda folder, o=overrides: save_with(folder, o))

    def load_with(folder: Path, **overrides: Any) -> Any:
        save_with(folder, {})
        arguments = {
            "model": tc.abstract_restore_target(model()),
            "optimizer": tc.abstract_restore_target(optimizer_states["sgd"]),
            "rng": jax.random.key(0),
            "auxiliary": {},
            "iterator": _iterator(advance=0),
            "names": None,
            **overrides,
        }
        return tc.load_training_checkpoint(
            folder / "ckpt",
            arguments["model"],
            arguments["optimizer"],
            arguments["rng"],
            arguments["auxiliary"],
            arguments["iterator"],
            names=arguments["names"],
        )

    loads: dict[str, Any] = {
        "plain": {},
        "iterator_list": {"iterator": [1]},
        "names_other": {"names": tc.TrainingCheckpointNames(model="net")},
        "concrete_targets": {"model": model(), "optimizer": optimizer_states["sgd"]},
    }
    for name, overrides in loads.items():
        cases.add(load, name, lambda folder, o=overrides: load_with(folder, **o))
    cases.add(
        load,
        "missing-folder",
        lambda folder: tc.load_training_checkpoint(folder / "none", {}, {}, None, {}, _iterator()),
    )
    # Under 0.2 a refused training restore leaves an Orbax signal pending, and the next save waits
    # five minutes for it: this case runs last (see build).
    last.append(
        lambda: cases.add(
            load,
            "wrong_model_target",
            lambda folder: load_with(folder, model={"kernel": jax.ShapeDtypeStruct((5,), jnp.float32)}),
        )
    )

    def construct(**overrides: Any) -> Any:
        arguments = {
            "step": 1,
            "model": {},
            "optimizer": {},
            "rng": None,
            "auxiliary": {},
            "iterator": _iterator(),
            **overrides,
        }
        value = tc.TrainingCheckpoint(**arguments)
        return {
            "value": value,
            "fields": [field.name for field in dataclasses.fields(value)],
            "assign": attempt(setattr, value, "step", 2),
        }

    constructions: dict[str, Any] = {
        "plain": {},
        "step_negative": {"step": -1},
        "step_bool": {"step": False},
        "step_numpy": {"step": np.int32(2)},
        "iterator_none": {"iterator": None},
        "iterator_python": {"iterator": iter([1, 2])},
        "step_big": {"step": 2**63},
        "step_float": {"step": 1.0},
    }
    for name, overrides in constructions.items():
        cases.add(f"{M}.TrainingCheckpoint", name, lambda _, o=overrides: construct(**o))


def build(cases: Cases) -> None:
    """Every case of ``tinax.checkpointing``."""
    _names(cases)
    _training_names(cases)
    _abstract(cases)
    last: list[Any] = []
    _save_load(cases, last)
    _training(cases, last)
    for add in last:
        add()
