"""Versions and pins of the tinax distributions, kept consistent from one place.

Commands (run through hatch from the repository root):

  hatch run release:check-pins      check every version, range and pin
  hatch run release:bump NAME PART  bump NAME (major, minor, patch or an exact
                                    version) with `hatch version`, rewrite every
                                    pin naming it, and bump each distribution
                                    whose requirements that rewrote
  hatch run release:tag NAME        tag NAME's current version as
                                    NAME-v<version> (for example
                                    tinax-core-v0.3.0), refusing a dirty tree, a
                                    changelog without a dated entry for it, or
                                    any problem check-pins reports
  hatch run release:sync-meta       rewrite the meta distribution's pins from
                                    the members' current versions and extras
  hatch run release:api             compare each distribution's public API
                                    with its last release tag (griffe): a
                                    breaking change fails unless the version
                                    bump since that tag allows it
  hatch run release:artifacts       build every wheel and sdist, check each
                                    with `twine check --strict` and check that
                                    each carries the license file

A member is any folder under packages/ with a pyproject.toml, except those
marked `[tool.tinax] published = false` there (the test harness,
tinax-testing): no command here versions, pins, tags, compares or builds
them, and a published distribution that requires one is reported. The meta
distribution is the one named `tinax`; it pins every member exactly, with each
of the member's extras except `all` (redundant once every extra is named) and
the accelerator extras (`gpu`, `tpu`). Those the meta offers as extras of its
own, as tinax 0.2 did: `tinax[gpu]` pins `tinax-core[gpu]` and adds the CUDA
build of JAX, `tinax[tpu]` the TPU build, within tinax-core's JAX range.

Inside a git checkout, check-pins also compares every distribution with its
last release tag: what goes into its artifacts (src/, README.md, LICENSE, the
[project] table and build configuration of pyproject.toml) may not have
changed while its version stayed the same. And for each member that imports
`tinax._core`, the oldest tinax-core its requirement admits must provide every
name it imports: the tree of that release's tag tinax-core-v<version>, or the
working tree when no older admitted release is tagged.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import email.parser
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile

import tomlkit
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "packages"
META_NAME = "tinax"
FAMILY_PREFIX = "tinax-"
#: The meta's accelerator extras, each as (tinax-core's extra, JAX's extra):
#: the meta offers each one itself, with the JAX build that goes with it,
#: instead of pinning it for every install. `gpu` is 0.2's name for CUDA 12.
ACCELERATOR_EXTRAS = {
    "gpu": ("gpu", "cuda12"),
    "cuda12": ("gpu", "cuda12"),
    "cuda13": ("gpu", "cuda13"),
    "tpu": ("tpu", "tpu"),
}
#: Upper bounds on third-party dependencies, each allowed only with the test
#: that shows the incompatibility it avoids: {name: test id}. Empty while no
#: test shows one.
KNOWN_INCOMPATIBILITIES: dict[str, str] = {}
CORE_NAME = "tinax-core"


@dataclasses.dataclass
class Distribution:
    folder: pathlib.Path
    document: tomlkit.TOMLDocument

    @property
    def pyproject(self) -> pathlib.Path:
        return self.folder / "pyproject.toml"

    @property
    def name(self) -> str:
        return str(canonicalize_name(str(self.document["project"]["name"])))

    @property
    def version(self) -> Version:
        return Version(str(self.document["project"]["version"]))

    @property
    def extras(self) -> list[str]:
        return sorted(str(extra) for extra in self.document["project"].get("optional-dependencies", {}))

    @property
    def requirements(self) -> list[Requirement]:
        return [Requirement(str(line)) for line in self.document["project"].get("dependencies", [])]

    def save(self) -> None:
        self.pyproject.write_text(tomlkit.dumps(self.document))


def is_published(document: dict[str, object]) -> bool:
    """False for a member marked ``[tool.tinax] published = false`` (never uploaded, never pinned)."""
    return document.get("tool", {}).get("tinax", {}).get("published", True) is not False  # type: ignore[attr-defined,no-any-return]


def load_distributions(packages: pathlib.Path = PACKAGES) -> tuple[dict[str, Distribution], Distribution]:
    members: dict[str, Distribution] = {}
    meta: Distribution | None = None
    for pyproject in sorted(packages.glob("*/pyproject.toml")):
        distribution = Distribution(pyproject.parent, tomlkit.parse(pyproject.read_text()))
        if not is_published(distribution.document.unwrap()):
            continue
        if distribution.name == META_NAME:
            meta = distribution
        else:
            members[distribution.name] = distribution
    if meta is None:
        raise SystemExit(f"release: no distribution named {META_NAME!r} under {packages}")
    return members, meta


def is_family(requirement: Requirement) -> bool:
    return str(canonicalize_name(requirement.name)).startswith(FAMILY_PREFIX)


def next_minor(version: Version) -> Version:
    """The first version outside the compatibility range of ``version``."""
    if version.major == 0:
        return Version(f"0.{version.minor + 1}")
    return Version(f"{version.major + 1}")


def sibling_range(version: Version) -> str:
    return f">={version},<{next_minor(version)}"


def meta_pin_extras(member: Distribution) -> list[str]:
    accelerators = {core_extra for core_extra, _ in ACCELERATOR_EXTRAS.values()}
    return [extra for extra in member.extras if extra != "all" and extra not in accelerators]


def meta_pin(member: Distribution) -> str:
    extras = meta_pin_extras(member)
    listed = f"[{','.join(extras)}]" if extras else ""
    return f"{member.name}{listed}=={member.version}"


def meta_accelerator_extras(members: dict[str, Distribution]) -> dict[str, list[str]]:
    """The meta's own `gpu`/`tpu` extras: tinax-core's extra plus the matching JAX build."""
    core = members.get(CORE_NAME)
    if core is None:
        return {}
    (jax,) = [requirement for requirement in core.requirements if canonicalize_name(requirement.name) == "jax"]
    return {
        extra: [f"{core.name}[{core_extra}]=={core.version}", f"jax[{jax_extra}]{jax.specifier}"]
        for extra, (core_extra, jax_extra) in ACCELERATOR_EXTRAS.items()
        if core_extra in core.extras
    }


def check(members: dict[str, Distribution], meta: Distribution) -> list[str]:
    problems: list[str] = []
    pins: dict[str, Requirement] = {}
    for requirement in meta.requirements:
        name = str(canonicalize_name(requirement.name))
        if not is_family(requirement):
            problems.append(f"{meta.name}: depends on {requirement}; the meta distribution only pins tinax members")
            continue
        pins[name] = requirement
    for name, member in members.items():
        pin = pins.pop(name, None)
        if pin is None:
            problems.append(f"{meta.name}: no pin for {name} (run `hatch run release:sync-meta`)")
            continue
        specifiers = list(pin.specifier)
        if len(specifiers) != 1 or specifiers[0].operator != "==" or Version(specifiers[0].version) != member.version:
            problems.append(f"{meta.name}: pins {pin}, but {name} is at {member.version}")
        if sorted(pin.extras) != meta_pin_extras(member):
            problems.append(
                f"{meta.name}: pins {name} with extras {sorted(pin.extras)}, expected {meta_pin_extras(member)}"
            )
    offered = {
        str(extra): [str(line) for line in lines]
        for extra, lines in meta.document["project"].get("optional-dependencies", {}).items()
    }
    if offered != meta_accelerator_extras(members):
        problems.append(
            f"{meta.name}: extras {offered} differ from {meta_accelerator_extras(members)} "
            "(run `hatch run release:sync-meta`)"
        )
    for name in pins:
        problems.append(f"{meta.name}: pins {name}, which is not a published member under packages/")
    for member in [*members.values(), meta]:
        for requirement in member.requirements:
            name = str(canonicalize_name(requirement.name))
            operators = {specifier.operator for specifier in requirement.specifier}
            if member is meta:
                continue
            if is_family(requirement):
                sibling = members.get(name)
                if sibling is None:
                    problems.append(
                        f"{member.name}: depends on {name}, which is not a published member under packages/"
                    )
                elif not requirement.specifier.contains(sibling.version, prereleases=True):
                    problems.append(f"{member.name}: range {requirement} does not admit {name} {sibling.version}")
                if not operators & {"<", "<="}:
                    problems.append(f"{member.name}: range {requirement} has no upper bound")
            else:
                if "==" in operators or "===" in operators:
                    problems.append(
                        f"{member.name}: {requirement} is an exact pin; third-party dependencies are ranges"
                    )
                if not operators & {">=", ">", "~="}:
                    problems.append(f"{member.name}: {requirement} needs a lower bound")
                if operators & {"<", "<="} and name not in KNOWN_INCOMPATIBILITIES:
                    problems.append(
                        f"{member.name}: {requirement} has an upper bound that no test backs; "
                        "cap a dependency only with the test that shows the incompatibility "
                        "(KNOWN_INCOMPATIBILITIES in scripts/release.py)"
                    )
    return problems


def git(root: pathlib.Path, *arguments: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(root), *arguments], capture_output=True, text=True, check=check)


def git_root(packages: pathlib.Path) -> pathlib.Path | None:
    """The top of the git checkout holding ``packages``, or None outside one."""
    if shutil.which("git") is None:
        return None
    found = git(packages, "rev-parse", "--show-toplevel", check=False)
    return pathlib.Path(found.stdout.strip()) if found.returncode == 0 else None


def tag_name(distribution: Distribution) -> str:
    return f"{distribution.name}-v{distribution.version}"


def last_tag(root: pathlib.Path, name: str) -> tuple[str, Version] | None:
    """The release tag of ``name`` with the highest version, if any."""
    tags = git(root, "tag", "--list", f"{name}-v*").stdout.split()
    versions = []
    for tag in tags:
        try:
            versions.append((Version(tag.removeprefix(f"{name}-v")), tag))
        except ValueError:
            continue
    if not versions:
        return None
    version, tag = max(versions)
    return tag, version


def _release_inputs(document: dict[str, object]) -> dict[str, object]:
    """What of a pyproject.toml shapes the artifacts, without the version."""
    project = dict(document.get("project", {}))  # type: ignore[call-overload]
    project.pop("version", None)
    hatch = document.get("tool", {}).get("hatch", {})  # type: ignore[attr-defined]
    return {"project": project, "build": hatch.get("build", {})}


def changed_since(root: pathlib.Path, distribution: Distribution, tag: str) -> list[str]:
    """What of ``distribution``'s release inputs differs between ``tag`` and the working tree."""
    folder = distribution.folder.resolve().relative_to(root.resolve()).as_posix()
    paths = [f"{folder}/src", f"{folder}/README.md", f"{folder}/LICENSE"]
    changed = git(root, "diff", "--name-only", tag, "--", *paths).stdout.split()
    changed += git(root, "ls-files", "--others", "--exclude-standard", "--", *paths).stdout.split()
    old = git(root, "show", f"{tag}:{folder}/pyproject.toml", check=False)
    if old.returncode != 0:
        return [f"{folder}/pyproject.toml (absent at {tag})"]
    if _release_inputs(tomllib.loads(old.stdout)) != _release_inputs(tomllib.loads(distribution.pyproject.read_text())):
        changed.append(f"{folder}/pyproject.toml ([project] or build configuration)")
    return sorted(set(changed))


def _core_imports(folder: pathlib.Path) -> set[tuple[str, str | None]]:
    """``(module, name)`` for every import of ``tinax._core`` in a member's source."""
    found: set[tuple[str, str | None]] = set()
    for path in sorted((folder / "src").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module == "tinax._core" or node.module.startswith("tinax._core."):
                    found.update((node.module, alias.name) for alias in node.names)
            elif isinstance(node, ast.Import):
                found.update(
                    (alias.name, None)
                    for alias in node.names
                    if alias.name == "tinax._core" or alias.name.startswith("tinax._core.")
                )
    return found


def _top_level_names(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def _missing_core_names(imports: set[tuple[str, str | None]], files: dict[str, str]) -> list[str]:
    """The imports that a tinax-core source tree (``src``-relative path to text) does not provide."""

    def module_source(module: str) -> str | None:
        stem = module.replace(".", "/")
        return files.get(f"{stem}.py", files.get(f"{stem}/__init__.py"))

    missing = []
    for module, name in sorted(imports, key=lambda item: (item[0], item[1] or "")):
        source = module_source(module)
        if source is None:
            missing.append(module)
        elif name is not None and name not in _top_level_names(source) and module_source(f"{module}.{name}") is None:
            missing.append(f"{module}.{name}")
    return missing


def _core_files(root: pathlib.Path | None, core: Distribution, tag: str | None) -> dict[str, str]:
    source = core.folder / "src"
    if tag is None:
        return {path.relative_to(source).as_posix(): path.read_text(encoding="utf-8") for path in source.rglob("*.py")}
    assert root is not None
    prefix = source.resolve().relative_to(root.resolve()).as_posix()
    listed = git(root, "ls-tree", "-r", "--name-only", tag, "--", prefix).stdout.split()
    return {
        path.removeprefix(f"{prefix}/"): git(root, "show", f"{tag}:{path}").stdout
        for path in listed
        if path.endswith(".py")
    }


def check_history(members: dict[str, Distribution], meta: Distribution, root: pathlib.Path | None) -> list[str]:
    """The checks that need git: changes since each last tag, and tinax-core floors."""
    problems: list[str] = []
    if root is not None:
        for distribution in [*members.values(), meta]:
            last = last_tag(root, distribution.name)
            if last is None:
                continue
            tag, tagged = last
            if distribution.version < tagged:
                problems.append(f"{distribution.name}: version {distribution.version} is older than its tag {tag}")
            elif distribution.version == tagged:
                changed = changed_since(root, distribution, tag)
                if changed:
                    problems.append(
                        f"{distribution.name}: changed since {tag} ({', '.join(changed)}) but its version is still "
                        f"{distribution.version}; bump it (hatch run release:bump {distribution.name} patch)"
                    )
    core = members.get(CORE_NAME)
    if core is None:
        return problems
    trees: dict[str | None, dict[str, str]] = {}
    core_tags: list[tuple[Version, str | None]] = []
    if root is not None:
        for name in git(root, "tag", "--list", f"{CORE_NAME}-v*").stdout.split():
            try:
                core_tags.append((Version(name.removeprefix(f"{CORE_NAME}-v")), name))
            except ValueError:
                continue
    for member in members.values():
        if member is core:
            continue
        imports = _core_imports(member.folder)
        if not imports:
            continue
        ranges = [
            requirement.specifier
            for requirement in member.requirements
            if canonicalize_name(requirement.name) == CORE_NAME
        ]
        if not ranges:
            problems.append(f"{member.name}: imports tinax._core but does not require tinax-core")
            continue
        # The oldest tinax-core the range admits that exists: a release tag,
        # or the working tree's version (which is what will be released).
        candidates: list[tuple[Version, str | None]] = [
            (version, tag)
            for version, tag in core_tags
            if all(spec.contains(version, prereleases=True) for spec in ranges)
        ]
        if all(spec.contains(core.version, prereleases=True) for spec in ranges):
            candidates.append((core.version, None))
        if not candidates:
            continue  # check() reports a range that admits no tinax-core
        floor, tag = min(candidates, key=lambda item: item[0])
        if tag not in trees:
            trees[tag] = _core_files(root, core, tag)
        missing = _missing_core_names(imports, trees[tag])
        if missing:
            problems.append(
                f"{member.name}: admits tinax-core {floor}, which does not provide {', '.join(missing)}; "
                "raise its tinax-core floor"
            )
    return problems


def breaks_allowed(old: Version, new: Version) -> bool:
    """Whether going from ``old`` to ``new`` may break the API: a major bump, or a minor one before 1.0."""
    if new.major != old.major:
        return new.major > old.major
    return new.major == 0 and new.minor > old.minor


def check_api(members: dict[str, Distribution], root: pathlib.Path | None) -> list[str]:
    """Compares each member's public API with its last tag using griffe's breaking-change check."""
    if root is None:
        return ["the API check compares with release tags, and the packages are not in a git checkout"]
    problems: list[str] = []
    for member in members.values():
        last = last_tag(root, member.name)
        if last is None:
            print(f"release: {member.name}: no release tag yet; no API to compare with")
            continue
        tag, tagged = last
        if breaks_allowed(tagged, member.version):
            print(f"release: {member.name}: {tagged} -> {member.version} may break the API; not compared")
            continue
        source = (member.folder / "src").resolve().relative_to(root.resolve()).as_posix()
        completed = subprocess.run(
            [
                sys.executable,
                "-m",
                "griffe",
                "check",
                "tinax",
                "--search",
                source,
                "--against",
                tag,
                "--format",
                "oneline",
            ],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
        if completed.returncode != 0:
            problems.append(
                f"{member.name}: breaking API changes since {tag}, which {tagged} -> {member.version} does not "
                f"allow (bump the minor version before 1.0, the major one after):\n"
                f"{completed.stdout}{completed.stderr}".rstrip()
            )
        else:
            print(f"release: {member.name}: no breaking API change since {tag}")
    return problems


def sync_meta(members: dict[str, Distribution], meta: Distribution) -> bool:
    wanted = [meta_pin(member) for member in sorted(members.values(), key=lambda item: item.name)]
    current = [str(line) for line in meta.document["project"].get("dependencies", [])]
    wanted_extras = meta_accelerator_extras(members)
    current_extras = {
        str(extra): [str(line) for line in lines]
        for extra, lines in meta.document["project"].get("optional-dependencies", {}).items()
    }
    if current == wanted and current_extras == wanted_extras:
        return False
    meta.document["project"]["dependencies"] = _multiline(wanted)
    extras_table = tomlkit.table()
    for extra, lines in wanted_extras.items():
        extras_table[extra] = _multiline(lines)
    meta.document["project"]["optional-dependencies"] = extras_table
    meta.save()
    return True


def _multiline(lines: list[str]) -> tomlkit.items.Array:
    array = tomlkit.array()
    array.multiline(True)
    array.extend(lines)
    return array


def bumped(version: Version, part: str) -> Version:
    if part == "major":
        return Version(f"{version.major + 1}.0.0")
    if part == "minor":
        return Version(f"{version.major}.{version.minor + 1}.0")
    if part == "patch":
        return Version(f"{version.major}.{version.minor}.{version.micro + 1}")
    return Version(part)


def resolve(members: dict[str, Distribution], meta: Distribution, name: str) -> Distribution:
    """The distribution called ``name`` (``tinax-core``, or just ``core``)."""
    everything = {**members, meta.name: meta}
    wanted = str(canonicalize_name(name))
    for candidate in (wanted, f"{FAMILY_PREFIX}{wanted}"):
        if candidate in everything:
            return everything[candidate]
    raise SystemExit(f"release: unknown distribution {name!r}; known: {', '.join(sorted(everything))}")


def set_version(distribution: Distribution, version: Version, changelog_entry: str) -> None:
    """Sets the version with `hatch version` and opens its changelog section."""
    hatch = shutil.which("hatch")
    if hatch is None:
        raise SystemExit(
            "release: versions are edited with `hatch version`, and no hatch is on PATH; "
            "run this through hatch (hatch run release:bump ...) or ./dev"
        )
    old = distribution.version
    completed = subprocess.run(
        [hatch, "version", str(version)], cwd=distribution.folder, capture_output=True, text=True, check=False
    )
    distribution.document = tomlkit.parse(distribution.pyproject.read_text())
    if completed.returncode != 0 or distribution.version != version:
        raise SystemExit(
            f"release: `hatch version {version}` in {distribution.folder} failed:\n{completed.stdout}{completed.stderr}"
        )
    print(f"{distribution.name}: {old} -> {version}")
    changelog = distribution.folder / "CHANGELOG.md"
    if changelog.exists():
        text = changelog.read_text()
        heading, _, rest = text.partition("\n")
        changelog.write_text(f"{heading}\n\n## {version} (unreleased)\n\n{changelog_entry}\n{rest}")


def bumped_since_release(distribution: Distribution, root: pathlib.Path | None) -> bool:
    """Whether the version is already above the last release tag (a bump not yet released)."""
    last = last_tag(root, distribution.name) if root is not None else None
    return last is not None and distribution.version > last[1]


def bump(members: dict[str, Distribution], meta: Distribution, name: str, part: str, root: pathlib.Path | None) -> None:
    target = resolve(members, meta, name)
    old = target.version
    new = bumped(old, part)
    if new <= old:
        raise SystemExit(f"release: {target.name} {new} is not newer than {old}")
    set_version(target, new, "- ")
    rewritten: list[tuple[Distribution, str]] = []
    for member in members.values():
        dependencies = member.document["project"].get("dependencies", [])
        for index, line in enumerate(list(dependencies)):
            requirement = Requirement(str(line))
            if canonicalize_name(requirement.name) != target.name or requirement.specifier.contains(new):
                continue
            extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
            marker = f"; {requirement.marker}" if requirement.marker else ""
            dependencies[index] = f"{target.name}{extras}{sibling_range(new)}{marker}"
            member.save()
            print(f"{member.name}: now requires {dependencies[index]}")
            rewritten.append((member, str(dependencies[index])))
    # A distribution whose requirements changed is a new release of it too,
    # unless it already carries an unreleased bump.
    for member, requirement in rewritten:
        if bumped_since_release(member, root):
            print(f"{member.name}: {member.version} is not released yet; not bumped again")
        else:
            set_version(member, bumped(member.version, "patch"), f"- Requires `{requirement}`.")
    if target is not meta and sync_meta(members, meta):
        if bumped_since_release(meta, root):
            print(f"{meta.name}: pins rewritten; {meta.version} is not released yet, so not bumped again")
        else:
            set_version(meta, bumped(meta.version, "patch"), f"- Pins {target.name} {new}.")
        sync_meta(members, meta)


def tag(members: dict[str, Distribution], meta: Distribution, name: str, root: pathlib.Path | None) -> str:
    """Tags the current version of one distribution, refusing any inconsistent state."""
    distribution = resolve(members, meta, name)
    if root is None:
        raise SystemExit("release: tags are git tags, and the packages are not in a git checkout")
    status = git(root, "status", "--porcelain").stdout
    if status.strip():
        raise SystemExit(f"release: the working tree is not clean; commit or remove these first:\n{status}")
    version = distribution.version
    changelog = distribution.folder / "CHANGELOG.md"
    dated = re.compile(rf"^## {re.escape(str(version))} \(\d{{4}}-\d{{2}}-\d{{2}}\)\s*$", re.MULTILINE)
    if not changelog.exists() or not dated.search(changelog.read_text()):
        raise SystemExit(
            f"release: {changelog.relative_to(root)} has no dated entry for {version} "
            f"(a heading like '## {version} (YYYY-MM-DD)')"
        )
    problems = check(members, meta) + check_history(members, meta, root)
    if problems:
        raise SystemExit("release: not tagging while the pins are inconsistent:\n" + "\n".join(problems))
    if distribution is not meta:
        problems = check_api({distribution.name: distribution}, root)
        if problems:
            raise SystemExit("release: not tagging an API break:\n" + "\n".join(problems))
    name_of_tag = tag_name(distribution)
    if git(root, "rev-parse", "--verify", "--quiet", f"refs/tags/{name_of_tag}", check=False).returncode == 0:
        raise SystemExit(f"release: tag {name_of_tag} exists already")
    git(root, "tag", "--annotate", name_of_tag, "--message", f"{distribution.name} {version}")
    print(f"release: tagged {name_of_tag}")
    return name_of_tag


def _artifact_metadata(artifact: pathlib.Path) -> tuple[str, list[str]]:
    """The core metadata text of a wheel or sdist, and the names of its files."""
    if artifact.suffix == ".whl":
        with zipfile.ZipFile(artifact) as archive:
            names = archive.namelist()
            (metadata,) = [name for name in names if name.endswith(".dist-info/METADATA")]
            return archive.read(metadata).decode(), names
    with tarfile.open(artifact) as archive:
        names = archive.getnames()
        (metadata,) = [name for name in names if name.count("/") == 1 and name.endswith("/PKG-INFO")]
        extracted = archive.extractfile(metadata)
        assert extracted is not None
        return extracted.read().decode(), names


def check_artifacts(distributions: list[Distribution], output: pathlib.Path) -> list[str]:
    """Builds each distribution's wheel and sdist into ``output`` and checks them.

    Each artifact must pass ``twine check --strict`` (its README renders as
    its index page), declare a license expression and a License-File, and
    carry every file it names there.
    """
    problems: list[str] = []
    artifacts: list[pathlib.Path] = []
    for distribution in distributions:
        folder = output / distribution.name
        subprocess.run(
            [sys.executable, "-m", "uv", "build", "--quiet", "--out-dir", str(folder), str(distribution.folder)],
            check=True,
        )
        built = sorted([*folder.glob("*.whl"), *folder.glob("*.tar.gz")])
        if len(built) != 2:
            problems.append(f"{distribution.name}: expected one wheel and one sdist, built {[p.name for p in built]}")
        artifacts.extend(built)
    for artifact in artifacts:
        text, names = _artifact_metadata(artifact)
        metadata = email.parser.Parser().parsestr(text)
        if not metadata.get("License-Expression"):
            problems.append(f"{artifact.name}: no License-Expression in its metadata")
        license_files = metadata.get_all("License-File") or []
        if not license_files:
            problems.append(f"{artifact.name}: no License-File in its metadata")
        for license_file in license_files:
            if not any(name.endswith(f"/{license_file}") for name in names):
                problems.append(f"{artifact.name}: names License-File {license_file} but does not carry it")
    twine = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, artifacts)],
        capture_output=True,
        text=True,
        check=False,
    )
    print(twine.stdout, end="")
    if twine.returncode != 0:
        problems.append(f"twine check --strict failed:\n{twine.stdout}{twine.stderr}")
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="release", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--packages", type=pathlib.Path, default=PACKAGES, help="folder holding the distributions")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check", help="check versions, sibling ranges and meta pins")
    commands.add_parser("sync-meta", help="rewrite the meta pins from the members")
    commands.add_parser("api", help="compare each public API with its last tag (griffe)")
    commands.add_parser("artifacts", help="build every wheel and sdist and check them with twine and for a license")
    bump_parser = commands.add_parser("bump", help="bump one distribution and the pins naming it")
    bump_parser.add_argument("name")
    bump_parser.add_argument("part", help="major, minor, patch, or an exact version")
    tag_parser = commands.add_parser("tag", help="tag one distribution's current version")
    tag_parser.add_argument("name")
    arguments = parser.parse_args(argv)
    members, meta = load_distributions(arguments.packages)
    root = git_root(arguments.packages)
    if arguments.command == "check":
        if root is None:
            print("release: not in a git checkout; the checks against release tags are skipped", file=sys.stderr)
        problems = check(members, meta) + check_history(members, meta, root)
        for problem in problems:
            print(f"release: {problem}", file=sys.stderr)
        if problems:
            return 1
        listed = ", ".join(f"{member.name} {member.version}" for member in members.values())
        print(f"release: consistent: {listed}; {meta.name} {meta.version} pins them all")
        return 0
    if arguments.command == "api":
        problems = check_api(members, root)
        for problem in problems:
            print(f"release: {problem}", file=sys.stderr)
        return 1 if problems else 0
    if arguments.command == "artifacts":
        with tempfile.TemporaryDirectory(prefix="tinax-artifacts-") as output:
            problems = check_artifacts([*members.values(), meta], pathlib.Path(output))
        for problem in problems:
            print(f"release: {problem}", file=sys.stderr)
        if problems:
            return 1
        print(f"release: the wheel and sdist of all {len(members) + 1} distributions pass twine and carry a license")
        return 0
    if arguments.command == "sync-meta":
        print("release: meta pins rewritten" if sync_meta(members, meta) else "release: meta pins already match")
        return 0
    if arguments.command == "tag":
        tag(members, meta, arguments.name, root)
        return 0
    bump(members, meta, arguments.name, arguments.part, root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
