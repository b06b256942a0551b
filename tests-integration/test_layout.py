"""The monorepo's shape: a PEP 420 namespace spread over separately built members."""

from __future__ import annotations

import ast
import importlib
import pathlib
import tomllib

import pytest

import tinax

ROOT = pathlib.Path(__file__).resolve().parent.parent
RECORD_02 = ROOT / "tests-compat" / "tinax-0.2.0-record.txt"
CONFIGS = {path.parent: tomllib.loads(path.read_text()) for path in (ROOT / "packages").glob("*/pyproject.toml")}
# The test harness (tinax-testing) is marked unpublished and ships no part of
# the tinax namespace.
HARNESS = sorted(
    folder for folder, config in CONFIGS.items() if config.get("tool", {}).get("tinax", {}).get("published") is False
)
MEMBERS = sorted(folder for folder in CONFIGS if folder.name != "tinax-meta" and folder not in HARNESS)


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
    entries = [entry for entry in (member / "src" / "tinax").iterdir() if entry.name != "__pycache__"]
    public_modules = [entry for entry in entries if entry.suffix == ".py" and not entry.name.startswith("_")]
    assert public_modules
    for entry in entries:
        if entry.is_dir() and not entry.name.startswith("_"):
            # Type information only (tinax.checkpointing's stub package):
            # never importable, since a module file beats a folder without
            # __init__.py.
            stubs = [path for path in entry.rglob("*") if path.is_file() and "__pycache__" not in path.parts]
            assert stubs, entry
            assert all(path.suffix == ".pyi" for path in stubs), entry
        elif entry.is_dir():
            # Public names are single-file modules; folders are private
            # implementation packages (a public folder would need an
            # __init__.py at a path tinax 0.2 installed).
            assert (entry / "__init__.py").is_file(), entry
        else:
            assert entry.suffix == ".py" or entry.name == "py.typed", entry


def test_the_namespace_carries_one_pep_561_marker_from_tinax_core():
    markers = sorted(member.name for member in MEMBERS if (member / "src" / "tinax" / "py.typed").is_file())
    assert markers == ["tinax-core"]


@pytest.mark.parametrize("member", MEMBERS, ids=lambda path: path.name)
def test_public_modules_declare_all(member):
    for module in (member / "src" / "tinax").glob("*.py"):
        if not module.name.startswith("_"):
            assert "__all__" in module.read_text(), module


@pytest.mark.parametrize("member", MEMBERS, ids=lambda path: path.name)
def test_no_file_sits_where_tinax_02_installed_one(member):
    # pip removes the old `tinax` by its RECORD after installing the new
    # members (pypa/pip#8509), so any shared path would be deleted by an
    # upgrade. The PEP 561 marker is the one exception: the meta distribution
    # reinstalls it after the removal (tests-compat/test_upgrade.py).
    recorded = set(RECORD_02.read_text(encoding="utf-8").split())
    source = member / "src"
    shipped = {
        path.relative_to(source).as_posix()
        for path in source.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert sorted(shipped & recorded - {"tinax/py.typed"}) == []


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


@pytest.mark.parametrize(
    ("module", "stub"),
    [
        ("tinax.checkpointing", "checkpointing/__init__.pyi"),
        ("tinax.checkpointing.legacy", "checkpointing/legacy/__init__.pyi"),
        ("tinax.checkpointing.legacy.v0", "checkpointing/legacy/v0.pyi"),
    ],
)
def test_stubs_state_the_same_public_names_as_the_modules(module, stub):
    imported = importlib.import_module(module)
    source = ROOT / "packages" / "tinax-checkpointing" / "src" / "tinax" / stub
    tree = ast.parse(source.read_text(encoding="utf-8"))
    stated = {alias.asname for node in tree.body if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert stated == set(imported.__all__)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            origin = importlib.import_module(node.module)
            for alias in node.names:
                assert getattr(origin, alias.name) is getattr(imported, alias.asname), alias.asname


def test_the_test_harness_is_an_unpublished_member_outside_the_namespace():
    assert [folder.name for folder in HARNESS] == ["tinax-testing"]
    (harness,) = HARNESS
    assert not (harness / "src" / "tinax").exists()
    assert (harness / "src" / "tinax_testing" / "__init__.py").is_file()
    meta = CONFIGS[ROOT / "packages" / "tinax-meta"]["project"]
    assert not any(line.startswith("tinax-testing") for line in meta["dependencies"])
    for member in MEMBERS:
        assert not any(line.startswith("tinax-testing") for line in CONFIGS[member]["project"]["dependencies"])
        # Runtime source never imports the harness; only tests do.
        for path in (member / "src").rglob("*.py"):
            assert "tinax_testing" not in path.read_text(encoding="utf-8"), path


def _readme_module_list() -> dict[str, set[str]]:
    """The README's "Modules of each distribution" list: member folder -> module paths under src/."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("### Modules of each distribution", 1)[1].split("\n### ", 1)[0]
    listed: dict[str, set[str]] = {}
    member = None
    for line in section.split("```text", 1)[1].split("```", 1)[0].splitlines():
        if line and not line.startswith(" "):
            member = line.split()[0]
            listed[member] = set()
        elif line.strip():
            assert member is not None, line
            listed[member].add(line.split()[0])
    return listed


def test_the_readme_lists_every_module_of_every_member_once():
    listed = _readme_module_list()
    on_disk = {
        folder.name: {
            path.relative_to(folder / "src").as_posix()
            for path in (folder / "src").rglob("*.py")
            # A private package's __init__.py holds only its docstring.
            if not (path.name == "__init__.py" and path.parent.name.startswith("_"))
        }
        for folder in [*MEMBERS, *HARNESS]
    }
    assert listed == on_disk


@pytest.mark.parametrize("folder", [*MEMBERS, ROOT / "packages" / "tinax-meta"], ids=lambda path: path.name)
def test_every_published_distribution_has_project_urls_and_the_ecosystem_classifiers(folder):
    project = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert {"Homepage", "Documentation", "Source", "Issues", "Changelog"} <= set(project["urls"])
    assert project["urls"]["Changelog"].endswith(f"/packages/{folder.name}/CHANGELOG.md")
    assert {
        "Intended Audience :: Science/Research",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Typing :: Typed",
        "Programming Language :: Python :: 3.13",
    } <= set(project["classifiers"])


def _module_imports() -> dict[str, set[str]]:
    """Each module of every member, with the members' modules it imports (at the top or inside functions)."""
    files: dict[str, pathlib.Path] = {}
    for member in MEMBERS:
        source = member / "src"
        for path in source.rglob("*.py"):
            parts = list(path.relative_to(source).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            files[".".join(parts)] = path
    imports: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                continue
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                # A module importing its own package (or a submodule its parent) is no circle.
                if target and target != name and not name.startswith(f"{target}."):
                    imports[name].add(target)
    return imports


def test_no_member_module_takes_part_in_an_import_circle():
    imports = _module_imports()
    circles: list[list[str]] = []
    # Tarjan's strongly connected components; any with two or more modules is a circle.
    order: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(module: str) -> None:
        order[module] = lowest[module] = len(order)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(imports[module]):
            if imported not in order:
                visit(imported)
                lowest[module] = min(lowest[module], lowest[imported])
            elif imported in on_stack:
                lowest[module] = min(lowest[module], order[imported])
        if lowest[module] == order[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(imports):
        if module not in order:
            visit(module)
    assert len(imports) > 100
    assert circles == []
