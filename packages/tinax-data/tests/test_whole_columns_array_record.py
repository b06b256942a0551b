"""Batches of stack_records over ArrayRecord files from the stacked fields held whole: the same batches."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from grain.sharding import ShardOptions

from tinax._data._records import _array_record
from tinax._data._records._file_columns import WholeColumns
from tinax._data._records._reader_datasets import record_source_of
from tinax._data._records._record_codec import RecordSchema
from tinax._data._shutdown import WINDOW_THREAD_PREFIX
from tinax.data import evaluation_batches, read_array_record, stack_records, training_batches, write_array_record

array_record_module = pytest.importorskip(
    "array_record.python.array_record_module", reason="array-record (the arrayrecord extra) is not installed"
)

ROWS = 3000


def stack_the_rows(rows: Sequence[dict[str, Any]]) -> dict[str, np.ndarray]:
    """What stack_records gives, built from the records as a user's batch function would."""
    return {name: np.stack([np.asarray(row[name]) for row in rows]) for name in rows[0]}


def exact(batch: dict[str, np.ndarray]) -> list[tuple[Any, ...]]:
    """Equal means the same fields in the same order, dtypes, shapes and bits."""
    return [(name, array.dtype.str, array.shape, array.tobytes()) for name, array in batch.items()]


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
        "evaluation": evaluation_batches(
            dataset_of(), shard_options=ShardOptions(1, 3), batch_size=50, batch_fn=batch_fn
        ),
    }


def _same_batches(path: Path, monkeypatch: pytest.MonkeyPatch, **options: Any) -> Any:
    """Checks the pipelines of stack_records against stacking the records; returns the global shuffle's source."""
    # Blocks smaller than a batch's span of rows, so that batches straddle them.
    monkeypatch.setattr(_array_record, "_WHOLE_COLUMNS_BLOCK", 100)
    sources = []

    def dataset() -> Any:
        found = read_array_record(path, **options)
        sources.append(record_source_of(found))
        return found

    expected = {
        name: [exact(batch) for batch in pipeline] for name, pipeline in _pipelines(dataset, stack_the_rows).items()
    }
    sources.clear()
    pipelines = _pipelines(dataset, stack_records)
    for name, pipeline in pipelines.items():
        assert [exact(batch) for batch in pipeline] == expected[name], name
        assert exact(pipeline[len(pipeline) - 1]) == expected[name][-1], name
    return sources[list(pipelines).index("global-shuffle")]


@pytest.fixture(scope="module")
def tinax_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((ROWS, 2, 3)).astype(np.float32)
    brain = rng.standard_normal((ROWS, 4)).astype(ml_dtypes.bfloat16)
    path = tmp_path_factory.mktemp("whole") / "records.array_record"
    write_array_record(
        path, [{"id": index, "score": index / 3, "x": x[index], "brain": brain[index]} for index in range(ROWS)]
    )
    return path


def test_a_tinax_file_is_held_whole_and_gives_the_stacked_records(tinax_file, monkeypatch):
    source = _same_batches(tinax_file, monkeypatch)
    assert not source._whole.refused
    assert source._whole.columns.complete
    assert list(source._whole.columns.arrays) == ["id", "score", "x", "brain"]


def test_json_records_of_numbers_and_lists_are_held_whole(tmp_path, monkeypatch):
    path = tmp_path / "json.array_record"
    records = [{"label": index % 10, "weight": index / 7, "x": [index * 0.5, 1.0, -2.0]} for index in range(ROWS)]
    write_array_record(path, records)
    source = _same_batches(path, monkeypatch)
    assert source._whole.columns.complete


@pytest.mark.parametrize(
    "value_of",
    [
        # An int among floats: a batch of ints alone stacks to int64, with the float to float64.
        lambda index: 1.5 if index == 2500 else index,
        # An int beyond int64.
        lambda index: 2**64 - 1 if index == 1234 else index,
        # Lists of two lengths.
        lambda index: [1.0] * (2 if index == 7 else 3),
        # Text, whose width depends on the batch.
        lambda index: "x" * (index % 4),
    ],
    ids=["int-among-floats", "beyond-int64", "two-lengths", "text"],
)
def test_fields_that_stack_unalike_are_read_from_the_records(tmp_path, monkeypatch, value_of):
    path = tmp_path / "unalike.array_record"
    write_array_record(path, [{"id": index, "v": value_of(index)} for index in range(ROWS)])
    # Batches of the records whose values differ stack to other dtypes, or raise: each as stacking them does.
    dataset = read_array_record(path)
    source = record_source_of(dataset)

    def outcome(batch_fn: Any) -> list[Any]:
        found: list[Any] = []
        pipeline = training_batches(
            read_array_record(path), shard_options=ShardOptions(0, 1, drop_remainder=True), seed=5, shuffle=True,
            num_epochs=1, batch_size=100, batch_fn=batch_fn,
        )  # fmt: skip
        for index in range(len(pipeline)):
            try:
                found.append(exact(pipeline[index]))
            except ValueError as error:
                found.append(type(error))
        return found

    assert outcome(stack_records) == outcome(stack_the_rows)
    assert source._whole.arrays(np.arange(ROWS), source._block_fields) is None
    assert source._whole.refused


def test_fields_beyond_cache_bytes_are_read_from_the_records(tinax_file, monkeypatch):
    source = _same_batches(tinax_file, monkeypatch, cache_bytes=1000)
    assert source._whole.refused


def test_a_corrupt_record_raises_at_its_batch_as_before(tmp_path):
    path = tmp_path / "json.array_record"
    # A record that is not JSON: the batch holding it raises what reading it raises; the others read.
    writer = array_record_module.ArrayRecordWriter(str(path), "group_size:1")
    for index in range(400):
        writer.write(b"not json" if index == 150 else json.dumps({"id": index}).encode())
    writer.close()

    def outcome(batch_fn: Any) -> list[Any]:
        found: list[Any] = []
        pipeline = evaluation_batches(
            read_array_record(path), shard_options=ShardOptions(0, 1), batch_size=100, batch_fn=batch_fn
        )
        for index in range(len(pipeline)):
            try:
                found.append(exact(pipeline[index]))
            except ValueError as error:
                found.append(type(error))
        return found

    expected = outcome(stack_the_rows)
    assert isinstance(expected[1], type)
    assert isinstance(expected[0], list)
    assert outcome(stack_records) == expected


@pytest.mark.parametrize(("cache_bytes", "error"), [(True, TypeError), (1.5, TypeError), (0, ValueError)])
def test_cache_bytes_is_a_positive_int(tinax_file, cache_bytes, error):
    with pytest.raises(error, match="cache_bytes"):
        read_array_record(tinax_file, cache_bytes=cache_bytes)


def _stacked_records(records: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    return {name: np.stack([np.asarray(record[name]) for record in records]) for name in records[0]}


def _encodings(records: list[dict[str, Any]]) -> tuple[RecordSchema, list[bytes]]:
    schema = RecordSchema.from_first_record(records[0])
    return schema, [schema.encode(record, index) for index, record in enumerate(records)]


def test_records_of_one_layout_decode_straight_into_the_stacked_records():
    rng = np.random.default_rng(9)
    records = [
        {
            "flag": index % 2 == 0,
            "id": index - 50,
            "score": float(rng.standard_normal()) if index else float("nan"),
            "x": rng.standard_normal((2, 3)).astype(np.float32),
            "brain": rng.standard_normal(4).astype(ml_dtypes.bfloat16),
            "big": rng.integers(-1000, 1000, 3).astype(">i4"),
            "pairs": (rng.standard_normal(2) + 1j).astype(np.complex128),
            "scalar": np.asarray(index, np.uint16),
            "empty": np.zeros((0, 5), np.int8),
            "mask": rng.standard_normal(3) > 0,
        }
        for index in range(100)
    ]
    schema, data = _encodings(records)
    stacked = schema.decode_stacked(data)
    assert stacked is not None
    assert exact(stacked) == exact(_stacked_records(schema.decode_many(data)))
    assert all(array.flags.c_contiguous and array.flags.writeable for array in stacked.values())


@pytest.mark.parametrize(
    "records",
    [
        [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}],
        [{"id": 1, "raw": b"a"}, {"id": 2, "raw": b"b"}],
        [{"id": 1, "nothing": None}, {"id": 2, "nothing": None}],
        # One length of record, but shapes that differ.
        [{"x": np.zeros((2, 3), np.float32)}, {"x": np.zeros((3, 2), np.float32)}],
        [{"x": np.zeros(2, np.float32)}, {"x": np.zeros(3, np.float32)}],
    ],
    ids=["text", "bytes", "none", "transposed", "two-lengths"],
)
def test_records_of_other_layouts_are_left_to_the_record_decoder(records):
    schema, data = _encodings(records)
    assert schema.decode_stacked(data) is None


def test_malformed_encodings_of_one_length_are_left_to_the_record_decoder():
    schema, data = _encodings([{"flag": True, "x": np.zeros(2, np.float32)} for _ in range(3)])
    assert schema.decode_stacked(data) is not None
    not_a_bool = [bytes([2]) + data[0][1:], *data[1:]]
    assert schema.decode_stacked(not_a_bool) is None
    with pytest.raises(ValueError, match="flag"):
        schema.decode(not_a_bool[0])
    longer_extent = bytearray(data[0])
    longer_extent[1] = 3  # The array declares three elements; the record holds two.
    assert schema.decode_stacked([bytes(longer_extent)] * 3) is None
    assert schema.decode_stacked([data[0] + b"\0"] * 3) is None
    assert schema.decode_stacked([]) is None


def test_a_file_of_every_numeric_kind_is_held_whole_from_the_records_bytes(tmp_path, monkeypatch):
    rng = np.random.default_rng(4)
    path = tmp_path / "kinds.array_record"
    write_array_record(
        path,
        [
            {
                "flag": index % 3 == 0,
                "id": index,
                "big": rng.integers(-1000, 1000, 3).astype(">i4"),
                "pairs": (rng.standard_normal(2) + 1j).astype(np.complex64),
                "scalar": np.asarray(index % 7, np.uint8),
                "mask": rng.standard_normal(2) > 0,
            }
            for index in range(ROWS)
        ],
    )
    decoded = []
    original = RecordSchema.decode_stacked

    def counted(schema: RecordSchema, data: Any) -> Any:
        found = original(schema, data)
        decoded.append(found is not None)
        return found

    monkeypatch.setattr(RecordSchema, "decode_stacked", counted)
    source = _same_batches(path, monkeypatch)
    assert source._whole.columns.complete
    assert decoded
    assert all(decoded)


def test_a_file_replaced_after_opening_still_gives_the_opened_files_batches(tmp_path):
    path = tmp_path / "replaced.array_record"
    write_array_record(path, [{"id": index, "x": np.full((2, 2), index, np.float32)} for index in range(ROWS)])
    dataset = read_array_record(path)
    expected = [{"id": np.arange(start, start + 100)} for start in range(0, ROWS, 100)]
    # Replaced by a file of as many records before the first batch: the blocks are read by a reader opened
    # then, which sees the new file and is refused, so every batch is still the opened file's.
    write_array_record(path, [{"id": -index, "x": np.zeros((2, 2), np.float32)} for index in range(ROWS)])
    batches = training_batches(
        dataset, shard_options=ShardOptions(0, 1, drop_remainder=True), seed=0, shuffle=False, num_epochs=1,
        batch_size=100, batch_fn=stack_records,
    )  # fmt: skip
    found = list(batches)
    assert [batch["id"].tolist() for batch in found] == [batch["id"].tolist() for batch in expected]
    assert [float(batch["x"][7, 1, 1]) for batch in found] == [float(start + 7) for start in range(0, ROWS, 100)]


def _filling_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith(f"{WINDOW_THREAD_PREFIX}-columns")]


def _fills_by_thread(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """Notes each block filled into the whole fields, with the name of the thread that filled it."""
    fills: list[tuple[int, str]] = []
    original = WholeColumns.fill

    def noted(whole: WholeColumns, columns: Any, run: Any, fields: Any) -> bool:
        fills.extend((block, threading.current_thread().name) for block in run)
        return original(whole, columns, run, fields)

    monkeypatch.setattr(WholeColumns, "fill", noted)
    return fills


def test_threads_read_the_blocks_ahead_of_the_batches_into_the_whole_fields(tinax_file, monkeypatch):
    monkeypatch.setattr(_array_record, "_WHOLE_COLUMNS_BLOCK", 100)
    fills = _fills_by_thread(monkeypatch)
    pipeline = evaluation_batches(
        read_array_record(tinax_file), shard_options=ShardOptions(0, 1), batch_size=50, batch_fn=stack_records
    )
    expected = evaluation_batches(
        read_array_record(tinax_file), shard_options=ShardOptions(0, 1), batch_size=50, batch_fn=stack_the_rows
    )
    assert exact(pipeline[0]) == exact(expected[0])
    for thread in _filling_threads():
        thread.join()
    # The first batch filled its block; the threads read every other one, each once, before a batch asked.
    assert fills[0] == (0, threading.current_thread().name)
    assert sorted(block for block, _ in fills) == list(range(ROWS // 100))
    assert all(name.startswith(WINDOW_THREAD_PREFIX) for _, name in fills[1:])
    assert [exact(pipeline[index]) for index in range(len(pipeline))] == [exact(batch) for batch in expected]


def test_a_malformed_record_ahead_stops_the_threads_and_raises_at_its_batch(tinax_file, tmp_path, monkeypatch):
    monkeypatch.setattr(_array_record, "_WHOLE_COLUMNS_BLOCK", 100)
    # The records of the tinax file, one of them cut short, and its header record last.
    reader = array_record_module.ArrayRecordReader(str(tinax_file), "readahead_buffer_size:0")
    data = reader.read(0, reader.num_records())
    reader.close()
    path = tmp_path / "malformed.array_record"
    writer = array_record_module.ArrayRecordWriter(str(path), "group_size:1")
    for index, record in enumerate(data):
        writer.write(record[:-1] if index == 1250 else record)
    writer.close()
    started = []
    original = _array_record.start_filling

    def counted(source: Any, threads: int) -> list[threading.Thread]:
        started.append(threads)
        return original(source, threads)

    monkeypatch.setattr(_array_record, "start_filling", counted)

    def outcome(batch_fn: Any) -> list[Any]:
        pipeline = evaluation_batches(
            read_array_record(path), shard_options=ShardOptions(0, 1), batch_size=100, batch_fn=batch_fn
        )
        found: list[Any] = []
        for index in range(len(pipeline)):
            try:
                found.append(exact(pipeline[index]))
            except ValueError as error:
                found.append(str(error))
            for thread in _filling_threads():
                thread.join()
        return found

    expected = outcome(stack_the_rows)
    assert "record 1250 is malformed" in expected[12]
    assert outcome(stack_records) == expected
    # Started once, and not again at each batch after the block the threads stopped at.
    assert len(started) == 1
