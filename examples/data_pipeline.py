"""Records on disk to training batches from worker processes (`tinax.data`).

What it shows:

- `write_parquet_record` writes records (arrays, ints, strings) to a new
  Parquet file atomically, and `read_parquet_record` reads them back as a
  random-access `grain.MapDataset`.
- `split_by_column` splits the rows by their 'split' column into a train part
  and a test part, refusing any row with another value.
- `training_batches` builds the deterministic, shuffled batches of this
  process's shard (every epoch cut to whole batches, so every process runs
  the same number of steps), and `open_multiprocessing_iterator` reads them through
  2 grain worker processes that are joined when its `with` block ends. The
  workers yield exactly the batches that iterating without workers yields.

grain's workers need absl flags to be parsed; this example parses its own
flags (`--output_dir`, `--num_workers`). Workers start with `spawn` and
re-import this file, so the functions they run are at module level and the
main body sits behind `if __name__ == "__main__":`. At exit, Python may print
a `resource_tracker` warning about leaked `shared_memory` objects: grain 0.2.18
passes batches from workers through shared memory, and plain `mp_prefetch`
shows the same warning. The resource tracker removes them at shutdown.

Run it with `python examples/data_pipeline.py` (files go to a temporary folder
unless `--output_dir` names an existing empty folder).
"""

from __future__ import annotations

import pathlib
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np
from absl import flags

from tinax.data import (
    open_multiprocessing_iterator,
    read_parquet_record,
    split_by_column,
    training_batches,
    write_parquet_record,
)

_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "An existing folder for the files (default: a temporary folder).")
_NUM_WORKERS = flags.DEFINE_integer("num_workers", 2, "Grain worker processes for the training batches.")

NUM_ROWS = 48
FEATURES = 4
BATCH_SIZE = 8


def report(claim: str, holds: bool) -> None:
    """Prints a claim the example has just checked, or stops if it does not hold."""
    if not holds:
        raise SystemExit(f"data_pipeline: expected, but not observed: {claim}")
    print(claim)


def make_records() -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    return [
        {
            "row": index,
            "features": rng.normal(size=FEATURES).astype(np.float32),
            "label": index % 3,
            "split": "test" if index % 4 == 0 else "train",
        }
        for index in range(NUM_ROWS)
    ]


def stack_rows(rows: Sequence[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Turns the rows of one batch into arrays (runs in the workers, hence at module level)."""
    return {
        "row": np.array([row["row"] for row in rows], dtype=np.int32),
        "features": np.stack([row["features"] for row in rows]),
        "label": np.array([row["label"] for row in rows], dtype=np.int32),
    }


def run(output_dir: pathlib.Path, num_workers: int) -> None:
    import grain

    records = make_records()
    path = output_dir / "records.parquet"
    write_parquet_record(path, records)
    dataset = read_parquet_record(path)
    report(
        f"write_parquet_record + read_parquet_record: {len(dataset)} records read back unchanged",
        len(dataset) == NUM_ROWS
        and all(
            dataset[index]["row"] == record["row"] and np.array_equal(dataset[index]["features"], record["features"])
            for index, record in enumerate(records)
        ),
    )

    train, test = split_by_column(dataset, "split")
    report(
        f"split_by_column: {len(train)} train rows and {len(test)} test rows, the 'split' column dropped",
        len(train) + len(test) == NUM_ROWS and "split" not in train[0],
    )

    batches = training_batches(
        train,
        shard_options=grain.sharding.ShardOptions(shard_index=0, shard_count=1, drop_remainder=True),
        seed=7,
        shuffle=True,
        num_epochs=1,
        batch_size=BATCH_SIZE,
        batch_fn=stack_rows,
    )
    in_process = [batch["row"].tolist() for batch in batches]
    with open_multiprocessing_iterator(batches.to_iter_dataset(), num_workers=num_workers) as iterator:
        from_workers = [batch["row"].tolist() for batch in iterator]
    order = [row for batch in in_process for row in batch]
    train_rows = [train[index]["row"] for index in range(len(train))]
    whole = len(train) // BATCH_SIZE * BATCH_SIZE
    report(
        f"training_batches: {len(in_process)} full shuffled batches, {whole} distinct train rows "
        f"(the epoch is cut to whole batches; the other {len(train) - whole} rows wait for a later epoch)",
        len(order) == len(set(order)) == whole and set(order) <= set(train_rows) and order != sorted(order),
    )
    report(
        f"open_multiprocessing_iterator with {num_workers} workers yielded the same batches in the same order",
        from_workers == in_process,
    )


def main(argv: list[str]) -> int:
    flags.FLAGS(argv)  # grain's workers read absl flags, so they must be parsed first.
    if _OUTPUT_DIR.value is not None:
        run(pathlib.Path(_OUTPUT_DIR.value), _NUM_WORKERS.value)
        return 0
    with tempfile.TemporaryDirectory() as folder:
        run(pathlib.Path(folder), _NUM_WORKERS.value)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
