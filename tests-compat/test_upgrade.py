"""The upgrade path from tinax 0.2, with real installers on real environments.

Each test starts from a fresh virtual environment holding the real tinax
0.2.0 wheel and its exact pins, offers our freshly built wheels through
``--find-links`` (with ``--no-index``: 0.2's pins satisfy every third-party
requirement but the storage clients, whose wheels are offered beside ours),
runs one installer command, and checks what a user
would see afterwards: ``pip check``, every public module with every name of
its ``__all__``, every installed file against its wheel's RECORD, and (after
pip's upgrade) the members' own test suites.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "packages"
#: The published members; the test harness (tinax-testing, marked
#: `[tool.tinax] published = false`) is only added for the members' suites.
MEMBER_FOLDERS = sorted(
    path.parent
    for path in PACKAGES.glob("tinax-*/pyproject.toml")
    if path.parent.name != "tinax-meta"
    and tomllib.loads(path.read_text()).get("tool", {}).get("tinax", {}).get("published") is not False
)
# The test dependency group, declared once in the root pyproject.toml.
TEST_REQUIREMENTS = [
    str(line) for line in tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]["test"]
]

#: Every file the tinax 0.2.0 wheel installed, from its RECORD (checked in
#: so that the layout test below needs no download).
RECORD_02 = Path(__file__).resolve().parent / "tinax-0.2.0-record.txt"

#: Paths our wheels may share with 0.2's RECORD, and why pip cannot lose them.
#: tinax/py.typed is also shipped by the `tinax` meta distribution, which pip
#: installs after removing 0.2, so the upgrade ends with the marker in place.
SHARED_WITH_02 = {"tinax/py.typed"}


def _public_module_names() -> list[str]:
    listed = (PACKAGES / "tinax-meta" / "public-api.txt").read_text(encoding="utf-8").splitlines()
    return sorted({line.rsplit(".", 1)[0] for line in listed if line and not line.startswith("#")})


#: uv, installed as a package in the compat environment.
UV = [sys.executable, "-m", "uv"]


#: The storage clients that the meta's pins bring through the members' gcs and s3 extras.
STORAGE_CLIENTS = ["gcsfs", "s3fs"]


@pytest.fixture(scope="module")
def our_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("our-wheels")
    for pyproject in sorted(PACKAGES.glob("*/pyproject.toml")):
        subprocess.run(
            [*UV, "build", "--wheel", "--quiet", "--out-dir", str(folder), str(pyproject.parent)],
            check=True,
        )
    _download_storage_clients(folder, tmp_path_factory.mktemp("constraints"))
    return folder


def _download_storage_clients(folder: Path, scratch: Path) -> None:
    """Adds the storage clients and what they need to the offered wheels, at this environment's versions.

    0.2's pins hold no storage client, and the upgrades run with --no-index.
    This environment (0.2's pins next to our wheels, as the resolver placed
    them) fixes every version, so the download is as locked as it is.
    """
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--disable-pip-version-check", "--exclude-editable"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    constraints = scratch / "constraints.txt"
    constraints.write_text(
        "\n".join(line for line in frozen if "==" in line and not line.lower().startswith("tinax")) + "\n"
    )
    download = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check"]
    subprocess.run(
        [*download, "--only-binary=:all:", "--dest", str(folder), "-c", str(constraints), *STORAGE_CLIENTS], check=True
    )


@pytest.fixture
def venv02(tmp_path: Path, tinax02_wheel: Path, tinax02_venv_factory: Callable[..., Path]) -> Path:
    return tinax02_venv_factory(tmp_path / "venv", tinax02_wheel, seed_pip=True)


def _run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    # Without the test servers, the members' suites skip their gs:// and s3:// tests, as an isolated install does.
    unset = {"PYTHONPATH", "VIRTUAL_ENV", "TINAX_OBJECT_STORE_TESTS"}
    environment = {key: value for key, value in os.environ.items() if key not in unset}
    environment.setdefault("JAX_PLATFORMS", "cpu")
    return subprocess.run(command, capture_output=True, text=True, env=environment, check=False, **kwargs)  # type: ignore[call-overload, no-any-return]


def _pip(python: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return _run([str(python), "-m", "pip", "--disable-pip-version-check", *arguments])


def _assert_ok(completed: subprocess.CompletedProcess[str]) -> None:
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]


_IMPORT_PROBE = """
import importlib, json, sys
report = {}
for name in json.loads(sys.argv[1]):
    module = importlib.import_module(name)
    report[name] = {"file": module.__file__, "all": sorted(module.__all__)}
print(json.dumps(report))
"""


def _import_every_public_module(python: Path, cwd: Path) -> dict[str, dict[str, object]]:
    modules = _public_module_names()
    completed = _run([str(python), "-c", _IMPORT_PROBE, json.dumps(modules)], cwd=cwd)
    _assert_ok(completed)
    report: dict[str, dict[str, object]] = json.loads(completed.stdout)
    listed = (PACKAGES / "tinax-meta" / "public-api.txt").read_text(encoding="utf-8").splitlines()
    for module in modules:
        expected = sorted(line.rsplit(".", 1)[1] for line in listed if line.rsplit(".", 1)[0] == module)
        assert report[module]["all"] == expected, module
    return report


def _assert_installed_like_03(python: Path, tmp_path: Path) -> None:
    _assert_ok(_pip(python, "check"))
    versions = _run([str(python), "-c", "import importlib.metadata as m; print(m.version('tinax'))"])
    _assert_ok(versions)
    assert (
        versions.stdout.strip()
        == tomllib.loads((PACKAGES / "tinax-meta" / "pyproject.toml").read_text())["project"]["version"]
    )
    report = _import_every_public_module(python, tmp_path)
    site = Path(str(report["tinax.array"]["file"])).parent
    assert not (site / "__init__.py").exists(), "a file of tinax 0.2 survived the upgrade"
    assert (site / "py.typed").is_file(), "the PEP 561 marker of the tinax namespace was lost"


def _assert_every_installed_file_is_the_wheels(python: Path, cwd: Path) -> None:
    """Checks each installed tinax distribution's files against the hashes in its RECORD (``tinax info``)."""
    completed = _run([str(python), "-m", "tinax._core._command", "info", "--json"], cwd=cwd)
    report = json.loads(completed.stdout)
    rows = {row["name"]: row for row in report["tables"]["tinax_distributions"]["rows"]}
    assert sorted(rows) == sorted(["tinax", *(folder.name for folder in MEMBER_FOLDERS)]), rows
    assert all(row["status"] == "ok" for row in rows.values()), rows
    assert report["ok"], report["problems"]
    assert completed.returncode == 0, completed.stderr


def _run_member_suites(python: Path, our_wheels: Path, tmp_path: Path) -> None:
    (harness,) = our_wheels.glob("tinax_testing-*.whl")
    _assert_ok(_run([*UV, "pip", "install", "--quiet", "--python", str(python), *TEST_REQUIREMENTS]))
    # The harness alone: what it requires is what the upgrade installed.
    _assert_ok(_run([*UV, "pip", "install", "--quiet", "--python", str(python), "--no-deps", str(harness)]))

    def run_suite(member: Path) -> tuple[str, subprocess.CompletedProcess[str]]:
        workspace = tmp_path / f"suite-{member.name}"
        shutil.copytree(member / "tests", workspace / "tests")
        shutil.copy(member / "pyproject.toml", workspace / "pyproject.toml")
        # The seeded sweeps over damaged files test logic, not the install: the README run has them.
        command = [str(python), "-m", "pytest", "tests", "-q", "-rfE", "-x", "-m", "not sweep"]
        return member.name, _run(command, cwd=workspace)

    # One suite at a time: `hatch run test:all` runs this check next to the
    # whole pytest suite, which already keeps the second core busy.
    for member in MEMBER_FOLDERS:
        name, completed = run_suite(member)
        # The failing tests first, so that a report's one-line summary names them.
        failed = [line for line in completed.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))]
        assert completed.returncode == 0, (
            f"{name}: {'; '.join(failed) or 'exit ' + str(completed.returncode)}\n"
            f"{completed.stdout[-6000:]}{completed.stderr[-3000:]}"
        )


def test_no_file_of_our_wheels_sits_at_a_path_that_tinax_02_recorded(our_wheels: Path) -> None:
    recorded = set(RECORD_02.read_text(encoding="utf-8").split())
    clashes = {}
    for wheel in sorted(our_wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            shared = sorted(set(archive.namelist()) & recorded - SHARED_WITH_02)
        if shared:
            clashes[wheel.name] = shared
    assert clashes == {}


# The members' suites run one after the other here, next to the whole pytest
# suite (see scripts/all_tests.py), so this test gets more than the default.
@pytest.mark.timeout(3000)
def test_pip_upgrade_over_02_leaves_a_working_install(venv02: Path, our_wheels: Path, tmp_path: Path) -> None:
    _assert_ok(_pip(venv02, "install", "-U", "--no-index", "--find-links", str(our_wheels), "tinax"))
    _assert_installed_like_03(venv02, tmp_path)
    _assert_every_installed_file_is_the_wheels(venv02, tmp_path)
    _run_member_suites(venv02, our_wheels, tmp_path)


def test_uv_upgrade_over_02_leaves_a_working_install(venv02: Path, our_wheels: Path, tmp_path: Path) -> None:
    upgrade = [*UV, "pip", "install", "--python", str(venv02), "-U", "--no-index", "--find-links"]
    _assert_ok(_run([*upgrade, str(our_wheels), "tinax"]))
    _assert_installed_like_03(venv02, tmp_path)
    # Every installed file has its wheel's hash and the third-party packages
    # are 0.2's pins, as after the pip upgrade, whose test runs the members'
    # suites on exactly these files; running them again here adds nothing.
    _assert_every_installed_file_is_the_wheels(venv02, tmp_path)


def _assert_import_names_the_repair(python: Path, module: str, cwd: Path) -> None:
    completed = _run([str(python), "-c", f"import {module}"], cwd=cwd)
    assert completed.returncode != 0, f"import {module} succeeded in a mixed 0.2/0.3 environment"
    assert "MixedInstallError" in completed.stderr
    assert "pip install -U tinax" in completed.stderr


def test_upgrading_one_member_over_02_fails_loudly_until_repaired(
    venv02: Path, our_wheels: Path, tmp_path: Path
) -> None:
    _assert_ok(_pip(venv02, "install", "-U", "--no-index", "--find-links", str(our_wheels), "tinax-weights"))
    _assert_ok(_pip(venv02, "check"))
    for module in ("tinax.weights", "tinax.array", "tinax.data"):
        _assert_import_names_the_repair(venv02, module, tmp_path)
    # The repair that the message names.
    _assert_ok(_pip(venv02, "install", "-U", "--no-index", "--find-links", str(our_wheels), "tinax"))
    _assert_installed_like_03(venv02, tmp_path)


def test_downgrading_to_02_does_not_leave_a_silent_mixture(
    venv02: Path, our_wheels: Path, tinax02_wheel: Path, tmp_path: Path
) -> None:
    _assert_ok(_pip(venv02, "install", "-U", "--no-index", "--find-links", str(our_wheels), "tinax"))
    _assert_ok(_pip(venv02, "install", "--no-index", str(tinax02_wheel)))
    for module in ("tinax.array", "tinax.parallel", "tinax.checkpointing.legacy.v0"):
        _assert_import_names_the_repair(venv02, module, tmp_path)
    # The other repair: finish the downgrade by removing the 0.3 members.
    members = [folder.name for folder in MEMBER_FOLDERS]
    _assert_ok(_pip(venv02, "uninstall", "-y", *members))
    probe = _run([str(venv02), "-c", "import tinax.array, tinax.data; print(tinax.array.__file__)"], cwd=tmp_path)
    _assert_ok(probe)
    assert probe.stdout.strip().endswith("tinax/array/__init__.py")


def test_the_guard_is_inert_without_tinax_02() -> None:
    completed = _run(
        [sys.executable, "-c", "import sys, tinax.array; print(any('MixedInstall' in repr(f) for f in sys.meta_path))"]
    )
    _assert_ok(completed)
    assert completed.stdout.strip() == "False"
