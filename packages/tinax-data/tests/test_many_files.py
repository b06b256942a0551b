"""Datasets of many files: a folder, a glob pattern or a list of Parquet or ArrayRecord files read as one.

The reference for every read is the same rows written to one file: a
dataset of many files must give the rows, batches, splits and states a
one-file dataset of the same rows gives, where the state names the files.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grain
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from grain.sharding import ShardOptions

from tinax._data._records import _parquet_write
from tinax._data._records._reader_datasets import record_source_of
from tinax.data import (
    evaluation_batches,
    read_array_record,
    read_parquet_record,
    redeal_state,
    split_by_column,
    split_random,
    stack_records,
    training_batches,
    write_array_record,
    write_parquet_record,
)

ROWS = 95
# Uneven files, so that batches and shuffled windows cross file boundaries.
FILE_ROWS = (30, 7, 1, 25, 32)


def _records(count: int = ROWS) -> list[dict[str, Any]]:
    return [
        {"id": index, "x": np.full((2, 3), index, np.float32), "split": "train" if index % 4 else "test"}
        for index in range(count)
    ]


def _plain_records(count: int = ROWS) -> list[dict[str, Any]]:
    # Rows pyarrow takes as they are: written as plain tables, as tinax 0.2 wrote them.
    return [
        {"id": index, "x": [float(index), -1.0], "split": "train" if index % 4 else "test"} for index in range(count)
    ]


def _cuts() -> list[tuple[int, int]]:
    ends = np.cumsum(FILE_ROWS).tolist()
    return list(zip([0, *ends[:-1]], ends, strict=True))


class Layout:
    """A container (Parquet in the tinax format, plain Parquet, ArrayRecord) written as one file and as many."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind = kind
        self.root = root
        self.records = _plain_records() if kind == "plain" else _records()
        suffix = ".array_record" if kind == "array_record" else ".parquet"
        self.one = root / f"one{suffix}"
        self.folder = root / "shards"
        self.folder.mkdir()
        self._write(self.one, self.records)
        # Written last file first, so that the file system's order is not the dataset's.
        count = len(FILE_ROWS)
        self.files = [self.folder / f"part-{index:05d}-of-{count:05d}{suffix}" for index in range(count)]
        for path, (start, stop) in reversed(list(zip(self.files, _cuts(), strict=True))):
            self._write(path, self.records[start:stop])

    def _write(self, path: Path, records: list[dict[str, Any]]) -> None:
        if self.kind == "array_record":
            pytest.importorskip("array_record.python.array_record_module")
            write_array_record(path, records)
        else:
            write_parquet_record(path, records)

    def read(self, path: Any, **options: Any) -> grain.MapDataset:
        reader = read_array_record if self.kind == "array_record" else read_parquet_record
        return reader(path, **options)


@pytest.fixture(params=["tinax", "plain", "array_record"])
def layout(request, tmp_path, monkeypatch) -> Layout:
    # Small row groups, so that a file holds several and the cache can be smaller than the data.
    monkeypatch.setattr(_parquet_write, "_ROW_GROUP_MAX_ROWS", 8)
    return Layout(request.param, tmp_path)


def _same(left: Any, right: Any) -> bool:
    if isinstance(left, dict):
        return (
            isinstance(right, dict) and list(left) == list(right) and all(_same(left[key], right[key]) for key in left)
        )
    if isinstance(left, np.ndarray):
        return (
            isinstance(right, np.ndarray)
            and left.dtype == right.dtype
            and left.shape == right.shape
            and left.tobytes() == right.tobytes()
        )
    if isinstance(left, list):
        return isinstance(right, list) and len(left) == len(right) and all(map(_same, left, right))
    return type(left) is type(right) and left == right


def _rows(dataset: grain.MapDataset) -> list[Any]:
    return [dataset[index] for index in range(len(dataset))]


def test_a_folder_a_pattern_and_a_list_read_the_rows_of_one_file_in_path_order(layout):
    expected = _rows(layout.read(layout.one))
    suffix = layout.one.suffix
    for given in (
        layout.folder,
        str(layout.folder),
        str(layout.folder / f"*{suffix}"),
        [str(path) for path in reversed(layout.files)],
        tuple(layout.files),
    ):
        dataset = layout.read(given)
        assert len(dataset) == ROWS
        assert _same(_rows(dataset), expected), given
        assert _same(dataset[-1], expected[-1])
        assert _same(dataset._getitems([94, 0, 37, 30, 31]), [expected[i] for i in (94, 0, 37, 30, 31)])


def test_the_files_are_listed_with_their_sizes_and_rows(layout):
    source = record_source_of(layout.read(layout.folder))
    assert source.file_set == [
        [path.name, path.stat().st_size, stop - start]
        for path, (start, stop) in zip(layout.files, _cuts(), strict=True)
    ]
    assert json.loads(json.dumps(source.file_set)) == source.file_set
    if layout.kind != "plain":
        # The identity of the records follows the files and their order.
        assert source.source_id.startswith("tinax-records:")
        assert source.source_id == record_source_of(layout.read(list(layout.files))).source_id
        assert source.source_id != record_source_of(layout.read(layout.files[:3])).source_id


def test_hidden_files_and_engine_markers_are_not_read(layout):
    (layout.folder / "_SUCCESS").write_bytes(b"")
    (layout.folder / ".part-00000.crc").write_bytes(b"checksum")
    (layout.folder / "_temporary").mkdir()
    (layout.folder / "_temporary" / "part-9").write_bytes(b"half written")
    nested = layout.folder / "more"
    nested.mkdir()
    layout._write(nested / "late", layout.records[:2])
    dataset = layout.read(layout.folder)
    assert len(dataset) == ROWS + 2
    # Sorted by the path below the folder: "more/late" before "part-...".
    assert [entry[0] for entry in record_source_of(dataset).file_set][:2] == ["more/late", layout.files[0].name]
    assert _same(_rows(dataset)[:2], layout.records[:2])


def _batch_ids(batch: Any) -> list[int]:
    if isinstance(batch, dict):
        return batch["id"].tolist()
    return [int(row["id"]) for row in batch]


def _pipelines(
    dataset: grain.MapDataset, batch_fn: Callable[..., Any], *, window: bool = False
) -> dict[str, grain.MapDataset]:
    def training(shuffle: bool, window: int | None = None, shard: int = 0, count: int = 1) -> grain.MapDataset:
        return training_batches(
            dataset,
            shard_options=ShardOptions(shard, count, drop_remainder=True),
            seed=3,
            shuffle=shuffle,
            num_epochs=2,
            batch_size=6,
            batch_fn=batch_fn,
            shuffle_window=window,
        )

    if window:
        # Its blocks are row groups: the files' own, which one file of the same rows need not have.
        return {"window shuffle": training(True, 3), "window shuffle, shard 1 of 2": training(True, 2, 1, 2)}
    return {
        "in order": training(False),
        "global shuffle": training(True),
        "shard 1 of 2": training(True, None, 1, 2),
        "evaluation": evaluation_batches(
            dataset, shard_options=ShardOptions(1, 3, drop_remainder=False), batch_size=7, batch_fn=batch_fn
        ),
    }


def _stack_rows(rows: Sequence[dict[str, Any]]) -> Any:
    return stack_records(list(rows))


@pytest.mark.parametrize("batch_fn", [stack_records, _stack_rows, list], ids=["stack_records", "row-fn", "rows"])
@pytest.mark.parametrize("cache_bytes", [None, 1_500], ids=["cached", "past-the-cache"])
def test_pipelines_over_many_files_give_the_batches_of_one_file(layout, batch_fn, cache_bytes):
    options = {} if cache_bytes is None else {"cache_bytes": cache_bytes}
    one = _pipelines(layout.read(layout.one, **options), batch_fn)
    many = _pipelines(layout.read(layout.folder, **options), batch_fn)
    for name, pipeline in one.items():
        expected = list(pipeline)
        found = list(many[name])
        assert len(found) == len(expected), name
        for left, right in zip(expected, found, strict=True):
            assert _same(left, right), name
    every = [row for batch in many["in order"] for row in _batch_ids(batch)]
    assert every == list(range(ROWS - ROWS % 6)) * 2


def _grouped_like(layout: Layout, path: Path) -> Path:
    """One plain file of the layout's rows whose row groups are those of the files, one after the other."""
    table = pa.Table.from_pylist(layout.records)
    with pq.ParquetWriter(path, table.schema) as writer:
        for file in layout.files:
            for group in range(pq.ParquetFile(file).num_row_groups):
                writer.write_table(pq.ParquetFile(file).read_row_group(group))
    return path


def test_the_window_shuffle_over_many_files_has_the_files_row_groups_for_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(_parquet_write, "_ROW_GROUP_MAX_ROWS", 8)
    layout = Layout("plain", tmp_path)
    reference = _pipelines(read_parquet_record(_grouped_like(layout, tmp_path / "grouped.parquet")), list, window=True)
    many = _pipelines(read_parquet_record(layout.folder), list, window=True)
    for name, pipeline in reference.items():
        assert _same(list(pipeline), list(many[name])), name
    epoch = [row["id"] for batch in many["window shuffle"] for row in batch][: ROWS // 6 * 6]
    assert len(set(epoch)) == len(epoch)


def test_every_row_is_read_once_per_epoch_across_processes(layout):
    dataset = layout.read(layout.folder)
    seen = []
    for shard in range(3):
        pipeline = training_batches(
            dataset,
            shard_options=ShardOptions(shard, 3, drop_remainder=True),
            seed=9,
            shuffle=True,
            num_epochs=1,
            batch_size=5,
            batch_fn=stack_records,
        )
        seen.extend(row for batch in pipeline for row in batch["id"].tolist())
    assert len(seen) == ROWS - ROWS % 15
    assert len(set(seen)) == len(seen)


def test_splits_over_many_files_are_the_splits_of_one_file(layout):
    one, many = layout.read(layout.one), layout.read(layout.folder)
    for split in (lambda d: split_random(d, 0.7, seed=4), lambda d: split_by_column(d, "split")):
        for left, right in zip(split(one), split(many), strict=True):
            assert _same(_rows(left), _rows(right))


def test_a_state_names_the_files_and_restores_only_over_the_same_files(layout, tmp_path):
    def pipeline(dataset: grain.MapDataset) -> grain.MapDataset:
        return training_batches(
            dataset,
            shard_options=ShardOptions(0, 1, drop_remainder=True),
            seed=1,
            shuffle=True,
            num_epochs=1,
            batch_size=4,
            batch_fn=stack_records,
        )

    iterator = iter(pipeline(layout.read(layout.folder)))
    next(iterator)
    state = json.loads(json.dumps(iterator.get_state()))
    assert state["tinax_pipeline"]["files"] == record_source_of(layout.read(layout.folder)).file_set
    expected = [batch["id"].tolist() for batch in iterator]

    again = iter(pipeline(layout.read(list(layout.files))))
    again.set_state(state)
    assert [batch["id"].tolist() for batch in again] == expected

    # One file fewer, and one file replaced by another of other rows.
    with pytest.raises(ValueError, match=r"the files differ: 1 file\(s\) of the state are gone .*part-00004"):
        iter(pipeline(layout.read(layout.files[:4]))).set_state(state)
    layout._write(layout.files[1], layout.records[:9])
    with pytest.raises(ValueError, match=r"the files differ: 'part-00001-of-00005.*' is \[size, rows\]"):
        iter(pipeline(layout.read(layout.folder))).set_state(state)
    # A pipeline over one file describes no files: its states are as they were.
    single = iter(pipeline(layout.read(layout.one)))
    assert "files" not in single.get_state()["tinax_pipeline"]
    with pytest.raises(ValueError, match="files is"):
        single.set_state(state)


def test_a_file_changed_after_opening_is_refused_when_read(layout):
    dataset = layout.read(layout.folder)
    copy = pickle.loads(pickle.dumps(dataset))  # As a worker process receives it: it opens files when it reads.
    layout._write(layout.files[2], [layout.records[0]])
    with pytest.raises(ValueError, match="part-00002-of-00005.* changed since the dataset was opened"):
        _rows(copy)


def test_a_redeal_over_many_files_reads_each_row_once(layout):
    dataset = layout.read(layout.folder)

    def pipeline(shard: int, count: int, batch_size: int) -> grain.MapDataset:
        return training_batches(
            dataset,
            shard_options=ShardOptions(shard, count, drop_remainder=True),
            seed=2,
            shuffle=True,
            num_epochs=1,
            batch_size=batch_size,
            batch_fn=stack_records,
        )

    read, states = [], []
    for shard in range(2):
        iterator = iter(pipeline(shard, 2, 6))
        for _ in range(3):
            read.extend(next(iterator)["id"].tolist())
        states.append(json.loads(json.dumps(iterator.get_state())))
    for shard in range(3):
        state = redeal_state(states, shard_options=ShardOptions(shard, 3, drop_remainder=True))
        assert state["tinax_pipeline"]["files"] == states[0]["tinax_pipeline"]["files"]
        iterator = iter(pipeline(shard, 3, 4))
        iterator.set_state(state)
        read.extend(row for batch in iterator for row in batch["id"].tolist())
    assert len(read) == len(set(read))
    assert ROWS - len(read) < 12


def test_mapping_numpy_reads_many_plain_files_as_one(tmp_path):
    tables = [pa.table({"v": [[float(i), 1.0]] * n}) for i, n in enumerate((3, 4))]
    for index, table in enumerate(tables):
        pq.write_table(table, tmp_path / f"{index}.parquet")
    rows = _rows(read_parquet_record(tmp_path, mapping="numpy"))
    assert len(rows) == 7
    assert all(isinstance(row["v"], np.ndarray) for row in rows)
    assert rows[3]["v"].tolist() == [1.0, 1.0]


# Plain tables of other schemas, and hive partition folders.


def test_schemas_are_unified_as_pyarrow_unifies_them(tmp_path):
    pq.write_table(pa.table({"a": [1, 2], "b": ["x", "y"]}), tmp_path / "0.parquet")
    pq.write_table(pa.table({"a": [3], "c": [True]}), tmp_path / "1.parquet")
    pq.write_table(pa.table({"a": pa.nulls(1), "b": ["z"]}), tmp_path / "2.parquet")
    rows = _rows(read_parquet_record(tmp_path))
    assert rows == [
        {"a": 1, "b": "x", "c": None},
        {"a": 2, "b": "y", "c": None},
        {"a": 3, "b": None, "c": True},
        {"a": None, "b": "z", "c": None},
    ]
    unified = pa.unify_schemas([pq.read_schema(path) for path in sorted(tmp_path.iterdir())])
    assert rows == ds.dataset(tmp_path, schema=unified).to_table().to_pylist()


def test_columns_pyarrow_cannot_unify_are_refused_naming_both_files_and_the_column(tmp_path):
    pq.write_table(pa.table({"a": [1], "b": [1]}), tmp_path / "0.parquet")
    pq.write_table(pa.table({"a": [2], "b": [2]}), tmp_path / "1.parquet")
    pq.write_table(pa.table({"a": [3], "b": ["three"]}), tmp_path / "2.parquet")
    with pytest.raises(ValueError, match=r"'0.parquet' and '2.parquet'.*column 'b' is int64 .* string"):
        read_parquet_record(tmp_path)


def test_hive_partition_values_become_fields_typed_as_pyarrow_types_them(tmp_path):
    table = pa.table({"x": list(range(12)), "lang": ["en", "fr", "de"] * 4, "year": [2020, 2021] * 6})
    ds.write_dataset(table, tmp_path, format="parquet", partitioning=["lang", "year"], partitioning_flavor="hive")
    dataset = read_parquet_record(tmp_path)
    source = record_source_of(dataset)
    assert source.arrow_schema.field("lang").type == pa.string()
    assert source.arrow_schema.field("year").type == pa.int32()
    discovered = ds.dataset(tmp_path, format="parquet", partitioning=ds.HivePartitioning.discover())
    assert source.arrow_schema == discovered.schema.remove_metadata()
    expected = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table()
    assert _rows(dataset) == expected.to_pylist()
    assert sorted((row["x"], row["lang"], row["year"]) for row in _rows(dataset)) == sorted(
        zip(table["x"].to_pylist(), table["lang"].to_pylist(), table["year"].to_pylist(), strict=True)
    )
    batch = next(
        iter(
            training_batches(
                dataset,
                shard_options=ShardOptions(0, 1, drop_remainder=True),
                seed=0,
                shuffle=True,
                num_epochs=1,
                batch_size=12,
                batch_fn=stack_records,
            )
        )
    )
    # As stacking the rows gives it: pyarrow's int32 values are Python ints in the rows.
    assert batch["year"].dtype == stack_records([{"year": 2020}])["year"].dtype
    assert sorted(batch["x"].tolist()) == list(range(12))


def test_a_partition_key_that_the_files_also_hold_is_read_from_the_files(tmp_path):
    # As Polars' partitioned writes leave them: the key in the folder name and, as int64, in the file.
    (tmp_path / "year=2020").mkdir()
    (tmp_path / "year=2021").mkdir()
    pq.write_table(pa.table({"year": [2020], "x": [1]}), tmp_path / "year=2020" / "part-0.parquet")
    pq.write_table(pa.table({"year": [2021], "x": [2]}), tmp_path / "year=2021" / "part-0.parquet")
    dataset = read_parquet_record(tmp_path)
    assert _rows(dataset) == [{"year": 2020, "x": 1}, {"year": 2021, "x": 2}]
    assert record_source_of(dataset).arrow_schema == pa.schema([("year", pa.int64()), ("x", pa.int64())])


def test_tinax_files_in_partition_folders_are_refused(tmp_path):
    (tmp_path / "lang=en").mkdir()
    write_parquet_record(tmp_path / "lang=en" / "0.parquet", _records(3))
    with pytest.raises(ValueError, match="hive partition folders"):
        read_parquet_record(tmp_path)


# Refusals.


@pytest.mark.parametrize("container", ["parquet", "array_record"])
def test_files_of_both_kinds_or_of_different_schemas_are_refused(tmp_path, container):
    if container == "array_record":
        pytest.importorskip("array_record.python.array_record_module")
        write, read, suffix = write_array_record, read_array_record, ".array_record"
    else:
        write, read, suffix = write_parquet_record, read_parquet_record, ".parquet"
    write(tmp_path / f"a{suffix}", _records(3))
    write(tmp_path / f"b{suffix}", [{"id": 1, "x": np.zeros((2, 3), np.float64), "split": "t"}])
    with pytest.raises(ValueError, match=rf"'a{suffix}' and 'b{suffix}' hold records of different schemas: .*'x'"):
        read(tmp_path)
    (tmp_path / f"b{suffix}").unlink()
    write(tmp_path / f"c{suffix}", [{"id": 1, "split": "t"}])  # JSON records, or a plain table.
    with pytest.raises(ValueError, match=rf"mixes files in the tinax record format \('a{suffix}'\) with .*'c{suffix}'"):
        read(tmp_path)


@pytest.mark.parametrize("container", ["parquet", "array_record"])
def test_bad_paths_give_the_error_contracts_types(tmp_path, container):
    if container == "array_record":
        pytest.importorskip("array_record.python.array_record_module")
        read, write, suffix = read_array_record, write_array_record, ".array_record"
    else:
        read, write, suffix = read_parquet_record, write_parquet_record, ".parquet"
    with pytest.raises(FileNotFoundError, match="No .* file in the folder"):
        read(tmp_path)
    (tmp_path / "_SUCCESS").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="No .* file in the folder"):
        read(tmp_path)
    with pytest.raises(FileNotFoundError, match="matches the glob pattern"):
        read(str(tmp_path / f"*{suffix}"))
    write(tmp_path / f"a{suffix}", _records(2))
    with pytest.raises(FileNotFoundError, match="nothing is there"):
        read([tmp_path / f"a{suffix}", tmp_path / f"missing{suffix}"])
    with pytest.raises(ValueError, match="paths of distinct files"):
        read([tmp_path / f"a{suffix}", str(tmp_path / f"a{suffix}")])
    with pytest.raises(ValueError, match="at least one file"):
        read([])
    with pytest.raises(TypeError, match=r"path\[1\] must be a str or os.PathLike path"):
        read([tmp_path / f"a{suffix}", 3])
    with pytest.raises(TypeError, match="path must be"):
        read(3)
    (tmp_path / "notes.txt").write_text("not records")
    with pytest.raises(ValueError, match="notes.txt"):
        read(tmp_path)


def test_the_dataset_of_many_files_pickles_and_reads_in_another_process(layout):
    dataset = layout.read(layout.folder)
    copy = pickle.loads(pickle.dumps(dataset))
    assert _same(_rows(copy), _rows(dataset))
    assert record_source_of(copy).file_set == record_source_of(dataset).file_set


def test_a_folder_of_more_files_than_a_handle_keeps_open_reads_each_once(tmp_path):
    for index in range(40):
        pq.write_table(pa.table({"id": [index * 2, index * 2 + 1]}), tmp_path / f"{index:03d}.parquet")
    dataset = read_parquet_record(tmp_path, cache_bytes=64)
    order = np.random.default_rng(0).permutation(80).tolist()
    assert [dataset[index]["id"] for index in order] == order
    assert len(record_source_of(dataset).file_set) == 40


@pytest.mark.parametrize("damage", ["truncated", "footer length", "no parquet"])
def test_a_damaged_file_among_many_raises_what_reading_it_alone_raises(tmp_path, damage):
    folder = tmp_path / "shards"
    folder.mkdir()
    write_parquet_record(folder / "a.parquet", _records(5))
    pq.write_table(pa.table({"id": [1, 2]}), folder / "b.parquet")
    damaged = folder / "b.parquet"
    data = bytearray(damaged.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "footer length":
        data[-8:-4] = (len(data) * 2).to_bytes(4, "little")
    else:
        data = bytearray(b"not a parquet file at all, just text\n" * 4)
    damaged.write_bytes(bytes(data))
    with pytest.raises((ValueError, OSError)) as alone:
        read_parquet_record(damaged)
    (folder / "a.parquet").unlink()
    with pytest.raises(type(alone.value), match="b.parquet"):
        read_parquet_record(folder)
