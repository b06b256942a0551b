"""Folders of Parquet files that other engines wrote, read by ``read_parquet_record`` as one dataset.

Each test has a real engine (pyarrow's dataset writer, Polars, DuckDB)
write a folder into ``tmp_path``, or lays out a folder the way Hugging Face
dataset repositories and Spark jobs lay theirs out, and then checks tinax's
rows against what that engine reads back from the same folder: in the same
order where the order is defined by the file names, as multisets where an
engine chooses its own order. Partition fields must be typed as pyarrow's
dataset discovery types them, side files must be left alone, and the
pipelines must read every row once across shards while their states list
the files with their sizes and row counts.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grain
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from grain.sharding import ShardOptions

from tinax._data._records._reader_datasets import record_source_of
from tinax.data import read_parquet_record, stack_records, training_batches

polars = pytest.importorskip("polars")
duckdb = pytest.importorskip("duckdb")

# Rows of the partitioned folders: a multiple of 2 shards x 4 rows a batch, so that no row is dropped.
ROWS = 48
YEARS = (2020, 2021, 2022)
LANGS = ("de", "en")


def _rows(dataset: grain.MapDataset) -> list[Any]:
    return [dataset[index] for index in range(len(dataset))]


def _table(count: int = ROWS) -> pa.Table:
    """The logical table every engine partitions: a unique id, two partition keys and a vector per row."""
    ids = list(range(count))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "score": pa.array([index / 4 for index in ids], pa.float64()),
            "year": pa.array([YEARS[index % 3] for index in ids], pa.int64()),
            "lang": pa.array([LANGS[index % 2] for index in ids], pa.string()),
            "vector": pa.array([[float(index), -float(index)] for index in ids], pa.list_(pa.float64())),
        }
    )


def _key(row: dict[str, Any]) -> str:
    # Rows hold lists, which do not sort; their JSON text does, and is equal exactly when the rows are.
    return json.dumps(row, sort_keys=True)


def _multiset(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(_key(row) for row in rows)


def _expected_files(root: Path, paths: list[Path]) -> list[list[Any]]:
    """``[name, size, rows]`` of each file, as the file system and the file's own footer say, in name order."""
    entries = [
        [Path(path).relative_to(root).as_posix(), os.stat(path).st_size, pq.read_metadata(path).num_rows]
        for path in paths
    ]
    return sorted(entries, key=lambda entry: entry[0])


def _parquet_files(root: Path) -> list[Path]:
    return [
        path
        for path in root.rglob("*.parquet")
        if not any(part.startswith((".", "_")) for part in path.relative_to(root).parts)
    ]


# ---------------------------------------------------------------------------
# The engines' partitioned writes


def _write_with_pyarrow(folder: Path, count: int = ROWS) -> None:
    # Two row groups and two files at least in every partition.
    ds.write_dataset(
        _table(count),
        folder,
        format="parquet",
        partitioning=["year", "lang"],
        partitioning_flavor="hive",
        max_rows_per_file=4,
        max_rows_per_group=2,
        min_rows_per_group=0,
    )


def _write_with_polars(folder: Path, count: int = ROWS) -> None:
    # ``write_parquet(partition_by=...)`` keeps the key columns inside the files as well (see
    # test_polars_default_partitioned_write_is_refused_as_documented); the sink's option leaves them out,
    # as hive layouts do.
    frame = polars.from_arrow(_table(count))
    frame.lazy().sink_parquet(
        polars.PartitionBy(str(folder), key=["year", "lang"], include_key=False, max_rows_per_file=3),
        row_group_size=2,
    )


def _write_with_duckdb(folder: Path, count: int = ROWS) -> None:
    connection = duckdb.connect()
    half = count // 2
    select = (
        "SELECT i AS id, i / 4 AS score, 2020 + i % 3 AS year, CASE WHEN i % 2 = 0 THEN 'de' ELSE 'en' END AS lang, "
        "[i::DOUBLE, -i::DOUBLE] AS vector FROM range({start}, {stop}) t(i)"
    )
    # The second COPY appends a file of its own to every partition folder.
    connection.execute(
        f"COPY ({select.format(start=0, stop=half)}) TO '{folder}' (FORMAT PARQUET, PARTITION_BY (year, lang))"
    )
    connection.execute(
        f"COPY ({select.format(start=half, stop=count)}) TO '{folder}' "
        "(FORMAT PARQUET, PARTITION_BY (year, lang), APPEND)"
    )
    connection.close()


WRITERS: dict[str, Callable[..., None]] = {
    "pyarrow": _write_with_pyarrow,
    "polars": _write_with_polars,
    "duckdb": _write_with_duckdb,
}


def _polars_rows(folder: Path) -> tuple[list[dict[str, Any]], Any]:
    frame = polars.read_parquet(str(folder / "**" / "*.parquet"), hive_partitioning=True)
    return frame.to_dicts(), frame.schema


def _duckdb_rows(folder: Path) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    connection = duckdb.connect()
    relation = connection.sql(f"SELECT * FROM read_parquet('{folder}/**/*.parquet', hive_partitioning=true)")
    columns = list(relation.columns)
    types = [str(kind) for kind in relation.types]
    rows = [dict(zip(columns, values, strict=True)) for values in relation.fetchall()]
    connection.close()
    return rows, columns, types


def _in_partition_folders(folder: Path) -> dict[str, int]:
    """How many data files each ``year=.../lang=...`` folder holds."""
    counts: dict[str, int] = {}
    for path in _parquet_files(folder):
        parent = path.parent.relative_to(folder).as_posix()
        counts[parent] = counts.get(parent, 0) + 1
    return counts


# pyarrow.dataset.write_dataset


def test_a_hive_folder_pyarrow_wrote_reads_in_pyarrows_order_with_its_types(tmp_path):
    folder = tmp_path / "pyarrow"
    _write_with_pyarrow(folder)
    counts = _in_partition_folders(folder)
    assert sorted(counts) == [f"year={year}/lang={lang}" for year in YEARS for lang in LANGS]
    assert min(counts.values()) >= 2  # Several files in every partition.
    assert all(pq.ParquetFile(path).num_row_groups >= 2 for path in _parquet_files(folder))

    discovered = ds.dataset(folder, format="parquet", partitioning="hive")
    expected = discovered.to_table().to_pylist()
    dataset = read_parquet_record(folder)
    assert len(dataset) == ROWS
    assert _rows(dataset) == expected
    assert dataset._getitems([47, 0, 13, 13, 30]) == [expected[index] for index in (47, 0, 13, 13, 30)]

    source = record_source_of(dataset)
    # The files' columns first, then the partition fields, typed as pyarrow's discovery types them.
    assert source.arrow_schema.names == ["id", "score", "vector", "year", "lang"]
    assert source.arrow_schema.field("year").type == pa.int32()
    assert source.arrow_schema.field("lang").type == pa.string()
    for field in discovered.schema:
        assert source.arrow_schema.field(field.name).type == field.type, field.name
    # pyarrow's discovery lists the same files, in the same order.
    assert [entry[0] for entry in source.file_set] == [
        Path(path).relative_to(folder).as_posix() for path in discovered.files
    ]
    assert source.file_set == _expected_files(folder, [Path(path) for path in discovered.files])

    numpy_rows = _rows(read_parquet_record(folder, mapping="numpy"))
    for row, reference in zip(numpy_rows, expected, strict=True):
        assert type(row["vector"]) is np.ndarray
        assert row["vector"].dtype == np.float64
        assert row["vector"].tolist() == reference["vector"]
        assert (row["id"], row["year"], row["lang"]) == (reference["id"], reference["year"], reference["lang"])


def test_a_hive_folder_pyarrow_wrote_reads_through_a_pattern_and_a_list_alike(tmp_path):
    folder = tmp_path / "pyarrow"
    _write_with_pyarrow(folder)
    expected = _rows(read_parquet_record(folder))
    paths = _parquet_files(folder)
    # The root of both is the folder, so the partition folders are still below it.
    for given in (str(folder / "**" / "*.parquet"), str(folder / "year=*" / "lang=*" / "*.parquet"), paths[::-1]):
        dataset = read_parquet_record(given)
        assert _rows(dataset) == expected, given
        assert record_source_of(dataset).arrow_schema.field("year").type == pa.int32()


# Polars


def test_a_hive_folder_polars_wrote_holds_the_rows_polars_reads(tmp_path):
    folder = tmp_path / "polars"
    _write_with_polars(folder)
    counts = _in_partition_folders(folder)
    assert len(counts) == len(YEARS) * len(LANGS)
    assert min(counts.values()) >= 2
    # The keys live in the folder names only.
    assert all(pq.read_schema(path).names == ["id", "score", "vector"] for path in _parquet_files(folder))

    polars_rows, polars_schema = _polars_rows(folder)
    dataset = read_parquet_record(folder)
    rows = _rows(dataset)
    assert len(rows) == ROWS
    assert _multiset(rows) == _multiset(polars_rows)
    assert sorted(row["id"] for row in rows) == list(range(ROWS))

    source = record_source_of(dataset)
    schema = source.arrow_schema
    # The files' own columns: the Arrow types Polars wrote, which Polars reads back as the dtypes it had.
    written = pq.read_schema(_parquet_files(folder)[0])
    for name in ("id", "score", "vector"):
        assert schema.field(name).type == written.field(name).type, name
        assert polars.from_arrow(pa.nulls(0, schema.field(name).type)).dtype == polars_schema[name], name
    # The partition fields: Polars infers its own types for them (Int64 for the years); tinax types them
    # as pyarrow's discovery does, which is what these assertions hold it to.
    discovered = ds.dataset(folder, format="parquet", partitioning="hive").schema
    assert schema.field("year").type == discovered.field("year").type == pa.int32()
    assert schema.field("lang").type == discovered.field("lang").type == pa.string()
    assert polars_schema["year"].is_integer()
    assert polars_schema["lang"] == polars.String
    assert sorted(source.arrow_schema.names) == sorted(polars_schema.names())

    # In order, the rows are those of the files in name order, each with its folders' values.
    assert source.file_set == _expected_files(folder, _parquet_files(folder))
    in_order = []
    for name, _, _ in source.file_set:
        year, lang = (part.partition("=")[2] for part in name.split("/")[:2])
        file_rows = pq.ParquetFile(folder / name).read().to_pylist()
        in_order.extend({**row, "year": int(year), "lang": lang} for row in file_rows)
    assert rows == in_order
    numpy_rows = _rows(read_parquet_record(folder, mapping="numpy"))
    by_id = {row["id"]: row for row in polars_rows}
    for row in numpy_rows:
        assert type(row["vector"]) is np.ndarray
        assert row["vector"].dtype == np.float64
        assert row["vector"].tolist() == by_id[row["id"]]["vector"]
        assert (row["year"], row["lang"]) == (by_id[row["id"]]["year"], by_id[row["id"]]["lang"])


def test_polars_default_partitioned_write_reads_the_keys_from_the_files(tmp_path):
    folder = tmp_path / "polars"
    polars.from_arrow(_table(12)).write_parquet(str(folder), partition_by=["year", "lang"])
    # Polars writes the keys into the files too, as Int64 and large strings.
    assert all({"year", "lang"} <= set(pq.read_schema(path).names) for path in _parquet_files(folder)), (
        "this Polars left the keys out of the files"
    )
    polars_rows = _polars_rows(folder)[0]
    dataset = read_parquet_record(folder)
    rows = _rows(dataset)
    # The folders add no field: the files' own columns give the keys, of the files' types.
    assert _multiset(rows) == _multiset(polars_rows)
    assert sorted(row["id"] for row in rows) == list(range(12))
    schema = record_source_of(dataset).arrow_schema
    assert schema.field("year").type == pq.read_schema(_parquet_files(folder)[0]).field("year").type
    assert schema.names.count("year") == 1


# DuckDB


def test_a_hive_folder_duckdb_wrote_holds_the_rows_duckdb_reads(tmp_path):
    folder = tmp_path / "duckdb"
    _write_with_duckdb(folder)
    counts = _in_partition_folders(folder)
    assert len(counts) == len(YEARS) * len(LANGS)
    assert set(counts.values()) == {2}  # The first COPY's file and the appended one.

    duck_rows, columns, types = _duckdb_rows(folder)
    dataset = read_parquet_record(folder)
    rows = _rows(dataset)
    assert _multiset(rows) == _multiset(duck_rows)
    assert sorted(row["id"] for row in rows) == list(range(ROWS))

    schema = record_source_of(dataset).arrow_schema
    assert sorted(schema.names) == sorted(columns)
    duck_types = dict(zip(columns, types, strict=True))
    assert duck_types["year"] == "BIGINT"  # DuckDB's own inference; tinax follows pyarrow's.
    discovered = ds.dataset(folder, format="parquet", partitioning="hive").schema
    assert schema.field("year").type == discovered.field("year").type == pa.int32()
    assert schema.field("lang").type == discovered.field("lang").type == pa.string()
    assert schema.field("id").type == pa.int64()
    assert duck_types["id"] == "BIGINT"
    assert schema.field("score").type == pa.float64()
    assert duck_types["score"] == "DOUBLE"
    assert pa.types.is_list(schema.field("vector").type)
    assert schema.field("vector").type.value_type == pa.float64()
    assert duck_types["vector"] == "DOUBLE[]"
    # In order, the rows are pyarrow's, which also sorts the files by path.
    assert rows == ds.dataset(folder, format="parquet", partitioning="hive").to_table().to_pylist()


# Partition values that need escaping, and missing ones


def _escaped_table() -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(6), pa.int64()),
            "tag": pa.array(["a b", "c/d", "é", None, "x=y", "%41"], pa.string()),
        }
    )


def _escaped_with(engine: str, folder: Path) -> list[dict[str, Any]]:
    """Writes the escaped table partitioned by ``tag`` with ``engine``, and gives the rows that engine reads."""
    table = _escaped_table()
    if engine == "pyarrow":
        ds.write_dataset(table, folder, format="parquet", partitioning=["tag"], partitioning_flavor="hive")
        return ds.dataset(folder, format="parquet", partitioning="hive").to_table().to_pylist()
    if engine == "polars":
        frame = polars.from_arrow(table)
        frame.lazy().sink_parquet(polars.PartitionBy(str(folder), key="tag", include_key=False))
        return _polars_rows(folder)[0]
    connection = duckdb.connect()
    connection.register("escaped", table)
    connection.execute(f"COPY (SELECT * FROM escaped) TO '{folder}' (FORMAT PARQUET, PARTITION_BY (tag))")
    connection.close()
    return _duckdb_rows(folder)[0]


@pytest.mark.parametrize("engine", ["pyarrow", "polars", "duckdb"])
def test_escaped_and_missing_partition_values_read_as_the_engine_reads_them(tmp_path, engine):
    folder = tmp_path / engine
    engine_rows = _escaped_with(engine, folder)
    # Every engine escapes the folder names, and writes a missing value as hive's default partition.
    folders = sorted(path.name for path in folder.iterdir())
    assert "tag=__HIVE_DEFAULT_PARTITION__" in folders
    assert "tag=c%2Fd" in folders
    rows = _rows(read_parquet_record(folder))
    assert _multiset(rows) == _multiset(engine_rows)
    assert sorted((row["id"], row["tag"]) for row in rows) == [
        (index, tag) for index, tag in enumerate(_escaped_table()["tag"].to_pylist())
    ]


# A Hugging Face dataset repository


def _hugging_face_repository(root: Path) -> tuple[list[Path], list[pa.Table]]:
    """``data/train-0000k-of-00004.parquet`` shards of rows of several row groups, a test shard and a card."""
    data = root / "data"
    data.mkdir(parents=True)
    (root / "README.md").write_text("---\nconfigs:\n- config_name: default\n---\n")
    sizes = (9, 4, 11, 6)
    tables, paths, start = [], [], 0
    for index, size in enumerate(sizes):
        ids = list(range(start, start + size))
        start += size
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "text": pa.array([f"row {i}" for i in ids]),
                "input_ids": pa.array([list(range(i % 5)) for i in ids], pa.list_(pa.int32())),
                "embedding": pa.array([[i, i + 0.5, -1.0] for i in ids], pa.list_(pa.float32())),
            }
        )
        path = data / f"train-{index:05d}-of-{len(sizes):05d}.parquet"
        pq.write_table(table, path, row_group_size=3)
        tables.append(table)
        paths.append(path)
    # Written last, and sorting before the train shards.
    test_table = pa.table(
        {
            "id": pa.array([1000, 1001], pa.int64()),
            "text": ["held out", "also held out"],
            "input_ids": pa.array([[7], []], pa.list_(pa.int32())),
            "embedding": pa.array([[0.0, 0.0, 0.0]] * 2, pa.list_(pa.float32())),
        }
    )
    pq.write_table(test_table, data / "test-00000-of-00001.parquet")
    return paths, [*tables, test_table]


def test_a_hugging_face_style_folder_reads_by_pattern_in_shard_order(tmp_path):
    paths, tables = _hugging_face_repository(tmp_path)
    train_tables = tables[:-1]
    assert all(pq.ParquetFile(path).num_row_groups >= 2 for path in paths)
    expected = pa.concat_tables(train_tables).to_pylist()

    dataset = read_parquet_record(str(tmp_path / "data" / "train-*.parquet"))
    assert _rows(dataset) == expected
    source = record_source_of(dataset)
    assert source.file_set == _expected_files(tmp_path / "data", paths)
    assert [entry[0] for entry in source.file_set] == [f"train-{index:05d}-of-00004.parquet" for index in range(4)]
    # A recursive pattern is rooted above the data folder, and the list's root is the data folder.
    recursive = read_parquet_record(str(tmp_path / "**" / "train-*.parquet"))
    assert _rows(recursive) == expected
    assert record_source_of(recursive).file_set[0][0] == "data/train-00000-of-00004.parquet"
    assert _rows(read_parquet_record(paths[::-1])) == expected

    # The folder holds the test shard too: it sorts first.
    whole = read_parquet_record(tmp_path / "data")
    assert _rows(whole) == tables[-1].to_pylist() + expected
    assert record_source_of(whole).file_set[0][0] == "test-00000-of-00001.parquet"
    # The repository's root holds its card, which is not Parquet: the folder is not a dataset.
    with pytest.raises(ValueError, match="README.md"):
        read_parquet_record(tmp_path)


def test_a_hugging_face_style_folder_gives_arrays_for_list_columns_under_numpy(tmp_path):
    paths, tables = _hugging_face_repository(tmp_path)
    expected = pa.concat_tables(tables[:-1]).to_pylist()
    dataset = read_parquet_record(str(tmp_path / "data" / "train-*.parquet"), mapping="numpy")
    assert record_source_of(dataset).file_set == _expected_files(tmp_path / "data", paths)
    rows = _rows(dataset)
    assert len(rows) == len(expected) == 30
    for row, reference in zip(rows, expected, strict=True):
        assert row["id"] == reference["id"]
        assert row["text"] == reference["text"]
        for name, dtype in (("input_ids", np.int32), ("embedding", np.float32)):
            assert type(row[name]) is np.ndarray, name
            assert row[name].dtype == dtype, name
            assert row[name].tolist() == reference[name], name
    # Empty lists are arrays of no element.
    assert rows[0]["input_ids"].shape == (0,)
    assert rows[5]["embedding"].shape == (3,)


# A Spark job's output folder


def _spark_output(folder: Path) -> list[Path]:
    """Parts named as Spark names them, with the checksums, markers and scratch files a Spark job leaves."""
    folder.mkdir()
    job = uuid.UUID(int=12345)
    parts = []
    for index, size in enumerate((5, 3, 8)):
        table = pa.table({"id": pa.array(range(index * 10, index * 10 + size), pa.int64()), "part": [index] * size})
        name = f"part-{index:05d}-{job}-c000.snappy.parquet"
        pq.write_table(table, folder / name, compression="snappy", row_group_size=2)
        # Hadoop's checksum of each part sits beside it, hidden.
        (folder / f".{name}.crc").write_bytes(b"crc\x00\x00\x00\x01\x02\x03")
        parts.append(folder / name)
    (folder / "_SUCCESS").write_bytes(b"")
    (folder / "._SUCCESS.crc").write_bytes(b"crc\x00")
    # Databricks' transaction markers, and a summary file pyarrow's writers leave.
    (folder / "_started_4242").write_bytes(b"")
    (folder / "_committed_4242").write_text('{"added":[],"removed":[]}')
    pq.write_metadata(pq.read_schema(parts[0]), folder / "_common_metadata")
    # An attempt's scratch folder: a Parquet file of rows not committed.
    scratch = folder / "_temporary" / "0" / "_temporary" / "attempt_0"
    scratch.mkdir(parents=True)
    pq.write_table(pa.table({"id": [999], "part": [9]}), scratch / "part-00000.snappy.parquet")
    return parts


def test_a_spark_style_folder_reads_its_parts_and_ignores_side_files(tmp_path):
    folder = tmp_path / "spark"
    parts = _spark_output(folder)
    expected = pa.concat_tables([pq.read_table(path) for path in parts]).to_pylist()
    dataset = read_parquet_record(folder)
    assert _rows(dataset) == expected
    assert [row["id"] for row in _rows(dataset)] == [0, 1, 2, 3, 4, 10, 11, 12, 20, 21, 22, 23, 24, 25, 26, 27]
    assert record_source_of(dataset).file_set == _expected_files(folder, parts)
    # pyarrow's discovery ignores the same files.
    assert _rows(dataset) == ds.dataset(folder, format="parquet").to_table().to_pylist()
    numpy_rows = _rows(read_parquet_record(folder, mapping="numpy"))
    assert [row["part"] for row in numpy_rows] == [row["part"] for row in expected]


# Pipelines across shards over the engines' folders


def _pipeline(dataset: grain.MapDataset, shard: int) -> grain.MapDataset:
    return training_batches(
        dataset,
        shard_options=ShardOptions(shard, 2, drop_remainder=True),
        seed=1,
        shuffle=True,
        num_epochs=1,
        batch_size=4,
        batch_fn=stack_records,
    )


@pytest.mark.parametrize("engine", sorted(WRITERS))
def test_two_shards_read_every_row_of_an_engines_folder_once_and_states_list_its_files(tmp_path, engine):
    folder = tmp_path / engine
    WRITERS[engine](folder)
    dataset = read_parquet_record(folder)
    files = _expected_files(folder, _parquet_files(folder))
    by_id = {row["id"]: row for row in _rows(dataset)}
    assert sorted(by_id) == list(range(ROWS))

    seen: list[int] = []
    for shard in range(2):
        iterator = iter(_pipeline(dataset, shard))
        batch = next(iterator)
        state = json.loads(json.dumps(iterator.get_state()))
        assert state["tinax_pipeline"]["files"] == files
        rest = list(iterator)
        for found in [batch, *rest]:
            ids = found["id"].tolist()
            seen.extend(ids)
            # The batch is the stacking of its rows, partition fields included.
            reference = stack_records([by_id[index] for index in ids])
            assert list(found) == list(reference)
            for name, array in reference.items():
                assert found[name].dtype == array.dtype, name
                np.testing.assert_array_equal(found[name], array)
        # Restored from the JSON state over the same folder, the pipeline goes on where it stopped.
        resumed = iter(_pipeline(read_parquet_record(folder), shard))
        resumed.set_state(state)
        assert [found["id"].tolist() for found in resumed] == [found["id"].tolist() for found in rest]
    assert sorted(seen) == list(range(ROWS))
