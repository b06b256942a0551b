"""ArrayRecord feeding and writing against NumPy and array-record's own writer (``bench:data --only-array-record``).

Reads: one epoch of ``training_batches(read_array_record(path), ...)`` with a
stacking ``batch_fn`` (``{"id": int64[batch], "x": float32[batch, features]}``),
shuffled and not, at batch 256 and 2048, against NumPy feeding the same rows
from arrays held in memory: contiguous slices in order, and a gather in the
pipeline's own shuffled order. Both sides build the same batch dict; the
first batch of each pair is checked to be equal. The file is in the tinax
record format (``x`` a float32 array); the same rows as 0.2-style JSON
records (``x`` a list) are read too, for reference. A last side reads a file
of ``id`` and ``x`` alone with ``batch_fn=stack_records``: over a new reader
(the first epoch, which fills the stacked fields held whole from the
records' bytes), and after one untimed epoch, so its batches are gathered
from the fields held whole.

Writes: ``write_array_record`` against array-record's ``ArrayRecordWriter``
writing ``json.dumps(record)`` for 0.2-style records, and writing the very
bytes ``write_array_record`` stores for tinax-format records.

Every figure is the median of interleaved rounds (``--repeats``), and each
ratio the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
from collections.abc import Callable
from typing import Any

import grain
import numpy as np
from _timing import run

import tinax.data

_BATCH_SIZES = (256, 2048)


def _stack(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    # A stacking batch function, as a training loop writes one.
    return {"id": np.asarray([row["id"] for row in rows], np.int64), "x": np.stack([row["x"] for row in rows])}


def _stack_json(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    return {
        "id": np.asarray([row["id"] for row in rows], np.int64),
        "x": np.asarray([row["x"] for row in rows], np.float32),
    }


def _ids(rows: list[dict[str, Any]]) -> list[int]:
    return [row["id"] for row in rows]


def _epoch(batches: Any) -> int:
    rows = 0
    for batch in batches:
        rows += len(batch["id"])
    return rows


def _numpy_epoch(ids: np.ndarray, xs: np.ndarray, order: np.ndarray | None, batch_size: int) -> int:
    rows = 0
    for start in range(0, len(ids) // batch_size * batch_size, batch_size):
        if order is None:
            batch = {"id": ids[start : start + batch_size].copy(), "x": xs[start : start + batch_size].copy()}
        else:
            chosen = order[start : start + batch_size]
            batch = {"id": ids[chosen], "x": xs[chosen]}
        rows += len(batch["id"])
    return rows


def _pipeline(path: pathlib.Path, *, shuffle: bool, batch_size: int, batch_fn: Callable[..., Any]) -> Any:
    return tinax.data.training_batches(
        tinax.data.read_array_record(path),
        shard_options=grain.sharding.ShardOptions(0, 1, drop_remainder=True),
        seed=0,
        shuffle=shuffle,
        num_epochs=1,
        batch_size=batch_size,
        batch_fn=batch_fn,
    )


def _medians(samples: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in samples.items()}


def _ratio(samples: dict[str, list[float]], slower: str, faster: str) -> float:
    # Rows/s of ``slower`` over rows/s of ``faster``, per round: the inverse ratio of times.
    return statistics.median(old / new for new, old in zip(samples[slower], samples[faster], strict=True))


def measure_array_record(folder: pathlib.Path, options: argparse.Namespace) -> None:
    """Prints ArrayRecord feeding and writing rates against NumPy and array-record's writer.

    Args:
      folder: A temporary folder for the files.
      options: ``array_record_records`` (rows), ``features``, ``repeats`` and
        ``seed`` of ``bench_data``.
    """
    stack_records = tinax.data.stack_records
    count, features, repeats, seed = options.array_record_records, options.features, options.repeats, options.seed
    try:
        from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter
    except ImportError:
        print('\nArrayRecord feeding and writing: skipped, array-record is not installed (the "arrayrecord" extra)')
        return

    xs = np.random.default_rng(seed).standard_normal((count, features), dtype=np.float32)
    ids = np.arange(count, dtype=np.int64)
    records = [{"id": index, "label": f"label-{index % 10}", "x": xs[index]} for index in range(count)]
    json_records = [{**record, "x": record["x"].tolist()} for record in records]
    tinax_path, json_path = folder / "rows.array_record", folder / "rows-json.array_record"
    tinax.data.write_array_record(tinax_path, records)
    tinax.data.write_array_record(json_path, json_records)
    # Numbers and arrays only, so that stack_records batches come from the fields held whole.
    numeric_path = folder / "rows-numeric.array_record"
    tinax.data.write_array_record(numeric_path, [{"id": record["id"], "x": record["x"]} for record in records])
    print(
        f"\nArrayRecord feeding: {count} rows of id, label and float32[{features}], {repeats} interleaved rounds, "
        f"one epoch per call; rows/s (median) and ratios (median of per-round ratios)"
    )
    for shuffle in (False, True):
        for batch_size in _BATCH_SIZES:
            order = None
            if shuffle:
                order = np.concatenate(list(_pipeline(tinax_path, shuffle=True, batch_size=batch_size, batch_fn=_ids)))
            ours = _pipeline(tinax_path, shuffle=shuffle, batch_size=batch_size, batch_fn=_stack)
            ours_json = _pipeline(json_path, shuffle=shuffle, batch_size=batch_size, batch_fn=_stack_json)
            stacked = _pipeline(numeric_path, shuffle=shuffle, batch_size=batch_size, batch_fn=stack_records)
            # After one epoch, as every later epoch of a run: its fields are held whole from then on.
            _epoch(stacked)
            first = next(iter(ours))
            assert np.array_equal(next(iter(stacked))["x"], first["x"])
            chosen = np.arange(batch_size) if order is None else order[:batch_size]
            assert np.array_equal(first["id"], ids[chosen])
            assert np.array_equal(first["x"], xs[chosen])
            samples = run(
                {
                    "numpy": lambda order=order, batch_size=batch_size: _numpy_epoch(ids, xs, order, batch_size),
                    "tinax": lambda ours=ours: _epoch(ours),
                    "json": lambda ours_json=ours_json: _epoch(ours_json),
                    "stack_records": lambda stacked=stacked: _epoch(stacked),
                    # A new reader each call: the epoch that fills the fields held whole, from the records' bytes.
                    "stack_records first": lambda shuffle=shuffle, batch_size=batch_size: _epoch(
                        _pipeline(numeric_path, shuffle=shuffle, batch_size=batch_size, batch_fn=stack_records)
                    ),
                },
                calls=1,
                repeats=repeats,
                seed=seed,
            )
            rows = count // batch_size * batch_size
            rates = {name: rows / seconds for name, seconds in _medians(samples).items()}
            print(
                f"  shuffle={shuffle!s:<5} batch {batch_size:>4}: numpy {rates['numpy']:>13,.0f}  "
                f"tinax format {rates['tinax']:>10,.0f} ({_ratio(samples, 'tinax', 'numpy'):.4f}x numpy)  "
                f"JSON {rates['json']:>9,.0f} ({_ratio(samples, 'json', 'numpy'):.4f}x numpy)  "
                f"stack_records first epoch {rates['stack_records first']:>12,.0f} "
                f"({_ratio(samples, 'stack_records first', 'numpy'):.2f}x numpy)  "
                f"after one epoch {rates['stack_records']:>12,.0f} "
                f"({_ratio(samples, 'stack_records', 'numpy'):.2f}x numpy)"
            )

    reader = ArrayRecordReader(str(tinax_path))
    stored = reader.read(0, reader.num_records())
    reader.close()
    raw_path = folder / "raw.array_record"

    def raw_json() -> None:
        writer = ArrayRecordWriter(str(raw_path), "group_size:1")
        for record in json_records:
            writer.write(json.dumps(record).encode("utf-8"))
        writer.close()

    def raw_same_bytes() -> None:
        writer = ArrayRecordWriter(str(raw_path), "group_size:1")
        for data in stored:
            writer.write(data)
        writer.close()

    samples = run(
        {
            "raw json.dumps": raw_json,
            "write_array_record json": lambda: tinax.data.write_array_record(
                folder / "ours.array_record", json_records
            ),
            "raw same bytes": raw_same_bytes,
            "write_array_record tinax": lambda: tinax.data.write_array_record(folder / "ours.array_record", records),
        },
        calls=1,
        repeats=repeats,
        seed=seed,
    )
    rates = {name: count / seconds for name, seconds in _medians(samples).items()}
    print(f"\nArrayRecord writing: {count} rows, {repeats} interleaved rounds; rows/s (median)")
    print(
        f"  0.2-style JSON: write_array_record {rates['write_array_record json']:,.0f}, "
        f"ArrayRecordWriter + json.dumps {rates['raw json.dumps']:,.0f}: "
        f"{_ratio(samples, 'write_array_record json', 'raw json.dumps'):.2f}x (goal >= 0.5)"
    )
    print(
        f"  tinax format: write_array_record {rates['write_array_record tinax']:,.0f}, "
        f"ArrayRecordWriter of the same bytes {rates['raw same bytes']:,.0f}: "
        f"{_ratio(samples, 'write_array_record tinax', 'raw same bytes'):.2f}x"
    )
