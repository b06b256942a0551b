"""``tinax info`` against a real install: tinax-core's wheel in a fresh venv, then broken by hand.

Builds a wheel and a venv, so it carries the ``distributions`` marker. The
wheel is installed without its dependencies: the command itself needs only
the standard library, which this also shows.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import shlex
import subprocess
import sys
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]

pytestmark = [
    pytest.mark.distributions,
    pytest.mark.timeout(600),
    # Builds tinax-core from the repository with uv: not where the tests run against an installed wheel.
    pytest.mark.skipif(
        not (ROOT / "packages" / "tinax-core" / "pyproject.toml").is_file() or importlib.util.find_spec("uv") is None,
        reason="needs the repository and uv",
    ),
]
# The version under test, read where it is set, so that a release edits no test.
VERSION = (
    tomllib.loads((ROOT / "packages" / "tinax-core" / "pyproject.toml").read_text())["project"]["version"]
    if (ROOT / "packages" / "tinax-core" / "pyproject.toml").is_file()
    else ""
)


def _uv(*arguments: str) -> None:
    subprocess.run([sys.executable, "-m", "uv", *arguments], check=True, capture_output=True, text=True)


@pytest.fixture
def venv(tmp_path: pathlib.Path) -> pathlib.Path:
    _uv("build", "--wheel", "--quiet", "--out-dir", str(tmp_path / "wheel"), str(ROOT / "packages" / "tinax-core"))
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    folder = tmp_path / "venv"
    _uv("venv", "--quiet", "--python", sys.executable, str(folder))
    _uv("pip", "install", "--quiet", "--no-deps", "--python", str(folder / "bin" / "python"), str(wheel))
    return folder


def _tinax(venv: pathlib.Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return _run(venv, str(venv / "bin" / "tinax"), *arguments)


def _run(venv: pathlib.Path, *command: str) -> subprocess.CompletedProcess[str]:
    """Runs ``command`` in ``venv``, with nothing of the test's own environment on the path."""
    environment = {key: value for key, value in os.environ.items() if key not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    return subprocess.run(
        list(command),
        capture_output=True,
        text=True,
        check=False,
        env=environment,
        cwd=venv,
    )


def _site_packages(venv: pathlib.Path) -> pathlib.Path:
    (folder,) = venv.glob("lib/python*/site-packages")
    return folder


def _interpreter(venv: pathlib.Path) -> str:
    """The console script's interpreter (its shebang), which a uv repair names: uv's venvs have no pip."""
    first = (venv / "bin" / "tinax").read_text().splitlines()[0]
    return shlex.quote(first.removeprefix("#!"))


def _repair(venv: pathlib.Path) -> str:
    return f"uv pip install --python {_interpreter(venv)} --reinstall --no-deps tinax-core=={VERSION}"


def test_version_and_schema_come_from_the_installed_wheel(venv):
    assert (_site_packages(venv) / f"tinax_core-{VERSION}.dist-info" / "INSTALLER").read_text().strip() == "uv"
    version = _tinax(venv, "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout == f"tinax-core {VERSION}\n"
    module = _run(venv, str(venv / "bin" / "python"), "-m", "tinax", "--version")
    assert (module.returncode, module.stdout) == (0, version.stdout)
    # A public module's __version__, read from the dist-info beside it, without importlib.metadata's import cost.
    code = "import sys, tinax.device as m; print(m.__version__, 'importlib.metadata' in sys.modules)"
    probe = _run(venv, str(venv / "bin" / "python"), "-c", code)
    assert (probe.returncode, probe.stdout) == (0, f"{VERSION} False\n"), probe.stderr
    schema = _tinax(venv, "--schema")
    assert schema.returncode == 0
    assert (_site_packages(venv) / "tinax" / "_core" / "_command" / "schema.json").read_text() == schema.stdout
    assert json.loads(schema.stdout)["$id"] == json.loads(_tinax(venv, "info", "--json").stdout)["schema"]


def test_the_console_script_checks_a_real_install_and_reports_damage(venv, tmp_path):
    intact = _tinax(venv, "info")
    assert intact.returncode == 0, intact.stderr
    assert "tinax-core" in intact.stdout
    assert "jax" not in intact.stdout.split("packages (")[1]  # installed without dependencies

    # A hand edit of an installed module.
    module = _site_packages(venv) / "tinax" / "_core" / "files.py"
    module.write_text(module.read_text() + "\n# edited by hand\n")
    edited = _tinax(venv, "info")
    assert edited.returncode == 1
    assert (
        f"tinax-core {VERSION}: tinax/_core/files.py differs from the installed file (its hash changed); "
        f"repair: {_repair(venv)}" in (edited.stdout)
    )

    # A RECORD file deleted.
    (record,) = _site_packages(venv).glob("tinax_core-*.dist-info/RECORD")
    record.unlink()
    deleted = _tinax(venv, "info", "--json")
    assert deleted.returncode == 1
    assert "its RECORD file is missing" in deleted.stdout


def test_without_any_member_inspect_names_what_installs_the_inspectors(venv, tmp_path):
    # tinax-core knows no format: alone, it reads no kind, and says what installs every member's inspectors.
    path = tmp_path / "model.safetensors"
    header = b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(4))
    result = _tinax(venv, "inspect", str(path))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"tinax inspect: no installed tinax distribution inspects files such as {str(path)!r}; "
        f"uv pip install --python {_interpreter(venv)} tinax installs every tinax distribution with its inspectors"
    ]


def test_an_environment_mixing_tinax_02_still_answers_with_the_repair(venv, tmp_path):
    # What upgrading one member alone over tinax 0.2 leaves: 0.2's package
    # folder, whose __init__.py shadows the namespace.
    leftover = _site_packages(venv) / "tinax" / "__init__.py"
    leftover.write_text("# tinax 0.2\n")
    info = _tinax(venv, "info")
    assert info.returncode == 1
    assert f"tinax-core {VERSION}: ok" in info.stdout.splitlines()
    (line,) = info.stderr.strip().splitlines()
    assert "mixes the single-distribution tinax 0.2" in line
    assert f"repair: uv pip install --python {_interpreter(venv)} -U tinax" in line
    # With --json, one error document of the schema, the integrity check's findings in its problems.
    document = json.loads(_tinax(venv, "info", "--json").stdout)
    assert document["ok"] is False
    assert document["error"]["type"] == "mixed_install"
    assert document["error"]["message"] == line.removeprefix("tinax: ")
    assert document["problems"] == []
    versions = _tinax(venv, "--version")
    assert versions.returncode == 1
    assert versions.stdout == f"tinax-core {VERSION}\n"
    # The integrity check still runs, and still finds hand edits.
    module = _site_packages(venv) / "tinax" / "_core" / "files.py"
    module.write_text(module.read_text() + "\n# edited by hand\n")
    info = _tinax(venv, "info")
    assert "  tinax/_core/files.py differs from the installed file (its hash changed); repair: " + _repair(venv) in (
        info.stdout.splitlines()
    )
    inspect = _tinax(venv, "inspect", str(tmp_path))
    assert inspect.returncode == 1
    assert inspect.stdout == ""
    assert len(inspect.stderr.strip().splitlines()) == 1
