"""Importing any public tinax module, from any member, has no side effects.

The module list is derived from the members' src/ folders, so a new
distribution is covered as soon as its folder exists.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from tinax_testing import import_side_effects

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Single-file public modules, plus the one public submodule tree.
PUBLIC_MODULES = [
    *sorted(f"tinax.{module.stem}" for module in ROOT.glob("packages/*/src/tinax/*.py") if module.name[0] != "_"),
    "tinax.checkpointing.legacy",
    "tinax.checkpointing.legacy.v0",
]


def test_modules_were_found():
    assert {"tinax.array", "tinax.jit", "tinax.grad", "tinax.random", "tinax.device", "tinax.nn"} <= set(PUBLIC_MODULES)


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_import_starts_no_backend_and_no_integration(module):
    assert import_side_effects(module) == {"backends_initialized": False, "integrations": []}


# Tells the kind of every path given (``PATH=KIND`` pairs) as `tinax inspect` does, then lists the readers' libraries
# that were imported.
_TELL_KINDS = """
import json, pathlib, sys
from tinax._core._command._registry import detect, installed
inspectors = installed()
told = {given: detect(pathlib.Path(given.split("=")[0]), inspectors)[0] for given in sys.argv[1:]}
readers = ("jax", "numpy", "ml_dtypes", "pyarrow", "array_record", "grain", "orbax", "tensorstore", "safetensors")
print(json.dumps({"told": told, "imported": sorted(name for name in readers if name in sys.modules)}))
"""


def test_telling_the_kind_of_a_path_imports_no_reader_and_every_sniffer_is_installed(tmp_path):
    # Signatures that another member's kind shares are told as the stronger signature's kind.
    paths = {
        "index.json": (b'{"weight_map": {"a": "m.safetensors"}}', "safetensors-index"),
        # A header length whose first byte is also a msgpack map's.
        "model": ((136).to_bytes(8, "little") + b"{" + b" " * 134 + b"}", "safetensors"),
        # A msgpack map whose last value ends as Parquet's footer does.
        "state": (b"\x81\xa1w\xa4PAR1", "msgpack"),
        "train": (b"PAR1" + bytes(8) + b"PAR1", "parquet"),
        "damaged-start": (bytes(8) + b"PAR1", "parquet"),
        # Riegeli's signature starts as a msgpack map does.
        "records": (b"\x83\xafp\xd1\r\x88J?" + bytes(64), "array-record"),
        "notes.txt": (b"just text\n", None),
    }
    for name, (data, _) in paths.items():
        (tmp_path / name).write_bytes(data)
    # A checkpoint folder holding a step-named folder is still a checkpoint.
    (tmp_path / "run" / "12" / "3").mkdir(parents=True)
    (tmp_path / "run" / "12" / "_CHECKPOINT_METADATA").write_text("{}")
    given = [f"{tmp_path / name}={kind}" for name, (_, kind) in paths.items()]
    given += [f"{tmp_path / 'run'}=checkpoint-root", f"{tmp_path / 'run' / '12'}=orbax-checkpoint"]
    completed = subprocess.run([sys.executable, "-c", _TELL_KINDS, *given], capture_output=True, text=True, check=True)
    report = json.loads(completed.stdout)
    assert report["told"] == {item: item.split("=")[1] if item.split("=")[1] != "None" else None for item in given}
    assert report["imported"] == []
