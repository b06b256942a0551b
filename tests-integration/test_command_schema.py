"""Every ``tinax ... --json`` document, of every kind and every failure, follows the published schema.

The command runs in a subprocess, as a user runs it, over real files of every
kind the members read. ``run_tinax(...).json()`` parses stdout as exactly one
JSON document and checks it against the schema shipped in tinax-core.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import pathlib
import re
import shutil
from importlib import metadata
from typing import Any

import numpy as np
import pytest

from tinax._core._command._report import SCHEMA
from tinax_testing import run_tinax

ROOT = pathlib.Path(__file__).resolve().parent.parent
SNAKE = re.compile(SCHEMA["$defs"]["key"]["pattern"])
RECORDS = [{"image": np.full((2, 2), index, np.float32), "label": index, "blob": b"\x00\x01"} for index in range(3)]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pathlib.Path]:
    """One path of every kind `tinax inspect` reads, plus damaged and incomplete ones."""
    from tinax.checkpointing import save_checkpointables
    from tinax.data import write_array_record, write_parquet_record
    from tinax.weights import save_msgpack, save_safetensors

    folder = tmp_path_factory.mktemp("kinds")
    paths: dict[str, pathlib.Path] = {}
    paths["safetensors"] = folder / "model.safetensors"
    save_safetensors(paths["safetensors"], {"w": np.ones((2, 3), np.float32)}, overwrite=False)
    shards = folder / "sharded"
    shards.mkdir()
    save_safetensors(shards / "model-00001-of-00001.safetensors", {"w": np.ones(4, np.int8)}, overwrite=False)
    paths["safetensors-index"] = shards / "model.safetensors.index.json"
    index = {
        "metadata": {"total_size": 4, "notes": "n" * 8000},
        "weight_map": {"w": "model-00001-of-00001.safetensors"},
    }
    paths["safetensors-index"].write_text(json.dumps(index))
    paths["msgpack"] = folder / "state.msgpack"
    save_msgpack(paths["msgpack"], {"params": {"w": np.zeros(3, np.float32)}, "step": 2}, overwrite=False)
    paths["parquet"] = folder / "train.parquet"
    write_parquet_record(paths["parquet"], RECORDS, overwrite=False)
    if importlib.util.find_spec("array_record") is not None:
        paths["array-record"] = folder / "train.array_record"
        write_array_record(paths["array-record"], RECORDS, overwrite=False)
    root = folder / "run"
    paths["orbax-checkpoint"] = root / "3"
    save_checkpointables(paths["orbax-checkpoint"], {"weights": {"w": np.ones((2, 3), np.int32)}}).result()
    paths["checkpoint-root"] = root
    paths["incomplete"] = folder / "incomplete"
    shutil.copytree(paths["orbax-checkpoint"], paths["incomplete"])
    shutil.rmtree(paths["incomplete"] / "weights")
    paths["damaged-safetensors"] = folder / "damaged.safetensors"
    paths["damaged-safetensors"].write_bytes(paths["safetensors"].read_bytes()[:-5])
    paths["damaged-parquet"] = folder / "damaged.parquet"
    data = bytearray(paths["parquet"].read_bytes())
    data[len(data) // 2 : len(data) - 8] = bytes(len(data) // 2 - 8)
    paths["damaged-parquet"].write_bytes(bytes(data))
    paths["text"] = folder / "notes.txt"
    paths["text"].write_text("just text\n")
    return paths


def _our_keys(document: dict[str, Any]) -> list[str]:
    """The keys tinax chose (a record's own field names are the file's, and are left out)."""
    keys = [*document, *document["summary"], *document["tables"]]
    for table in document["tables"].values():
        keys += table["columns"]
        for row in table["rows"]:
            keys += list(row)
    return keys + list(document["error"] or {})


CASES = {
    "info": (("info",), 0, None),
    "info-devices": (("info", "--devices"), 0, None),
    "version": (("--version",), 0, None),
    "safetensors": (("inspect", "{safetensors}"), 0, None),
    "safetensors-index": (("inspect", "{safetensors-index}"), 0, None),
    "msgpack": (("inspect", "{msgpack}"), 0, None),
    "parquet": (("inspect", "{parquet}", "--head", "2"), 0, None),
    "array-record": (("inspect", "{array-record}", "--head", "2"), 0, None),
    "orbax-checkpoint": (("inspect", "{orbax-checkpoint}"), 0, None),
    "checkpoint-root": (("inspect", "{checkpoint-root}"), 0, None),
    "incomplete-checkpoint": (("inspect", "{incomplete}"), 1, None),
    "damaged-safetensors": (("inspect", "{damaged-safetensors}"), 1, "unreadable"),
    "damaged-parquet": (("inspect", "{damaged-parquet}"), 1, "unreadable"),
    "unknown-kind": (("inspect", "{text}"), 1, "unknown_kind"),
    "missing-path": (("inspect", "{text}.absent"), 2, "usage"),
    "bad-arguments": (("inspect", "{text}", "--head", "many"), 2, "usage"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_json_document_follows_the_schema_with_snake_case_keys(files, case):
    arguments, code, error = CASES[case]
    if case == "array-record" and "array-record" not in files:
        pytest.skip("array-record is not installed")
    given = [re.sub(r"\{([a-z-]+)\}", lambda match: str(files[match.group(1)]), item) for item in arguments]
    result = run_tinax(*given, "--json")
    assert result.code == code, result.stderr
    document = result.json()  # exactly one document, checked against the schema
    assert [key for key in _our_keys(document) if not SNAKE.fullmatch(key)] == []
    assert document["ok"] is (code == 0)
    assert (document["error"] or {}).get("type") == error
    if error is not None:
        assert (document["summary"], document["tables"], document["problems"]) == ({}, {}, [])
        assert f"{document['error']['message']}\n" in result.stderr
    # Strict JSON: no NaN or Infinity literals.
    json.loads(result.stdout, parse_constant=lambda name: pytest.fail(f"{name} in the output"))


def test_records_shown_by_head_are_json_values(files):
    document = run_tinax("inspect", str(files["parquet"]), "--head", "1", "--json").json()
    (row,) = document["tables"]["records"]["rows"]
    assert row == {
        "index": 0,
        "record": {
            "image": {"type": "ndarray", "dtype": "float32", "shape": [2, 2], "values": [[0.0, 0.0], [0.0, 0.0]]},
            "label": 0,
            "blob": {"type": "bytes", "base64": "AAE="},
        },
    }


# Single-file public modules, plus the one public submodule tree.
PUBLIC_MODULES = sorted(
    (f"tinax.{module.stem}", module.parents[2].name)
    for module in ROOT.glob("packages/*/src/tinax/*.py")
    if module.name[0] != "_"
)


def test_public_modules_were_found():
    assert {name for name, _ in PUBLIC_MODULES} >= {"tinax.array", "tinax.weights", "tinax.checkpointing", "tinax.nn"}


@pytest.mark.parametrize(("module", "member"), PUBLIC_MODULES, ids=[name for name, _ in PUBLIC_MODULES])
def test_each_public_module_has_the_version_of_the_distribution_that_ships_it(module, member):
    imported = importlib.import_module(module)
    assert imported.__version__ == metadata.version(member)
    # Not a public name: `from tinax.data import *` does not bring it.
    assert "__version__" not in imported.__all__
