"""Versions and pins of the tinax distributions, kept consistent from one place.

Commands (run through hatch from the repository root):

  hatch run release:check-pins      check every version, range and pin
  hatch run release:bump NAME PART  bump NAME (major, minor, patch or an exact
                                    version) and rewrite every pin naming it
  hatch run release:sync-meta       rewrite the meta distribution's pins from
                                    the members' current versions and extras

A member is any folder under packages/ with a pyproject.toml. The meta
distribution is the one named `tinax`; it pins every member exactly, with all
of the member's extras.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys

import tomlkit
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "packages"
META_NAME = "tinax"
FAMILY_PREFIX = "tinax-"


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


def meta_pin(member: Distribution) -> str:
    extras = f"[{','.join(member.extras)}]" if member.extras else ""
    return f"{member.name}{extras}=={member.version}"


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
        if sorted(pin.extras) != member.extras:
            problems.append(
                f"{meta.name}: pins {name} with extras {sorted(pin.extras)}, but {name} offers {member.extras}"
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
    if current == wanted:
        return False
    array = tomlkit.array()
    array.multiline(True)
    array.extend(wanted)
    meta.document["project"]["dependencies"] = array
    meta.save()
    return True


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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="release", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--packages", type=pathlib.Path, default=PACKAGES, help="folder holding the distributions")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check", help="check versions, sibling ranges and meta pins")
    commands.add_parser("sync-meta", help="rewrite the meta pins from the members")
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
    if arguments.command == "sync-meta":
        print("release: meta pins rewritten" if sync_meta(members, meta) else "release: meta pins already match")
        return 0
    bump(members, meta, arguments.name, arguments.part)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
