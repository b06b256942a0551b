"""Records the files tinax 0.2's ``tinax.weights`` writes and what it reads back from them.

Runs under the real tinax 0.2 (see ``tests-compat/conftest.py``). Its only
argument is the output folder, which receives:

- ``safetensors/<case>.safetensors`` and ``msgpack/<case>.msgpack``: the files
  0.2 wrote for each case;
- ``inputs.npz``: the raw bytes (as uint8) of every input array, under
  ``<format>/<case>/<index>``, so the same arrays can be saved again;
- ``loaded.npz``: the raw bytes of every array 0.2 loaded back, under
  ``<format>/<case>/<index>``;
- ``cases.json``: per case, the inputs (names, shapes, dtypes, metadata, the
  msgpack state's structure), what ``inspect_safetensors`` reported, what
  the loads returned (in order), and, for a few refused inputs, the class of
  the exception 0.2 raised.

``test_weights_artifacts.py`` requires tinax 0.3 to report and load the same
things from these files, to write the same bytes for the same inputs, and to
raise exceptions that are instances of 0.2's classes.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from tinax.weights import inspect_safetensors, load_msgpack, load_safetensors, save_msgpack, save_safetensors

#: Generous enough for every metadata below.
METADATA_LIMIT = 4096


def describe_dtype(dtype: np.dtype[Any]) -> dict[str, str]:
    """The dtype as JSON: its NumPy name (ml_dtypes names included) and byte order."""
    return {"name": dtype.name, "byteorder": dtype.byteorder}


class Arrays:
    """Collects arrays as raw bytes under numbered keys, with their shape and dtype."""

    def __init__(self) -> None:
        self.raw: dict[str, np.ndarray[Any, Any]] = {}

    def add(self, prefix: str, array: np.ndarray[Any, Any]) -> dict[str, Any]:
        """Stores the C-order bytes of ``array``; returns where, with its shape and dtype."""
        key = f"{prefix}/{len(self.raw)}"
        self.raw[key] = np.frombuffer(np.ascontiguousarray(array).tobytes(), dtype=np.uint8)
        return {"ref": key, "shape": list(array.shape), "dtype": describe_dtype(array.dtype)}


def random_array(dtype: Any, shape: tuple[int, ...], seed: int) -> np.ndarray[Any, Any]:
    """Seeded values of ``dtype``: finite floats, integers over the whole range."""
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    count = int(np.prod(shape))
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.kind in "fcV":  # Finite values: NaN payloads are not what this test is about.
        values = rng.standard_normal(count) * 100
        if dtype.kind == "c":
            values = values + 1j * rng.standard_normal(count)
        return values.astype(dtype).reshape(shape)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


def safetensors_cases() -> dict[str, dict[str, Any]]:
    """Name to the tensors and metadata each safetensors file is saved from."""
    all_dtypes = [np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64,
                  np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.complex64]  # fmt: skip
    shapes = [(), (0,), (5,), (2, 3), (2, 0, 4), (3, 1, 2, 2)]
    cases: dict[str, dict[str, Any]] = {
        "basic": {
            "tensors": {"matrix": np.arange(6, dtype=np.float32).reshape(2, 3), "ids": np.array([2, 5], np.int32)},
            "metadata": None,
        },
        "all_dtypes": {
            "tensors": {
                f"t_{np.dtype(dtype).name}": random_array(dtype, shapes[index % len(shapes)], index)
                for index, dtype in enumerate(all_dtypes)
            },
            "metadata": None,
        },
        "bfloat16_with_metadata": {
            "tensors": {
                "embed": random_array(ml_dtypes.bfloat16, (4, 8), 1),
                "bias": random_array(np.float32, (8,), 2),
            },
            "metadata": {"format": "pt"},
        },
        "metadata_several_entries": {
            "tensors": {"w": random_array(np.float16, (3, 3), 3)},
            "metadata": {"z": "1", "b": "2", "é": '"ü\\', "empty": ""},
        },
        "metadata_empty": {"tensors": {"w": random_array(np.int64, (2,), 4)}, "metadata": {}},
        "big_endian": {
            "tensors": {
                "f": np.arange(6, dtype=">f4").reshape(2, 3),
                "i": np.arange(3, dtype=">i8") - 1,
                "c": (np.arange(2) + 1j).astype(">c8"),
            },
            "metadata": None,
        },
        "unicode_names": {
            "tensors": {"ünï": np.ones(2, np.float64), "a.b/c": np.zeros(1, np.uint8), "日本": np.ones((), np.int16)},
            "metadata": {"note": "ünïcode"},
        },
        "no_tensors": {"tensors": {}, "metadata": None},
        "many": {
            "tensors": {
                f"layer{index % 7}.{kind}{index}": random_array(dtype, (index % 4 + 1, 3), 100 + index)
                for index, (kind, dtype) in enumerate(
                    [("w", np.float32), ("b", ml_dtypes.bfloat16), ("s", np.int8), ("m", np.bool_), ("d", np.float64)]
                    * 8
                )
            },
            "metadata": {"layers": "7"},
        },
    }
    return cases


MSGPACK_DTYPES = [
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.complex64, np.complex128, ml_dtypes.bfloat16,
]  # fmt: skip


def msgpack_cases() -> dict[str, dict[str, Any]]:
    """Name to the state dict each msgpack file is saved from."""
    return {
        "nested": {
            "params": {
                "dense": {"kernel": random_array(np.float32, (4, 3), 5), "bias": np.zeros(3, np.float32)},
                "embed": random_array(ml_dtypes.bfloat16, (5, 2), 6),
            },
            "step": np.int32(7),
        },
        "leaves": {
            "i": 3,
            "big": 2**62,
            "negative": -5,
            "f": 1.5,
            "s": "txt",
            "bytes": b"\x00\x01\xff",
            "none": None,
            "flag": True,
            "complex": 1 + 2j,
            "f64": np.float64(2.5),
            "u8": np.uint8(200),
            "empty": {},
        },
        "dtypes": {
            np.dtype(dtype).name: random_array(dtype, (3, 2), index) for index, dtype in enumerate(MSGPACK_DTYPES)
        },
        "scalars_and_empties": {"zero_d": np.array(3.0), "empty": np.zeros((0, 4), np.float32), "nested": {"x": {}}},
    }


def encode_tree(value: Any, arrays: Arrays, prefix: str) -> Any:
    """A JSON form of a msgpack state tree; arrays and NumPy scalars go to ``arrays``."""
    if isinstance(value, dict):
        return {"kind": "dict", "items": [[key, encode_tree(item, arrays, prefix)] for key, item in value.items()]}
    if isinstance(value, np.ndarray):
        return {"kind": "array", **arrays.add(prefix, value)}
    if isinstance(value, np.generic):
        return {"kind": "numpy_scalar", **arrays.add(prefix, np.asarray(value))}
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return {"kind": type(value).__name__, "value": value}
    if isinstance(value, float):
        return {"kind": "float", "value": value.hex()}
    if isinstance(value, complex):
        return {"kind": "complex", "value": [value.real.hex(), value.imag.hex()]}
    if isinstance(value, bytes):
        return {"kind": "bytes", "value": value.hex()}
    raise TypeError(f"no JSON form for {type(value)}")


def error_class(call: Callable[[], object]) -> str | None:
    """The ``module:qualname`` of what ``call`` raises, or None if it returns."""
    try:
        call()
    except Exception as error:  # The class is what is recorded.
        return f"{type(error).__module__}:{type(error).__qualname__}"
    return None


def raw_file(path: Path, header: dict[str, Any], payload: bytes) -> None:
    """Writes a safetensors file by hand from its header and payload."""
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + payload)


def refused_inputs(folder: Path) -> dict[str, str | None]:
    """The exception class 0.2 raised for inputs it refused (and that 0.3 refuses too)."""
    folder.mkdir()
    corrupt = folder / "corrupt.safetensors"
    corrupt.write_bytes(b"not a Safetensors file")
    truncated = folder / "truncated.safetensors"
    save_safetensors(truncated, {"x": np.arange(4, dtype=np.float32)}, overwrite=False)
    truncated.write_bytes(truncated.read_bytes()[:-1])
    with_metadata = folder / "with_metadata.safetensors"
    save_safetensors(with_metadata, {"x": np.ones(1, np.float32)}, overwrite=False, metadata={"k": "v"},
                     max_metadata_bytes=9)  # fmt: skip
    packed = folder / "packed.safetensors"
    raw_file(packed, {"p": {"dtype": "F4", "shape": [4], "data_offsets": [0, 2]}}, bytes(2))
    conflicting = folder / "gap.safetensors"
    raw_file(conflicting, {"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8))
    link = folder / "link"
    link.symlink_to(folder / "nowhere")
    msgpack_file = folder / "state.msgpack"
    save_msgpack(msgpack_file, {"a": 1}, overwrite=False)
    trailing = folder / "trailing.msgpack"
    trailing.write_bytes(msgpack_file.read_bytes() + b"xyz")
    garbage = folder / "garbage.msgpack"
    garbage.write_bytes(b"\xc1\xc1\xc1")
    x = {"x": np.ones(1, np.float32)}
    calls: dict[str, Callable[[], object]] = {
        "inspect_corrupt": lambda: inspect_safetensors(corrupt),
        "load_truncated": lambda: load_safetensors(truncated, max_bytes=16),
        "inspect_gap": lambda: inspect_safetensors(conflicting),
        "inspect_metadata_default_limit": lambda: inspect_safetensors(with_metadata),
        "load_metadata_over_limit": lambda: load_safetensors(with_metadata, max_bytes=4, max_metadata_bytes=8),
        "save_metadata_default_limit": lambda: save_safetensors(folder / "md", x, overwrite=False, metadata={"k": "v"}),
        "load_unknown_name": lambda: load_safetensors(truncated.with_name("ok"), max_bytes=4, names=["y"]),
        "load_over_budget": lambda: load_safetensors(with_metadata, max_bytes=0, max_metadata_bytes=9),
        "load_packed": lambda: load_safetensors(packed, max_bytes=2),
        "inspect_directory": lambda: inspect_safetensors(folder),
        "save_to_directory": lambda: save_safetensors(folder, x, overwrite=True),
        "save_to_symlink": lambda: save_safetensors(link, x, overwrite=True),
        "save_existing": lambda: save_safetensors(with_metadata, x, overwrite=False),
        "save_unsupported_dtype": lambda: save_safetensors(folder / "u", {"x": np.array(["text"])}, overwrite=False),
        "save_surrogate_name": lambda: save_safetensors(folder / "s", {"\ud800": np.ones(1)}, overwrite=False),
        "msgpack_save_to_symlink": lambda: save_msgpack(link, {"a": 1}, overwrite=True),
        "msgpack_save_to_directory": lambda: save_msgpack(folder, {"a": 1}, overwrite=True),
        "msgpack_load_directory": lambda: load_msgpack(folder, {"a": 0}, max_bytes=100),
        "msgpack_load_trailing": lambda: load_msgpack(trailing, {"a": 0}, max_bytes=100),
        "msgpack_load_garbage": lambda: load_msgpack(garbage, {"a": 0}, max_bytes=100),
    }
    save_safetensors(truncated.with_name("ok"), x, overwrite=False)
    return {name: error_class(call) for name, call in calls.items()}


def main(output: Path) -> None:
    """Writes every case's files and 0.2's results into ``output``."""
    inputs, loaded_arrays = Arrays(), Arrays()
    record: dict[str, Any] = {"safetensors": {}, "msgpack": {}}

    (output / "safetensors").mkdir()
    for name, case in safetensors_cases().items():
        path = output / "safetensors" / f"{name}.safetensors"
        tensors, metadata = case["tensors"], case["metadata"]
        save_safetensors(path, tensors, overwrite=False, metadata=metadata, max_metadata_bytes=METADATA_LIMIT)
        info = inspect_safetensors(path, max_metadata_bytes=METADATA_LIMIT)
        loaded = load_safetensors(path, max_bytes=info.total_bytes, max_metadata_bytes=METADATA_LIMIT)
        selected = sorted(tensors, reverse=True)[:2]
        some = load_safetensors(path, max_bytes=info.total_bytes, names=selected, max_metadata_bytes=METADATA_LIMIT)
        record["safetensors"][name] = {
            "inputs": [[tensor, inputs.add(f"safetensors/{name}", array)] for tensor, array in tensors.items()],
            "metadata": metadata,
            "inspect": {
                "tensors": [
                    [tensor, list(entry.shape), entry.dtype, entry.nbytes] for tensor, entry in info.tensors.items()
                ],
                "metadata": dict(info.metadata),
                "total_bytes": info.total_bytes,
            },
            "load": [
                [tensor, loaded_arrays.add(f"safetensors/{name}", array)] for tensor, array in loaded.tensors.items()
            ],
            "load_metadata": dict(loaded.metadata),
            "load_selected": {
                "names": selected,
                "order": list(some.tensors),
                "arrays": [loaded_arrays.add(f"safetensors/{name}", array) for array in some.tensors.values()],
            },
        }

    (output / "msgpack").mkdir()
    for name, state in msgpack_cases().items():
        path = output / "msgpack" / f"{name}.msgpack"
        save_msgpack(path, state, overwrite=False)
        restored = load_msgpack(path, state, max_bytes=os.path.getsize(path))
        record["msgpack"][name] = {
            "state": encode_tree(state, inputs, f"msgpack/{name}"),
            "restored": encode_tree(restored, loaded_arrays, f"msgpack/{name}"),
        }

    record["refused"] = refused_inputs(output / "refused")
    (output / "cases.json").write_text(json.dumps(record, indent=1, ensure_ascii=False))
    np.savez(output / "inputs.npz", **inputs.raw)
    np.savez(output / "loaded.npz", **loaded_arrays.raw)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
