"""The main job (`hatch run demo`), run as users run it: a script in a subprocess."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

# The demo runs in a child process here, for up to a minute or more on a loaded machine.
pytestmark = pytest.mark.timeout(900)

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "demo.py"


def run_demo(*flags: str, cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(DEMO), *flags], capture_output=True, text=True, timeout=600, check=False, cwd=cwd
    )


def summary(stdout: str) -> dict[str, str]:
    rows = {}
    for line in stdout.splitlines():
        match = re.match(r"^(\S[\w /-]*?)\s{2,}(\S.*)$", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def test_demo_trains_resumes_bit_identically_and_exports(tmp_path):
    output = tmp_path / "out"
    # A relative output folder, as the default one is: every path inside must work relative to it.
    completed = run_demo("--steps", "24", "--mesh", "4x2", "--output", "out", cwd=tmp_path)
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    rows = summary(completed.stdout)
    assert rows["traces used"] == "1 of 1"
    assert rows["resume bit-identical"] == "yes"
    assert rows["mesh"].startswith("4 x 2 ('data', 'model'), 8 CPU devices")
    assert rows["steps"] == "24 (checkpoint after 12)"
    assert "read back identical: True" in completed.stdout
    assert re.search(r"step\s+24/24\s+loss \d+\.\d+\s+\d+ examples/s", completed.stdout)
    assert (output / "loss.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert (output / "weights" / "model.safetensors").is_file()
    # Saved every 6 steps; the last two and every multiple of the resume step are kept.
    assert rows["retained steps"] == "12, 18, 24"
    # Next to the steps, only the manager's lock file (held while a save and its retention run).
    checkpoints = sorted(entry.name for entry in (output / "checkpoints").iterdir())
    assert checkpoints == ["12", "18", "24", "tinax-manager.lock"]

    refused = run_demo("--steps", "24", "--output", str(output), cwd=tmp_path)
    assert refused.returncode == 2
    assert "exists; choose another or pass --overwrite" in refused.stderr
    assert (output / "loss.png").is_file()


def test_overwrite_replaces_only_a_demo_folder(tmp_path):
    foreign = tmp_path / "precious"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    completed = run_demo("--steps", "4", "--output", str(foreign), "--overwrite", cwd=tmp_path)
    assert completed.returncode == 2
    assert "is not one" in completed.stderr
    assert (foreign / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--steps", "1"], "--steps must be at least 2"),
        (["--steps", "ten"], "invalid int value"),
        (["--mesh", "3"], "expected DATAxMODEL"),
        (["--mesh", "2x3"], "--mesh 2x3: the model axis (3) must divide the hidden width"),
        # With the default batch size the mesh is the user's choice, so the mesh is named.
        (["--mesh", "3x3"], "--mesh 3x3: "),
        (["--mesh", "3x2"], "--mesh 3x2: the data axis (3) must divide the batch size"),
        (["--batch-size", "63"], "--batch-size must be a positive multiple"),
        (["--checkpoint-step", "10", "--steps", "10"], "--checkpoint-step must be in [1, 9]"),
        (["--no-such-flag"], "unrecognized arguments"),
    ],
)
def test_bad_flags_exit_2_with_a_clear_message(tmp_path, flags, message):
    completed = run_demo(*flags, "--output", str(tmp_path / "out"), cwd=tmp_path)
    assert completed.returncode == 2
    assert message in completed.stderr
    if "--mesh" in flags:
        assert "--batch-size must" not in completed.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["file", "below-file"])
@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]], ids=["plain", "overwrite"])
def test_an_output_that_is_a_file_is_a_one_line_error(tmp_path, where, overwrite):
    existing = tmp_path / "results.txt"
    existing.write_text("not a folder")
    output = existing if where == "file" else existing / "run"
    completed = run_demo("--output", str(output), *overwrite, cwd=tmp_path)
    assert completed.returncode == 2
    assert completed.stderr.splitlines() == [f"demo: error: --output {output}: {existing} is a file, not a folder"]
    assert existing.read_text() == "not a folder"
