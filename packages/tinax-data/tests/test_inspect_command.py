"""``tinax inspect`` on Parquet and ArrayRecord record files, run as a user runs it."""

from __future__ import annotations

import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tinax._core._command._testing import run_tinax
from tinax.data import write_array_record, write_parquet_record

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
    assert summary["row groups"] == len(document["tables"]["row groups"]["rows"]) >= 1
    assert summary["footer checksum"] == "verified"
    assert summary["source id"].startswith("tinax-records:")
    schema = {row["column"]: row for row in document["tables"]["schema"]["rows"]}
    assert set(schema) == {"image", "label"}
    assert "float" in schema["image"]["arrow type"]
    assert schema["image"]["tinax field"] is not None
    assert "records" not in document["tables"]
    text = run_tinax("inspect", str(parquet)).stdout
    assert "footer checksum:     verified" in text


def test_head_prints_the_first_records(parquet):
    document = run_tinax("inspect", str(parquet), "--head", "2", "--json").json()
    assert document["tables"]["records"]["rows"] == [
        {"index": 0, "record": "{'image': float32[2, 2], 'label': 0}"},
        {"index": 1, "record": "{'image': float32[2, 2], 'label': 1}"},
    ]
    assert "verified" in document["summary"]["row group checksums"]


def test_a_plain_parquet_file_is_described_without_a_header(tmp_path):
    path = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"text": ["a", "b", "c"], "score": [1.0, 2.0, 3.0]}), path, row_group_size=2)
    document = run_tinax("inspect", str(path), "--json", "--head", "1").json()
    assert document["summary"]["format"].startswith("plain Parquet")
    assert document["summary"]["records"] == 3
    assert document["tables"]["row groups"]["rows"] == [
        {"row group": 0, "first record": 0, "records": 2},
        {"row group": 1, "first record": 2, "records": 1},
    ]
    assert document["tables"]["schema"]["rows"] == [
        {"column": "text", "arrow type": "string", "tinax field": None},
        {"column": "score", "arrow type": "double", "tinax field": None},
    ]
    assert document["tables"]["records"]["rows"] == [{"index": 0, "record": "{'text': 'a', 'score': 1.0}"}]


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
    assert document["tables"]["records"]["rows"] == [{"index": 0, "record": "{'image': float32[2, 2], 'label': 0}"}]
    path.write_bytes(path.read_bytes()[:100])
    damaged = run_tinax("inspect", str(path))
    assert damaged.code == 1
    assert len(damaged.stderr.strip().splitlines()) == 1
    assert "is not a readable ArrayRecord record file" in damaged.stderr
