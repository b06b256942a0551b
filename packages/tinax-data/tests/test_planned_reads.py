"""Planned reads of the global and window shuffles: the batches of the unplanned chain, bit for bit, in file order."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from grain.sharding import ShardOptions

from tinax._data._pipelines import _planned_reads
from tinax._data._records._parquet_source import ParquetRecordSource
from tinax.data import (
    open_multiprocessing_iterator,
    read_parquet_record,
    redeal_state,
    training_batches,
    write_parquet_record,
)

# Uneven row groups, one of a single row.
GROUP_SIZES = (37, 500, 1, 263, 199, 400)
ROWS = sum(GROUP_SIZES)


def _rows_of(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    # Runs in the workers too: a module-level function, pickled by reference.
    return list(rows)


def _ids(rows: Sequence[dict[str, Any]]) -> list[int]:
    return [int(row["id"]) for row in rows]


def _exact(batch: Sequence[dict[str, Any]]) -> list[list[Any]]:
    """A batch as comparable values: arrays by dtype, shape and bytes, so equal means bit for bit."""
    found = []
    for row in batch:
        values = []
        for name, value in row.items():
            if isinstance(value, np.ndarray):
                values.append((name, value.dtype.str, value.shape, value.tobytes()))
            else:
                values.append((name, type(value).__name__, json.dumps(value)))
        found.append(values)
    return found


@pytest.fixture(scope="module")
def plain_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plain Parquet file (as other tools write it) of uneven row groups, with strings, lists and nulls."""
    path = tmp_path_factory.mktemp("planned") / "plain.parquet"
    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS, 3), dtype=np.float32)
    table = pa.table(
        {
            "id": pa.array(range(ROWS), pa.int64()),
            "label": pa.array([None if i % 11 == 0 else f"label-{i % 7}" for i in range(ROWS)]),
            "x": pa.array([row.tolist() for row in x], pa.list_(pa.float32())),
        }
    )
    with pq.ParquetWriter(path, table.schema) as writer:
        first = 0
        for size in GROUP_SIZES:
            writer.write_table(table.slice(first, size), row_group_size=size)
            first += size
    assert [pq.ParquetFile(path).metadata.row_group(i).num_rows for i in range(len(GROUP_SIZES))] == list(GROUP_SIZES)
    return path


@pytest.fixture(scope="module")
def tinax_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tinax-format file (2-d arrays) of several row groups, the last one shorter."""
    path = tmp_path_factory.mktemp("planned") / "tinax.parquet"
    x = np.random.default_rng(1).standard_normal((9000, 2, 2)).astype(np.float32)
    write_parquet_record(path, [{"id": i, "x": x[i]} for i in range(len(x))])
    assert pq.ParquetFile(path).metadata.num_row_groups == 3
    return path


class _Counted:
    """Counts the planned windows the readers of this process read."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.windows = 0
        original = _planned_reads.read_window

        def counted(source: ParquetRecordSource, positions: np.ndarray) -> Any:
            self.windows += 1
            return original(source, positions)

        monkeypatch.setattr(_planned_reads, "read_window", counted)


def _pipeline(path: Path, *, planned: bool, cache_bytes: int, shard: tuple[int, int] = (0, 1), **overrides: Any) -> Any:
    arguments: dict[str, Any] = {
        "shard_options": ShardOptions(*shard, drop_remainder=True),
        "seed": 5,
        "shuffle": True,
        "num_epochs": 3,
        "batch_size": 16,
        "batch_fn": _rows_of,
    }
    arguments.update(overrides)
    dataset = read_parquet_record(path, cache_bytes=cache_bytes)
    if planned:
        return training_batches(dataset, **arguments)
    originals = _planned_reads.shuffled_batches, _planned_reads.planned_window_batches
    _planned_reads.shuffled_batches = _planned_reads.planned_window_batches = lambda *args, **keywords: None
    try:
        return training_batches(dataset, **arguments)
    finally:
        _planned_reads.shuffled_batches, _planned_reads.planned_window_batches = originals


def _everything(batches: Any) -> list[list[list[Any]]]:
    return [_exact(batch) for batch in batches]


# A budget the whole file fits, and one a tenth of it (each window then empties the cache).
CACHES = {"fits": 512 << 20, "larger_than_the_cache": 12_000}
# The global shuffle is planned whatever the cache; the window shuffle past it, where its row groups do not stay.
ORDERS = {"global": {}, "window": {"shuffle_window": 2}}


@pytest.mark.parametrize("order", list(ORDERS))
@pytest.mark.parametrize("cache", list(CACHES))
@pytest.mark.parametrize("shard_count", [1, 2, 4])
def test_planned_shuffles_give_the_unplanned_batches_bit_for_bit_over_uneven_row_groups(
    plain_file, monkeypatch, cache, shard_count, order
):
    counted = _Counted(monkeypatch)
    for shard_index in range(shard_count):
        shard = (shard_index, shard_count)
        options = {"cache_bytes": CACHES[cache], "shard": shard, **ORDERS[order]}
        expected = _everything(_pipeline(plain_file, planned=False, **options))
        planned = _pipeline(plain_file, planned=True, **options)
        assert _everything(planned) == expected
        assert len(planned) == len(expected)
    assert (counted.windows > 0) == (order == "global" or cache == "larger_than_the_cache")


@pytest.mark.parametrize("order", list(ORDERS))
@pytest.mark.parametrize("cache", list(CACHES))
def test_planned_shuffles_of_the_tinax_format_give_the_unplanned_batches(tinax_file, monkeypatch, cache, order):
    counted = _Counted(monkeypatch)
    options = {"cache_bytes": CACHES[cache] * 4, "batch_size": 64, **ORDERS[order]}
    expected = _everything(_pipeline(tinax_file, planned=False, **options))
    assert _everything(_pipeline(tinax_file, planned=True, **options)) == expected
    assert (counted.windows > 0) == (order == "global" or cache == "larger_than_the_cache")


@pytest.mark.parametrize("order", list(ORDERS))
def test_a_window_past_the_cache_takes_the_caches_place_within_its_budget(plain_file, monkeypatch, order):
    cache_bytes = CACHES["larger_than_the_cache"]
    windows: list[tuple[int, int, int, int]] = []
    original = _planned_reads.read_window

    def watched(source: ParquetRecordSource, positions: np.ndarray) -> Any:
        before = source._cached_bytes
        table, rows = original(source, positions)
        # The window's decoded bytes, the cache's before it was read and while it is held, its rows.
        windows.append((table.nbytes, before, source._cached_bytes, len(positions)))
        return table, rows

    monkeypatch.setattr(_planned_reads, "read_window", watched)
    expected = _everything(_pipeline(plain_file, planned=False, cache_bytes=cache_bytes, **ORDERS[order]))
    assert _everything(_pipeline(plain_file, planned=True, cache_bytes=cache_bytes, **ORDERS[order])) == expected
    assert len(windows) > 2
    assert max(rows for *_, rows in windows) > 16  # Windows of several batches.
    for nbytes, before, during, _ in windows:
        assert 0 < nbytes <= cache_bytes
        # Every batch of the pass was read from a window, the first one too: the cache was never filled.
        assert before == during == 0


@pytest.mark.parametrize("order", list(ORDERS))
@pytest.mark.parametrize("cache", list(CACHES))
def test_a_state_saved_inside_a_window_resumes_to_the_same_batches(plain_file, cache, order):
    options = {"cache_bytes": CACHES[cache], **ORDERS[order]}
    expected = _everything(_pipeline(plain_file, planned=False, **options))
    for stop in (3, 7, 30, len(expected) - 1):
        iterator = iter(_pipeline(plain_file, planned=True, **options))
        before = [_exact(next(iterator)) for _ in range(stop)]
        state = json.loads(json.dumps(iterator.get_state()))
        resumed = iter(_pipeline(plain_file, planned=True, **options))
        resumed.set_state(state)
        assert before + [_exact(batch) for batch in resumed] == expected
        # A state of the planned pipeline is the unplanned one's: it restores there too.
        unplanned = iter(_pipeline(plain_file, planned=False, **options))
        unplanned.set_state(state)
        assert _exact(next(unplanned)) == expected[stop]


@pytest.mark.parametrize("order", list(ORDERS))
def test_random_access_and_len_are_the_unplanned_ones_before_during_and_after_a_pass(plain_file, order):
    options = {"cache_bytes": CACHES["larger_than_the_cache"], **ORDERS[order]}
    expected = _pipeline(plain_file, planned=False, **options)
    planned = _pipeline(plain_file, planned=True, **options)
    assert len(planned) == len(expected)
    picks = np.random.default_rng(2).integers(0, len(expected), 12).tolist()
    assert [_exact(planned[k]) for k in picks] == [_exact(expected[k]) for k in picks]
    iterator = iter(planned)
    for _ in range(9):  # Inside a planned window.
        next(iterator)
    assert [_exact(planned[k]) for k in picks] == [_exact(expected[k]) for k in picks]
    assert [_exact(batch) for batch in iterator] == _everything(expected)[9:]


@pytest.mark.parametrize("order", list(ORDERS))
def test_a_redealt_state_reads_the_unplanned_batches(plain_file, order):
    options = {"cache_bytes": CACHES["larger_than_the_cache"], **ORDERS[order]}
    states = []
    for index in range(2):
        iterator = iter(_pipeline(plain_file, planned=True, shard=(index, 2), batch_size=8, **options))
        for _ in range(5):
            next(iterator)
        states.append(json.loads(json.dumps(iterator.get_state())))
    redealt = redeal_state(states, shard_options=ShardOptions(0, 1, drop_remainder=True))
    found = []
    for planned in (True, False):
        iterator = iter(_pipeline(plain_file, planned=planned, **options))
        iterator.set_state(redealt)
        found.append([_exact(batch) for batch in iterator])
    assert found[0] == found[1]
    assert len(found[0]) > 20


def test_a_corrupt_row_group_fails_at_the_same_batch_with_the_same_error(tinax_file, tmp_path):
    path = tmp_path / "corrupt.parquet"
    data = bytearray(tinax_file.read_bytes())
    data[len(data) // 2] ^= 0xFF  # Inside the second row group.
    path.write_bytes(bytes(data))
    failures = []
    for planned in (True, False):
        iterator = iter(_pipeline(path, planned=planned, cache_bytes=CACHES["fits"], batch_size=64))
        seen = 0
        while True:
            try:
                next(iterator)
            except ValueError as error:
                failures.append((seen, str(error)))
                break
            seen += 1
    assert failures[0] == failures[1]
    assert "row group 1" in failures[0][1]


@pytest.mark.parametrize("order", list(ORDERS))
def test_worker_processes_read_the_unplanned_batches_and_resume(parsed_flags, plain_file, order):
    options = {"cache_bytes": CACHES["larger_than_the_cache"], **ORDERS[order]}
    expected = _everything(_pipeline(plain_file, planned=False, **options))
    pipeline = _pipeline(plain_file, planned=True, **options)
    with open_multiprocessing_iterator(pipeline.to_iter_dataset(), num_workers=2) as iterator:
        before = [_exact(next(iterator)) for _ in range(21)]
        state = json.loads(json.dumps(iterator.get_state()))
    assert before == expected[:21]
    pipeline = _pipeline(plain_file, planned=True, **options)
    with open_multiprocessing_iterator(pipeline.to_iter_dataset(), num_workers=2) as resumed:
        resumed.set_state(state)
        assert [_exact(batch) for batch in resumed] == expected[21:]


def test_a_window_shuffled_pass_larger_than_the_cache_logs_no_decodes_per_epoch(plain_file, caplog):
    # Its windows decode each row group about once an epoch: there is no cost to tell.
    with caplog.at_level(logging.INFO, logger="tinax.data"):
        options = {"cache_bytes": CACHES["larger_than_the_cache"], "batch_fn": _ids, **ORDERS["window"]}
        batches = _pipeline(plain_file, planned=True, **options)
        assert len(list(batches)) == len(batches)
    assert not [record for record in caplog.records if record.name == "tinax.data"]


def test_a_pass_larger_than_the_cache_logs_its_decodes_per_epoch_once(plain_file, caplog):
    with caplog.at_level(logging.INFO, logger="tinax.data"):
        batches = _pipeline(plain_file, planned=True, cache_bytes=CACHES["larger_than_the_cache"], batch_fn=_ids)
        assert len(list(batches)) == len(batches)
    told = [record for record in caplog.records if "decoding the row groups they touch about" in record.getMessage()]
    assert len(told) == 1
    assert "exceed its cache_bytes" in told[0].getMessage()
    assert "shuffle_window" in told[0].getMessage()


@pytest.mark.parametrize("order", list(ORDERS))
def test_out_of_order_batches_larger_than_the_cache_are_told_once(plain_file, caplog, order):
    options = {"cache_bytes": CACHES["larger_than_the_cache"], "batch_fn": _ids, **ORDERS[order]}
    batches = _pipeline(plain_file, planned=True, **options)
    order = np.random.default_rng(3).permutation(len(batches)).tolist()
    with caplog.at_level(logging.WARNING, logger="tinax.data"):
        for index in order:
            batches[index]
    # The planner or the reader beneath it tells, whichever sees it first; never both.
    told = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(told) == 1
    assert "out of order" in told[0].getMessage()
    assert "cache_bytes" in told[0].getMessage()
    # The planner's warning tells a globally shuffled pipeline of shuffle_window, not one that has it.
    message = told[0].getMessage()
    planners = "batches of a pipeline" in message
    assert ("a shuffle_window" in message) == (planners and order == "global")


def test_a_pass_within_the_cache_logs_nothing(plain_file, caplog):
    with caplog.at_level(logging.INFO, logger="tinax.data"):
        list(_pipeline(plain_file, planned=True, cache_bytes=CACHES["fits"], batch_fn=_ids))
    assert not [record for record in caplog.records if record.name == "tinax.data"]


@pytest.mark.parametrize(
    "max_index",
    [
        1,
        2,
        3,
        52,
        63,
        100,
        4_095,
        65_535,
        65_536,
        65_537,
        2**20 - 1,
        2**20,
        1_999_999,
        2**31,
        2**32 - 1,
        2**32,
        2**32 + 1,
        2**33 + 5,
        2**45 + 7,
    ],
)
def test_the_vectorized_shuffle_gives_grains_own_positions_bit_for_bit(max_index):
    import random

    from grain._src.python.experimental.index_shuffle.python import index_shuffle_module

    from tinax._data._pipelines._planned_reads import shuffled_indices

    chooser = random.Random(max_index)
    for seed in (0, 1, 2**32 - 1, chooser.randrange(2**32)):
        indices = sorted({0, max_index, *(chooser.randrange(max_index + 1) for _ in range(200))})
        ours = shuffled_indices(np.asarray(indices, dtype=np.int64), max_index=max_index, seed=seed)
        grains = [
            index_shuffle_module.index_shuffle(index, max_index=max_index, seed=seed, rounds=4) for index in indices
        ]
        assert ours.tolist() == grains


@pytest.mark.parametrize(
    ("count", "cuts"),
    [
        (2_000_000, [slice(0, 1_999_872), slice(499_968, 999_936)]),
        (1000, [slice(0, 996), slice(0, 498)]),
        (37, [slice(0, 36), slice(18, 36)]),
    ],
)
def test_vector_positions_are_the_positions_grains_datasets_give_over_several_epochs(count, cuts):
    from tinax._data._grain_compat import read_many

    shuffled = _planned_reads.position_dataset(count).seed(11).shuffle()
    twin, slices = shuffled, []
    for cut in cuts:
        twin = twin.slice(cut)
        slices.insert(0, twin)
    vector = _planned_reads._vector_positions(twin, shuffled, slices)
    assert isinstance(vector, _planned_reads.VectorPositions)
    indices = np.random.default_rng(count).integers(0, 5 * len(twin), 2000)
    assert vector.positions(indices).tolist() == read_many(twin, indices.tolist())


@pytest.mark.parametrize("rows", [1, 2, 53, 64, 300])
def test_a_small_file_shuffles_as_the_same_rows_in_memory(tmp_path, rows):
    # A small file's shuffle permutes a domain of 2**16 positions, walking far for each row in range.
    import grain

    records = [{"id": index} for index in range(rows)]
    path = tmp_path / "small.parquet"
    write_parquet_record(path, records)

    def ids(dataset: Any) -> list[int]:
        batches = training_batches(
            dataset,
            shard_options=ShardOptions(0, 1, drop_remainder=True),
            seed=7,
            shuffle=True,
            num_epochs=3,
            batch_size=1,
            batch_fn=_ids,
        )
        return [row for batch in batches for row in batch]

    from_file = ids(read_parquet_record(path))
    assert from_file == ids(grain.MapDataset.source(records))
    assert sorted(from_file) == sorted(list(range(rows)) * 3)
