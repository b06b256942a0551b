"""Cost of tinax.data's record readers against the hand-written upstream equivalents.

Run from the repository root with ``hatch run bench:data``. Options:
``--records N`` (records per file), ``--features N`` (float32 elements in each
record's array), ``--repeats N`` (interleaved rounds), ``--seed N``,
``--memory-mib N`` (size of the Parquet file for the memory check; 0 skips it).

Every record is ``{"id": int, "label": str, "x": float32[features]}``, and a
*pass* reads every record once in a fixed shuffled order through
``MapDataset`` indexing, so both sides of a comparison return equal records.

Comparisons, each timed in interleaved rounds within one run:
  Parquet, open + shuffled pass:
    read_parquet_record(path)
    vs  pq.read_table(path).to_pylist() in grain.MapDataset.source(rows).map(decode)
  Parquet, shuffled pass over an already open dataset: the same two datasets.
  ArrayRecord, open + shuffled pass:
    read_array_record(path)
    vs  grain.sources.ArrayRecordDataSource(path) in MapDataset.source(...).map(decode)
  ArrayRecord, shuffled pass over an already open dataset.
  training_batches(...) vs the hand-written pipeline it stands for (seed,
    shuffle, cut to whole global batches, slice the shard, batch, repeat with
    a reseed per epoch), both over the same rows.
``decode`` is written by hand for this record layout, as a user of the raw
upstream call would write it.

Peak memory: a fresh process opens a Parquet file of ``--memory-mib`` MiB and
reads four records, once with read_parquet_record and once with
pq.read_table; ru_maxrss is taken after the imports and after the reads.
Temporary files live in a temporary folder that is removed at the end.
"""

from __future__ import annotations

import os

# Eight CPU devices, as in the test suites; must be set before JAX starts.
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["JAX_NUM_CPU_DEVICES"] = "8"

import argparse
import collections
import json
import pathlib
import statistics
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import grain
import numpy as np
import pyarrow
import pyarrow.parquet as pq
from _timing import report, run
from grain.sharding import ShardOptions

import tinax.data
from tinax.data import read_parquet_record, write_parquet_record

_INT = struct.Struct("<q")
_LENGTH = struct.Struct("<Q")
_HEADER_MAGIC = b"tinax-records\n"


def make_records(count: int, features: int, seed: int) -> list[dict[str, Any]]:
    values = np.random.default_rng(seed).standard_normal((count, features), dtype=np.float32)
    return [{"id": index, "label": f"label-{index % 10}", "x": values[index]} for index in range(count)]


def read_pass(dataset: Any, order: Sequence[int]) -> Any:
    record = None
    for index in order:
        record = dataset[index]
    return record


# ---------------------------------------------------------------------------
# The hand-written equivalents


def decode_parquet_row(row: dict[str, Any]) -> dict[str, Any]:
    array = row["x"]
    return {
        "id": row["id"],
        "label": row["label"],
        "x": np.frombuffer(array["data"], np.float32).reshape(array["shape"]).copy(),
    }


def pyarrow_rows_dataset(path: pathlib.Path) -> grain.MapDataset:
    return grain.MapDataset.source(pq.read_table(path).to_pylist()).map(decode_parquet_row)


def decode_array_record(data: bytes) -> dict[str, Any]:
    # The tinax record encoding, for fields id (int), label (str), x (1-d float32).
    (identifier,) = _INT.unpack_from(data, 0)
    (label_length,) = _LENGTH.unpack_from(data, 8)
    offset = 16 + label_length
    label = data[16:offset].decode("utf-8")
    (extent,) = _LENGTH.unpack_from(data, offset)
    x = np.frombuffer(data, np.float32, extent, offset + 8).copy()
    return {"id": identifier, "label": label, "x": x}


def array_record_source_dataset(path: pathlib.Path) -> grain.MapDataset:
    source = grain.sources.ArrayRecordDataSource(str(path))
    header = json.loads(source[len(source) - 1][len(_HEADER_MAGIC) :])
    assert [field["name"] for field in header["fields"]] == ["id", "label", "x"]
    return grain.MapDataset.source(source).map(decode_array_record)


def stack_batch(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    return {"id": np.asarray([row["id"] for row in rows]), "x": np.stack([row["x"] for row in rows])}


# ---------------------------------------------------------------------------
# Sections


def compare_reads(
    title: str,
    tinax_open: Callable[[], Any],
    upstream_open: Callable[[], Any],
    upstream_name: str,
    count: int,
    options: argparse.Namespace,
) -> list[float]:
    order = np.random.default_rng(options.seed).permutation(count).tolist()
    tinax_dataset, upstream_dataset = tinax_open(), upstream_open()
    first_tinax, first_upstream = read_pass(tinax_dataset, order[:1]), read_pass(upstream_dataset, order[:1])
    assert first_tinax["id"] == first_upstream["id"]
    assert np.array_equal(first_tinax["x"], first_upstream["x"])
    ratios = []
    tinax_name = title.split(" ")[0]
    samples = run(
        {
            f"{tinax_name} open + pass": lambda: read_pass(tinax_open(), order),
            f"{upstream_name} open + pass": lambda: read_pass(upstream_open(), order),
        },
        1,
        options.repeats,
        options.seed,
    )
    ratios += report(
        f"{title}, open + one shuffled pass over {count} records:",
        samples,
        [(f"{tinax_name} open + pass", f"{upstream_name} open + pass")],
        unit="ms",
    )
    samples = run(
        {
            f"{tinax_name} pass": lambda: read_pass(tinax_dataset, order),
            f"{upstream_name} pass": lambda: read_pass(upstream_dataset, order),
        },
        1,
        options.repeats,
        options.seed,
    )
    ratios += report(
        f"{title}, one shuffled pass over an open dataset ({count} records):",
        samples,
        [(f"{tinax_name} pass", f"{upstream_name} pass")],
        unit="ms",
    )
    for name, values in samples.items():
        print(f"  {name:<36} {count / statistics.median(values):12,.0f} records/s")
    return ratios


def compare_training_batches(records: list[dict[str, Any]], options: argparse.Namespace) -> list[float]:
    training_batches = tinax.data.training_batches
    source = tinax.data.InMemorySource(records, source_id="bench-data")
    dataset = grain.MapDataset.source(source)
    batch_size, num_epochs = 64, 2

    def tinax_pipeline() -> Any:
        return training_batches(
            dataset,
            shard_options=ShardOptions(shard_index=0, shard_count=1, drop_remainder=True),
            seed=options.seed,
            shuffle=True,
            num_epochs=num_epochs,
            batch_size=batch_size,
            batch_fn=stack_batch,
        )

    def hand_written() -> Any:
        usable = len(dataset) // batch_size * batch_size
        rows = dataset.seed(options.seed).shuffle().slice(slice(0, usable)).slice(slice(0, usable))
        batches = rows.batch(batch_size, drop_remainder=True, batch_fn=stack_batch)
        return batches.repeat(num_epochs, reseed_each_epoch=True)

    def consume(pipeline: Callable[[], Any]) -> Any:
        return collections.deque(pipeline(), maxlen=1)

    samples = run(
        {"training_batches": lambda: consume(tinax_pipeline), "hand-written grain": lambda: consume(hand_written)},
        1,
        options.repeats,
        options.seed,
    )
    return report(
        f"training_batches, build + iterate {num_epochs} epochs of {len(records)} rows in batches of {batch_size}:",
        samples,
        [("training_batches", "hand-written grain")],
        unit="ms",
    )


class GeneratedRecords(Sequence[dict[str, Any]]):
    """Records made on demand, so a file larger than memory can be written."""

    def __init__(self, count: int, features: int) -> None:
        self._count = count
        self._features = features

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: Any) -> Any:
        if not isinstance(index, int):
            raise TypeError("GeneratedRecords takes int indices")
        if not 0 <= index < self._count:
            raise IndexError(index)
        # Random values: Parquet compression must not shrink the file below its nominal size.
        return {"id": index, "x": np.random.default_rng(index).standard_normal(self._features, dtype=np.float32)}


_MEMORY_PROBE = """
import json, resource, sys
import grain, numpy, pyarrow.parquet as pq
from tinax.data import read_parquet_record

def resident_kib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))

path, mode = sys.argv[1], sys.argv[2]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
resident_before = resident_kib()
if mode == "read_parquet_record":
    dataset = read_parquet_record(path)
    count = len(dataset)
    rows = [dataset[index] for index in (0, count // 3, 2 * count // 3, count - 1)]
else:
    table = pq.read_table(path)
    count = table.num_rows
    rows = [table.slice(index, 1).to_pylist()[0] for index in (0, count // 3, 2 * count // 3, count - 1)]
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({
    "before_kib": before, "after_kib": after, "resident_growth_kib": resident_kib() - resident_before, "rows": len(rows)
}))
"""


def measure_memory(folder: pathlib.Path, size_mib: int) -> None:
    features = 16384  # 64 KiB of float32 per record
    count = max(1, size_mib * 1024 * 1024 // (features * 4))
    path = folder / "large.parquet"
    print(f"\nPeak memory of opening a {size_mib} MiB Parquet file ({count} records of 64 KiB) and reading 4 records:")
    write_parquet_record(path, GeneratedRecords(count, features))
    print(
        f"  file size {path.stat().st_size / 2**20:.0f} MiB, {pq.ParquetFile(path).metadata.num_row_groups} row groups"
    )
    results = {}
    for mode in ("read_parquet_record", "pyarrow read_table"):
        completed = subprocess.run(
            [sys.executable, "-c", _MEMORY_PROBE, str(path), mode],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        )
        measured = json.loads(completed.stdout.strip().splitlines()[-1])
        results[mode] = (measured["after_kib"] - measured["before_kib"]) / 1024
        print(
            f"  {mode:<20} peak RSS after imports {measured['before_kib'] / 1024:6.0f} MiB, "
            f"peak growth {results[mode]:6.0f} MiB, resident growth {measured['resident_growth_kib'] / 1024:6.0f} MiB"
        )
    print(
        f"  growth read_parquet_record / read_table: "
        f"{results['read_parquet_record'] / max(results['pyarrow read_table'], 1e-9):.3f}"
    )
    path.unlink()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memory-mib", type=int, default=1024)
    options = parser.parse_args()

    print(
        f"python {sys.version.split()[0]}, grain {grain.__version__ if hasattr(grain, '__version__') else '?'}, "
        f"pyarrow {pyarrow.__version__}, numpy {np.__version__}"
    )
    print(f"{options.records} records of id, label and float32[{options.features}], {options.repeats} rounds")
    records = make_records(options.records, options.features, options.seed)
    ratios: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-data-") as folder_name:
        folder = pathlib.Path(folder_name)
        parquet_path = folder / "records.parquet"
        write_parquet_record(parquet_path, records)
        groups = pq.ParquetFile(parquet_path).metadata.num_row_groups
        print(f"Parquet file: {parquet_path.stat().st_size / 2**20:.1f} MiB in {groups} row groups")
        ratios += compare_reads(
            "read_parquet_record",
            lambda: read_parquet_record(parquet_path),
            lambda: pyarrow_rows_dataset(parquet_path),
            "read_table+to_pylist",
            options.records,
            options,
        )

        try:
            import array_record.python.array_record_module  # noqa: F401
        except ImportError:
            print('\nArrayRecord: skipped, array-record is not installed (the "arrayrecord" extra)')
        else:
            array_record_path = folder / "records.array_record"
            tinax.data.write_array_record(array_record_path, records)
            ratios += compare_reads(
                "read_array_record",
                lambda: tinax.data.read_array_record(array_record_path),
                lambda: array_record_source_dataset(array_record_path),
                "ArrayRecordDataSource+decode",
                options.records,
                options,
            )

        if hasattr(tinax.data, "training_batches"):
            ratios += compare_training_batches(records, options)
        else:
            print("\ntraining_batches: skipped, tinax.data has no training_batches yet")

        if options.memory_mib > 0:
            measure_memory(folder, options.memory_mib)

    print(f"\nworst median ratio against the hand-written equivalent: {max(ratios):.3f} (goal <= 1.1)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
