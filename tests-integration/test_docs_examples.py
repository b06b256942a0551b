"""Every Python block of the documentation site and of every README runs.

The convention (CONTRIBUTING.md, "Documentation"): the ```python blocks of a
page (under docs/, or a README) run in page order as one script, so a block
may use the names an earlier block of its page defined. A block that is only a
fragment is marked by the line ``<!-- fragment -->`` directly above its
fence; it is shown but not run. Each page runs in its own child process, in a
fresh working folder, with JAX on 8 CPU devices. A docs page that renders a
repository file (``--8<-- "PATH"``, see docs/hooks.py) runs that file's blocks.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FRAGMENT_MARKER = "<!-- fragment -->"
# A fence at the start of a line, with an optional marker line above it.
_BLOCK = re.compile(r"^(?:(<!-- fragment -->)\n)?```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
# Paths relative to the repository root.
PAGES = [
    *sorted(path.relative_to(ROOT).as_posix() for path in DOCS.rglob("*.md")),
    "README.md",
    *sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "packages").glob("*/README.md")),
]
# A page whose whole text is this line renders a repository file (docs/hooks.py).
_INCLUDE = re.compile(r'--8<-- "([^"]+)"')


def page_text(page: str) -> str:
    """The Markdown a page renders: its own, or that of the file it includes."""
    text = (ROOT / page).read_text(encoding="utf-8")
    included = _INCLUDE.fullmatch(text.strip()) if page.startswith("docs/") else None
    return (ROOT / included.group(1)).read_text(encoding="utf-8") if included else text


def python_blocks(text: str) -> list[tuple[bool, str]]:
    """Every ```python block of ``text`` as (is_fragment, source), in order."""
    return [(bool(match.group(1)), match.group(2)) for match in _BLOCK.finditer(text)]


def runnable_source(page: str) -> tuple[str, int]:
    """The page's runnable blocks as one script, and how many blocks it holds.

    Each block starts on the line it has in the page, so a traceback points at
    the page's own line numbers.
    """
    text = page_text(page)
    lines = [""] * text.count("\n")
    count = 0
    for match in _BLOCK.finditer(text):
        if match.group(1):
            continue
        count += 1
        first = text.count("\n", 0, match.start(2))
        for offset, line in enumerate(match.group(2).splitlines()):
            lines[first + offset] = line
    return "\n".join(lines) + "\n", count


def test_the_convention_is_recognised():
    text = (
        "intro\n\n```python\nx = 1\n```\n\n"
        f"{FRAGMENT_MARKER}\n```python\nundefined_name\n```\n\n"
        "```bash\nls\n```\n\n```python\nassert x == 1\n```\n"
    )
    assert python_blocks(text) == [(False, "x = 1\n"), (True, "undefined_name\n"), (False, "assert x == 1\n")]


def test_every_python_fence_is_recognised():
    # A fence the pattern missed (indented, or with an info string after the
    # language) would silently not run.
    for page in PAGES:
        text = page_text(page)
        fences = len(re.findall(r"^\s*```\s*python", text, re.MULTILINE))
        assert fences == len(python_blocks(text)), f"{page}: a ```python fence the runner does not recognise"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("page", [page for page in PAGES if runnable_source(page)[1]])
def test_page_examples_run(page, tmp_path):
    source, count = runnable_source(page)
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST")}
    environment.pop("XLA_FLAGS", None)
    environment["JAX_PLATFORMS"] = "cpu"
    environment["JAX_NUM_CPU_DEVICES"] = "8"
    script = tmp_path / "page.py"
    script.write_text(source, encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    completed = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=work,
        env=environment,
        timeout=200,
        check=False,
    )
    output = (completed.stdout[-3000:] + completed.stderr[-6000:]).replace(str(script), page)
    assert completed.returncode == 0, f"{count} block(s) of {page}:\n{output}"
