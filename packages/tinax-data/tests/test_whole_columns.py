"""Batches of stack_records from a file's stacked fields held whole: the same batches, one gather per field."""

from __future__ import annotations

import gc
import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from grain.sharding import ShardOptions

from tinax._data._pipelines import _direct_reads, _planned_reads
from tinax._data._records import _parquet_write
from tinax._data._records._file_columns import FileColumns
from tinax._data._records._parquet_source import ParquetRecordSource, _RowGroup
from tinax._data._records._reader_datasets import record_source_of
from tinax._data._shutdown import WINDOW_THREAD_PREFIX
from tinax.data import (
    evaluation_batches,
    open_multiprocessing_iterator,
    read_parquet_record,
    stack_records,
    training_batches,
    write_parquet_record,
)

ROWS = 9000


def stack_the_rows(rows: Sequence[dict[str, Any]]) -> dict[str, np.ndarray]:
    """What stack_records gives, built from the records as a user's batch function would."""
    return {name: np.stack([np.asarray(row[name]) for row in rows]) for name in rows[0]}


def exact(batch: dict[str, np.ndarray]) -> list[tuple[Any, ...]]:
    """Equal means the same fields, dtypes, shapes and bits."""
    return [(name, array.dtype.str, array.shape, array.tobytes()) for name, array in batch.items()]


@pytest.fixture(scope="module")
def numeric_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tinax-format file whose every field stacks to one dtype and shape, in several row groups."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((ROWS, 2, 3)).astype(np.float32)
    brain = rng.standard_normal((ROWS, 4)).astype(ml_dtypes.bfloat16)
    pairs = (rng.standard_normal((ROWS, 2)) + 1j * rng.standard_normal((ROWS, 2))).astype(np.complex64)
    big = rng.integers(-1000, 1000, (ROWS, 3)).astype(">i4")
    records = [
        {
            "id": index,
            "score": float(index) / 3,
            "flag": index % 3 == 0,
            "x": x[index],
            "brain": brain[index],
            "pairs": pairs[index],
            "big": big[index],
            "scalar": np.asarray(index / 7, np.float64),
        }
        for index in range(ROWS)
    ]
    path = tmp_path_factory.mktemp("whole") / "numeric.parquet"
    write_parquet_record(path, records, overwrite=False)
    assert pq.ParquetFile(path).metadata.num_row_groups > 2
    return path


def _pipelines(dataset_of: Any, batch_fn: Any) -> dict[str, Any]:
    def training(shard: tuple[int, int], **options: Any) -> Any:
        arguments: dict[str, Any] = {"seed": 3, "num_epochs": 2, "batch_size": 64, "shuffle": True}
        arguments.update(options)
        return training_batches(
            dataset_of(), shard_options=ShardOptions(*shard, drop_remainder=True), batch_fn=batch_fn, **arguments
        )

    return {
        "in-order": training((0, 1), shuffle=False),
        "in-order-shard-1-of-2": training((1, 2), shuffle=False, batch_size=7),
        "global-shuffle": training((0, 1)),
        "global-shuffle-shard-1-of-3": training((1, 3), batch_size=33),
        "window-shuffle": training((0, 2), shuffle_window=1),
        "evaluation": evaluation_batches(
            dataset_of(), shard_options=ShardOptions(1, 3), batch_size=50, batch_fn=batch_fn
        ),
    }


def _no_row_group_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Makes every read of a batch out of a row group's rows, or of a planned window, fail."""

    def refused(*args: Any, **keywords: Any) -> Any:
        raise AssertionError("a batch was read from the row groups")

    for name in ("stacked", "stacked_slice", "records", "record"):
        monkeypatch.setattr(_RowGroup, name, refused)
    monkeypatch.setattr(_planned_reads, "read_stacked_window", refused)
    monkeypatch.setattr(_planned_reads, "read_window", refused)


def test_batches_from_the_whole_columns_are_the_stacked_records_bit_for_bit(numeric_file, monkeypatch):
    expected = {
        name: [exact(batch) for batch in pipeline]
        for name, pipeline in _pipelines(lambda: read_parquet_record(numeric_file), stack_the_rows).items()
    }
    # Positions computed ahead in pieces smaller than a batch's span, so that batches straddle them.
    monkeypatch.setattr(_direct_reads, "_POSITIONS_AHEAD", 50)
    _no_row_group_reads(monkeypatch)
    for name, pipeline in _pipelines(lambda: read_parquet_record(numeric_file), stack_records).items():
        assert [exact(batch) for batch in pipeline] == expected[name], name
        assert exact(pipeline[len(pipeline) - 1]) == expected[name][-1], name
        assert exact(pipeline[3]) == expected[name][3], name


def test_the_whole_columns_take_a_row_group_at_a_time_and_count_against_the_cache(numeric_file, monkeypatch):
    # Only the batches fill them here: no thread fills the rest ahead.
    monkeypatch.setattr(ParquetRecordSource, "_fill_next", lambda self, parquet_file: False)
    dataset = read_parquet_record(numeric_file)
    source = record_source_of(dataset)
    assert isinstance(source, ParquetRecordSource)
    pipeline = training_batches(
        dataset, shard_options=ShardOptions(0, 1, drop_remainder=True), seed=0, shuffle=False, num_epochs=1,
        batch_size=100, batch_fn=stack_records,
    )  # fmt: skip
    iterator = iter(pipeline)
    next(iterator)
    columns = source._whole.columns
    assert columns is not None
    assert columns.arrays is not None
    # In order, only the first row group is in: the rest come as the batches reach them.
    assert not columns.complete
    assert columns.missing_groups(range(100)) == []
    assert len(columns.missing_groups(range(ROWS))) == len(source.row_group_ends) - 1
    for _ in iterator:
        pass
    assert columns.complete
    held = sum(array.nbytes for array in columns.arrays.values())
    assert held == ROWS * (8 + 8 + 1 + 24 + 8 + 16 + 12 + 8)
    assert source._cached_bytes + held <= source.cache_bytes


@pytest.mark.parametrize("threads", [1, 3])
def test_threads_fill_the_rest_of_the_file_ahead_of_the_batches(numeric_file, monkeypatch, threads):
    def pipeline() -> Any:
        return training_batches(
            read_parquet_record(numeric_file), shard_options=ShardOptions(1, 2, drop_remainder=True), seed=0,
            shuffle=False, num_epochs=2, batch_size=100, batch_fn=stack_records,
        )  # fmt: skip

    expected = [exact(batch) for batch in pipeline()]
    dataset = read_parquet_record(numeric_file)
    source = record_source_of(dataset)
    filled_by: list[str] = []
    original = FileColumns.fill

    def noted(columns: FileColumns, run: Any, fields: Any) -> bool:
        if columns is source._whole.columns:  # Not the columns of another test's sources, filled ahead too.
            # A thread fills the row groups it read together in one call: each is noted.
            filled_by.extend([threading.current_thread().name] * len(run))
        return original(columns, run, fields)

    # The threads wait until the test has seen them: on a fast machine they could otherwise finish the small
    # file, and leave, before the first batch is returned.
    proceed = threading.Event()
    original_next = ParquetRecordSource._fill_next

    def held_back(self: ParquetRecordSource, parquet_file: Any) -> bool:
        proceed.wait(timeout=60)
        return original_next(self, parquet_file)

    monkeypatch.setattr(FileColumns, "fill", noted)
    monkeypatch.setattr(ParquetRecordSource, "_fill_next", held_back)
    monkeypatch.setattr(ParquetRecordSource, "decode_threads", lambda source: threads)
    batches = training_batches(
        dataset, shard_options=ShardOptions(1, 2, drop_remainder=True), seed=0, shuffle=False, num_epochs=2,
        batch_size=100, batch_fn=stack_records,
    )  # fmt: skip
    iterator = iter(batches)
    found = [exact(next(iterator))]
    filling = list(source._filling)
    assert len(filling) == threads
    assert all(thread.name.startswith(WINDOW_THREAD_PREFIX) and not thread.daemon for thread in filling)
    proceed.set()
    for thread in filling:
        thread.join(timeout=120)
    assert source._whole.columns.complete
    assert filled_by[0] == threading.main_thread().name
    assert set(filled_by[1:]) <= {thread.name for thread in filling}
    # Every row group once: the first batch's, then the rest from this shard's next rows on, then the start.
    assert len(filled_by) == len(source.row_group_ends)
    found += [exact(batch) for batch in iterator]
    assert found == expected
    assert source._filling == []


@pytest.mark.parametrize("threads", [1, 3])
def test_the_threads_filling_ahead_end_once_nothing_else_holds_the_reader(numeric_file, monkeypatch, threads):
    proceed = threading.Event()
    calls = []
    original = ParquetRecordSource._fill_next

    def held_back(self: ParquetRecordSource, parquet_file: Any) -> bool:
        calls.append(threading.current_thread().name)
        proceed.wait(timeout=60)
        return original(self, parquet_file)

    monkeypatch.setattr(ParquetRecordSource, "_fill_next", held_back)
    monkeypatch.setattr(ParquetRecordSource, "decode_threads", lambda source: threads)
    dataset = read_parquet_record(numeric_file)
    pipeline = training_batches(
        dataset, shard_options=ShardOptions(0, 1, drop_remainder=True), seed=0, shuffle=False, num_epochs=1,
        batch_size=100, batch_fn=stack_records,
    )  # fmt: skip
    iterator = iter(pipeline)
    next(iterator)
    filling = list(record_source_of(dataset)._filling)
    assert len(filling) == threads
    iterator.close()
    del iterator, pipeline, dataset
    gc.collect()
    proceed.set()
    for thread in filling:
        thread.join(timeout=60)
        assert not thread.is_alive()
    if threads == 1:
        # The row group it was filling, and none after it: the reader was gone.
        assert calls == [filling[0].name]
    else:
        # Each ends once the others let go of the reader too: a few row groups at most, not the file.
        assert len(calls) < 3 * threads


def test_a_batch_waits_for_the_row_group_a_thread_ahead_is_decoding_rather_than_decode_it_again(
    numeric_file, monkeypatch
):
    dataset = read_parquet_record(numeric_file)
    source = record_source_of(dataset)
    ends = source.row_group_ends
    decoded: list[tuple[int, str]] = []
    taken = threading.Event()
    release = threading.Event()
    original = ParquetRecordSource._decode

    def watched(self: ParquetRecordSource, group_index: int, position: int, **options: Any) -> Any:
        if self is source:
            decoded.append((group_index, threading.current_thread().name))
            if group_index == 1 and threading.current_thread() is not threading.main_thread():
                taken.set()
                assert release.wait(timeout=60)
        return original(self, group_index, position, **options)

    monkeypatch.setattr(ParquetRecordSource, "_decode", watched)
    monkeypatch.setattr(ParquetRecordSource, "decode_threads", lambda self: 1)
    batch_size = ends[0]  # A batch is a row group: the first batch fills row group 0, the thread takes 1.
    pipeline = training_batches(
        dataset, shard_options=ShardOptions(0, 1, drop_remainder=True), seed=0, shuffle=False, num_epochs=1,
        batch_size=batch_size, batch_fn=stack_records,
    )  # fmt: skip
    expected = [exact(batch) for batch in evaluation_batches(
        read_parquet_record(numeric_file), shard_options=ShardOptions(0, 1), batch_size=batch_size,
        batch_fn=stack_the_rows,
    )][: len(pipeline)]  # fmt: skip
    iterator = iter(pipeline)
    found = [exact(next(iterator))]
    assert taken.wait(timeout=60)
    second = threading.Thread(target=lambda: found.append(exact(next(iterator))))
    second.start()
    second.join(timeout=1)
    assert second.is_alive()  # Waiting for the thread ahead, not decoding row group 1 itself.
    release.set()
    second.join(timeout=60)
    found += [exact(batch) for batch in iterator]
    assert found == expected
    assert [name for group_index, name in decoded if group_index == 1] == [f"{WINDOW_THREAD_PREFIX}-columns-0"]


def _told_groups(monkeypatch: pytest.MonkeyPatch, source: ParquetRecordSource) -> list[list[int]]:
    """Notes the row groups each ``expect_positions`` call on ``source`` names, in the order it names them."""
    told: list[list[int]] = []
    original = ParquetRecordSource.expect_positions

    def noted(self: ParquetRecordSource, positions: np.ndarray) -> None:
        if self is source:
            groups = np.searchsorted(np.asarray(self.row_group_ends), positions, side="right").tolist()
            told.append(list(dict.fromkeys(groups)))
        original(self, positions)

    monkeypatch.setattr(ParquetRecordSource, "expect_positions", noted)
    return told


def test_threads_filling_ahead_take_the_row_groups_of_the_shuffled_batches_ahead_first(tmp_path, monkeypatch):
    path = tmp_path / "small-groups.parquet"
    table = pa.table({"id": pa.array(range(3000), pa.int64()), "v": pa.array(np.arange(3000) / 7, pa.float64())})
    pq.write_table(table, path, row_group_size=100)
    dataset = read_parquet_record(path)
    source = record_source_of(dataset)
    expected_order = _told_groups(monkeypatch, source)
    filled_ahead: list[int] = []
    original_fill = FileColumns.fill

    def noted_fill(columns: FileColumns, run: Any, fields: Any) -> bool:
        if columns is source._whole.columns and threading.current_thread() is not threading.main_thread():
            filled_ahead.extend(run)
        return original_fill(columns, run, fields)

    monkeypatch.setattr(FileColumns, "fill", noted_fill)
    monkeypatch.setattr(ParquetRecordSource, "decode_threads", lambda self: 1)
    pipeline = training_batches(
        dataset, shard_options=ShardOptions(0, 1, drop_remainder=True), seed=8, shuffle=True, shuffle_window=1,
        num_epochs=1, batch_size=50, batch_fn=stack_records,
    )  # fmt: skip
    iterator = iter(pipeline)
    found = [exact(next(iterator))]
    # The thread fills a few row groups before the next batches read (and would fill) them.
    deadline = time.monotonic() + 60
    while len(filled_ahead) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    found += [exact(batch) for batch in iterator]
    reference = training_batches(
        read_parquet_record(path), shard_options=ShardOptions(0, 1, drop_remainder=True), seed=8,
        shuffle=True, shuffle_window=1, num_epochs=1, batch_size=50, batch_fn=stack_the_rows,
    )  # fmt: skip
    assert found == [exact(batch) for batch in reference]
    assert expected_order
    wanted = expected_order[0]
    # The thread took the row groups the shuffled batches read next, in the order they read them (those the
    # batches filled themselves left out), not the file's order.
    taken = [group for group in filled_ahead if group in wanted]
    assert taken == [group for group in wanted if group in taken]
    assert len(taken) >= 3
    assert taken != sorted(taken)


def test_a_window_shuffle_tells_threads_ahead_its_next_blocks_past_the_positions_it_computed(tmp_path, monkeypatch):
    path = _small_groups_file(tmp_path, 3000)
    # Positions for four batches at a time: the blocks past them come from the window shuffle's block order.
    monkeypatch.setattr(_direct_reads, "_POSITIONS_AHEAD", 200)
    dataset = read_parquet_record(path)
    told = _told_groups(monkeypatch, record_source_of(dataset))

    def pipeline(batch_fn: Any, dataset: Any) -> Any:
        return _shuffled(dataset, batch_fn, shard=(0, 1), seed=8, epochs=1, batch_size=50, shuffle_window=2)

    found = [exact(batch) for batch in pipeline(stack_records, dataset)]
    reference = list(pipeline(stack_the_rows, read_parquet_record(path)))
    assert found == [exact(batch) for batch in reference]
    # The batch that first reads each row group (its ids are its rows: 100 to a row group).
    first_read: dict[int, int] = {}
    for index, batch in enumerate(reference):
        for group in (np.asarray(batch["id"]) // 100).tolist():
            first_read.setdefault(group, index)
    # The first call already names every row group of the epoch, in the order the batches first read them.
    assert sorted(told[0]) == list(range(30))
    ranks = [first_read[group] for group in told[0]]
    assert ranks == sorted(ranks)


def test_a_batch_is_its_own_memory_and_changing_it_changes_no_later_batch(numeric_file):
    def pipeline(shuffle: bool) -> Any:
        return training_batches(
            read_parquet_record(numeric_file), shard_options=ShardOptions(0, 1, drop_remainder=True), seed=1,
            shuffle=shuffle, num_epochs=2, batch_size=ROWS // 4, batch_fn=stack_records,
        )  # fmt: skip

    for shuffle in (False, True):
        expected = [exact(batch) for batch in pipeline(shuffle)]
        found = []
        for batch in pipeline(shuffle):
            found.append(exact(batch))
            for array in batch.values():
                assert array.flags.writeable
                assert array.flags.owndata
                array[...] = array[::-1] if array.ndim else array
        assert found == expected


def _shuffled(
    dataset: Any, batch_fn: Any, *, shard: tuple[int, int], seed: int, epochs: int, batch_size: int, **window: Any
) -> Any:
    """A globally shuffled pipeline over ``dataset`` (window-shuffled with a ``shuffle_window``)."""
    return training_batches(
        dataset, shard_options=ShardOptions(*shard, drop_remainder=True), seed=seed, shuffle=True,
        num_epochs=epochs, batch_size=batch_size, batch_fn=batch_fn, **window,
    )  # fmt: skip


def test_stacked_rows_beyond_the_cache_are_read_from_planned_windows(numeric_file, monkeypatch):
    def pipeline(batch_fn: Any, dataset: Any) -> Any:
        return _shuffled(dataset, batch_fn, shard=(0, 1), seed=2, epochs=1, batch_size=100)

    expected = [exact(batch) for batch in pipeline(stack_the_rows, read_parquet_record(numeric_file))]
    windows = []
    original = _planned_reads.read_stacked_window

    def counted(source: Any, positions: np.ndarray) -> Any:
        found = original(source, positions)
        windows.append(len(positions))
        return found

    monkeypatch.setattr(_planned_reads, "read_stacked_window", counted)
    dataset = read_parquet_record(numeric_file, cache_bytes=1 << 18)
    assert [exact(batch) for batch in pipeline(stack_records, dataset)] == expected
    assert sum(windows) == ROWS // 100 * 100
    # The first row group told: the stacked rows (9000 of 85 bytes) exceed the 256 KiB budget.
    assert not record_source_of(dataset).may_hold_columns()


def _window_decoders(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Notes the names of the decoding threads (besides the window's own) that take rows for planned windows."""
    decoders: set[str] = set()
    original = _RowGroup.window_fields

    def noted(group: _RowGroup, rows: np.ndarray) -> Any:
        name = threading.current_thread().name
        if name.startswith(f"{WINDOW_THREAD_PREFIX}-decode-"):
            decoders.add(name)
        return original(group, rows)

    monkeypatch.setattr(_RowGroup, "window_fields", noted)
    return decoders


@pytest.mark.parametrize("window", [{}, {"shuffle_window": 2}], ids=["global", "window"])
def test_windows_past_the_cache_decode_their_row_groups_in_several_threads(numeric_file, monkeypatch, window):
    def pipeline(batch_fn: Any, dataset: Any) -> Any:
        return _shuffled(dataset, batch_fn, shard=(1, 2), seed=6, epochs=2, batch_size=90, **window)

    expected = [exact(batch) for batch in pipeline(stack_the_rows, read_parquet_record(numeric_file))]

    def refused(*args: Any) -> Any:
        raise AssertionError("the window was joined from parts")

    monkeypatch.setattr(ParquetRecordSource, "window_threads", lambda source: 3)
    decoders = _window_decoders(monkeypatch)
    monkeypatch.setattr(_planned_reads, "_stacked_in_parts", refused)
    monkeypatch.setattr(_direct_reads.DirectBatchMapDataset, "read_rows", refused)
    dataset = read_parquet_record(numeric_file, cache_bytes=1 << 18)
    assert [exact(batch) for batch in pipeline(stack_records, dataset)] == expected
    assert len(decoders) == 2
    assert not [thread for thread in threading.enumerate() if thread.name.startswith(f"{WINDOW_THREAD_PREFIX}-decode")]


@pytest.mark.parametrize(("cores", "ahead", "window"), [(1, 1, 1), (2, 1, 2), (3, 2, 3), (16, 3, 3)])
def test_a_window_past_the_cache_takes_the_core_that_threads_ahead_leave_to_the_pipeline(
    tmp_path, monkeypatch, cores, ahead, window
):
    # The pipeline waits for a window past the cache, so its core decodes too; threads ahead leave it one.
    from tinax._data._records import _file_columns

    path = _small_groups_file(tmp_path, 20_000)

    def pipeline(batch_fn: Any, dataset: Any) -> Any:
        return _shuffled(dataset, batch_fn, shard=(0, 1), seed=2, epochs=1, batch_size=250)

    expected = [exact(batch) for batch in pipeline(stack_the_rows, read_parquet_record(path))]
    monkeypatch.setattr(_file_columns, "usable_cores", lambda: cores)
    decoders = _window_decoders(monkeypatch)
    # 320 KB of decoded rows against a 160 KB cache: past it, with room for a few row groups per thread.
    dataset = read_parquet_record(path, cache_bytes=160_000)
    source = record_source_of(dataset)
    assert (source.decode_threads(), source.window_threads()) == (ahead, window)
    assert [exact(batch) for batch in pipeline(stack_records, dataset)] == expected
    assert len(decoders) == window - 1


def test_a_window_shuffle_past_the_cache_decodes_each_row_group_about_once_an_epoch(tmp_path, monkeypatch):
    path = _small_groups_file(tmp_path, 20_000)

    def pipeline(batch_fn: Any, dataset: Any) -> Any:
        return _shuffled(dataset, batch_fn, shard=(0, 1), seed=3, epochs=1, batch_size=250, shuffle_window=4)

    expected = [exact(batch) for batch in pipeline(stack_the_rows, read_parquet_record(path))]
    decoded: list[int] = []
    windows: list[int] = []
    original_decode, original_window = ParquetRecordSource._decode, _planned_reads.read_stacked_window

    def noted(self: ParquetRecordSource, group_index: int, position: int, **options: Any) -> Any:
        decoded.extend(options.get("run") or [group_index])
        return original_decode(self, group_index, position, **options)

    def counted(source: Any, positions: np.ndarray) -> Any:
        windows.append(len(positions))
        return original_window(source, positions)

    monkeypatch.setattr(ParquetRecordSource, "_decode", noted)
    monkeypatch.setattr(_planned_reads, "read_stacked_window", counted)
    # 320 KB of decoded rows against a 160 KB cache: the batches are served from planned windows.
    dataset = read_parquet_record(path, cache_bytes=160_000)
    assert [exact(batch) for batch in pipeline(stack_records, dataset)] == expected
    assert sum(windows) == 20_000
    assert len(windows) > 2
    # A global shuffle's windows decode every row group each; here a row group is decoded again only where
    # its rows straddle two windows.
    assert sorted(set(decoded)) == list(range(200))
    assert len(decoded) <= 200 + 4 * len(windows)


def test_a_row_group_a_decoding_thread_cannot_read_leaves_its_batches_to_the_usual_reads(numeric_file, monkeypatch):
    def pipeline(batch_fn: Any, dataset: Any) -> Any:
        return _shuffled(dataset, batch_fn, shard=(0, 1), seed=1, epochs=1, batch_size=100)

    expected = [exact(batch) for batch in pipeline(stack_the_rows, read_parquet_record(numeric_file))]
    original = ParquetRecordSource._decode

    def flaky(source: ParquetRecordSource, group_index: int, position: int, **options: Any) -> Any:
        # Only a decoding thread's own handle fails: the usual reads then read every row.
        if options.get("ahead") is not None and group_index == 1:
            raise ValueError("row group 1 cannot be read through this handle")
        return original(source, group_index, position, **options)

    monkeypatch.setattr(ParquetRecordSource, "decode_threads", lambda source: 2)
    monkeypatch.setattr(ParquetRecordSource, "window_threads", lambda source: 2)
    monkeypatch.setattr(ParquetRecordSource, "_decode", flaky)
    dataset = read_parquet_record(numeric_file, cache_bytes=1 << 18)
    assert [exact(batch) for batch in pipeline(stack_records, dataset)] == expected


def _ragged_file(path: Path) -> Path:
    """A plain file whose list column has one length in each row group, but not the same in all."""
    schema = pa.schema([("id", pa.int64()), ("v", pa.list_(pa.float32()))])
    with pq.ParquetWriter(path, schema) as writer:
        first = 0
        for rows, width in ((40, 3), (40, 3), (40, 2)):
            table = pa.table(
                {
                    "id": pa.array(range(first, first + rows), pa.int64()),
                    "v": pa.array([[float(first + row)] * width for row in range(rows)], pa.list_(pa.float32())),
                },
                schema=schema,
            )
            writer.write_table(table, row_group_size=rows)
            first += rows
    return path


@pytest.mark.parametrize("cache_bytes", [1 << 30, 1 << 10], ids=["cached", "past-the-cache"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_arrays_whose_shape_changes_between_row_groups_give_what_stacking_the_records_gives(
    tmp_path, shuffle, cache_bytes, monkeypatch
):
    path = _ragged_file(tmp_path / "ragged.parquet")
    # Past the cache, the windows' threads meet the row groups in any order: their parts differ in shape.
    monkeypatch.setattr(ParquetRecordSource, "decode_threads", lambda source: 3)
    monkeypatch.setattr(ParquetRecordSource, "window_threads", lambda source: 3)

    def outcome(batch_fn: Any) -> list[Any]:
        found: list[Any] = []
        pipeline = training_batches(
            read_parquet_record(path, mapping="numpy", cache_bytes=cache_bytes),
            shard_options=ShardOptions(0, 1, drop_remainder=True), seed=5, shuffle=shuffle, num_epochs=1,
            batch_size=20, batch_fn=batch_fn,
        )  # fmt: skip
        for index in range(len(pipeline)):
            try:
                found.append(exact(pipeline[index]))
            except ValueError as error:
                found.append(type(error))
        return found

    expected = outcome(stack_the_rows)
    assert outcome(stack_records) == expected
    if not shuffle:
        assert ValueError not in expected  # In order, each batch sits in one row group.
    else:
        assert ValueError in expected


def test_a_file_with_text_is_read_from_its_row_groups(tmp_path):
    path = tmp_path / "text.parquet"
    write_parquet_record(path, [{"id": index, "name": f"row {index}"} for index in range(300)], overwrite=False)
    dataset = read_parquet_record(path)
    source = record_source_of(dataset)
    assert not source.may_hold_columns()
    batches = evaluation_batches(dataset, shard_options=ShardOptions(0, 1), batch_size=64, batch_fn=stack_records)
    names = [name for batch in batches for name in batch["name"].tolist()]
    assert names == [f"row {index}" for index in range(300)]


def test_whole_columns_are_held_per_process(numeric_file, parsed_flags):
    del parsed_flags
    pipeline = training_batches(
        read_parquet_record(numeric_file), shard_options=ShardOptions(0, 1, drop_remainder=True), seed=4,
        shuffle=True, num_epochs=1, batch_size=500, batch_fn=stack_records,
    )  # fmt: skip
    expected = [sorted(exact(batch)) for batch in pipeline]
    # grain's worker processes hand dicts over with their keys sorted.
    with open_multiprocessing_iterator(pipeline.to_iter_dataset(), num_workers=2) as workers:
        assert [sorted(exact(batch)) for batch in workers] == expected


def _small_groups_file(folder: Path, rows: int) -> Path:
    """A plain Parquet file of an id and a float, in row groups of 100 rows."""
    path = folder / "small-groups.parquet"
    table = pa.table({"id": pa.array(range(rows), pa.int64()), "v": pa.array(np.arange(rows) / 7, pa.float64())})
    pq.write_table(table, path, row_group_size=100)
    return path


def _reads_ahead(monkeypatch: pytest.MonkeyPatch, source: ParquetRecordSource) -> list[list[int]]:
    """Notes the row groups of each read that a thread ahead makes of ``source``, in the order it read them."""
    runs: list[list[int]] = []
    original = ParquetRecordSource._decode

    def noted(self: ParquetRecordSource, group_index: int, position: int, **options: Any) -> Any:
        if self is source and options.get("ahead") is not None:
            runs.append(list(options.get("run") or [group_index]))
        return original(self, group_index, position, **options)

    monkeypatch.setattr(ParquetRecordSource, "_decode", noted)
    return runs


def test_threads_ahead_decode_several_row_groups_in_one_read_and_give_the_same_batches(tmp_path, monkeypatch):
    path = _small_groups_file(tmp_path, 4000)

    def pipeline(dataset: Any, batch_fn: Any) -> Any:
        return training_batches(
            dataset, shard_options=ShardOptions(0, 1, drop_remainder=True), seed=0, shuffle=False, num_epochs=1,
            batch_size=100, batch_fn=batch_fn,
        )  # fmt: skip

    expected = [exact(batch) for batch in pipeline(read_parquet_record(path), stack_the_rows)]
    dataset = read_parquet_record(path)
    source = record_source_of(dataset)
    runs = _reads_ahead(monkeypatch, source)
    monkeypatch.setattr(ParquetRecordSource, "decode_threads", lambda self: 1)
    assert source.groups_per_read() > 1
    assert [exact(batch) for batch in pipeline(dataset, stack_records)] == expected
    # Each read ahead took consecutive row groups, several at a time, none twice.
    assert any(len(run) > 1 for run in runs)
    assert all(run == list(range(run[0], run[-1] + 1)) for run in runs)
    decoded = [group for run in runs for group in run]
    assert len(decoded) == len(set(decoded))
    assert all(len(run) <= source.groups_per_read() for run in runs)


def test_row_groups_read_together_are_named_by_their_stretches_in_the_file():
    from tinax._data._records._file_columns import stretches
    from tinax._data._records._row_groups import describe_run

    assert stretches([3, 4, 5, 9, 2, 3]) == [(3, 5), (9, 9), (2, 3)]
    assert stretches([]) == []
    assert describe_run(range(4, 8)) == "4 to 7"
    assert describe_run([3, 4, 5, 9]) == "3 to 5, 9"
    assert describe_run([12, 2]) == "12, 2"


def test_row_groups_read_together_fill_their_own_rows_in_any_order_and_leave_filled_ones_alone():
    columns = FileColumns([3, 5, 9, 10], budget=1 << 20)

    def fields(*groups: int, value: float = 0.0) -> dict[str, np.ndarray]:
        starts, ends = [0, 3, 5, 9], [3, 5, 9, 10]
        rows = np.concatenate([np.arange(starts[group], ends[group]) for group in groups])
        return {"id": rows.astype(np.int64), "x": np.stack([rows + value, -rows - value], axis=1).astype(np.float32)}

    # Row groups 2 and 0 decoded as one table, in that order: each goes to its own rows.
    assert columns.fill([2, 0], fields(2, 0))
    assert [columns.filled(group) for group in range(4)] == [True, False, True, False]
    assert columns.arrays is not None
    assert columns.arrays["id"][[0, 1, 2, 5, 6, 7, 8]].tolist() == [0, 1, 2, 5, 6, 7, 8]
    # Row group 2 again, beside the new 1 and 3: the filled rows keep their values.
    assert columns.fill([3, 2, 1], fields(3, 2, 1, value=0.5))
    assert columns.complete
    assert columns.arrays["id"].tolist() == list(range(10))
    assert columns.arrays["x"][5:9, 0].tolist() == [5.0, 6.0, 7.0, 8.0]
    assert columns.arrays["x"][[3, 4, 9], 0].tolist() == [3.5, 4.5, 9.5]
    # Fields of another row count than the run's refuse the columns for good.
    other = FileColumns([3, 5, 9, 10], budget=1 << 20)
    assert not other.fill([0, 2], fields(0))
    assert other.arrays is None
    assert not other.usable


@pytest.mark.parametrize("threads", [1, 2])
def test_threads_ahead_read_the_row_groups_shuffled_batches_read_next_together(tmp_path, monkeypatch, threads):
    path = _small_groups_file(tmp_path, 6000)

    def pipeline(dataset: Any, batch_fn: Any) -> Any:
        return training_batches(
            dataset, shard_options=ShardOptions(0, 1, drop_remainder=True), seed=5, shuffle=True, shuffle_window=2,
            num_epochs=2, batch_size=100, batch_fn=batch_fn,
        )  # fmt: skip

    expected = [exact(batch) for batch in pipeline(read_parquet_record(path), stack_the_rows)]
    dataset = read_parquet_record(path)
    source = record_source_of(dataset)
    runs = _reads_ahead(monkeypatch, source)
    monkeypatch.setattr(ParquetRecordSource, "decode_threads", lambda self: threads)
    assert source.groups_per_read() > 1
    assert [exact(batch) for batch in pipeline(dataset, stack_records)] == expected
    # With another thread beside it, a thread reads row groups that do not follow each other in the file (the
    # windows' blocks in shuffled order) together; a lone thread only those that do. Each is decoded once, and
    # none more than a read's worth.
    scattered = [run for run in runs if run != list(range(run[0], run[-1] + 1))]
    assert bool(scattered) == (threads > 1)
    decoded = [group for run in runs for group in run]
    assert len(decoded) == len(set(decoded))
    assert all(len(run) <= source.groups_per_read() for run in runs)


def test_a_damaged_row_group_inside_a_read_ahead_fails_its_batch_with_the_usual_error(tmp_path):
    from tinax._data._compat02 import CorruptParquetError

    path = tmp_path / "damaged.parquet"
    # Rows of 2 KiB in the tinax format: its row groups hold about 500 of them, with their checksums.
    x = np.random.default_rng(5).standard_normal((4000, 16, 16))
    write_parquet_record(path, [{"id": index, "x": x[index]} for index in range(4000)], overwrite=False)
    metadata = pq.ParquetFile(path).metadata
    groups = metadata.num_row_groups
    assert groups > 4
    damaged = groups - 2
    chunk = metadata.row_group(damaged).column(0)
    data = bytearray(path.read_bytes())
    data[chunk.data_page_offset + chunk.total_compressed_size - 1] ^= 0x10
    path.write_bytes(bytes(data))
    first_damaged = sum(metadata.row_group(index).num_rows for index in range(damaged))
    batches = training_batches(
        read_parquet_record(path), shard_options=ShardOptions(0, 1, drop_remainder=True), seed=0, shuffle=False,
        num_epochs=1, batch_size=50, batch_fn=stack_records,
    )  # fmt: skip
    iterator = iter(batches)
    # Every batch before the one holding the damaged rows, then the usual error naming the first of them.
    for start in range(0, first_damaged // 50 * 50, 50):
        assert next(iterator)["id"].tolist() == list(range(start, start + 50))
    with pytest.raises(CorruptParquetError, match=rf"record {first_damaged} cannot be read \(row group {damaged}: "):
        next(iterator)


def test_a_damaged_row_group_inside_a_scattered_read_ahead_fails_its_batch_with_the_usual_error(tmp_path, monkeypatch):
    from tinax._data._compat02 import CorruptParquetError

    path = tmp_path / "damaged.parquet"
    # Rows of 512 bytes in the tinax format, in row groups of 100 with their checksums.
    x = np.random.default_rng(6).standard_normal((3000, 8, 8))
    monkeypatch.setattr(_parquet_write, "_ROW_GROUP_MAX_ROWS", 100)
    write_parquet_record(path, [{"id": index, "x": x[index]} for index in range(3000)], overwrite=False)
    metadata = pq.ParquetFile(path).metadata
    assert metadata.num_row_groups == 30

    def pipeline(dataset: Any) -> Any:
        return training_batches(
            dataset, shard_options=ShardOptions(0, 1, drop_remainder=True), seed=2, shuffle=True, shuffle_window=1,
            num_epochs=1, batch_size=50, batch_fn=stack_records,
        )  # fmt: skip

    reference = list(pipeline(read_parquet_record(path)))
    expected = [exact(batch) for batch in reference]
    # The row group the shuffled batches reach last: the threads read scattered runs ahead before it.
    reached = dict.fromkeys(int(row) // 100 for batch in reference for row in batch["id"].tolist())
    damaged = list(reached)[-1]
    chunk = metadata.row_group(damaged).column(0)
    data = bytearray(path.read_bytes())
    data[chunk.data_page_offset + chunk.total_compressed_size - 1] ^= 0x10
    path.write_bytes(bytes(data))
    dataset = read_parquet_record(path)
    source = record_source_of(dataset)
    runs = _reads_ahead(monkeypatch, source)
    monkeypatch.setattr(ParquetRecordSource, "decode_threads", lambda self: 2)
    assert source.groups_per_read() > 1
    iterator = iter(pipeline(dataset))
    first_reading = next(index for index, batch in enumerate(reference) if damaged in set(batch["id"] // 100))
    # Every batch before the first one reading the damaged rows, then the usual error naming their row group.
    assert [exact(next(iterator)) for _ in range(first_reading)] == expected[:first_reading]
    with pytest.raises(CorruptParquetError, match=rf"cannot be read \(row group {damaged}: "):
        next(iterator)
    assert any(run != list(range(run[0], run[-1] + 1)) for run in runs)


def test_windows_past_the_cache_read_row_groups_that_follow_each_other_together(tmp_path, monkeypatch):
    path = tmp_path / "small-groups.parquet"
    rows = 20_000
    table = pa.table({"id": pa.array(range(rows), pa.int64()), "v": pa.array(np.arange(rows) / 7, pa.float64())})
    pq.write_table(table, path, row_group_size=100)

    def pipeline(batch_fn: Any, dataset: Any) -> Any:
        return _shuffled(dataset, batch_fn, shard=(0, 1), seed=4, epochs=2, batch_size=250)

    expected = [exact(batch) for batch in pipeline(stack_the_rows, read_parquet_record(path))]
    runs: list[list[int]] = []
    original = ParquetRecordSource._decode

    def noted(self: ParquetRecordSource, group_index: int, position: int, **options: Any) -> Any:
        if threading.current_thread().name.startswith(WINDOW_THREAD_PREFIX) or options.get("ahead"):
            runs.append(list(options.get("run") or [group_index]))
        return original(self, group_index, position, **options)

    monkeypatch.setattr(ParquetRecordSource, "window_threads", lambda source: 2)
    monkeypatch.setattr(ParquetRecordSource, "_decode", noted)
    # 320 KB of decoded rows against a 160 KB cache: past it, with room for a few row groups in each read.
    dataset = read_parquet_record(path, cache_bytes=160_000)
    source = record_source_of(dataset)
    assert [exact(batch) for batch in pipeline(stack_records, dataset)] == expected
    assert source.groups_per_read(past_cache=True) > 1
    assert any(len(run) > 1 for run in runs)
    assert all(run == list(range(run[0], run[-1] + 1)) for run in runs)
    assert all(len(run) <= source.groups_per_read(past_cache=True) for run in runs)


@pytest.mark.sweep
@pytest.mark.parametrize("kind", ["tinax-format", "plain-table"])
def test_seeded_bit_flips_read_through_stacked_batches_are_refused_naming_the_file(tmp_path, monkeypatch, kind):
    # stack_records batches read the whole columns, which a thread fills ahead in runs of row groups: every
    # flip must still fail a batch, as the checksums cover every byte.
    from tinax._data._records import _parquet_write

    monkeypatch.setattr(_parquet_write, "_ROW_GROUP_MAX_ROWS", 50)
    rng = np.random.default_rng(20261206)
    shape = (2, 3) if kind == "tinax-format" else (3,)
    records = [
        {"id": index, "score": index / 7, "x": rng.standard_normal(shape).astype(np.float32)} for index in range(400)
    ]
    path = tmp_path / f"{kind}.parquet"
    write_parquet_record(path, records)
    # A plain table is written as 0.2 wrote it: one row group.
    assert pq.ParquetFile(path).metadata.num_row_groups == (8 if kind == "tinax-format" else 1)
    assert (b"tinax.records" in pq.ParquetFile(path).metadata.metadata) == (kind == "tinax-format")

    def batches(source: Path) -> list[list[tuple[Any, ...]]]:
        return [
            exact(batch)
            for batch in training_batches(
                read_parquet_record(source),
                shard_options=ShardOptions(0, 1, drop_remainder=True),
                seed=0,
                shuffle=False,
                num_epochs=1,
                batch_size=40,
                batch_fn=stack_records,
            )
        ]

    dataset = read_parquet_record(path)
    # The undamaged file: the batches are its records stacked (a plain table's arrays come back as lists).
    assert batches(path) == [
        exact(stack_records([dataset[row] for row in range(first, first + 40)])) for first in range(0, 400, 40)
    ]
    original = path.read_bytes()
    flipped = tmp_path / "flipped.parquet"
    for _ in range(60):
        position, bit = int(rng.integers(len(original))), int(rng.integers(8))
        damaged = bytearray(original)
        damaged[position] ^= 1 << bit
        flipped.write_bytes(bytes(damaged))
        with pytest.raises(ValueError, match=re.escape(str(flipped))):
            batches(flipped)
