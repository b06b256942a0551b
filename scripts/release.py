"""Versions and pins of the tinax distributions, kept consistent from one place.

Commands (run through hatch from the repository root):

  hatch run release:check-pins      check every version, range and pin
  hatch run release:bump NAME PART  bump NAME (major, minor, patch or an exact
                                    version) and rewrite every pin naming it
  hatch run release:sync-meta       rewrite the meta distribution's pins from
                                    the members' current versions and extras
  hatch run release:artifacts       build every wheel and sdist, check each
                                    with `twine check --strict` and check that
                                    each carries the license file

A member is any folder under packages/ with a pyproject.toml. The meta
distribution is the one named `tinax`; it pins every member exactly, with each
of the member's extras except `all` (redundant once every extra is named) and
the accelerator extras (`gpu`, `tpu`). Those the meta offers as extras of its
own, as tinax 0.2 did: `tinax[gpu]` pins `tinax-core[gpu]` and adds the CUDA
build of JAX, `tinax[tpu]` the TPU build, within tinax-core's JAX range.
"""

from __future__ import annotations

import argparse
import dataclasses
import email.parser
import pathlib
import subprocess
import sys
import tarfile
import tempfile
import zipfile

import tomlkit
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "packages"
META_NAME = "tinax"
FAMILY_PREFIX = "tinax-"
#: Extras that select an accelerator: the meta offers each one itself, with
#: the JAX build that goes with it, instead of pinning it for every install.
ACCELERATOR_EXTRAS = {"gpu": "cuda12", "tpu": "tpu"}
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


def load_distributions(packages: pathlib.Path = PACKAGES) -> tuple[dict[str, Distribution], Distribution]:
    members: dict[str, Distribution] = {}
    meta: Distribution | None = None
    for pyproject in sorted(packages.glob("*/pyproject.toml")):
        distribution = Distribution(pyproject.parent, tomlkit.parse(pyproject.read_text()))
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
    return [extra for extra in member.extras if extra != "all" and extra not in ACCELERATOR_EXTRAS]


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
        extra: [f"{core.name}[{extra}]=={core.version}", f"jax[{jax_extra}]{jax.specifier}"]
        for extra, jax_extra in ACCELERATOR_EXTRAS.items()
        if extra in core.extras
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
        problems.append(f"{meta.name}: pins {name}, which is not a member under packages/")
    for member in [*members.values(), meta]:
        for requirement in member.requirements:
            name = str(canonicalize_name(requirement.name))
            operators = {specifier.operator for specifier in requirement.specifier}
            if member is meta:
                continue
            if is_family(requirement):
                sibling = members.get(name)
                if sibling is None:
                    problems.append(f"{member.name}: depends on unknown member {name}")
                elif not requirement.specifier.contains(sibling.version, prereleases=True):
                    problems.append(f"{member.name}: range {requirement} does not admit {name} {sibling.version}")
                if not operators & {"<", "<="}:
                    problems.append(f"{member.name}: range {requirement} has no upper bound")
            else:
                if "==" in operators or "===" in operators:
                    problems.append(
                        f"{member.name}: {requirement} is an exact pin; third-party dependencies are ranges"
                    )
                if not operators & {">=", ">", "~="} or not operators & {"<", "<="}:
                    problems.append(f"{member.name}: {requirement} needs both a lower and an upper bound")
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


def bump(members: dict[str, Distribution], meta: Distribution, name: str, part: str) -> None:
    target_name = str(canonicalize_name(name))
    everything = {**members, meta.name: meta}
    if target_name not in everything:
        raise SystemExit(f"release: unknown distribution {name!r}; known: {', '.join(sorted(everything))}")
    target = everything[target_name]
    old = target.version
    new = bumped(old, part)
    if new <= old:
        raise SystemExit(f"release: {target_name} {new} is not newer than {old}")
    target.document["project"]["version"] = str(new)
    target.save()
    print(f"{target_name}: {old} -> {new}")
    changelog = target.folder / "CHANGELOG.md"
    if changelog.exists():
        text = changelog.read_text()
        heading, _, rest = text.partition("\n")
        changelog.write_text(f"{heading}\n\n## {new} (unreleased)\n\n- \n{rest}")
    for member in members.values():
        dependencies = member.document["project"].get("dependencies", [])
        for index, line in enumerate(list(dependencies)):
            requirement = Requirement(str(line))
            if canonicalize_name(requirement.name) != target_name or requirement.specifier.contains(new):
                continue
            extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
            marker = f"; {requirement.marker}" if requirement.marker else ""
            dependencies[index] = f"{target_name}{extras}{sibling_range(new)}{marker}"
            member.save()
            print(f"{member.name}: now requires {dependencies[index]}")
    if target is not meta and sync_meta(members, meta):
        print(f"{meta.name}: pins rewritten; bump {meta.name} too when releasing the new set")


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
    commands.add_parser("artifacts", help="build every wheel and sdist and check them with twine and for a license")
    bump_parser = commands.add_parser("bump", help="bump one distribution and the pins naming it")
    bump_parser.add_argument("name")
    bump_parser.add_argument("part", help="major, minor, patch, or an exact version")
    arguments = parser.parse_args(argv)
    members, meta = load_distributions(arguments.packages)
    if arguments.command == "check":
        problems = check(members, meta)
        for problem in problems:
            print(f"release: {problem}", file=sys.stderr)
        if problems:
            return 1
        listed = ", ".join(f"{member.name} {member.version}" for member in members.values())
        print(f"release: consistent: {listed}; {meta.name} {meta.version} pins them all")
        return 0
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
    bump(members, meta, arguments.name, arguments.part)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
