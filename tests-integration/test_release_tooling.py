"""The version and pin tooling, exercised on a copy of the real distributions.

No test here names a version: each is derived from the distributions' own
pyproject.toml, so a release does not have to edit the tests.
"""

from __future__ import annotations

import datetime
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib

import pytest
from packaging.version import Version

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "release.py"
CORE = tomllib.loads((ROOT / "packages" / "tinax-core" / "pyproject.toml").read_text())["project"]["version"]
CORE_PATCH = f"{Version(CORE).major}.{Version(CORE).minor}.{Version(CORE).micro + 1}"
CORE_MINOR = f"{Version(CORE).major}.{Version(CORE).minor + 1}.0"
CORE_NEXT_RANGE_END = f"{Version(CORE).major}.{Version(CORE).minor + 2}"
CORE_RANGE = f"tinax-core>={CORE},<{Version(CORE).major}.{Version(CORE).minor + 1}"
# Folders of the members marked `[tool.tinax] published = false` (the test harness).
UNPUBLISHED = {
    path.parent.name
    for path in (ROOT / "packages").glob("*/pyproject.toml")
    if tomllib.loads(path.read_text()).get("tool", {}).get("tinax", {}).get("published") is False
}


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


def git(repository: pathlib.Path, *arguments: str) -> str:
    environment = {
        **os.environ,
        "GIT_AUTHOR_NAME": "tinax tests",
        "GIT_AUTHOR_EMAIL": "tests@tinax.invalid",
        "GIT_COMMITTER_NAME": "tinax tests",
        "GIT_COMMITTER_EMAIL": "tests@tinax.invalid",
    }
    return subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false", *arguments],
        cwd=repository,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.fixture
def repository(tmp_path: pathlib.Path) -> pathlib.Path:
    """A git checkout holding a copy of every distribution's release inputs, committed."""
    if shutil.which("hatch") is None:
        pytest.fail("the release tooling edits versions with `hatch version`: run the tests through hatch")
    root = tmp_path / "checkout"
    for pyproject in (ROOT / "packages").glob("*/pyproject.toml"):
        folder = root / "packages" / pyproject.parent.name
        folder.mkdir(parents=True)
        for name in ("pyproject.toml", "CHANGELOG.md", "README.md", "LICENSE"):
            if (pyproject.parent / name).exists():
                shutil.copy(pyproject.parent / name, folder / name)
        if (pyproject.parent / "src").exists():
            shutil.copytree(pyproject.parent / "src", folder / "src", ignore=shutil.ignore_patterns("__pycache__"))
    git(root, "init", "--quiet")
    commit_all(root, "the distributions")
    return root


def commit_all(root: pathlib.Path, message: str) -> None:
    git(root, "add", "--all")
    git(root, "commit", "--quiet", "--message", message)


def date_changelog(root: pathlib.Path, folder: str) -> None:
    """Marks the distribution's current version as released today in its changelog."""
    version = tomllib.loads((root / "packages" / folder / "pyproject.toml").read_text())["project"]["version"]
    path = root / "packages" / folder / "CHANGELOG.md"
    today = datetime.date.today().isoformat()
    path.write_text(path.read_text().replace(f"## {version} (unreleased)", f"## {version} ({today})", 1))


def add_member(packages: pathlib.Path, core_requirement: str) -> None:
    """Adds a minimal member `tinax-extra` that requires tinax-core as given."""
    folder = packages / "tinax-extra"
    folder.mkdir()
    (folder / "pyproject.toml").write_text(
        f'[project]\nname = "tinax-extra"\nversion = "{CORE}"\ndependencies = ["{core_requirement}"]\n'
    )


def project(packages: pathlib.Path, folder: str) -> dict:
    return tomllib.loads((packages / folder / "pyproject.toml").read_text())["project"]


def test_the_repository_is_consistent():
    result = release(ROOT / "packages", "check")
    assert result.returncode == 0, result.stderr
    assert "consistent" in result.stdout


def test_a_stale_meta_pin_fails_the_check(packages):
    path = packages / "tinax-core" / "pyproject.toml"
    path.write_text(path.read_text().replace(f'version = "{CORE}"', f'version = "{CORE_PATCH}"', 1))
    result = release(packages, "check")
    assert result.returncode == 1
    assert f"pins tinax-core[debug]=={CORE}, but tinax-core is at {CORE_PATCH}" in result.stderr


def test_a_missing_member_pin_fails_the_check(packages):
    add_member(packages, CORE_RANGE)
    result = release(packages, "check")
    assert result.returncode == 1
    assert "no pin for tinax-extra" in result.stderr
    assert release(packages, "sync-meta").returncode == 0
    assert f"tinax-extra=={CORE}" in project(packages, "tinax-meta")["dependencies"]
    assert release(packages, "check").returncode == 0


def test_the_unpublished_test_harness_is_never_pinned_nor_required(packages):
    assert sorted(UNPUBLISHED) == ["tinax-testing"]
    result = release(packages, "check")
    assert result.returncode == 0, result.stderr
    assert "tinax-testing" not in result.stdout
    assert "meta pins already match" in release(packages, "sync-meta").stdout
    assert not any(pin.startswith("tinax-testing") for pin in project(packages, "tinax-meta")["dependencies"])
    assert "unknown distribution" in release(packages, "bump", "tinax-testing", "patch").stderr
    # A published member may not require it: users could never install that.
    path = packages / "tinax-weights" / "pyproject.toml"
    path.write_text(path.read_text().replace("dependencies = [", 'dependencies = [\n  "tinax-testing",', 1))
    result = release(packages, "check")
    assert result.returncode == 1
    assert "tinax-weights: depends on tinax-testing, which is not a published member" in result.stderr


def test_a_sibling_range_that_excludes_core_fails_the_check(packages):
    add_member(packages, "tinax-core>=0.0.1,<0.0.2")
    release(packages, "sync-meta")
    result = release(packages, "check")
    assert result.returncode == 1
    assert f"does not admit tinax-core {CORE}" in result.stderr


def test_exact_third_party_pins_fail_the_check(packages):
    path = packages / "tinax-core" / "pyproject.toml"
    path.write_text(path.read_text().replace('"jax>=0.10.2"', '"jax==0.10.2"'))
    result = release(packages, "check")
    assert result.returncode == 1
    assert "jax==0.10.2 is an exact pin" in result.stderr


def test_a_third_party_upper_bound_without_a_test_naming_it_fails_the_check(packages):
    path = packages / "tinax-core" / "pyproject.toml"
    path.write_text(path.read_text().replace('"ml-dtypes>=', '"ml-dtypes<9,>='))
    result = release(packages, "check")
    assert result.returncode == 1
    assert "ml-dtypes" in result.stderr
    assert "upper bound that no test backs" in result.stderr


def test_a_third_party_dependency_without_a_lower_bound_fails_the_check(packages):
    path = packages / "tinax-core" / "pyproject.toml"
    path.write_text(path.read_text().replace('"jax>=0.10.2"', '"jax"'))
    result = release(packages, "check")
    assert result.returncode == 1
    assert "jax needs a lower bound" in result.stderr


def test_bump_rewrites_the_version_and_every_pin_naming_it(repository):
    packages = repository / "packages"
    before = {folder.name: project(packages, folder.name)["version"] for folder in packages.iterdir()}
    result = release(packages, "bump", "tinax-core", "minor")
    assert result.returncode == 0, result.stderr
    assert project(packages, "tinax-core")["version"] == CORE_MINOR
    assert f"## {CORE_MINOR} (unreleased)" in (packages / "tinax-core" / "CHANGELOG.md").read_text()
    new_range = f"tinax-core>={CORE_MINOR},<{CORE_NEXT_RANGE_END}"
    # Every member whose requirement was rewritten is bumped too, and so is
    # the meta distribution whose pins changed.
    dependents = [name for name in before if name not in {"tinax-core", "tinax-meta", *UNPUBLISHED}]
    assert dependents
    # The unpublished harness is neither bumped nor pinned.
    for name in UNPUBLISHED:
        assert (
            project(packages, name)
            == tomllib.loads((ROOT / "packages" / name / "pyproject.toml").read_text())["project"]
        )
    for name in [*dependents, "tinax-meta"]:
        old = Version(before[name])
        assert project(packages, name)["version"] == f"{old.major}.{old.minor}.{old.micro + 1}", name
    for name in dependents:
        assert new_range in project(packages, name)["dependencies"]
        assert f"- Requires `{new_range}`." in (packages / name / "CHANGELOG.md").read_text()
    assert f"tinax-core[debug]=={CORE_MINOR}" in project(packages, "tinax-meta")["dependencies"]
    check = release(packages, "check")
    assert check.returncode == 0, check.stderr


def test_a_patch_bump_keeps_sibling_ranges(repository):
    packages = repository / "packages"
    parallel = project(packages, "tinax-parallel")["version"]
    assert release(packages, "bump", "tinax-core", "patch").returncode == 0
    assert project(packages, "tinax-core")["version"] == CORE_PATCH
    assert project(packages, "tinax-parallel")["version"] == parallel
    assert f"tinax-core[debug]=={CORE_PATCH}" in project(packages, "tinax-meta")["dependencies"]
    assert release(packages, "check").returncode == 0


def test_bump_refuses_unknown_names_and_older_versions(packages):
    assert "unknown distribution" in release(packages, "bump", "tinax-nope", "patch").stderr
    assert "is not newer" in release(packages, "bump", "tinax-core", "0.0.1").stderr


def test_the_meta_offers_the_accelerator_extras_with_the_matching_jax_build(packages):
    extras = project(packages, "tinax-meta")["optional-dependencies"]
    assert extras["gpu"][0] == f"tinax-core[gpu]=={CORE}"
    assert extras["gpu"][1].startswith("jax[cuda12]")
    assert extras["cuda12"] == extras["gpu"]
    assert extras["cuda13"][0] == f"tinax-core[gpu]=={CORE}"
    assert extras["cuda13"][1].startswith("jax[cuda13]")
    assert extras["tpu"][0] == f"tinax-core[tpu]=={CORE}"
    assert extras["tpu"][1].startswith("jax[tpu]")
    assert not any("gpu" in pin or "tpu" in pin for pin in project(packages, "tinax-meta")["dependencies"])


def test_a_bump_rewrites_the_accelerator_extras_too(repository):
    packages = repository / "packages"
    assert release(packages, "bump", "tinax-core", "patch").returncode == 0
    extras = project(packages, "tinax-meta")["optional-dependencies"]
    assert extras["gpu"][0] == f"tinax-core[gpu]=={CORE_PATCH}"
    assert release(packages, "check").returncode == 0


def test_tag_refuses_a_dirty_tree(repository):
    packages = repository / "packages"
    date_changelog(repository, "tinax-core")
    commit_all(repository, "release notes")
    (packages / "tinax-core" / "notes.txt").write_text("not committed")
    result = release(packages, "tag", "tinax-core")
    assert result.returncode == 1
    assert "the working tree is not clean" in result.stderr
    assert git(repository, "tag", "--list") == ""


def test_tag_refuses_a_version_without_a_dated_changelog_entry(repository):
    result = release(repository / "packages", "tag", "core")
    assert result.returncode == 1
    assert f"has no dated entry for {CORE}" in result.stderr
    assert git(repository, "tag", "--list") == ""


def test_tag_refuses_inconsistent_pins(repository):
    packages = repository / "packages"
    path = packages / "tinax-meta" / "pyproject.toml"
    # The pin carries the member's extras, whatever they are.
    stale = re.sub(rf'"tinax-weights(\[[^\]]*\])?=={re.escape(CORE)}"', '"tinax-weights==0.0.1"', path.read_text())
    assert stale != path.read_text()
    path.write_text(stale)
    date_changelog(repository, "tinax-core")
    commit_all(repository, "a stale pin")
    result = release(packages, "tag", "tinax-core")
    assert result.returncode == 1
    assert "not tagging while the pins are inconsistent" in result.stderr
    assert "pins tinax-weights==0.0.1" in result.stderr


def test_a_tagged_distribution_that_changes_must_change_its_version(repository):
    packages = repository / "packages"
    date_changelog(repository, "tinax-core")
    commit_all(repository, "release notes")
    result = release(packages, "tag", "tinax-core")
    assert result.returncode == 0, result.stderr
    assert git(repository, "tag", "--list").split() == [f"tinax-core-v{CORE}"]
    assert release(packages, "check").returncode == 0
    # Only what goes into the artifacts counts: a changelog edit does not.
    (packages / "tinax-core" / "CHANGELOG.md").write_text("# Changelog: tinax-core\n")
    assert release(packages, "check").returncode == 0
    source = packages / "tinax-core" / "src" / "tinax" / "_core" / "validation.py"
    source.write_text(source.read_text() + "\n\ndef added_after_the_release() -> None:\n    pass\n")
    result = release(packages, "check")
    assert result.returncode == 1
    assert f"tinax-core: changed since tinax-core-v{CORE}" in result.stderr
    assert "src/tinax/_core/validation.py" in result.stderr
    assert f"its version is still {CORE}" in result.stderr
    assert release(packages, "bump", "tinax-core", "patch").returncode == 0
    result = release(packages, "check")
    assert result.returncode == 0, result.stderr


def test_meta_pins_that_change_under_an_unchanged_meta_version_fail(repository):
    packages = repository / "packages"
    date_changelog(repository, "tinax-meta")
    commit_all(repository, "release notes")
    assert release(packages, "tag", "tinax").returncode == 0
    # A member's version moves and the pins follow, but the meta's does not.
    path = packages / "tinax-weights" / "pyproject.toml"
    path.write_text(path.read_text().replace(f'version = "{CORE}"', f'version = "{CORE_PATCH}"', 1))
    assert release(packages, "sync-meta").returncode == 0
    result = release(packages, "check")
    assert result.returncode == 1
    assert f"tinax: changed since tinax-v{CORE}" in result.stderr
    assert "packages/tinax-meta/pyproject.toml" in result.stderr


def test_a_floor_that_admits_a_core_without_an_imported_name_fails(repository):
    packages = repository / "packages"
    date_changelog(repository, "tinax-core")
    commit_all(repository, "release notes")
    assert release(packages, "tag", "tinax-core").returncode == 0
    # tinax-core gains a name in a new release; tinax-parallel starts using
    # it but keeps a floor that admits the tagged release without it.
    source = packages / "tinax-core" / "src" / "tinax" / "_core" / "validation.py"
    source.write_text(source.read_text() + "\n\ndef added_after_the_release() -> None:\n    pass\n")
    assert release(packages, "bump", "tinax-core", "patch").returncode == 0
    user = packages / "tinax-parallel" / "src" / "tinax" / "_parallel" / "uses_new_core.py"
    user.write_text("from tinax._core.validation import added_after_the_release\n")
    result = release(packages, "check")
    assert result.returncode == 1
    assert (
        f"tinax-parallel: admits tinax-core {CORE}, which does not provide "
        "tinax._core.validation.added_after_the_release" in result.stderr
    )
    path = packages / "tinax-parallel" / "pyproject.toml"
    path.write_text(path.read_text().replace(CORE_RANGE, CORE_RANGE.replace(f">={CORE}", f">={CORE_PATCH}")))
    assert release(packages, "sync-meta").returncode == 0
    result = release(packages, "check")
    assert result.returncode == 0, result.stderr


def test_a_name_missing_from_the_current_core_fails_without_any_tag(packages):
    shutil.copytree(ROOT / "packages" / "tinax-core" / "src", packages / "tinax-core" / "src")
    (packages / "tinax-parallel" / "src" / "tinax").mkdir(parents=True)
    user = packages / "tinax-parallel" / "src" / "tinax" / "uses_missing.py"
    user.write_text("from tinax._core.validation import no_such_helper\nimport tinax._core.no_such_module\n")
    result = release(packages, "check")
    assert result.returncode == 1
    assert "tinax._core.no_such_module" in result.stderr
    assert "tinax._core.validation.no_such_helper" in result.stderr


def test_no_test_names_a_current_version_of_a_distribution():
    versions = {
        tomllib.loads(path.read_text())["project"]["name"]: tomllib.loads(path.read_text())["project"]["version"]
        for path in (ROOT / "packages").glob("*/pyproject.toml")
    }
    pattern = re.compile(
        "|".join(rf"\b{re.escape(name)}(?:==| |-v){re.escape(version)}\b" for name, version in versions.items())
    )
    folders = [*(ROOT / "packages").glob("*/tests"), ROOT / "tests-integration", ROOT / "tests-compat"]
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in folders
        for path in sorted(folder.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not offenders, f"tests that hardcode a current version (read it from the metadata instead): {offenders}"


def test_an_api_break_needs_a_version_bump_that_allows_it(repository):
    packages = repository / "packages"
    date_changelog(repository, "tinax-core")
    commit_all(repository, "release notes")
    assert release(packages, "tag", "tinax-core").returncode == 0
    assert release(packages, "api").returncode == 0
    # A public function gains a required parameter: callers written for the
    # tagged release break.
    source = packages / "tinax-core" / "src" / "tinax" / "_array" / "_ownership.py"
    text, count = re.subn(r"^def to_numpy\(", "def to_numpy(added_first: int, ", source.read_text(), flags=re.M)
    assert count == 1
    source.write_text(text)
    assert release(packages, "bump", "tinax-core", "patch").returncode == 0
    result = release(packages, "api")
    assert result.returncode == 1
    assert f"tinax-core: breaking API changes since tinax-core-v{CORE}" in result.stderr
    assert "to_numpy" in result.stderr
    date_changelog(repository, "tinax-core")
    commit_all(repository, "a breaking change under a patch bump")
    refused = release(packages, "tag", "tinax-core")
    assert refused.returncode == 1
    assert "not tagging an API break" in refused.stderr
    # Before 1.0 a minor bump allows it.
    assert release(packages, "bump", "tinax-core", "minor").returncode == 0
    result = release(packages, "api")
    assert result.returncode == 0, result.stderr
    assert "may break the API; not compared" in result.stdout
