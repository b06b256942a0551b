"""Batches of stack_records over ArrayRecord files from the stacked fields held whole: the same batches."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from grain.sharding import ShardOptions

from tinax._data import _array_record
from tinax._data._reader_datasets import record_source_of
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
