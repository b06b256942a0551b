"""ArrayRecord and Parquet records: exact round trips, checked writes, clear errors, Grain sources."""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import grain
import ml_dtypes
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tinax.data import read_array_record, read_parquet_record, write_array_record, write_parquet_record
from tinax_testing import parameter_summary


class Container(NamedTuple):
    name: str
    write: Callable[..., None]
    read: Callable[..., Any]
    suffix: str


def _array_record_container() -> Container:
    pytest.importorskip(
        "array_record.python.array_record_module",
        reason='array-record is not installed (the tinax-data "arrayrecord" extra)',
    )
    return Container("array_record", write_array_record, read_array_record, ".array_record")


def _parquet_container() -> Container:
    return Container("parquet", write_parquet_record, read_parquet_record, ".parquet")


@pytest.fixture(params=["array_record", "parquet"])
def container(request: pytest.FixtureRequest) -> Container:
    return _array_record_container() if request.param == "array_record" else _parquet_container()


def _source(dataset: grain.MapDataset) -> Any:
    # The data source under a MapDataset.source(...) dataset.
    return dataset._source


def _rich_records() -> list[dict[str, Any]]:
    records = []
    for index in range(5):
        records.append(
            {
                "id": index,
                "big": 2**63 - 1 - index,
                "score": [0.5, -0.0, math.inf, -math.inf, 1e-308][index],
                "flag": index % 2 == 0,
                "text": ["", "héllo", "日本語", "a\x00b", "🙂"][index],
                "raw": bytes(range(index * 3)),
                "nothing": None,
                # Extents vary from record to record; dtype and ndim do not.
                "tokens": np.arange(index, dtype=np.int32),
                "image": np.full((2, 3, index), index, dtype=np.uint8),
                "scalar": np.asarray(index * 1.25, dtype=np.float64),
                "swapped": (np.arange(3) + index).astype(">f4"),
                "halves": np.linspace(0, 1, 4, dtype=np.float16),
                "waves": (np.arange(2) + 1j * index).astype(np.complex64),
                "mask": np.asarray([index % 2 == 0, True, False]),
                "wide": np.asarray([2**64 - 1, index], dtype=np.uint64),
                "brain": np.asarray([1.5, -2.0, index], dtype=ml_dtypes.bfloat16),
                "fp8": np.asarray([0.5, index], dtype=ml_dtypes.float8_e4m3fn),
                "nibbles": np.asarray([-8, 7, index], dtype=ml_dtypes.int4),
                # A transposed (non-contiguous) input comes back with the same values.
                "transposed": np.arange(6, dtype=np.float32).reshape(2, 3).T * index,
            }
        )
    return records


def _assert_same_records(actual: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        assert type(got) is dict
        assert list(got) == list(want)
        for name, value in want.items():
            read = got[name]
            assert type(read) is type(value), name
            if isinstance(value, np.ndarray):
                assert read.dtype == value.dtype, name
                assert read.shape == value.shape, name
                assert read.tobytes() == value.tobytes(), name
            elif isinstance(value, float):
                assert read.hex() == value.hex(), name
            else:
                assert read == value, name


def test_records_round_trip_exactly(tmp_path, container):
    records = _rich_records()
    path = tmp_path / f"data{container.suffix}"
    container.write(path, records)
    dataset = container.read(path)
    assert isinstance(dataset, grain.MapDataset)
    assert len(dataset) == len(records)
    read = [dataset[index] for index in range(len(dataset))]
    _assert_same_records(read, records)
    assert read[3]["swapped"].dtype.byteorder == ">"
    for array in read[2].values():
        if isinstance(array, np.ndarray):
            # Read arrays are independent, writable and aligned: a pipeline may update them in place.
            assert array.flags.writeable
            assert array.flags.owndata
            assert array.flags.aligned
            assert array.flags.c_contiguous
    read[2]["tokens"] += 1
    assert dataset[2]["tokens"].tolist() == [0, 1]


def test_both_containers_read_back_the_same_records_and_source_id(tmp_path):
    array_record = _array_record_container()
    parquet = _parquet_container()
    records = _rich_records()
    array_record.write(tmp_path / "a.array_record", records)
    parquet.write(tmp_path / "b.parquet", records)
    from_array_record = array_record.read(tmp_path / "a.array_record")
    from_parquet = parquet.read(tmp_path / "b.parquet")
    _assert_same_records(list(from_array_record), records)
    _assert_same_records(list(from_parquet), list(from_array_record))
    assert _source(from_array_record).source_id == _source(from_parquet).source_id


def test_a_shuffled_pipeline_reads_every_record_once(tmp_path, container):
    records = [{"id": index, "x": np.full((2,), index, np.int64)} for index in range(40)]
    container.write(tmp_path / f"d{container.suffix}", records)
    dataset = container.read(tmp_path / f"d{container.suffix}")
    shuffled = dataset.shuffle(seed=3)
    order = [record["id"] for record in shuffled]
    assert sorted(order) == list(range(40))
    assert order != list(range(40))
    assert [record["id"] for record in dataset.shuffle(seed=3)] == order
    # 1-d arrays are lists in Parquet, as tinax 0.2 wrote and read them; arrays in ArrayRecord.
    assert all(np.asarray(record["x"]).tolist() == [record["id"]] * 2 for record in shuffled)
    # Grain's read threads index the source concurrently.
    threaded = list(shuffled.to_iter_dataset(grain.ReadOptions(num_threads=8, prefetch_buffer_size=16)))
    assert [record["id"] for record in threaded] == order


def test_indexing_follows_sequence_rules(tmp_path, container):
    container.write(tmp_path / f"d{container.suffix}", [{"id": index} for index in range(3)])
    source = _source(container.read(tmp_path / f"d{container.suffix}"))
    assert source[-1] == {"id": 2}
    assert source[np.int64(1)] == {"id": 1}
    with pytest.raises(IndexError, match="index 3 is out of range for 3 records"):
        source[3]
    with pytest.raises(TypeError, match=r"index must be an int, got True \(bool\)"):
        source[True]


def test_an_empty_array_record_file_round_trips_and_parquet_refuses_no_records(tmp_path):
    _array_record_container()
    path = tmp_path / "empty.array_record"
    write_array_record(path, [])
    dataset = read_array_record(path)
    assert len(dataset) == 0
    assert list(dataset) == []
    # As in tinax 0.2: a Parquet file needs at least one record.
    with pytest.raises(ValueError, match="records must be a non-empty finite sequence"):
        write_parquet_record(tmp_path / "empty.parquet", [])
    assert os.listdir(tmp_path) == [path.name]


def test_records_without_fields_round_trip_in_array_record_and_are_refused_by_parquet(tmp_path):
    _array_record_container()
    write_array_record(tmp_path / "d.array_record", [{}, {}])
    assert list(read_array_record(tmp_path / "d.array_record")) == [{}, {}]
    # tinax 0.2 wrote a Parquet file with no rows at all for them.
    with pytest.raises(ValueError, match=r"records\[0\] must be a mapping with at least one field"):
        write_parquet_record(tmp_path / "d.parquet", [{}, {}])
    assert os.listdir(tmp_path) == ["d.array_record"]


# ---------------------------------------------------------------------------
# What a record may hold


def _plain_parquet(records: list[Any]) -> dict[str, Any]:
    """What a plain Arrow table of the records reads back as, or the error pyarrow raises (tinax 0.2's Parquet)."""
    try:
        return {"rows": pa.Table.from_pylist([dict(record) for record in records]).to_pylist()}
    except Exception as error:
        return {"error": type(error)}


def _plain_json(records: list[Any]) -> dict[str, Any]:
    """What JSON records read back as, or the error json raises (tinax 0.2's ArrayRecord)."""
    try:
        return {"rows": [json.loads(json.dumps(record)) for record in records]}
    except Exception as error:
        return {"error": type(error)}


def _written_and_read(container: Container, path: Any, records: Any) -> dict[str, Any]:
    try:
        container.write(path, records)
    except Exception as error:
        return {"error": error}
    return {"rows": list(container.read(path))}


def _assert_written_as_02_wrote_them(tmp_path: Any, container: Container, records: list[Any]) -> None:
    path = tmp_path / f"d{container.suffix}"
    expected = _plain_parquet(records) if container.name == "parquet" else _plain_json(records)
    got = _written_and_read(container, path, records)
    if "error" in expected:
        assert "error" in got, f"tinax 0.2 refused these records with {expected['error']}, we accept them"
        assert isinstance(got["error"], expected["error"])
        assert os.listdir(tmp_path) == [], "a refused write leaves nothing behind"
    else:
        assert "error" not in got, got.get("error")
        assert repr(got["rows"]) == repr(expected["rows"])
        path.unlink()


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(np.float32(1.5), id="numpy-scalar"),
        pytest.param(np.float64(1.5), id="numpy-float64-scalar"),
        pytest.param(np.bool_(True), id="numpy-bool"),
        pytest.param([1, 2], id="list"),
        pytest.param((1, 2), id="tuple"),
        pytest.param(bytearray(b"ab"), id="bytearray"),
        pytest.param(np.asarray([{"a": 1}], dtype=object), id="object-array"),
        pytest.param(np.asarray(["a"]), id="str-array"),
        pytest.param(np.zeros(2, dtype=[("a", "<i4")]), id="structured-array"),
        pytest.param(np.zeros(2, dtype="datetime64[s]"), id="datetime-array"),
        pytest.param(np.ma.masked_array([1, 2], mask=[0, 1]), id="masked-array"),
        pytest.param({"nested": 1}, id="mapping"),
        pytest.param(datetime.date(2024, 2, 29), id="date"),
    ],
)
def test_values_outside_the_format_are_written_as_tinax_02_wrote_them(tmp_path, container, value):
    # Parquet: a plain Arrow table (pyarrow infers the types); ArrayRecord:
    # JSON. Either gives back what tinax 0.2 gave, or refuses with 0.2's error.
    _assert_written_as_02_wrote_them(tmp_path, container, [{"v": value}])
    _assert_written_as_02_wrote_them(tmp_path, container, [{"v": 0}, {"v": value}])


def test_a_jax_array_is_written_as_tinax_02_wrote_it(tmp_path, container):
    import jax.numpy as jnp

    _assert_written_as_02_wrote_them(tmp_path, container, [{"x": jnp.zeros(2)}])


@pytest.mark.parametrize(
    "second",
    [
        pytest.param({"id": 1}, id="missing-field"),
        pytest.param({"x": np.zeros(2, np.float32), "id": 1}, id="other-order"),
        pytest.param({"id": 1.5, "x": np.zeros(2, np.float32)}, id="float-for-int"),
        pytest.param({"id": True, "x": np.zeros(2, np.float32)}, id="bool-for-int"),
        pytest.param({"id": 1, "x": np.zeros(2, np.float64)}, id="other-dtype"),
        pytest.param({"id": 1, "x": np.zeros((2, 1), np.float32)}, id="other-ndim"),
        pytest.param({"id": None, "x": np.zeros(2, np.float32)}, id="none-for-int"),
    ],
)
def test_records_that_disagree_with_the_first_are_written_as_tinax_02_wrote_them(tmp_path, container, second):
    records = [{"id": 0, "x": np.zeros(3, np.float32)}, second, {"id": 2, "x": np.zeros(3, np.float32)}]
    _assert_written_as_02_wrote_them(tmp_path, container, records)
    # Without arrays, which tinax 0.2's JSON could not hold, ArrayRecord takes them too.
    plain = [{key: value for key, value in record.items() if key != "x"} for record in records]
    _assert_written_as_02_wrote_them(tmp_path, container, plain)


def test_streamed_json_records_are_written_as_tinax_02_wrote_them_whatever_comes_later(tmp_path):
    _array_record_container()
    path = tmp_path / "d.array_record"

    def records() -> Iterator[dict[str, Any]]:
        for index in range(700):
            yield {"id": index, "name": f"row {index}"}
        yield {"id": 700, "name": ["a", "list"]}
        yield {"id": 701, "name": "after"}

    write_array_record(path, records(), group_size=3)
    dataset = read_array_record(path)
    expected = [*({"id": index, "name": f"row {index}"} for index in range(700))]
    expected += [{"id": 700, "name": ["a", "list"]}, {"id": 701, "name": "after"}]
    assert list(dataset) == expected
    assert not hasattr(_source(dataset), "source_id"), "JSON records have no content identity"
    assert sorted(os.listdir(tmp_path)) == ["d.array_record"], "no temporary file is left"


def _streamed(first: dict[str, Any], later: Any) -> Iterator[Any]:
    yield first
    yield dict(first)
    yield later


@pytest.mark.parametrize(
    "later",
    [
        pytest.param({"x": np.zeros(2, np.float64)}, id="other-dtype"),
        pytest.param({"x": np.zeros((2, 1), np.float32)}, id="other-ndim"),
        pytest.param({"y": np.zeros(2, np.float32)}, id="other-field"),
        pytest.param({"x": [1.0, 2.0]}, id="list"),
        pytest.param(3, id="not-a-mapping"),
    ],
)
def test_a_late_record_outside_the_format_of_array_records_gives_0_2s_type_error(tmp_path, later):
    # tinax 0.2 refused these records at records[0] already: JSON cannot hold an array.
    _array_record_container()
    path = tmp_path / "d.array_record"
    with pytest.raises(TypeError, match=r"records\[2\]") as caught:
        write_array_record(path, _streamed({"x": np.zeros(2, np.float32)}, later))
    if isinstance(caught.value, ValueError):
        assert "once records[0] is not JSON (Object of type ndarray is not JSON serializable)" in str(caught.value)
        assert caught.value.__cause__ is not None
    assert os.listdir(tmp_path) == []


def test_records_that_neither_json_nor_the_format_hold_give_jsons_error(tmp_path):
    _array_record_container()
    with pytest.raises(TypeError, match="Object of type float32 is not JSON serializable") as caught:
        write_array_record(tmp_path / "d.array_record", [{"x": np.float32(1)}])
    assert any("does not fit the tinax record format either" in note for note in caught.value.__notes__)
    circular: dict[str, Any] = {}
    circular["self"] = circular
    with pytest.raises(ValueError, match="Circular reference"):  # What json.dumps (and so tinax 0.2) raised.
        write_array_record(tmp_path / "d.array_record", [circular])
    assert os.listdir(tmp_path) == []


def _json_records_as_0_2_wrote_them(path: Any, records: list[Any], group_size: int) -> None:
    """tinax 0.2's ArrayRecord writer: one json.dumps record each, array-record's group_size option."""
    from array_record.python.array_record_module import ArrayRecordWriter

    writer = ArrayRecordWriter(str(path), f"group_size:{group_size}")
    for record in records:
        writer.write(json.dumps(record).encode("utf-8"))
    writer.close()


@pytest.mark.parametrize("group_size", [1, 3])
def test_records_0_2_could_write_are_the_array_record_bytes_0_2_wrote(tmp_path, group_size):
    _array_record_container()
    records = [
        {"id": 0, "name": "héllo 日本語", "score": 0.5, "flag": True, "nothing": None},
        {"id": 1, "name": "", "score": math.nan, "flag": False, "nothing": None},
        {"id": 2, "tags": ["a", [1, 2.5]], "nested": {"x": -0.0}, 3: "a non-str key", "big": 2**70},
        {},
        [4, "not a mapping"],
    ]
    ours, theirs = tmp_path / "ours.array_record", tmp_path / "theirs.array_record"
    write_array_record(ours, iter(records), group_size=group_size)
    _json_records_as_0_2_wrote_them(theirs, records, group_size)
    assert ours.read_bytes() == theirs.read_bytes()
    # So 0.2's reader, and grain's own source with json.loads, read what we read.
    expected = [json.loads(json.dumps(record)) for record in records]
    source = grain.sources.ArrayRecordDataSource(str(ours))
    read_by_grain = [json.loads(source[index]) for index in range(len(source))]
    read_by_us = list(read_array_record(ours))
    assert repr(read_by_grain) == repr(read_by_us) == repr(expected)


def test_no_records_are_an_empty_array_record_file_as_0_2_wrote_it(tmp_path):
    _array_record_container()
    write_array_record(tmp_path / "ours.array_record", [])
    _json_records_as_0_2_wrote_them(tmp_path / "theirs.array_record", [], 1)
    assert (tmp_path / "ours.array_record").read_bytes() == (tmp_path / "theirs.array_record").read_bytes()


def test_arrays_and_bytes_which_0_2_could_not_write_to_array_record_read_back_exactly(tmp_path):
    _array_record_container()
    records = [{"x": np.arange(3, dtype=np.float32) + index, "raw": bytes([index])} for index in range(3)]
    write_array_record(tmp_path / "d.array_record", records)
    _assert_same_records(list(read_array_record(tmp_path / "d.array_record")), records)


def _rows_0_2_read(path: Any) -> list[dict[str, Any]]:
    """What tinax 0.2's Parquet reader gave for a file."""
    return pq.read_table(str(path)).to_pylist()


def test_parquet_records_0_2_could_write_are_its_plain_table_and_read_as_0_2_read_them(tmp_path):
    records = [
        {
            "id": index,
            "x": np.arange(3, dtype=np.float32) + index,
            "tokens": np.arange(index, dtype=np.int64),
            "half": np.linspace(0, 1, 2, dtype=np.float16),
            "scalar": np.float32(index / 2),
            "raw": bytes([index]),
            "tags": ["a"] * index,
            "text": f"r{index}",
        }
        for index in range(4)
    ]
    path = tmp_path / "d.parquet"
    write_parquet_record(path, records)
    table = pq.read_table(path)
    # tinax 0.2's table, column for column, with no tinax metadata.
    assert table.schema.remove_metadata() == pa.Table.from_pylist(records).schema.remove_metadata()
    assert not (table.schema.metadata or {}).keys() & {b"tinax.records", b"tinax.records.checksums"}
    rows = list(read_parquet_record(path))
    assert repr(rows) == repr(_rows_0_2_read(path)) == repr(pa.Table.from_pylist(records).to_pylist())
    # Arrays read as lists of Python numbers, as in 0.2.
    assert rows[1]["x"] == [1.0, 2.0, 3.0]
    assert type(rows[1]["x"][0]) is float
    # The numpy mapping gives them back as arrays of the stored type.
    exact = read_parquet_record(path, mapping="numpy")[1]["x"]
    assert exact.dtype == np.float32
    assert exact.tolist() == [1.0, 2.0, 3.0]


def test_parquet_arrays_0_2_could_not_write_read_back_exactly(tmp_path):
    # 2-d, 0-d, bfloat16, complex and big-endian arrays: pyarrow refused them in 0.2.
    records = [
        {
            "image": np.full((2, 2), index, np.uint8),
            "scalar": np.asarray(index, np.float64),
            "brain": np.asarray([index], ml_dtypes.bfloat16),
            "waves": np.asarray([index * 1j], np.complex64),
            "swapped": np.asarray([index], ">f4"),
        }
        for index in range(3)
    ]
    for name in records[0]:
        only = [{name: record[name]} for record in records]
        with pytest.raises((pa.ArrowException, ValueError, TypeError)):
            pa.Table.from_pylist(only)
        path = tmp_path / f"{name}.parquet"
        write_parquet_record(path, only)
        _assert_same_records(list(read_parquet_record(path)), only)


def test_parquet_records_neither_pyarrow_nor_the_format_take_give_pyarrows_error(tmp_path):
    # A 2-d array and a list in one field: 0.2's ArrowInvalid, with a note on why the format refused too.
    records = [{"x": np.zeros((2, 2))}, {"x": [1.0]}]
    with pytest.raises(pa.ArrowInvalid) as caught:
        write_parquet_record(tmp_path / "d.parquet", records)
    assert any("do not fit the tinax record format either" in note for note in caught.value.__notes__)
    with pytest.raises(OverflowError):  # pyarrow converts the columns in order: "n" first.
        write_parquet_record(tmp_path / "d.parquet", [{"n": 2**64, "x": np.zeros((2, 2))}])
    assert os.listdir(tmp_path) == []


# Shapes with a zero extent, and other shapes of as many dimensions (zero extents among them) for the same field.
_ZERO_EXTENT_SHAPES = [(0, 9), (0, 2), (0,), (3, 0), (0, 0, 4)]
_OTHER_SHAPES = {
    1: [(3,), (0,), (1,)],
    2: [(2, 9), (0, 2), (1, 2), (0, 9), (0, 0), (4, 0), (0, 9)],
    3: [(1, 2, 4), (0, 3, 4), (0, 0, 0), (2, 0, 4), (0, 0, 4), (0, 5, 1)],
}
_FORMAT_DTYPES = [
    np.float32,
    np.float64,
    np.int64,
    np.int8,
    np.uint8,
    np.bool_,
    np.float16,
    ">f4",
    np.complex64,
    ml_dtypes.bfloat16,
    ml_dtypes.float8_e4m3fn,
    ml_dtypes.int4,
]


def _array(shape: tuple[int, ...], dtype: Any, seed: int) -> np.ndarray:
    return ((np.arange(math.prod(shape)) + seed) % 7).reshape(shape).astype(dtype)


@pytest.mark.parametrize("dtype", _FORMAT_DTYPES, ids=lambda dtype: np.dtype(dtype).str)
def test_parquet_arrays_with_zero_extents_read_back_exactly_alone_and_among_other_shapes(tmp_path, dtype):
    for shape in _ZERO_EXTENT_SHAPES:
        mixed = [shape, *_OTHER_SHAPES[len(shape)], shape]
        cases = {
            "alone": [{"x": _array(shape, dtype, 0)}],
            "repeated": [{"x": _array(shape, dtype, 0)} for _ in range(3)],
            "mixed": [{"x": _array(other, dtype, index)} for index, other in enumerate(mixed)],
            # Beside a 2-d field, a 1-d field is in the tinax format too.
            "beside": [
                {"id": index, "x": _array(other, dtype, index), "y": np.zeros((0, 3), np.float32)}
                for index, other in enumerate(mixed)
            ],
        }
        for name, records in cases.items():
            path = tmp_path / f"{name}.parquet"
            write_parquet_record(path, records)
            try:
                plain = pa.Table.from_pylist(records)
            except (pa.ArrowException, ValueError, TypeError):
                # Outside what tinax 0.2 could write: the tinax format, exact whatever the mapping.
                for mapping in ("python", "numpy"):
                    _assert_same_records(list(read_parquet_record(path, mapping=mapping)), records)
            else:
                # 1-d arrays of dtypes Arrow has: tinax 0.2's plain table of lists, read as 0.2 read it.
                assert len(shape) == 1
                assert repr(list(read_parquet_record(path))) == repr(plain.to_pylist())


def test_zero_extent_arrays_have_the_same_source_id_and_records_in_both_containers(tmp_path):
    array_record = _array_record_container()
    shapes = [(0, 9), (2, 9), (0, 2), (0, 0), (3, 0), (0, 9)]
    records = [{"id": index, "x": _array(shape, np.float32, index)} for index, shape in enumerate(shapes)]
    array_record.write(tmp_path / "a.array_record", records)
    write_parquet_record(tmp_path / "b.parquet", records)
    from_array_record = array_record.read(tmp_path / "a.array_record")
    from_parquet = read_parquet_record(tmp_path / "b.parquet")
    _assert_same_records(list(from_array_record), records)
    _assert_same_records(list(from_parquet), records)
    assert _source(from_array_record).source_id == _source(from_parquet).source_id


def test_parquet_keeps_the_extents_nested_lists_lose_in_the_field_metadata(tmp_path):
    path = tmp_path / "d.parquet"
    # Frames without detections beside frames with some: every empty one is (0, 4), which the fill gives.
    write_parquet_record(path, [{"boxes": np.zeros((count, 4), np.float32)} for count in (0, 3, 0, 1)])
    field = pq.read_schema(path).field("boxes")
    assert field.type == pa.large_list(pa.large_list(pa.float32()))  # The one nested-list layout.
    assert json.loads(field.metadata[b"tinax.empty_shapes"]) == {"fill": [4], "rows": []}
    assert pq.read_table(path).column("boxes").to_pylist()[0] == []  # Other tools see an empty list.
    # Rows the fill does not give are listed with their shapes.
    write_parquet_record(path, [{"x": np.zeros(shape)} for shape in [(0, 9), (0, 2), (1, 2), (0, 9), (0, 0)]])
    assert json.loads(pq.read_schema(path).field("x").metadata[b"tinax.empty_shapes"]) == {
        "fill": [9],
        "rows": [[1, [0, 2]], [4, [0, 0]]],
    }
    # Where nested lists keep every extent, there is no such metadata (the files are as before).
    write_parquet_record(path, [{"x": np.zeros(shape)} for shape in [(3, 0), (2, 2), (0, 0)]])
    assert pq.read_schema(path).field("x").metadata == {b"tinax.dtype": b"<f8"}


def test_listed_zero_extent_shapes_read_back_through_every_read_path(tmp_path, monkeypatch):
    from grain.sharding import ShardOptions

    from tinax._data._pipelines import _planned_reads
    from tinax._data._records import _parquet_write
    from tinax.data import training_batches

    original_read_window = _planned_reads.read_window
    # Row groups of four records, and rows the fill does not give in most of them.
    monkeypatch.setattr(_parquet_write, "_ROW_GROUP_MAX_ROWS", 4)
    shapes = [(0, 9), (2, 3), (0, 2), (1, 9), (0, 0), (0, 9), (0, 5)]
    records = [
        {"id": index, "x": _array(shapes[index % len(shapes)], np.int16, index), "name": f"r{index}"}
        for index in range(40)
    ]
    path = tmp_path / "d.parquet"
    write_parquet_record(path, records)
    assert json.loads(pq.read_schema(path).field("x").metadata[b"tinax.empty_shapes"])["rows"]
    dataset = read_parquet_record(path, cache_bytes=1)  # Past the cache: every read decodes again.
    source = _source(dataset)
    assert source.column_names == ("id", "x", "name")
    _assert_same_records([dataset[index] for index in range(40)], records)
    order = [int(index) for index in np.random.default_rng(0).permutation(40)]
    _assert_same_records(source._getitems(order), [records[index] for index in order])
    # One column alone, as split_by_column reads it.
    for value, record in zip(source.column_values("x"), records, strict=True):
        _assert_same_records([{"x": value}], [{"x": record["x"]}])
    # An unpickled copy (a worker's) reads the same.
    copy = pickle.loads(pickle.dumps(source))
    _assert_same_records([copy[index] for index in range(40)], records)
    # The planned reads of the global shuffle take rows of several row groups into one table.
    windows = []
    monkeypatch.setattr(_planned_reads, "read_window", lambda *args: windows.append(1) or original_read_window(*args))
    for cache_bytes in (1, 1 << 30):
        batches = training_batches(
            read_parquet_record(path, cache_bytes=cache_bytes),
            shard_options=ShardOptions(0, 1, drop_remainder=True),
            seed=3,
            shuffle=True,
            num_epochs=1,
            batch_size=8,
            batch_fn=list,
        )
        for batch in batches:
            _assert_same_records(batch, [records[row["id"]] for row in batch])
    assert windows, "the planned reads read windows"


def test_a_parquet_field_that_records_0_lacks_is_refused_instead_of_dropped(tmp_path):
    # tinax 0.2 kept only records[0]'s fields and lost this one without a word.
    with pytest.raises(ValueError, match=r"records\[1\] must have only fields that records\[0\] has.*'b'"):
        write_parquet_record(tmp_path / "d.parquet", [{"a": 1}, {"a": 2, "b": [3]}])
    assert os.listdir(tmp_path) == []


def test_a_field_records_0_has_and_others_lack_reads_back_as_none_as_in_02(tmp_path, container):
    records = [{"a": 1, "b": [2]}, {"a": 3}]
    container.write(tmp_path / f"d{container.suffix}", records)
    expected = [{"a": 1, "b": [2]}, {"a": 3, "b": None}] if container.name == "parquet" else records
    assert list(container.read(tmp_path / f"d{container.suffix}")) == expected


def test_out_of_range_ints_and_unencodable_strs_are_written_as_tinax_02_wrote_them(tmp_path, container):
    # Outside the format: Parquet raises pyarrow's OverflowError and
    # UnicodeEncodeError, as 0.2 did; JSON holds them.
    for records in ([{"n": 0}, {"n": 2**63}], [{"n": -(2**63) - 1}], [{"s": "\ud800"}]):
        _assert_written_as_02_wrote_them(tmp_path, container, records)


def test_records_must_be_mappings_for_parquet_and_json_values_for_array_record(tmp_path, container):
    path = tmp_path / f"d{container.suffix}"
    if container.name == "parquet":
        with pytest.raises(TypeError, match=r"records\[1\] must be a mapping of field names to values, got 3"):
            container.write(path, [{"a": 1}, 3])
    else:
        # tinax 0.2 wrote any JSON value as a record.
        container.write(path, [{"a": 1}, 3, [4, "x"]])
        assert list(container.read(path)) == [{"a": 1}, 3, [4, "x"]]
        path.unlink()
    # Keys that are not str: pyarrow's TypeError for Parquet, str keys in JSON.
    _assert_written_as_02_wrote_them(tmp_path, container, [{1: 1}])
    with pytest.raises(TypeError, match="records must be"):
        container.write(path, {"a": 1})
    with pytest.raises(TypeError, match=r"path must be a str or os.PathLike\[str\] path, got b'x' \(bytes\)"):
        container.write(b"x", [{"a": 1}])
    assert os.listdir(tmp_path) == []


def test_parquet_needs_a_finite_sequence(tmp_path):
    with pytest.raises(TypeError, match=r"records must be a non-empty finite sequence of mappings.*\(generator\)"):
        write_parquet_record(tmp_path / "d.parquet", ({"a": index} for index in range(3)))
    with pytest.raises(TypeError, match=r"records must be a non-empty finite sequence.*\(dict_values\)"):
        write_parquet_record(tmp_path / "d.parquet", {"k": {"a": 1}}.values())
    assert os.listdir(tmp_path) == []


def test_array_record_streams_a_generator_and_checks_group_size(tmp_path):
    _array_record_container()
    path = tmp_path / "d.array_record"
    write_array_record(path, ({"id": index} for index in range(10)), group_size=4)
    assert [record["id"] for record in read_array_record(path).shuffle(seed=0)] != list(range(10))
    assert sorted(record["id"] for record in read_array_record(path)) == list(range(10))
    with pytest.raises(TypeError, match=r"group_size must be an int >= 1, got True \(bool\)"):
        write_array_record(tmp_path / "e.array_record", [{"id": 0}], group_size=True)
    with pytest.raises(ValueError, match=r"group_size must be an int >= 1, got 0 \(int\)"):
        write_array_record(tmp_path / "e.array_record", [{"id": 0}], group_size=0)


def test_a_failing_generator_leaves_nothing_behind(tmp_path):
    _array_record_container()

    def records() -> Iterator[dict[str, int]]:
        yield {"id": 0}
        yield {"id": 1}
        raise RuntimeError("the upstream data broke")

    with pytest.raises(RuntimeError, match="the upstream data broke"):
        write_array_record(tmp_path / "d.array_record", records())
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------
# Files: replaced as in 0.2 unless told not to, clear errors on missing and malformed ones


def test_writers_replace_an_existing_file_by_default_as_0_2_did(tmp_path, container):
    path = tmp_path / f"d{container.suffix}"
    path.write_bytes(b"the old file")
    container.write(path, [{"a": 1}])
    assert list(container.read(path)) == [{"a": 1}]
    # Re-running a data script writes the file again.
    container.write(path, [{"a": 2}])
    assert list(container.read(path)) == [{"a": 2}]
    assert os.listdir(tmp_path) == [path.name]


def test_writers_with_overwrite_false_refuse_an_existing_file_and_leave_it_as_it_was(tmp_path, container):
    path = tmp_path / f"d{container.suffix}"
    path.write_bytes(b"the old file")
    with pytest.raises(FileExistsError):
        container.write(path, [{"a": 1}], overwrite=False)
    assert path.read_bytes() == b"the old file"
    assert os.listdir(tmp_path) == [path.name]


def test_writers_write_through_a_symbolic_link_as_0_2_did(tmp_path, container):
    target = tmp_path / f"target{container.suffix}"
    target.write_bytes(b"the old file")
    link = tmp_path / f"link{container.suffix}"
    link.symlink_to(target)
    container.write(link, [{"a": 1}])
    assert link.is_symlink()
    assert list(container.read(target)) == [{"a": 1}]
    dangling = tmp_path / f"dangling{container.suffix}"
    dangling.symlink_to(tmp_path / f"created{container.suffix}")
    container.write(dangling, [{"a": 2}])
    assert dangling.is_symlink()
    assert list(container.read(tmp_path / f"created{container.suffix}")) == [{"a": 2}]


def test_a_failed_write_leaves_no_file_behind(tmp_path, container):
    path = tmp_path / f"d{container.suffix}"
    with pytest.raises((TypeError, ValueError)):  # json's TypeError, pyarrow's ArrowInvalid
        container.write(path, [{"a": 2}, {"a": object()}])
    assert os.listdir(tmp_path) == []


def test_a_missing_folder_or_a_folder_path_is_an_os_error_of_0_2s_kind(tmp_path, container):
    missing = tmp_path / "missing" / f"d{container.suffix}"
    (tmp_path / "folder").mkdir()
    # tinax 0.2's ArrayRecord writer let array-record's RuntimeError through.
    also = RuntimeError if container.name == "array_record" else OSError
    with pytest.raises(FileNotFoundError, match="does not exist") as caught:
        container.write(missing, [{"a": 1}])
    assert isinstance(caught.value, also)
    with pytest.raises(IsADirectoryError) as caught:
        container.write(tmp_path / "folder", [{"a": 1}])
    assert isinstance(caught.value, also)
    assert sorted(os.listdir(tmp_path)) == ["folder"]
    assert os.listdir(tmp_path / "folder") == []


@pytest.mark.parametrize("depth", [1, 2])
def test_a_destination_under_a_regular_file_is_a_not_a_directory_error_as_in_0_2(tmp_path, container, depth):
    regular = tmp_path / "regular"
    regular.write_bytes(b"x")
    destination = regular / "f" if depth == 1 else regular / "sub" / "f"
    # tinax 0.2's Parquet writer let pyarrow's NotADirectoryError through; its
    # ArrayRecord writer, array-record's RuntimeError.
    with pytest.raises(NotADirectoryError, match="regular file") as caught:
        container.write(destination, [{"a": 1}])
    if container.name == "array_record":
        assert isinstance(caught.value, RuntimeError)
    assert sorted(os.listdir(tmp_path)) == ["regular"]


def test_an_empty_path_is_a_value_error_and_0_2s_file_not_found_error(tmp_path, container, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="path must be a non-empty path") as caught:
        container.read("")
    assert isinstance(caught.value, FileNotFoundError)
    with pytest.raises(ValueError, match="path must be a non-empty path") as caught:
        container.write("", [{"a": 1}])
    # What 0.2's writers let through: pyarrow's FileNotFoundError, array-record's RuntimeError.
    assert isinstance(caught.value, RuntimeError if container.name == "array_record" else FileNotFoundError)
    assert os.listdir(tmp_path) == []


def test_array_record_file_system_failures_stay_runtime_errors_as_in_0_2(tmp_path):
    _array_record_container()
    name_too_long = tmp_path / ("n" * (os.pathconf(tmp_path, "PC_NAME_MAX") + 1))
    with pytest.raises(OSError, match="too long") as caught:
        write_array_record(name_too_long, [{"a": 1}])
    assert isinstance(caught.value, RuntimeError)
    assert caught.value.__cause__ is not None
    assert os.listdir(tmp_path) == []
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(PermissionError) as caught:
            write_array_record(locked / "d.array_record", [{"a": 1}])
        assert isinstance(caught.value, RuntimeError)
    # A generator's own OSError is not the writer's: it passes unchanged.

    def failing() -> Iterator[dict[str, int]]:
        yield {"a": 1}
        raise FileNotFoundError("the input shard is gone")

    with pytest.raises(FileNotFoundError, match="the input shard is gone") as caught:
        write_array_record(tmp_path / "d.array_record", failing())
    assert not isinstance(caught.value, RuntimeError)


def test_a_missing_path_or_a_folder_without_files_gives_file_not_found(tmp_path, container):
    with pytest.raises(FileNotFoundError, match=r"No .* file at '.*nothing'"):
        container.read(tmp_path / "nothing")
    # A folder is a dataset of the files in it (see test_many_files.py): here, of none.
    with pytest.raises(FileNotFoundError, match="No .* file in the folder"):
        container.read(tmp_path)


def _valid_file(tmp_path, container: Container) -> Any:
    # A 0-d array: neither pyarrow nor JSON takes it (tinax 0.2 could not write it), so the file is in the
    # tinax format in both containers.
    path = tmp_path / f"valid{container.suffix}"
    records = [
        {"id": index, "x": np.arange(index, dtype=np.float32), "h": np.asarray(index, np.float16)}
        for index in range(200)
    ]
    container.write(path, records)
    return path


def test_files_that_are_not_parquet_or_array_record_give_value_error_naming_the_path(tmp_path, container):
    text = tmp_path / "notes.txt"
    text.write_text("hello\n" * 50)
    valid = _valid_file(tmp_path, container)
    truncated = tmp_path / f"truncated{container.suffix}"
    truncated.write_bytes(valid.read_bytes()[: valid.stat().st_size // 2])
    empty = tmp_path / f"empty{container.suffix}"
    empty.write_bytes(b"")
    # Also what tinax 0.2 let through: pyarrow's ArrowInvalid, array-record's RuntimeError.
    upstream = pa.ArrowInvalid if container.name == "parquet" else RuntimeError
    for path in (text, truncated, empty):
        with pytest.raises(ValueError, match=rf"'{path}' is not a readable") as caught:
            container.read(path)
        assert isinstance(caught.value, upstream)
        assert caught.value.__cause__ is not None
        # Grain workers send their errors back pickled.
        copy = pickle.loads(pickle.dumps(caught.value))
        assert type(copy) is type(caught.value)
        assert str(copy) == str(caught.value)


def test_array_record_files_of_json_records_read_as_tinax_02_read_them(tmp_path):
    _array_record_container()
    from array_record.python.array_record_module import ArrayRecordWriter

    rows = [{"id": 1, "tags": ["a", "b"], "nested": {"x": 1.5}}, {"id": 2, "tags": [], "nested": None}, [3, 4]]
    path = tmp_path / "written-by-0.2.array_record"
    writer = ArrayRecordWriter(str(path), "group_size:1")
    for row in rows:
        writer.write(json.dumps(row).encode())
    writer.close()
    dataset = read_array_record(path)
    assert len(dataset) == 3
    assert list(dataset) == rows
    assert not hasattr(_source(dataset), "source_id")
    assert "JSON records" in repr(_source(dataset))
    copy = pickle.loads(pickle.dumps(_source(dataset)))
    assert [copy[index] for index in range(3)] == rows


def test_an_array_record_file_without_records_reads_as_empty(tmp_path):
    _array_record_container()
    from array_record.python.array_record_module import ArrayRecordWriter

    path = tmp_path / "none.array_record"
    writer = ArrayRecordWriter(str(path), "group_size:1")
    writer.close()
    assert list(read_array_record(path)) == []


def test_a_record_that_is_not_json_fails_at_its_index_with_json_decode_error(tmp_path):
    _array_record_container()
    from array_record.python.array_record_module import ArrayRecordWriter

    path = tmp_path / "foreign.array_record"
    writer = ArrayRecordWriter(str(path), "group_size:1")
    for record in (b'{"id": 0}', b"foreign record"):
        writer.write(record)
    writer.close()
    dataset = read_array_record(path)
    assert dataset[0] == {"id": 0}
    with pytest.raises(json.JSONDecodeError) as caught:  # What tinax 0.2 raised.
        dataset[1]
    assert f"reading record 1 of '{path}'" in caught.value.__notes__


def test_any_parquet_file_reads_as_pyarrow_rows(tmp_path):
    path = tmp_path / "plain.parquet"
    table = pa.table(
        {
            "id": pa.array(range(10), pa.int8()),
            "tags": pa.array([[str(index)] * (index % 3) for index in range(10)]),
            "when": pa.array([datetime.date(2020, 1, 1 + index) for index in range(10)]),
            "point": pa.array([{"x": index, "y": None} for index in range(10)]),
        }
    )
    pq.write_table(table, path, row_group_size=4)
    dataset = read_parquet_record(path)
    assert len(dataset) == 10
    assert [dataset[index] for index in range(10)] == table.to_pylist()
    assert list(dataset.shuffle(seed=1)) == [
        table.to_pylist()[index] for index in grain.MapDataset.range(10).shuffle(seed=1)
    ]
    assert not hasattr(_source(dataset), "source_id")
    assert "plain Parquet rows" in repr(_source(dataset))
    copy = pickle.loads(pickle.dumps(_source(dataset)))
    assert copy[9] == table.to_pylist()[9]


def _header(**changes: Any) -> dict[str, Any]:
    header = {
        "format": "tinax-records",
        "version": 1,
        "count": 2,
        "content_sha256": "0" * 64,
        "fields": [{"name": "id", "kind": "int"}],
    }
    header.update(changes)
    return header


def _raw_array_record(path, records: list[bytes], header: dict[str, Any]) -> None:
    from array_record.python.array_record_module import ArrayRecordWriter

    writer = ArrayRecordWriter(str(path), "group_size:1")
    for record in [*records, b"tinax-records\n" + json.dumps(header).encode()]:
        writer.write(record)
    writer.close()


def _raw_parquet(path, table: pa.Table, header: dict[str, Any]) -> None:
    pq.write_table(table.replace_schema_metadata({"tinax.records": json.dumps(header)}), path)


def _sealed_parquet(path, table: pa.Table, header: dict[str, Any], row_group_size: int | None = None) -> None:
    # A crafted file with valid checksums, as write_parquet_record seals its files.
    from tinax._data._records import _parquet_write

    row_group_size = row_group_size or len(table)
    groups = -(-len(table) // row_group_size)
    placeholder = _parquet_write._checksum_value("0" * 64, ["0" * 64] * groups)
    metadata = {"tinax.records": json.dumps(header), "tinax.records.checksums": placeholder}
    pq.write_table(table.replace_schema_metadata(metadata), path, row_group_size=row_group_size)
    _parquet_write.seal_checksums(path)


def test_a_header_from_a_newer_format_version_is_refused(tmp_path, container):
    path = tmp_path / f"newer{container.suffix}"
    newer = _header(version=2, fields="a layout this version cannot know")
    if container.name == "array_record":
        _raw_array_record(path, [b"\x00" * 8, b"\x01" * 8], newer)
    else:
        _raw_parquet(path, pa.table({"id": [0, 1]}), newer)
    with pytest.raises(ValueError, match=rf"'{path}' .*format version 2, newer than the newest this tinax-data reads"):
        container.read(path)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param({"format": "something-else"}, "does not declare the 'tinax-records' format", id="format"),
        pytest.param({"version": True}, "no valid format version", id="bool-version"),
        pytest.param({"count": 5}, "declares 5 records but the file holds 2", id="count"),
        pytest.param({"content_sha256": "xyz"}, "no valid content digest", id="digest"),
        pytest.param({"fields": [{"name": "id", "kind": "pickle"}]}, "malformed field entry", id="kind"),
        pytest.param(
            {"fields": [{"name": "id", "kind": "array", "dtype": "|O", "ndim": 1}]},
            r"unknown array dtype '\|O'",
            id="O",
        ),
        pytest.param({"fields": [{"name": "id", "kind": "int"}] * 2}, "repeats a field name", id="repeat"),
    ],
)
def test_malformed_headers_are_refused(tmp_path, container, changes, message):
    path = tmp_path / f"crafted{container.suffix}"
    header = _header(**changes)
    if container.name == "array_record":
        _raw_array_record(path, [b"\x00" * 8, b"\x01" * 8], header)
    else:
        _raw_parquet(path, pa.table({"id": pa.array([0, 1], pa.int64())}), header)
    with pytest.raises(ValueError, match=rf"'{path}' is not a readable .*{message}"):
        container.read(path)


def test_parquet_columns_that_contradict_the_header_are_refused(tmp_path):
    path = tmp_path / "crafted.parquet"
    _raw_parquet(path, pa.table({"id": pa.array(["0", "1"])}), _header())
    with pytest.raises(ValueError, match=rf"'{path}' .*columns .* do not match the header's fields"):
        read_parquet_record(path)


def test_a_corrupt_array_record_record_fails_at_its_index(tmp_path):
    _array_record_container()
    path = tmp_path / "corrupt.array_record"
    _raw_array_record(path, [(7).to_bytes(8, "little", signed=True), b"\x01\x02\x03"], _header())
    dataset = read_array_record(path)
    assert dataset[0] == {"id": 7}
    with pytest.raises(ValueError, match=rf"'{path}': record 1 is malformed \(the record ends inside field 'id'\)"):
        dataset[1]


@pytest.mark.parametrize("shape", [[1, 2], [0, 2], [-1, 0]])
def test_files_in_the_struct_array_layout_of_03_development_builds_are_refused(tmp_path, shape):
    # No release wrote arrays as struct<shape, data> (extents and raw bytes); such a file names the column
    # and the layouts that are read when it is opened.
    extents = pa.list_(pa.field("element", pa.int64(), nullable=False))
    column_type = pa.struct(
        [pa.field("shape", extents, nullable=False), pa.field("data", pa.large_binary(), nullable=False)]
    )
    column = pa.array([{"shape": shape, "data": b"\x00" * 8}], column_type)
    header = _header(count=1, fields=[{"dtype": "<f4", "kind": "array", "name": "x", "ndim": 2}])
    path = tmp_path / "early.parquet"
    _sealed_parquet(
        path, pa.table({"x": column}, schema=pa.schema([pa.field("x", column_type, nullable=False)])), header
    )
    expected = (
        rf"'{path}' is not a readable tinax Parquet record file: its columns .* do not match the header's fields .*"
        r"column 'x' is struct<shape: .*data: large_binary.*>, and an array field is read only from a "
        r"fixed_shape_tensor column, nested large_list columns or, for 0-d arrays, a column of its values"
    )
    with pytest.raises(ValueError, match=expected):
        read_parquet_record(path)


def test_a_corrupt_parquet_record_fails_at_its_index(tmp_path):
    arrays = [[[float(index)] * 2] * index for index in range(10)]
    # Record 5's nested lists are not rectangular, so they hold no array of the header's 2 dimensions.
    arrays[5] = [[1.0, 2.0], [3.0]]
    column_type = pa.large_list(pa.large_list(pa.float32()))
    table = pa.table({"id": pa.array(range(10), pa.int64()), "x": pa.array(arrays, column_type)})
    fields = [{"kind": "int", "name": "id"}, {"dtype": "<f4", "kind": "array", "name": "x", "ndim": 2}]
    path = tmp_path / "corrupt.parquet"
    _sealed_parquet(path, table, _header(fields=fields, count=10), row_group_size=1)
    dataset = read_parquet_record(path)
    assert dataset[4]["id"] == 4
    assert dataset[6]["x"].shape == (6, 2)
    expected = rf"'{path}': record 5 cannot be read \(row group 5: field 'x' has nested lists that are not rectangular"
    with pytest.raises(ValueError, match=expected):
        dataset[5]


def test_parquet_row_group_damage_fails_at_read_time_with_value_error(tmp_path):
    valid = _valid_file(tmp_path, _parquet_container())
    metadata = pq.ParquetFile(valid).metadata
    column = metadata.row_group(0).column(1)
    start = column.data_page_offset
    data = bytearray(valid.read_bytes())
    data[start : start + 64] = b"\xff" * 64
    path = tmp_path / "damaged.parquet"
    path.write_bytes(bytes(data))
    dataset = read_parquet_record(path)
    with pytest.raises(ValueError, match=rf"'{path}': record 0 cannot be read \(row group 0") as caught:
        dataset[0]
    assert caught.value.__cause__ is not None


# ---------------------------------------------------------------------------
# Sources: identity, pickling, workers


def test_source_id_follows_the_content_not_the_path_or_time(tmp_path, container):
    # 2-d arrays: records tinax 0.2 could not write, in the tinax format in both containers.
    records = [{"id": index, "x": np.arange(3, dtype=np.float32).reshape(1, 3) + index} for index in range(10)]
    container.write(tmp_path / f"a{container.suffix}", records)
    source = _source(container.read(tmp_path / f"a{container.suffix}"))
    assert source.source_id.startswith("tinax-records:")
    assert source.source_id == _source(container.read(tmp_path / f"a{container.suffix}")).source_id
    copied = tmp_path / "elsewhere"
    copied.mkdir()
    shutil.copy(tmp_path / f"a{container.suffix}", copied / f"renamed{container.suffix}")
    os.utime(copied / f"renamed{container.suffix}", (0, 0))
    assert _source(container.read(copied / f"renamed{container.suffix}")).source_id == source.source_id
    # One value changed, same sizes everywhere: another identity.
    changed = [dict(record) for record in records]
    changed[7] = {"id": 7, "x": np.arange(3, dtype=np.float32).reshape(1, 3) + 70}
    container.write(tmp_path / f"b{container.suffix}", changed)
    assert _source(container.read(tmp_path / f"b{container.suffix}")).source_id != source.source_id
    reordered = records[1:] + records[:1]
    container.write(tmp_path / f"c{container.suffix}", reordered)
    assert _source(container.read(tmp_path / f"c{container.suffix}")).source_id != source.source_id


def test_source_repr_names_the_file_and_its_records(tmp_path, container):
    path = tmp_path / f"d{container.suffix}"
    container.write(path, [{"id": 1, "x": np.zeros((1, 2))}])
    text = repr(_source(container.read(path)))
    assert str(path) in text
    assert "records=1" in text
    assert "fields=['id', 'x']" in text
    assert "source_id='tinax-records:" in text


def test_sources_pickle_without_open_files_and_reopen_lazily(tmp_path, container):
    path = tmp_path / f"d{container.suffix}"
    records = [{"id": index, "x": np.arange(index, dtype=np.int16).reshape(1, index)} for index in range(30)]
    container.write(path, records)
    source = _source(container.read(path))
    assert source[4]["id"] == 4  # Opened and read: the file handle must not travel.
    payload = pickle.dumps(source)
    assert len(payload) < 4096
    copy = pickle.loads(payload)
    assert copy.source_id == source.source_id
    assert len(copy) == 30
    _assert_same_records([copy[index] for index in range(30)], records)


def test_a_file_replaced_after_pickling_is_detected(tmp_path, container):
    path = tmp_path / f"d{container.suffix}"
    container.write(path, [{"id": index} for index in range(5)])
    payload = pickle.dumps(_source(container.read(path)))
    path.unlink()
    container.write(path, [{"id": index + 100} for index in range(5)])
    copy = pickle.loads(payload)
    with pytest.raises(ValueError, match=rf"'{path}' changed since it was opened"):
        copy[0]


def test_parquet_reads_only_the_row_groups_it_needs_within_its_budget(tmp_path):
    path = tmp_path / "large.parquet"
    # 64 KiB per record: about 16 records per 1 MiB row group.
    records = [{"id": index, "x": np.full((1, 16384), index, dtype=np.float32)} for index in range(64)]
    write_parquet_record(path, records)
    assert pq.ParquetFile(path).metadata.num_row_groups == 4
    source = _source(read_parquet_record(path))
    assert len(source._cache) == 0  # Opening reads the footer only.
    assert source[40]["x"][0, 0] == 40
    assert list(source._cache) == [2]
    small = _source(read_parquet_record(path, cache_bytes=3 << 20))
    for index in (0, 20, 63, 41, 40):
        assert small[index]["id"] == index
    # At most two 1 MiB row groups fit 3 MiB of budget: the least recently used went first.
    assert list(small._cache) == [3, 2]
    assert small._cached_bytes <= 3 << 20


def test_parquet_files_are_ordinary_columns_for_other_readers(tmp_path):
    path = tmp_path / "d.parquet"
    write_parquet_record(path, [{"id": 1, "name": "a", "x": np.asarray([[1, 2]], np.int16)}])
    table = pq.read_table(path)
    (row,) = table.to_pylist()
    assert row["id"] == 1
    assert row["name"] == "a"
    assert isinstance(table.schema.field("x").type, pa.FixedShapeTensorType)
    assert table.schema.field("x").type.shape == [1, 2]
    assert table.column("x").combine_chunks().to_numpy_ndarray().tolist() == [[[1, 2]]]
    assert table.schema.field("x").metadata == {b"tinax.dtype": b"<i2"}


_WORKER_SCRIPT = textwrap.dedent(
    """
    import json
    import sys

    from absl import flags

    import grain
    from tinax.data import read_array_record, read_parquet_record


    def to_plain(record):
        return {"id": record["id"], "x": [float(value) for value in record["x"]]}


    def main():
        flags.FLAGS.mark_as_parsed()  # Grain workers need parsed flags; this child process owns its flags.
        results = {}
        for name, path in json.loads(sys.argv[1]).items():
            reader = read_array_record if name == "array_record" else read_parquet_record
            dataset = reader(path).shuffle(seed=5).map(to_plain)
            options = grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=2)
            iterator = iter(dataset.to_iter_dataset().mp_prefetch(options))
            results[name] = [record for record in iterator]
            iterator.close()
        print(json.dumps(results))


    if __name__ == "__main__":
        main()
    """
)


def test_grain_multiprocessing_workers_read_both_containers(tmp_path):
    containers = [_parquet_container()]
    with contextlib.suppress(pytest.skip.Exception):
        containers.append(_array_record_container())
    records = [{"id": index, "x": np.arange(3, dtype=np.float32) * index} for index in range(24)]
    paths = {}
    for container in containers:
        paths[container.name] = str(tmp_path / f"d{container.suffix}")
        container.write(paths[container.name], records)
    expected_order = [record["id"] for record in read_parquet_record(paths["parquet"]).shuffle(seed=5)]
    script = tmp_path / "workers.py"
    script.write_text(_WORKER_SCRIPT)
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST")}
    completed = subprocess.run(
        [sys.executable, str(script), json.dumps(paths)],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
        cwd=tmp_path,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    results = json.loads(completed.stdout.strip().splitlines()[-1])
    assert set(results) == set(paths)
    for read in results.values():
        assert [record["id"] for record in read] == expected_order
        assert all(record["x"] == [0.0, 1.0 * record["id"], 2.0 * record["id"]] for record in read)


# ---------------------------------------------------------------------------
# The optional array-record dependency and the kept signatures


def test_a_missing_array_record_names_the_extra(tmp_path, monkeypatch):
    for module in [name for name in sys.modules if name == "array_record" or name.startswith("array_record.")]:
        monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.setitem(sys.modules, "array_record", None)
    monkeypatch.setitem(sys.modules, "array_record.python", None)
    monkeypatch.setitem(sys.modules, "array_record.python.array_record_module", None)
    hint = r'needs array_record.*pip install "tinax-data\[arrayrecord\]"'
    with pytest.raises(ImportError, match=rf"tinax.data.write_array_record {hint}"):
        write_array_record(tmp_path / "d.array_record", [{"id": 1}])
    with pytest.raises(ImportError, match=rf"tinax.data.read_array_record {hint}"):
        read_array_record(tmp_path / "d.array_record")
    assert os.listdir(tmp_path) == []


def test_signatures_match_the_kept_api():
    assert parameter_summary(write_array_record) == [
        ("path", "POSITIONAL_OR_KEYWORD", None),
        ("records", "POSITIONAL_OR_KEYWORD", None),
        ("group_size", "KEYWORD_ONLY", 1),
        ("overwrite", "KEYWORD_ONLY", True),
        ("progress", "KEYWORD_ONLY", None),
    ]
    assert parameter_summary(read_array_record) == [
        ("path", "POSITIONAL_OR_KEYWORD", None),
        ("decode", "KEYWORD_ONLY", None),
        ("cache_bytes", "KEYWORD_ONLY", 512 << 20),
    ]
    assert parameter_summary(write_parquet_record) == [
        ("path", "POSITIONAL_OR_KEYWORD", None),
        ("records", "POSITIONAL_OR_KEYWORD", None),
        ("overwrite", "KEYWORD_ONLY", True),
        ("progress", "KEYWORD_ONLY", None),
    ]
    assert parameter_summary(read_parquet_record) == [
        ("path", "POSITIONAL_OR_KEYWORD", None),
        ("mapping", "KEYWORD_ONLY", "python"),
        ("cache_bytes", "KEYWORD_ONLY", 512 << 20),
    ]


def _ids(rows: list[dict[str, Any]]) -> list[int]:
    return [row["id"] for row in rows]


def test_training_batches_tell_record_files_apart_by_content(tmp_path, container):
    from grain.sharding import ShardOptions

    from tinax.data import training_batches

    def batches(path: Any) -> grain.MapDataset:
        return training_batches(
            container.read(path),
            shard_options=ShardOptions(0, 1, drop_remainder=True),
            seed=1,
            shuffle=True,
            num_epochs=1,
            batch_size=4,
            batch_fn=_ids,
        )

    # 2-d arrays: records tinax 0.2 could not write, in the tinax format, which names its content.
    container.write(tmp_path / f"a{container.suffix}", [{"id": index, "x": np.zeros((1, 1))} for index in range(12)])
    shutil.copy(tmp_path / f"a{container.suffix}", tmp_path / f"copy{container.suffix}")
    container.write(
        tmp_path / f"b{container.suffix}", [{"id": index + 100, "x": np.zeros((1, 1))} for index in range(12)]
    )
    iterator = iter(batches(tmp_path / f"a{container.suffix}"))
    first = next(iterator)
    state = iterator.get_state()
    resumed = iter(batches(tmp_path / f"copy{container.suffix}"))
    resumed.set_state(state)
    assert sorted(first + next(resumed) + next(resumed)) == list(range(12))
    other = iter(batches(tmp_path / f"b{container.suffix}"))
    with pytest.raises(ValueError, match="source_id"):
        other.set_state(state)


# ---------------------------------------------------------------------------
# Hardening: indices that are not ints


@pytest.mark.parametrize(
    "index", [True, False, np.bool_(True), np.bool_(False), 1.0, np.float32(0), "0", None, np.asarray([0])]
)
def test_record_sources_refuse_bools_and_other_non_int_indices(tmp_path, container, index):
    path = tmp_path / f"rows{container.suffix}"
    container.write(path, [{"id": value} for value in range(3)])
    source = _source(container.read(path))
    with pytest.raises(TypeError, match="index must be an int") as caught:
        source[index]
    if container.name == "array_record":
        # tinax 0.2 let array-record's AttributeError through (it asked the index for __index__).
        assert isinstance(caught.value, AttributeError)
    # NumPy integers are ints and still read.
    assert source[np.int64(1)] == {"id": 1}
    assert source[np.uint8(2)] == {"id": 2}


# ---------------------------------------------------------------------------
# Hardening: crafted headers and records give ValueError naming the file


def _raw_header_bytes(path, container: Container, header_text: bytes) -> None:
    if container.name == "array_record":
        from array_record.python.array_record_module import ArrayRecordWriter

        writer = ArrayRecordWriter(str(path), "group_size:1")
        for record in [b"\x00" * 8, b"\x01" * 8, b"tinax-records\n" + header_text]:
            writer.write(record)
        writer.close()
    else:
        table = pa.table({"id": pa.array([0, 1], pa.int64())})
        pq.write_table(table.replace_schema_metadata({"tinax.records": header_text}), path)


def _nested(depth: int, opening: str, closing: str, inner: str = "0") -> str:
    return opening * depth + inner + closing * depth


@pytest.mark.parametrize(
    ("header_text", "message"),
    [
        pytest.param(_nested(100_000, "[", "]").encode(), "nested too deeply", id="list-100000"),
        # Python 3.13's json parses 5,000 nested objects; older ones give up first.
        pytest.param(
            _nested(5_000, '{"a":', "}").encode(),
            "(nested too deeply|does not declare the 'tinax-records' format)",
            id="dict-5000",
        ),
        pytest.param(
            (
                '{"format":"tinax-records","version":1,"count":2,"content_sha256":"'
                + "0" * 64
                + '","fields":'
                + _nested(20_000, "[", "]", "{}")
                + "}"
            ).encode(),
            "nested too deeply",
            id="deep-fields",
        ),
        pytest.param(("1" * 5000).encode(), "not UTF-8 JSON", id="int-of-5000-digits"),
        pytest.param(b"\xff\xfe{}", "not UTF-8 JSON", id="not-utf8"),
    ],
)
def test_crafted_header_json_gives_value_error_naming_the_file(tmp_path, container, header_text, message):
    path = tmp_path / f"crafted{container.suffix}"
    _raw_header_bytes(path, container, header_text)
    with pytest.raises(ValueError, match=rf"'{path}' is not a readable .*{message}"):
        container.read(path)


@pytest.mark.parametrize(
    "entry",
    [
        {"name": "id", "kind": ["int"]},
        {"name": "id", "kind": {"int": 1}},
        {"name": "id", "kind": None},
        {"name": "id", "kind": 3},
        {"name": ["id"], "kind": "int"},
        {"name": "id", "kind": "array", "dtype": ["<f4"], "ndim": 1},
        {"name": "id", "kind": "array", "dtype": {"<f4": 1}, "ndim": 1},
        {"name": "id", "kind": "array", "dtype": "<i8", "ndim": [1]},
        {"name": "id", "kind": "array", "dtype": "<i8", "ndim": 65},
    ],
)
def test_unhashable_or_wrongly_typed_kind_names_give_value_error(tmp_path, container, entry):
    path = tmp_path / f"crafted{container.suffix}"
    _raw_header_bytes(path, container, json.dumps(_header(fields=[entry])).encode())
    with pytest.raises(ValueError, match=rf"'{path}' is not a readable .*(malformed field entry|unknown array dtype)"):
        container.read(path)


@pytest.mark.parametrize(
    "extents",
    [(2**63,), (2**64 - 1,), (2**63, 1), (2**32, 2**32), (1, 2**62), (2**40, 2**40, 2**40)],
)
def test_array_record_extents_beyond_int64_give_value_error_naming_file_and_field(tmp_path, extents):
    _array_record_container()
    path = tmp_path / "huge.array_record"
    header = _header(count=1, fields=[{"name": "x", "kind": "array", "dtype": "<f4", "ndim": len(extents)}])
    record = b"".join(extent.to_bytes(8, "little") for extent in extents) + b"\x00" * 16
    _raw_array_record(path, [record], header)
    dataset = read_array_record(path)
    with pytest.raises(ValueError, match=rf"'{path}': record 0 is malformed \(field 'x' cannot be decoded"):
        dataset[0]


# ---------------------------------------------------------------------------
# Hardening: paths that cannot name a file


def _unreadable_paths(tmp_path) -> dict[str, Any]:
    (tmp_path / "regular").write_bytes(b"x")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    os.mkfifo(tmp_path / "fifo")
    max_name = os.pathconf(tmp_path, "PC_NAME_MAX")
    return {
        "through-a-file": (tmp_path / "regular" / "x", "Not a directory"),
        "through-a-file-deeper": (tmp_path / "regular" / "x" / "y", "Not a directory"),
        "self-loop": (tmp_path / "loop", "symbolic links"),
        "loop-of-two": (tmp_path / "a", "symbolic links"),
        "through-a-loop": (tmp_path / "loop" / "x", "symbolic links"),
        "name-too-long": (tmp_path / ("n" * (max_name + 1)), "too long"),
        "inside-a-name-too-long": (tmp_path / ("n" * (max_name + 1)) / "x", "too long"),
        "path-too-long": (tmp_path / "/".join(["d" * 200] * 30), "too long"),
        "dangling-link": (tmp_path / "dangling", "nothing is there"),
        "nul-byte": (str(tmp_path / "nu\0l"), "null"),
        "fifo": (tmp_path / "fifo", "not a regular file"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "through-a-file",
        "through-a-file-deeper",
        "self-loop",
        "loop-of-two",
        "through-a-loop",
        "name-too-long",
        "inside-a-name-too-long",
        "path-too-long",
        "dangling-link",
        "nul-byte",
        "fifo",
    ],
)
def test_paths_that_cannot_name_a_file_give_file_not_found(tmp_path, container, case):
    path, reason = _unreadable_paths(tmp_path)[case]
    with pytest.raises(FileNotFoundError, match=rf"No .* file at .*{reason}"):
        container.read(path)


# ---------------------------------------------------------------------------
# Hardening: checksums in every tinax-written Parquet file


def _small_checksummed_file(tmp_path, monkeypatch) -> tuple[Any, list[dict[str, Any]]]:
    from tinax._data._records import _parquet_write

    # Three row groups of two records: flips land in every part of the file.
    monkeypatch.setattr(_parquet_write, "_ROW_GROUP_MAX_ROWS", 2)
    boxes = [(0, 4), (2, 4), (0, 2), (1, 4), (0, 4), (0, 0)]  # Extents the field metadata keeps, a row listed.
    records = [
        {
            "id": index,
            "score": index / 4,
            "flag": index % 2 == 0,
            "name": f"r{index}",
            "blob": bytes([index, 255 - index]),
            "nothing": None,
            "x": np.arange(index + 1, dtype="<i2").reshape(1, -1),
            "boxes": np.ones(boxes[index], np.float32),
        }
        for index in range(6)
    ]
    path = tmp_path / "small.parquet"
    write_parquet_record(path, records)
    assert pq.ParquetFile(path).metadata.num_row_groups == 3
    assert b"tinax.empty_shapes" in pq.read_schema(path).field("boxes").metadata
    return path, records


def _small_plain_file(tmp_path, rows: int = 6) -> tuple[Any, list[dict[str, Any]]]:
    """A file of records tinax 0.2 could write (ints, floats, strings, 1-d arrays): pyarrow's plain table."""
    records = [
        {
            "id": index,
            "score": index / 4,
            "name": f"r{index % 3}",  # Repeated strings: a dictionary page.
            "tokens": np.arange(index % 5, dtype=np.int64),
            "x": np.full(2, index / 3, np.float32),
        }
        for index in range(rows)
    ]
    path = tmp_path / "plain.parquet"
    write_parquet_record(path, records)
    key_values = pq.ParquetFile(path).metadata.metadata
    assert b"tinax.records" not in key_values
    assert b"tinax.records.checksums" in key_values
    return path, pa.Table.from_pylist(records).to_pylist()


def _read_all(path) -> list[dict[str, Any]]:
    dataset = read_parquet_record(path)
    return [dataset[index] for index in range(len(dataset))]


def _exactly(value: Any) -> Any:
    """A value as something equal only to the same value: arrays by dtype, shape and bytes, floats by bits."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, float):
        return ("float", value.hex())
    if isinstance(value, list):
        return ("list", tuple(_exactly(item) for item in value))
    if isinstance(value, dict):
        return ("dict", tuple((key, _exactly(item)) for key, item in value.items()))
    return (type(value).__name__, value)


class _Sweep(NamedTuple):
    refused: int
    identical: int
    silent: list[tuple[int, int]]
    wrong_errors: list[tuple[int, int, str]]


def _flip_sweep(tmp_path, path, expected: list[dict[str, Any]], flips: list[tuple[int, int]]) -> _Sweep:
    """Reads the file with each (byte, bit) flipped: refused with a ValueError naming the file, or identical?"""
    original = path.read_bytes()
    wanted = _exactly(expected)
    assert _exactly(_read_all(path)) == wanted
    flipped_path = tmp_path / f"flipped-{path.name}"
    refused = identical = 0
    silent, wrong_errors = [], []
    for position, bit in flips:
        data = bytearray(original)
        data[position] ^= 1 << bit
        flipped_path.write_bytes(bytes(data))
        try:
            found = _read_all(flipped_path)
        except ValueError as error:
            refused += 1
            if str(flipped_path) not in str(error):
                wrong_errors.append((position, bit, f"unnamed: {error}"))
            continue
        except Exception as error:  # Any other type is undocumented.
            wrong_errors.append((position, bit, repr(error)))
            continue
        if _exactly(found) == wanted:
            identical += 1
        else:
            silent.append((position, bit))
    return _Sweep(refused, identical, silent, wrong_errors)


@pytest.mark.sweep
@pytest.mark.parametrize("kind", ["tinax-format", "plain-table"])
def test_every_single_bit_flip_in_a_small_parquet_file_is_detected(tmp_path, monkeypatch, kind):
    # The plain table is what records tinax 0.2 could write become; the tinax format the rest.
    if kind == "plain-table":
        path, expected = _small_plain_file(tmp_path)
    else:
        path, expected = _small_checksummed_file(tmp_path, monkeypatch)
    flips = [(position, bit) for position in range(path.stat().st_size) for bit in range(8)]
    sweep = _flip_sweep(tmp_path, path, expected, flips)
    assert sweep.wrong_errors == [], f"every refusal is a ValueError naming the file: {sweep.wrong_errors[:5]}"
    assert sweep.silent == [], f"{len(sweep.silent)} of {len(flips)} flips read back different records"
    # The checksums cover every byte: no flip even reads back the same records.
    assert (sweep.refused, sweep.identical) == (len(flips), 0)


@pytest.mark.sweep
@pytest.mark.parametrize("kind", ["tinax-format", "plain-table"])
def test_seeded_bit_flips_in_a_larger_parquet_file_are_detected(tmp_path, monkeypatch, kind):
    from tinax._data._records import _parquet_write

    if kind == "plain-table":
        path, expected = _small_plain_file(tmp_path, rows=3000)
    else:
        monkeypatch.setattr(_parquet_write, "_ROW_GROUP_MAX_ROWS", 700)
        expected = [
            {
                "id": index,
                "name": f"n{index % 13}",
                "image": np.full((2, 3), index, np.float32),
                "tokens": np.arange(index % 9, dtype=np.int32),
                "boxes": np.ones((index % 3, 4 if index % 5 else 2), ml_dtypes.bfloat16),
            }
            for index in range(3000)
        ]
        path = tmp_path / "larger.parquet"
        write_parquet_record(path, expected)
        assert pq.ParquetFile(path).metadata.num_row_groups == 5
    rng = np.random.default_rng(20261202)
    size = path.stat().st_size
    flips = [(int(rng.integers(size)), int(rng.integers(8))) for _ in range(200)]
    sweep = _flip_sweep(tmp_path, path, expected, flips)
    assert sweep.wrong_errors == [], f"every refusal is a ValueError naming the file: {sweep.wrong_errors[:5]}"
    assert sweep.silent == [], f"{len(sweep.silent)} of {len(flips)} flips read back different records"
    assert (sweep.refused, sweep.identical) == (len(flips), 0)


def test_a_corrupt_row_group_names_the_file_and_the_row_group_and_others_still_read(tmp_path, monkeypatch):
    path, records = _small_checksummed_file(tmp_path, monkeypatch)
    metadata = pq.ParquetFile(path).metadata
    chunk = metadata.row_group(1).column(0)
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    data = bytearray(path.read_bytes())
    data[start + chunk.total_compressed_size - 1] ^= 1  # The last byte of row group 1's first column.
    path.write_bytes(bytes(data))
    dataset = read_parquet_record(path)
    _assert_same_records([dataset[0], dataset[1], dataset[4], dataset[5]], [records[i] for i in (0, 1, 4, 5)])
    for index in (2, 3):
        with pytest.raises(ValueError, match=rf"'{path}': record {index} cannot be read \(row group 1: .*corrupt"):
            dataset[index]


def test_a_damaged_footer_names_the_file(tmp_path, monkeypatch):
    path, _ = _small_checksummed_file(tmp_path, monkeypatch)
    original = path.read_bytes()
    stored = pq.ParquetFile(path).metadata.metadata[b"tinax.records.checksums"]
    where = original.index(stored)
    mismatch = "(footer does not match its checksum|checksum entry is malformed)"
    for offset, bit, message in [
        (where + len(b'{"footer_sha256":"'), 0x01, mismatch),  # The footer's own digest.
        (where + len(stored) - 5, 0x01, mismatch),  # The last row group's digest.
        (where + len(stored) - 1, 0x01, "checksum entry is not JSON"),
        (original.index(b"tinax.records.checksums") + 20, 0x20, "a tinax header but no checksums"),
        # Without its header the file is a plain table, whose footer still fails its checksum.
        (original.index(b"tinax.records") + 2, 0x20, "is not a readable Parquet file: its footer does not match"),
        (len(original) - 5, 0x01, "not a readable Parquet file"),  # The trailer's magic.
        (1, 0x01, "does not start with the Parquet magic"),
    ]:
        data = bytearray(original)
        data[offset] ^= bit
        path.write_bytes(bytes(data))
        with pytest.raises(ValueError, match=rf"'{path}' .*{message}"):
            _read_all(path)


def test_plain_parquet_files_carry_the_checksums_and_a_damaged_footer_names_the_file(tmp_path):
    from tinax._data._compat02 import CorruptParquetError

    path, rows = _small_plain_file(tmp_path)
    original = path.read_bytes()
    # The columns, row groups and Arrow schema are pyarrow's write_table's, as tinax 0.2 wrote them.
    assert pq.read_schema(path).metadata is None
    assert _read_all(path) == rows
    assert _source(read_parquet_record(path)).checksummed
    stored = pq.ParquetFile(path).metadata.metadata[b"tinax.records.checksums"]
    for offset, bit, message in [
        (original.index(b"tinax.records.checksums") + 3, 0x01, "holds a tinax checksum entry that pyarrow does not"),
        (original.index(stored) + 30, 0x01, "footer does not match its checksum"),
        # Flips pyarrow reads without complaint: the Arrow schema's key (pyarrow then ignores the
        # schema), a column name ("vokens").
        (original.index(b"ARROW:schema") + 1, 0x01, "footer does not match its checksum"),
        (original.index(b"tokens"), 0x02, "footer does not match its checksum"),
    ]:
        data = bytearray(original)
        data[offset] ^= bit
        path.write_bytes(bytes(data))
        with pytest.raises(ValueError, match=rf"'{path}' is not a readable Parquet file: .*{message}"):
            _read_all(path)
    # A damaged page: its row group fails its digest, an OSError as pyarrow's errors for damaged pages are.
    path.write_bytes(original)
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(0)
    data = bytearray(original)
    data[chunk.data_page_offset + chunk.total_compressed_size - 1] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptParquetError, match=rf"'{path}': record 0 cannot be read \(row group 0: .*corrupt"):
        _read_all(path)


def test_page_checksums_of_other_writers_are_verified_and_files_without_them_read_as_before(tmp_path):
    from tinax._data._compat02 import CorruptParquetError

    rows = [{"id": index, "name": f"n{index % 2}", "values": [index, index + 1]} for index in range(5)]
    other = tmp_path / "other.parquet"
    pq.write_table(pa.Table.from_pylist(rows), other, write_page_checksum=True, compression="none")
    assert _read_all(other) == rows
    assert not _source(read_parquet_record(other)).checksummed  # No tinax checksums: pages only.
    metadata = pq.ParquetFile(other).metadata.row_group(0)
    original = other.read_bytes()
    for column in range(metadata.num_columns):
        chunk = metadata.column(column)
        start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
        # The last byte of each column chunk's last page, and the last value of a dictionary page.
        positions = [start + chunk.total_compressed_size - 1]
        if chunk.has_dictionary_page:
            positions.append(chunk.data_page_offset - 1)
        for position in positions:
            data = bytearray(original)
            data[position] ^= 0x01
            other.write_bytes(bytes(data))
            # pyarrow's OSError for a failed page checksum (so an OSError as in 0.2), and a ValueError.
            with pytest.raises(CorruptParquetError, match=rf"'{other}': record 0 cannot be read .*CRC"):
                _read_all(other)
    # A file without page checksums (as other tools and tinax 0.2 write them) reads as before.
    pq.write_table(pa.Table.from_pylist(rows), other)
    assert _read_all(other) == rows


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (b"{", "field metadata 'tinax.empty_shapes' is not JSON"),
        (b'{"fill": [4]}', "is malformed"),
        (b'{"fill": [-1], "rows": []}', "is malformed"),
        (b'{"fill": [4, 1], "rows": []}', "is malformed"),
        (b'{"fill": [true], "rows": []}', "is malformed"),
        (b'{"fill": [4], "rows": [[9, [0, 4]]]}', "is malformed"),  # Beyond the records.
        (b'{"fill": [4], "rows": [[1, [0, 4]], [0, [0, 4]]]}', "is malformed"),  # Not ascending.
        (b'{"fill": [4], "rows": [[0, [2, 4]]]}', "is malformed"),  # Nothing lost.
    ],
)
def test_malformed_empty_shapes_metadata_is_refused_naming_the_file(tmp_path, monkeypatch, entry, message):
    from tinax._data._records import _parquet_write

    monkeypatch.setattr(_parquet_write, "empty_shapes_entry", lambda shapes: entry)
    path = tmp_path / "d.parquet"
    write_parquet_record(path, [{"x": np.zeros((0, 4))}, {"x": np.zeros((2, 4))}])
    with pytest.raises(
        ValueError, match=rf"'{path}' is not a readable tinax Parquet record file: column 'x': .*{message}"
    ):
        read_parquet_record(path)


def test_a_listed_shape_that_contradicts_the_nested_lists_fails_at_its_record(tmp_path, monkeypatch):
    from tinax._data._records import _parquet_write

    monkeypatch.setattr(_parquet_write, "empty_shapes_entry", lambda shapes: b'{"fill":[0,0],"rows":[[1,[1,0,3]]]}')
    path = tmp_path / "d.parquet"
    write_parquet_record(path, [{"x": np.zeros((1, 1, 3))}, {"x": np.zeros((2, 0, 3))}])
    dataset = read_parquet_record(path)
    assert dataset[0]["x"].shape == (1, 1, 3)
    with pytest.raises(ValueError, match=rf"'{path}': record 1 is malformed \(column 'x': field 'x': the shape"):
        dataset[1]


# ---------------------------------------------------------------------------
# Hardening: seeded fuzzing of both readers

_FUZZ_MUTATIONS = 1000


def _mutate(data: bytes, rng: np.random.Generator) -> bytes:
    mutated = bytearray(data)
    kind = int(rng.integers(7))
    position = int(rng.integers(len(mutated)))
    if kind == 0:  # One bit.
        mutated[position] ^= 1 << int(rng.integers(8))
    elif kind == 1:  # A few random bytes.
        for _ in range(int(rng.integers(1, 9))):
            mutated[int(rng.integers(len(mutated)))] = int(rng.integers(256))
    elif kind == 2:  # A run of one extreme value (sizes and lengths become huge or zero).
        run = int(rng.integers(1, 17))
        mutated[position : position + run] = bytes([0xFF if rng.integers(2) else 0x00]) * run
    elif kind == 3:  # Truncation.
        del mutated[position:]
    elif kind == 4:  # Deletion.
        del mutated[position : position + int(rng.integers(1, 64))]
    elif kind == 5:  # Insertion.
        mutated[position:position] = rng.integers(256, size=int(rng.integers(1, 64)), dtype=np.uint8).tobytes()
    else:  # A copy of another region over this one.
        source = int(rng.integers(len(mutated)))
        run = int(rng.integers(1, 128))
        mutated[position : position + run] = mutated[source : source + run]
    return bytes(mutated)


def _fuzz_records() -> list[dict[str, Any]]:
    return [
        {
            "id": index,
            "score": index * 0.5,
            "flag": bool(index % 3),
            "name": "é" * index,
            "blob": bytes(range(index)),
            "nothing": None,
            "x": np.arange(index * 2, dtype=">f4").reshape(index, 2) if index else np.zeros((1, 2), ">f4"),
            "y": np.asarray(index, dtype=ml_dtypes.bfloat16),
            # The Arrow-native layouts: a tensor, nested lists, float pairs, raw bits.
            "t": np.full((2, 3), index, dtype=np.float32),
            "v": np.arange(index + 1, dtype=np.int16).reshape(1, -1),
            "c": np.asarray([index + 1j, -index], dtype=np.complex64),
            "f8": np.arange(index, dtype=np.float32).astype(ml_dtypes.float8_e4m3fn),
        }
        for index in range(8)
    ]


@pytest.mark.sweep
@pytest.mark.parametrize("name", ["parquet", "array_record"])
def test_seeded_mutations_give_only_documented_errors(tmp_path, monkeypatch, name):
    from tinax._data._records import _parquet_write

    container = _array_record_container() if name == "array_record" else _parquet_container()
    monkeypatch.setattr(_parquet_write, "_ROW_GROUP_MAX_ROWS", 3)
    path = tmp_path / f"original{container.suffix}"
    container.write(path, _fuzz_records())
    original = path.read_bytes()
    rng = np.random.default_rng(20261130)
    outcomes = {"refused": 0, "read": 0}
    changed_but_read, unnamed = [], []
    for mutation in range(_FUZZ_MUTATIONS):
        mutated = tmp_path / f"m{mutation % 2}{container.suffix}"
        data = _mutate(original, rng)
        mutated.write_bytes(data)
        try:
            dataset = container.read(mutated)
            for index in range(len(dataset)):
                dataset[index]
        except ValueError as error:
            # The documented type (UnreadableArrayRecordError, pyarrow's
            # ArrowInvalid and json's errors are ValueErrors), naming the file.
            if str(mutated) not in str(error) + "".join(getattr(error, "__notes__", [])):
                unnamed.append((mutation, str(error)))
            outcomes["refused"] += 1
        else:
            outcomes["read"] += 1
            if data != original:
                changed_but_read.append(mutation)
    assert sum(outcomes.values()) == _FUZZ_MUTATIONS
    assert unnamed == [], "every refusal names the file"
    assert outcomes["refused"] > 0
    if name == "parquet":
        # The checksums catch every change to a tinax-written Parquet file.
        assert changed_but_read == []


# ---------------------------------------------------------------------------
# Hardening: bool indices at the dataset level


def _plain_source_dataset(dataset: grain.MapDataset) -> grain.MapDataset:
    # grain's own dataset over the same source, as tinax 0.2's readers returned.
    return grain.MapDataset.source(_source(dataset))


@pytest.mark.parametrize("index", [True, False, np.bool_(True), np.bool_(False)])
def test_reader_datasets_refuse_bool_indices_that_grain_would_read_as_0_or_1(tmp_path, container, index):
    path = tmp_path / f"rows{container.suffix}"
    container.write(path, [{"id": value} for value in range(4)])
    dataset = container.read(path)
    with pytest.raises(TypeError, match=r"index must be an int, got (np\.)?(True|False)"):
        dataset[index]
    # grain reduces other indices modulo the length before the source sees
    # them, as before; ints of every kind read.
    assert [dataset[position] for position in (0, np.int64(3), np.uint16(1), -1)] == [
        {"id": 0},
        {"id": 3},
        {"id": 1},
        {"id": 3},
    ]
    # What grain reduces to a non-int the source still refuses.
    with pytest.raises(TypeError, match="index must be an int"):
        dataset[1.0]


def test_reader_datasets_behave_as_grains_own_and_pickle(tmp_path, container):
    import cloudpickle

    path = tmp_path / f"rows{container.suffix}"
    container.write(path, [{"id": value, "x": np.arange(value, value + 2)} for value in range(9)])
    dataset = container.read(path)
    plain = _plain_source_dataset(dataset)
    assert isinstance(dataset, grain.MapDataset)
    assert isinstance(dataset, type(plain)), "a subclass of grain's source dataset, not a wrapper around it"
    assert list(dataset.parents) == list(plain.parents) == []
    assert str(dataset) == str(plain)

    def ids(rows: Any) -> list[int]:
        return [row["id"] for row in rows]

    assert len(dataset) == 9
    assert ids(dataset) == ids(plain) == list(range(9))
    assert ids(dataset[2:7:2]) == ids(plain[2:7:2]) == [2, 4, 6]
    assert ids(dataset.slice(slice(-3, None))) == [6, 7, 8]
    assert ids(dataset.seed(3).shuffle()) == ids(plain.seed(3).shuffle())
    assert ids(dataset.shuffle(seed=5)) == ids(plain.shuffle(seed=5))
    assert list(dataset.map(lambda row: np.sum(row["x"]))) == [2 * value + 1 for value in range(9)]
    assert ids(dataset.to_iter_dataset()) == list(range(9))
    assert [ids(batch) for batch in dataset.batch(4, batch_fn=list)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
    # A sliced or transformed dataset reads with ints as grain always did.
    assert dataset[3:][0]["id"] == dataset[3]["id"] == 3
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        copy = loads(dumps(dataset))
        assert type(copy) is type(dataset)
        assert ids(copy) == list(range(9))
        assert ids(loads(dumps(dataset.shuffle(seed=5)))) == ids(plain.shuffle(seed=5))
        with pytest.raises(TypeError, match="index must be an int, got True"):
            copy[True]


def test_mutated_foreign_parquet_files_give_only_value_errors_naming_the_path(tmp_path):
    # Files of other tools carry no tinax checksums: a mutation may read as other values, but a
    # failure is always a ValueError naming the file, under both mappings, never pyarrow's error.
    tensor_type = pa.fixed_shape_tensor(pa.int16(), [2, 2])
    table = pa.table(
        {
            "id": pa.array(range(12), pa.int32()),
            "name": pa.array([f"n{index}" if index % 4 else None for index in range(12)]).dictionary_encode(),
            "tokens": pa.array([list(range(index % 5)) for index in range(12)], pa.list_(pa.int64())),
            "grid": pa.array([[[index, 1], [2, 3]] for index in range(12)], pa.list_(pa.list_(pa.float32()))),
            "tensor": pa.ExtensionArray.from_storage(
                tensor_type, pa.FixedSizeListArray.from_arrays(pa.array(np.arange(48, dtype=np.int16)), 4)
            ),
            "point": pa.array([{"x": index, "y": "a"} for index in range(12)]),
        }
    )
    original_path = tmp_path / "foreign.parquet"
    pq.write_table(table, original_path, row_group_size=5, compression="none")
    original = original_path.read_bytes()
    rng = np.random.default_rng(20261201)
    unnamed = []
    for mutation in range(300):
        mutated = tmp_path / f"m{mutation % 2}.parquet"
        mutated.write_bytes(_mutate(original, rng))
        for mapping in ("python", "numpy"):
            try:
                dataset = read_parquet_record(mutated, mapping=mapping)
                for index in range(len(dataset)):
                    dataset[index]
            except ValueError as error:
                if str(mutated) not in str(error):
                    unnamed.append(f"{mutation}/{mapping}: {error!r}")
                if isinstance(error, pa.ArrowException) and not isinstance(error, pa.ArrowInvalid):
                    unnamed.append(f"{mutation}/{mapping}: pyarrow's own {error!r}")
            except OSError as error:
                # The corrupt-footer error is an OSError and a ValueError at once.
                if not isinstance(error, ValueError) or str(mutated) not in str(error):
                    unnamed.append(f"{mutation}/{mapping}: {error!r}")
    assert not unnamed, "\n".join(unnamed[:10])
