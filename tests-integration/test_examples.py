"""The recipes in examples/ run, state what they demonstrated and use only public names.

Each recipe checks every claim it prints before printing it, so asserting on one
printed line asserts that the behaviour it describes was observed.
"""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# The main demo has its own workflow test; these are the one-module recipes.
MAIN_DEMO = "demo.py"
RECIPES = sorted(path.name for path in EXAMPLES.glob("*.py") if path.name != MAIN_DEMO)

# For each recipe, one line it must print.
KEY_LINES = {
    "array_ownership.py": "from_numpy(copy=True): a later write to the NumPy array does not reach the JAX array",
    "jit_budgets.py": "bounded_jit refused the retrace with TraceBudgetExceededError naming argument 'values'",
    "grad_modes.py": "jacobian: mode='forward' and mode='reverse' give the same 3x2 matrix",
    "key_derivation.py": (
        "split_key(count=3): continuation key first, then 3 operation keys, all drawing different numbers"
    ),
    "mesh_shard_map.py": (
        "shard_mapped with a psum over 'model' gave the row sums of all 8 rows, eagerly and under jit"
    ),
    "data_pipeline.py": "open_multiprocessing_iterator with 2 workers yielded the same batches in the same order",
    "checkpoint_roundtrip.py": (
        "load_checkpointables: model and rng key restored with the same values and the same shardings"
    ),
    "weights_roundtrip.py": "TensorManifest reported the missing source",
    "resume_anywhere.py": "resumed on 1 process x 8 devices with redeal=True: every row of the epoch seen exactly once",
    "many_files.py": (
        "resumed on 3 processes with redeal=True from 2: every row of the sharded dataset seen exactly once"
    ),
    "sharded_weights.py": (
        "save_sharded_safetensors wrote the sharded weights without gathering them, byte-identical to save_safetensors"
    ),
}

# Generous: a recipe takes a few seconds, but the machine may be busy.
RUN_TIMEOUT_SECONDS = 300


def private_tinax_references(source: str) -> list[str]:
    """Lists every import of a private tinax module or name in ``source``.

    Also catches dotted strings such as ``"tinax._core"``, which could reach a
    private module through ``importlib``.
    """

    def is_private(dotted: str) -> bool:
        parts = dotted.split(".")
        return parts[0] == "tinax" and any(part.startswith("_") for part in parts[1:])

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend(f"import {alias.name}" for alias in node.names if is_private(alias.name))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            if node.module.split(".")[0] != "tinax":
                continue
            if is_private(node.module):
                found.append(f"from {node.module} import ...")
            found.extend(
                f"from {node.module} import {alias.name}" for alias in node.names if alias.name.startswith("_")
            )
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and is_private(node.value):
            found.append(repr(node.value))
    return found


def repository_files(folder: pathlib.Path) -> set[pathlib.Path]:
    return {path for path in folder.rglob("*") if "__pycache__" not in path.parts}


def test_every_recipe_has_a_key_line():
    assert sorted(KEY_LINES) == RECIPES


def test_the_readme_lists_every_example():
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    for name in [MAIN_DEMO, *RECIPES]:
        assert f"`{name}`" in readme, name


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_docstring_says_what_it_shows_and_how_to_run_it(name):
    docstring = ast.get_docstring(ast.parse((EXAMPLES / name).read_text(encoding="utf-8")))
    assert docstring is not None
    assert f"python examples/{name}" in docstring


@pytest.mark.parametrize("name", [MAIN_DEMO, *RECIPES])
def test_example_imports_only_public_tinax_names(name):
    assert private_tinax_references((EXAMPLES / name).read_text(encoding="utf-8")) == []


def test_the_public_name_check_catches_private_imports():
    source = "\n".join(
        [
            "import tinax._core.files",
            "from tinax._core import validation",
            "from tinax._array._ops import safe_astype",
            "from tinax.array import _require_dtype",
            "import importlib; importlib.import_module('tinax._jit._budget')",
            "from tinax.array import from_numpy",
            "import tinax.parallel",
            "from jax import _src",
        ]
    )
    assert private_tinax_references(source) == [
        "import tinax._core.files",
        "from tinax._core import ...",
        "from tinax._array._ops import ...",
        "from tinax.array import _require_dtype",
        "'tinax._jit._budget'",
    ]


# A recipe may take up to RUN_TIMEOUT_SECONDS in its child process.
@pytest.mark.timeout(RUN_TIMEOUT_SECONDS + 60)
@pytest.mark.parametrize("name", sorted(KEY_LINES))
def test_recipe_runs_and_reports_what_it_demonstrated(name, tmp_path):
    working_directory = tmp_path / "cwd"
    temporary_directory = tmp_path / "tmp"
    working_directory.mkdir()
    temporary_directory.mkdir()
    # Recipes that need a mesh must force their own device count.
    environment = {key: value for key, value in os.environ.items() if key not in {"JAX_NUM_CPU_DEVICES", "XLA_FLAGS"}}
    environment["TMPDIR"] = str(temporary_directory)
    environment["PYTHONDONTWRITEBYTECODE"] = "1"
    examples_before = repository_files(EXAMPLES)

    completed = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=working_directory,
        env=environment,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        check=False,
    )

    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert KEY_LINES[name] in completed.stdout.splitlines(), completed.stdout
    # Nothing is left where the recipe ran, in the temporary folder or next to the recipes.
    assert list(working_directory.iterdir()) == []
    assert list(temporary_directory.iterdir()) == []
    assert repository_files(EXAMPLES) == examples_before
