"""Installs one tinax distribution alone from its wheel and runs its tests there.

  hatch run release:isolation tinax-core            one distribution
  hatch run release:isolation --all                 every member in turn
  hatch run release:floors                          each member against the oldest
                                                    released tinax-core its range admits

For each distribution it:
  1. builds the wheels of every member (and checks none ships tinax/__init__.py);
  2. makes a fresh venv and installs the distribution's third-party
     requirements from the index, then the wheels of the distribution and its
     tinax dependencies by path with --no-deps, so no tinax-* name is ever
     looked up in an index;
  3. asserts that none of the distribution's forbidden packages (its
     [tool.tinax.isolation] forbidden list) is installed;
  4. asserts that its own modules import from the venv and the modules of the
     members it does not depend on do not import at all;
  5. builds the distribution's sdist and runs the tests it ships, from the
     extracted sdist alone, against the installed wheels. The seeded sweeps
     over damaged files (marked ``sweep``) are left out: they test logic, not
     the install, and the README test run has them. The sdist carries
     its own copy of the unpublished test harness (tinax-testing), which its
     pytest settings put on the path, so nothing from the checkout is used.

With --core-floors it runs the same check for every member whose tinax-core
range admits a tinax-core release older than the current one (one with a tag
tinax-core-v<version>), with the oldest such release built from its tag in
place of the current tinax-core. So a floor that says an older tinax-core
works is tested with that real older build.
"""

from __future__ import annotations

import argparse
import email.parser
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "packages"
META_NAME = "tinax"
# The test dependency group, declared once in the root pyproject.toml.
TEST_REQUIREMENTS = [
    str(line) for line in tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]["test"]
]


def uv(*arguments: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "uv", *arguments]
    print("+", " ".join(command[2:]), flush=True)
    return subprocess.run(command, check=True, text=True, **kwargs)  # type: ignore[call-overload, no-any-return]


def _members(published: bool) -> dict[str, pathlib.Path]:
    found = {}
    for pyproject in sorted(PACKAGES.glob("*/pyproject.toml")):
        config = tomllib.loads(pyproject.read_text())
        name = str(canonicalize_name(config["project"]["name"]))
        if name != META_NAME and config.get("tool", {}).get("tinax", {}).get("published", True) == published:
            found[name] = pyproject.parent
    return found


def members() -> dict[str, pathlib.Path]:
    """The published members: each is checked alone."""
    return _members(published=True)


def public_modules(folder: pathlib.Path) -> list[str]:
    source = folder / "src" / "tinax"
    return sorted(f"tinax.{entry.stem}" for entry in source.glob("*.py") if entry.name[0] != "_")


def build_wheels(folders: dict[str, pathlib.Path], output: pathlib.Path) -> dict[str, pathlib.Path]:
    wheels = {}
    for name, folder in folders.items():
        uv("build", "--wheel", "--quiet", "--out-dir", str(output / name), str(folder))
        (wheel,) = (output / name).glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            if "tinax/__init__.py" in archive.namelist():
                raise SystemExit(f"isolation: {wheel.name} ships tinax/__init__.py, which breaks the namespace")
        wheels[name] = wheel
    return wheels


def wheel_requirements(wheel: pathlib.Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        (metadata_name,) = [item for item in archive.namelist() if item.endswith(".dist-info/METADATA")]
        metadata = email.parser.Parser().parsestr(archive.read(metadata_name).decode())
    requirements = [Requirement(line) for line in metadata.get_all("Requires-Dist") or []]
    # Extras are not installed here: the point is the bare distribution.
    return [item for item in requirements if item.marker is None or item.marker.evaluate({"extra": ""})]


def closure(name: str, wheels: dict[str, pathlib.Path]) -> list[str]:
    ordered: list[str] = []
    pending = [name]
    while pending:
        current = pending.pop()
        if current in ordered:
            continue
        ordered.append(current)
        for requirement in wheel_requirements(wheels[current]):
            sibling = str(canonicalize_name(requirement.name))
            if sibling in wheels:
                pending.append(sibling)
            elif sibling.startswith("tinax-"):
                raise SystemExit(f"isolation: {current} requires {sibling}, which is not a member")
    return ordered


def check_distribution(
    name: str,
    folders: dict[str, pathlib.Path],
    wheels: dict[str, pathlib.Path],
) -> None:
    """Checks ``name`` alone, then runs the tests of its sdist against its installed wheels."""
    folder = folders[name]
    config = tomllib.loads((folder / "pyproject.toml").read_text())
    forbidden = [
        str(canonicalize_name(item))
        for item in config.get("tool", {}).get("tinax", {}).get("isolation", {}).get("forbidden", [])
    ]
    installed_members = closure(name, wheels)
    print(f"\n== isolation: {name} (with {', '.join(installed_members[1:]) or 'no other members'}) ==", flush=True)
    with tempfile.TemporaryDirectory(prefix=f"isolation-{name}-") as scratch:
        venv = pathlib.Path(scratch) / "venv"
        uv("venv", "--quiet", "--python", sys.executable, str(venv))
        python = str(venv / "bin" / "python")
        third_party = sorted(
            {
                str(requirement)
                for member in installed_members
                for requirement in wheel_requirements(wheels[member])
                if not str(canonicalize_name(requirement.name)).startswith("tinax-")
            }
        )
        uv("pip", "install", "--quiet", "--python", python, *third_party, *TEST_REQUIREMENTS)
        uv("pip", "install", "--quiet", "--python", python, "--no-deps", *(str(wheels[m]) for m in installed_members))
        uv("pip", "check", "--python", python)
        listing = uv("pip", "list", "--python", python, "--format", "json", capture_output=True).stdout
        present = {str(canonicalize_name(item["name"])) for item in json.loads(listing)}
        leaked = sorted(present.intersection(forbidden))
        if leaked:
            raise SystemExit(f"isolation: installing {name} alone brought in {', '.join(leaked)}")
        print(f"isolation: none of {', '.join(forbidden) or '(nothing forbidden)'} is installed", flush=True)
        own = [module for member in installed_members for module in public_modules(folders[member])]
        foreign = [
            module
            for member, member_folder in folders.items()
            if member not in installed_members
            for module in public_modules(member_folder)
        ]
        probe = (
            "import importlib, json, sys\n"
            "own, foreign = json.loads(sys.argv[1]), json.loads(sys.argv[2])\n"
            "where = {m: importlib.import_module(m).__file__ for m in own}\n"
            "missing = []\n"
            "for m in foreign:\n"
            "    try:\n"
            "        importlib.import_module(m)\n"
            "    except ModuleNotFoundError:\n"
            "        missing.append(m)\n"
            "print(json.dumps({'where': where, 'importable_foreign': sorted(set(foreign) - set(missing))}))\n"
        )
        report = json.loads(
            subprocess.run(
                [python, "-c", probe, json.dumps(own), json.dumps(foreign)],
                check=True,
                capture_output=True,
                text=True,
                cwd=scratch,
            ).stdout
        )
        outside = {module: path for module, path in report["where"].items() if not path.startswith(str(venv))}
        if outside:
            raise SystemExit(f"isolation: modules imported from outside the venv: {outside}")
        if report["importable_foreign"]:
            raise SystemExit(f"isolation: modules of other members import: {report['importable_foreign']}")
        print(f"isolation: {', '.join(own)} import from the wheel; {', '.join(foreign) or 'no other member'} absent")
        # The bare distribution has no storage extras, so its gs:// and s3:// tests skip here.
        unset = {"PYTHONPATH", "VIRTUAL_ENV", "TINAX_OBJECT_STORE_TESTS"}
        environment = {key: value for key, value in os.environ.items() if key not in unset}
        environment["PATH"] = f"{venv / 'bin'}{os.pathsep}{environment.get('PATH', '')}"
        environment["UV_COMPILE_BYTECODE"] = "1"
        sdist_root = extracted_sdist(folder, pathlib.Path(scratch) / "sdist")
        result = subprocess.run(
            [python, "-m", "pytest", "-q", "-m", "not sweep"], cwd=sdist_root, env=environment, check=False
        )
        if result.returncode == 5:
            raise SystemExit(f"isolation: {name} collected no tests")
        if result.returncode != 0:
            raise SystemExit(f"isolation: {name}'s tests failed against its installed wheel")


def extracted_sdist(folder: pathlib.Path, output: pathlib.Path) -> pathlib.Path:
    """Builds the sdist of the member in ``folder`` and extracts it; returns its root folder."""
    uv("build", "--sdist", "--quiet", "--out-dir", str(output), str(folder))
    (sdist,) = output.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        archive.extractall(output, filter="data")
    (root,) = [entry for entry in output.iterdir() if entry.is_dir()]
    return root


CORE = "tinax-core"


def core_floor_targets(folders: dict[str, pathlib.Path]) -> dict[str, tuple[Version, str]]:
    """For each member: the oldest tagged tinax-core, older than the current one, that its range admits."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "tag", "--list", f"{CORE}-v*"], capture_output=True, text=True, check=True
    ).stdout.split()
    current = Version(tomllib.loads((folders[CORE] / "pyproject.toml").read_text())["project"]["version"])
    releases = []
    for tag in listed:
        try:
            version = Version(tag.removeprefix(f"{CORE}-v"))
        except InvalidVersion:
            continue
        if version < current:
            releases.append((version, tag))
    targets = {}
    for name, folder in folders.items():
        requirements = [
            Requirement(line)
            for line in tomllib.loads((folder / "pyproject.toml").read_text())["project"].get("dependencies", [])
        ]
        ranges = [item.specifier for item in requirements if canonicalize_name(item.name) == CORE]
        admitted = [item for item in releases if ranges and all(spec.contains(item[0]) for spec in ranges)]
        if admitted:
            targets[name] = min(admitted)
    return targets


def check_core_floors(folders: dict[str, pathlib.Path]) -> list[str]:
    targets = core_floor_targets(folders)
    if not targets:
        print("isolation: no member's range admits an older released tinax-core; nothing to run")
        return []
    with tempfile.TemporaryDirectory(prefix="isolation-floors-") as output:
        scratch = pathlib.Path(output)
        wheels = build_wheels(folders, scratch / "current")
        for tag in sorted({tag for _, tag in targets.values()}):
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", tag, str(folders[CORE].relative_to(ROOT))],
                capture_output=True,
                check=True,
            ).stdout
            tree = scratch / tag
            tree.mkdir()
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
            old_folder = tree / folders[CORE].relative_to(ROOT)
            old_wheels = build_wheels({CORE: old_folder}, scratch / f"{tag}-wheel")
            for name, (version, member_tag) in sorted(targets.items()):
                if member_tag != tag:
                    continue
                print(f"\n== {name} against tinax-core {version}, built from {tag} ==", flush=True)
                check_distribution(name, {**folders, CORE: old_folder}, {**wheels, CORE: old_wheels[CORE]})
    return sorted(targets)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="isolation", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("names", nargs="*", help="distributions to check, e.g. tinax-core")
    parser.add_argument("--all", action="store_true", help="check every member")
    parser.add_argument(
        "--core-floors", action="store_true", help="check members against the oldest released tinax-core they admit"
    )
    arguments = parser.parse_args(argv)
    folders = members()
    if arguments.core_floors:
        checked = check_core_floors(folders)
        if checked:
            print(f"\nisolation: passed against older tinax-core releases for {', '.join(checked)}")
        return 0
    names = list(folders) if arguments.all else [str(canonicalize_name(name)) for name in arguments.names]
    if not names:
        parser.error("name at least one distribution, or pass --all")
    unknown = sorted(set(names) - set(folders))
    if unknown:
        parser.error(f"unknown distributions {unknown}; members are {sorted(folders)}")
    with tempfile.TemporaryDirectory(prefix="isolation-wheels-") as output:
        wheels = build_wheels(folders, pathlib.Path(output))
        for name in names:
            check_distribution(name, folders, wheels)
    print(f"\nisolation: passed for {', '.join(names)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
