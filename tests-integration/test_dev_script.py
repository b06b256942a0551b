"""Two commands on a fresh machine: ./dev, the README quick start and CI agree."""

from __future__ import annotations

import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_quick_start_is_two_dev_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick_start = re.search(r"^## Quick start\n(.*?)^## ", readme, re.MULTILINE | re.DOTALL)
    assert quick_start
    block = re.search(r"```bash\n(.*?)```", quick_start.group(1), re.DOTALL)
    assert block
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.split("#")[0].strip()]
    assert commands == ["./dev demo", "./dev test"]


def test_dev_explains_itself_without_installing_anything(tmp_path):
    completed = subprocess.run(
        ["bash", str(ROOT / "dev"), "--help"], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert completed.returncode == 0, completed.stderr
    assert "./dev demo" in completed.stdout
    assert "./dev test" in completed.stdout
    assert completed.stderr == ""


def test_dev_pins_hatch_inside_the_checkout_and_git_ignores_it():
    script = (ROOT / "dev").read_text(encoding="utf-8")
    assert re.search(r'^HATCH_VERSION="\d+\.\d+\.\d+"$', script, re.MULTILINE)
    assert 'tool="$root/.dev/hatch-$HATCH_VERSION"' in script
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--quiet", ".dev/hatch-0/bin/hatch"], check=False)
    assert ignored.returncode == 0


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r'^step "tests \(README command\)" \./dev test$', ci, re.MULTILINE)
    assert "hatch==" not in ci
