"""The resume-anywhere demo runs: 2 processes save mid-epoch, 1 process resumes with redeal=True.

The demo (``examples/resume_anywhere.py``) checks every claim it
prints before printing it, so asserting on its lines asserts the behaviour:
every row of the interrupted epoch read exactly once across the two runs, and
final parameters bit-identical to a reference run that re-dealt at the same
step.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

DEMO = pathlib.Path(__file__).resolve().parent.parent / "examples" / "resume_anywhere.py"
RUN_TIMEOUT_SECONDS = 300

EXPECTED_LINES = [
    "2 processes x 4 devices: 3 steps, a checkpoint of step 3, then they stopped with 40 of 64 rows of the epoch "
    "unread",
    "restore without redeal=True refused the checkpoint of 2 processes on 1 process (ValueError)",
    "resumed on 1 process x 8 devices with redeal=True: every row of the epoch seen exactly once",
    "the restored parameters of step 3 equal the reference run's at that step",
    "after 5 more steps the final parameters equal the reference run's, which re-dealt at step 3",
]


@pytest.mark.timeout(RUN_TIMEOUT_SECONDS + 60)
def test_resume_anywhere_demo_reads_every_row_once_and_matches_the_reference_run(tmp_path):
    working_directory = tmp_path / "cwd"
    temporary_directory = tmp_path / "tmp"
    working_directory.mkdir()
    temporary_directory.mkdir()
    # The demo sets the device count of each of its processes itself.
    environment = {key: value for key, value in os.environ.items() if key not in {"JAX_NUM_CPU_DEVICES", "XLA_FLAGS"}}
    environment["TMPDIR"] = str(temporary_directory)
    environment["PYTHONDONTWRITEBYTECODE"] = "1"

    completed = subprocess.run(
        [sys.executable, str(DEMO)],
        cwd=working_directory,
        env=environment,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        check=False,
    )

    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert completed.stdout.splitlines() == EXPECTED_LINES, completed.stdout
    assert list(working_directory.iterdir()) == []
    assert list(temporary_directory.iterdir()) == []
