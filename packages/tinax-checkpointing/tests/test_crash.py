"""Crash safety: a save killed at any moment leaves no checkpoint or a complete one.

The saves run in real child processes that are killed with SIGKILL. To keep
the JAX import out of every trial, one helper process imports JAX, Orbax and
tinax once (without starting a backend) and forks a fresh child per trial. The
child starts its own CPU backend, builds the state, reports that it is about
to save, and saves; the test kills it after a random pause. Every verdict is
about what is on disk afterwards, never about how long anything took.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from tinax.checkpointing import load_checkpointables, save_checkpointables
from tinax_testing import TEST_DEVICE_COUNT, cpu_child_environment

TRIALS = 24
SAFETY_SECONDS = 120  # Bounds a wait that only a hung child would make endless.
SEED = 20240611

# Shared by the helper process and the test: the state saved for a seed.
_STATE_SOURCE = textwrap.dedent(
    """
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec


    def host_values(seed):
        rng = np.random.default_rng(seed)
        return {
            "weights": rng.standard_normal((1024, 512), dtype=np.float32),
            "bias": rng.standard_normal((1024,), dtype=np.float32),
            "moments": rng.standard_normal((512, 512), dtype=np.float32),
        }


    def device_state(seed):
        mesh = jax.make_mesh((4, 2), ("rows", "cols"), devices=jax.devices())
        host = host_values(seed)
        return {
            "model": {
                "weights": jax.device_put(host["weights"], NamedSharding(mesh, PartitionSpec("rows", "cols"))),
                "bias": jax.device_put(host["bias"], NamedSharding(mesh, PartitionSpec("rows"))),
                "key": jax.random.key(seed),
                "step": seed,
            },
            "optimizer": {"moments": jax.device_put(host["moments"], NamedSharding(mesh, PartitionSpec("rows")))},
        }
    """
)

_HELPER_SOURCE = textwrap.dedent(
    """
    import json
    import os
    import sys
    import time
    import traceback

    import jax
    import orbax.checkpoint.experimental.v1  # Imported once here, so each forked child starts saving at once.
    from tinax.checkpointing import save_checkpointables

    exec(STATE_SOURCE)


    def emit(message):
        os.write(1, (json.dumps(message) + "\\n").encode())


    def save(path, seed):
        state = device_state(seed)
        jax.block_until_ready(state)
        # A first save pays this fresh process's one-time Orbax set-up, so that
        # the save under test spends its time copying and writing.
        save_checkpointables(path + "-warm-up", state).result()
        emit({"event": "saving"})
        start = time.perf_counter()
        response = save_checkpointables(path, state)
        emit({"event": "writing", "seconds": time.perf_counter() - start})
        response.result()
        emit({"event": "saved", "seconds": time.perf_counter() - start})


    emit({"event": "ready"})
    while line := sys.stdin.readline():
        command = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                save(command["path"], command["seed"])
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                sys.stderr.flush()
                os._exit(code)
        emit({"pid": pid})
        sys.stdin.readline()  # The parent says when the child may be reaped.
        _, status = os.waitpid(pid, 0)
        emit({"status": os.waitstatus_to_exitcode(status)})
    """
)

_state_namespace: dict[str, Any] = {}
exec(_STATE_SOURCE, _state_namespace)
host_values = _state_namespace["host_values"]
device_state = _state_namespace["device_state"]


def _child_environment() -> dict[str, str]:
    return cpu_child_environment(TEST_DEVICE_COUNT)


class _Helper:
    """The forking helper process and the JSON lines it (and its children) print."""

    def __init__(self, directory: Path) -> None:
        script = directory / "helper.py"
        script.write_text(f"STATE_SOURCE = {_STATE_SOURCE!r}\n{_HELPER_SOURCE}", encoding="utf-8")
        self.stderr_path = directory / "helper-stderr.txt"
        self._stderr = self.stderr_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=_child_environment(),
            start_new_session=True,
        )
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        assert self.next_message() == {"event": "ready"}

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(b"")

    def next_message(self) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=SAFETY_SECONDS)
        except queue.Empty:
            raise AssertionError(f"the helper stopped talking; its stderr:\n{self.stderr()}") from None
        if not line:
            raise AssertionError(f"the helper exited; its stderr:\n{self.stderr()}")
        message: dict[str, Any] = json.loads(line)
        return message

    def send(self, message: object) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps(message) + "\n").encode())
        self.process.stdin.flush()

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")[-6000:]

    def save(self, path: Path, seed: int, kill_after: float | None) -> tuple[int, dict[str, float]]:
        """Has a fresh child save; kills it ``kill_after`` seconds into the save (None: never).

        Returns:
          The child's exit status (``-SIGKILL`` if the kill landed first) and
          the moments it reported, in seconds since the save started:
          ``writing`` when the call returned and the background writing
          began, ``saved`` when ``result()`` returned.
        """
        self.send({"path": str(path), "seed": seed})
        pid, saving, moments = None, False, {}
        while pid is None or not saving:
            message = self.next_message()
            pid = message.get("pid", pid)
            saving = saving or message.get("event") == "saving"
        if kill_after is not None:
            time.sleep(kill_after)
            # The helper reaps the child only when told to, so this pid is
            # still ours even if the child has already exited.
            os.kill(pid, signal.SIGKILL)
        self.send("reap")
        while True:
            message = self.next_message()
            if "seconds" in message:
                moments[message["event"]] = message["seconds"]
            if "status" in message:
                return int(message["status"]), moments

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self._reader.join(SAFETY_SECONDS)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._stderr.close()


def _targets() -> dict[str, Any]:
    mesh = jax.make_mesh((2, 4), ("rows", "cols"), devices=jax.devices())
    key = jax.random.key(0)
    return {
        "model": {
            "weights": np.ndarray,
            "bias": jax.ShapeDtypeStruct((1024,), np.float32, sharding=NamedSharding(mesh, PartitionSpec("rows"))),
            "key": jax.ShapeDtypeStruct(key.shape, key.dtype, sharding=NamedSharding(mesh, PartitionSpec())),
            "step": 0,
        },
        "optimizer": {"moments": np.ndarray},
    }


def _assert_holds_seed(loaded: dict[str, Any], seed: int) -> None:
    expected = host_values(seed)
    np.testing.assert_array_equal(loaded["model"]["weights"], expected["weights"])
    np.testing.assert_array_equal(np.asarray(loaded["model"]["bias"]), expected["bias"])
    np.testing.assert_array_equal(
        np.asarray(jax.random.key_data(loaded["model"]["key"])), np.asarray(jax.random.key_data(jax.random.key(seed)))
    )
    assert loaded["model"]["step"] == seed
    np.testing.assert_array_equal(loaded["optimizer"]["moments"], expected["moments"])


def _verdict(path: Path, seed: int) -> str:
    """Checks what a killed save left at ``path``: nothing, or the whole checkpoint."""
    if not os.path.lexists(path):
        with pytest.raises(FileNotFoundError):
            load_checkpointables(path, _targets())
        leftover = path.with_name(path.name + ".orbax-checkpoint-tmp")
        if leftover.exists():
            with pytest.raises(ValueError, match="incomplete checkpoint"):
                load_checkpointables(leftover, _targets())
            return "absent, temporary folder left"
        return "absent"
    _assert_holds_seed(load_checkpointables(path, _targets()), seed)
    return "complete"


@pytest.fixture
def helper(tmp_path: Path) -> Any:
    started = _Helper(tmp_path)
    yield started
    started.close()


def test_sigkill_at_random_moments_leaves_no_checkpoint_or_a_complete_one(tmp_path, helper):
    # One save left to finish tells how a save's time splits on this machine
    # (copying to the host, then writing in the background), so that the
    # random kills cover both phases.
    status, moments = helper.save(tmp_path / "calibration", seed=0, kill_after=None)
    assert status == 0, helper.stderr()
    assert set(moments) == {"writing", "saved"}
    assert _verdict(tmp_path / "calibration", 0) == "complete"

    rng = random.Random(SEED)
    outcomes: list[tuple[int, str]] = []
    end = 1.2 * moments["saved"]
    for trial in range(1, TRIALS + 1):
        path = tmp_path / f"trial-{trial}"
        if trial <= 2:
            kill_after = 0.0
        elif trial % 2:
            kill_after = rng.uniform(0.0, end)
        else:
            kill_after = rng.uniform(moments["writing"], end)
        status, _ = helper.save(path, seed=trial, kill_after=kill_after)
        assert status in (0, -signal.SIGKILL), helper.stderr()
        verdict = _verdict(path, trial)
        if status == 0:
            assert verdict == "complete"
        outcomes.append((status, verdict))
        if verdict != "complete":
            # A later save to the same path succeeds, whatever the crash left.
            save_checkpointables(path, device_state(trial)).result()
            _assert_holds_seed(load_checkpointables(path, _targets()), trial)

    killed = [verdict for status, verdict in outcomes if status == -signal.SIGKILL]
    assert killed, f"no kill landed inside a save: {outcomes}"


_EXIT_WITHOUT_RESULT = textwrap.dedent(
    """
    import sys

    import jax.numpy as jnp
    from tinax.checkpointing import save_checkpointables

    save_checkpointables(sys.argv[1], {"model": {"weights": jnp.arange(1 << 20, dtype=jnp.float32)}})
    """
)

# Python 3.12 refuses to start threads once shutdown begins (gh-104690), and
# Orbax needs new threads to finish writing.
_THREADS_START_DURING_SHUTDOWN = sys.version_info < (3, 12)


@pytest.mark.skipif(not _THREADS_START_DURING_SHUTDOWN, reason="Python 3.12+ starts no threads during shutdown")
def test_a_save_in_flight_at_exit_is_finished_where_python_allows(tmp_path):
    # Orbax alone loses such a save: shutdown stops its writer pools first.
    path = tmp_path / "checkpoint"
    completed = subprocess.run(
        [sys.executable, "-c", _EXIT_WITHOUT_RESULT, str(path)],
        env=_child_environment(),
        capture_output=True,
        text=True,
        timeout=SAFETY_SECONDS,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    loaded = load_checkpointables(path, {"model": {"weights": np.ndarray}})
    np.testing.assert_array_equal(loaded["model"]["weights"], np.arange(1 << 20, dtype=np.float32))


@pytest.mark.skipif(_THREADS_START_DURING_SHUTDOWN, reason="this Python finishes the save instead")
def test_a_save_in_flight_at_exit_is_finished_or_reported_where_python_forbids_new_threads(tmp_path):
    # Orbax's own threads then hold the exit for minutes, waiting for work
    # that can no longer start: the child is stopped once it has reported.
    path = tmp_path / "checkpoint"
    child = subprocess.Popen(
        [sys.executable, "-c", _EXIT_WITHOUT_RESULT, str(path)],
        env=_child_environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    lines: queue.Queue[bytes] = queue.Queue()

    def read() -> None:
        assert child.stderr is not None
        for line in child.stderr:
            lines.put(line)
        lines.put(b"")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    report = ""
    try:
        while "tinax.checkpointing" not in report:
            line = lines.get(timeout=SAFETY_SECONDS).decode(errors="replace")
            if not line:
                break
            report = line
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        reader.join(SAFETY_SECONDS)
        assert child.stderr is not None
        child.stderr.close()
    if not report:
        # Some Pythons and Orbax versions still finish the save during
        # shutdown (3.13 with Orbax 0.12.8): then it must be whole and exact.
        assert child.returncode == 0
        loaded = load_checkpointables(path, {"model": {"weights": np.ndarray}})
        np.testing.assert_array_equal(loaded["model"]["weights"], np.arange(1 << 20, dtype=np.float32))
        return
    assert str(path) in report
    assert "still in flight when the interpreter exited" in report
    assert "nothing is committed there" in report
    assert not path.exists()
