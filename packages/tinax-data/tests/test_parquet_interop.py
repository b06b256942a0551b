"""Parquet both ways with the tools users have: pyarrow, pandas, Polars and DuckDB.

Files written by each tool read through ``read_parquet_record`` under both
mappings; files ``write_parquet_record`` writes read as numbers in each tool.
Also here: the writers' ``overwrite``, ``read_array_record``'s ``decode``,
the column-only ``split_by_column`` and the window shuffle of
``training_batches``.
"""

from __future__ import annotations

import datetime
import decimal
import pickle
import threading
from typing import Any

import grain
import ml_dtypes
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from grain.sharding import ShardOptions

from tinax._data._records._arrow_values import ArrayColumn
from tinax.data import (
    InMemorySource,
    evaluation_batches,
    read_array_record,
    read_parquet_record,
    split_by_column,
    training_batches,
    write_array_record,
    write_parquet_record,
)

pandas = pytest.importorskip("pandas")
polars = pytest.importorskip("polars")
duckdb = pytest.importorskip("duckdb")


def _source(dataset: grain.MapDataset) -> Any:
    return dataset._source


def _types_table() -> pa.Table:
    tensor_type = pa.fixed_shape_tensor(pa.float32(), [2, 2])
    tensors = pa.ExtensionArray.from_storage(
        tensor_type, pa.FixedSizeListArray.from_arrays(pa.array(np.arange(24, dtype=np.float32)), 4)
    )
    return pa.table(
        {
            "int8": pa.array([1, -2, None, 4, 5, 6], pa.int8()),
            "uint64": pa.array([2**64 - 1, 0, 1, 2, 3, 4], pa.uint64()),
            "float32": pa.array([1.5, None, -0.0, np.inf, 3.25, 0.1], pa.float32()),
            "bool": pa.array([True, False, None, True, True, False]),
            "string": pa.array(["a", "é", None, "", "d", "e"]),
            "large_string": pa.array(["a", "b", "c", "d", "e", "f"], pa.large_string()),
            "dictionary": pa.array(["x", "y", "x", None, "z", "x"]).dictionary_encode(),
            "binary": pa.array([b"\x00", b"", None, b"abc", b"d", b"e"], pa.binary()),
            "timestamp": pa.array([1, 2, 3, 4, 5, None], pa.timestamp("ms", tz="UTC")),
            "date": pa.array([0, 1, 2, 3, 4, 18000], pa.date32()),
            "decimal": pa.array([decimal.Decimal("1.25")] * 5 + [None], pa.decimal128(5, 2)),
            "list": pa.array([[1.0], [], [2.0, 3.0], [4.0], [5.0], [6.0]], pa.list_(pa.float64())),
            "large_list": pa.array([[1], [2, 3], [], [4], [5], [6]], pa.large_list(pa.int16())),
            "fixed_list": pa.array([[1, 2], [3, 4], [5, 6], [7, 8], [9, 10], [11, 12]], pa.list_(pa.int32(), 2)),
            "nested": pa.array([[[1, 2], [3, 4]], [[5, 6]], [], [[7], [8]], [[9]], [[0, 0]]]),
            "tensor": tensors,
            "struct": pa.array([{"p": 1, "q": "a"}] * 5 + [None], pa.struct([("p", pa.int16()), ("q", pa.string())])),
            "strings": pa.array([["a"], [], ["b", "c"], ["d"], [], ["e"]]),
            "null": pa.nulls(6),
        }
    )


@pytest.mark.parametrize(("row_group_size", "compression"), [(2, "snappy"), (4, "zstd"), (6, "gzip"), (1, "none")])
def test_the_python_mapping_is_pyarrows_to_pylist_for_every_type(tmp_path, row_group_size, compression):
    table = _types_table()
    path = tmp_path / "types.parquet"
    pq.write_table(table, path, row_group_size=row_group_size, compression=compression)
    dataset = read_parquet_record(path)
    expected = table.to_pylist()
    assert [dataset[index] for index in range(len(dataset))] == expected
    # The batched read grain's batch uses gives the same rows, in any order.
    order = [5, 0, 3, 3, 1]
    assert _source(dataset)._getitems(order) == [expected[index] for index in order]


def test_the_numpy_mapping_gives_arrays_of_their_exact_shape(tmp_path):
    table = _types_table()
    path = tmp_path / "types.parquet"
    pq.write_table(table, path, row_group_size=4)
    dataset = read_parquet_record(path, mapping="numpy")
    pylist = table.to_pylist()
    for index in range(len(table)):
        row = dataset[index]
        assert list(row) == table.column_names
        for name in ("int8", "uint64", "bool", "string", "dictionary", "binary", "timestamp", "date", "decimal"):
            assert row[name] == pylist[index][name], name
        assert row["strings"] == pylist[index]["strings"]
        assert row["null"] is None
        for name, dtype in (("list", np.float64), ("large_list", np.int16), ("fixed_list", np.int32)):
            assert type(row[name]) is np.ndarray, name
            assert row[name].dtype == dtype, name
            assert row[name].tolist() == pylist[index][name], name
            assert row[name].flags.owndata
            assert row[name].flags.writeable
        nested = pylist[index]["nested"]
        assert row["nested"].shape == ((len(nested), len(nested[0])) if nested else (0, 0))
        assert row["nested"].tolist() == nested
        assert row["tensor"].shape == (2, 2)
        assert row["tensor"].dtype == np.float32
        np.testing.assert_array_equal(row["tensor"], np.arange(index * 4, index * 4 + 4).reshape(2, 2))
    assert dataset[0]["struct"] == {"p": 1, "q": "a"}
    assert dataset[5]["struct"] is None
    # Missing scalars are None, under both mappings.
    assert dataset[2]["int8"] is None
    assert dataset[1]["float32"] is None


def test_nested_lists_keep_their_shape(tmp_path):
    path = tmp_path / "nested.parquet"
    table = pa.table({"grid": pa.array([[[1, 2, 3], [4, 5, 6]], [[7, 8, 9]]], pa.list_(pa.list_(pa.uint8())))})
    pq.write_table(table, path)
    first, second = read_parquet_record(path, mapping="numpy")
    assert first["grid"].shape == (2, 3)
    assert first["grid"].dtype == np.uint8
    assert second["grid"].tolist() == [[7, 8, 9]]


@pytest.mark.parametrize(
    ("column", "row", "reason"),
    [
        (pa.array([[1.0], None, [2.0]], pa.list_(pa.float32())), 1, "a missing value"),
        (pa.array([[1.0], [2.0, None], [2.0]], pa.list_(pa.float32())), 1, "a missing value inside the array"),
        (pa.array([[[1], [2]], [[1, 2], [3]], [[4]]]), 1, "nested lists that are not rectangular"),
    ],
    ids=["missing_list", "missing_element", "ragged"],
)
def test_a_missing_array_value_is_a_value_error_naming_column_and_row(tmp_path, column, row, reason):
    path = tmp_path / "holes.parquet"
    pq.write_table(pa.table({"id": pa.array([0, 1, 2]), "values": column}), path)
    dataset = read_parquet_record(path, mapping="numpy")
    assert dataset[0]["id"] == 0
    assert dataset[2]["id"] == 2
    with pytest.raises(ValueError, match=rf"'{path}': record {row} is malformed \(column 'values': .*{reason}"):
        dataset[row]
    # The python mapping gives pyarrow's values, None included.
    assert read_parquet_record(path)[row] == pa.table({"id": [0, 1, 2], "values": column}).to_pylist()[row]


@pytest.mark.parametrize(
    ("column", "row", "reason"),
    [
        (pa.array([[[1, 2], [3, 4]], [[1, 2], [3, 4, 5]], [[6, 7], [8, 9]]]), 1, "not rectangular"),
        (pa.array([[1.0, 2.0], [3.0, None], [4.0, 5.0]], pa.list_(pa.float32())), 1, "a missing value inside"),
        (pa.array([[[1, 2]], [[3, 4]], [None]]), 2, "a missing value inside the array"),
    ],
    ids=["ragged_inside", "missing_element", "missing_inner_list"],
)
def test_a_flaw_below_levels_of_one_extent_is_found_in_its_row(tmp_path, column, row, reason):
    # Every row has the same extents down to the flaw: the reader's shortcut for such columns must still see it.
    path = tmp_path / "flaw.parquet"
    pq.write_table(pa.table({"id": pa.array([0, 1, 2]), "values": column}), path)
    dataset = read_parquet_record(path, mapping="numpy")
    for good in {0, 1, 2} - {row}:
        assert dataset[good]["values"].tolist() == column[good].as_py()
    with pytest.raises(ValueError, match=rf"'{path}': record {row} is malformed \(column 'values': .*{reason}"):
        dataset[row]


@pytest.mark.parametrize("fixed_size", [False, True], ids=["lists", "fixed_size_lists"])
@pytest.mark.parametrize("sliced", [False, True], ids=["whole", "sliced"])
def test_a_column_of_one_shape_is_held_as_one_block_of_its_values(fixed_size, sliced):
    values = np.arange(5 * 3 * 2, dtype=np.float32).reshape(5, 3, 2)
    inner = pa.list_(pa.float32(), 2) if fixed_size else pa.list_(pa.float32())
    column = pa.array(values.tolist(), pa.list_(inner, 3) if fixed_size else pa.list_(inner))
    if sliced:
        column, values = column.slice(1, 3), values[1:4]
    arrays = ArrayColumn(column, ndim=2)
    assert not arrays.bad_rows
    np.testing.assert_array_equal(arrays.stacked(slice(0, len(values))), values)
    assert all(np.array_equal(arrays.get(row), values[row]) for row in range(len(values)))
    with pytest.raises(ValueError, match="arrays of 2 dimensions, not 3"):
        ArrayColumn(column, ndim=3)


def test_a_sliced_column_of_one_shape_reads_beside_ragged_neighbours():
    column = pa.array([[[1, 2, 3]], [[4, 5], [6, 7]], [[8, 9], [10, 11]], [[12]]])
    arrays = ArrayColumn(column.slice(1, 2))
    assert not arrays.bad_rows
    assert [arrays.get(row).tolist() for row in range(2)] == [[[4, 5], [6, 7]], [[8, 9], [10, 11]]]


@pytest.mark.parametrize(
    "column",
    [
        pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int64())),
        pa.ExtensionArray.from_storage(pa.uuid(), pa.array([b"0" * 16, b"1" * 16], pa.binary(16))),
    ],
    ids=["map", "uuid_extension"],
)
def test_types_without_a_numpy_mapping_are_refused_naming_column_and_type(tmp_path, column):
    path = tmp_path / "unmapped.parquet"
    try:
        pq.write_table(pa.table({"id": [1, 2], "odd": column}), path)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        pytest.skip("this pyarrow cannot write the type to Parquet")
    arrow_type = pq.read_schema(path).field("odd").type
    with pytest.raises(ValueError, match=rf"'{path}': column 'odd' has the Arrow type") as caught:
        read_parquet_record(path, mapping="numpy")
    assert str(arrow_type) in str(caught.value)
    assert len(list(read_parquet_record(path))) == 2


def test_mapping_and_cache_bytes_are_checked(tmp_path):
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"a": [1]}), path)
    with pytest.raises(ValueError, match=r"mapping must be one of \['python', 'numpy'\], got 'arrays'"):
        read_parquet_record(path, mapping="arrays")
    with pytest.raises(TypeError, match="mapping"):
        read_parquet_record(path, mapping=1)
    with pytest.raises(ValueError, match="cache_bytes"):
        read_parquet_record(path, cache_bytes=0)
    with pytest.raises(TypeError, match="cache_bytes"):
        read_parquet_record(path, cache_bytes=True)


# ---------------------------------------------------------------------------
# Files other tools wrote


def test_files_pandas_wrote_read_with_both_mappings(tmp_path):
    frame = pandas.DataFrame(
        {
            "id": pandas.array([1, None, 3, 4], dtype="Int64"),
            "score": [0.5, 1.5, np.nan, 2.0],
            "label": pandas.Categorical(["cat", "dog", "cat", None]),
            "text": ["a", "b", None, "d"],
            "embedding": [
                np.asarray([1.0, 2.0], np.float32),
                np.asarray([3.0], np.float32),
                np.zeros(0, np.float32),
                np.ones(2, np.float32),
            ],
            "when": pandas.to_datetime(["2024-01-01", "2024-01-02", None, "2024-01-04"]),
        },
        index=pandas.Index([10, 11, 12, 13], name="key"),
    )
    for row_group_size, compression in ((2, "snappy"), (4, "zstd")):
        path = tmp_path / f"pandas_{row_group_size}.parquet"
        frame.to_parquet(path, engine="pyarrow", row_group_size=row_group_size, compression=compression)
        expected = pq.read_table(path).to_pylist()
        assert list(read_parquet_record(path)) == expected
        rows = list(read_parquet_record(path, mapping="numpy"))
        assert [row["id"] for row in rows] == [1, None, 3, 4]
        assert [row["label"] for row in rows] == ["cat", "dog", "cat", None]
        assert [row["key"] for row in rows] == [10, 11, 12, 13]
        assert rows[0]["embedding"].dtype == np.float32
        assert [row["embedding"].tolist() for row in rows] == [[1.0, 2.0], [3.0], [], [1.0, 1.0]]
        assert rows[2]["when"] is None


def test_files_polars_wrote_read_with_both_mappings(tmp_path):
    frame = polars.DataFrame(
        {
            "id": polars.Series([1, 2, 3, None], dtype=polars.Int32),
            "tokens": polars.Series([[1, 2], [3], [], [4, 5, 6]], dtype=polars.List(polars.Int64)),
            "pixels": polars.Series([[[1, 2], [3, 4]]] * 4, dtype=polars.Array(polars.UInt8, (2, 2))),
            "kind": polars.Series(["a", "b", "a", "c"], dtype=polars.Categorical),
            "point": [{"x": 1.0, "y": 2.0}, {"x": 3.0, "y": None}, None, {"x": 0.0, "y": 0.0}],
        }
    )
    for row_group_size, compression in ((1, "lz4"), (3, "zstd"), (4, "uncompressed")):
        path = tmp_path / f"polars_{row_group_size}.parquet"
        frame.write_parquet(path, row_group_size=row_group_size, compression=compression)
        assert list(read_parquet_record(path)) == pq.read_table(path).to_pylist()
        rows = list(read_parquet_record(path, mapping="numpy"))
        assert [row["id"] for row in rows] == [1, 2, 3, None]
        assert [row["tokens"].tolist() for row in rows] == [[1, 2], [3], [], [4, 5, 6]]
        assert rows[0]["tokens"].dtype == np.int64
        assert rows[1]["pixels"].shape == (2, 2)
        assert rows[1]["pixels"].dtype == np.uint8
        assert [row["kind"] for row in rows] == ["a", "b", "a", "c"]
        assert rows[1]["point"] == {"x": 3.0, "y": None}
        assert rows[2]["point"] is None


def test_files_duckdb_wrote_read_with_both_mappings(tmp_path):
    path = tmp_path / "duck.parquet"
    connection = duckdb.connect()
    connection.execute(
        f"""
        COPY (
            SELECT i AS id,
                   [i, i + 1, i + 2]::FLOAT[] AS vector,
                   [[i, i], [i, i]]::INTEGER[][] AS grid,
                   CASE WHEN i % 3 = 0 THEN NULL ELSE 'r' || i END AS name,
                   {{'a': i, 'b': 'x'}} AS info,
                   (i / 4)::DECIMAL(9, 2) AS amount,
                   DATE '2024-01-01' + i::INTEGER AS day
            FROM range(10) t(i)
        ) TO '{path}' (FORMAT PARQUET, ROW_GROUP_SIZE 4, COMPRESSION zstd)
        """
    )
    connection.close()
    assert list(read_parquet_record(path)) == pq.read_table(path).to_pylist()
    rows = list(read_parquet_record(path, mapping="numpy"))
    assert [row["id"] for row in rows] == list(range(10))
    assert rows[2]["vector"].dtype == np.float32
    assert rows[2]["vector"].tolist() == [2.0, 3.0, 4.0]
    assert rows[3]["grid"].shape == (2, 2)
    assert rows[3]["name"] is None
    assert rows[4]["info"] == {"a": 4, "b": "x"}
    assert rows[4]["amount"] == decimal.Decimal("1.00")
    assert rows[1]["day"] == datetime.date(2024, 1, 2)


# ---------------------------------------------------------------------------
# Files tinax writes, read by the other tools


def _tinax_records() -> list[dict[str, Any]]:
    return [
        {
            "id": index,
            "label": f"l{index}",
            "x": np.arange(6, dtype=np.float32).reshape(2, 3) + index,
            "tokens": np.arange(index + 1, dtype=np.int32),
            "brain": np.asarray([index, 0.5], dtype=ml_dtypes.bfloat16),
        }
        for index in range(5)
    ]


def test_other_tools_read_the_numbers_tinax_writes(tmp_path):
    path = tmp_path / "tinax.parquet"
    records = _tinax_records()
    write_parquet_record(path, records)

    frame = pandas.read_parquet(path)
    assert frame["id"].tolist() == list(range(5))
    assert frame["label"].tolist() == [f"l{index}" for index in range(5)]
    assert [np.asarray(value).reshape(2, 3).tolist() for value in frame["x"]] == [r["x"].tolist() for r in records]
    assert [list(value) for value in frame["tokens"]] == [r["tokens"].tolist() for r in records]

    table = polars.read_parquet(path)
    assert table["id"].to_list() == list(range(5))
    assert table["tokens"].to_list() == [r["tokens"].tolist() for r in records]
    # bfloat16 has no Arrow type: the other tools see its raw bits, as uint16.
    assert table["brain"].to_list()[1] == records[1]["brain"].view(np.uint16).tolist()

    connection = duckdb.connect()
    found = connection.execute(f"SELECT id, tokens, x FROM '{path}' ORDER BY id").fetchall()
    connection.close()
    assert [row[0] for row in found] == list(range(5))
    assert [row[1] for row in found] == [r["tokens"].tolist() for r in records]
    assert [row[2] for row in found] == [r["x"].reshape(-1).tolist() for r in records]
    assert pq.read_schema(path).field("brain").metadata == {b"tinax.dtype": b"bfloat16"}


def test_tinax_reads_its_files_back_exactly_after_the_format_change(tmp_path):
    path = tmp_path / "tinax.parquet"
    records = _tinax_records()
    write_parquet_record(path, records)
    for read, written in zip(read_parquet_record(path, mapping="numpy"), records, strict=True):
        assert list(read) == list(written)
        for name, value in written.items():
            if isinstance(value, np.ndarray):
                assert read[name].dtype == value.dtype
                assert read[name].shape == value.shape
                assert read[name].tobytes() == value.tobytes()
            else:
                assert read[name] == value


# ---------------------------------------------------------------------------
# overwrite


@pytest.mark.parametrize("kind", ["parquet", "array_record"])
def test_writers_replace_a_file_unless_overwrite_is_false(tmp_path, kind):
    write = write_parquet_record if kind == "parquet" else write_array_record
    read = read_parquet_record if kind == "parquet" else read_array_record
    path = tmp_path / f"data.{kind}"
    write(path, [{"a": 1}])
    # As in tinax 0.2, the default replaces the file.
    write(path, [{"a": 2}])
    assert [row["a"] for row in read(path)] == [2]
    with pytest.raises(FileExistsError):
        write(path, [{"a": 3}], overwrite=False)
    assert [row["a"] for row in read(path)] == [2]
    write(path, [{"a": 2}, {"a": 3}], overwrite=True)
    assert [row["a"] for row in read(path)] == [2, 3]
    # Files in the tinax format (a 2-d array, which tinax 0.2 could not write) honour it too.
    write(path, [{"a": np.zeros((1, 2))}])
    assert read(path)[0]["a"].shape == (1, 2)
    with pytest.raises(FileExistsError):
        write(path, [{"a": np.ones((1, 2))}], overwrite=False)
    assert read(path)[0]["a"].tolist() == [[0.0, 0.0]]
    with pytest.raises(TypeError, match="overwrite must be a bool"):
        write(path, [{"a": 1}], overwrite=1)


# ---------------------------------------------------------------------------
# ArrayRecord files of other encodings


def _foreign_array_record(path, payloads: list[bytes]) -> None:
    from array_record.python.array_record_module import ArrayRecordWriter

    writer = ArrayRecordWriter(str(path), "group_size:1")
    for payload in payloads:
        writer.write(payload)
    writer.close()


def decode_pair(data: bytes) -> dict[str, Any]:
    return {"first": data[0], "rest": data[1:]}


def test_array_record_files_of_other_encodings_read_with_decode(tmp_path):
    path = tmp_path / "foreign.array_record"
    _foreign_array_record(path, [b"\x01ab", b"\x02cd", b"\x03"])
    dataset = read_array_record(path)
    with pytest.raises(ValueError, match=rf"'{path}': record 0 is neither a tinax record nor JSON.*pass decode="):
        dataset[0]
    decoded = read_array_record(path, decode=decode_pair)
    assert list(decoded) == [{"first": 1, "rest": b"ab"}, {"first": 2, "rest": b"cd"}, {"first": 3, "rest": b""}]
    failing = read_array_record(path, decode=lambda data: data[5])
    with pytest.raises(ValueError, match=rf"'{path}': record 0 cannot be decoded by decode") as caught:
        failing[0]
    assert isinstance(caught.value.__cause__, IndexError)
    with pytest.raises(TypeError, match="decode"):
        read_array_record(path, decode="json")
    # A tinax file ignores decode: its records are exact.
    tinax_path = tmp_path / "tinax.array_record"
    write_array_record(tinax_path, [{"x": np.arange(3)}])
    assert read_array_record(tinax_path, decode=decode_pair)[0]["x"].tolist() == [0, 1, 2]


# ---------------------------------------------------------------------------
# split_by_column reads its column only


def test_split_by_column_of_a_parquet_file_reads_only_its_column(tmp_path):
    path = tmp_path / "split.parquet"
    records = [{"id": index, "split": "train" if index % 3 else "test", "x": np.full(4, index)} for index in range(50)]
    write_parquet_record(path, records)
    dataset = read_parquet_record(path)
    train, test = split_by_column(dataset, "split")
    # No row was decoded: only the split column was read.
    assert len(_source(dataset)._cache) == 0
    assert [row["id"] for row in train] == [index for index in range(50) if index % 3]
    assert [row["id"] for row in test] == list(range(0, 50, 3))
    rows = split_by_column(grain.MapDataset.source(records), "split")
    assert [row["id"] for row in rows[0]] == [row["id"] for row in train]
    assert "split" not in train[0]
    with pytest.raises(ValueError, match=r"dataset\[1\]\['id'\] must be 0 .* or 2 .*, got 1"):
        split_by_column(dataset, "id", values=(0, 2))


def test_split_by_column_of_a_foreign_parquet_file_gives_the_rows_values(tmp_path):
    path = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"part": pa.array(["a", "b", "a"]).dictionary_encode(), "n": [1, 2, 3]}), path)
    first, second = split_by_column(read_parquet_record(path, mapping="numpy"), "part", values=("a", "b"))
    assert [row["n"] for row in first] == [1, 3]
    assert [row["n"] for row in second] == [2]


# ---------------------------------------------------------------------------
# The window shuffle


def stack_ids(rows: list[dict[str, Any]]) -> np.ndarray:
    return np.asarray([row["id"] for row in rows])


def _window_file(tmp_path, monkeypatch, count: int = 96, group_rows: int = 8) -> Any:
    from tinax._data._records import _parquet_write

    monkeypatch.setattr(_parquet_write, "_ROW_GROUP_MAX_ROWS", group_rows)
    path = tmp_path / "window.parquet"
    # 2-d arrays: records pyarrow cannot convert, written in the tinax format in row groups of group_rows.
    write_parquet_record(path, [{"id": index, "x": np.full((1, 2), index, np.float32)} for index in range(count)])
    return read_parquet_record(path)


def _windowed(dataset, *, shard=(0, 1), seed=3, window=2, num_epochs=2, batch_size=4):
    return training_batches(
        dataset,
        shard_options=ShardOptions(shard[0], shard[1], drop_remainder=True),
        seed=seed,
        shuffle=True,
        num_epochs=num_epochs,
        batch_size=batch_size,
        batch_fn=stack_ids,
        shuffle_window=window,
    )


def test_the_window_shuffle_permutes_every_epoch_within_windows_of_row_groups(tmp_path, monkeypatch):
    dataset = _window_file(tmp_path, monkeypatch)
    batches = [batch.tolist() for batch in _windowed(dataset)]
    assert batches == [batch.tolist() for batch in _windowed(dataset)]  # Deterministic.
    first = [row for batch in batches[:24] for row in batch]
    second = [row for batch in batches[24:] for row in batch]
    assert sorted(first) == list(range(96))
    assert sorted(second) == list(range(96))
    assert first != second  # Each epoch has its own order.
    assert first != sorted(first)
    # Every run of 16 rows (a window of two 8-row groups) holds exactly two row groups.
    for epoch in (first, second):
        for start in range(0, 96, 16):
            assert len({row // 8 for row in epoch[start : start + 16]}) == 2
    assert [batch.tolist() for batch in _windowed(dataset, seed=4)] != batches


def test_the_window_shuffle_shards_and_resumes_like_the_global_one(tmp_path, monkeypatch):
    dataset = _window_file(tmp_path, monkeypatch)
    whole = [row for batch in _windowed(dataset, num_epochs=1, batch_size=6) for row in batch.tolist()]
    parts = [
        [row for batch in _windowed(dataset, shard=(index, 2), num_epochs=1, batch_size=3) for row in batch.tolist()]
        for index in range(2)
    ]
    assert parts[0] + parts[1] == whole
    iterator = iter(_windowed(dataset))
    for _ in range(7):
        next(iterator)
    state = iterator.get_state()
    following = [next(iterator).tolist() for _ in range(20)]
    resumed = iter(_windowed(dataset))
    resumed.set_state(state)
    assert [next(resumed).tolist() for _ in range(20)] == following
    global_shuffle = training_batches(
        dataset,
        shard_options=ShardOptions(0, 1, drop_remainder=True),
        seed=3,
        shuffle=True,
        num_epochs=2,
        batch_size=4,
        batch_fn=stack_ids,
    )
    with pytest.raises(ValueError, match=r"shuffle_window is 2 in the state but '<absent>' here"):
        iter(global_shuffle).set_state(state)


def test_the_window_shuffle_is_an_explicit_choice(tmp_path, monkeypatch):
    dataset = _window_file(tmp_path, monkeypatch)
    default = training_batches(
        dataset,
        shard_options=ShardOptions(0, 1, drop_remainder=True),
        seed=3,
        shuffle=True,
        num_epochs=1,
        batch_size=4,
        batch_fn=stack_ids,
    )
    grain_order = [row["id"] for row in dataset.seed(3).shuffle()]
    assert [row for batch in default for row in batch.tolist()] == grain_order
    with pytest.raises(ValueError, match="shuffle_window must be None when shuffle is False"):
        training_batches(
            dataset,
            shard_options=ShardOptions(0, 1, drop_remainder=True),
            seed=3,
            shuffle=False,
            num_epochs=1,
            batch_size=4,
            batch_fn=stack_ids,
            shuffle_window=2,
        )
    with pytest.raises(ValueError, match="shuffle_window"):
        _windowed(dataset, window=0)
    with pytest.raises(TypeError, match="shuffle_window"):
        _windowed(dataset, window=True)
    in_memory = grain.MapDataset.source(InMemorySource([{"id": index} for index in range(16)], source_id="m"))
    with pytest.raises(ValueError, match="the dataset read_parquet_record returned"):
        _windowed(in_memory)


def test_parquet_batches_are_the_batches_of_the_same_rows_in_memory(tmp_path, monkeypatch):
    dataset = _window_file(tmp_path, monkeypatch)
    rows = grain.MapDataset.source([dict(row) for row in dataset])

    def batches(data):
        return [
            batch.tolist()
            for batch in training_batches(
                data,
                shard_options=ShardOptions(1, 2, drop_remainder=True),
                seed=9,
                shuffle=True,
                num_epochs=2,
                batch_size=5,
                batch_fn=stack_ids,
            )
        ]

    assert batches(dataset) == batches(rows)


def _batches_and_threads(iterable: Any) -> tuple[list[Any], int]:
    """Every batch of ``iterable``, and how many of grain's prefetch threads its iterator started."""
    # Threads themselves, not their idents, which a new thread may reuse from one that has exited.
    before = set(threading.enumerate())
    iterator = iter(iterable)
    found = []
    started: set[threading.Thread] = set()
    for batch in iterator:
        found.append(batch.tolist())
        # Counted at every batch, while the iterator lives: once its work is done, a thread may exit.
        started.update(
            thread
            for thread in threading.enumerate()
            if thread not in before and thread.name.startswith("grain-prefetch")
        )
    iterator.close()
    return found, len(started)


def test_pipelines_over_a_parquet_file_read_with_one_thread_unless_told_otherwise(tmp_path, monkeypatch):
    dataset = _window_file(tmp_path, monkeypatch)
    options = {"batch_size": 4, "batch_fn": stack_ids}
    training = training_batches(
        dataset, shard_options=ShardOptions(0, 1, drop_remainder=True), seed=5, shuffle=True, num_epochs=2, **options
    )
    default, default_threads = _batches_and_threads(training)
    told, told_threads = _batches_and_threads(training.to_iter_dataset(grain.ReadOptions(num_threads=0)))
    # Threads change the speed only: the batches and their order are the same.
    assert default == told
    assert len(default) == 48
    assert default_threads == 1
    assert told_threads == 0
    evaluation = evaluation_batches(dataset, shard_options=ShardOptions(0, 1), **options)
    found, threads = _batches_and_threads(evaluation)
    assert threads == 1
    assert found == _batches_and_threads(evaluation.to_iter_dataset(grain.ReadOptions(num_threads=0)))[0]
    # The default travels with the pipeline when it is pickled (into worker processes).
    assert _batches_and_threads(pickle.loads(pickle.dumps(training))) == (default, 1)


class _PairedReads:
    """Rows 0 to 7, each read only while another thread reads another of them: one reading thread times out."""

    def __init__(self) -> None:
        self._meeting = threading.Barrier(2, timeout=60)

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> dict[str, Any]:
        if index < 8:
            self._meeting.wait()
        return {"id": index}


def test_pipelines_over_other_sources_keep_grains_read_options():
    # Batches 0 (rows 0-3) and 1 (rows 4-7) come out only when two threads read them at once.
    batches = training_batches(
        grain.MapDataset.source(_PairedReads()),
        shard_options=ShardOptions(0, 1, drop_remainder=True),
        seed=5,
        shuffle=False,
        num_epochs=1,
        batch_size=4,
        batch_fn=stack_ids,
    )
    assert [batch.tolist() for batch in batches] == [list(range(start, start + 4)) for start in range(0, 16, 4)]


def test_cached_row_groups_are_held_by_the_system_allocator(tmp_path):
    path = tmp_path / "cached.parquet"
    records = [{"id": index, "x": np.full((1, 4096), index, dtype=np.float32)} for index in range(64)]
    write_parquet_record(path, records)
    source = _source(read_parquet_record(path))
    system = pa.system_memory_pool()
    system_before = system.bytes_allocated()
    for index in range(64):
        assert source[index]["x"][0, 0] == index
    # pyarrow's default allocator keeps freed memory for reuse; the cache's
    # long-lived row groups are copied out of it, so evicted ones go back.
    assert system.bytes_allocated() - system_before >= source._cached_bytes > 64 * 4096 * 4
    del source
