"""tinax 0.3's ``tinax.weights`` against the files tinax 0.2 wrote (see ``generators/gen_weights.py``).

For each safetensors file 0.2 wrote, 0.3 must report the same header and
load the same arrays in the same order, and saving the same inputs must give
the same bytes (for metadata of several entries, up to the order of the
entries, which 0.2's writer left to a hash map). For each msgpack file, 0.3
must write the same bytes for the same state and restore what 0.2 restored.
For inputs 0.2 refused, 0.3's exception must be an instance of 0.2's class.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tinax.weights import inspect_safetensors, load_msgpack, load_safetensors, save_msgpack, save_safetensors


@pytest.fixture(scope="module")
def weights02(artifacts02: Path) -> Path:
    """The folder gen_weights.py wrote under tinax 0.2."""
    return artifacts02 / "weights"


@pytest.fixture(scope="module")
def cases(weights02: Path) -> dict[str, Any]:
    """What 0.2 was given and what it reported, per case."""
    return json.loads((weights02 / "cases.json").read_text())


@pytest.fixture(scope="module")
def inputs(weights02: Path) -> dict[str, np.ndarray[Any, Any]]:
    """The raw bytes of every input array."""
    with np.load(weights02 / "inputs.npz") as data:
        return {key: data[key] for key in data.files}


@pytest.fixture(scope="module")
def loaded02(weights02: Path) -> dict[str, np.ndarray[Any, Any]]:
    """The raw bytes of every array 0.2 loaded."""
    with np.load(weights02 / "loaded.npz") as data:
        return {key: data[key] for key in data.files}


def dtype_of(description: dict[str, str]) -> np.dtype[Any]:
    """The dtype the generator described."""
    name = description["name"]
    dtype = np.dtype(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, name) else np.dtype(name)
    order = description["byteorder"]
    return dtype.newbyteorder(order) if order in "<>" else dtype


def array_of(entry: dict[str, Any], raw: dict[str, np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
    """Rebuilds an array from its raw bytes and description."""
    return raw[entry["ref"]].view(dtype_of(entry["dtype"])).reshape(entry["shape"])


def assert_same_array(actual: np.ndarray[Any, Any], expected: np.ndarray[Any, Any]) -> None:
    """Same type, dtype, shape and bytes."""
    assert type(actual) is np.ndarray
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert actual.tobytes() == expected.tobytes()


def _generator() -> Any:
    # The case names come from the generator itself (its imports exist here
    # too), so parametrizing does not wait for the artifacts to be written.
    path = Path(__file__).parent / "generators" / "gen_weights.py"
    spec = importlib.util.spec_from_file_location("gen_weights", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()
METADATA_LIMIT = GENERATOR.METADATA_LIMIT
SAFETENSORS_CASES = list(GENERATOR.safetensors_cases())
MSGPACK_CASES = list(GENERATOR.msgpack_cases())


# --- safetensors -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SAFETENSORS_CASES)
def test_we_inspect_what_02_inspected(weights02: Path, cases: dict[str, Any], name: str) -> None:
    """Our header report of 0.2's file equals 0.2's: names, order, shapes, dtype strings, metadata."""
    expected = cases["safetensors"][name]["inspect"]
    info = inspect_safetensors(weights02 / "safetensors" / f"{name}.safetensors", max_metadata_bytes=METADATA_LIMIT)
    reported = [[tensor, list(entry.shape), entry.dtype, entry.nbytes] for tensor, entry in info.tensors.items()]
    assert reported == expected["tensors"]  # Same names, same order, same dtype strings.
    assert all(type(entry.dtype) is not str and isinstance(entry.dtype, str) for entry in info.tensors.values())
    assert dict(info.metadata) == expected["metadata"]
    assert info.total_bytes == expected["total_bytes"]


@pytest.mark.parametrize("name", SAFETENSORS_CASES)
def test_we_load_what_02_loaded(
    weights02: Path, cases: dict[str, Any], loaded02: dict[str, np.ndarray[Any, Any]], name: str
) -> None:
    """Our loads of 0.2's file return 0.2's arrays, in 0.2's order, all of them or a selection."""
    case = cases["safetensors"][name]
    path = weights02 / "safetensors" / f"{name}.safetensors"
    loaded = load_safetensors(path, max_bytes=case["inspect"]["total_bytes"], max_metadata_bytes=METADATA_LIMIT)
    assert list(loaded.tensors) == [tensor for tensor, _ in case["load"]]
    for tensor, entry in case["load"]:
        assert_same_array(loaded.tensors[tensor], array_of(entry, loaded02))
    assert dict(loaded.metadata) == case["load_metadata"]
    selected = case["load_selected"]
    some = load_safetensors(
        path, max_bytes=case["inspect"]["total_bytes"], names=selected["names"], max_metadata_bytes=METADATA_LIMIT
    )
    assert list(some.tensors) == selected["order"]
    for array, entry in zip(some.tensors.values(), selected["arrays"], strict=True):
        assert_same_array(array, array_of(entry, loaded02))


def split_file(data: bytes) -> tuple[bytes, dict[str, Any], bytes]:
    """The length field, the parsed header and the payload."""
    header_end = 8 + struct.unpack("<Q", data[:8])[0]
    return data[:8], json.loads(data[8:header_end]), data[header_end:]


@pytest.mark.parametrize("name", SAFETENSORS_CASES)
def test_we_write_the_bytes_02_wrote(
    weights02: Path, cases: dict[str, Any], inputs: dict[str, np.ndarray[Any, Any]], tmp_path: Path, name: str
) -> None:
    """Saving 0.2's inputs with ours gives 0.2's file."""
    case = cases["safetensors"][name]
    tensors = {tensor: array_of(entry, inputs) for tensor, entry in case["inputs"]}
    ours = tmp_path / "ours.safetensors"
    save_safetensors(ours, tensors, overwrite=False, metadata=case["metadata"], max_metadata_bytes=METADATA_LIMIT)
    theirs = (weights02 / "safetensors" / f"{name}.safetensors").read_bytes()
    if len(case["metadata"] or {}) > 1:
        # 0.2's writer orders metadata entries by a per-process hash; all else is fixed.
        assert len(ours.read_bytes()) == len(theirs)
        ours_length, ours_header, ours_payload = split_file(ours.read_bytes())
        assert (ours_length, ours_header, ours_payload) == split_file(theirs)
    else:
        assert ours.read_bytes() == theirs


# --- msgpack ---------------------------------------------------------------------------------------------------


def decode_tree(node: dict[str, Any], raw: dict[str, np.ndarray[Any, Any]]) -> Any:
    """Rebuilds a state tree from its JSON form."""
    kind = node["kind"]
    if kind == "dict":
        return {key: decode_tree(item, raw) for key, item in node["items"]}
    if kind == "array":
        return array_of(node, raw)
    if kind == "numpy_scalar":
        return array_of(node, raw)[()]
    if kind == "float":
        return float.fromhex(node["value"])
    if kind == "complex":
        return complex(float.fromhex(node["value"][0]), float.fromhex(node["value"][1]))
    if kind == "bytes":
        return bytes.fromhex(node["value"])
    return node["value"]  # int, bool, str, None


def assert_same_tree(actual: Any, expected: Any) -> None:
    """Same structure, key order, leaf types and bytes."""
    assert type(actual) is type(expected), (actual, expected)
    if isinstance(expected, dict):
        assert list(actual) == list(expected)
        for key in expected:
            assert_same_tree(actual[key], expected[key])
    elif isinstance(expected, np.ndarray):
        assert_same_array(actual, expected)
    elif isinstance(expected, np.generic):
        assert actual.dtype == expected.dtype
        assert actual.tobytes() == expected.tobytes()
    else:
        assert actual == expected


@pytest.mark.parametrize("name", MSGPACK_CASES)
def test_we_write_the_msgpack_bytes_02_wrote(
    weights02: Path, cases: dict[str, Any], inputs: dict[str, np.ndarray[Any, Any]], tmp_path: Path, name: str
) -> None:
    """Saving 0.2's state with ours gives 0.2's msgpack file."""
    state = decode_tree(cases["msgpack"][name]["state"], inputs)
    ours = tmp_path / "ours.msgpack"
    save_msgpack(ours, state, overwrite=False)
    assert ours.read_bytes() == (weights02 / "msgpack" / f"{name}.msgpack").read_bytes()


@pytest.mark.parametrize("name", MSGPACK_CASES)
def test_we_restore_what_02_restored(
    weights02: Path,
    cases: dict[str, Any],
    inputs: dict[str, np.ndarray[Any, Any]],
    loaded02: dict[str, np.ndarray[Any, Any]],
    name: str,
) -> None:
    """Loading 0.2's msgpack file with ours restores what 0.2 restored."""
    state = decode_tree(cases["msgpack"][name]["state"], inputs)
    path = weights02 / "msgpack" / f"{name}.msgpack"
    restored = load_msgpack(path, state, max_bytes=path.stat().st_size)
    assert_same_tree(restored, decode_tree(cases["msgpack"][name]["restored"], loaded02))


# --- refused inputs --------------------------------------------------------------------------------------------


def refused_calls(folder: Path, scratch: Path) -> dict[str, Callable[[], object]]:
    """The generator's refused calls, against the files 0.2 wrote (writes go to ``scratch``)."""
    x = {"x": np.ones(1, np.float32)}
    link = scratch / "link"
    link.symlink_to(scratch / "nowhere")
    return {
        "inspect_corrupt": lambda: inspect_safetensors(folder / "corrupt.safetensors"),
        "load_truncated": lambda: load_safetensors(folder / "truncated.safetensors", max_bytes=16),
        "inspect_gap": lambda: inspect_safetensors(folder / "gap.safetensors"),
        "inspect_metadata_default_limit": lambda: inspect_safetensors(folder / "with_metadata.safetensors"),
        "load_metadata_over_limit": lambda: load_safetensors(
            folder / "with_metadata.safetensors", max_bytes=4, max_metadata_bytes=8
        ),
        "save_metadata_default_limit": lambda: save_safetensors(
            scratch / "md", x, overwrite=False, metadata={"k": "v"}
        ),
        "load_unknown_name": lambda: load_safetensors(folder / "ok", max_bytes=4, names=["y"]),
        "load_over_budget": lambda: load_safetensors(
            folder / "with_metadata.safetensors", max_bytes=0, max_metadata_bytes=9
        ),
        "load_packed": lambda: load_safetensors(folder / "packed.safetensors", max_bytes=2),
        "inspect_directory": lambda: inspect_safetensors(scratch),
        "save_to_directory": lambda: save_safetensors(scratch, x, overwrite=True),
        "save_to_symlink": lambda: save_safetensors(link, x, overwrite=True),
        "save_existing": lambda: save_safetensors(folder / "with_metadata.safetensors", x, overwrite=False),
        "save_unsupported_dtype": lambda: save_safetensors(scratch / "u", {"x": np.array(["text"])}, overwrite=False),
        "save_surrogate_name": lambda: save_safetensors(scratch / "s", {"\ud800": np.ones(1)}, overwrite=False),
        "msgpack_save_to_symlink": lambda: save_msgpack(link, {"a": 1}, overwrite=True),
        "msgpack_save_to_directory": lambda: save_msgpack(scratch, {"a": 1}, overwrite=True),
        "msgpack_load_directory": lambda: load_msgpack(scratch, {"a": 0}, max_bytes=100),
        "msgpack_load_trailing": lambda: load_msgpack(folder / "trailing.msgpack", {"a": 0}, max_bytes=100),
        "msgpack_load_garbage": lambda: load_msgpack(folder / "garbage.msgpack", {"a": 0}, max_bytes=100),
    }


def test_refusals_are_instances_of_02s_exception_classes(
    weights02: Path, cases: dict[str, Any], tmp_path: Path
) -> None:
    """Every input 0.2 refused is refused by ours with an instance of 0.2's class."""
    calls = refused_calls(weights02 / "refused", tmp_path)
    assert set(calls) == set(cases["refused"])
    for name, recorded in cases["refused"].items():
        assert recorded is not None, f"{name}: 0.2 accepted it; the generator meant a refused input"
        module, _, qualname = recorded.partition(":")
        expected = getattr(importlib.import_module(module), qualname)
        with pytest.raises(expected):
            calls[name]()
        assert not (tmp_path / "nowhere").exists()
