"""Differential cases of ``tinax.weights``: files 0.3 must write byte for byte as 0.2, and what both read."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from diff_common import DTYPE_NAMES, SHAPES, Cases, nnx_modules, optax_states, random_array, rng, scaled, size_scalars
from diff_describe import attempt
from flax import nnx

import tinax.weights as tw

M = "tinax.weights"
BIG = 1 << 30
META = 1 << 16


def _read_safetensors(folder: Path, name: str = "w.safetensors") -> Any:
    path = folder / name
    return {
        "info": attempt(tw.inspect_safetensors, path, max_metadata_bytes=META),
        "loaded": attempt(tw.load_safetensors, path, max_bytes=BIG, max_metadata_bytes=META),
    }


def _tensors(r: Any, salt: object) -> dict[str, Any]:
    tensors = {}
    for index in range(r.choice([1, 2, 3, 5])):
        dtype_name = r.choice(
            [
                "bool",
                "uint8",
                "int8",
                "int16",
                "uint16",
                "int32",
                "uint32",
                "int64",
                "uint64",
                "float16",
                "bfloat16",
                "float32",
                "float64",
                "complex64",
            ]
        )
        shape = r.choice(SHAPES)
        name = r.choice(["w", "layer.0.weight", "b", "embed/tokens", "é", "x" * 40]) + f".{index}"
        tensors[name] = random_array(dtype_name, shape, "st", salt, index)
    return tensors


def _safetensors(cases: Cases) -> None:
    save = f"{M}.save_safetensors"
    r = rng(save)
    for index in range(scaled(24)):
        tensors = _tensors(r, index)
        # Two or more metadata entries are written in an order 0.2's writer took from a hash map
        # (it changes between processes): those files are compared by what both read back.
        metadata = r.choice([None, {}, {"format": "pt"}, {"b": "2", "a": "1", "ü": "ß"}])
        cases.add(
            save,
            "random" if metadata is None or len(metadata) < 2 else "random-metadata",
            lambda folder, t=tensors, m=metadata: tw.save_safetensors(
                folder / "w.safetensors", t, overwrite=False, metadata=m, max_metadata_bytes=META
            ),
            files="bytes" if metadata is None or len(metadata) < 2 else "readback",
            read=_read_safetensors,
            also=(
                f"{M}.inspect_safetensors",
                f"{M}.load_safetensors",
                f"{M}.SafetensorsInfo",
                f"{M}.LoadedSafetensors",
                f"{M}.TensorInfo",
            ),
        )
    for dtype_name in DTYPE_NAMES:
        cases.add(
            save,
            f"dtype-{dtype_name}",
            lambda folder, d=dtype_name: tw.save_safetensors(
                folder / "w.safetensors", {"t": random_array(d, (2, 3), "dt")}, overwrite=False
            ),
            files="bytes",
            read=_read_safetensors,
        )
    special: dict[str, Any] = {
        "empty_mapping": dict,
        "non_contiguous": lambda: {"t": np.arange(12.0).reshape(3, 4).T},
        "fortran": lambda: {"t": np.asfortranarray(np.arange(6.0).reshape(2, 3))},
        "big_endian": lambda: {"t": np.arange(3).astype(">i4")},
        "readonly": lambda: {"t": _readonly(np.arange(3.0))},
        "jax_array": lambda: {"t": jnp.ones(2)},
        "list_value": lambda: {"t": [1.0, 2.0]},
        "scalar_value": lambda: {"t": np.float32(1)},
        "object": lambda: {"t": np.asarray([1, "a"], dtype=object)},
        "masked_no_mask": lambda: {"t": np.ma.masked_array(np.arange(3.0))},
        "masked_with_mask": lambda: {"t": np.ma.masked_array(np.arange(3.0), mask=[0, 1, 0])},
        "metadata_name": lambda: {"__metadata__": np.ones(1)},
        "empty_name": lambda: {"": np.ones(1)},
        "int_name": lambda: {1: np.ones(1)},
        "many_names_unsorted": lambda: {name: np.full(1, index, np.int8) for index, name in enumerate("zyxabc")},
        "list_of_pairs": lambda: [("t", np.ones(1))],
        "none": lambda: None,
    }
    for name, make in special.items():
        cases.add(
            save,
            f"tensors-{name}",
            lambda folder, m=make: tw.save_safetensors(folder / "w.safetensors", m(), overwrite=False),
            files="bytes",
            read=_read_safetensors,
        )
    metadatas: dict[str, Any] = {
        "too_big_default_budget": ({"a": "b"}, 0),
        "exact_budget": ({"a": "b"}, 9),
        "one_short": ({"a": "b"}, 8),
        "non_string_value": ({"a": 1}, META),
        "non_string_key": ({1: "a"}, META),
        "list": ([("a", "b")], META),
        "budget_negative": ({}, -1),
        "budget_bool": ({}, True),
        "budget_numpy": ({"a": "b"}, np.int64(100)),
        "budget_float": ({}, 1.0),
        "unicode": ({"ключ": "значение"}, META),
        "empty_strings": ({"": ""}, META),
    }
    for name, (metadata, budget) in metadatas.items():
        cases.add(
            save,
            f"metadata-{name}",
            lambda folder, m=metadata, b=budget: tw.save_safetensors(
                folder / "w.safetensors",
                {"t": np.ones(2, np.float32)},
                overwrite=False,
                metadata=m,
                max_metadata_bytes=b,
            ),
            files="bytes",
            read=_read_safetensors,
        )
    _destinations(
        cases, save, lambda path, overwrite: tw.save_safetensors(path, {"t": np.ones(2)}, overwrite=overwrite)
    )


def _readonly(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _destinations(cases: Cases, function: str, write: Any) -> None:
    """Where users save: str and Path, existing files with and without overwrite, folders, missing parents."""

    def existing(folder: Path, overwrite: Any) -> Any:
        (folder / "out").write_bytes(b"old")
        result = attempt(write, folder / "out", overwrite)
        return {"result": result, "old_kept": (folder / "out").read_bytes() == b"old"}

    def symlink(folder: Path) -> Any:
        (folder / "target").write_bytes(b"old")
        os.symlink(folder / "target", folder / "out")
        result = attempt(write, folder / "out", True)
        return {"result": result, "target": (folder / "target").read_bytes() == b"old"}

    variants: dict[str, Any] = {
        "str": lambda folder: write(str(folder / "out"), False),
        "pathlike": lambda folder: write(folder / "out", False),
        "existing_no_overwrite": lambda folder: existing(folder, False),
        "existing_overwrite": lambda folder: existing(folder, True),
        "overwrite_none": lambda folder: write(folder / "out", None),
        "overwrite_int": lambda folder: write(folder / "out", 1),
        "folder": lambda folder: write(folder, True),
        "missing_parent": lambda folder: write(folder / "missing" / "out", False),
        "parent_is_file": lambda folder: (folder / "file").write_bytes(b"x") and write(folder / "file" / "out", False),
        "symlink": symlink,
        "bytes_path": lambda folder: write(os.fsencode(folder / "out"), False),
        "int_path": lambda folder: write(3, False),
        "empty_path": lambda folder: write("", False),
    }
    for name, call in variants.items():
        cases.add(function, f"path-{name}", call, files="bytes")


def _header_file(folder: Path, header: dict[str, Any], payload: bytes) -> Path:
    encoded = json.dumps(header).encode("utf-8")
    path = folder / "crafted.safetensors"
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + payload)
    return path


def _reading(cases: Cases) -> None:
    inspect = f"{M}.inspect_safetensors"
    load = f"{M}.load_safetensors"
    crafted: dict[str, Any] = {
        "f8_e5m2": ({"t": {"dtype": "F8_E5M2", "shape": [2], "data_offsets": [0, 2]}}, b"\x3c\x40"),
        "f8_e4m3": ({"t": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}}, b"\x38\x40"),
        "f4": ({"t": {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}}, b"\x21"),
        "f4_odd": ({"t": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}, b"\x21\x03"),
        "unknown_dtype": ({"t": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}}, b"\x00"),
        "offsets_past_end": ({"t": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}, b"\x00"),
        "shape_mismatch": ({"t": {"dtype": "U8", "shape": [3], "data_offsets": [0, 4]}}, b"\x00" * 4),
        "metadata": (
            {"__metadata__": {"z": "1", "a": "2"}, "t": {"dtype": "I8", "shape": [], "data_offsets": [0, 1]}},
            b"\x05",
        ),
        "metadata_non_string": (
            {"__metadata__": {"a": 1}, "t": {"dtype": "I8", "shape": [], "data_offsets": [0, 1]}},
            b"\x05",
        ),
        "unsorted_offsets": (
            {
                "b": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]},
                "a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
            },
            b"\x01\x02",
        ),
        "empty_header": ({}, b""),
        "negative_shape": ({"t": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 0]}}, b""),
    }
    for name, (header, payload) in crafted.items():
        cases.add(
            inspect,
            f"crafted-{name}",
            lambda folder, h=header, p=payload: tw.inspect_safetensors(
                _header_file(folder, h, p), max_metadata_bytes=META
            ),
        )
        cases.add(
            load,
            f"crafted-{name}",
            lambda folder, h=header, p=payload: tw.load_safetensors(
                _header_file(folder, h, p), max_bytes=BIG, max_metadata_bytes=META
            ),
        )

    def with_file(folder: Path, **keywords: Any) -> Any:
        path = folder / "w.safetensors"
        tw.save_safetensors(
            path,
            {"a": np.arange(4, dtype=np.float32), "b": np.ones((2, 2), np.int8), "c": np.zeros(0, np.uint8)},
            overwrite=False,
            metadata={"k": "v"},
            max_metadata_bytes=META,
        )
        return tw.load_safetensors(path, **keywords)

    loads: dict[str, Any] = {
        "names_list": {"names": ["b"], "max_bytes": BIG, "max_metadata_bytes": META},
        "names_tuple_order": {"names": ("b", "a"), "max_bytes": BIG, "max_metadata_bytes": META},
        "names_generator": {"names": (name for name in ["a"]), "max_bytes": BIG, "max_metadata_bytes": META},
        "names_empty": {"names": [], "max_bytes": BIG, "max_metadata_bytes": META},
        "names_string": {"names": "a", "max_bytes": BIG, "max_metadata_bytes": META},
        "names_duplicate": {"names": ["a", "a"], "max_bytes": BIG, "max_metadata_bytes": META},
        "names_missing": {"names": ["z"], "max_bytes": BIG, "max_metadata_bytes": META},
        "names_int": {"names": [1], "max_bytes": BIG, "max_metadata_bytes": META},
        "names_set": {"names": {"a"}, "max_bytes": BIG, "max_metadata_bytes": META},
        "max_bytes_exact": {"max_bytes": 20, "max_metadata_bytes": META},
        "max_bytes_short": {"max_bytes": 19, "max_metadata_bytes": META},
        "max_bytes_selected": {"names": ["b"], "max_bytes": 4, "max_metadata_bytes": META},
        "metadata_refused": {"max_bytes": BIG},
        "metadata_exact": {"max_bytes": BIG, "max_metadata_bytes": 9},
    }
    for name, value in size_scalars():
        loads[f"max_bytes-{name}"] = {"max_bytes": value, "max_metadata_bytes": META}
        loads[f"max_metadata_bytes-{name}"] = {"max_bytes": BIG, "max_metadata_bytes": value}
    for name, keywords in loads.items():
        cases.add(load, name, lambda folder, k=keywords: with_file(folder, **k))
    paths: dict[str, Any] = {
        "missing": lambda folder: folder / "missing.safetensors",
        "folder": lambda folder: folder,
        "empty_file": lambda folder: (folder / "e").write_bytes(b"") and folder / "e",
        "garbage": lambda folder: (folder / "g").write_bytes(b"\xff" * 16) and folder / "g",
        "huge_header": lambda folder: (folder / "h").write_bytes(struct.pack("<Q", 1 << 40)) and folder / "h",
        "int": lambda folder: 3,
        "none": lambda folder: None,
    }
    for name, make in paths.items():
        cases.add(inspect, f"path-{name}", lambda folder, m=make: tw.inspect_safetensors(m(folder)))
        cases.add(load, f"path-{name}", lambda folder, m=make: tw.load_safetensors(m(folder), max_bytes=BIG))


def _msgpack_states() -> dict[str, Any]:
    states: dict[str, Any] = {
        "numpy": lambda: {"w": random_array("float32", (2, 3), "mp"), "b": np.zeros(3, np.int64)},
        "jax": lambda: {"w": jnp.arange(4.0), "k": jnp.ones((2,), jnp.bfloat16)},
        "scalars": lambda: {"step": 3, "lr": 0.5, "flag": True, "name": "run", "none": None},
        "numpy_scalars": lambda: {"a": np.float32(1.5), "b": np.int8(-2), "c": np.bool_(True)},
        "nested": lambda: {"outer": {"inner": {"x": np.ones(1)}, "list": [np.zeros(2), 1], "tuple": (2, np.ones(1))}},
        "empty": dict,
        "empty_nested": lambda: {"a": {}, "b": [], "c": ()},
        "int_keys": lambda: {1: np.ones(1), 2: {3: "x"}},
        "complex": lambda: {"c": np.asarray([1 + 2j], np.complex64)},
        "bytes": lambda: {"b": b"\x00\xff"},
        "big_int": lambda: {"i": 2**70},
        "zero_d": lambda: {"z": np.asarray(2.0)},
        "key": lambda: {"key": jax.random.key(0)},
        "raw_key": lambda: {"key": jax.random.PRNGKey(0)},
    }
    for dtype_name in DTYPE_NAMES:
        states[f"dtype_{dtype_name}"] = lambda d=dtype_name: {"x": random_array(d, (3,), "mpd")}
    for name, state in optax_states():
        states[f"optax_{name}"] = lambda s=state: {"opt": s}
    for name, make in nnx_modules()[:3]:
        states[f"nnx_pure_{name}"] = lambda m=make: nnx.state(m()).to_pure_dict()
    return states


def _msgpack(cases: Cases) -> None:
    save = f"{M}.save_msgpack"
    load = f"{M}.load_msgpack"
    states = _msgpack_states()
    for name, make in states.items():
        cases.add(
            save,
            f"state-{name}",
            lambda folder, m=make: tw.save_msgpack(folder / "s.msgpack", m(), overwrite=False),
            files="bytes",
            read=lambda folder, m=make: tw.load_msgpack(folder / "s.msgpack", m(), max_bytes=BIG),
            also=(load,),
        )
    refused: dict[str, Any] = {
        "list_state": lambda: [np.ones(1)],
        "array_state": lambda: np.ones(2),
        "none_state": lambda: None,
        "object_leaf": lambda: {"o": object()},
        "masked": lambda: {"m": np.ma.masked_array([1.0, 2.0], mask=[0, 1])},
        "nnx_state": lambda: nnx.state(nnx.Linear(1, 1, rngs=nnx.Rngs(0))),
    }
    for name, make in refused.items():
        cases.add(
            save,
            f"refused-{name}",
            lambda folder, m=make: tw.save_msgpack(folder / "s.msgpack", m(), overwrite=False),
            files="bytes",
        )
    _destinations(cases, save, lambda path, overwrite: tw.save_msgpack(path, {"a": np.ones(1)}, overwrite=overwrite))

    def saved_then(folder: Path, target: Any, **keywords: Any) -> Any:
        tw.save_msgpack(folder / "s.msgpack", {"a": np.arange(3.0), "b": {"c": 1}}, overwrite=False)
        return tw.load_msgpack(folder / "s.msgpack", target, **{"max_bytes": BIG, **keywords})

    targets: dict[str, Any] = {
        "same": {"a": np.zeros(3), "b": {"c": 0}},
        "jax_leaves": {"a": jnp.zeros(3), "b": {"c": 0}},
        "wrong_shape": {"a": np.zeros(4), "b": {"c": 0}},
        "wrong_dtype": {"a": np.zeros(3, np.int8), "b": {"c": 0}},
        "missing_key": {"a": np.zeros(3)},
        "extra_key": {"a": np.zeros(3), "b": {"c": 0}, "d": 1},
        "none_leaves": {"a": None, "b": None},
        "list_target": [np.zeros(3)],
        "empty": {},
        "shape_dtype_struct": {"a": jax.ShapeDtypeStruct((3,), jnp.float64), "b": {"c": 0}},
    }
    for name, target in targets.items():
        cases.add(load, f"target-{name}", lambda folder, t=target: saved_then(folder, t))

    # A leaf's kind may differ from the target's where flax restores it (a resumed TrainState's step).
    def kind_then(folder: Path, saved: Any, target: Any) -> Any:
        tw.save_msgpack(folder / "k.msgpack", {"v": saved}, overwrite=False)
        return tw.load_msgpack(folder / "k.msgpack", {"v": target}, max_bytes=BIG)

    kinds: dict[str, tuple[Any, Any]] = {
        "array_into_int": (np.asarray(3), 0),
        "int64_into_int": (np.int64(3), 0),
        "float32_into_float": (np.float32(1.5), 0.0),
        "int_into_array": (3, np.asarray(0)),
        "float_into_float32_array": (1.5, np.zeros((), np.float32)),
        "int_into_float": (3, 0.0),
        "float32_into_float64": (np.arange(2, dtype=np.float32), np.zeros(2)),
    }
    for name, (saved, target) in kinds.items():
        cases.add(load, f"leaf_kind-{name}", lambda folder, s=saved, t=target: kind_then(folder, s, t))
    for name, value in size_scalars():
        cases.add(
            load,
            f"max_bytes-{name}",
            lambda folder, v=value: saved_then(folder, {"a": np.zeros(3), "b": {"c": 0}}, max_bytes=v),
        )
    cases.add(load, "missing", lambda folder: tw.load_msgpack(folder / "none", {}, max_bytes=BIG))
    cases.add(load, "folder", lambda folder: tw.load_msgpack(folder, {}, max_bytes=BIG))
    cases.add(
        load,
        "garbage",
        lambda folder: (folder / "g").write_bytes(b"\xc1\xc1") and tw.load_msgpack(folder / "g", {}, max_bytes=BIG),
    )


def _models(cases: Cases) -> None:
    def info(shape: Any, dtype: Any) -> Any:
        value = tw.TensorInfo(shape, dtype)
        return {
            "value": value,
            "nbytes": attempt(lambda: value.nbytes),
            "assign": attempt(setattr, value, "dtype", "F32"),
        }

    infos: dict[str, Any] = {
        "f32": ((2, 3), "F32"),
        "scalar": ((), "BF16"),
        "empty": ((0, 4), "U8"),
        "f4_even": ((4,), "F4"),
        "f4_odd": ((3,), "F4"),
        "f8": ((2,), "F8_E4M3"),
        "unknown_dtype": ((1,), "F128"),
        "list_shape": ([2], "F32"),
        "negative": ((-1,), "F32"),
        "bool_dim": ((True,), "F32"),
        "numpy_dim": ((np.int64(2),), "F32"),
        "dtype_numpy": ((1,), np.float32),
        "dtype_lower": ((1,), "f32"),
    }
    for name, (shape, dtype) in infos.items():
        cases.add(f"{M}.TensorInfo", name, lambda _, s=shape, d=dtype: info(s, d))

    def safetensors_info(tensors: Any, metadata: Any) -> Any:
        value = tw.SafetensorsInfo(tensors, metadata)
        return {"value": value, "tensors_type": type(value.tensors), "metadata_type": type(value.metadata)}

    infos2: dict[str, Any] = {
        "plain": ({"b": tw.TensorInfo((1,), "F32"), "a": tw.TensorInfo((), "I8")}, {"z": "1", "a": "2"}),
        "empty": ({}, {}),
        "metadata_none": ({}, None),
        "not_info": ({"a": (1,)}, {}),
        "bad_name": ({"__metadata__": tw.TensorInfo((1,), "F32")}, {}),
        "metadata_int": ({}, {"a": 1}),
        "tensors_list": ([("a", tw.TensorInfo((1,), "F32"))], {}),
    }
    for name, (tensors, metadata) in infos2.items():
        cases.add(f"{M}.SafetensorsInfo", name, lambda _, t=tensors, m=metadata: safetensors_info(t, m))

    def loaded(tensors: Any) -> Any:
        header = tw.SafetensorsInfo({"a": tw.TensorInfo((2,), "F32"), "b": tw.TensorInfo((), "U8")}, {"k": "v"})
        value = tw.LoadedSafetensors(tensors, header)
        return {"value": value, "metadata": value.metadata, "tensors_type": type(value.tensors)}

    loadeds: dict[str, Any] = {
        "plain": {"a": np.zeros(2, np.float32)},
        "both": {"b": np.asarray(3, np.uint8), "a": np.zeros(2, np.float32)},
        "wrong_shape": {"a": np.zeros(3, np.float32)},
        "wrong_dtype": {"a": np.zeros(2, np.float64)},
        "absent": {"c": np.zeros(1)},
        "jax": {"a": jnp.zeros(2)},
        "empty": {},
    }
    for name, tensors in loadeds.items():
        cases.add(f"{M}.LoadedSafetensors", name, lambda _, t=tensors: loaded(t))

    def rule(**overrides: Any) -> Any:
        arguments = {
            "source_name": "in",
            "destination_name": "out",
            "transform": np.transpose,
            "expected_shape": (3, 2),
            "expected_dtype": np.float32,
            **overrides,
        }
        value = tw.TensorRule(**arguments)
        return {"value": value, "dtype": value.expected_dtype}

    rules: dict[str, Any] = {
        "plain": {},
        "dtype_string": {"expected_dtype": "float32"},
        "dtype_bfloat16": {"expected_dtype": ml_dtypes.bfloat16},
        "dtype_invalid": {"expected_dtype": "nope"},
        "dtype_none": {"expected_dtype": None},
        "shape_list": {"expected_shape": [3, 2]},
        "shape_numpy": {"expected_shape": (np.int64(3), 2)},
        "shape_negative": {"expected_shape": (-1,)},
        "transform_none": {"transform": None},
        "empty_source": {"source_name": ""},
        "int_destination": {"destination_name": 1},
    }
    for name, overrides in rules.items():
        cases.add(f"{M}.TensorRule", name, lambda _, o=overrides: rule(**o))

    def manifest(rule_list: Any, tensors: Any) -> Any:
        built = tw.TensorManifest(rule_list)
        return {"manifest": built, "applied": attempt(built.apply, tensors)}

    def rules_of(*names: tuple[str, str]) -> tuple[Any, ...]:
        return tuple(
            tw.TensorRule(source, destination, lambda a: a.astype(np.float32), (2,), np.float32)
            for source, destination in names
        )

    manifests: dict[str, Any] = {
        "plain": (lambda: rules_of(("a", "x"), ("b", "y")), {"a": np.ones(2), "b": np.zeros(2, np.int8)}),
        "missing_source": (lambda: rules_of(("a", "x")), {}),
        "extra_source": (lambda: rules_of(("a", "x")), {"a": np.ones(2), "z": np.ones(2)}),
        "duplicate_source": (lambda: rules_of(("a", "x"), ("a", "y")), {"a": np.ones(2)}),
        "destination_collision": (lambda: rules_of(("a", "x"), ("b", "x")), {"a": np.ones(2), "b": np.ones(2)}),
        "wrong_shape": (lambda: rules_of(("a", "x")), {"a": np.ones(3)}),
        "not_numpy": (lambda: rules_of(("a", "x")), {"a": [1.0, 2.0]}),
        "jax_source": (lambda: rules_of(("a", "x")), {"a": jnp.ones(2)}),
        "empty": (lambda: (), {}),
        "list_rules": (lambda: list(rules_of(("a", "x"))), {"a": np.ones(2)}),
        "not_rules": (lambda: ("a",), {}),
        "tensors_list": (lambda: rules_of(("a", "x")), [("a", np.ones(2))]),
        "bad_tensor_name": (lambda: rules_of(("a", "x")), {1: np.ones(2)}),
    }
    for name, (make_rules, tensors) in manifests.items():
        cases.add(
            f"{M}.TensorManifest",
            name,
            lambda _, m=make_rules, t=tensors: manifest(m(), t),
            also=(f"{M}.TensorManifest.apply",),
        )

    def wrong_dtype(_: Any) -> Any:
        built = tw.TensorManifest((tw.TensorRule("a", "x", lambda a: a, (2,), np.float32),))
        return built.apply({"a": np.ones(2, np.float64)})

    cases.add(f"{M}.TensorManifest", "transform-wrong-dtype", wrong_dtype)

    def returns_list(_: Any) -> Any:
        built = tw.TensorManifest((tw.TensorRule("a", "x", lambda a: list(a), (2,), np.float32),))
        return built.apply({"a": np.ones(2, np.float32)})

    cases.add(f"{M}.TensorManifest", "transform-returns-list", returns_list)


def build(cases: Cases) -> None:
    """Every case of ``tinax.weights``."""
    _safetensors(cases)
    _reading(cases)
    _msgpack(cases)
    _models(cases)
