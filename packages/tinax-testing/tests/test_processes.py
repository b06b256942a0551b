"""The multi-process harness: results come back, and failures end the run fast.

Every run here starts real child processes that join one JAX runtime; the
pytest process never does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tinax_testing import DistributedRunError, free_port, run_processes

# Every test here starts real processes; a few of them deliberately hang.
pytestmark = pytest.mark.timeout(600)

_SLEEP_UNLESS_FIRST = """
import os
import time

import jax


def main(action):
    if jax.process_index() == 1:
        if action == "exit":
            os._exit(3)
        if action == "raise":
            raise ValueError("boom from process 1")
        if action == "hang":
            time.sleep(120)
    if action == "unserializable":
        return {1, 2}
    time.sleep(120 if action in ("exit", "raise") else 0)
    return jax.process_index()
"""


def _body_describe(offset: int) -> dict[str, int]:
    import jax

    return {
        "process": jax.process_index() + offset,
        "count": jax.process_count(),
        "local": jax.local_device_count(),
        "global": jax.device_count(),
    }


def _assert_all_reaped(reports: tuple[object, ...]) -> None:
    for report in reports:
        with pytest.raises(ProcessLookupError):
            os.kill(report.pid, 0)  # type: ignore[attr-defined]


# A body that starts a helper process of its own, says so, and hangs.
_HANG_WITH_A_HELPER = """
import subprocess
import sys
import time


def main(pid_file):
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(pid_file, "w") as handle:
        handle.write(str(helper.pid))
    print("child is about to hang", file=sys.stderr, flush=True)
    time.sleep(600)
"""


def _running(pid: int) -> bool:
    # A killed process whose new parent has not reaped it yet is a zombie:
    # it no longer runs.
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    state = next(line for line in status.splitlines() if line.startswith("State:"))
    return "zombie" not in state and "dead" not in state


def test_module_level_function_runs_in_every_process():
    results = run_processes(_body_describe, num_processes=2, devices_per_process=3, args=[10])
    assert results == [
        {"process": 10, "count": 2, "local": 3, "global": 6},
        {"process": 11, "count": 2, "local": 3, "global": 6},
    ]


def test_import_path_and_source_bodies():
    assert run_processes("json:dumps", num_processes=2, devices_per_process=1, args=[[1, 2]]) == ["[1, 2]"] * 2
    assert run_processes(_SLEEP_UNLESS_FIRST, num_processes=2, devices_per_process=1, args=["none"]) == [0, 1]


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        pytest.param("exit", "process(es) [1] of 2 failed", id="dead-peer"),
        pytest.param("raise", "ValueError: boom from process 1", id="body-raises"),
    ],
)
def test_failed_peer_stops_the_run_in_seconds(action, expected):
    start = time.monotonic()
    with pytest.raises(DistributedRunError) as caught:
        run_processes(_SLEEP_UNLESS_FIRST, num_processes=2, devices_per_process=1, args=[action], timeout=60)
    assert time.monotonic() - start < 20
    assert expected in str(caught.value)
    survivor, failed = caught.value.reports
    assert survivor.killed
    assert not failed.killed
    assert failed.returncode == (3 if action == "exit" else 70)
    _assert_all_reaped(caught.value.reports)


# Runs at the start of every child interpreter (as ``sitecustomize``), before
# the join: it records which run started it (each run has its own spec file),
# and the first ``FAILURES`` starts of all exit with status 4.
_FAIL_BEFORE_JOINING = """
import os
import sys

if sys.argv[0].endswith("bootstrap.py"):
    record = os.environ["STARTS"]
    with open(record, "a") as handle:
        handle.write(sys.argv[1] + "\\n")
    with open(record) as handle:
        starts = len(handle.readlines())
    if starts <= int(os.environ["FAILURES"]):
        os._exit(4)
"""


def _failing_before_joining(tmp_path: Path, failures: int) -> tuple[dict[str, str], Path]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_FAIL_BEFORE_JOINING, encoding="utf-8")
    starts = tmp_path / "starts.txt"
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path, "STARTS": str(starts), "FAILURES": str(failures)}, starts


def _runs_started(starts: Path) -> int:
    return len(set(starts.read_text().splitlines()))


def test_a_run_that_fails_before_the_join_starts_once_more(tmp_path):
    env, starts = _failing_before_joining(tmp_path, failures=1)
    results = run_processes(_body_describe, num_processes=2, devices_per_process=1, args=[0], env=env)
    assert [result["process"] for result in results] == [0, 1]
    assert _runs_started(starts) == 2


def test_a_second_failure_before_the_join_fails_the_run(tmp_path):
    env, starts = _failing_before_joining(tmp_path, failures=1000)
    with pytest.raises(DistributedRunError, match=r"of 2 failed") as caught:
        run_processes(_body_describe, num_processes=2, devices_per_process=1, args=[0], env=env)
    assert 4 in {report.returncode for report in caught.value.reports}
    assert _runs_started(starts) == 2
    _assert_all_reaped(caught.value.reports)


def test_a_failure_after_the_join_is_not_retried(tmp_path):
    env, starts = _failing_before_joining(tmp_path, failures=0)
    with pytest.raises(DistributedRunError, match="boom from process 1"):
        run_processes(_SLEEP_UNLESS_FIRST, num_processes=2, devices_per_process=1, args=["raise"], env=env)
    assert _runs_started(starts) == 1


def test_unserializable_result_fails_the_run():
    with pytest.raises(DistributedRunError, match="not JSON serializable"):
        run_processes(_SLEEP_UNLESS_FIRST, num_processes=2, devices_per_process=1, args=["unserializable"])


def test_hung_peer_is_killed_at_the_timeout():
    start = time.monotonic()
    with pytest.raises(DistributedRunError, match=r"did not finish within 4 s") as caught:
        run_processes(_SLEEP_UNLESS_FIRST, num_processes=2, devices_per_process=1, args=["hang"], timeout=4)
    assert time.monotonic() - start < 10
    assert caught.value.reports[1].killed
    assert "--- process 1" in str(caught.value)
    _assert_all_reaped(caught.value.reports)


_TEST_THAT_HANGS = """
import pytest

from tinax_testing import run_processes


@pytest.mark.timeout(20)
def test_hangs():
    run_processes({body!r}, num_processes=1, devices_per_process=1, args=[{pid_file!r}], timeout=600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads process states from /proc")
def test_a_test_level_timeout_fails_the_test_with_the_child_output_and_kills_everything(tmp_path):
    # The harness's own timeout is far away here: pytest-timeout stops the
    # test, and the harness must still kill the child and the helper process
    # it started (same process group), and report what the child printed.
    pid_file = tmp_path / "helper.pid"
    (tmp_path / "test_hangs.py").write_text(
        textwrap.dedent(_TEST_THAT_HANGS).format(body=_HANG_WITH_A_HELPER, pid_file=str(pid_file))
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout_method = signal\n")
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_hangs.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 1, output
    assert "Timeout (>20.0s) from pytest-timeout" in output
    assert "the wait for 1 processes was interrupted; every child was killed" in output
    assert "child is about to hang" in output
    assert not _running(int(pid_file.read_text()))


def test_bad_arguments_are_refused_before_anything_starts():
    def nested() -> None:
        return None

    with pytest.raises(ValueError, match="module-level function"):
        run_processes(nested, num_processes=2, devices_per_process=1)
    with pytest.raises(ValueError, match="module-level function"):
        run_processes(lambda: None, num_processes=2, devices_per_process=1)
    with pytest.raises(TypeError, match="JSON-serializable"):
        run_processes(_body_describe, num_processes=2, devices_per_process=1, args=[object()])
    with pytest.raises(ValueError, match="num_processes must be an int >= 1, got 0"):
        run_processes(_body_describe, num_processes=0, devices_per_process=1)
    with pytest.raises(ValueError, match="timeout"):
        run_processes(_body_describe, num_processes=1, devices_per_process=1, timeout=0)
    with pytest.raises(ValueError, match="heartbeat_timeout"):
        run_processes(_body_describe, num_processes=1, devices_per_process=1, heartbeat_timeout=-1)


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        pytest.param({"devices_per_process": True}, "devices_per_process", id="bool-count"),
        pytest.param({"num_processes": 2.0}, "num_processes", id="float-count"),
        pytest.param({"num_processes": "2"}, "num_processes", id="str-count"),
        pytest.param({"initialization_timeout": 1.5}, "initialization_timeout", id="float-initialization-timeout"),
        pytest.param({"shutdown_timeout": None}, "shutdown_timeout", id="none-shutdown-timeout"),
        pytest.param({"timeout": "60"}, "timeout", id="str-timeout"),
        pytest.param({"timeout": True}, "timeout", id="bool-timeout"),
        pytest.param({"env": ["A=1"]}, "env", id="list-env"),
        pytest.param({"env": {"A": 1}}, "env", id="int-env-value"),
    ],
)
def test_arguments_of_the_wrong_type_are_type_errors(arguments, named):
    # Refused before any child starts, as TypeError (wrong kind) rather than
    # ValueError (right kind, bad value), naming the argument.
    keywords = {"num_processes": 1, "devices_per_process": 1, **arguments}
    with pytest.raises(TypeError, match=named):
        run_processes(_body_describe, **keywords)


def test_free_port_is_usable():
    assert 0 < free_port() < 65536
