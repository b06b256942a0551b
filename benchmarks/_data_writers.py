"""Writer figures for ``bench_data.py``: tinax.data's file writers against pyarrow's own.

Each figure is a self-contained function of a scratch folder and the parsed
command-line options, so further writers can sit beside it.
"""

from __future__ import annotations

import argparse
import gc
import pathlib
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tinax.data import write_parquet_record


def _tinax_format_records(count: int, seed: int) -> list[dict[str, Any]]:
    # float32[4, 4]: pyarrow cannot convert it, so write_parquet_record uses the tinax record format.
    values = np.random.default_rng(seed).standard_normal((count, 4, 4), dtype=np.float32)
    return [{"id": index, "label": index % 10, "x": values[index]} for index in range(count)]


def _plain_records(count: int, seed: int) -> list[dict[str, Any]]:
    # What tinax 0.2 wrote: pyarrow converts these itself, and write_parquet_record writes its table.
    values = np.random.default_rng(seed).standard_normal((count, 16), dtype=np.float32)
    return [
        {"id": index, "label": f"label-{index % 10}", "score": index / 4, "x": values[index]} for index in range(count)
    ]


def _seconds(write: Callable[[], None]) -> float:
    # Garbage left by the other side's write is collected before the clock starts, not during.
    gc.collect()
    start = time.perf_counter()
    write()
    return time.perf_counter() - start


def _compare(
    folder: pathlib.Path,
    title: str,
    records: list[dict[str, Any]],
    pyarrow_rows: list[dict[str, Any]],
    baseline: str,
    options: argparse.Namespace,
) -> float:
    """Times both writes of the same rows in interleaved rounds (shuffled order); prints rows/s; returns the ratio."""
    ours_path = folder / "writer-tinax.parquet"
    theirs_path = folder / "writer-pyarrow.parquet"
    ours = "write_parquet_record"
    calls: dict[str, Callable[[], None]] = {
        ours: lambda: write_parquet_record(ours_path, records),
        baseline: lambda: pq.write_table(pa.Table.from_pylist(pyarrow_rows), theirs_path),
    }
    # A short write of each first: imports and one-time tables are not part of a row's cost.
    write_parquet_record(ours_path, records[:1000])
    pq.write_table(pa.Table.from_pylist(pyarrow_rows[:1000]), theirs_path)
    order = list(calls)
    samples: dict[str, list[float]] = {name: [] for name in order}
    rng = random.Random(options.seed)
    for _ in range(options.writer_rounds):
        rng.shuffle(order)
        for name in order:
            samples[name].append(_seconds(calls[name]))
    count = len(records)
    print(f"\n{title}")
    for name, seconds in samples.items():
        median = statistics.median(seconds)
        print(f"  {name:<50} median {count / median:12,.0f} rows/s ({median:.2f} s)")
    ratio = statistics.median(
        theirs_seconds / ours_seconds
        for ours_seconds, theirs_seconds in zip(samples[ours], samples[baseline], strict=True)
    )
    print(f"  rows/s ratio {ours} / {baseline}: median {ratio:.2f} (goal >= 0.5)")
    groups = pq.ParquetFile(ours_path).metadata.num_row_groups
    print(f"  {ours}'s file: {ours_path.stat().st_size / 2**20:.1f} MiB in {groups} row groups")
    ours_path.unlink()
    theirs_path.unlink()
    return ratio


def measure_parquet_writer(folder: pathlib.Path, options: argparse.Namespace) -> None:
    """Prints the rows/s of ``write_parquet_record`` against pyarrow writing the same rows.

    Two kinds of records, ``options.writer_records`` of each: the tinax record
    format (``{"id": int, "label": int, "x": float32[4, 4]}``) and records
    tinax 0.2 could write (``{"id": int, "label": str, "score": float, "x":
    float32[16]}``). pyarrow's side is ``pq.write_table(pa.Table.from_pylist(rows),
    path)``; pyarrow converts no array of two dimensions, so for the tinax
    format its rows hold ``x`` as a flat float32[16] view of the same
    values, the closest table it builds. ``options.writer_rounds`` rounds
    alternate the two sides in a shuffled order; the figures are medians and
    the ratio is the median of the per-round ratios.

    Args:
      folder: A scratch folder for the files.
      options: Parsed options with ``writer_records``, ``writer_rounds`` and ``seed``.
    """
    count = options.writer_records
    print(f"\nParquet writers: {count:,} rows per file, {options.writer_rounds} interleaved rounds")
    records = _tinax_format_records(count, options.seed)
    _compare(
        folder,
        "tinax record format, id, label (int), x float32[4, 4]:",
        records,
        [{"id": record["id"], "label": record["label"], "x": record["x"].reshape(-1)} for record in records],
        "pq.write_table(Table.from_pylist(rows, x flat))",
        options,
    )
    del records  # One kind of records at a time in memory.
    records = _plain_records(count, options.seed)
    _compare(
        folder,
        "tinax 0.2's plain table, id, label (str), score, x float32[16]:",
        records,
        records,
        "pq.write_table(Table.from_pylist(rows))",
        options,
    )
