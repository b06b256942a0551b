"""Compares what tinax 0.2 and tinax 0.3 gave for the same cases, and the list of explained differences.

The records come from ``diff_runner.py`` (one ``<module>.run.pkl`` per side,
and a ``<module>.read.pkl`` per side for the modules whose cases write files).
A *difference* is one case and one aspect of it:

- ``result``: the call's outcome. Where 0.2 raised class X, 0.3 must raise an
  exception whose MRO holds X (kind ``other-exception`` when it does not,
  ``now-returns`` when 0.3 returned a value); where 0.2 returned, 0.3 must
  return an equal description (kind ``value``, or ``now-raises``);
- ``warnings``: a warning category 0.3 gives that 0.2 did not give for the call;
- ``files``: for a case whose format 0.3 keeps, every file's bytes;
- ``self-read``, ``read-by-0.2`` and ``read-by-0.3``: for a case whose files
  are compared by content, what each release reads from its own files, what
  0.2 reads from ours and what we read from 0.2's, each against what 0.2
  reads from its own.

A value difference is reported once per place (path) where the two
descriptions differ, so that one explained difference does not hide another
in the same result.

``differential-deviations.toml`` lists the explained differences. A
``[[difference]]`` entry names case-id patterns (``fnmatch``), optionally
aspects, kinds and a regular expression of the detail, a reason and the
MIGRATION.md section that documents it; a ``[[type]]`` entry names a type of
0.3 that stands where 0.2 returned another, whose contents are then still
compared. The check fails on a difference no entry explains, on one that two
entries explain, and on an entry that explains nothing any more.
"""

from __future__ import annotations

import fnmatch
import pickle
import re
import tomllib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: What a difference can be about, and the kinds of difference.
ASPECTS = ("result", "warnings", "files", "self-read", "read-by-0.2", "read-by-0.3")
KINDS = ("now-returns", "now-raises", "other-exception", "exit-code", "value", "bytes", "new", "missing")


@dataclass(frozen=True)
class Difference:
    """One case whose aspect differs between the releases."""

    case: str
    aspect: str
    kind: str
    detail: str

    def line(self) -> str:
        """A one-line report."""
        return f"{self.case} [{self.aspect}:{self.kind}] {self.detail}"


@dataclass(frozen=True)
class Deviation:
    """One explained difference of ``differential-deviations.toml``."""

    cases: tuple[str, ...]
    aspects: tuple[str, ...] | None
    kinds: tuple[str, ...] | None
    detail: str | None
    reason: str
    migration: str
    index: int

    def explains(self, difference: Difference) -> bool:
        """Whether this entry covers ``difference``."""
        if self.aspects is not None and difference.aspect not in self.aspects:
            return False
        if self.kinds is not None and difference.kind not in self.kinds:
            return False
        if self.detail is not None and re.search(self.detail, difference.detail) is None:
            return False
        return any(fnmatch.fnmatchcase(difference.case, pattern) for pattern in self.cases)

    def label(self) -> str:
        """How the report names the entry."""
        return f"entry {self.index} ({', '.join(self.cases)})"


class Matcher:
    """Compares descriptions, treating the listed pairs of types as equal, and records which pairs it used.

    ``differences`` walks both descriptions to the end and returns every place where they differ
    (up to ``LIMIT``), so that one explained difference does not hide another in the same result.
    """

    LIMIT = 12

    def __init__(self, aliases: Iterable[tuple[str, str]] = ()) -> None:
        self.aliases = set(aliases)
        self.used: set[tuple[str, str]] = set()

    def differences(self, expected: Any, actual: Any, path: str = "") -> list[str]:
        """Every place (path and values) where two descriptions differ; empty when they are equal."""
        found: list[str] = []
        self._walk(expected, actual, path, found)
        return found

    def _walk(self, expected: Any, actual: Any, path: str, found: list[str]) -> None:
        if len(found) >= self.LIMIT:
            return
        if type(expected) is not type(actual):
            found.append(f"{path or '.'}: {_short(expected)} != {_short(actual)}")
            return
        if isinstance(expected, dict) and expected.get("k") == "raise":
            # A step that raised: 0.3 must raise an instance of 0.2's class.
            if not (actual.get("k") == "raise" and expected["t"] in actual["mro"]):
                found.append(f"{path or '.'}: 0.2 raised {expected['t']}, 0.3 gave {_short(actual)}")
            return
        if isinstance(expected, dict):
            self._walk_mapping(expected, actual, path, found)
            return
        if isinstance(expected, list | tuple):
            if len(expected) != len(actual):
                found.append(f"{path}: length {len(expected)} != {len(actual)}: {_short(expected)} != {_short(actual)}")
                return
            for index, (left, right) in enumerate(zip(expected, actual, strict=True)):
                self._walk(left, right, f"{path}[{index}]", found)
            return
        if expected != actual:
            found.append(_value_difference(expected, actual, path))

    def _walk_mapping(self, expected: dict[str, Any], actual: dict[str, Any], path: str, found: list[str]) -> None:
        label = expected.get("t") or expected.get("k") or ""
        here = f"{path}<{label}>"
        if expected.get("k") == "type" and actual.get("k") == "type" and expected["name"] != actual["name"]:
            pair = (expected["name"], actual["name"])
            if pair in self.aliases:
                self.used.add(pair)
                return
        if "t" in expected and "t" in actual and expected["t"] != actual["t"]:
            pair = (expected["t"], actual["t"])
            if pair not in self.aliases:
                found.append(
                    f"{path or '.'}: type {expected['t']} != {actual['t']}: {_short(expected)} != {_short(actual)}"
                )
                return
            self.used.add(pair)
        if expected.get("k") == "map" and actual.get("k") == "map" and len(expected["items"]) == len(actual["items"]):
            # Entries by key, so that a path reads like the value's own indexing.
            for index, (left, right) in enumerate(zip(expected["items"], actual["items"], strict=True)):
                key = left[0].get("v", index) if isinstance(left[0], dict) else index
                self._walk(left[0], right[0], f"{here}[{key!r}](key)", found)
                self._walk(left[1], right[1], f"{here}[{key!r}]", found)
            return
        for key in sorted(expected.keys() - actual.keys()):
            if key != "message":
                found.append(f"{here}.{key}: only 0.2 has it: {_short(expected[key])}")
        for key in sorted(actual.keys() - expected.keys()):
            if key != "message":
                found.append(f"{here}.{key}: only 0.3 has it: {_short(actual[key])}")
        for key in sorted(expected.keys() & actual.keys()):
            if key == "message":
                continue
            if key == "t":
                continue  # Compared above.
            self._walk(expected[key], actual[key], f"{here}.{key}", found)


def _value_difference(expected: Any, actual: Any, path: str) -> str:
    if isinstance(expected, str | bytes) and len(expected) + len(actual) > 200:
        start = next(
            (index for index, (left, right) in enumerate(zip(expected, actual, strict=False)) if left != right),
            min(len(expected), len(actual)),
        )
        window = slice(max(0, start - 60), start + 120)
        return f"{path or '.'}: differs at {start}: ...{expected[window]!r}... != ...{actual[window]!r}..."
    return f"{path or '.'}: {_short(expected)} != {_short(actual)}"


def _short(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load(path: Path) -> dict[str, Any]:
    """A pickle ``diff_runner.py`` wrote (on either side: it holds builtins only)."""
    return pickle.loads(path.read_bytes())


def compare_outcomes(
    case: str, aspect: str, expected: dict[str, Any], actual: dict[str, Any], matcher: Matcher
) -> list[Difference]:
    """The differences between two recorded outcomes (``result`` of ``run_one``): none when they agree."""
    expected_result, actual_result = expected["result"], actual["result"]
    if expected_result.get("k") == "raise":
        if actual_result.get("k") != "raise":
            return [
                Difference(
                    case,
                    aspect,
                    "now-returns",
                    f"0.2 raised {expected_result['t']}, 0.3 returned {_summary(actual_result)}",
                )
            ]
        if expected_result["t"] not in actual_result["mro"]:
            return [
                Difference(
                    case,
                    aspect,
                    "other-exception",
                    f"0.2 raised {expected_result['t']}, 0.3 raised {actual_result['t']} "
                    f"(MRO {actual_result['mro']}): {actual_result.get('message', '')[:200]!r}",
                )
            ]
        if expected_result.get("code", None) != actual_result.get("code", None):
            return [
                Difference(
                    case,
                    aspect,
                    "exit-code",
                    f"SystemExit code {expected_result.get('code')!r} != {actual_result.get('code')!r}",
                )
            ]
        return []
    if actual_result.get("k") == "raise":
        return [
            Difference(
                case,
                aspect,
                "now-raises",
                f"0.2 returned {_summary(expected_result)}, 0.3 raised {actual_result['t']}: "
                f"{actual_result.get('message', '')[:300]!r}",
            )
        ]
    return [Difference(case, aspect, "value", found) for found in matcher.differences(expected_result, actual_result)]


def _summary(description: Any) -> str:
    text = repr(description)
    return text if len(text) < 200 else text[:197] + "..."


def _warning_categories(record: Mapping[str, Any]) -> list[str]:
    return [warning["category"] for warning in record.get("warnings", [])]


def compare_module(
    run02: Mapping[str, Any],
    run03: Mapping[str, Any],
    read02: Mapping[str, Any] | None = None,
    read03: Mapping[str, Any] | None = None,
    matcher: Matcher | None = None,
) -> list[Difference]:
    """Every difference between the two sides' records of one module."""
    matcher = matcher or Matcher()
    differences: list[Difference] = []
    ours = {record["id"]: record for record in run03["cases"]}
    ours_reading = {record["id"]: record for record in (read03 or {}).get("cases", [])}
    theirs_reading = {record["id"]: record for record in (read02 or {}).get("cases", [])}
    for record in run02["cases"]:
        case = record["id"]
        other = ours.get(case)
        if other is None:
            differences.append(Difference(case, "result", "missing", "0.3's run has no such case"))
            continue
        differences.extend(compare_outcomes(case, "result", record, other, matcher))
        added = Counter(_warning_categories(other)) - Counter(_warning_categories(record))
        if added:
            differences.append(
                Difference(
                    case,
                    "warnings",
                    "new",
                    f"0.3 warned {sorted(added.elements())} where 0.2 did not: {other.get('warnings')}",
                )
            )
        if record.get("files_mode") == "bytes":
            differences.extend(
                Difference(case, "files", "bytes", found)
                for found in matcher.differences(record.get("files"), other.get("files"))
            )
        if "self_read" in record:
            differences.extend(compare_outcomes(case, "self-read", record["self_read"], other["self_read"], matcher))
            if read02 is not None:
                reading = theirs_reading.get(case)
                if reading is None:
                    differences.append(Difference(case, "read-by-0.2", "missing", "0.2 did not read 0.3's files"))
                else:
                    differences.extend(compare_outcomes(case, "read-by-0.2", record["self_read"], reading, matcher))
            if read03 is not None:
                reading = ours_reading.get(case)
                if reading is None:
                    differences.append(Difference(case, "read-by-0.3", "missing", "0.3 did not read 0.2's files"))
                else:
                    differences.extend(compare_outcomes(case, "read-by-0.3", record["self_read"], reading, matcher))
    extra = sorted(ours.keys() - {record["id"] for record in run02["cases"]})
    differences.extend(Difference(case, "result", "missing", "0.2's run has no such case") for case in extra)
    return differences


@dataclass(frozen=True)
class TypeAlias:
    """A pair of types ``differential-deviations.toml`` lists as the same thing, 0.2's and 0.3's."""

    v02: str
    v03: str
    reason: str
    migration: str
    index: int


def load_deviations(path: Path) -> tuple[list[Deviation], list[TypeAlias]]:
    """The ``[[difference]]`` and ``[[type]]`` entries of the list, each checked for its fields."""
    document = tomllib.loads(path.read_text(encoding="utf-8"))
    unknown_tables = document.keys() - {"difference", "type"}
    if unknown_tables:
        raise ValueError(f"{path.name} has unknown tables {sorted(unknown_tables)}")
    entries = []
    for index, entry in enumerate(document.get("difference", [])):
        _check_entry(path, "difference", index, entry, {"cases", "reason", "migration"}, {"aspect", "kind", "detail"})
        cases = entry["cases"]
        if isinstance(cases, str) or not cases:
            raise ValueError(f"{path.name} difference {index}: cases must be a non-empty list of patterns")
        entries.append(
            Deviation(
                tuple(cases),
                _names(entry.get("aspect")),
                _names(entry.get("kind")),
                entry.get("detail"),
                entry["reason"],
                entry["migration"],
                index,
            )
        )
    aliases = []
    for index, entry in enumerate(document.get("type", [])):
        _check_entry(path, "type", index, entry, {"v02", "v03", "reason", "migration"}, set())
        aliases.append(TypeAlias(entry["v02"], entry["v03"], entry["reason"], entry["migration"], index))
    return entries, aliases


def _names(value: str | list[str] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return (value,) if isinstance(value, str) else tuple(value)


def _check_entry(
    path: Path,
    table: str,
    index: int,
    entry: Mapping[str, Any],
    required: set[str],
    optional: set[str],
) -> None:
    missing = required - entry.keys()
    if missing:
        raise ValueError(f"{path.name} {table} {index} lacks {sorted(missing)}")
    unknown = entry.keys() - required - optional
    if unknown:
        raise ValueError(f"{path.name} {table} {index} has unknown fields {sorted(unknown)}")
    for field, known in (("kind", KINDS), ("aspect", ASPECTS)):
        unknown_names = set(_names(entry.get(field)) or ()) - set(known)
        if unknown_names:
            raise ValueError(f"{path.name} {table} {index} has unknown {field} {sorted(unknown_names)}")


def migration_sections(text: str) -> set[str]:
    """The titles of MIGRATION.md's sections (any heading level from ##)."""
    return {line.lstrip("#").strip() for line in text.splitlines() if line.startswith("##")}


def owning_module(pattern: str, tinax_modules: Iterable[str]) -> str | None:
    """The tinax module a case pattern belongs to (the longest ``tinax.<module>.`` prefix), if any."""
    owners = [module for module in tinax_modules if pattern.startswith(module + ".")]
    return max(owners, key=len) if owners else None


def explain(
    differences: Iterable[Difference], deviations: Iterable[Deviation], owned: Iterable[Deviation]
) -> tuple[list[Difference], list[str], list[Deviation]]:
    """Differences no entry explains, those more than one entry explains, and ``owned`` entries that explain none."""
    deviations = list(deviations)
    unexplained: list[Difference] = []
    doubly: list[str] = []
    used: set[int] = set()
    for difference in differences:
        matching = [deviation for deviation in deviations if deviation.explains(difference)]
        if not matching:
            unexplained.append(difference)
        elif len(matching) > 1:
            doubly.append(f"{difference.line()} is explained by {[entry.label() for entry in matching]}")
        used.update(deviation.index for deviation in matching)
    stale = [deviation for deviation in owned if deviation.index not in used]
    return unexplained, doubly, stale
