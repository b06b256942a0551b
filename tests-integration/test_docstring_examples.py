"""The examples in public docstrings run as doctests.

Every public name's docstring is searched for ``>>>`` examples, which run here
with a fresh namespace, in a fresh working folder, on the 8 CPU devices of
this suite. The modules in ``EXAMPLES_REQUIRED`` also promise one example per
public function; the others are added to it as their docstrings gain
examples.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
API_LIST = ROOT / "packages" / "tinax-meta" / "public-api.txt"
EXAMPLES_REQUIRED = (
    "tinax.parallel",
    "tinax.nn",
    "tinax.checkpointing",
    "tinax.checkpointing.legacy.v0",
    "tinax.data",
    "tinax.weights",
    "tinax.array",
    "tinax.jit",
    "tinax.grad",
    "tinax.random",
    "tinax.device",
    "tinax.debug",
    "tinax.stdlib",
)
OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def public_objects() -> list[tuple[str, object]]:
    """Every public name as (``module.name``, object), from the checked-in list."""
    found = []
    for line in API_LIST.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            module, _, name = line.strip().rpartition(".")
            found.append((line.strip(), getattr(importlib.import_module(module), name)))
    return found


def docstring_tests() -> list[doctest.DocTest]:
    parser = doctest.DocTestParser()
    tests = []
    for qualified, value in public_objects():
        docstring = inspect.getdoc(value) if inspect.isfunction(value) or inspect.isclass(value) else None
        if docstring and ">>>" in docstring:
            source = inspect.getsourcefile(value) if inspect.isfunction(value) or inspect.isclass(value) else None
            tests.append(parser.get_doctest(docstring, {}, qualified, source, 0))
    return tests


TESTS = docstring_tests()


def test_every_public_function_of_these_modules_has_an_example():
    with_examples = {test.name for test in TESTS}
    missing = [
        qualified
        for qualified, value in public_objects()
        if qualified.rpartition(".")[0] in EXAMPLES_REQUIRED
        and inspect.isfunction(value)
        and qualified not in with_examples
    ]
    assert not missing, f"public functions without a docstring example: {missing}"


@pytest.mark.parametrize("test", TESTS, ids=lambda test: test.name)
def test_docstring_example_runs(test, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
