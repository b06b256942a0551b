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

Re-deal (``--redeal-records N``, 0 skips; ``--only-redeal`` runs it alone):
the time to the first batch of a training pipeline over a tinax-format
Parquet file of N rows, restored from states saved on 2 processes into 4
(and into 1) with ``redeal_state``, against restoring a state of the new
layout itself at the same step. Each restore opens the file afresh, builds
the pipeline, restores and reads one batch; ``--redeal-rounds`` fresh
processes each alternate ``--redeal-trials`` restores of both kinds.

Peak memory: a fresh process opens a Parquet file of ``--memory-mib`` MiB and
reads four records, once with read_parquet_record and once with
pq.read_table; ru_maxrss is taken after the imports and after the reads.
Plain iteration (``--only-iteration`` runs it alone): ``list(dataset)``
against the same rows read through ``evaluation_batches`` (batches of 256
with ``batch_fn=list``, flattened) and through ``dataset[i]`` for every i,
each from a freshly opened dataset, for read_parquet_record,
read_array_record and a split_random part over an InMemorySource dataset;
the ratio plain iteration / pipeline has the goal <= 1.5.
Shuffle policies (``--only-policies`` runs them alone; ``--policy-records 0``
skips them): a file of ``--policy-records`` rows in row groups of 4096, read
by ``training_batches`` (batch 256, a stack batch_fn) sequentially, with
``shuffle_window`` and with the global shuffle, with the default cache and
with caches a half and a third of the decoded size; rows/s after
``--policy-warmup`` batches, the median of ``--policy-rounds`` fresh
processes whose sides alternate, as ratios against sequential in the same run,
peak RSS growth, pyarrow's read_table of the whole file for reference, and
with ``--baseline-src`` the same figures of an earlier tinax-data.
Parquet writers (``--only-writers`` runs them alone; ``--writer-records 0``
skips them): rows/s of write_parquet_record against
``pq.write_table(pa.Table.from_pylist(rows))`` for ``--writer-records`` rows
of the tinax record format and of tinax 0.2's plain records, medians of
``--writer-rounds`` interleaved rounds (``_data_writers.py``).
Feeding a jitted train step (``--only-feeding`` runs it alone;
``--feeding-records 0`` skips it): training_batches with ``stack_records``
and with a batch function of one's own, against NumPy batches of the same
rows in memory, per policy and batch size (``_data_feeding.py``).
Datasets of many files (``--only-many-files`` runs them alone): opening a
folder of ``--many-open-files`` small Parquet files against pyarrow.dataset's
count_rows, and feeding from ``--many-feeding-files`` files against one file
of the same rows (``_data_many_files.py``).
Temporary files live in a temporary folder that is removed at the end.
"""

from __future__ import annotations

import os

# Eight CPU devices, as in the test suites, unless the caller names the platform
# (JAX_PLATFORMS=tpu for the feeding figures on an accelerator); set before JAX starts.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")

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
from _data_array_record import measure_array_record
from _data_feeding import add_feeding_options, measure_feeding
from _data_many_files import add_many_files_options, measure_many_files
from _data_writers import measure_parquet_writer
from _timing import report, run, run_probe
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
    # write_parquet_record stores x as a fixed_shape_tensor: to_pylist gives its flat values.
    return {"id": row["id"], "label": row["label"], "x": np.asarray(row["x"], np.float32)}


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


def compare_iteration(folder: pathlib.Path, records: list[dict[str, Any]], options: argparse.Namespace) -> float:
    """Plain iteration of the datasets tinax returns against the pipeline path; returns the worst ratio."""
    parquet_path = folder / "iteration.parquet"
    write_parquet_record(parquet_path, records)
    opens: dict[str, Callable[[], Any]] = {"read_parquet_record": lambda: read_parquet_record(parquet_path)}
    try:
        import array_record.python.array_record_module  # noqa: F401
    except ImportError:
        print("\nPlain iteration of read_array_record: skipped, array-record is not installed")
    else:
        array_record_path = folder / "iteration.array_record"
        tinax.data.write_array_record(array_record_path, records)
        opens["read_array_record"] = lambda: tinax.data.read_array_record(array_record_path)
    in_memory = grain.MapDataset.source(tinax.data.InMemorySource(records, source_id="bench-iteration"))
    opens["split_random part"] = lambda: tinax.data.split_random(
        in_memory, 0.8, seed=options.seed, drop_column="label"
    )[0]

    def iterated(open_dataset: Callable[[], Any]) -> list[Any]:
        return list(open_dataset())

    def through_pipeline(open_dataset: Callable[[], Any]) -> list[Any]:
        batches = tinax.data.evaluation_batches(
            open_dataset(), shard_options=ShardOptions(0, 1), batch_size=256, batch_fn=list
        )
        return [row for batch in batches for row in batch]

    def indexed(open_dataset: Callable[[], Any]) -> list[Any]:
        dataset = open_dataset()
        return [dataset[index] for index in range(len(dataset))]

    worst = 0.0
    for name, open_dataset in opens.items():
        first = [row["id"] for row in iterated(open_dataset)]
        assert first == [row["id"] for row in through_pipeline(open_dataset)]
        assert first == [row["id"] for row in indexed(open_dataset)]
        samples = run(
            {
                f"{name}: iter": lambda open_dataset=open_dataset: iterated(open_dataset),
                f"{name}: evaluation_batches": lambda open_dataset=open_dataset: through_pipeline(open_dataset),
                f"{name}: dataset[i]": lambda open_dataset=open_dataset: indexed(open_dataset),
            },
            1,
            options.repeats,
            options.seed,
        )
        (ratio,) = report(
            f"{name}, open + read every row in order ({len(first)} rows):",
            samples,
            [(f"{name}: iter", f"{name}: evaluation_batches")],
            unit="ms",
        )
        worst = max(worst, ratio)
    print(f"\nworst median ratio plain iteration / pipeline: {worst:.3f} (goal <= 1.5)")
    return worst


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


# ---------------------------------------------------------------------------
# Scale: figures of this tinax-data against an earlier one ("today"), each in
# a fresh process, so that peak memory is the probe's own.

_SCALE_PROBE = r"""
import collections, json, resource, sys, time
import numpy as np
import pyarrow.parquet as pq
import tinax.data as data
from grain.sharding import ShardOptions

def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

def stack(rows):
    return {"id": np.asarray([row["id"] for row in rows]), "x": np.stack([row["x"] for row in rows])}

probe, path, count, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
options = json.loads(sys.argv[5])
reader_options = {"cache_bytes": options["cache_bytes"]} if options.get("cache_bytes") else {}
result = {}
if probe != "write":
    # Imports and the file's first open happen before anything is measured.
    import grain
    data.read_parquet_record(path, **reader_options)[0]
    pq.read_metadata(path)
if probe == "write":
    x = np.random.default_rng(seed).standard_normal((count, 16), dtype=np.float32)
    start = time.perf_counter()
    data.write_parquet_record(path, [{"id": i, "label": i % 10, "x": x[i]} for i in range(count)])
    result["seconds"] = time.perf_counter() - start
elif probe == "random":
    order = np.random.default_rng(seed).permutation(count).tolist()
    before = peak_mib()
    start = time.perf_counter()
    dataset = data.read_parquet_record(path, **reader_options)
    result["open_seconds"] = time.perf_counter() - start
    for index in order:
        dataset[index]
    result["seconds"] = time.perf_counter() - start
    result["peak_growth_mib"] = peak_mib() - before
elif probe == "read_table":
    pq.read_table(path, columns=[])
    before = peak_mib()
    start = time.perf_counter()
    table = pq.read_table(path)
    result["seconds"] = time.perf_counter() - start
    result["decoded_mib"] = table.nbytes / 2**20
    result["peak_growth_mib"] = peak_mib() - before
elif probe in ("batches", "global", "window", "sequential"):
    # One batch of another pipeline first: grain's iteration machinery starts before anything is measured.
    warm = data.read_parquet_record(path, **reader_options)
    next(iter(data.training_batches(
        warm, shard_options=ShardOptions(0, 1, drop_remainder=True), seed=seed, shuffle=False,
        num_epochs=1, batch_size=256, batch_fn=stack)))
    del warm
    dataset = data.read_parquet_record(path, **reader_options)
    extra = {"shuffle_window": options["window"]} if probe == "window" else {}
    batches = data.training_batches(
        dataset, shard_options=ShardOptions(0, 1, drop_remainder=True), seed=seed, shuffle=probe != "sequential",
        num_epochs=None if probe == "global" else 1, batch_size=256, batch_fn=stack, **extra)
    if probe == "batches":
        collections.deque(batches, maxlen=1)  # Fills the cache: the figure is from the cache.
    limit = options.get("global_batches") if probe == "global" else None
    before = peak_mib()
    start = time.perf_counter()
    seen = 0
    for batch in batches:
        seen += len(batch["id"])
        if limit is not None and seen >= limit * 256:
            break
    result["seconds"] = time.perf_counter() - start
    result["records"] = seen
    result["peak_growth_mib"] = peak_mib() - before
print(json.dumps(result))
"""

_POLICY_PROBE = r"""
import json, resource, sys, time
import numpy as np
import tinax.data as data
from grain.sharding import ShardOptions

def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

def stack(rows):
    return {"id": np.asarray([row["id"] for row in rows]), "x": np.stack([row["x"] for row in rows])}

path, options = sys.argv[1], json.loads(sys.argv[2])
policy = options["policy"]
batch_fn = data.stack_records if options.get("stack_records") else stack
def pipeline(dataset, shuffle, **extra):
    return data.training_batches(
        dataset, shard_options=ShardOptions(0, 1, drop_remainder=True), seed=0, shuffle=shuffle,
        num_epochs=None, batch_size=256, batch_fn=batch_fn, **extra)
# grain's iteration machinery starts before anything is measured, over a few rows of the file.
warm = iter(pipeline(data.read_parquet_record(path, cache_bytes=1 << 20), False))
next(warm)
warm.close()
del warm
before = peak_mib()
dataset = data.read_parquet_record(path, cache_bytes=options["cache_bytes"])
extra = {"shuffle_window": options["window"]} if policy == "window" else {}
iterator = iter(pipeline(dataset, policy != "sequential", **extra))
for _ in range(options["warmup"]):
    next(iterator)
start = time.perf_counter()
seen = 0
for _ in range(options["batches"]):
    seen += len(next(iterator)["id"])
seconds = time.perf_counter() - start
growth = peak_mib() - before
iterator.close()
print(json.dumps({"seconds": seconds, "records": seen, "peak_growth_mib": growth}))
"""

_POLICY_WRITE = r"""
import json, sys
import numpy as np
import pyarrow.parquet as pq
import tinax.data as data
path, count = sys.argv[1], int(sys.argv[2])
# float32[4, 4] (16 values): the tinax record format, in row groups of 4096 rows.
x = np.random.default_rng(0).standard_normal((count, 4, 4), dtype=np.float32)
data.write_parquet_record(path, [{"id": i, "label": i % 10, "x": x[i]} for i in range(count)])
print(json.dumps({"row_groups": pq.ParquetFile(path).metadata.num_row_groups}))
"""

_READ_TABLE_PROBE = r"""
import json, resource, sys, time
import pyarrow.parquet as pq
path = sys.argv[1]
pq.read_table(path, columns=[])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
start = time.perf_counter()
table = pq.read_table(path)
seconds = time.perf_counter() - start
print(json.dumps({
    "seconds": seconds, "decoded_mib": table.nbytes / 2**20,
    "peak_growth_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before,
}))
"""


def measure_policies(folder: pathlib.Path, options: argparse.Namespace) -> None:
    """The shuffle policies against a sequential pass, within the cache and past it, ours against today's."""
    count = options.policy_records
    path = str(folder / "policies.parquet")
    written = run_probe(_POLICY_WRITE, [path, str(count)], None)
    table = run_probe(_READ_TABLE_PROBE, [path], None)
    decoded = table["decoded_mib"]
    sides = {"ours": None}
    if options.baseline_src:
        sides["today"] = options.baseline_src
    print(
        f"\nShuffle policies: {count} rows of (int id, int label, float32[4, 4]) in {written['row_groups']} row "
        f"groups, file {os.path.getsize(path) / 2**20:.0f} MiB, decoded {decoded:.0f} MiB; batch 256, "
        f"{'stack_records' if options.policy_stack_records else 'a stacking batch_fn'}, "
        f"{options.policy_warmup} warm-up batches then {options.policy_batches} timed, each run in a "
        "fresh process" + (f"; 'today' is the tinax-data in {options.baseline_src}" if options.baseline_src else "")
    )
    print(
        f"  pyarrow read_table of the whole file: {table['seconds']:.2f} s "
        f"({count / table['seconds']:,.0f} rows/s), peak RSS growth {table['peak_growth_mib']:.0f} MiB"
    )
    caches = {
        f"default cache_bytes ({options.fit_cache_mib} MiB, the file fits)": options.fit_cache_mib << 20,
        f"file 2x the cache ({decoded / 2:.0f} MiB)": int(decoded / 2 * 2**20),
        f"file 3x the cache ({decoded / 3:.0f} MiB)": int(decoded / 3 * 2**20),
    }
    name = {"sequential": "sequential", "window": f"shuffle_window={options.window}", "global": "global"}
    for title, cache in caches.items():
        print(f"  {title}:")
        # One fresh process per side, policy and round, the sides alternating
        # within a round, so a slow spell of the machine falls on both; each
        # figure is the median of the rounds (the spread is printed beside it).
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for round_index in range(options.policy_rounds):
            # Which side goes first flips every round, so an order effect falls on both.
            order = list(sides.items())[:: -1 if round_index % 2 else 1]
            for policy in ("sequential", "window", "global"):
                for side, src in order:
                    warmup, batches = options.policy_warmup, options.policy_batches
                    if side == "today" and policy == "global" and cache < decoded * 2**20:
                        # Today's global shuffle past the cache decodes row groups for every few rows.
                        if runs.get((side, policy)):
                            continue
                        warmup, batches = 2, options.policy_slow_batches
                    settings = {
                        "stack_records": options.policy_stack_records,
                        "policy": policy,
                        "cache_bytes": cache,
                        "window": options.window,
                        "warmup": warmup,
                        "batches": batches,
                    }
                    runs.setdefault((side, policy), []).append(
                        run_probe(_POLICY_PROBE, [path, json.dumps(settings)], src)
                    )
        rates: dict[str, dict[str, float]] = {}
        for side in sides:
            rates[side] = {}
            for policy in ("sequential", "window", "global"):
                found = runs[side, policy]
                each = sorted(run["records"] / run["seconds"] for run in found)
                rate = rates[side][policy] = statistics.median(each)
                growth = max(run["peak_growth_mib"] for run in found)
                print(
                    f"    [{side:>5}] {name[policy]:<17} {rate:11,.0f} rows/s "
                    f"(median of {len(each)}, {each[0]:,.0f} to {each[-1]:,.0f}; "
                    f"{rate / rates[side]['sequential']:.3f}x sequential), peak RSS growth "
                    f"{growth:5.0f} MiB at most (cache {cache / 2**20:.0f} MiB, "
                    f"+ one row group {(cache / 2**20 + decoded / written['row_groups']):.1f} MiB)"
                )
        if "today" in rates:
            ratios = [
                f"{policy} {_ours_over_today(runs, policy):.2f}x" for policy in ("sequential", "window", "global")
            ]
            print("    ours / today (geometric mean of each round's ratio, else of the medians): " + ", ".join(ratios))


def _ours_over_today(runs: dict[tuple[str, str], list[dict[str, Any]]], policy: str) -> float:
    """Ours against today's for one policy, from runs made next to each other where each round has both."""

    def rates(side: str) -> list[float]:
        return [run["records"] / run["seconds"] for run in runs[side, policy]]

    ours, today = rates("ours"), rates("today")
    if len(ours) != len(today):
        return statistics.median(ours) / statistics.median(today)
    # The two runs of a round share the machine's mood; a ratio per round cancels most of it.
    return statistics.geometric_mean(mine / theirs for mine, theirs in zip(ours, today, strict=True))


_SPLIT_PROBE = r"""
import json, sys, time
import tinax.data as data
path = sys.argv[1]
dataset = data.read_parquet_record(path)
start = time.perf_counter()
train, test = data.split_by_column(dataset, "split")
print(json.dumps({"seconds": time.perf_counter() - start, "train": len(train), "test": len(test)}))
"""

_SPLIT_WRITE = r"""
import json, sys, time
import numpy as np
import tinax.data as data
path, count = sys.argv[1], int(sys.argv[2])
x = np.zeros((count, 4), np.float32)
records = [{"id": i, "split": "test" if i % 5 == 0 else "train", "x": x[i]} for i in range(count)]
data.write_parquet_record(path, records)
print(json.dumps({}))
"""


_REDEAL_PROBE = r"""
import json, sys, time
import numpy as np
from grain.sharding import ShardOptions
import tinax.data as data

def stack(rows):
    return {"id": np.asarray([row["id"] for row in rows]), "x": np.stack([row["x"] for row in rows])}

path, settings = sys.argv[1], json.loads(sys.argv[2])
old_count, new_count, global_batch = settings["old_count"], settings["new_count"], settings["global_batch"]
window, step, trials = settings["window"], settings["step"], settings["trials"]
new_shard = ShardOptions(0, new_count, drop_remainder=True)

def pipeline(dataset, index, count):
    return data.training_batches(
        dataset, shard_options=ShardOptions(index, count, drop_remainder=True), seed=0, shuffle=True,
        num_epochs=None, batch_size=global_batch // count, batch_fn=stack, shuffle_window=window)

def state_at(dataset, index, count, next_index):
    # A saved state is the description and grain's index: the state of an iterator that read next_index batches.
    state = iter(pipeline(dataset, index, count)).get_state()
    state["grain"] = {"next_index": next_index}
    return json.loads(json.dumps(state))

# Imports, grain's iteration machinery and the file's first open happen before anything is measured.
warm = data.read_parquet_record(path)
next(iter(pipeline(warm, 0, new_count)))
del warm
rows = data.read_parquet_record(path)
# The old processes' states, and the new layout's own state at the same step (the same global batch, so as
# many rows read).
old_states = [state_at(rows, index, old_count, step) for index in range(old_count)]
same_state = state_at(rows, 0, new_count, step)
del rows
found = {"same": [], "redeal": []}
for trial in range(trials):
    # Each trial opens the file afresh (an empty row-group cache), as a restarted process does.
    for mode in ("same", "redeal") if trial % 2 == 0 else ("redeal", "same"):
        start = time.perf_counter()
        iterator = iter(pipeline(data.read_parquet_record(path), 0, new_count))
        redealt = time.perf_counter()
        state = data.redeal_state(old_states, shard_options=new_shard) if mode == "redeal" else same_state
        redealt = time.perf_counter() - redealt
        iterator.set_state(state)
        next(iterator)
        found[mode].append({"seconds": time.perf_counter() - start, "redeal_state_seconds": redealt})
        iterator.close()
print(json.dumps(found))
"""

_REDEAL_WRITE = r"""
import json, sys
import numpy as np
import tinax.data as data
path, count = sys.argv[1], int(sys.argv[2])
# 2-d arrays: the tinax record format, in row groups (1-d arrays would make tinax 0.2's single-group table).
x = np.random.default_rng(0).standard_normal((count, 4, 4), dtype=np.float32)
data.write_parquet_record(path, [{"id": i, "label": i % 10, "x": x[i]} for i in range(count)])
print(json.dumps({}))
"""


def measure_redeal(folder: pathlib.Path, options: argparse.Namespace) -> None:
    count = options.redeal_records
    path = str(folder / "redeal.parquet")
    run_probe(_REDEAL_WRITE, [path, str(count)], None)
    global_batch, old_count = 256, 2
    step = count // global_batch // 3  # A third into the first epoch.
    print(
        f"\nRe-deal: time to the first batch over {count} Parquet rows of (int id, int label, float32[4, 4]), global "
        f"batch {global_batch}, saved by {old_count} processes at step {step}; median of {options.redeal_rounds} "
        f"fresh processes x {options.redeal_trials} alternating restores, each opening the file afresh"
    )
    worst = 0.0
    for window in (options.window, None):
        for new_count in (4, 1):
            settings = {
                "old_count": old_count,
                "new_count": new_count,
                "global_batch": global_batch,
                "window": window,
                "step": step,
            }
            rounds: dict[str, list[dict[str, Any]]] = {"same": [], "redeal": []}
            for _ in range(options.redeal_rounds):
                found = run_probe(
                    _REDEAL_PROBE, [path, json.dumps({**settings, "trials": options.redeal_trials})], None
                )
                for mode, trials in found.items():
                    rounds[mode] += trials
            median = {mode: statistics.median(found["seconds"] for found in runs) for mode, runs in rounds.items()}
            redeal_call = statistics.median(found["redeal_state_seconds"] for found in rounds["redeal"])
            ratio = median["redeal"] / median["same"]
            worst = max(worst, ratio)
            shuffle = f"shuffle_window={window}" if window else "global shuffle"
            print(
                f"  {shuffle:<18} {old_count} -> {new_count} processes: re-deal {median['redeal'] * 1e3:7.1f} ms "
                f"(redeal_state {redeal_call * 1e3:.2f} ms), same-count restore {median['same'] * 1e3:7.1f} ms, "
                f"ratio {ratio:.2f}"
            )
    print(f"  worst re-deal / same-count ratio: {worst:.2f} (goal <= 1.5)")


def measure_scale(folder: pathlib.Path, options: argparse.Namespace) -> None:
    count, seed = options.scale_records, options.seed
    sides = {"ours": None}
    if options.baseline_src:
        sides["today"] = options.baseline_src
    print(
        f"\nScale figures: {count} rows of (int id, int label, float32[16]), batch 256, each probe in a fresh "
        "process" + (f"; 'today' is the tinax-data in {options.baseline_src}" if options.baseline_src else "")
    )
    figures: dict[str, dict[str, dict[str, Any]]] = {}
    for side, src in sides.items():
        path = str(folder / f"scale-{side}.parquet")
        figures[side] = {"write": run_probe(_SCALE_PROBE, ["write", path, str(count), str(seed), "{}"], src)}
        run_probe(_SPLIT_WRITE, [str(folder / f"split-{side}.parquet"), str(count)], src)
    # Rounds alternate the sides, so a change in machine load hits both; each figure is the median round.
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {side: collections.defaultdict(list) for side in sides}
    for _ in range(options.scale_rounds):
        for side, src in sides.items():
            path = str(folder / f"scale-{side}.parquet")
            fits = json.dumps({"cache_bytes": options.fit_cache_mib << 20} if side == "ours" else {})
            for probe in ("random", "batches"):
                samples[side][probe].append(run_probe(_SCALE_PROBE, [probe, path, str(count), str(seed), fits], src))
            samples[side]["split"].append(run_probe(_SPLIT_PROBE, [str(folder / f"split-{side}.parquet")], src))
            if side == "ours":
                samples[side]["read_table"].append(
                    run_probe(_SCALE_PROBE, ["read_table", path, str(count), str(seed), "{}"], None)
                )
    for side, probes in samples.items():
        for probe, rounds in probes.items():
            ordered = sorted(rounds, key=lambda found: found["seconds"] / found.get("records", 1))
            figures[side][probe] = ordered[len(ordered) // 2]
    ours = figures["ours"]
    table = ours["read_table"]
    print(f"  Arrow-decoded size of the file's columns: {table['decoded_mib']:.1f} MiB")
    for side, found in figures.items():
        random_rate = count / found["random"]["seconds"]
        batch_rate = found["batches"]["records"] / found["batches"]["seconds"]
        print(f"  [{side}] write {found['write']['seconds']:.2f} s")
        print(
            f"  [{side}] open + one random pass: {random_rate:,.0f} records/s, "
            f"open {found['random']['open_seconds']:.4f} s,"
            f" peak RSS growth {found['random']['peak_growth_mib']:.0f} MiB"
            f" ({found['random']['peak_growth_mib'] / table['decoded_mib']:.2f}x the decoded size)"
        )
        print(f"  [{side}] training_batches from the cache: {batch_rate:,.0f} records/s")
        print(f"  [{side}] split_by_column: {found['split']['seconds']:.3f} s")
    print(
        f"  pyarrow read_table: {table['seconds']:.3f} s, peak RSS growth {table['peak_growth_mib']:.0f} MiB; "
        f"our open + full random pass / read_table: {ours['random']['seconds'] / table['seconds']:.2f}"
    )
    if "today" in figures:
        today = figures["today"]
        print("  ratios, ours against today:")
        print(
            f"    open + random pass, per record: {today['random']['seconds'] / ours['random']['seconds']:.2f}x faster"
        )
        ours_rate = ours["batches"]["records"] / ours["batches"]["seconds"]
        today_rate = today["batches"]["records"] / today["batches"]["seconds"]
        print(f"    training_batches from the cache: {ours_rate / today_rate:.2f}x the records/s")
        print(f"    split_by_column: {today['split']['seconds'] / ours['split']['seconds']:.1f}x faster")

    # Larger than the budget: the shuffle policies against a sequential pass.
    cache = options.large_cache_mib << 20
    path = str(folder / "scale-ours.parquet")
    settings = json.dumps({"cache_bytes": cache, "window": options.window, "global_batches": options.global_batches})
    print(
        f"\nLarger than the budget: the same file, cache_bytes {options.large_cache_mib} MiB "
        f"({table['decoded_mib'] / options.large_cache_mib:.0f}x smaller than the decoded file), one epoch:"
    )
    rates = {}
    for probe in ("sequential", "window", "global"):
        found = run_probe(_SCALE_PROBE, [probe, path, str(count), str(seed), settings], None)
        rates[probe] = found["records"] / found["seconds"]
        label = {
            "sequential": "shuffle=False (sequential)",
            "window": f"shuffle_window={options.window}",
            "global": f"global shuffle ({options.global_batches} batches)",
        }[probe]
        print(f"  {label:<34} {rates[probe]:12,.0f} records/s, peak RSS growth {found['peak_growth_mib']:.0f} MiB")
    print(f"  window / sequential records/s: {rates['window'] / rates['sequential']:.2f} (goal >= 0.5)")
    print(f"  global / sequential records/s: {rates['global'] / rates['sequential']:.4f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memory-mib", type=int, default=1024)
    parser.add_argument("--scale-records", type=int, default=200_000, help="rows of the scale figures (0 skips)")
    parser.add_argument("--fit-cache-mib", type=int, default=512, help="cache_bytes of the file that fits")
    parser.add_argument("--scale-rounds", type=int, default=3, help="alternating rounds of the scale probes")
    parser.add_argument("--large-cache-mib", type=int, default=1, help="cache_bytes of the larger-than-budget runs")
    parser.add_argument("--window", type=int, default=2, help="shuffle_window of the larger-than-budget run")
    parser.add_argument("--global-batches", type=int, default=20, help="batches timed for the global shuffle")
    parser.add_argument("--only-iteration", action="store_true", help="run only the plain-iteration figures")
    parser.add_argument(
        "--baseline-src",
        default=None,
        help="src folder of an earlier tinax-data (say, a git worktree at an older commit) to measure 'today'",
    )
    parser.add_argument("--only-scale", action="store_true", help="run only the scale figures")
    parser.add_argument(
        "--only-array-record", action="store_true", help="run only the ArrayRecord feeding and writing figures"
    )
    parser.add_argument(
        "--array-record-records", type=int, default=20_000, help="rows of the ArrayRecord feeding figures (0 skips)"
    )
    parser.add_argument("--redeal-records", type=int, default=1_000_000, help="rows of the re-deal figures (0 skips)")
    parser.add_argument("--redeal-rounds", type=int, default=3, help="fresh processes per re-deal figure")
    parser.add_argument("--redeal-trials", type=int, default=8, help="restores of each kind in each process")
    parser.add_argument("--only-redeal", action="store_true", help="run only the re-deal figures")
    parser.add_argument("--only-policies", action="store_true", help="run only the shuffle-policy figures")
    parser.add_argument(
        "--policy-stack-records",
        action="store_true",
        help="the shuffle-policy runs batch with stack_records (the stacked fields) instead of a stacking batch_fn",
    )
    parser.add_argument("--policy-records", type=int, default=2_000_000, help="rows of the shuffle-policy figures")
    parser.add_argument("--policy-warmup", type=int, default=200, help="warm-up batches of each policy run")
    parser.add_argument("--policy-batches", type=int, default=1000, help="timed batches of each policy run")
    parser.add_argument(
        "--policy-rounds", type=int, default=3, help="alternating rounds of the shuffle-policy runs (medians)"
    )
    parser.add_argument(
        "--policy-slow-batches", type=int, default=8, help="timed batches of today's global shuffle past the cache"
    )
    parser.add_argument("--only-writers", action="store_true", help="run only the Parquet writer figures")
    parser.add_argument("--writer-records", type=int, default=2_000_000, help="rows of the writer figures (0 skips)")
    parser.add_argument("--writer-rounds", type=int, default=3, help="interleaved rounds of the writer figures")
    add_feeding_options(parser)
    add_many_files_options(parser)
    options = parser.parse_args()
    if options.only_feeding:
        with tempfile.TemporaryDirectory(prefix="bench-data-") as folder_name:
            measure_feeding(pathlib.Path(folder_name), options)
        return 0
    if options.only_many_files:
        with tempfile.TemporaryDirectory(prefix="bench-data-") as folder_name:
            measure_many_files(pathlib.Path(folder_name), options)
        return 0
    if options.only_writers:
        with tempfile.TemporaryDirectory(prefix="bench-data-") as folder_name:
            measure_parquet_writer(pathlib.Path(folder_name), options)
        return 0
    if options.only_redeal:
        with tempfile.TemporaryDirectory(prefix="bench-data-") as folder_name:
            measure_redeal(pathlib.Path(folder_name), options)
        return 0
    if options.only_policies:
        with tempfile.TemporaryDirectory(prefix="bench-data-") as folder_name:
            measure_policies(pathlib.Path(folder_name), options)
        return 0
    if options.only_array_record:
        with tempfile.TemporaryDirectory(prefix="bench-data-") as folder_name:
            measure_array_record(pathlib.Path(folder_name), options)
        return 0
    if options.only_scale:
        with tempfile.TemporaryDirectory(prefix="bench-data-") as folder_name:
            measure_scale(pathlib.Path(folder_name), options)
        return 0

    print(
        f"python {sys.version.split()[0]}, grain {grain.__version__ if hasattr(grain, '__version__') else '?'}, "
        f"pyarrow {pyarrow.__version__}, numpy {np.__version__}"
    )
    print(f"{options.records} records of id, label and float32[{options.features}], {options.repeats} rounds")
    records = make_records(options.records, options.features, options.seed)
    ratios: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-data-") as folder_name:
        folder = pathlib.Path(folder_name)
        if options.only_iteration:
            compare_iteration(folder, records, options)
            return 0
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

        if options.scale_records > 0:
            measure_scale(folder, options)

        if options.policy_records > 0:
            measure_policies(folder, options)

        if options.array_record_records > 0:
            measure_array_record(folder, options)

        if options.redeal_records > 0:
            measure_redeal(folder, options)

        if options.writer_records > 0:
            measure_parquet_writer(folder, options)

        if options.feeding_records > 0:
            measure_feeding(folder, options)

        measure_many_files(folder, options)

        compare_iteration(folder, records, options)

    print(f"\nworst median ratio against the hand-written equivalent: {max(ratios):.3f} (goal <= 1.1)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
