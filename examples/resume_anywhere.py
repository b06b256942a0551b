"""Resume anywhere: a run of 2 processes stops mid-epoch and resumes on 1 process, every row read once.

Shows ``TrainingCheckpointManager.restore(..., redeal=True)`` (with ``tinax.data.redeal_state`` under it):

- Two JAX processes of 4 CPU devices each train a small linear model on one epoch of a Parquet file
  (``write_parquet_record``, ``read_parquet_record``, ``training_batches`` with a global batch of 8 rows), save a
  training checkpoint with ``TrainingCheckpointManager`` after a few steps, and stop in the middle of the epoch.
- One process of 8 CPU devices restores that checkpoint with ``redeal=True``: the iterator gets the rest of the
  epoch that neither old process had read, and training goes on to the end of the epoch.
- The example checks that every row of the epoch was read exactly once, and that the final parameters equal
  those of a reference run in this process that took the same global batches, re-dealt the iterator states with
  ``redeal_state`` at the same step and went on.

Run it from the repository root with ``python examples/resume_anywhere.py``. It starts the two
training processes itself, on 127.0.0.1, and leaves nothing behind.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np

ROWS = 64
FEATURES = 4
OLD_PROCESSES, OLD_DEVICES, OLD_BATCH = 2, 4, 4  # a global batch of 8 rows
NEW_DEVICES = 8
STOP_STEP = 3  # the old run saves after this step, then stops
SEED = 11
LEARNING_RATE = 0.125
CHILD_TIMEOUT_SECONDS = 240


def report(claim: str, holds: bool) -> None:
    """Prints a claim the example has just checked, or stops if it does not hold."""
    if not holds:
        raise SystemExit(f"resume_anywhere: expected, but not observed: {claim}")
    print(claim)


def make_records() -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    return [
        {"row": row, "x": rng.integers(-2, 3, FEATURES).astype(np.float32), "y": int(rng.integers(-4, 5))}
        for row in range(ROWS)
    ]


def stack(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    return {
        "row": np.array([row["row"] for row in rows], dtype=np.int32),
        "x": np.stack([row["x"] for row in rows]),
        "y": np.array([row["y"] for row in rows], dtype=np.float32),
    }


def pipeline(path: pathlib.Path, shard_index: int, shard_count: int, batch_size: int) -> Any:
    """This process's iterator over one shuffled epoch of the Parquet file."""
    import grain

    from tinax.data import read_parquet_record, training_batches

    return iter(
        training_batches(
            read_parquet_record(path),
            shard_options=grain.sharding.ShardOptions(shard_index, shard_count, drop_remainder=True),
            seed=SEED,
            shuffle=True,
            num_epochs=1,
            batch_size=batch_size,
            batch_fn=stack,
        )
    )


def manager(root: pathlib.Path, create: bool) -> Any:
    from tinax.checkpointing import TrainingCheckpointManager

    return TrainingCheckpointManager(
        root,
        save_interval_steps=1,
        keep_last=2,
        keep_every=None,
        keep_best=None,
        best_mode=None,
        save_in_flight="wait",
        create=create,
    )


class Trainer:
    """A linear model trained by plain gradient descent on global batches sharded over every device."""

    def __init__(self) -> None:
        import jax
        import jax.numpy as jnp
        from jax.sharding import NamedSharding, PartitionSpec

        devices = sorted(jax.devices(), key=lambda device: (device.process_index, device.id))
        self.mesh = jax.make_mesh((len(devices),), ("data",), devices=devices)
        self.rows = NamedSharding(self.mesh, PartitionSpec("data"))
        self.replicated = NamedSharding(self.mesh, PartitionSpec())

        def step(params: dict[str, Any], x: Any, y: Any) -> dict[str, Any]:
            def loss(params: dict[str, Any]) -> Any:
                return ((x @ params["w"] + params["b"] - y) ** 2).mean()

            grads = jax.grad(loss)(params)
            return jax.tree.map(lambda value, grad: value - LEARNING_RATE * grad, params, grads)

        def initial() -> dict[str, Any]:
            return {
                "model": {"w": jnp.zeros(FEATURES, jnp.float32), "b": jnp.zeros((), jnp.float32)},
                "optimizer": {"count": jnp.zeros((), jnp.int32)},
                "rng": jax.random.key(0),
            }

        # Jitted, so that every process builds its part of the global arrays.
        self.step = jax.jit(step, out_shardings=self.replicated)
        self.count = jax.jit(lambda count: count + 1, out_shardings=self.replicated)
        self.initial = jax.jit(initial, out_shardings=self.replicated)

    def initial_state(self) -> dict[str, Any]:
        return {**self.initial(), "auxiliary": None}

    def train(self, state: dict[str, Any], local_batch: dict[str, np.ndarray]) -> dict[str, Any]:
        """One step on the global batch whose rows this process holds ``local_batch`` of."""
        import jax

        x = jax.make_array_from_process_local_data(self.rows, local_batch["x"])
        y = jax.make_array_from_process_local_data(self.rows, local_batch["y"])
        return {
            **state,
            "model": self.step(state["model"], x, y),
            "optimizer": {"count": self.count(state["optimizer"]["count"])},
        }


def host(params: dict[str, Any]) -> dict[str, np.ndarray]:
    return {name: np.asarray(value.addressable_shards[0].data) for name, value in params.items()}


def old_process(work: pathlib.Path, process_id: int, coordinator: str) -> None:
    """One of the two old processes: STOP_STEP steps, a checkpoint, then it stops mid-epoch."""
    import jax

    jax.distributed.initialize(coordinator, OLD_PROCESSES, process_id)
    trainer = Trainer()
    state = trainer.initial_state()
    iterator = pipeline(work / "train.parquet", process_id, OLD_PROCESSES, OLD_BATCH)
    read: list[int] = []
    for _ in range(STOP_STEP):
        batch = next(iterator)
        read.extend(batch["row"].tolist())
        state = trainer.train(state, batch)
    checkpoints = manager(work / "checkpoints", create=True)
    checkpoints.save(STOP_STEP, **state, iterator=iterator)
    checkpoints.wait()
    (work / f"read-by-process-{process_id}.json").write_text(json.dumps(read))
    jax.distributed.shutdown()


def run_old_processes(work: pathlib.Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        coordinator = f"127.0.0.1:{probe.getsockname()[1]}"
    environment = {key: value for key, value in os.environ.items() if key != "XLA_FLAGS"}
    environment.update({"JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": str(OLD_DEVICES)})
    logs = [work / f"process-{index}.log" for index in range(OLD_PROCESSES)]
    children = []
    for index, log in enumerate(logs):
        with log.open("wb") as output:
            command = [sys.executable, __file__, "--old-process", str(index), "--work", str(work)]
            children.append(
                subprocess.Popen(
                    [*command, "--coordinator", coordinator], env=environment, stdout=output, stderr=subprocess.STDOUT
                )
            )
    try:
        codes = [child.wait(timeout=CHILD_TIMEOUT_SECONDS) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    if any(codes):
        for log in logs:
            print(log.read_text(errors="replace")[-4000:], file=sys.stderr)
        raise SystemExit(f"resume_anywhere: the old processes exited with {codes}")


def reference_run(work: pathlib.Path, trainer: Trainer) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same run in this process: both old shards' batches, re-dealt at STOP_STEP, then to the epoch's end."""
    import grain

    from tinax.data import redeal_state

    state = trainer.initial_state()
    shards = [pipeline(work / "train.parquet", index, OLD_PROCESSES, OLD_BATCH) for index in range(OLD_PROCESSES)]
    for _ in range(STOP_STEP):
        parts = [next(shard) for shard in shards]
        state = trainer.train(state, {name: np.concatenate([part[name] for part in parts]) for name in parts[0]})
    at_stop = host(state["model"])
    new_shard = grain.sharding.ShardOptions(0, 1, drop_remainder=True)
    resumed = pipeline(work / "train.parquet", 0, 1, OLD_PROCESSES * OLD_BATCH)
    resumed.set_state(redeal_state([shard.get_state() for shard in shards], shard_options=new_shard))
    for batch in resumed:
        state = trainer.train(state, batch)
    return at_stop, host(state["model"])


def run(work: pathlib.Path) -> None:
    from tinax.checkpointing import abstract_restore_target
    from tinax.data import write_parquet_record

    write_parquet_record(work / "train.parquet", make_records())
    run_old_processes(work)
    read_before = [
        row
        for index in range(OLD_PROCESSES)
        for row in json.loads((work / f"read-by-process-{index}.json").read_text())
    ]
    report(
        f"{OLD_PROCESSES} processes x {OLD_DEVICES} devices: {STOP_STEP} steps, a checkpoint of step {STOP_STEP}, "
        f"then they stopped with {ROWS - len(read_before)} of {ROWS} rows of the epoch unread",
        len(read_before) == STOP_STEP * OLD_PROCESSES * OLD_BATCH < ROWS,
    )

    trainer = Trainer()
    checkpoints = manager(work / "checkpoints", create=False)
    iterator = pipeline(work / "train.parquet", 0, 1, OLD_PROCESSES * OLD_BATCH)
    targets = {
        part: abstract_restore_target(value) for part, value in trainer.initial_state().items() if value is not None
    }
    step = checkpoints.latest_committed_step()
    refused = None
    try:
        checkpoints.restore(step, targets["model"], targets["optimizer"], targets["rng"], None, iterator)
    except ValueError as error:
        refused = error
    report(
        "restore without redeal=True refused the checkpoint of 2 processes on 1 process (ValueError)",
        refused is not None and "redeal=True" in str(refused),
    )
    restored = checkpoints.restore(
        step, targets["model"], targets["optimizer"], targets["rng"], None, iterator, redeal=True
    )
    state = {
        "model": restored.model,
        "optimizer": restored.optimizer,
        "rng": restored.rng,
        "auxiliary": None,
    }
    restored_params = host(state["model"])
    read_after: list[int] = []
    steps_after = 0
    for batch in iterator:
        read_after.extend(batch["row"].tolist())
        state = trainer.train(state, batch)
        steps_after += 1
    rows = read_before + read_after
    report(
        f"resumed on 1 process x {NEW_DEVICES} devices with redeal=True: every row of the epoch seen exactly once",
        restored.step == STOP_STEP and len(rows) == ROWS and sorted(rows) == list(range(ROWS)),
    )

    at_stop, final = reference_run(work, trainer)
    report(
        f"the restored parameters of step {STOP_STEP} equal the reference run's at that step",
        int(np.asarray(restored.optimizer["count"])) == STOP_STEP
        and all(np.array_equal(restored_params[name], at_stop[name]) for name in at_stop),
    )
    report(
        f"after {steps_after} more steps the final parameters equal the reference run's, which re-dealt at step "
        f"{STOP_STEP}",
        all(np.array_equal(host(state["model"])[name], final[name]) for name in final),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-process", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=pathlib.Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", default=None, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.old_process is not None:
        old_process(arguments.work, arguments.old_process, arguments.coordinator)
        return 0
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", NEW_DEVICES)
    with tempfile.TemporaryDirectory() as work:
        run(pathlib.Path(work))
    return 0


if __name__ == "__main__":
    sys.exit(main())
