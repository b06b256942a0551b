"""Checks that every published distribution resolves next to the versions users run.

  hatch run release:resolution                 the whole matrix
  hatch run release:resolution --python 3.13   one Python only

For each published member alone (with tinax-core, and every extra but the
accelerator ones) and for the meta distribution, on each supported Python, uv
resolves (without installing anything):

  newest   the member next to the newest release, on that Python, of each
           package in NEWEST: a cap or a floor that shuts one out fails here;
  lowest   the member with its direct dependencies at their lower bounds
           (uv's `lowest-direct`), so no floor names a version that cannot
           be installed;
  0.2      the member next to tinax 0.2's exact pins (Python 3.12 and later,
           which 0.2 required): an upgrade from 0.2 must not downgrade.

Each member's wheel is built once and given to uv by path, so no tinax-* name
is looked up in the index (it holds the single-distribution tinax 0.2). The newest releases are asked of
the index at run time: this check is the one that turns red when an upstream
release shuts tinax out, which is its purpose.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import pathlib
import subprocess
import sys
import tempfile
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "packages"
PYTHONS = ("3.11", "3.12", "3.13")
#: The packages whose newest releases every distribution must install next to.
NEWEST = ("jax", "numpy", "ml-dtypes", "pyarrow", "orbax-checkpoint", "grain", "flax", "safetensors")
#: tinax 0.2's exact dependency pins (the same list as scripts/compat.py).
PINS_02 = (
    "jax==0.11.0",
    "numpy==2.5.1",
    "flax==0.12.7",
    "orbax-checkpoint==0.12.1",
    "pyarrow==25.0.0",
    "safetensors==0.8.0",
    "grain==0.2.18",
    "chex==0.1.92",
    "optax==0.2.8",
)
#: Python versions where tinax 0.2 installs at all.
PYTHONS_02 = ("3.12", "3.13")
ACCELERATOR_EXTRAS = {"gpu", "tpu"}


@dataclasses.dataclass(frozen=True)
class Target:
    """One distribution as uv sees it: its requirement lines, by path."""

    name: str
    lines: tuple[str, ...]
    #: The third-party requirements of the members in ``lines``, repeated as
    #: top-level lines so that uv's `lowest-direct` lowers them (it treats a
    #: wheel's own dependencies as transitive).
    direct: tuple[str, ...]


def _project(folder: pathlib.Path) -> dict[str, object]:
    return tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def build_wheels(folders: list[pathlib.Path], out: pathlib.Path) -> dict[pathlib.Path, pathlib.Path]:
    """Builds each member's wheel into ``out``: {member folder: wheel}."""
    wheels = {}
    for folder in folders:
        before = set(out.glob("*.whl"))
        subprocess.run(
            [sys.executable, "-m", "uv", "build", "--wheel", "--quiet", "--out-dir", str(out), str(folder)],
            check=True,
        )
        (wheel,) = set(out.glob("*.whl")) - before
        wheels[folder] = wheel
    return wheels


def targets(wheels_folder: pathlib.Path) -> list[Target]:
    """Each published member with tinax-core, then the meta with every member."""
    members: dict[str, pathlib.Path] = {}
    meta: pathlib.Path | None = None
    for pyproject in sorted(PACKAGES.glob("*/pyproject.toml")):
        document = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        if document.get("tool", {}).get("tinax", {}).get("published") is False:
            continue
        if document["project"]["name"] == "tinax":
            meta = pyproject.parent
        else:
            members[document["project"]["name"]] = pyproject.parent

    def extras(folder: pathlib.Path) -> list[str]:
        offered = _project(folder)["project"].get("optional-dependencies", {})  # type: ignore[union-attr]
        return sorted(extra for extra in offered if extra != "all" and extra not in ACCELERATOR_EXTRAS)

    wheels = build_wheels([*members.values(), *([meta] if meta else [])], wheels_folder)

    def _by_path(folder: pathlib.Path, extras: list[str]) -> str:
        name = _project(folder)["project"]["name"]  # type: ignore[index]
        listed = f"[{','.join(extras)}]" if extras else ""
        return f"{name}{listed} @ {wheels[folder].resolve().as_uri()}"

    def third_party(folder: pathlib.Path, with_extras: list[str]) -> list[str]:
        project = _project(folder)["project"]
        found = list(project.get("dependencies", []))  # type: ignore[union-attr]
        for extra in with_extras:
            found += project.get("optional-dependencies", {}).get(extra, [])  # type: ignore[union-attr]
        return [line for line in found if not line.startswith("tinax")]

    core = members["tinax-core"]
    found = []
    for name, folder in sorted(members.items()):
        included = {folder: extras(folder)}
        if name != "tinax-core":
            included[core] = []
        lines = tuple(_by_path(member, chosen) for member, chosen in included.items())
        direct = tuple(line for member, chosen in included.items() for line in third_party(member, chosen))
        found.append(Target(name, lines, direct))
    if meta is not None:
        # The meta's pins name members by version; every member is given by path.
        lines = (_by_path(meta, []), *(_by_path(folder, []) for folder in members.values()))
        direct = tuple(line for folder in members.values() for line in third_party(folder, extras(folder)))
        found.append(Target("tinax", lines, direct))
    return found


def uv_compile(lines: list[str], python: str, *options: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as scratch:
        requirements = pathlib.Path(scratch) / "requirements.in"
        requirements.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "uv",
                "pip",
                "compile",
                "--quiet",
                "--no-header",
                "--no-annotate",
                "--python-version",
                python,
                *options,
                str(requirements),
            ],
            capture_output=True,
            text=True,
            check=False,
        )


def newest_releases(python: str) -> list[str]:
    """``name==version`` of the newest release of each NEWEST package on ``python``."""
    pins = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(NEWEST)) as pool:
        answers = list(pool.map(lambda name: uv_compile([name], python), NEWEST))
    for name, resolved in zip(NEWEST, answers, strict=True):
        if resolved.returncode != 0:
            raise SystemExit(f"resolution: cannot find any release of {name} for Python {python}:\n{resolved.stderr}")
        (line,) = [line for line in resolved.stdout.splitlines() if line.lower().startswith(f"{name}==")]
        pins.append(line.strip())
    return pins


@dataclasses.dataclass
class Outcome:
    target: str
    python: str
    mode: str
    ok: bool
    detail: str


def check_one(target: Target, python: str, mode: str, newest: list[str]) -> Outcome:
    if mode == "newest":
        resolved = uv_compile([*target.lines, *newest], python)
    elif mode == "lowest":
        resolved = uv_compile([*target.lines, *target.direct], python, "--resolution", "lowest-direct")
    else:
        resolved = uv_compile([*target.lines, *PINS_02], python)
    if resolved.returncode == 0:
        chosen = {
            line.split("==")[0]: line.split("==")[1]
            for line in resolved.stdout.splitlines()
            if "==" in line and not line.startswith(" ")
        }
        shown = ", ".join(f"{name} {chosen[name]}" for name in ("jax", "numpy", "ml-dtypes") if name in chosen)
        return Outcome(target.name, python, mode, True, shown)
    reason = resolved.stderr.strip().splitlines()
    return Outcome(target.name, python, mode, False, "\n    ".join(reason[-12:]))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="resolution", description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", action="append", choices=PYTHONS, help="only these Pythons (repeatable)")
    arguments = parser.parse_args(argv)
    pythons = arguments.python or list(PYTHONS)
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(pythons)) as pool:
        newest = dict(zip(pythons, pool.map(newest_releases, pythons), strict=True))
    for python in pythons:
        print(f"resolution: newest releases on Python {python}: {', '.join(newest[python])}")
    with tempfile.TemporaryDirectory() as wheels_folder:
        built = targets(pathlib.Path(wheels_folder))
        jobs = [
            (target, python, mode)
            for python in pythons
            for target in built
            for mode in ("newest", "lowest", *(("0.2",) if python in PYTHONS_02 else ()))
        ]
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            outcomes = list(pool.map(lambda job: check_one(*job, newest[job[1]]), jobs))
    failed = [outcome for outcome in outcomes if not outcome.ok]
    for outcome in outcomes:
        mark = "ok  " if outcome.ok else "FAIL"
        print(f"{mark} Python {outcome.python} {outcome.mode:<6} {outcome.target:<20} {outcome.detail}")
    print(f"resolution: {len(outcomes) - len(failed)} of {len(outcomes)} resolutions succeeded")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
