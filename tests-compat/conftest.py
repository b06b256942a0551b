"""Cross-version tests: tinax 0.2 writes artifacts, the installed 0.3 reads them.

Each ``generators/gen_<area>.py`` script runs under the real tinax 0.2 wheel,
in its own Python 3.12 virtual environment with 0.2's exact dependency pins.
It receives an output folder as its only argument and writes the artifacts
of its area there together with the results 0.2 computed from them (JSON or
``.npz``). The ``test_<area>_*.py`` files in this folder then run in the
``compat`` environment, against our installed wheels, and must reproduce
those results exactly.

The 0.2 environment is built once per session (or taken from
``TINAX02_PYTHON`` when that names an interpreter that already has 0.2), and
each generator runs once per session.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tinax_testing import force_cpu_devices

force_cpu_devices()

HERE = Path(__file__).resolve().parent
GENERATORS = HERE / "generators"

#: The release whose artifacts 0.3 must keep reading, pinned by content.
TINAX02_WHEEL = "tinax-0.2.0-py3-none-any.whl"
TINAX02_WHEEL_SHA256 = "70f24711dd5a0249c2976016340de1f4689c7ff0a0051670985391bc9896ee95"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _child_environment() -> dict[str, str]:
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("VIRTUAL_ENV", "PYTHONPATH", "XLA_", "JAX_"))
    }
    environment["JAX_PLATFORMS"] = "cpu"
    environment["JAX_NUM_CPU_DEVICES"] = "8"
    environment["PYTHONHASHSEED"] = "0"
    return environment


#: uv, installed as a package in the compat environment.
UV = [sys.executable, "-m", "uv"]


def download_tinax02_wheel(destination: Path) -> Path:
    """Downloads the tinax 0.2.0 wheel from the index and checks its pinned sha256."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--python-version",
            "3.12",
            "--dest",
            str(destination),
            "tinax==0.2.0",
        ],
        check=True,
    )
    wheel = destination / TINAX02_WHEEL
    if _sha256(wheel) != TINAX02_WHEEL_SHA256:
        pytest.fail(f"{wheel.name} does not have the pinned sha256 {TINAX02_WHEEL_SHA256}")
    return wheel


def make_tinax02_environment(venv: Path, wheel: Path, *, seed_pip: bool = False) -> Path:
    """Creates a venv with tinax 0.2 and its exact pins; returns its interpreter."""
    command = [*UV, "venv", "--quiet", "--python", sys.executable, str(venv)]
    subprocess.run([*command, "--seed"] if seed_pip else command, check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [*UV, "pip", "install", "--quiet", "--python", str(python), str(wheel)],
        check=True,
        env={**os.environ, "UV_COMPILE_BYTECODE": "1"},
    )
    return python


@pytest.fixture(scope="session")
def tinax02_venv_factory() -> Callable[..., Path]:
    """``make_tinax02_environment``, for tests that need a fresh 0.2 environment each."""
    return make_tinax02_environment


@pytest.fixture(scope="session")
def tinax02_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real tinax 0.2.0 wheel from the index, checked against its pinned sha256."""
    return download_tinax02_wheel(tmp_path_factory.mktemp("tinax02-wheel"))


@pytest.fixture(scope="session")
def tinax02_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The interpreter of a virtual environment that has tinax 0.2 and its pins."""
    given = os.environ.get("TINAX02_PYTHON")
    if given:
        return Path(given)
    root = tmp_path_factory.mktemp("tinax02")
    return make_tinax02_environment(root / "venv", download_tinax02_wheel(root / "downloads"))


@pytest.fixture(scope="session")
def artifacts02(tinax02_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with one subfolder per generator, each written by tinax 0.2."""
    root = tmp_path_factory.mktemp("artifacts02")
    for script in sorted(GENERATORS.glob("gen_*.py")):
        destination = root / script.stem.removeprefix("gen_")
        destination.mkdir()
        completed = subprocess.run(
            [str(tinax02_python), str(script), str(destination)],
            capture_output=True,
            text=True,
            env=_child_environment(),
            cwd=destination,
            timeout=900,
        )
        if completed.returncode != 0:
            pytest.fail(
                f"generator {script.name} failed under tinax 0.2 "
                f"(exit {completed.returncode}):\n{completed.stderr[-6000:]}"
            )
    return root


# The first test that asks for 0.2's environment or artifacts pays for
# building them (a venv from the index, every generator run under 0.2), and
# the upgrade tests install whole stacks: these tests get a longer limit than
# the suite's default.
COMPAT_TEST_TIMEOUT_SECONDS = 1800


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in item.path.resolve().parents and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(COMPAT_TEST_TIMEOUT_SECONDS))
