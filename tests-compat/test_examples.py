"""tinax 0.2's own examples run unchanged under 0.3 and print what they print under 0.2.

0.2's sdist ships its examples under ``examples/`` as a package, run as
``python -m examples.<area>.<name>`` from the sdist's root (the parallel one
asks XLA for 4 CPU devices itself). Each one runs twice, with the same
environment: under the real tinax 0.2, in its own environment, and under ours.
Both must exit 0; ours must print exactly what 0.2 printed on stdout (up to
the patterns in ``VARYING``, numbers that legitimately change between runs,
none so far) and nothing on stderr that 0.2 did not print (a new warning
fails the test).

``TINAX02_SDIST`` names an extracted sdist (``scripts/compat.py`` passes the
one it downloaded); without it the sdist is downloaded and checked against
its pinned sha256.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

SDIST_NAME = "tinax-0.2.0.tar.gz"
#: The same pin as scripts/compat.py.
SDIST_SHA256 = "2ce614e7a7adc298048487f4c21f54270a3fd480fabde07ac3768e4e0fdf6aa8"

#: Every example 0.2's sdist ships (the test checks that the sdist holds exactly these).
EXAMPLES = (
    "examples.array.inspect_and_encode",
    "examples.checkpointing.atomic_save_restore",
    "examples.data.deterministic_pipelines",
    "examples.data.parquet_pipelines",
    "examples.data.records_splits_pipelines",
    "examples.debug.observe_nonfinite",
    "examples.device.runtime_info",
    "examples.grad.value_grad_jacobian_hessian",
    "examples.jit.bounded_and_batched",
    "examples.nn.graph_lifecycle",
    "examples.parallel.mesh_and_shard_map",
    "examples.random.derive_and_split",
    "examples.stdlib.cli_logging",
    "examples.weights.safetensors_roundtrip",
)

#: Per example, regular expressions of stdout text that may differ between runs (timings, addresses).
#: Each match is replaced by "<varies>" on both sides before the comparison.
VARYING: dict[str, tuple[str, ...]] = {}

#: No example may run longer.
EXAMPLE_SECONDS = 300


@dataclass(frozen=True)
class Ran:
    """What one example printed and how it exited."""

    returncode: int
    stdout: str
    stderr: str


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@pytest.fixture(scope="session")
def sdist02(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The root of tinax 0.2's extracted sdist, which holds ``examples/``."""
    given = os.environ.get("TINAX02_SDIST")
    if given:
        return Path(given)
    scratch = tmp_path_factory.mktemp("sdist02")
    subprocess.run(
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
            str(scratch),
            "tinax==0.2.0",
        ],
        check=True,
    )
    archive_path = scratch / SDIST_NAME
    if _sha256(archive_path) != SDIST_SHA256:
        pytest.fail(f"{SDIST_NAME} does not have the pinned sha256 {SDIST_SHA256}")
    with tarfile.open(archive_path) as archive:
        members = [member for member in archive.getmembers() if member.name.startswith("tinax-0.2.0/examples/")]
        archive.extractall(scratch, members=members, filter="data")
    return scratch / "tinax-0.2.0"


def _environment() -> dict[str, str]:
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("VIRTUAL_ENV", "PYTHONPATH", "XLA_", "JAX_", "TINAX"))
    }
    environment.update({"JAX_PLATFORMS": "cpu", "PYTHONHASHSEED": "0"})
    return environment


def _run(python: Path, module: str, root: Path) -> Ran:
    try:
        completed = subprocess.run(
            [str(python), "-m", module],
            cwd=root,
            env=_environment(),
            capture_output=True,
            text=True,
            timeout=EXAMPLE_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        return Ran(-9, str(error.stdout or ""), f"timed out after {EXAMPLE_SECONDS} s\n{error.stderr or ''}")
    return Ran(completed.returncode, completed.stdout, completed.stderr)


@pytest.fixture(scope="session")
def example_runs(sdist02: Path, tinax02_python: Path) -> dict[tuple[str, str], Ran]:
    """Every example, run under 0.2 and under ours, two at a time."""
    tasks = [(side, module) for module in EXAMPLES for side in ("0.2", "0.3")]
    pythons = {"0.2": tinax02_python, "0.3": Path(sys.executable)}
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda task: _run(pythons[task[0]], task[1], sdist02), tasks))
    return dict(zip(tasks, results, strict=True))


def _normalized(module: str, text: str) -> str:
    for pattern in VARYING.get(module, ()):
        text = re.sub(pattern, "<varies>", text)
    return text


def _stderr_lines(text: str) -> set[str]:
    """stderr lines with numbers (timestamps, line numbers, ids) masked, to compare which messages appear."""
    return {re.sub(r"\d+", "N", line.strip()) for line in text.splitlines() if line.strip()}


def test_the_sdist_ships_exactly_the_listed_examples(sdist02: Path) -> None:
    """The list above is the sdist's: no example is left out."""
    found = sorted(
        ".".join(path.relative_to(sdist02).with_suffix("").parts)
        for path in (sdist02 / "examples").rglob("*.py")
        if path.name != "__init__.py"
    )
    assert found == sorted(EXAMPLES)


@pytest.mark.parametrize("module", EXAMPLES)
def test_the_example_of_tinax_02_runs_unchanged_and_prints_what_it_printed_under_02(
    module: str, example_runs: dict[tuple[str, str], Ran]
) -> None:
    """Exit 0 on both, the same stdout, and no stderr line that 0.2 did not print."""
    theirs, ours = example_runs[("0.2", module)], example_runs[("0.3", module)]
    assert theirs.returncode == 0, f"{module} failed under tinax 0.2 itself:\n{theirs.stderr[-4000:]}"
    assert ours.returncode == 0, f"{module} failed under tinax 0.3 (exit {ours.returncode}):\n{ours.stderr[-4000:]}"
    assert _normalized(module, ours.stdout) == _normalized(module, theirs.stdout), (
        f"{module} printed something else under 0.3:\n--- 0.2\n{theirs.stdout}\n--- 0.3\n{ours.stdout}"
    )
    new = sorted(_stderr_lines(ours.stderr) - _stderr_lines(theirs.stderr))
    assert not new, f"{module} printed on stderr under 0.3 what 0.2 did not:\n" + "\n".join(new[:40])
