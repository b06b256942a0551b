"""Runs a test body in N local processes that form one JAX runtime on CPU.

Multi-process behaviour (process-local construction, collectives across
processes) can only be proven with real processes. ``jax.distributed``
aborts a process instead of raising when a peer is missing or dies, so the
runtime must never be started inside the pytest process: this module starts
child interpreters, each with its own CPU devices, joins them through a
coordinator on a fresh port of 127.0.0.1, runs the body in every child and
collects one JSON value from each.

The parent side uses only the standard library and tinax-core's argument
checks (which import nothing else), and never imports JAX. The
children are POSIX processes, each in its own process group, and they are
always killed and reaped before :func:`run_processes` returns or raises,
together with anything they started in their group. That holds when the wait
itself is interrupted too (a pytest-timeout limit, Ctrl-C): the interrupting
exception then carries every child's output as a note. On Linux a child also
dies with the process that started it, so even a parent killed outright
leaves no child running.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from tinax._core.validation import fail_type, fail_value, require_positive_int, require_str_to_str_mapping

__all__ = [
    "ChildReport",
    "DistributedRunError",
    "cpu_child_environment",
    "free_port",
    "run_processes",
]

#: Exit status of a child whose body raised (the traceback is on its stderr).
BODY_FAILED_EXIT = 70

_IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_STDERR_TAIL = 6000
_POLL_SECONDS = 0.02

_BOOTSTRAP = """\
import importlib
import importlib.util
import json
import os
import sys
import traceback


def _load(spec):
    if spec["kind"] == "module":
        target = importlib.import_module(spec["module"])
    else:
        name = "_tinax_distributed_body"
        file_spec = importlib.util.spec_from_file_location(name, spec["path"])
        target = importlib.util.module_from_spec(file_spec)
        sys.modules[name] = target
        file_spec.loader.exec_module(target)
    for part in spec["qualname"].split("."):
        target = getattr(target, part)
    return target


def _die_with_parent(parent):
    # Linux only: the kernel kills this process when its parent dies, however
    # it dies (a timeout that exits pytest at once, SIGKILL).
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(1)


def _main():
    _die_with_parent(int(sys.argv[3]))
    with open(sys.argv[1], encoding="utf-8") as handle:
        spec = json.load(handle)
    process_id = int(sys.argv[2])
    from tinax._core.jax_compat import initialize_distributed

    initialize_distributed(
        spec["coordinator"],
        spec["num_processes"],
        process_id,
        initialization_timeout=spec["initialization_timeout"],
        heartbeat_timeout=spec["heartbeat_timeout"],
        shutdown_timeout=spec["shutdown_timeout"],
        coordinator_bind_address=spec["coordinator"],
    )
    # Tells the parent that this process got past the join, so a failed run
    # is known to be the body's and is never started again.
    open(spec["joined"] + str(process_id), "wb").close()
    try:
        line = json.dumps(_load(spec)(*spec["args"]))
    except BaseException:
        # Leave at once: peers blocked in a collective would otherwise keep
        # this process in shutdown, and the parent stops them all anyway.
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(BODY_FAILED_EXIT)
    sys.stdout.write("\\n" + line + "\\n")
    sys.stdout.flush()
    import jax

    jax.distributed.shutdown()


BODY_FAILED_EXIT = {exit_code}
_main()
"""


@dataclasses.dataclass(frozen=True)
class ChildReport:
    """What one child process left behind.

    Attributes:
      process_id: The child's JAX process index.
      pid: Its operating-system process id (already reaped).
      returncode: Its exit status; negative for a signal, as in
        ``subprocess``.
      killed: Whether the harness killed it (timeout or a failed peer).
      seconds: Wall time from its start until it ended or was killed.
      stdout: Everything it wrote to stdout.
      stderr: Everything it wrote to stderr.
    """

    process_id: int
    pid: int
    returncode: int
    killed: bool
    seconds: float
    stdout: str
    stderr: str


class DistributedRunError(RuntimeError):
    """A multi-process run failed: a child failed, hung or printed no result.

    Attributes:
      reports: One :class:`ChildReport` per child, by process id.
    """

    def __init__(self, message: str, reports: Sequence[ChildReport]) -> None:
        super().__init__(message)
        self.reports = tuple(reports)


def free_port(host: str = "127.0.0.1") -> int:
    """Returns a TCP port on ``host`` that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def _body_spec(body: Callable[..., object] | str, directory: Path) -> dict[str, str]:
    if isinstance(body, str):
        if _IMPORT_PATH.match(body):
            module, qualname = body.split(":")
            return {"kind": "module", "module": module, "qualname": qualname}
        path = directory / "body.py"
        path.write_text(body, encoding="utf-8")
        return {"kind": "file", "path": str(path), "qualname": "main"}
    if not callable(body):
        raise TypeError(f"body must be a module-level function, an import path or source, got {body!r}")
    qualname = getattr(body, "__qualname__", "")
    source = inspect.getsourcefile(body) if inspect.isfunction(body) else None
    if not qualname or "<" in qualname or source is None:
        raise ValueError(f"body must be a module-level function defined in a file, got {body!r}")
    return {"kind": "file", "path": str(Path(source).resolve()), "qualname": qualname}


def cpu_child_environment(devices_per_process: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a child Python that must start JAX on its own CPU devices.

    It is this process's environment without pytest's variables and without
    an XLA device-count flag, with ``JAX_PLATFORMS=cpu`` and
    ``JAX_NUM_CPU_DEVICES`` set, plus ``extra``.

    Args:
      devices_per_process: CPU devices the child's JAX starts with.
      extra: Further variables to set, applied last.

    Returns:
      A new environment mapping for ``subprocess``.
    """
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST")}
    flags = [
        flag for flag in environment.get("XLA_FLAGS", "").split() if "force_host_platform_device_count" not in flag
    ]
    if flags:
        environment["XLA_FLAGS"] = " ".join(flags)
    else:
        environment.pop("XLA_FLAGS", None)
    environment["JAX_PLATFORMS"] = "cpu"
    environment["JAX_NUM_CPU_DEVICES"] = str(devices_per_process)
    environment.update(extra or {})
    return environment


def _kill(child: subprocess.Popen[bytes]) -> bool:
    running = child.poll() is None
    # The whole group, even when the child itself has exited: what it started
    # (a data worker, a helper process) is in its group and must not outlive
    # the run. The group id stays reserved while any member is alive.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    return running


def _tail(text: str) -> str:
    return text if len(text) <= _STDERR_TAIL else "...\n" + text[-_STDERR_TAIL:]


def _describe(reports: Sequence[ChildReport]) -> str:
    parts = []
    for report in reports:
        state = "killed by the harness" if report.killed else f"exited with {report.returncode}"
        part = (
            f"--- process {report.process_id} (pid {report.pid}, {state} after {report.seconds:.1f} s) stderr:\n"
            f"{_tail(report.stderr).rstrip() or '<empty>'}"
        )
        if report.killed and report.stdout.strip():
            part += f"\n--- process {report.process_id} stdout:\n{_tail(report.stdout).rstrip()}"
        parts.append(part)
    return "\n".join(parts)


def _stop(
    children: Sequence[subprocess.Popen[bytes]],
    streams: Sequence[tuple[IO[bytes], IO[bytes]]],
    started: Sequence[float],
    ended: dict[int, float],
    killed: set[int],
) -> None:
    for process_id, child in enumerate(children):
        if _kill(child):
            killed.add(process_id)
        ended.setdefault(process_id, time.monotonic())
    for stream_pair in streams:
        for stream in stream_pair:
            stream.close()


def _reports(
    directory: Path,
    children: Sequence[subprocess.Popen[bytes]],
    started: Sequence[float],
    ended: dict[int, float],
    killed: set[int],
) -> list[ChildReport]:
    return [
        ChildReport(
            process_id=process_id,
            pid=child.pid,
            returncode=int(child.returncode),
            killed=process_id in killed,
            seconds=ended[process_id] - started[process_id],
            stdout=(directory / f"stdout-{process_id}").read_text(encoding="utf-8", errors="replace"),
            stderr=(directory / f"stderr-{process_id}").read_text(encoding="utf-8", errors="replace"),
        )
        for process_id, child in enumerate(children)
    ]


def _attempt(
    body: Callable[..., object] | str,
    encoded_args: list[Any],
    processes: int,
    environment: dict[str, str],
    timeouts: dict[str, int],
    timeout: float,
) -> tuple[str, list[ChildReport], bool]:
    """Starts the children once; returns the outcome, their reports and whether any of them joined."""
    with tempfile.TemporaryDirectory(prefix="tinax-distributed-") as scratch:
        directory = Path(scratch)
        spec = {
            **_body_spec(body, directory),
            "args": encoded_args,
            "coordinator": f"127.0.0.1:{free_port()}",
            "num_processes": processes,
            "joined": str(directory / "joined-"),
            **timeouts,
        }
        spec_path = directory / "spec.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        bootstrap = directory / "bootstrap.py"
        bootstrap.write_text(_BOOTSTRAP.replace("{exit_code}", str(BODY_FAILED_EXIT)), encoding="utf-8")

        children: list[subprocess.Popen[bytes]] = []
        streams: list[tuple[IO[bytes], IO[bytes]]] = []
        started: list[float] = []
        ended: dict[int, float] = {}
        killed: set[int] = set()
        outcome = "timeout"
        try:
            for process_id in range(processes):
                out = (directory / f"stdout-{process_id}").open("wb")
                err = (directory / f"stderr-{process_id}").open("wb")
                streams.append((out, err))
                started.append(time.monotonic())
                children.append(
                    subprocess.Popen(
                        [sys.executable, str(bootstrap), str(spec_path), str(process_id), str(os.getpid())],
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=err,
                        env=environment,
                        start_new_session=True,
                    )
                )
            deadline = started[0] + timeout
            while time.monotonic() < deadline:
                for process_id, child in enumerate(children):
                    if process_id not in ended and child.poll() is not None:
                        ended[process_id] = time.monotonic()
                if any(child.returncode not in (None, 0) for child in children):
                    outcome = "failed"
                    break
                if len(ended) == processes:
                    outcome = "finished"
                    break
                time.sleep(_POLL_SECONDS)
        except BaseException as interruption:
            # Something outside the run stopped the wait (a test-level
            # timeout, Ctrl-C): the children are stopped below as always, and
            # what they printed goes with the exception, since it is the only
            # clue to where they hung.
            _stop(children, streams, started, ended, killed)
            reports = _reports(directory, children, started, ended, killed)
            interruption.add_note(
                f"tinax_testing: the wait for {processes} processes was interrupted; "
                f"every child was killed\n{_describe(reports)}"
            )
            raise
        _stop(children, streams, started, ended, killed)
        reports = _reports(directory, children, started, ended, killed)

        joined = any((directory / f"joined-{process_id}").exists() for process_id in range(processes))
    return outcome, reports, joined


def run_processes(
    body: Callable[..., object] | str,
    *,
    num_processes: int,
    devices_per_process: int,
    args: Sequence[object] = (),
    timeout: float = 120.0,
    initialization_timeout: int = 30,
    heartbeat_timeout: int = 60,
    shutdown_timeout: int = 60,
    env: dict[str, str] | None = None,
) -> list[Any]:
    """Runs ``body`` once in each of ``num_processes`` joined JAX processes.

    Each child gets ``JAX_PLATFORMS=cpu`` and ``JAX_NUM_CPU_DEVICES`` set,
    calls ``jax.distributed.initialize`` against a coordinator on a fresh
    port of 127.0.0.1 with the given short timeouts, then calls ``body`` with
    ``args`` and prints its JSON-encoded return value as its last stdout
    line. As soon as any child exits with a non-zero status, or ``timeout``
    passes, every child still running is killed and the run fails, so a dead
    or hung peer fails the caller in seconds rather than after JAX's own
    timeouts. Killing a child kills its whole process group, so nothing it
    started survives the run. The calling process never starts the
    distributed runtime. A run in which a child fails before any child has
    joined (the coordinator's port taken in the meantime) starts once more,
    on a fresh port; a failure after the join is never retried.

    Args:
      body: What each child runs. A module-level function (it is loaded in
        the child from its source file, so it may live in a test module);
        an import path ``"package.module:function"`` (imported by name); or
        Python source that defines a function ``main``. The callable receives
        ``*args`` and returns a JSON-serializable value; it can read its
        process index from ``jax.process_index()``. To check that something
        raises, catch it in the body and return a description of it.
      num_processes: Number of child processes, at least 1.
      devices_per_process: CPU devices in each child, at least 1.
      args: JSON-serializable positional arguments passed to every child.
      timeout: Seconds the whole run may take, start-up included.
      initialization_timeout: Seconds a child waits for its peers to join.
      heartbeat_timeout: Seconds without a heartbeat before JAX declares a
        peer dead. A peer that dies is seen at once by its exit status, so
        this only has to outlast a loaded machine's stalls.
      shutdown_timeout: Seconds a finished child waits for the others; as
        generous, since ``timeout`` bounds the run anyway.
      env: Extra environment variables for the children.

    Returns:
      The decoded JSON value returned by ``body`` in each child, indexed by
      process id.

    Raises:
      TypeError: If ``body`` is none of the accepted forms, ``args`` is not
        JSON-serializable, a count or timeout is not a number (a count not
        an int, a bool for either), or ``env`` is not a mapping of str to
        str.
      ValueError: If ``body`` is a nested function or a lambda, or a count
        or timeout is not positive.
      DistributedRunError: If a child exits with a non-zero status (its body
        raised, it could not join, or it crashed), the run exceeds
        ``timeout``, or a child's last stdout line is not JSON. The message
        holds every child's stderr; ``reports`` holds all their output.
      BaseException: Whatever interrupts the wait (pytest-timeout's failure,
        ``KeyboardInterrupt``) propagates unchanged once every child is
        killed, with every child's output added as a note.
    """
    processes = require_positive_int(num_processes, "num_processes")
    devices = require_positive_int(devices_per_process, "devices_per_process")
    initialization_timeout = require_positive_int(initialization_timeout, "initialization_timeout")
    heartbeat_timeout = require_positive_int(heartbeat_timeout, "heartbeat_timeout")
    shutdown_timeout = require_positive_int(shutdown_timeout, "shutdown_timeout")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        fail_type("timeout", "a positive number of seconds", timeout)
    if not timeout > 0:
        fail_value("timeout", "a positive number of seconds", timeout)
    extra_env = None if env is None else require_str_to_str_mapping(env, "env")
    try:
        encoded_args = json.loads(json.dumps(list(args)))
    except (TypeError, ValueError) as error:
        raise TypeError(f"args must be JSON-serializable, got {args!r}") from error

    environment = cpu_child_environment(devices, extra_env)
    timeouts = {
        "initialization_timeout": initialization_timeout,
        "heartbeat_timeout": heartbeat_timeout,
        "shutdown_timeout": shutdown_timeout,
    }
    outcome, reports, joined = _attempt(body, encoded_args, processes, environment, timeouts, timeout)
    if outcome == "failed" and not joined:
        # A child failed before any process got past the join. The
        # coordinator's port, free when it was picked, can be taken by another
        # program before the child binds it; that says nothing about the body,
        # so the run starts once more on a fresh port.
        outcome, reports, _ = _attempt(body, encoded_args, processes, environment, timeouts, timeout)

    if outcome == "timeout":
        raise DistributedRunError(
            f"{processes} processes did not finish within {timeout} s and were killed\n{_describe(reports)}", reports
        )
    if outcome == "failed":
        failed = [report.process_id for report in reports if not report.killed and report.returncode != 0]
        raise DistributedRunError(
            f"process(es) {failed} of {processes} failed; the others were stopped\n{_describe(reports)}", reports
        )
    results: list[Any] = []
    for report in reports:
        lines = [line for line in report.stdout.splitlines() if line.strip()]
        try:
            results.append(json.loads(lines[-1]))
        except (IndexError, ValueError):
            raise DistributedRunError(
                f"process {report.process_id} printed no JSON result as its last stdout line:\n"
                f"{_tail(report.stdout)}\n{_describe(reports)}",
                reports,
            ) from None
    return results
