"""The distributions as users install them: each alone, and all through `tinax`.

These tests build real wheels and install them into fresh venvs (third-party
packages from the index, tinax wheels by path), so they are the slowest part
of the suite. They carry the ``distributions`` marker; the newest (Python 3.13) run
deselects them because the wheels are pure Python and one run proves them.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from types import ModuleType

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"

# Building wheels, making venvs and running a member's whole suite in one of
# them takes minutes: far longer than the suite's default limit.
pytestmark = [pytest.mark.distributions, pytest.mark.timeout(1800)]


def _load_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"tinax_scripts_{name}", SCRIPTS / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


isolation = _load_script("isolation")
api_list = _load_script("api_list")
MEMBERS = sorted(isolation.members())


def test_public_surface_matches_the_checked_in_list():
    assert api_list.current_surface() == api_list.recorded_surface()


@pytest.fixture(scope="module")
def isolation_runs(request: pytest.FixtureRequest) -> dict[str, subprocess.CompletedProcess[str]]:
    """The isolation check (its own venv, its own tests) of every selected member, two at a time."""
    selected = sorted(
        {
            item.callspec.params["member"]
            for item in request.session.items
            if getattr(item, "originalname", None) == "test_member_installs_alone_and_passes_its_tests"
        }
    )

    def check(member: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(SCRIPTS / "isolation.py"), member],
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
        )

    # Each check is a pytest run that keeps about one core busy.
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(selected, pool.map(check, selected), strict=True))


@pytest.mark.parametrize("member", MEMBERS)
def test_member_installs_alone_and_passes_its_tests(member, isolation_runs):
    completed = isolation_runs[member]
    assert completed.returncode == 0, completed.stdout[-6000:] + completed.stderr[-6000:]
    assert f"isolation: passed for {member}" in completed.stdout


@pytest.fixture(scope="module")
def full_stack() -> Iterator[pathlib.Path]:
    """A fresh venv with the `tinax` meta wheel and its siblings' wheels installed by path."""
    with tempfile.TemporaryDirectory(prefix="tinax-full-stack-") as scratch:
        scratch_path = pathlib.Path(scratch)
        folders = dict(isolation.members())
        folders[isolation.META_NAME] = ROOT / "packages" / "tinax-meta"
        wheels = isolation.build_wheels(folders, scratch_path / "wheels")
        venv = scratch_path / "venv"
        isolation.uv("venv", "--quiet", "--python", sys.executable, str(venv))
        python = venv / "bin" / "python"
        # No matplotlib: no tinax distribution needs it, so a user who installs
        # `tinax` does not have it, and the demo must say so up front.
        isolation.uv("pip", "install", "--quiet", "--python", str(python), *map(str, wheels.values()))
        yield python


def test_meta_wheel_pins_every_member_exactly(full_stack):
    listing = subprocess.run(
        [sys.executable, "-m", "uv", "pip", "list", "--python", str(full_stack), "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    installed = {item["name"]: item["version"] for item in json.loads(listing)}
    for member in [*MEMBERS, isolation.META_NAME]:
        assert installed.get(member) == "0.3.0", member
    for extra_package in ("flax", "array-record"):
        assert extra_package in installed


PRINT_MODULE_FILES = "import tinax.array, tinax.weights; print(tinax.array.__file__, tinax.weights.__file__)"


def test_full_stack_exposes_the_checked_in_public_surface(full_stack):
    completed = subprocess.run(
        [str(full_stack), str(SCRIPTS / "api_list.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        cwd=full_stack.parent,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    # The modules came from the venv, not from the repository's src folders.
    where = subprocess.run(
        [str(full_stack), "-c", PRINT_MODULE_FILES],
        capture_output=True,
        text=True,
        check=True,
        cwd=full_stack.parent,
    ).stdout
    assert str(ROOT / "packages") not in where
    assert where.count(str(full_stack.parent.parent)) == 2


def test_demo_runs_from_the_installed_wheels(full_stack, tmp_path):
    environment = {key: value for key, value in os.environ.items() if key not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    output = tmp_path / "out"
    completed = subprocess.run(
        [str(full_stack), str(ROOT / "examples" / "demo.py"), "--steps", "8", "--output", str(output)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env=environment,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stdout[-6000:] + completed.stderr[-6000:]
    assert "resume bit-identical    yes" in completed.stdout
    # Without matplotlib the plot is skipped, said before training starts (the
    # first line on stderr, written before any step is printed).
    notice = "demo: matplotlib is not installed, so the loss curve (loss.png) will be skipped"
    assert completed.stderr.startswith(notice)
    assert "loss curve              skipped (matplotlib is not installed)" in completed.stdout
    assert not (output / "loss.png").exists()
