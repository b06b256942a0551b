"""Feeding a jitted train step: training_batches over a Parquet file against NumPy batches of the same rows.

``measure_feeding`` writes a file of ``--feeding-records`` rows (``id``,
``label`` and a ``float32[4, 4]`` ``x``, the tinax record format), then times
rows per second through a small jitted train step (a linear model's SGD
update on ``x`` and ``label``) fed by:

- ``tinax stack_records``: ``training_batches(..., batch_fn=stack_records)``,
  the column-wise batches;
- ``tinax own batch_fn``: the same pipeline with a hand-written stacking
  ``batch_fn`` over the records, as tinax 0.2 users write it;
- ``numpy``: the same rows held in memory as NumPy arrays, fed as slices
  (in order) or gathered with a permutation (the shuffles);
- ``pyarrow iter_batches`` (in order only): pyarrow's own reader decoding the
  file as it goes, batch by batch, with no checksum, for the first pass's
  ceiling; the rate at which ``pq.read_table`` decodes the whole file, with
  no step, is printed first.

Each policy (in order, ``shuffle_window=2``, the global shuffle) and batch
size is timed over ``--feeding-rows`` rows after ``--feeding-warmup`` batches
(a first pass, which decodes the file as it goes), and again for
``stack_records`` after one whole epoch (the file decoded and cached), in
``--feeding-rounds`` rounds whose sides run in a new order each round; the
figures are the medians, and the ratios those of each round's figures. A
last comparison reads a file three times ``cache_bytes`` (the reader's
cache set to a third of the decoded rows) with the window and the global
shuffle. With ``--baseline-src``, each first pass of ``stack_records`` is also
run in fresh processes against the tinax-data in that folder, in alternating
rounds, and so are the two shuffles past the cache at the largest batch
size; ``--feeding-paired-only`` runs those pairs alone, without opening the
device in the parent process (an accelerator that one process holds at a
time, such as a TPU, is then free for each fresh process). Then the same
step is fed from an ArrayRecord file of ``--feeding-array-record-records``
rows of the same layout (the tinax format), in order and globally shuffled,
on the first pass and after one epoch; beside the first pass in order,
array-record's own reader reading the same batches' bytes alone. Run it
alone with ``hatch run bench:data --only-feeding``.
"""

from __future__ import annotations

import argparse
import gc
import pathlib
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow.parquet as pq
from _timing import run_probe
from grain.sharding import ShardOptions

from tinax._data._shutdown import WINDOW_THREAD_PREFIX
from tinax.data import (
    read_array_record,
    read_parquet_record,
    stack_records,
    training_batches,
    write_array_record,
    write_parquet_record,
)

__all__ = ["measure_feeding"]

_POLICIES = ("in order", "window", "global")

# One first pass of stack_records feeding the step, in a fresh process (its tinax-data found first on its path).
_FIRST_PASS_PROBE = """
import json, pathlib, sys
sys.path.insert(0, sys.argv[1])
import _data_feeding as feeding
from tinax.data import stack_records
path, batch_size, policy = pathlib.Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cache_bytes = None if sys.argv[7] == "-" else int(sys.argv[7])
batches = feeding._tinax_batches(path, batch_size, policy, stack_records, cache_bytes)
print(json.dumps({"rows_per_second": feeding._rows_per_second(batches, int(sys.argv[5]), int(sys.argv[6]))}))
"""


def own_stack(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """A batch function as users write it: one array per field, stacked from the records."""
    return {
        "id": np.asarray([row["id"] for row in rows]),
        "label": np.asarray([row["label"] for row in rows]),
        "x": np.stack([row["x"] for row in rows]),
    }


@jax.jit
def train_step(weights: jax.Array, x: jax.Array, label: jax.Array) -> jax.Array:
    """One SGD step of a linear model: small, so that feeding is what is measured."""

    def loss(w: jax.Array) -> jax.Array:
        prediction = x.reshape(x.shape[0], -1) @ w
        return jnp.mean((prediction - label.astype(jnp.float32)) ** 2)

    return weights - 1e-3 * jax.grad(loss)(weights)


def _write(path: pathlib.Path, count: int) -> None:
    x = np.random.default_rng(0).standard_normal((count, 4, 4), dtype=np.float32)
    started = time.perf_counter()
    write_parquet_record(path, [{"id": index, "label": index % 10, "x": x[index]} for index in range(count)])
    seconds = time.perf_counter() - started
    groups = pq.ParquetFile(path).metadata.num_row_groups
    print(f"  wrote {count} rows in {groups} row groups, {path.stat().st_size / 2**20:.0f} MiB, in {seconds:.1f} s")


def _numpy_fields(data: Any) -> dict[str, np.ndarray]:
    """The fields of a table or record batch of the feeding file as NumPy arrays."""
    x = data.column("x")
    x = x.combine_chunks() if hasattr(x, "combine_chunks") else x
    return {
        "id": data.column("id").to_numpy(),
        "label": data.column("label").to_numpy(),
        "x": x.storage.flatten().to_numpy().reshape(-1, 4, 4),
    }


def _in_memory(path: pathlib.Path) -> dict[str, np.ndarray]:
    return _numpy_fields(pq.read_table(path))


def _numpy_batches(columns: dict[str, np.ndarray], batch_size: int, shuffled: bool) -> Iterator[dict[str, Any]]:
    count = len(columns["id"])
    epoch = 0
    while True:
        order = np.random.default_rng(epoch).permutation(count) if shuffled else None
        for start in range(0, count - batch_size + 1, batch_size):
            if order is None:
                yield {name: array[start : start + batch_size] for name, array in columns.items()}
            else:
                chosen = order[start : start + batch_size]
                yield {name: array[chosen] for name, array in columns.items()}
        epoch += 1


def _pyarrow_batches(path: pathlib.Path, batch_size: int) -> Iterator[dict[str, Any]]:
    """Batches decoded as they are read by pyarrow's own ``iter_batches``, in order, without the row checksums."""
    while True:
        for record_batch in pq.ParquetFile(path).iter_batches(batch_size=batch_size):
            if record_batch.num_rows == batch_size:
                yield _numpy_fields(record_batch)


def _tinax_batches(
    path: pathlib.Path, batch_size: int, policy: str, batch_fn: Callable[..., Any], cache_bytes: int | None
) -> Iterator[dict[str, Any]]:
    options = {} if cache_bytes is None else {"cache_bytes": cache_bytes}
    extra = {"shuffle_window": 2} if policy == "window" else {}
    reader = read_array_record if path.suffix == ".array_record" else read_parquet_record
    pipeline = training_batches(
        reader(path, **options),
        shard_options=ShardOptions(0, 1, drop_remainder=True),
        seed=0,
        shuffle=policy != "in order",
        num_epochs=None,
        batch_size=batch_size,
        batch_fn=batch_fn,
        **extra,
    )
    return iter(pipeline)


def _after_one_epoch(batches: Iterator[dict[str, Any]], count: int) -> Iterator[dict[str, Any]]:
    """``batches`` once ``count`` batches (an epoch) were read, untimed and without the step."""
    for _ in range(count):
        next(batches)
    return batches


def _rows_per_second(batches: Iterator[dict[str, Any]], warmup: int, timed: int) -> float:
    device = jax.devices()[0]
    weights = jax.device_put(jnp.zeros(16, jnp.float32), device)
    for _ in range(warmup):
        batch = next(batches)
        weights = train_step(weights, jax.device_put(batch["x"], device), jax.device_put(batch["label"], device))
    weights.block_until_ready()
    rows = 0
    started = time.perf_counter()
    for _ in range(timed):
        batch = next(batches)
        rows += len(batch["x"])
        weights = train_step(weights, jax.device_put(batch["x"], device), jax.device_put(batch["label"], device))
    weights.block_until_ready()
    seconds = time.perf_counter() - started
    close = getattr(batches, "close", None)
    if close is not None:
        close()
    del batches
    _settle()
    return rows / seconds


def _settle() -> None:
    """Waits for the reads a closed pipeline left in flight, so that they do not slow down the next run."""
    gc.collect()
    for thread in threading.enumerate():
        if thread.name.startswith(WINDOW_THREAD_PREFIX):
            thread.join()


def _compare(
    title: str,
    sides: dict[str, Callable[[], Iterator[dict[str, Any]]]],
    baseline: str,
    options: argparse.Namespace,
    timed: int,
    ratios: dict[str, float] | None = None,
) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in sides}
    order = list(sides)
    shuffler = random.Random(options.seed)
    for _ in range(options.feeding_rounds):
        shuffler.shuffle(order)
        for name in order:
            samples[name].append(_rows_per_second(sides[name](), options.feeding_warmup, timed))
    print(f"\n{title}")
    for name, values in samples.items():
        line = f"  {name:<22} {statistics.median(values):>12,.0f} rows/s"
        if name != baseline:
            ratio = statistics.median(new / old for new, old in zip(values, samples[baseline], strict=True))
            line += f"   {ratio:.2f}x {baseline}"
            if ratios is not None:
                ratios[name] = ratio
        print(line)
    return {name: statistics.median(values) for name, values in samples.items()}


def measure_feeding(folder: pathlib.Path, options: argparse.Namespace) -> None:
    """Rows/s of training_batches feeding a jitted step, against NumPy batches of the same rows."""
    count = options.feeding_records
    if count <= 0:
        measure_array_record_feeding(folder, options)
        return
    platform = "the paired processes' device" if options.feeding_paired_only else jax.devices()[0].platform
    print(f"\nFeeding a jitted train step on {platform}: {count} rows of id, label, float32[4, 4]")
    path = folder / "feeding.parquet"
    _write(path, count)
    # Past the cache: the decoded rows are three times cache_bytes.
    cache_bytes = max(1 << 20, pq.read_table(path).nbytes // 3)
    if options.feeding_paired_only:
        # This process never opens the accelerator, which a TPU lends to one process at a time.
        measure_paired_first_pass(path, options, _POLICIES, options.feeding_rows)
        measure_paired_first_pass(path, options, ("window", "global"), options.feeding_rows, cache_bytes=cache_bytes)
        measure_array_record_feeding(folder, options)
        return
    seconds = []
    for _ in range(max(1, options.feeding_rounds)):
        started = time.perf_counter()
        columns = _in_memory(path)
        seconds.append(time.perf_counter() - started)
    print(
        f"  pyarrow decodes the whole file (read_table, to_numpy, its own threads, no step) at "
        f"{count / statistics.median(seconds):,.0f} rows/s"
    )
    for batch_size in options.feeding_batch_sizes:
        timed = max(20, options.feeding_rows // batch_size)
        for policy in _POLICIES:
            shuffled = policy != "in order"
            numpy_name = "numpy gather" if shuffled else "numpy slices"
            sides: dict[str, Callable[[], Iterator[dict[str, Any]]]] = {
                numpy_name: lambda b=batch_size, s=shuffled: _numpy_batches(columns, b, s),
                "tinax stack_records": lambda b=batch_size, p=policy: _tinax_batches(path, b, p, stack_records, None),
                "tinax own batch_fn": lambda b=batch_size, p=policy: _tinax_batches(path, b, p, own_stack, None),
            }
            if not shuffled:
                # The upstream reader decoding as it goes: what any reader of the file could reach on a first pass.
                sides["pyarrow iter_batches"] = lambda b=batch_size: _pyarrow_batches(path, b)
            _compare(f"batch {batch_size}, {policy}: {timed} batches", sides, numpy_name, options, timed)
    # After one epoch: the file is decoded and cached, as in every epoch of a run but the first.
    for batch_size in options.feeding_batch_sizes:
        timed = max(20, options.feeding_rows // batch_size)
        for policy in _POLICIES:
            shuffled = policy != "in order"
            numpy_name = "numpy gather" if shuffled else "numpy slices"
            sides = {
                numpy_name: lambda b=batch_size, s=shuffled: _numpy_batches(columns, b, s),
                "tinax stack_records": lambda b=batch_size, p=policy: _after_one_epoch(
                    _tinax_batches(path, b, p, stack_records, None), count // b
                ),
            }
            _compare(
                f"batch {batch_size}, {policy}, after one epoch: {timed} batches", sides, numpy_name, options, timed
            )
    for policy in ("window", "global"):
        batch_size = max(options.feeding_batch_sizes)
        timed = max(20, options.feeding_rows // batch_size)
        sides = {
            "numpy gather": lambda b=batch_size: _numpy_batches(columns, b, True),
            "tinax stack_records": lambda b=batch_size, p=policy: _tinax_batches(
                path, b, p, stack_records, cache_bytes
            ),
        }
        title = f"batch {batch_size}, {policy}, past the cache (cache_bytes {cache_bytes / 2**20:.0f} MiB)"
        _compare(title, sides, "numpy gather", options, timed)
    if getattr(options, "baseline_src", None):
        measure_paired_first_pass(path, options, _POLICIES, options.feeding_rows)
        measure_paired_first_pass(path, options, ("window", "global"), options.feeding_rows, cache_bytes=cache_bytes)
    measure_array_record_feeding(folder, options)


def measure_paired_first_pass(
    path: pathlib.Path,
    options: argparse.Namespace,
    policies: Sequence[str],
    rows: int,
    *,
    cache_bytes: int | None = None,
) -> None:
    """First-pass rows/s of stack_records feeding the step: this tinax-data against ``--baseline-src``'s.

    Each run is a fresh process, so neither side inherits the other's threads, caches or memory; the rounds
    alternate which side runs first. With ``cache_bytes`` (past the cache), at the largest batch size only.
    """
    sides: dict[str, str | None] = {"today": options.baseline_src, "ours": None}
    benchmarks = str(pathlib.Path(__file__).resolve().parent)
    where = "" if cache_bytes is None else f" past the cache (cache_bytes {cache_bytes / 2**20:.0f} MiB)"
    print(
        f"\nFirst pass of {path.name}{where}, each run in a fresh process; 'today' is the tinax-data in "
        f"{options.baseline_src}"
    )
    batch_sizes = options.feeding_batch_sizes if cache_bytes is None else [max(options.feeding_batch_sizes)]
    for batch_size in batch_sizes:
        timed = max(20, rows // batch_size)
        for policy in policies:
            rates: dict[str, list[float]] = {side: [] for side in sides}
            for round_index in range(options.feeding_rounds):
                order = list(sides) if round_index % 2 == 0 else list(reversed(sides))
                for side in order:
                    arguments = [
                        benchmarks,
                        str(path),
                        str(batch_size),
                        policy,
                        str(options.feeding_warmup),
                        str(timed),
                        "-" if cache_bytes is None else str(cache_bytes),
                    ]
                    rates[side].append(run_probe(_FIRST_PASS_PROBE, arguments, sides[side])["rows_per_second"])
            ratio = statistics.median(new / old for new, old in zip(rates["ours"], rates["today"], strict=True))
            shown = {side: ", ".join(f"{rate:,.0f}" for rate in found) for side, found in rates.items()}
            print(
                f"  batch {batch_size}, {policy}: today {shown['today']}; ours {shown['ours']} rows/s; "
                f"median ratio {ratio:.2f}x"
            )


def measure_array_record_feeding(folder: pathlib.Path, options: argparse.Namespace) -> None:
    """Rows/s of training_batches over an ArrayRecord file feeding the step, against NumPy batches of its rows."""
    count = options.feeding_array_record_records
    if count <= 0:
        return
    try:
        import array_record.python.array_record_module  # noqa: F401
    except ImportError:
        print("\nArrayRecord feeding: skipped, array-record is not installed")
        return
    path = folder / "feeding.array_record"
    x = np.random.default_rng(0).standard_normal((count, 4, 4), dtype=np.float32)
    started = time.perf_counter()
    write_array_record(path, [{"id": index, "label": index % 10, "x": x[index]} for index in range(count)])
    seconds = time.perf_counter() - started
    print(f"\nFeeding the step from an ArrayRecord file of {count} rows (tinax format, written in {seconds:.1f} s)")
    columns = {"id": np.arange(count), "label": np.arange(count) % 10, "x": x}
    for batch_size in [] if options.feeding_paired_only else options.feeding_batch_sizes:
        timed = max(20, min(options.feeding_rows, count // 2) // batch_size)
        for policy in ("in order", "global"):
            shuffled = policy != "in order"
            numpy_name = "numpy gather" if shuffled else "numpy slices"
            for after_epoch in (False, True):

                def side(b: int = batch_size, p: str = policy, e: bool = after_epoch) -> Iterator[dict[str, Any]]:
                    batches = _tinax_batches(path, b, p, stack_records, None)
                    return _after_one_epoch(batches, count // b) if e else batches

                sides: dict[str, Callable[[], Iterator[dict[str, Any]]]] = {
                    numpy_name: lambda b=batch_size, s=shuffled: _numpy_batches(columns, b, s),
                    "tinax stack_records": side,
                }
                when = "after one epoch" if after_epoch else "first pass"
                title = f"ArrayRecord, batch {batch_size}, {policy}, {when}"
                found = _compare(title, sides, numpy_name, options, timed)
                if policy == "in order" and not after_epoch:
                    rate = statistics.median(
                        _array_record_reads(path, batch_size, timed) for _ in range(options.feeding_rounds)
                    )
                    print(
                        f"  {'array_record reads':<22} {rate:>12,.0f} rows/s   {rate / found[numpy_name]:.2f}x "
                        f"{numpy_name} (its own reader, the batches' bytes alone: no decoding, no step)"
                    )
    if getattr(options, "baseline_src", None):
        measure_paired_first_pass(path, options, ("in order", "global"), min(options.feeding_rows, count // 2))


def _array_record_reads(path: pathlib.Path, batch_size: int, timed: int) -> float:
    """Rows/s of array-record's own reader reading batches of records in order, as tinax's block reader does."""
    from array_record.python.array_record_module import ArrayRecordReader

    from tinax._data._records._array_record import _BLOCK_READER_OPTIONS

    reader = ArrayRecordReader(str(path), _BLOCK_READER_OPTIONS)
    try:
        started = time.perf_counter()
        rows = sum(len(reader.read(first, first + batch_size)) for first in range(0, timed * batch_size, batch_size))
        return rows / (time.perf_counter() - started)
    finally:
        reader.close()


def add_feeding_options(parser: argparse.ArgumentParser) -> None:
    """The command-line options of :func:`measure_feeding`."""
    parser.add_argument("--only-feeding", action="store_true", help="run only the train-step feeding figures")
    parser.add_argument("--feeding-records", type=int, default=2_000_000, help="rows of the feeding file (0 skips)")
    parser.add_argument(
        "--feeding-batch-sizes", type=int, nargs="+", default=[256, 2048], help="batch sizes of the feeding figures"
    )
    parser.add_argument("--feeding-rows", type=int, default=400_000, help="rows timed per feeding run")
    parser.add_argument("--feeding-warmup", type=int, default=10, help="warm-up batches per feeding run")
    parser.add_argument("--feeding-rounds", type=int, default=3, help="interleaved rounds of the feeding figures")
    parser.add_argument(
        "--feeding-array-record-records",
        type=int,
        default=400_000,
        help="rows of the ArrayRecord feeding file (0 skips)",
    )
    parser.add_argument(
        "--feeding-paired-only",
        action="store_true",
        help="with --baseline-src, run only the paired first passes, so that this process never opens the device",
    )
