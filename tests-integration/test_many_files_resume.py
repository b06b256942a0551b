"""The many-files recipe also resumes the other way round: 3 processes stop mid-epoch, 1 process goes on.

``examples/many_files.py`` runs 2 -> 3 processes by default (``test_examples.py`` runs that). Here it runs
with ``--old-processes 3 --new-processes 1``. It checks every claim before printing it, so its printed lines
assert the behaviour: the saved iterator states name the part files of the folder, every row of the epoch is
read exactly once by the two runs, and the parameters equal those of a reference run that re-dealt at the same
step.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

RECIPE = pathlib.Path(__file__).resolve().parent.parent / "examples" / "many_files.py"
RUN_TIMEOUT_SECONDS = 300

EXPECTED_LINES = [
    "3 processes x 2 devices: 3 steps of 12 rows, a checkpoint of step 3, then they stopped with 60 of 96 rows of "
    "the epoch unread",
    "the iterator state each old process saved names the 4 part files, with the size and row count of each",
    "restore without redeal=True refused the checkpoint of 3 processes on 1 process (ValueError)",
    "the restored parameters of step 3 equal the reference run's at that step",
    "after 5 more steps the final parameters equal the reference run's, which re-dealt at step 3",
    "resumed on 1 process with redeal=True from 3: every row of the sharded dataset seen exactly once",
]


# The recipe may take up to RUN_TIMEOUT_SECONDS in its child process.
@pytest.mark.timeout(RUN_TIMEOUT_SECONDS + 60)
def test_many_files_recipe_resumes_three_processes_on_one(tmp_path):
    working_directory = tmp_path / "cwd"
    temporary_directory = tmp_path / "tmp"
    working_directory.mkdir()
    temporary_directory.mkdir()
    # The recipe sets the device count of each of its processes itself.
    environment = {key: value for key, value in os.environ.items() if key not in {"JAX_NUM_CPU_DEVICES", "XLA_FLAGS"}}
    environment["TMPDIR"] = str(temporary_directory)
    environment["PYTHONDONTWRITEBYTECODE"] = "1"

    completed = subprocess.run(
        [sys.executable, str(RECIPE), "--old-processes", "3", "--new-processes", "1"],
        cwd=working_directory,
        env=environment,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        check=False,
    )

    assert completed.returncode == 0, completed.stdout + completed.stderr
    lines = completed.stdout.splitlines()
    for line in EXPECTED_LINES:
        assert line in lines, completed.stdout
    assert lines[-1] == EXPECTED_LINES[-1], completed.stdout
    # Nothing is left where the recipe ran or in the temporary folder.
    assert list(working_directory.iterdir()) == []
    assert list(temporary_directory.iterdir()) == []
