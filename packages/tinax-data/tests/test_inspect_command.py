"""``tinax inspect`` on Parquet and ArrayRecord record files, run as a user runs it."""

from __future__ import annotations

import builtins
import importlib
import pathlib
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tinax._data._records._arrow_values import REFUSED, value_description
from tinax._data._records._reader_datasets import record_source_of
from tinax.data import read_parquet_record, write_array_record, write_parquet_record
from tinax_testing import run_tinax

RECORDS = [{"image": np.full((2, 2), index, np.float32), "label": index} for index in range(5)]


@pytest.fixture
def parquet(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "train.records"
    write_parquet_record(path, RECORDS, overwrite=False)
    return path


def test_parquet_shows_schema_rows_header_and_checksums(parquet):
    result = run_tinax("inspect", str(parquet), "--json")
    assert result.code == 0, result.stderr
    document = result.json()
    summary = document["summary"]
    assert document["kind"] == "parquet"
    assert summary["format"] == "tinax records"
    assert summary["records"] == 5
    assert summary["row_groups"] == len(document["tables"]["row_groups"]["rows"]) >= 1
    assert summary["footer_checksum"] == "verified"
    assert summary["source_id"].startswith("tinax-records:")
    schema = {row["column"]: row for row in document["tables"]["schema"]["rows"]}
    assert set(schema) == {"image", "label"}
    assert "float" in schema["image"]["arrow_type"]
    assert schema["image"]["tinax_field"] == "a numpy.ndarray of dtype float32 with 2 dimensions"
    assert schema["image"]["value"] == "numpy.ndarray float32, shape (2, 2)"
    assert schema["label"]["value"] == "int"
    assert "whatever mapping= says" in summary["values"]
    assert "records" not in document["tables"]
    text = run_tinax("inspect", str(parquet)).stdout
    assert "footer checksum:     verified" in text
    assert re.search(r"image +extension<arrow\.fixed_shape_tensor.* numpy\.ndarray float32, shape \(2, 2\)", text)


def test_tinax_fields_show_the_headers_dtype_and_the_stored_shape(tmp_path):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    path = tmp_path / "fields.parquet"
    records = [
        {
            "tokens": np.arange(index + 1, dtype=">i4"),
            "weights": np.zeros(3, ml_dtypes.bfloat16),
            "phase": np.zeros(2, np.complex64),
            "scale": np.asarray(1.0),
            "text": "a",
            "blob": b"x",
            "nothing": None,
        }
        for index in range(3)
    ]
    write_parquet_record(path, records, overwrite=False)
    document = run_tinax("inspect", str(path), "--json").json()
    values = {row["column"]: row["value"] for row in document["tables"]["schema"]["rows"]}
    assert values == {
        "tokens": "numpy.ndarray >i4, shape (*,)",
        "weights": "numpy.ndarray bfloat16, shape (3,)",
        "phase": "numpy.ndarray complex64, shape (2,)",
        "scale": "numpy.ndarray float64, shape ()",
        "text": "str",
        "blob": "bytes",
        "nothing": "None",
    }
    # What the reader gives, under either mapping.
    for mapping in ("python", "numpy"):
        record = read_parquet_record(path, mapping=mapping)[1]
        shapes = {name: (value.dtype, value.shape) for name, value in record.items() if isinstance(value, np.ndarray)}
        assert shapes == {
            "tokens": (np.dtype(">i4"), (2,)),
            "weights": (np.dtype(ml_dtypes.bfloat16), (3,)),
            "phase": (np.dtype(np.complex64), (2,)),
            "scale": (np.dtype(np.float64), ()),
        }


def test_head_prints_the_first_records(parquet):
    document = run_tinax("inspect", str(parquet), "--head", "2", "--json").json()
    # The records' values, as JSON: arrays with their dtype and shape.
    assert document["tables"]["records"]["rows"] == [
        {
            "index": index,
            "record": {
                "image": {"type": "ndarray", "dtype": "float32", "shape": [2, 2], "values": [[float(index)] * 2] * 2},
                "label": index,
            },
        }
        for index in range(2)
    ]
    assert "verified" in document["summary"]["row_group_checksums"]
    # The text form keeps one short line per record.
    text = run_tinax("inspect", str(parquet), "--head", "2").stdout.splitlines()
    assert "      1  {'image': float32[2, 2], 'label': 1}" in text


def test_a_plain_parquet_file_is_described_without_a_header(tmp_path):
    path = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"text": ["a", "b", "c"], "score": [1.0, 2.0, 3.0]}), path, row_group_size=2)
    document = run_tinax("inspect", str(path), "--json", "--head", "1").json()
    assert document["summary"]["format"].startswith("plain Parquet")
    assert document["summary"]["records"] == 3
    assert document["tables"]["row_groups"]["rows"] == [
        {"row_group": 0, "first_record": 0, "records": 2},
        {"row_group": 1, "first_record": 2, "records": 1},
    ]
    assert document["tables"]["schema"]["rows"] == [
        {"column": "text", "arrow_type": "string", "python_mapping": "str", "numpy_mapping": "str"},
        {"column": "score", "arrow_type": "double", "python_mapping": "float", "numpy_mapping": "float"},
    ]
    assert document["summary"]["values"].startswith("as read_parquet_record(path, mapping=...) gives them")
    assert document["tables"]["records"]["rows"] == [{"index": 0, "record": {"text": "a", "score": 1.0}}]
    assert document["summary"]["footer_checksum"] == "none (not written by tinax 0.3)"
    assert "row_group_checksums" not in document["summary"]


def test_a_plain_parquet_file_tinax_wrote_shows_its_checksums_verified(tmp_path):
    path = tmp_path / "plain.parquet"
    write_parquet_record(path, [{"text": "a", "score": 1.0}, {"text": "b", "score": 2.0}])
    summary = run_tinax("inspect", str(path), "--json", "--head", "1").json()["summary"]
    assert summary["format"].startswith("plain Parquet")
    assert summary["footer_checksum"] == "verified"
    assert summary["row_group_checksums"] == "verified for the row groups of the first 1 records"
    # A damaged column name: pyarrow reads the footer, its checksum does not match.
    data = bytearray(path.read_bytes())
    data[data.index(b"score")] ^= 0x01
    path.write_bytes(bytes(data))
    result = run_tinax("inspect", str(path))
    assert result.code == 1
    assert f"{str(path)!r} is not a readable Parquet file: its footer does not match its checksum" in result.stderr


def test_a_damaged_footer_exits_1_with_the_readers_message(parquet):
    data = bytearray(parquet.read_bytes())
    footer_length = int.from_bytes(data[-8:-4], "little")
    # A byte inside the key-value metadata's checksum-covered footer.
    position = len(data) - 8 - footer_length // 2
    data[position] ^= 0xFF
    parquet.write_bytes(bytes(data))
    result = run_tinax("inspect", str(parquet))
    assert result.code == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"tinax inspect: {str(parquet)!r} is not a readable")
    assert result.stdout == ""
    # With --json: the same line and exit code, and one document saying why.
    as_json = run_tinax("inspect", str(parquet), "--json")
    assert as_json.code == 1
    assert as_json.stderr == result.stderr
    document = as_json.json()
    assert document["ok"] is False
    assert document["kind"] == "parquet"
    assert document["error"]["type"] == "unreadable"
    assert f"tinax inspect: {document['error']['message']}" == line


def test_array_record_shows_records_and_schema(tmp_path):
    pytest.importorskip("array_record")
    path = tmp_path / "train.array_record"
    write_array_record(path, RECORDS, overwrite=False)
    result = run_tinax("inspect", str(path), "--json", "--head", "1")
    assert result.code == 0, result.stderr
    document = result.json()
    assert document["kind"] == "array-record"
    assert document["summary"]["records"] == 5
    assert document["summary"]["format"] == "tinax records"
    assert [row["field"] for row in document["tables"]["schema"]["rows"]] == ["image", "label"]
    assert document["tables"]["records"]["rows"] == [
        {
            "index": 0,
            "record": {
                "image": {"type": "ndarray", "dtype": "float32", "shape": [2, 2], "values": [[0.0, 0.0], [0.0, 0.0]]},
                "label": 0,
            },
        }
    ]
    path.write_bytes(path.read_bytes()[:100])
    damaged = run_tinax("inspect", str(path))
    assert damaged.code == 1
    assert len(damaged.stderr.strip().splitlines()) == 1
    assert "is not a readable ArrayRecord record file" in damaged.stderr


def _type_named(name: str) -> type:
    """The class a description names ("int", "None", "datetime.date", "pandas.Timestamp", ...)."""
    if name == "None":
        return type(None)
    if "." in name:
        module, attribute = name.rsplit(".", 1)
        return getattr(importlib.import_module(module), attribute)  # type: ignore[no-any-return]
    return getattr(builtins, name)  # type: ignore[no-any-return]


def _assert_is(value, description, arrow_type, mapping):
    """Asserts that a value read from a column is what value_description said it would be."""
    array = re.fullmatch(r"numpy\.ndarray (\S+), shape \((.*)\)", description)
    pairs = re.fullmatch(r"list of \((.+), (.+)\) tuples", description)
    if array:
        dtype, shape = array.groups()
        extents = [extent.strip() for extent in shape.split(",") if extent.strip()]
        assert isinstance(value, np.ndarray), (value, description)
        assert str(value.dtype) == dtype
        assert value.ndim == len(extents)
        assert all(want == "*" or got == int(want) for got, want in zip(value.shape, extents, strict=True))
    elif description.startswith("dict {"):
        names = [arrow_type.field(index).name for index in range(arrow_type.num_fields)]
        assert type(value) is dict
        assert list(value) == names
        for index, name in enumerate(names):
            field_type = arrow_type.field(index).type
            _assert_is(value[name], value_description(field_type, mapping), field_type, mapping)
    elif pairs:
        assert type(value) is list
        assert value
        for key, item in value:
            assert type(key) is _type_named(pairs.group(1))
            assert type(item) is _type_named(pairs.group(2))
    elif description.startswith("flat list of "):
        assert type(value) is list
        assert value
        assert all(type(item) is _type_named(description.removeprefix("flat list of ")) for item in value)
    elif description.startswith("list of "):
        assert type(value) is list, (value, description)
        assert value
        for item in value:
            _assert_is(item, description.removeprefix("list of "), arrow_type.value_type, "python")
    else:
        assert type(value) is _type_named(description), (value, description)


def _every_type_table() -> pa.Table:
    """Two rows of a column of every Arrow type the README's mapping table lists (no missing values)."""
    import datetime
    import decimal

    tensor = pa.FixedShapeTensorArray.from_numpy_ndarray(np.arange(12, dtype=np.float32).reshape(2, 2, 3))
    day = datetime.date(2024, 5, 17)
    moment = datetime.datetime(2024, 5, 17, 12, 30)
    columns = {
        "int8": pa.array([1, -2], pa.int8()),
        "uint64": pa.array([1, 2**63], pa.uint64()),
        "float16": pa.array(np.array([1.5, 2.0], np.float16)),
        "float32": pa.array([1.5, 2.0], pa.float32()),
        "bool": pa.array([True, False]),
        "string": pa.array(["a", "bc"]),
        "large_string": pa.array(["a", "bc"], pa.large_string()),
        "dictionary": pa.array(["a", "b"]).dictionary_encode(),
        "binary": pa.array([b"a", b"bc"]),
        "large_binary": pa.array([b"a", b"bc"], pa.large_binary()),
        "fixed_size_binary": pa.array([b"ab", b"cd"], pa.binary(2)),
        "timestamp_s": pa.array([moment, moment], pa.timestamp("s")),
        "timestamp_ns": pa.array([moment, moment], pa.timestamp("ns")),
        "timestamp_utc": pa.array([moment, moment], pa.timestamp("ms", tz="UTC")),
        "date32": pa.array([day, day], pa.date32()),
        "date64": pa.array([day, day], pa.date64()),
        "time32": pa.array([datetime.time(1, 2), datetime.time(3, 4)], pa.time32("s")),
        "time64": pa.array([datetime.time(1, 2), datetime.time(3, 4)], pa.time64("us")),
        "duration": pa.array([datetime.timedelta(seconds=1), datetime.timedelta(0)], pa.duration("s")),
        "decimal128": pa.array([decimal.Decimal("1.25"), decimal.Decimal("2.50")], pa.decimal128(5, 2)),
        "decimal256": pa.array([decimal.Decimal("1.25"), decimal.Decimal("2.50")], pa.decimal256(40, 2)),
        "null": pa.nulls(2),
        "list": pa.array([[1, 2, 3], [4]], pa.list_(pa.int32())),
        "large_list": pa.array([[1.0], [2.0, 3.0]], pa.large_list(pa.float64())),
        "fixed_size_list": pa.array([[1, 2, 3], [4, 5, 6]], pa.list_(pa.int16(), 3)),
        "nested_list": pa.array([[[1.0, 2.0]], [[3.0, 4.0], [5.0, 6.0]]], pa.list_(pa.list_(pa.float32(), 2))),
        "bool_list": pa.array([[True], [False, True]], pa.list_(pa.bool_())),
        "string_list": pa.array([["a"], ["b", "c"]], pa.list_(pa.string())),
        "tensor": tensor,
        "struct": pa.array(
            [{"a": 1, "b": [1.0, 2.0]}, {"a": 2, "b": [3.0]}],
            pa.struct([("a", pa.int8()), ("b", pa.list_(pa.float32()))]),
        ),
        "struct_list": pa.array([[{"a": 1}], [{"a": 2}]], pa.list_(pa.struct([("a", pa.int64())]))),
        "map": pa.array([[("a", 1)], [("b", 2), ("c", 3)]], pa.map_(pa.string(), pa.int64())),
    }
    return pa.table(columns)


@pytest.mark.parametrize("mapping", ["python", "numpy"])
def test_value_descriptions_say_what_the_reader_gives(tmp_path, mapping):
    table = _every_type_table()
    path = tmp_path / "every_type.parquet"
    pq.write_table(table, path)
    file_schema = pq.read_schema(path)
    refused = [field.name for field in file_schema if value_description(field.type, mapping) == REFUSED]
    assert refused == (["map"] if mapping == "numpy" else [])
    for name in refused:
        alone = tmp_path / f"{name}.parquet"
        pq.write_table(table.select([name]), alone)
        with pytest.raises(ValueError, match=f"column {name!r}"):
            read_parquet_record(alone, mapping=mapping)
    readable = tmp_path / "readable.parquet"
    pq.write_table(table.drop_columns(refused), readable)
    rows = read_parquet_record(readable, mapping=mapping)
    for field in pq.read_schema(readable):
        description = value_description(field.type, mapping)
        for row in range(2):
            _assert_is(rows[row][field.name], description, field.type, mapping)
    document = run_tinax("inspect", str(path), "--json").json()
    shown = {row["column"]: row[f"{mapping}_mapping"] for row in document["tables"]["schema"]["rows"]}
    assert shown == {field.name: value_description(field.type, mapping) for field in file_schema}


def test_a_folder_or_glob_of_parquet_files_is_described_as_one_dataset(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    for index in range(3):
        write_parquet_record(folder / f"train-{index:05d}-of-00003.parquet", RECORDS[index:], overwrite=False)
    (folder / "_SUCCESS").write_bytes(b"")
    for given in (str(folder), str(folder / "train-*.parquet")):
        result = run_tinax("inspect", given, "--json")
        assert result.code == 0, result.stderr
        document = result.json()
        assert document["kind"] == "parquet"
        summary = document["summary"]
        assert (summary["files"], summary["records"]) == (3, 5 + 4 + 3)
        assert summary["format"] == "tinax records"
        assert summary["footer_checksum"] == "verified for every file"
        assert summary["source_id"] == record_source_of(read_parquet_record(folder)).source_id
        files = document["tables"]["files"]["rows"]
        assert [(row["file"], row["first_record"], row["records"]) for row in files] == [
            ("train-00000-of-00003.parquet", 0, 5),
            ("train-00001-of-00003.parquet", 5, 4),
            ("train-00002-of-00003.parquet", 9, 3),
        ]
        assert [row["bytes"] for row in files] == [(folder / row["file"]).stat().st_size for row in files]
        assert {row["column"] for row in document["tables"]["schema"]["rows"]} == {"image", "label"}


def test_a_folder_of_plain_parquet_files_shows_the_unified_schema_and_partition_fields(tmp_path):
    (tmp_path / "lang=en").mkdir()
    (tmp_path / "lang=fr").mkdir()
    pq.write_table(pa.table({"x": [1, 2]}), tmp_path / "lang=en" / "part-0.parquet")
    pq.write_table(pa.table({"x": [3], "y": ["b"]}), tmp_path / "lang=fr" / "part-0.parquet")
    result = run_tinax("inspect", str(tmp_path), "--json")
    assert result.code == 0, result.stderr
    document = result.json()
    assert document["summary"]["footer_checksum"] == "none (not written by tinax 0.3)"
    schema = [(row["column"], row["arrow_type"]) for row in document["tables"]["schema"]["rows"]]
    assert schema == [("x", "int64"), ("y", "string"), ("lang", "string")]


def test_a_folder_of_array_record_shards_is_described_as_one_dataset(tmp_path):
    pytest.importorskip("array_record.python.array_record_module")
    for index in range(2):
        write_array_record(tmp_path / f"shard.array_record-{index:05d}-of-00002", RECORDS, overwrite=False)
    result = run_tinax("inspect", str(tmp_path), "--json")
    assert result.code == 0, result.stderr
    document = result.json()
    assert document["kind"] == "array-record"
    assert (document["summary"]["files"], document["summary"]["records"]) == (2, 10)
    assert [row["records"] for row in document["tables"]["files"]["rows"]] == [5, 5]


def test_files_of_mixed_kinds_in_a_folder_exit_1_naming_them(tmp_path):
    write_parquet_record(tmp_path / "a.parquet", RECORDS, overwrite=False)
    pq.write_table(pa.table({"x": [1]}), tmp_path / "b.parquet")
    result = run_tinax("inspect", str(tmp_path))
    assert result.code == 1
    assert "'a.parquet'" in result.stderr
    assert "'b.parquet'" in result.stderr
