"""Checks every installed tinax distribution against its RECORD file (standard library only).

A missing or changed file means a broken install: a pip upgrade over the single-distribution
tinax 0.2 removes 0.2's files by its RECORD, and hand edits or half-finished installs change files.
This module's path is one 0.2 never installed, so such a removal cannot delete it.
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import hashlib
import pathlib
import re
import shlex
import sys
from collections.abc import Sequence
from importlib import metadata

__all__ = [
    "DistributionCheck",
    "check_distribution",
    "install_command",
    "installer",
    "repair_command",
    "tinax_distributions",
]

_TINAX_NAME = re.compile(r"^tinax(?:[-_.].+)?$", re.IGNORECASE)
_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True)
class DistributionCheck:
    """One distribution's outcome: ``files`` hashed entries checked, one ``problems`` line per bad file."""

    name: str
    version: str
    files: int
    problems: tuple[str, ...]


def tinax_distributions() -> list[metadata.Distribution]:
    """Returns every installed distribution named ``tinax`` or ``tinax-*``, sorted by name, each once."""
    found: dict[str, metadata.Distribution] = {}
    for distribution in metadata.distributions():
        name = distribution.metadata["Name"] or ""
        if _TINAX_NAME.match(name) and _normalized(name) not in found:
            found[_normalized(name)] = distribution
    return [found[name] for name in sorted(found)]


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


#: The trove classifier that keeps a distribution off every package index.
PRIVATE_CLASSIFIER = "Private :: Do Not Upload"


def installer(distribution: metadata.Distribution | None) -> str | None:
    """The tool that installed ``distribution`` (its ``INSTALLER`` file, lowercased), or None."""
    if distribution is None:
        return None
    try:
        text = distribution.read_text("INSTALLER")
    except OSError:
        return None
    name = (text or "").strip().lower()
    return name or None


def install_command(
    arguments: Sequence[str], distribution: metadata.Distribution | None, *, reinstall: bool = False
) -> str:
    """The install command for this interpreter, by the tool that installed ``distribution``.

    uv installs get ``uv pip install --python INTERPRETER`` (uv has no pip); others get ``python -m pip install``.
    """
    if installer(distribution) == "uv":
        prefix = f"uv pip install --python {shlex.quote(sys.executable)}" + (" --reinstall" if reinstall else "")
    else:
        prefix = "python -m pip install" + (" --force-reinstall" if reinstall else "")
    return " ".join([prefix, *arguments])


def repair_command(distribution: metadata.Distribution) -> str:
    """The command reinstalling exactly this distribution; a private one (a test harness) names its checkout."""
    name = distribution.metadata["Name"] or "?"
    if PRIVATE_CLASSIFIER in (distribution.metadata.get_all("Classifier") or []):
        return f"reinstall {name} from the source checkout it was built from (it is never published to an index)"
    return install_command(["--no-deps", f"{name}=={distribution.version}"], distribution, reinstall=True)


def check_distribution(distribution: metadata.Distribution) -> DistributionCheck:
    """Checks that each file in ``distribution``'s RECORD exists and has the recorded hash."""
    name = distribution.metadata["Name"] or "?"
    version = distribution.version
    record = distribution.read_text("RECORD")
    if record is None:
        return DistributionCheck(name, version, 0, ("its RECORD file is missing, so no file can be checked",))
    problems: list[str] = []
    checked = 0
    # Read the RECORD itself: Distribution.files leaves out missing files on Python 3.12.
    for row in csv.reader(record.splitlines()):
        if len(row) < 2 or not row[1]:
            continue  # the RECORD itself and files compiled after installation carry no hash
        relative, recorded = row[0], row[1]
        mode, _, value = recorded.partition("=")
        checked += 1
        problem = _file_problem(pathlib.Path(str(distribution.locate_file(relative))), mode, value)
        if problem is not None:
            problems.append(f"{relative} {problem}")
    return DistributionCheck(name, version, checked, tuple(problems))


def _file_problem(path: pathlib.Path, mode: str, expected: str) -> str | None:
    try:
        digest = hashlib.new(mode)
    except ValueError:
        return f"has a hash of unknown kind {mode!r} in RECORD"
    try:
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(_CHUNK), b""):
                digest.update(chunk)
    except FileNotFoundError:
        return "is missing"
    except OSError as error:
        return f"cannot be read ({error.strerror})"
    actual = base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode("ascii")
    return None if actual == expected else "differs from the installed file (its hash changed)"
