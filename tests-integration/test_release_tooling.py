"""The version and pin tooling, exercised on a copy of the real distributions."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "release.py"


@pytest.fixture
def packages(tmp_path: pathlib.Path) -> pathlib.Path:
    copy = tmp_path / "packages"
    for pyproject in (ROOT / "packages").glob("*/pyproject.toml"):
        folder = copy / pyproject.parent.name
        folder.mkdir(parents=True)
        shutil.copy(pyproject, folder / "pyproject.toml")
        changelog = pyproject.parent / "CHANGELOG.md"
        if changelog.exists():
            shutil.copy(changelog, folder / "CHANGELOG.md")
    return copy


def release(packages: pathlib.Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--packages", str(packages), *arguments],
        capture_output=True,
        text=True,
        check=False,
    )


def add_member(packages: pathlib.Path, core_requirement: str) -> None:
    """Adds a minimal member `tinax-extra` that requires tinax-core as given."""
    folder = packages / "tinax-extra"
    folder.mkdir()
    (folder / "pyproject.toml").write_text(
        f'[project]\nname = "tinax-extra"\nversion = "0.3.0"\ndependencies = ["{core_requirement}"]\n'
    )


def project(packages: pathlib.Path, folder: str) -> dict:
    return tomllib.loads((packages / folder / "pyproject.toml").read_text())["project"]


def test_the_repository_is_consistent():
    result = release(ROOT / "packages", "check")
    assert result.returncode == 0, result.stderr
    assert "consistent" in result.stdout


def test_a_stale_meta_pin_fails_the_check(packages):
    path = packages / "tinax-core" / "pyproject.toml"
    path.write_text(path.read_text().replace('version = "0.3.0"', 'version = "0.3.1"', 1))
    result = release(packages, "check")
    assert result.returncode == 1
    assert "pins tinax-core[debug]==0.3.0, but tinax-core is at 0.3.1" in result.stderr


def test_a_missing_member_pin_fails_the_check(packages):
    add_member(packages, "tinax-core>=0.3.0,<0.4")
    result = release(packages, "check")
    assert result.returncode == 1
    assert "no pin for tinax-extra" in result.stderr
    assert release(packages, "sync-meta").returncode == 0
    assert "tinax-extra==0.3.0" in project(packages, "tinax-meta")["dependencies"]
    assert release(packages, "check").returncode == 0


def test_a_sibling_range_that_excludes_core_fails_the_check(packages):
    add_member(packages, "tinax-core>=0.2,<0.3")
    release(packages, "sync-meta")
    result = release(packages, "check")
    assert result.returncode == 1
    assert "does not admit tinax-core 0.3.0" in result.stderr


def test_exact_third_party_pins_fail_the_check(packages):
    path = packages / "tinax-core" / "pyproject.toml"
    path.write_text(path.read_text().replace('"jax>=0.10.2,<0.13"', '"jax==0.10.2"'))
    result = release(packages, "check")
    assert result.returncode == 1
    assert "jax==0.10.2 is an exact pin" in result.stderr


def test_bump_rewrites_the_version_and_every_pin_naming_it(packages):
    add_member(packages, "tinax-core>=0.3.0,<0.4")
    release(packages, "sync-meta")
    result = release(packages, "bump", "tinax-core", "minor")
    assert result.returncode == 0, result.stderr
    assert project(packages, "tinax-core")["version"] == "0.4.0"
    assert "tinax-core>=0.4.0,<0.5" in project(packages, "tinax-extra")["dependencies"]
    assert "tinax-core[debug]==0.4.0" in project(packages, "tinax-meta")["dependencies"]
    assert "## 0.4.0 (unreleased)" in (packages / "tinax-core" / "CHANGELOG.md").read_text()
    assert release(packages, "check").returncode == 0


def test_a_patch_bump_keeps_sibling_ranges(packages):
    assert release(packages, "bump", "tinax-core", "patch").returncode == 0
    assert project(packages, "tinax-core")["version"] == "0.3.1"
    assert "tinax-core[debug]==0.3.1" in project(packages, "tinax-meta")["dependencies"]
    assert release(packages, "check").returncode == 0


def test_bump_refuses_unknown_names_and_older_versions(packages):
    assert "unknown distribution" in release(packages, "bump", "tinax-nope", "patch").stderr
    assert "is not newer" in release(packages, "bump", "tinax-core", "0.2.0").stderr


def test_the_meta_offers_the_accelerator_extras_with_the_matching_jax_build(packages):
    extras = project(packages, "tinax-meta")["optional-dependencies"]
    assert extras["gpu"][0] == "tinax-core[gpu]==0.3.0"
    assert extras["gpu"][1].startswith("jax[cuda12]")
    assert extras["tpu"][0] == "tinax-core[tpu]==0.3.0"
    assert extras["tpu"][1].startswith("jax[tpu]")
    assert not any("gpu" in pin or "tpu" in pin for pin in project(packages, "tinax-meta")["dependencies"])


def test_a_bump_rewrites_the_accelerator_extras_too(packages):
    assert release(packages, "bump", "tinax-core", "patch").returncode == 0
    extras = project(packages, "tinax-meta")["optional-dependencies"]
    assert extras["gpu"][0] == "tinax-core[gpu]==0.3.1"
    assert release(packages, "check").returncode == 0
