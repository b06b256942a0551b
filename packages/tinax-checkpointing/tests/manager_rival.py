"""A second TrainingCheckpointManager on the same root, in its own process, driven line by line by a test.

Run as a script with ``--root``; it reads one JSON command per line on stdin
and answers each with one JSON line on stdout:

- ``{"op": "save", "step": N, "metric": X}`` starts a save and returns at
  once, without waiting for it: the save stays in flight (and the root
  locked) until a ``wait``.
- ``{"op": "wait"}``, ``{"op": "cleanup"}``, ``{"op": "latest"}`` call
  ``wait()``, ``scan(cleanup=True)`` and ``latest_committed_step()``.
- ``{"op": "race", "seed": S, "attempts": N}`` makes N seeded attempts at
  saving a newer step, waiting or cleaning up, as fast as it can, while the
  test's own manager does the same, and answers with every outcome.
- ``{"op": "exit"}`` waits for the last save and ends.

:class:`RivalProcess` is the test's side: it starts the script and sends
the commands.

Each answer is ``{"outcome": ...}``: ``"ok"`` (with ``"value"``), or the
refusal the manager documents for a racing writer (``"in-flight"`` for
SaveInFlightError, ``"not-newer"`` for a step another writer overtook), or
``"unexpected"`` with the error's type and message, which the test fails on.
The model of step N holds N, so a restore shows which save it came from.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def manager_options() -> dict[str, Any]:
    """The policy both managers of the race use."""
    return {
        "save_interval_steps": 1,
        "keep_last": 2,
        "keep_every": None,
        "keep_best": 1,
        "best_mode": "min",
        "save_in_flight": "wait",
        "create": True,
    }


def parts(value: float) -> tuple[Any, Any, Any, Any, Any]:
    """The state a save of step ``value`` writes: a model holding ``value``."""
    import grain
    import jax
    import jax.numpy as jnp

    iterator = iter(grain.MapDataset.range(8).repeat(None))
    next(iterator)
    return (
        {"w": jnp.full((4,), value, dtype=jnp.float32)},
        {"m": jnp.zeros((4,), dtype=jnp.float32)},
        jax.random.key(0),
        {"value": value},
        iterator,
    )


def classify(error: BaseException) -> dict[str, Any]:
    """The outcome of a refused call: a documented refusal of a racing writer, or an unexpected error."""
    from tinax.checkpointing import SaveInFlightError

    if isinstance(error, SaveInFlightError):
        return {"outcome": "in-flight", "message": str(error)}
    if type(error) is ValueError and "newer than the newest saved or committed step" in str(error):
        return {"outcome": "not-newer", "message": str(error)}
    return {"outcome": "unexpected", "type": type(error).__name__, "message": str(error)}


def attempt(call: Any, *args: Any) -> dict[str, Any]:
    try:
        value = call(*args)
    except Exception as error:
        return classify(error)
    return {"outcome": "ok", "value": value}


def cleanup(manager: Any) -> list[str]:
    return [entry.name for entry in manager.scan(cleanup=True).removed]


def save_step(manager: Any, step: int, metric: float) -> int:
    manager.save(step, *parts(float(step)), metric=metric)
    return step


def race(manager: Any, seed: int, attempts: int, after: Callable[[], None] | None = None) -> list[dict[str, Any]]:
    """Seeded saves, waits and cleanups, one after the other, each outcome recorded; ``after`` runs after each."""
    rng = random.Random(seed)
    outcomes = []
    newest = -1
    for _ in range(attempts):
        action = rng.choice(["save", "save", "wait", "cleanup"])
        if action == "save":
            latest = manager.latest_committed_step()
            step = max(newest, -1 if latest is None else latest) + rng.randint(1, 2)
            metric = rng.uniform(0.0, 10.0)
            result = attempt(save_step, manager, step, metric)
            if result["outcome"] == "ok":
                newest = step
        elif action == "wait":
            result = attempt(manager.wait)
        else:
            result = attempt(cleanup, manager)
        outcomes.append({"action": action, **result})
        if after is not None:
            after()
        time.sleep(rng.uniform(0.0, 0.05))
    return outcomes


def serve(root: str) -> None:
    from tinax.checkpointing import TrainingCheckpointManager

    manager = TrainingCheckpointManager(root, **manager_options())
    print(json.dumps({"outcome": "ok", "value": "ready"}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        op = command["op"]
        if op == "save":
            step, metric = command["step"], command["metric"]
            answer = attempt(save_step, manager, step, metric)
        elif op == "wait":
            answer = attempt(manager.wait)
        elif op == "cleanup":
            answer = attempt(cleanup, manager)
        elif op == "latest":
            answer = attempt(manager.latest_committed_step)
        elif op == "race":
            answer = {"outcome": "ok", "value": race(manager, command["seed"], command["attempts"])}
        elif op == "exit":
            print(json.dumps(attempt(manager.wait)), flush=True)
            return
        else:
            answer = {"outcome": "unexpected", "type": "command", "message": op}
        print(json.dumps(answer), flush=True)


class RivalProcess:
    """The test's handle on a rival manager in a child process, one command at a time."""

    def __init__(self, root: Path, environment: dict[str, str], timeout: float) -> None:
        self._timeout = timeout
        self._errors = (root.parent / f"{root.name}-rival-stderr.txt").open("w")
        self.child = subprocess.Popen(
            [sys.executable, __file__, "--root", str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errors,
            text=True,
            env=environment,
        )
        ready = self.read()
        assert ready == {"outcome": "ok", "value": "ready"}, ready

    def send(self, command: dict[str, Any]) -> None:
        assert self.child.stdin is not None
        self.child.stdin.write(json.dumps(command) + "\n")
        self.child.stdin.flush()

    def read(self) -> dict[str, Any]:
        assert self.child.stdout is not None
        line = self.child.stdout.readline()
        assert line, f"the rival ended: {Path(self._errors.name).read_text()}"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        self.send(command)
        return self.read()

    def close(self) -> dict[str, Any] | None:
        """Asks the rival to wait for its last save and end; returns that answer (None if it had ended)."""
        answer = None
        try:
            if self.child.poll() is None:
                answer = self.ask({"op": "exit"})
            self.child.wait(self._timeout)
        finally:
            if self.child.poll() is None:
                self.child.kill()
                self.child.wait()
            for stream in (self.child.stdin, self.child.stdout, self._errors):
                if stream is not None:
                    stream.close()
        return answer


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    serve(parser.parse_args(sys.argv[1:]).root)
