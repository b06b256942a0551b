"""stack_records, and the batches a reader builds straight from its columns: the arrays of stacking the rows."""

from __future__ import annotations

import json
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
from tinax._data._records._parquet_source import _RowGroup
from tinax.data import (
    InMemorySource,
    evaluation_batches,
    open_multiprocessing_iterator,
    read_parquet_record,
    stack_records,
    training_batches,
    write_parquet_record,
)

ROWS = 9000


def stack_the_rows(rows: Sequence[dict[str, Any]]) -> dict[str, np.ndarray]:
    """stack_records given the records themselves: a batch function that is not stack_records."""
    return stack_records(list(rows))


def ids_of(rows: Sequence[dict[str, Any]]) -> list[int]:
    return [int(row["id"]) for row in rows]


def exact(batch: dict[str, np.ndarray]) -> list[tuple[Any, ...]]:
    """A stacked batch as comparable values: equal means the same fields, dtypes, shapes and bits."""
    found = []
    for name, array in batch.items():
        assert isinstance(array, np.ndarray), name
        contents = array.tolist() if array.dtype == object else array.tobytes()
        found.append((name, array.dtype.str, array.shape, contents))
    return found


def _records(count: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((count, 2, 3)).astype(np.float32)
    brain = rng.standard_normal((count, 4)).astype(ml_dtypes.bfloat16)
    pairs = (rng.standard_normal((count, 2)) + 1j * rng.standard_normal((count, 2))).astype(np.complex64)
    big = rng.integers(-1000, 1000, (count, 3)).astype(">i4")
    return [
        {
            "id": index,
            "score": float(index) / 3,
            "flag": index % 3 == 0,
            "label": "é" * (index % 5),
            "blob": bytes([index % 256]) * (index % 4),
            "nothing": None,
            "x": x[index],
            "brain": brain[index],
            "pairs": pairs[index],
            "big": big[index],
            "scalar": np.asarray(index / 7, np.float64),
        }
        for index in range(count)
    ]


@pytest.fixture(scope="module")
def tinax_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tinax-format file of every kind of field, in several row groups."""
    path = tmp_path_factory.mktemp("stacked") / "records.parquet"
    write_parquet_record(path, _records(ROWS), overwrite=False)
    assert pq.ParquetFile(path).metadata.num_row_groups > 2
    assert b"tinax.records" in pq.read_metadata(path).metadata
    return path


@pytest.fixture(scope="module")
def plain_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Parquet file as other tools write it: narrow ints and floats, nulls, lists, uneven row groups."""
    path = tmp_path_factory.mktemp("stacked") / "plain.parquet"
    count = 1400
    rng = np.random.default_rng(3)
    table = pa.table(
        {
            "id": pa.array(range(count), pa.int64()),
            "small": pa.array(rng.integers(-100, 100, count), pa.int8()),
            "wide": pa.array(rng.integers(0, 2**31, count), pa.uint32()),
            "half": pa.array(rng.standard_normal(count), pa.float32()),
            "label": pa.array([None if index % 11 == 0 else f"label-{index % 7}" for index in range(count)]),
            "x": pa.array([row.tolist() for row in rng.standard_normal((count, 3))], pa.list_(pa.float32())),
        }
    )
    with pq.ParquetWriter(path, table.schema) as writer:
        first = 0
        for size in (37, 500, 1, 263, 199, 400):
            writer.write_table(table.slice(first, size), row_group_size=size)
            first += size
    return path


# ---------------------------------------------------------------------------
# stack_records


def test_stack_records_stacks_each_field_as_numpy_stacks_its_values():
    records = [
        {"id": 1, "score": 0.5, "flag": True, "name": "a", "x": np.zeros((2, 3), np.float32)},
        {"id": 2, "score": 1.5, "flag": False, "name": "bcd", "x": np.ones((2, 3), np.float32)},
    ]
    batch = stack_records(records)
    assert list(batch) == ["id", "score", "flag", "name", "x"]
    assert batch["id"].dtype == np.int64
    assert batch["id"].tolist() == [1, 2]
    assert batch["score"].dtype == np.float64
    assert batch["flag"].dtype == np.bool_
    assert batch["name"].dtype == np.dtype("<U3")
    assert batch["name"].tolist() == ["a", "bcd"]
    assert batch["x"].dtype == np.float32
    assert batch["x"].shape == (2, 2, 3)
    assert batch["x"][1].sum() == 6


@pytest.mark.parametrize(
    ("records", "error", "words"),
    [
        ("ab", TypeError, "records"),
        (None, TypeError, "records"),
        ([], ValueError, "at least one record"),
        ([{"a": 1}, 3], TypeError, "records[1]"),
        ([[1, 2]], TypeError, "records[0]"),
        ([{"a": 1}, {"a": 1, "b": 2}], ValueError, "records[1]"),
        ([{"a": 1}, {"b": 2}], ValueError, "records[1]"),
        ([{"x": np.zeros(2)}, {"x": np.zeros(3)}], ValueError, "field 'x'"),
    ],
    ids=["str", "none", "empty", "not-a-mapping", "list-record", "extra-field", "other-field", "shapes"],
)
def test_stack_records_refuses_what_does_not_stack_naming_it(records, error, words):
    with pytest.raises(error) as caught:
        stack_records(records)
    assert words in str(caught.value)


# ---------------------------------------------------------------------------
# Batches built from columns: the same arrays as stacking the records


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


@pytest.mark.parametrize("cache_bytes", [1 << 30, 1 << 16], ids=["cached", "past-the-cache"])
def test_batches_from_the_columns_are_the_stacked_records_bit_for_bit(tinax_file, cache_bytes):
    def dataset() -> Any:
        return read_parquet_record(tinax_file, cache_bytes=cache_bytes)

    from_columns = _pipelines(dataset, stack_records)
    from_rows = _pipelines(dataset, stack_the_rows)
    for name, pipeline in from_columns.items():
        expected = [exact(batch) for batch in from_rows[name]]
        assert [exact(batch) for batch in pipeline] == expected, name
        # Random access reads the same batches too.
        assert exact(pipeline[len(pipeline) - 1]) == expected[-1], name


@pytest.mark.parametrize("mapping", ["python", "numpy"])
def test_batches_of_other_tools_files_from_the_columns_are_the_stacked_records(plain_file, mapping):
    # Narrow ints and floats stack as the Python values they read as (int64, float64), nulls as objects,
    # lists under "python" as float64 and under "numpy" as their own float32.
    def dataset() -> Any:
        return read_parquet_record(plain_file, mapping=mapping)

    from_columns = _pipelines(dataset, stack_records)
    from_rows = _pipelines(dataset, stack_the_rows)
    for name, pipeline in from_columns.items():
        assert [exact(batch) for batch in pipeline] == [exact(batch) for batch in from_rows[name]], name
    batch = next(iter(from_columns["in-order"]))
    assert batch["small"].dtype == np.int64
    assert batch["wide"].dtype == np.int64
    assert batch["half"].dtype == np.float64
    assert batch["label"].dtype == object
    assert batch["label"][0] is None
    assert batch["x"].dtype == (np.float64 if mapping == "python" else np.float32)


def test_batches_from_the_columns_build_no_record(tinax_file, monkeypatch):
    from_rows = _pipelines(lambda: read_parquet_record(tinax_file), stack_the_rows).values()
    expected = [[exact(batch) for batch in pipeline] for pipeline in from_rows]

    def no_records(*args: Any, **keywords: Any) -> Any:
        raise AssertionError("a record was built")

    monkeypatch.setattr(_RowGroup, "record", no_records)
    monkeypatch.setattr(_RowGroup, "records", no_records)
    pipelines = _pipelines(lambda: read_parquet_record(tinax_file), stack_records).values()
    assert [[exact(batch) for batch in pipeline] for pipeline in pipelines] == expected


def test_arrays_of_several_shapes_in_a_batch_are_the_error_stacking_the_records_gives(tmp_path):
    path = tmp_path / "ragged.parquet"
    write_parquet_record(
        path, [{"id": index, "v": np.zeros((index % 3, 2), np.float32)} for index in range(30)], overwrite=False
    )
    one_process = ShardOptions(0, 1, drop_remainder=True)
    for batch_fn in (stack_records, stack_the_rows):
        batches = training_batches(
            read_parquet_record(path), shard_options=one_process, seed=0, shuffle=False, num_epochs=1,
            batch_size=4, batch_fn=batch_fn,
        )  # fmt: skip
        with pytest.raises(ValueError, match="field 'v'") as caught:
            next(iter(batches))
        assert "(0, 2)" in str(caught.value)
        assert "(1, 2)" in str(caught.value)
    # Batches whose arrays share one shape stack, from the columns as from the records.
    same_shapes = [
        {"id": index, "v": np.full((2, 2), index, np.float32) if index < 8 else np.zeros((3, 2), np.float32)}
        for index in range(16)
    ]
    write_parquet_record(path, same_shapes, overwrite=True)
    for batch_fn in (stack_records, stack_the_rows):
        batches = evaluation_batches(
            read_parquet_record(path), shard_options=ShardOptions(0, 1), batch_size=8, batch_fn=batch_fn
        )
        assert [batch["v"].shape for batch in batches] == [(8, 2, 2), (8, 3, 2)]


def test_a_columnar_pipeline_resumes_from_its_state_and_in_worker_processes(parsed_flags, tinax_file):
    def pipeline() -> Any:
        return training_batches(
            read_parquet_record(tinax_file), shard_options=ShardOptions(0, 1, drop_remainder=True), seed=1,
            shuffle=True, num_epochs=2, batch_size=256, batch_fn=stack_records,
        )  # fmt: skip

    expected = [exact(batch) for batch in pipeline()]
    iterator = iter(pipeline())
    first = [exact(next(iterator)) for _ in range(5)]
    state = json.loads(json.dumps(iterator.get_state()))
    iterator.close()
    resumed = iter(pipeline())
    resumed.set_state(state)
    assert first + [exact(batch) for batch in resumed] == expected
    # grain's worker processes hand dicts over with their keys sorted, whatever the batch function.
    with open_multiprocessing_iterator(pipeline().to_iter_dataset(), num_workers=2) as workers:
        assert [sorted(exact(batch)) for batch in workers] == [sorted(batch) for batch in expected]


def test_direct_reads_give_the_batches_of_grains_own_chain(tinax_file, plain_file, monkeypatch):
    # Each batch's source positions, computed with NumPy, are those grain's datasets map the indices to.
    def everything() -> list[list[Any]]:
        found = []
        for path in (tinax_file, plain_file):
            pipelines = _pipelines(lambda path=path: read_parquet_record(path, cache_bytes=1 << 30), ids_of)
            found.extend(list(pipeline) for pipeline in pipelines.values())
        return found

    direct = everything()
    monkeypatch.setattr(_planned_reads, "batch_positions", lambda *args, **keywords: None)
    assert everything() == direct


def test_stack_records_over_other_datasets_stacks_the_rows():
    rows = [{"id": index, "x": np.full(3, index, np.int16)} for index in range(20)]
    import grain

    dataset = grain.MapDataset.source(InMemorySource(rows, source_id="rows-v1"))
    batches = list(
        training_batches(
            dataset, shard_options=ShardOptions(0, 1, drop_remainder=True), seed=0, shuffle=True, num_epochs=1,
            batch_size=8, batch_fn=stack_records,
        )
    )  # fmt: skip
    assert [batch["x"].dtype for batch in batches] == [np.int16, np.int16]
    assert sorted(np.concatenate([batch["id"] for batch in batches]).tolist()) == sorted(
        np.concatenate([batch["x"][:, 0] for batch in batches]).tolist()
    )


def test_a_columnar_pipeline_reads_in_the_consumers_thread_unless_told_otherwise(tinax_file):
    import threading

    import grain

    def batches_and_threads(iterable: Any) -> tuple[list[Any], int]:
        # Threads themselves, not their idents, which a new thread may reuse from one that has exited.
        before = set(threading.enumerate())
        iterator = iter(iterable)
        found = []
        started: set[threading.Thread] = set()
        for batch in iterator:
            found.append(exact(batch))
            # Counted at every batch, while the iterator lives: once its work is done, a thread may exit.
            started.update(
                thread
                for thread in threading.enumerate()
                if thread not in before and thread.name.startswith("grain-prefetch")
            )
        iterator.close()
        return found, len(started)

    pipelines = _pipelines(lambda: read_parquet_record(tinax_file), stack_records)
    for name in ("in-order", "global-shuffle", "evaluation"):
        default, threads = batches_and_threads(pipelines[name])
        assert threads == 0, name
        told, told_threads = batches_and_threads(pipelines[name].to_iter_dataset(grain.ReadOptions(num_threads=2)))
        assert told == default, name
        assert told_threads == 2, name


def test_a_globally_shuffled_columnar_pipeline_past_the_cache_reads_planned_windows_of_stacked_fields(
    tinax_file, monkeypatch
):
    def pipeline(batch_fn: Any) -> Any:
        dataset = read_parquet_record(tinax_file, cache_bytes=1 << 16)
        return training_batches(
            dataset, shard_options=ShardOptions(1, 2, drop_remainder=True), seed=4, shuffle=True, num_epochs=2,
            batch_size=100, batch_fn=batch_fn,
        )  # fmt: skip

    expected = [exact(batch) for batch in pipeline(stack_the_rows)]
    windows = []
    original = _planned_reads.read_stacked_window

    def counted(source: Any, positions: np.ndarray) -> Any:
        found = original(source, positions)  # An error here would be read the usual way: counted only if read.
        windows.append(len(positions))
        return found

    def no_records(*args: Any) -> Any:
        raise AssertionError("records were read into a window")

    def not_from_a_window(*args: Any) -> Any:
        raise AssertionError("a batch was read outside the planned windows")

    monkeypatch.setattr(_planned_reads, "read_stacked_window", counted)
    monkeypatch.setattr(_planned_reads, "read_window", no_records)
    monkeypatch.setattr(_direct_reads.DirectBatchMapDataset, "read_rows", not_from_a_window)
    assert [exact(batch) for batch in pipeline(stack_records)] == expected
    # Every batch came from a window, each window's rows read once (the next one read ahead in a thread).
    assert sum(windows) == len(expected) * 100


@pytest.mark.parametrize("order", ["none", "window"])
@pytest.mark.parametrize(
    ("count", "cuts"),
    [(1000, [slice(0, 996), slice(498, 996)]), (37, [slice(0, 36), slice(18, 36)]), (50, [slice(3, 40)])],
)
def test_positions_of_a_range_are_grains_across_epochs_of_slices_and_source(count, cuts, order):
    from tinax._data._grain_compat import read_many
    from tinax._data._pipelines._checked_datasets import WindowShuffleMapDataset
    from tinax._data._pipelines._planned_reads import VectorPositions, _vector_positions, position_dataset

    ordered = position_dataset(count).seed(5)
    if order == "window":
        # Blocks of uneven sizes, two to a window: a range crosses windows, and epochs with new orders.
        blocks = sorted({*range(7, count, 9), count})
        ordered = WindowShuffleMapDataset(ordered, seed=5, block_ends=blocks, window=2)
    twin, slices = ordered, []
    for cut in cuts:
        twin = twin.slice(cut)
        slices.insert(0, twin)
    vector = _vector_positions(twin, ordered, slices, order)
    assert isinstance(vector, VectorPositions)
    rng = np.random.default_rng(count)
    for start in [0, len(twin) - 3, *rng.integers(0, 4 * len(twin), 40).tolist()]:
        for length in (1, 2, 5, len(twin) + 7):
            expected = read_many(twin, list(range(start, start + length)))
            assert list(vector.range_positions(start, start + length)) == expected
