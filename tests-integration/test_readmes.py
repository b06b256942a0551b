"""Each distribution's README is its page on the index, so it must stand alone.

It says what the distribution is with an install line, holds a complete
example that runs, lists the public names and the dependencies and extras,
and sends the reader nowhere without a link.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Index pages: the test harness (tinax-testing, marked unpublished) has none.
READMES = sorted(
    path
    for path in (ROOT / "packages").glob("*/README.md")
    if tomllib.loads((path.parent / "pyproject.toml").read_text()).get("tool", {}).get("tinax", {}).get("published")
    is not False
)
# Sentences that point at a place the index page cannot reach.
UNLINKED_POINTER = re.compile(
    r"see the repository|in the repository|(?<![\[(/])\b(?:README|MIGRATION|CHANGELOG)\.md\b", re.IGNORECASE
)
_PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def _readmes_script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("tinax_scripts_readmes", ROOT / "scripts" / "readmes.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _section(text: str, heading: str) -> str:
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"no '## {heading}' section"
    return match.group(1)


def test_generated_sections_are_current():
    assert _readmes_script().main(["--check"]) == 0


@pytest.mark.parametrize("readme", READMES, ids=lambda path: path.parent.name)
def test_readme_stands_alone(readme):
    text = readme.read_text(encoding="utf-8")
    project = tomllib.loads((readme.parent / "pyproject.toml").read_text())["project"]
    assert f"pip install {project['name']}\n" in text
    assert _PYTHON_BLOCK.search(_section(text, "Example"))
    names = _section(text, "Public names")
    assert "- `tinax." in names
    dependencies = _section(text, "Dependencies and extras")
    for requirement in project.get("dependencies", []):
        assert f"`{requirement}`" in dependencies
    for extra in project.get("optional-dependencies", {}):
        assert f"`{project['name']}[{extra}]`" in dependencies
    pointers = [line for line in text.splitlines() if UNLINKED_POINTER.search(line)]
    assert not pointers, f"lines that send the reader elsewhere without a link: {pointers}"


def test_every_example_runs(tmp_path):
    # One child process for all of them: each example runs in a fresh
    # namespace and a fresh working folder, with one JAX start for all.
    examples = {
        readme.parent.name: _PYTHON_BLOCK.search(_section(readme.read_text(encoding="utf-8"), "Example")).group(1)  # type: ignore[union-attr]
        for readme in READMES
    }
    runner = (
        "import json, os, sys\n"
        "examples = json.loads(sys.argv[1])\n"
        "for name, source in examples.items():\n"
        "    os.makedirs(name)\n"
        "    os.chdir(name)\n"
        "    exec(compile(source, f'{name}/README.md', 'exec'), {'__name__': '__main__'})\n"
        "    os.chdir('..')\n"
        "    print(f'ran {name}', flush=True)\n"
    )
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST")}
    environment.pop("XLA_FLAGS", None)
    environment["JAX_PLATFORMS"] = "cpu"
    completed = subprocess.run(
        [sys.executable, "-c", runner, json.dumps(examples)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environment,
        timeout=150,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-6000:]
    assert [line for line in completed.stdout.splitlines() if line.startswith("ran ")] == [
        f"ran {name}" for name in examples
    ]
