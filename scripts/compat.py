"""The drop-in check: tinax 0.2's own test suite, and its artifacts, against our wheels.

  hatch run compat:check            build, install, run 0.2's tests and the cross-version tests
  hatch run compat:check --keep DIR keep the extracted suite and the reports in DIR

It runs in the `compat` environment (Python 3.12 with tinax 0.2's exact
dependency pins) and:
  1. builds the wheel of every member and of the meta distribution, and
     installs them into this environment together with 0.2's pins, so the
     resolver proves that 0.3 installs next to them (the unpublished test
     harness, tinax-testing, comes along: tests-compat uses it);
  2. downloads the `tinax==0.2.0` sdist (version and sha256 pinned) and
     extracts its `tests/` (and the `examples/` that some tests run), redirecting the few import lines that reach a
     public name through one of 0.2's private modules (REDIRECTS below);
  3. runs those tests with `tests-compat/plugin/tinax_compat_plugin.py`, which
     keeps every exception-type check but ignores `match=` wording;
  4. compares the failures with `tests-compat/deviations.toml`: a failure that
     is not listed fails the check, and so does a listed test that now passes,
     so the list can only shrink;
  5. runs `tests-compat/`: 0.2 writes artifacts that we read; the differential
     check runs the same public calls under 0.2 and under ours and compares
     values, types, exceptions and files, allowing only the differences that
     `tests-compat/differential-deviations.toml` lists (test_differential.py);
     and 0.2's own examples run unchanged under ours and print what they
     printed under 0.2 (test_examples.py, given the sdist extracted in step 2).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import re
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import xml.etree.ElementTree as ElementTree

ROOT = pathlib.Path(__file__).resolve().parent.parent
COMPAT = ROOT / "tests-compat"
DEVIATIONS = COMPAT / "deviations.toml"
MIGRATION = ROOT / "MIGRATION.md"
PLUGIN_FOLDER = COMPAT / "plugin"

SDIST_NAME = "tinax-0.2.0.tar.gz"
SDIST_SHA256 = "2ce614e7a7adc298048487f4c21f54270a3fd480fabde07ac3768e4e0fdf6aa8"

#: tinax 0.2's exact dependency pins; 0.3 must install next to them.
PINS_02 = [
    "jax==0.11.0",
    "numpy==2.5.1",
    "flax==0.12.7",
    "orbax-checkpoint==0.12.1",
    "pyarrow==25.0.0",
    "safetensors==0.8.0",
    "grain==0.2.18",
    "chex==0.1.92",
    "optax==0.2.8",
]

#: Import lines of 0.2's tests that reach a public name (or the public module
#: itself) through a private module of 0.2, mapped to the public module.
REDIRECTS = {
    "import tinax.array._conversion as conversion_module": "import tinax.array as conversion_module",
    "import tinax.weights._safetensors as safetensors_module": "import tinax.weights as safetensors_module",
    "import tinax.checkpointing._training as training_module": "import tinax.checkpointing as training_module",
    "from tinax.data._generic import BatchTransform": "from tinax.data import BatchTransform",
}
#: 0.2 private module paths that 0.3 keeps importable (tinax.device aliases it).
KEPT_PRIVATE_PATHS = {"tinax.device._validation"}
_PRIVATE_IMPORT = re.compile(r"^\s*(?:from|import)\s+(tinax\.\w+(?:\.\w+)*\._\w+)", re.MULTILINE)


def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(command), flush=True)
    return subprocess.run(command, text=True, **kwargs)  # type: ignore[call-overload, no-any-return]


def sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def install_our_wheels(scratch: pathlib.Path) -> None:
    wheels = scratch / "wheels"
    for pyproject in sorted((ROOT / "packages").glob("*/pyproject.toml")):
        run(
            [
                sys.executable,
                "-m",
                "uv",
                "build",
                "--wheel",
                "--quiet",
                "--out-dir",
                str(wheels),
                str(pyproject.parent),
            ],
            check=True,
        )
    built = sorted(str(path) for path in wheels.glob("*.whl"))
    # Every wheel by path, with extras through the meta wheel's pins; no
    # tinax-* name is looked up in the index (it holds the old `tinax`).
    run(
        [
            sys.executable,
            "-m",
            "uv",
            "pip",
            "install",
            "--quiet",
            "--python",
            sys.executable,
            "--reinstall",
            "--no-sources",
            *built,
            *PINS_02,
            "--find-links",
            str(wheels),
        ],
        check=True,
    )


def extract_suite(scratch: pathlib.Path) -> pathlib.Path:
    downloads = scratch / "downloads"
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary=:all:",
            "--disable-pip-version-check",
            "--dest",
            str(downloads),
            "tinax==0.2.0",
        ],
        check=True,
    )
    sdist = downloads / SDIST_NAME
    if sha256(sdist) != SDIST_SHA256:
        raise SystemExit(f"compat: {sdist.name} does not have the pinned sha256 {SDIST_SHA256}")
    suite = scratch / "tinax-0.2.0"
    with tarfile.open(sdist) as archive:
        wanted = [
            member
            for member in archive.getmembers()
            # Some of 0.2's tests run its examples as `python -m examples....`.
            if member.name.startswith(("tinax-0.2.0/tests/", "tinax-0.2.0/examples/"))
            or member.name == "tinax-0.2.0/pyproject.toml"
        ]
        archive.extractall(scratch, members=wanted, filter="data")
    for test_file in sorted((suite / "tests").rglob("*.py")):
        text = test_file.read_text(encoding="utf-8")
        for old, new in REDIRECTS.items():
            text = text.replace(old, new)
        leftover = next(
            (match for match in _PRIVATE_IMPORT.finditer(text) if match.group(1) not in KEPT_PRIVATE_PATHS), None
        )
        if leftover:
            raise SystemExit(
                f"compat: {test_file.name} imports a private 0.2 module with no redirect: {leftover.group(0)!r}"
            )
        test_file.write_text(text, encoding="utf-8")
    return suite


def outcomes(report: pathlib.Path) -> dict[str, str]:
    results = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        classname, name = case.attrib["classname"], case.attrib["name"]
        # A module that failed to import is reported once, under its own name.
        test_id = f"{_relative_module_path(classname)}::{name}" if classname else _relative_module_path(name)
        states = {child.tag for child in case}
        if states & {"failure", "error"}:
            results[test_id] = "failed"
        elif "skipped" in states:
            results[test_id] = "skipped"
        else:
            results[test_id] = "passed"
    return results


def _relative_module_path(dotted: str) -> str:
    """``tests.unit.test_jit`` -> ``unit/test_jit.py`` (ids are relative to 0.2's tests/)."""
    return dotted.removeprefix("tests.").replace(".", "/") + ".py"


def load_deviations() -> dict[str, dict[str, str]]:
    document = tomllib.loads(DEVIATIONS.read_text(encoding="utf-8"))
    migration_sections = {
        line.lstrip("#").strip()
        for line in MIGRATION.read_text(encoding="utf-8").splitlines()
        if line.startswith("## ")
    }
    entries = {}
    for entry in document.get("deviation", []):
        missing = {"test", "reason", "migration"} - entry.keys()
        if missing:
            raise SystemExit(f"compat: a deviation entry lacks {sorted(missing)}: {entry}")
        if entry["migration"] not in migration_sections:
            raise SystemExit(
                f"compat: {entry['test']} names a MIGRATION.md section that does not exist: {entry['migration']!r}"
            )
        entries[entry["test"]] = entry
    return entries


def check_suite(suite: pathlib.Path, pytest_arguments: list[str]) -> bool:
    report = suite / "report.xml"
    environment = {**os.environ, "PYTHONPATH": str(PLUGIN_FOLDER)}
    run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests",
            "-q",
            "-rfE",
            "-p",
            "no:cacheprovider",
            "-p",
            "tinax_compat_plugin",
            "--continue-on-collection-errors",
            f"--junitxml={report}",
            "-o",
            "junit_family=xunit1",
            # 0.2's suite has no time limit of its own; no test of it may hang the run.
            "-o",
            "timeout=600",
            *pytest_arguments,
        ],
        cwd=suite,
        env=environment,
        check=False,
    )
    if not report.exists():
        print("compat: pytest wrote no report", flush=True)
        return False
    results = outcomes(report)
    deviations = load_deviations()
    failed = {test for test, state in results.items() if state == "failed"}
    unlisted = sorted(failed - deviations.keys())
    now_passing = sorted(test for test in deviations if results.get(test) == "passed")
    unknown = sorted(test for test in deviations if test not in results)
    counts = {
        state: sum(1 for value in results.values() if value == state) for state in ("passed", "failed", "skipped")
    }
    print(
        f"compat: tinax 0.2's suite: {len(results)} run, {counts['passed']} passed, "
        f"{counts['failed']} failed ({len(failed & deviations.keys())} listed deviations), {counts['skipped']} skipped",
        flush=True,
    )
    for test in unlisted:
        print(f"compat: FAILED and not listed in deviations.toml: {test}", flush=True)
    for test in now_passing:
        print(f"compat: listed in deviations.toml but passes now (remove the entry): {test}", flush=True)
    for test in unknown:
        print(f"compat: listed in deviations.toml but not in 0.2's suite: {test}", flush=True)
    return not (unlisted or now_passing or unknown)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", type=pathlib.Path, help="work in this folder and keep it")
    parser.add_argument("--skip-install", action="store_true", help="use the tinax wheels already installed")
    parser.add_argument("pytest_arguments", nargs="*", help="passed to pytest for 0.2's suite")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tinax-compat-") as temporary:
        scratch = arguments.keep or pathlib.Path(temporary)
        scratch.mkdir(parents=True, exist_ok=True)
        if not arguments.skip_install:
            install_our_wheels(scratch)
        suite = extract_suite(scratch)
        suite_ok = check_suite(suite, arguments.pytest_arguments)
        artifacts = run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-c",
                str(ROOT / "pytest.ini"),
                "--rootdir",
                str(ROOT),
                str(COMPAT),
                "-q",
                "-rfE",
                "-p",
                "no:cacheprovider",
                # A report of its own beside 0.2's, so that a failure here is listed by name too.
                f"--junitxml={scratch / 'artifacts-report.xml'}",
                "--durations=8",
            ],
            cwd=ROOT,
            # The examples test runs 0.2's examples from the sdist extracted above.
            env={**os.environ, "TINAX02_SDIST": str(suite)},
            check=False,
        )
    if not suite_ok or artifacts.returncode != 0:
        print("compat: FAILED", flush=True)
        return 1
    print("compat: passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
