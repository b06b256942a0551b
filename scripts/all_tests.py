"""Every test, as the README's `./dev test` (`hatch run test:all`) runs it.

  hatch run test:all

Two independent lanes share the machine:
  - the pytest suite (every member's tests and tests-integration) on Python
    3.11 in the `test` environment, printed as it goes;
  - beside it, one after the other: the drop-in check against tinax 0.2
    (`hatch run compat:check`) on Python 3.12 in its own environment, then
    the interop tests (`hatch run interop:test`), in which Apache Beam and
    Ray Data write the files tinax-data reads, in an environment of their
    own (hatch.toml says why). Their output is collected into a log and
    printed whole once the suite is done, so the two lanes never interleave.

The lanes run side by side because each keeps about one core busy for most
of its time, and the project's CI machines have two: one after the other they
take the sum of the two, side by side about the longer. Each lane gets a
temporary folder of its own: pytest numbers its `pytest-of-<user>/pytest-N`
folders per user and removes old ones when a session starts, so two sessions
under one TMPDIR could delete each other's files. The exit status is non-zero
when any run fails.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: The slowest tests of the suite, so a run that grows slower shows where.
SLOWEST_SHOWN = 15


def run_side_by_side(suite: list[str], beside: list[str], *, beside_title: str) -> int:
    """Runs `suite` with its output live and `beside` with its output held back.

    Args:
        suite: the command whose output is printed as it goes.
        beside: the command that runs at the same time; its output is printed
            whole after `suite` ends, under `beside_title`.
        beside_title: how the report names `beside`.

    Returns:
        0 when both commands exit 0, else 1.
    """
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="tinax-all-tests-"))
    try:
        beside_tmp = scratch / "tmp"
        beside_tmp.mkdir()
        beside_log_path = scratch / "beside.log"
        with beside_log_path.open("w", encoding="utf-8") as beside_log:
            beside_process = subprocess.Popen(
                beside,
                cwd=ROOT,
                stdout=beside_log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "TMPDIR": str(beside_tmp)},
            )
            print(f"all_tests: {beside_title} runs alongside; its output follows", flush=True)
            try:
                suite_status = subprocess.call(suite, cwd=ROOT)
            finally:
                beside_status = beside_process.wait()
        print(f"\n== {beside_title}")
        print(beside_log_path.read_text(encoding="utf-8", errors="replace"), end="")
        print(f"\nall_tests: pytest suite {'passed' if suite_status == 0 else f'FAILED (exit {suite_status})'}")
        print(f"all_tests: {beside_title} {'passed' if beside_status == 0 else f'FAILED (exit {beside_status})'}")
        return 0 if suite_status == 0 and beside_status == 0 else 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_in_turn(commands: list[tuple[str, list[str]]]) -> int:
    """Runs commands one after the other, each whatever the previous one's outcome.

    Args:
        commands: ``(title, command)`` pairs; each command's output follows
            a heading with its title, and a line with its outcome.

    Returns:
        0 when every command exits 0, else 1.
    """
    failed = False
    for title, command in commands:
        print(f"\n== {title}", flush=True)
        status = subprocess.call(command, cwd=ROOT)
        print(f"\nall_tests: {title} {'passed' if status == 0 else f'FAILED (exit {status})'}", flush=True)
        failed = failed or status != 0
    return 1 if failed else 0


def main(arguments: list[str]) -> int:
    """Runs the pytest suite, and beside it the drop-in check then the interop tests; returns the exit status.

    With ``--beside`` it runs only what goes beside the suite, in turn: how
    the main run starts its second lane.
    """
    hatch = shutil.which("hatch")
    if hatch is None:
        print("all_tests: hatch is not on PATH; run this as `hatch run test:all` or `./dev test`", file=sys.stderr)
        return 2
    if arguments == ["--beside"]:
        return run_in_turn(
            [
                ("the drop-in check against tinax 0.2 (hatch run compat:check)", [hatch, "run", "compat:check"]),
                ("the interop tests, Beam and Ray writing (hatch run interop:test)", [hatch, "run", "interop:test"]),
            ]
        )
    return run_side_by_side(
        [sys.executable, "-m", "pytest", "-c", "pytest.ini", f"--durations={SLOWEST_SHOWN}"],
        [sys.executable, str(pathlib.Path(__file__).resolve()), "--beside"],
        beside_title="the drop-in check against tinax 0.2, then the interop tests (compat:check, interop:test)",
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
