"""The differential check: the same public calls under the real tinax 0.2 and under 0.3.

``differential/diff_cases_<module>.py`` builds, from a fixed seed, the calls
users make of every public function of 0.2's modules (with arrays of every
dtype, scalars of each kind, empty containers, padding indices, optax and
Flax NNX states, ``jax.eval_shape`` targets, existing and missing paths).
``differential/diff_runner.py`` runs them, one process per module, in 0.2's
own environment and in this one, and records what each call returned (values
bit for bit, dtypes, shardings, the qualified names of container and leaf
types), raised (the names of the exception's MRO) or wrote (file bytes, and
what each release reads back from the other's files).

Every difference must be one that ``differential-deviations.toml`` lists with
its reason and MIGRATION.md section; a listed difference that no longer
occurs fails too, so the list can only shrink. ``TINAX_DIFFERENTIAL_RESULTS``
names a folder of earlier records (``0.2/`` and ``0.3/``) to compare instead
of running the cases again.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
DIFFERENTIAL = HERE / "differential"
if str(DIFFERENTIAL) not in sys.path:
    sys.path.insert(0, str(DIFFERENTIAL))

import diff_compare  # noqa: E402
import diff_orchestrate  # noqa: E402
from diff_runner import MODULES  # noqa: E402

DEVIATIONS = HERE / "differential-deviations.toml"
MIGRATION = HERE.parent / "MIGRATION.md"

#: Every public function (and class) of 0.2 gets at least this many cases.
MINIMUM_CASES = 3


@dataclass(frozen=True)
class Comparison:
    """The records of both sides, the differences found, and the entries that explain them."""

    records: dict[str, dict[str, Any]]
    differences: dict[str, list[diff_compare.Difference]]
    deviations: list[diff_compare.Deviation]
    aliases: list[diff_compare.TypeAlias]
    used_aliases: set[tuple[str, str]]


@pytest.fixture(scope="session")
def differential_records(tinax02_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder with both sides' records (run now, unless TINAX_DIFFERENTIAL_RESULTS names one)."""
    given = os.environ.get("TINAX_DIFFERENTIAL_RESULTS")
    if given:
        return Path(given)
    output = tmp_path_factory.mktemp("differential")
    runs = diff_orchestrate.run_all(tinax02_python, Path(sys.executable), output)
    summary = "\n".join(f"{run.side} {run.module} {run.phase}: exit {run.returncode}, {run.seconds} s" for run in runs)
    print(f"differential check runs:\n{summary}")
    failed = [run for run in runs if run.returncode != 0]
    if failed:
        pytest.fail(
            "a differential runner failed:\n"
            + "\n\n".join(
                f"{run.side} {run.module} {run.phase} (exit {run.returncode}):\n{run.output}" for run in failed
            )
        )
    return output


@pytest.fixture(scope="session")
def comparison(differential_records: Path) -> Comparison:
    """Both sides' records of every module, compared."""
    deviations, aliases = diff_compare.load_deviations(DEVIATIONS)
    matcher = diff_compare.Matcher((alias.v02, alias.v03) for alias in aliases)
    records: dict[str, dict[str, Any]] = {}
    differences: dict[str, list[diff_compare.Difference]] = {}
    for module in MODULES:
        sides = {}
        for side in ("0.2", "0.3"):
            for phase in ("run", "read"):
                path = differential_records / side / f"{module}.{phase}.pkl"
                sides[(side, phase)] = diff_compare.load(path) if path.exists() else None
        if sides[("0.2", "run")] is None or sides[("0.3", "run")] is None:
            pytest.fail(f"no records of module {module} in {differential_records}")
        records[module] = {f"{side}/{phase}": value for (side, phase), value in sides.items()}
        differences[module] = diff_compare.compare_module(
            sides[("0.2", "run")], sides[("0.3", "run")], sides[("0.2", "read")], sides[("0.3", "read")], matcher
        )
    return Comparison(records, differences, deviations, aliases, matcher.used)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_difference_from_tinax_02_is_listed_and_every_listed_one_still_occurs(
    module: str, comparison: Comparison
) -> None:
    """0.3 gives what 0.2 gave for every case of the module, except the listed differences."""
    tinax_module = MODULES[module]
    owned = [
        deviation
        for deviation in comparison.deviations
        if any(diff_compare.owning_module(pattern, MODULES.values()) == tinax_module for pattern in deviation.cases)
    ]
    unexplained, doubly, stale = diff_compare.explain(comparison.differences[module], comparison.deviations, owned)
    problems = [f"not listed in {DEVIATIONS.name}: {difference.line()}" for difference in unexplained]
    problems += [f"listed twice: {line}" for line in doubly]
    problems += [f"listed but no longer found (remove it): {deviation.label()}" for deviation in stale]
    assert not problems, f"{len(problems)} problems in {tinax_module}:\n" + "\n".join(problems[:60])


def test_every_listed_type_pair_is_still_met(comparison: Comparison) -> None:
    """A [[type]] entry of the list that no comparison needed any more must go."""
    unused = [alias for alias in comparison.aliases if (alias.v02, alias.v03) not in comparison.used_aliases]
    assert not unused, "type pairs listed but no longer met (remove them): " + ", ".join(
        f"{alias.v02} -> {alias.v03}" for alias in unused
    )


def test_every_entry_of_the_list_names_a_migration_section_that_exists() -> None:
    """The reason of each listed difference is documented in MIGRATION.md, in the section the entry names."""
    deviations, aliases = diff_compare.load_deviations(DEVIATIONS)
    sections = diff_compare.migration_sections(MIGRATION.read_text(encoding="utf-8"))
    missing = sorted(
        {f"{entry.migration!r} ({entry.label()})" for entry in deviations if entry.migration not in sections}
        | {
            f"{alias.migration!r} (type {alias.v02} -> {alias.v03})"
            for alias in aliases
            if alias.migration not in sections
        }
    )
    assert not missing, f"{DEVIATIONS.name} names MIGRATION.md sections that do not exist: {missing}"


def test_every_case_pattern_of_the_list_names_a_module() -> None:
    """Each [[difference]] entry's patterns belong to one of the compared modules."""
    deviations, _ = diff_compare.load_deviations(DEVIATIONS)
    orphans = [
        pattern
        for deviation in deviations
        for pattern in deviation.cases
        if diff_compare.owning_module(pattern, MODULES.values()) is None
    ]
    assert not orphans, f"patterns outside every module: {orphans}"


def test_every_public_function_of_tinax_02_has_cases(comparison: Comparison) -> None:
    """Every public name of 0.2's modules is called, each at least MINIMUM_CASES times."""
    counts: Counter[str] = Counter()
    public: set[str] = set()
    for module, sides in comparison.records.items():
        run02 = sides["0.2/run"]
        public.update(f"{MODULES[module]}.{name}" for name in run02["public_names"])
        for record in run02["cases"]:
            counts[record["function"]] += 1
            for name in record.get("also", ()):
                counts[name] += 1
    missing = sorted(name for name in public if counts[name] == 0)
    few = sorted(f"{name} ({counts[name]})" for name in public if 0 < counts[name] < MINIMUM_CASES)
    assert not missing, f"public functions of tinax 0.2 without a case: {missing}"
    assert not few, f"public functions of tinax 0.2 with fewer than {MINIMUM_CASES} cases: {few}"
    total = sum(counts[name] for name in public)
    print(f"differential check: {len(public)} public names of tinax 0.2, {total} cases")


def test_both_sides_ran_the_same_cases(comparison: Comparison) -> None:
    """The two runs built the same case list from the seed (a different list would compare nothing)."""
    for module, sides in comparison.records.items():
        ids02 = [record["id"] for record in sides["0.2/run"]["cases"]]
        ids03 = [record["id"] for record in sides["0.3/run"]["cases"]]
        assert ids02 == ids03, f"{module}: the sides built different cases"
