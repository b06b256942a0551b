"""Many files: a folder of Parquet part files written by DuckDB, trained on, stopped mid-epoch and resumed elsewhere.

Shows ``read_parquet_record`` over a folder, with ``training_batches``, ``TrainingCheckpointManager`` and
``restore(..., redeal=True)`` on top of it:

- DuckDB, standing in for any engine that writes a data set as shards, copies a table of rows into a folder
  partitioned by a ``bucket`` column (``PARTITION_BY``): one Parquet part file under each ``bucket=<n>/`` folder.
- ``read_parquet_record(folder)`` opens all of them as one random-access dataset; the partition folder each row
  came from gives it an integer ``bucket`` field.
- A run of 2 JAX processes (2 CPU devices each) trains a small linear model on global batches of 12 rows of that
  dataset, saves a training checkpoint after 3 steps and stops in the middle of the epoch. The iterator state each
  process saved names the part files it read from (path inside the folder, size in bytes, row count).
- A run of 3 processes (2 CPU devices each) restores the checkpoint with ``redeal=True`` and trains to the end of
  the epoch. The example checks that every row of the epoch was read exactly once by the two runs together, and
  that the parameters equal those of a reference run in this process that re-dealt the iterator states with
  ``redeal_state`` at the same step.

Run it from the repository root with ``python examples/many_files.py``. The process counts (2 and 3 above) are
options: ``python examples/many_files.py --old-processes 3 --new-processes 1`` stops 3 processes and resumes on 1.
Each count must be one of 1, 2, 3 or 6, so that each of the 2 CPU devices of a process gets whole rows of a global
batch. The example starts every training process itself, on 127.0.0.1, and leaves nothing behind.
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

ROWS = 96
FEATURES = 4
BUCKETS = 4  # the partition column's values, one folder (and one part file) each
DEVICES_PER_PROCESS = 2
GLOBAL_BATCH = 12  # rows per step, split evenly over the processes, then over their devices
PROCESS_COUNTS = (1, 2, 3, 6)  # the process counts that give each device whole rows of a global batch
STOP_STEP = 3  # the first run saves after this step, then stops
SEED = 5
LEARNING_RATE = 0.125
CHILD_TIMEOUT_SECONDS = 240


def report(claim: str, holds: bool) -> None:
    """Prints a claim the example has just checked, or stops if it does not hold."""
    if not holds:
        raise SystemExit(f"many_files: expected, but not observed: {claim}")
    print(claim)


def processes(count: int) -> str:
    return f"{count} process" if count == 1 else f"{count} processes"


def write_shards(folder: pathlib.Path) -> None:
    """Has DuckDB write the data set as a hive-partitioned folder of Parquet files."""
    import duckdb
    import pyarrow as pa

    rng = np.random.default_rng(0)
    features = rng.integers(-2, 3, (ROWS, FEATURES)).astype(np.float32)
    columns = {
        "row": np.arange(ROWS, dtype=np.int32),
        **{f"x{index}": features[:, index] for index in range(FEATURES)},
        "y": rng.integers(-4, 5, ROWS).astype(np.float32),
        "bucket": (np.arange(ROWS) % BUCKETS).astype(np.int32),
    }
    with duckdb.connect() as connection:
        connection.register("training_rows", pa.table(columns))
        target = folder.as_posix().replace("'", "''")  # quoted as an SQL string
        connection.execute(f"COPY training_rows TO '{target}' (FORMAT PARQUET, PARTITION_BY (bucket))")


def part_files(folder: pathlib.Path) -> list[list[Any]]:
    """Each Parquet file under ``folder`` as [path inside the folder, size in bytes, rows], sorted by path."""
    import pyarrow.parquet as pq

    found = []
    for directory, _, names in os.walk(folder):
        for name in names:
            path = pathlib.Path(directory) / name
            found.append([path.relative_to(folder).as_posix(), path.stat().st_size, pq.read_metadata(path).num_rows])
    return sorted(found)


def stack(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Turns the dict rows of one batch into columns, the feature columns side by side."""
    return {
        "row": np.array([row["row"] for row in rows], dtype=np.int32),
        "bucket": np.array([row["bucket"] for row in rows], dtype=np.int32),
        "x": np.array([[row[f"x{index}"] for index in range(FEATURES)] for row in rows], dtype=np.float32),
        "y": np.array([row["y"] for row in rows], dtype=np.float32),
    }


def pipeline(folder: pathlib.Path, shard_index: int, shard_count: int) -> Any:
    """One process's iterator over one shuffled epoch of every file in the folder."""
    import grain

    from tinax.data import read_parquet_record, training_batches

    return iter(
        training_batches(
            read_parquet_record(folder),
            shard_options=grain.sharding.ShardOptions(shard_index, shard_count, drop_remainder=True),
            seed=SEED,
            shuffle=True,
            num_epochs=1,
            batch_size=GLOBAL_BATCH // shard_count,
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
    """A linear model trained by plain gradient descent on global batches whose rows the processes hold."""

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

        # Compiled with jit, so that every process takes part in building the global arrays. The batch arrives
        # split over every device and is gathered whole onto each before the step: the step then runs the same
        # arithmetic on every device, whatever the number of processes and devices, so runs of 2 and of 3
        # processes give parameters equal to the last bit.
        self.gather = jax.jit(lambda batch: batch, out_shardings=self.replicated)
        self.step = jax.jit(step, in_shardings=self.replicated, out_shardings=self.replicated)
        self.count = jax.jit(lambda count: count + 1, out_shardings=self.replicated)
        self.initial = jax.jit(initial, out_shardings=self.replicated)

    def initial_state(self) -> dict[str, Any]:
        return {**self.initial(), "auxiliary": None}

    def train(self, state: dict[str, Any], local_batch: dict[str, np.ndarray]) -> dict[str, Any]:
        """One step on the global batch of which this process holds the rows ``local_batch``."""
        import jax

        batch = self.gather(
            {name: jax.make_array_from_process_local_data(self.rows, local_batch[name]) for name in ("x", "y")}
        )
        return {
            **state,
            "model": self.step(state["model"], batch["x"], batch["y"]),
            "optimizer": {"count": self.count(state["optimizer"]["count"])},
        }


def host(params: dict[str, Any]) -> dict[str, list[float]]:
    """The replicated parameters as plain lists, which survive a JSON round trip exactly."""
    return {name: np.asarray(value.addressable_shards[0].data).reshape(-1).tolist() for name, value in params.items()}


def rows_of(batch: dict[str, np.ndarray]) -> list[list[int]]:
    return [[row, bucket] for row, bucket in zip(batch["row"].tolist(), batch["bucket"].tolist(), strict=True)]


def old_process(work: pathlib.Path, process_id: int, count: int, coordinator: str) -> None:
    """A process of the first run: STOP_STEP steps, a checkpoint, then it stops mid-epoch."""
    import jax

    jax.distributed.initialize(coordinator, count, process_id)
    trainer = Trainer()
    state = trainer.initial_state()
    iterator = pipeline(work / "shards", process_id, count)
    read: list[list[int]] = []
    for _ in range(STOP_STEP):
        batch = next(iterator)
        read.extend(rows_of(batch))
        state = trainer.train(state, batch)
    checkpoints = manager(work / "checkpoints", create=True)
    checkpoints.save(STOP_STEP, **state, iterator=iterator)
    checkpoints.wait()
    (work / f"old-{process_id}.json").write_text(json.dumps({"read": read}))
    jax.distributed.shutdown()


def new_process(work: pathlib.Path, process_id: int, count: int, coordinator: str) -> None:
    """A process of the second run: restores the checkpoint with redeal=True and trains to the end of the epoch."""
    import jax

    from tinax.checkpointing import abstract_restore_target

    jax.distributed.initialize(coordinator, count, process_id)
    trainer = Trainer()
    checkpoints = manager(work / "checkpoints", create=False)
    iterator = pipeline(work / "shards", process_id, count)
    targets = {
        part: abstract_restore_target(value) for part, value in trainer.initial_state().items() if value is not None
    }
    step = checkpoints.latest_committed_step()
    parts = (targets["model"], targets["optimizer"], targets["rng"], None, iterator)
    refusal = None
    try:
        checkpoints.restore(step, *parts)
    except ValueError as error:
        refusal = str(error)
    restored = checkpoints.restore(step, *parts, redeal=True)
    state = {"model": restored.model, "optimizer": restored.optimizer, "rng": restored.rng, "auxiliary": None}
    result: dict[str, Any] = {
        "refusal": refusal,
        "step": restored.step,
        "count": int(np.asarray(restored.optimizer["count"].addressable_shards[0].data)),
        "restored": host(state["model"]),
        "read": [],
        "steps": 0,
    }
    for batch in iterator:
        result["read"].extend(rows_of(batch))
        state = trainer.train(state, batch)
        result["steps"] += 1
    result["final"] = host(state["model"])
    (work / f"new-{process_id}.json").write_text(json.dumps(result))
    jax.distributed.shutdown()


def run_processes(work: pathlib.Path, role: str, count: int) -> list[dict[str, Any]]:
    """Starts ``count`` JAX processes of one run, waits for them and returns what each wrote."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        coordinator = f"127.0.0.1:{probe.getsockname()[1]}"
    environment = {key: value for key, value in os.environ.items() if key != "XLA_FLAGS"}
    environment.update({"JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": str(DEVICES_PER_PROCESS)})
    logs = [work / f"{role}-{index}.log" for index in range(count)]
    children = []
    for index, log in enumerate(logs):
        with log.open("wb") as output:
            command = [sys.executable, __file__, f"--{role}-process", str(index), "--processes", str(count)]
            children.append(
                subprocess.Popen(
                    [*command, "--work", str(work), "--coordinator", coordinator],
                    env=environment,
                    stdout=output,
                    stderr=subprocess.STDOUT,
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
        raise SystemExit(f"many_files: the {role} processes exited with {codes}")
    return [json.loads((work / f"{role}-{index}.json").read_text()) for index in range(count)]


def reference_run(work: pathlib.Path, old: int, new: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same training in this process: the old shards' batches, re-dealt at STOP_STEP, then the new shards'."""
    import grain

    from tinax.data import redeal_state

    trainer = Trainer()
    state = trainer.initial_state()

    def train_on(state: dict[str, Any], shards: list[Any]) -> dict[str, Any]:
        # A global batch holds the rows of process 0 first, then those of process 1, and so on.
        parts = [next(shard) for shard in shards]
        return trainer.train(state, {name: np.concatenate([part[name] for part in parts]) for name in parts[0]})

    shards = [pipeline(work / "shards", index, old) for index in range(old)]
    for _ in range(STOP_STEP):
        state = train_on(state, shards)
    at_stop = host(state["model"])
    saved = [shard.get_state() for shard in shards]
    resumed = []
    for index in range(new):
        shard = pipeline(work / "shards", index, new)
        shard.set_state(redeal_state(saved, shard_options=grain.sharding.ShardOptions(index, new, drop_remainder=True)))
        resumed.append(shard)
    while True:
        try:
            state = train_on(state, resumed)
        except StopIteration:
            break
    return at_stop, host(state["model"])


def run(work: pathlib.Path, old: int, new: int) -> None:
    from tinax.checkpointing import TrainingCheckpointNames
    from tinax.data import read_parquet_record

    folder = work / "shards"
    write_shards(folder)
    files = part_files(folder)
    report(
        f"DuckDB wrote {ROWS} rows as {len(files)} Parquet part files, one under each partition folder "
        f"bucket=0 .. bucket={BUCKETS - 1}",
        len(files) == BUCKETS
        and sum(rows for _, _, rows in files) == ROWS
        and all(name.startswith(f"bucket={index}/") for index, (name, _, _) in enumerate(files)),
    )

    dataset = read_parquet_record(folder)
    records = [dataset[index] for index in range(len(dataset))]
    report(
        f"read_parquet_record(folder) opened them as one dataset of {ROWS} rows, each with an int field 'bucket' "
        "from its partition folder",
        sorted(record["row"] for record in records) == list(range(ROWS))
        and all(type(record["bucket"]) is int and record["bucket"] == record["row"] % BUCKETS for record in records),
    )

    first = run_processes(work, "old", old)
    read_before = [pair for result in first for pair in result["read"]]
    report(
        f"{processes(old)} x {DEVICES_PER_PROCESS} devices: {STOP_STEP} steps of {GLOBAL_BATCH} rows, a checkpoint "
        f"of step {STOP_STEP}, then they stopped with {ROWS - len(read_before)} of {ROWS} rows of the epoch unread",
        len(read_before) == STOP_STEP * GLOBAL_BATCH < ROWS,
    )

    # A checkpoint keeps the iterator state of each process that saved it as iterator/process_<i>-of-<n>.json.
    iterator_folder = work / "checkpoints" / str(STOP_STEP) / TrainingCheckpointNames().iterator
    states = [json.loads((iterator_folder / f"process_{index}-of-{old}.json").read_text()) for index in range(old)]
    report(
        f"the iterator state each old process saved names the {len(files)} part files, with the size and row count "
        "of each",
        all(state["tinax_pipeline"]["files"] == files for state in states),
    )

    second = run_processes(work, "new", new)
    report(
        f"restore without redeal=True refused the checkpoint of {processes(old)} on {processes(new)} (ValueError)",
        all(result["refusal"] is not None and "redeal=True" in result["refusal"] for result in second),
    )
    read_after = [pair for result in second for pair in result["read"]]
    every_row_once = (
        all(result["step"] == STOP_STEP for result in second)
        and sorted(row for row, _ in read_before + read_after) == list(range(ROWS))
        and all(bucket == row % BUCKETS for row, bucket in read_before + read_after)
    )

    at_stop, final = reference_run(work, old, new)
    report(
        f"the restored parameters of step {STOP_STEP} equal the reference run's at that step",
        all(result["count"] == STOP_STEP and result["restored"] == at_stop for result in second),
    )
    steps_after = second[0]["steps"]
    report(
        f"after {steps_after} more steps the final parameters equal the reference run's, which re-dealt at step "
        f"{STOP_STEP}",
        all(result["steps"] == steps_after and result["final"] == final for result in second),
    )
    report(
        f"resumed on {processes(new)} with redeal=True from {old}: every row of the sharded dataset seen exactly once",
        every_row_once,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--old-processes", type=int, default=2, choices=PROCESS_COUNTS, help="processes of the run that stops"
    )
    parser.add_argument(
        "--new-processes", type=int, default=3, choices=PROCESS_COUNTS, help="processes of the run that resumes"
    )
    parser.add_argument("--old-process", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--new-process", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--processes", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=pathlib.Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", default=None, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.old_process is not None:
        old_process(arguments.work, arguments.old_process, arguments.processes, arguments.coordinator)
        return 0
    if arguments.new_process is not None:
        new_process(arguments.work, arguments.new_process, arguments.processes, arguments.coordinator)
        return 0
    if arguments.old_processes == arguments.new_processes:
        parser.error("--old-processes and --new-processes must differ: the example resumes on another count")
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", DEVICES_PER_PROCESS)
    with tempfile.TemporaryDirectory() as work:
        run(pathlib.Path(work), arguments.old_processes, arguments.new_processes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
