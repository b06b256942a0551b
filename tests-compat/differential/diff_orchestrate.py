"""Runs the differential cases on both sides: one process per side per module, two at a time.

    python diff_orchestrate.py PYTHON02 PYTHON03 OUTPUT [MODULE ...]

writes OUTPUT/0.2/ and OUTPUT/0.3/ (the records of ``diff_runner.py``) and
prints how long each process took. The modules whose cases write files get a
second pass per side, reading the files the other side wrote. The tests in
``tests-compat/test_differential.py`` call ``run_all``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNNER = HERE / "diff_runner.py"
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from diff_runner import MODULES  # noqa: E402

#: Modules whose cases write files, and so get a second, reading pass.
FILE_MODULES = ("data", "checkpointing", "legacy_v0", "weights")
#: No process may take longer (0.2 waits minutes on some failed Orbax saves; see the cases).
PROCESS_SECONDS = 600
#: The biggest modules first, so that two workers finish together.
ORDER = (
    "grad",
    "checkpointing",
    "debug",
    "array",
    "jit",
    "parallel",
    "data",
    "random",
    "weights",
    "legacy_v0",
    "nn",
    "device",
    "stdlib",
)


@dataclass(frozen=True)
class Run:
    """One process: its side, module, pass, exit status, time and output tail."""

    side: str
    module: str
    phase: str
    returncode: int
    seconds: float
    output: str


def environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of every runner: CPU JAX with 8 devices, a fixed hash seed, nothing inherited that steers JAX."""
    source = dict(os.environ if base is None else base)
    child = {
        key: value
        for key, value in source.items()
        if not key.startswith(("VIRTUAL_ENV", "PYTHONPATH", "XLA_", "JAX_", "TINAX_DIFFERENTIAL_"))
    }
    child.update({"JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "8", "PYTHONHASHSEED": "0"})
    if "TINAX_DIFFERENTIAL_SCALE" in source:
        child["TINAX_DIFFERENTIAL_SCALE"] = source["TINAX_DIFFERENTIAL_SCALE"]
    return child


def _run(python: Path, side: str, module: str, output: Path, other: Path | None) -> Run:
    command = [str(python), str(RUNNER), module, str(output)]
    if other is not None:
        command += ["--read-other", str(other)]
    started = time.perf_counter()
    try:
        completed = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=environment(),
            cwd=output,
            timeout=PROCESS_SECONDS,
            check=False,
        )
        returncode, text = completed.returncode, completed.stdout + completed.stderr
    except subprocess.TimeoutExpired as error:
        returncode = -9
        text = f"timed out after {PROCESS_SECONDS} s\n" + str(error.stderr or "")[-4000:]
    return Run(
        side, module, "read" if other else "run", returncode, round(time.perf_counter() - started, 1), text[-6000:]
    )


def run_all(python02: Path, python03: Path, output: Path, modules: Iterable[str] = ORDER, jobs: int = 2) -> list[Run]:
    """Every module on both sides, then the reading passes; returns what each process did."""
    chosen = [module for module in ORDER if module in set(modules)]
    unknown = set(modules) - set(MODULES)
    if unknown:
        raise ValueError(f"unknown modules: {sorted(unknown)}")
    sides = {"0.2": (python02, output / "0.2"), "0.3": (python03, output / "0.3")}
    for _, folder in sides.values():
        folder.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        runs = list(
            pool.map(
                lambda task: _run(sides[task[0]][0], task[0], task[1], sides[task[0]][1], None),
                [(side, module) for module in chosen for side in sides],
            )
        )
        reading = [(side, module) for module in chosen if module in FILE_MODULES for side in sides]
        runs += list(
            pool.map(
                lambda task: _run(
                    sides[task[0]][0],
                    task[0],
                    task[1],
                    sides[task[0]][1],
                    sides["0.3" if task[0] == "0.2" else "0.2"][1],
                ),
                reading,
            )
        )
    return runs


def main(arguments: Sequence[str]) -> int:
    if len(arguments) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    python02, python03, output = Path(arguments[0]), Path(arguments[1]), Path(arguments[2])
    started = time.perf_counter()
    runs = run_all(python02, python03, output.resolve(), arguments[3:] or ORDER)
    for run in runs:
        print(f"{run.side} {run.module:14} {run.phase:4} exit {run.returncode:3} {run.seconds:6.1f} s")
        if run.returncode != 0:
            print(run.output[-3000:])
    print(f"total {time.perf_counter() - started:.1f} s")
    return 0 if all(run.returncode == 0 for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
