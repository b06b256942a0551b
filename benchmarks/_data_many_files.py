"""Datasets of many files: opening a folder of small files, and feeding from many files against one.

``measure_many_files`` gives two figures:

- **Opening**: ``read_parquet_record(folder)`` over a folder of
  ``--many-open-files`` small Parquet files (64 rows each, written by
  pyarrow), against ``pyarrow.dataset.dataset(folder).count_rows()``, which
  reads the same footers; seconds and bytes read (the process's ``rchar``)
  per open, medians of ``--many-rounds`` interleaved rounds. Goal: at most
  1.5 times pyarrow's time.
- **Feeding**: the rows of the feeding figures (``_data_feeding``) written
  as one file and as ``--many-feeding-files`` files, read by
  ``training_batches`` with ``stack_records`` into the same jitted train
  step, in order and with the global shuffle, on the first pass and after
  one epoch; each ratio is the median of the rounds' ratios. Goal: the
  many files within 10% of the one file.

Run it alone with ``hatch run bench:data --only-many-files``.
"""

from __future__ import annotations

import argparse
import itertools
import pathlib
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from _data_feeding import _after_one_epoch, _compare, _tinax_batches

from tinax.data import read_parquet_record, stack_records, write_parquet_record

__all__ = ["add_many_files_options", "measure_many_files"]


def _bytes_read() -> int:
    """What this process has read so far through read calls, as the kernel counts it (0 where it does not)."""
    try:
        with open("/proc/self/io", "rb") as handle:
            for line in handle:
                if line.startswith(b"rchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _timed(open_dataset: Callable[[], Any]) -> tuple[float, int]:
    before = _bytes_read()
    started = time.perf_counter()
    open_dataset()
    seconds = time.perf_counter() - started
    return seconds, _bytes_read() - before


def _measure_opening(folder: pathlib.Path, options: argparse.Namespace) -> None:
    count = options.many_open_files
    files = folder / "small-files"
    files.mkdir()
    rng = np.random.default_rng(0)
    for index in range(count):
        table = pa.table({"id": np.arange(index * 64, index * 64 + 64), "x": rng.standard_normal(64)})
        pq.write_table(table, files / f"part-{index:05d}.parquet")
    total = count * 64
    sides: dict[str, Callable[[], Any]] = {
        "read_parquet_record(folder)": lambda: read_parquet_record(files),
        "pyarrow.dataset count_rows": lambda: ds.dataset(files, format="parquet").count_rows(),
    }
    assert len(read_parquet_record(files)) == total == ds.dataset(files, format="parquet").count_rows()
    samples: dict[str, list[tuple[float, int]]] = {name: [] for name in sides}
    for round_index in range(options.many_rounds):
        names = list(sides) if round_index % 2 == 0 else list(reversed(sides))
        for name in names:
            samples[name].append(_timed(sides[name]))
    print(f"\nOpening a folder of {count} Parquet files of 64 rows ({options.many_rounds} interleaved rounds)")
    baseline = "pyarrow.dataset count_rows"
    for name, values in samples.items():
        seconds = statistics.median(value[0] for value in values)
        read = statistics.median(value[1] for value in values)
        line = f"  {name:<30} {seconds * 1000:>8.1f} ms  {read / 2**20:>7.2f} MiB read"
        if name != baseline:
            ratio = statistics.median(
                mine[0] / theirs[0] for mine, theirs in zip(values, samples[baseline], strict=True)
            )
            line += f"   {ratio:.2f}x the time of {baseline} (goal <= 1.5)"
        print(line)
    folder_bytes = sum(path.stat().st_size for path in files.iterdir())
    print(f"  the files hold {folder_bytes / 2**20:.2f} MiB in all")


def _write_split(folder: pathlib.Path, count: int, parts: int) -> tuple[pathlib.Path, pathlib.Path]:
    x = np.random.default_rng(0).standard_normal((count, 4, 4), dtype=np.float32)
    records = [{"id": index, "label": index % 10, "x": x[index]} for index in range(count)]
    one = folder / "one.parquet"
    write_parquet_record(one, records)
    many = folder / "many"
    many.mkdir()
    cuts = np.linspace(0, count, parts + 1).astype(int)
    for index, (start, stop) in enumerate(itertools.pairwise(cuts)):
        write_parquet_record(many / f"train-{index:05d}-of-{parts:05d}.parquet", records[start:stop])
    return one, many


def _measure_feeding(folder: pathlib.Path, options: argparse.Namespace) -> None:
    count, parts = options.many_feeding_records, options.many_feeding_files
    one, many = _write_split(folder, count, parts)
    print(f"\nFeeding a jitted train step from {parts} files against one file: {count} rows in all")
    ratios = []
    for batch_size in options.feeding_batch_sizes:
        timed = max(20, options.feeding_rows // batch_size)
        for policy in ("in order", "global"):
            for after_epoch in (False, True):

                def side(path: pathlib.Path, b: int = batch_size, p: str = policy, e: bool = after_epoch) -> Any:
                    batches: Iterator[dict[str, Any]] = _tinax_batches(path, b, p, stack_records, None)
                    return _after_one_epoch(batches, count // b) if e else batches

                sides = {"one file": lambda s=side: s(one), f"{parts} files": lambda s=side: s(many)}
                when = "after one epoch" if after_epoch else "first pass"
                found: dict[str, float] = {}
                _compare(f"batch {batch_size}, {policy}, {when}", sides, "one file", options, timed, found)
                ratios.append(found[f"{parts} files"])
    print(f"\n  lowest of the ratios above, {parts} files / one file: {min(ratios):.2f} (goal >= 0.9)")


def measure_many_files(folder: pathlib.Path, options: argparse.Namespace) -> None:
    """The opening and feeding figures of datasets of many files."""
    if options.many_open_files > 0:
        _measure_opening(folder, options)
    if options.many_feeding_records > 0:
        _measure_feeding(folder, options)


def add_many_files_options(parser: argparse.ArgumentParser) -> None:
    """The command-line options of the many-files figures."""
    parser.add_argument("--only-many-files", action="store_true", help="run only the many-files figures")
    parser.add_argument("--many-open-files", type=int, default=1000, help="files of the opening figure (0 skips)")
    parser.add_argument("--many-rounds", type=int, default=7, help="interleaved rounds of the opening figure")
    parser.add_argument(
        "--many-feeding-records", type=int, default=2_000_000, help="rows of the feeding figure (0 skips)"
    )
    parser.add_argument("--many-feeding-files", type=int, default=16, help="files of the feeding figure")
