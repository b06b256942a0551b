"""The monorepo's shape: a PEP 420 namespace spread over separately built members."""

from __future__ import annotations

import pathlib
import tomllib

import pytest

import tinax

ROOT = pathlib.Path(__file__).resolve().parent.parent
MEMBERS = sorted(
    path.parent for path in (ROOT / "packages").glob("*/pyproject.toml") if path.parent.name != "tinax-meta"
)


def test_there_are_members():
    assert any(member.name == "tinax-core" for member in MEMBERS)


@pytest.mark.parametrize("member", MEMBERS, ids=lambda path: path.name)
def test_no_member_ships_a_namespace_init(member):
    assert not (member / "src" / "tinax" / "__init__.py").exists()


@pytest.mark.parametrize("member", MEMBERS, ids=lambda path: path.name)
def test_member_layout(member):
    project = tomllib.loads((member / "pyproject.toml").read_text())["project"]
    assert project["name"] == member.name
    assert (member / "CHANGELOG.md").read_text().count(f"## {project['version']}") == 1
    assert (member / "tests").is_dir()
    packages = [
        entry for entry in (member / "src" / "tinax").iterdir() if entry.is_dir() and entry.name != "__pycache__"
    ]
    assert packages
    for package in packages:
        assert (package / "__init__.py").is_file(), package
        assert (package / "py.typed").is_file(), package


@pytest.mark.parametrize("member", MEMBERS, ids=lambda path: path.name)
def test_public_modules_declare_all(member):
    for package in (member / "src" / "tinax").iterdir():
        if package.is_dir() and not package.name.startswith("_"):
            text = (package / "__init__.py").read_text()
            assert "__all__" in text, package


def test_the_namespace_spans_every_member():
    assert not hasattr(tinax, "__file__") or tinax.__file__ is None
    spanned = {pathlib.Path(entry).resolve() for entry in tinax.__path__}
    for member in MEMBERS:
        assert (member / "src" / "tinax").resolve() in spanned, member.name


def test_meta_distribution_has_no_code():
    meta = ROOT / "packages" / "tinax-meta"
    assert not (meta / "src").exists()
    config = tomllib.loads((meta / "pyproject.toml").read_text())
    assert config["project"]["name"] == "tinax"
    assert config["tool"]["hatch"]["build"]["targets"]["wheel"]["bypass-selection"] is True
