"""Two commands on a fresh machine: ./dev, the README quick start and CI agree."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import tempfile

import pytest

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


def _fake_checkout(tmp_path: pathlib.Path, hatch_status: int) -> pathlib.Path:
    """A copy of ./dev whose pinned hatch is a stand-in that records its arguments."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    (root / "dev").write_text((ROOT / "dev").read_text(encoding="utf-8"), encoding="utf-8")
    (root / "scripts" / "find_python.py").write_text(
        (ROOT / "scripts" / "find_python.py").read_text(encoding="utf-8"), encoding="utf-8"
    )
    version = re.search(r'^HATCH_VERSION="(.+)"$', (ROOT / "dev").read_text(encoding="utf-8"), re.MULTILINE)
    assert version
    tool = root / ".dev" / f"hatch-{version.group(1)}"
    (tool / "bin").mkdir(parents=True)
    (tool / ".installed").touch()
    hatch = tool / "bin" / "hatch"
    hatch.write_text(f'#!/bin/sh\necho "$@" >> "{root}/hatch-calls"\nexit {hatch_status}\n', encoding="utf-8")
    hatch.chmod(0o755)
    return root


def _without_python_312(tmp_path: pathlib.Path) -> dict[str, str]:
    """An environment whose PATH and pyenv offer no Python 3.12 (the system's python3 stays)."""
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    python3 = subprocess.run(
        ["python3", "-c", "import sys; print(sys.executable)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    (bin_folder / "python3").symlink_to(python3)
    return {"PATH": f"{bin_folder}:/usr/bin:/bin", "PYENV_ROOT": str(tmp_path / "no-pyenv"), "HOME": str(tmp_path)}


@pytest.mark.parametrize("suite_status", [0, 1])
def test_dev_test_without_python_312_says_what_it_skips_and_runs_the_rest(tmp_path, suite_status):
    environment = _without_python_312(tmp_path)
    found = subprocess.run(
        ["python3", str(ROOT / "scripts" / "find_python.py"), "3.12"],
        capture_output=True,
        check=False,
        env=environment,
    )
    if found.returncode == 0:
        pytest.skip("this machine has a Python 3.12 outside pyenv")
    root = _fake_checkout(tmp_path, suite_status)
    completed = subprocess.run(
        ["bash", str(root / "dev"), "test"], capture_output=True, text=True, check=False, env=environment, cwd=root
    )
    # The pytest suite and the interop tests ran, the drop-in check did not, and the status is the suite's.
    assert (root / "hatch-calls").read_text().splitlines() == ["run test:pytest", "run interop:test"]
    assert completed.returncode == suite_status
    assert "Traceback" not in completed.stderr
    # One paragraph, said first and last: what was skipped, why, and how to get it.
    first, *_, last = completed.stderr.strip().splitlines()
    assert first == last
    assert "SKIPPING the drop-in check" in first
    assert "Python 3.12" in first
    assert "pyenv install 3.12" in first


def _load_all_tests_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("all_tests", ROOT / "scripts" / "all_tests.py")
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_test_command_runs_the_suite_and_the_drop_in_check():
    hatch = (ROOT / "hatch.toml").read_text(encoding="utf-8")
    assert re.search(r'^all = "python scripts/all_tests.py"$', hatch, re.MULTILINE)
    script = (ROOT / "scripts" / "all_tests.py").read_text(encoding="utf-8")
    assert '[hatch, "run", "compat:check"]' in script
    assert '"-m", "pytest", "-c", "pytest.ini"' in script


@pytest.mark.parametrize(("suite_status", "beside_status", "expected"), [(0, 0, 0), (1, 0, 1), (0, 3, 1), (2, 2, 1)])
def test_side_by_side_fails_when_either_run_fails_and_holds_back_the_second_output(
    tmp_path, capfd, suite_status, beside_status, expected
):
    all_tests = _load_all_tests_script()
    started = tmp_path / "beside-started"
    beside = (
        "import os, pathlib, sys, tempfile;"
        f"pathlib.Path({str(started)!r}).write_text(tempfile.gettempdir());"
        f"print('beside says hello'); sys.exit({beside_status})"
    )
    suite = f"import sys; print('suite says hello', flush=True); sys.exit({suite_status})"
    status = all_tests.run_side_by_side(
        [sys.executable, "-c", suite], [sys.executable, "-c", beside], beside_title="the other run"
    )
    out = capfd.readouterr().out
    assert status == expected
    assert out.index("suite says hello") < out.index("== the other run") < out.index("beside says hello")
    # The second run had a temporary folder of its own, removed afterwards.
    beside_tmp = pathlib.Path(started.read_text(encoding="utf-8"))
    assert beside_tmp != pathlib.Path(tempfile.gettempdir())
    assert not beside_tmp.exists()
