"""write_parquet_record builds columns in bulk and writes the files the record-by-record writer wrote.

``_record_by_record`` below is the writer as it was before it checked each
record once and converted whole columns: every record through
``RecordSchema.checked_values`` and ``encode_parts``, each row group closed
at the record that fills it, each column built from a list of per-record
values. Files written both ways must be the same bytes (schema, field
metadata, header, checksums, row groups, pages). The tests also pin the
errors for bad records (pyarrow's refusal with a note naming the record and
field, raised before the destination is looked at), the row-group
boundaries and the progress counts. Nothing here is timed.
"""

from __future__ import annotations

import collections.abc
import hashlib
import math
import pathlib
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tinax._data._records import _parquet_write
from tinax._data._records._record_codec import KIND_ARRAY, KIND_NONE, KIND_STR, RecordHeader, RecordSchema
from tinax.data import read_parquet_record, write_parquet_record

# --------------------------------------------------------------------------------------------------
# The reference: the record-by-record writer


def _record_by_record(path: pathlib.Path, records: Sequence[Mapping[str, Any]]) -> None:
    """Writes records in the tinax format one record at a time, as write_parquet_record used to."""
    schema = RecordSchema.from_first_record(records[0])
    values = [schema.checked_values(record, index) for index, record in enumerate(records)]
    fixed_shapes: dict[str, tuple[int, ...] | None] = {}
    empty_shapes: dict[str, bytes] = {}
    for field in schema.fields:
        if field.kind != KIND_ARRAY:
            continue
        shapes = [tuple(record[field.name].shape) for record in records]
        if math.prod(shapes[0]) > 0 and shapes.count(shapes[0]) == len(shapes):
            fixed_shapes[field.name] = shapes[0]
            continue
        fixed_shapes[field.name] = None
        entry = _parquet_write.empty_shapes_entry(shapes)
        if entry is not None:
            empty_shapes[field.name] = entry
    arrow_schema = _parquet_write._native_arrow_schema(schema, fixed_shapes, empty_shapes)
    plain = [field.name for field in schema.fields if field.kind != KIND_ARRAY]
    digest = hashlib.sha256()
    groups = 0
    with pq.ParquetWriter(path, arrow_schema, write_page_checksum=True, use_dictionary=plain) as writer:
        pending: list[list[Any]] = []
        pending_bytes = 0
        for row in values:
            for part in schema.encode_parts(row):
                digest.update(part)
            pending.append(row)
            pending_bytes += _parquet_write._stored_size(schema, row)
            if (
                pending_bytes >= _parquet_write._ROW_GROUP_TARGET_BYTES
                or len(pending) >= _parquet_write._ROW_GROUP_MAX_ROWS
            ):
                writer.write_table(_table_of_rows(schema, arrow_schema, pending), row_group_size=len(pending))
                groups += 1
                pending, pending_bytes = [], 0
        if pending:
            writer.write_table(_table_of_rows(schema, arrow_schema, pending), row_group_size=len(pending))
            groups += 1
        header = RecordHeader(schema, len(records), digest.hexdigest())
        placeholder = _parquet_write._checksum_value(
            _parquet_write._ZERO_DIGEST, [_parquet_write._ZERO_DIGEST] * groups
        )
        writer.add_key_value_metadata(
            {_parquet_write.METADATA_KEY: header.to_json_bytes(), _parquet_write.CHECKSUM_KEY: placeholder}
        )
    _parquet_write.seal_checksums(path)


def _table_of_rows(schema: RecordSchema, arrow_schema: pa.Schema, rows: list[list[Any]]) -> pa.Table:
    columns = []
    for position, field in enumerate(schema.fields):
        values = [row[position] for row in rows]
        arrow_type = arrow_schema.field(position).type
        if field.kind == KIND_NONE:
            columns.append(pa.nulls(len(values)))
        elif field.kind == KIND_STR:
            columns.append(pa.array(values, pa.large_binary()).view(pa.large_string()))
        elif field.kind == KIND_ARRAY:
            assert field.dtype is not None
            storage = _parquet_write._storage(field.dtype)
            stored = [_parquet_write._to_storage(array, storage) for array in values]
            if isinstance(arrow_type, pa.FixedShapeTensorType):
                flat = pa.array(np.stack(stored).reshape(-1))
                size = int(np.prod(arrow_type.shape, dtype=np.int64))
                tensors = pa.FixedSizeListArray.from_arrays(flat, size)
                columns.append(pa.ExtensionArray.from_storage(arrow_type, tensors))
            elif not pa.types.is_large_list(arrow_type):
                flat_values = np.asarray([array.reshape(()) for array in stored], storage.dtype).reshape(-1)
                columns.append(pa.array(flat_values, arrow_type))
            else:
                columns.append(_parquet_write._array_column(arrow_type, storage, values))
        else:
            columns.append(pa.array(values, arrow_type))
    return pa.Table.from_arrays(columns, schema=arrow_schema)


# --------------------------------------------------------------------------------------------------
# Records


class _ReadOnlyMapping(collections.abc.Mapping[str, Any]):
    def __init__(self, items: dict[str, Any]) -> None:
        self._items = items

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Any:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


class _DictSubclass(dict):  # type: ignore[type-arg]
    pass


def _blocks(count: int, shape: tuple[int, ...], dtype: Any, seed: int = 0) -> np.ndarray[Any, Any]:
    values = np.random.default_rng(seed).standard_normal((count, *shape)) * 7
    try:
        limits = ml_dtypes.iinfo(dtype)
    except ValueError:
        limits = None
    if limits is not None:
        # Integers within range: newer NumPy warns of a cast that overflows, which the suite makes an error.
        values = np.clip(np.round(values), limits.min, limits.max)
    return values.astype(dtype)


def _int_labels() -> list[dict[str, Any]]:
    x = _blocks(300, (4, 4), np.float32)
    return [{"id": index, "label": index % 10, "x": x[index]} for index in range(300)]


def _str_labels_of_varying_length() -> list[dict[str, Any]]:
    x = _blocks(200, (4, 4), np.float32)
    return [{"id": index, "label": "l" * (index % 7), "x": x[index]} for index in range(200)]


def _str_labels_of_one_length() -> list[dict[str, Any]]:
    x = _blocks(200, (4, 4), np.float32)
    return [{"label": f"l{index % 10}", "x": x[index]} for index in range(200)]


def _non_ascii_text() -> list[dict[str, Any]]:
    x = _blocks(60, (2, 2), np.float64)
    return [{"text": "é" * (index % 3) + "\N{GRINNING FACE}" * (index % 2), "x": x[index]} for index in range(60)]


def _every_plain_kind() -> list[dict[str, Any]]:
    x = _blocks(90, (3, 2), np.int16)
    floats = [float("nan"), -0.0, float("inf"), 1.5, 1e-310]
    return [
        {
            "none": None,
            "flag": bool(index % 2),
            "score": floats[index % 5],
            "blob": bytes(range(index % 6)),
            "id": [2**63 - 1, -(2**63), 0][index % 3],
            "x": x[index],
        }
        for index in range(90)
    ]


_ARRAY_DTYPES = {
    "big_endian_float32": ">f4",
    "complex64": "<c8",
    "big_endian_complex128": ">c16",
    "bfloat16": ml_dtypes.bfloat16,
    "int4": ml_dtypes.int4,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "bool": np.bool_,
    "uint16": np.uint16,
    "big_endian_int64": ">i8",
}


def _arrays_of(dtype: Any) -> Callable[[], list[dict[str, Any]]]:
    def records() -> list[dict[str, Any]]:
        x = _blocks(50, (3, 2, 2), dtype)
        return [{"id": index, "x": x[index]} for index in range(50)]

    return records


def _zero_dimensional() -> list[dict[str, Any]]:
    return [{"v": np.asarray(np.float32(index)), "w": np.asarray(np.complex64(index + 1j))} for index in range(40)]


def _ragged() -> list[dict[str, Any]]:
    return [
        {"tokens": np.arange(index % 9, dtype=np.int32), "grid": np.ones((index % 4, 3), np.float32), "t": "x" * index}
        for index in range(120)
    ]


def _zero_extents() -> list[dict[str, Any]]:
    shapes = [(0, 4), (3, 0), (2, 2), (0, 0), (0, 5), (1, 3)] * 10
    return [{"a": np.zeros(shape, np.float64)} for shape in shapes]


def _no_elements_at_all() -> list[dict[str, Any]]:
    return [{"a": np.zeros((0, 4, 2), np.float32)} for _ in range(20)]


def _large_arrays() -> list[dict[str, Any]]:
    # 16 KiB an array: the byte target, not the row count, closes each row group.
    x = _blocks(150, (64, 64), np.float32)
    return [{"id": index, "x": x[index]} for index in range(150)]


def _large_ragged_arrays() -> list[dict[str, Any]]:
    x = _blocks(150, (64, 64), np.float32)
    return [{"id": index, "x": x[index][: 1 + index % 64]} for index in range(150)]


def _non_contiguous() -> list[dict[str, Any]]:
    x = _blocks(60, (4, 6), np.float32)
    return [{"t": x[index].T, "strided": x[index][:, ::2]} for index in range(60)]


def _mapping_records() -> list[Any]:
    x = _blocks(60, (2, 3), np.float32)
    return [_ReadOnlyMapping({"id": index, "x": x[index]}) for index in range(60)]


def _dict_subclass_records() -> list[Any]:
    x = _blocks(60, (2, 3), np.float32)
    return [_DictSubclass(id=index, x=x[index]) for index in range(60)]


def _tuple_of_records() -> tuple[dict[str, Any], ...]:
    x = _blocks(60, (2, 3), np.float32)
    return tuple({"id": index, "x": x[index]} for index in range(60))


def _one_odd_record_among_dicts() -> list[Any]:
    # One mapping that is not a dict: its check slice goes record by record, the others do not.
    records: list[Any] = _int_labels()
    records[150] = _ReadOnlyMapping(records[150])
    return records


def _one_record() -> list[dict[str, Any]]:
    return [{"x": np.arange(6, dtype=np.float32).reshape(2, 3)}]


def _varying_first_extent() -> list[dict[str, Any]]:
    # Two-dimensional arrays whose shapes differ: nested-list columns, not tensors.
    return [{"a": np.zeros((2, 2))}, {"a": np.ones((3, 2))}]


_TINAX_FORMAT = {
    "int_labels": _int_labels,
    "str_labels_of_varying_length": _str_labels_of_varying_length,
    "str_labels_of_one_length": _str_labels_of_one_length,
    "non_ascii_text": _non_ascii_text,
    "every_plain_kind": _every_plain_kind,
    **{f"arrays_{name}": _arrays_of(dtype) for name, dtype in _ARRAY_DTYPES.items()},
    "zero_dimensional": _zero_dimensional,
    "ragged": _ragged,
    "zero_extents": _zero_extents,
    "no_elements_at_all": _no_elements_at_all,
    "large_arrays": _large_arrays,
    "large_ragged_arrays": _large_ragged_arrays,
    "non_contiguous": _non_contiguous,
    "mapping_records": _mapping_records,
    "dict_subclass_records": _dict_subclass_records,
    "tuple_of_records": _tuple_of_records,
    "one_odd_record_among_dicts": _one_odd_record_among_dicts,
    "one_record": _one_record,
    "varying_first_extent": _varying_first_extent,
}


@pytest.fixture(params=[7, 1 << 16], ids=["check_slices_of_7", "default_check_slices"])
def check_chunk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Runs a test with the records checked 7 at a time as well as in the default slices."""
    monkeypatch.setattr(_parquet_write, "_CHECK_CHUNK", request.param)
    return int(request.param)


# --------------------------------------------------------------------------------------------------
# Same bytes


@pytest.mark.parametrize("make_records", _TINAX_FORMAT.values(), ids=_TINAX_FORMAT.keys())
def test_tinax_format_files_are_the_bytes_the_record_by_record_writer_wrote(
    make_records: Callable[[], Sequence[Mapping[str, Any]]],
    check_chunk: int,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: pathlib.Path,
) -> None:
    # Row groups of at most 64 rows, so most inputs span several.
    monkeypatch.setattr(_parquet_write, "_ROW_GROUP_MAX_ROWS", 64)
    records = make_records()
    write_parquet_record(tmp_path / "bulk.parquet", records)
    _record_by_record(tmp_path / "reference.parquet", records)
    assert (tmp_path / "bulk.parquet").read_bytes() == (tmp_path / "reference.parquet").read_bytes()


def test_a_memmap_in_a_later_check_slice_is_written_as_an_array(check_chunk: int, tmp_path: pathlib.Path) -> None:
    x = _blocks(40, (4, 4), np.float32)
    mapped = np.memmap(tmp_path / "x.bin", dtype=np.float32, mode="w+", shape=(40, 4, 4))
    mapped[:] = x
    records = [{"id": index, "x": x[index] if index < 30 else mapped[index]} for index in range(40)]
    write_parquet_record(tmp_path / "bulk.parquet", records)
    _record_by_record(tmp_path / "reference.parquet", records)
    assert (tmp_path / "bulk.parquet").read_bytes() == (tmp_path / "reference.parquet").read_bytes()
    del mapped


def test_the_default_row_groups_hold_4096_records_of_small_arrays(tmp_path: pathlib.Path) -> None:
    x = _blocks(9000, (4, 4), np.float32)
    records = [{"id": index, "label": index % 10, "x": x[index]} for index in range(9000)]
    write_parquet_record(tmp_path / "bulk.parquet", records)
    _record_by_record(tmp_path / "reference.parquet", records)
    metadata = pq.ParquetFile(tmp_path / "bulk.parquet").metadata
    assert [metadata.row_group(group).num_rows for group in range(metadata.num_row_groups)] == [4096, 4096, 808]
    assert (tmp_path / "bulk.parquet").read_bytes() == (tmp_path / "reference.parquet").read_bytes()


def test_row_groups_close_at_the_record_that_reaches_the_byte_target(tmp_path: pathlib.Path) -> None:
    # Each record stores 8 + 16 + 64 * 64 * 4 bytes, so the 64th reaches 1 MiB and closes its row group.
    records = _large_arrays()
    write_parquet_record(tmp_path / "bulk.parquet", records)
    metadata = pq.ParquetFile(tmp_path / "bulk.parquet").metadata
    rows = [metadata.row_group(group).num_rows for group in range(metadata.num_row_groups)]
    assert rows == [64, 64, 22]


@pytest.mark.parametrize("max_rows", [1, 2, 3, 5, 64, 4096])
def test_row_group_boundaries_follow_bytes_and_rows_across_check_slices(
    max_rows: int, check_chunk: int, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.setattr(_parquet_write, "_ROW_GROUP_MAX_ROWS", max_rows)
    monkeypatch.setattr(_parquet_write, "_ROW_GROUP_TARGET_BYTES", 300)
    # Records of 8 + 8 + 16 + 4 * extent bytes: the byte target closes groups after a varying count.
    records = [{"id": index, "x": np.ones((1, index % 23), np.float32)} for index in range(200)]
    write_parquet_record(tmp_path / "bulk.parquet", records)
    _record_by_record(tmp_path / "reference.parquet", records)
    assert (tmp_path / "bulk.parquet").read_bytes() == (tmp_path / "reference.parquet").read_bytes()


@pytest.mark.parametrize(
    "records",
    [
        [
            {"id": index, "label": f"label-{index % 10}", "x": np.arange(index % 5, dtype=np.float32)}
            for index in range(50)
        ],
        [{"a": 1, "b": 2.5}, {"a": 3}, {"a": None, "b": 1.0}],
        [{"i": index, "l": [index, index + 1], "d": {"k": index}} for index in range(20)],
        [_ReadOnlyMapping({"a": index}) for index in range(10)],
        tuple({"a": index} for index in range(10)),
        [{"a": np.float32(1.5)}],
    ],
    ids=["one_dimensional_arrays", "missing_fields", "nested", "mappings", "tuple", "numpy_scalar"],
)
def test_plain_tables_are_the_bytes_of_pyarrows_conversion(records: Any, tmp_path: pathlib.Path) -> None:
    write_parquet_record(tmp_path / "plain.parquet", records)
    table = pa.Table.from_pylist([dict(record) for record in records])
    _parquet_write._write_plain_table(tmp_path / "reference.parquet", table, overwrite=True, reporter=_NoReporter())
    assert (tmp_path / "plain.parquet").read_bytes() == (tmp_path / "reference.parquet").read_bytes()
    assert _parquet_write.METADATA_KEY not in pq.ParquetFile(tmp_path / "plain.parquet").metadata.metadata


class _NoReporter:
    def advance(self, rows: int) -> None:
        pass


def test_records_read_back_equal_what_was_written(tmp_path: pathlib.Path) -> None:
    records = _every_plain_kind() + _every_plain_kind()[:5]
    write_parquet_record(tmp_path / "records.parquet", records)
    dataset = read_parquet_record(tmp_path / "records.parquet")
    for index, record in enumerate(records):
        read = dataset[index]
        assert list(read) == list(record)
        for name, value in record.items():
            if isinstance(value, np.ndarray):
                assert read[name].dtype == value.dtype
                np.testing.assert_array_equal(read[name], value)
            elif isinstance(value, float) and math.isnan(value):
                assert math.isnan(read[name])
            else:
                assert read[name] == value
                assert type(read[name]) is type(value)


# --------------------------------------------------------------------------------------------------
# Bad records


def _with_bad_record(bad: Mapping[str, Any], index: int = 37, count: int = 50) -> list[Any]:
    x = _blocks(count, (4, 4), np.float32)
    records: list[Any] = [{"id": position, "label": "a", "x": x[position]} for position in range(count)]
    records[index] = bad
    return records


_X = np.zeros((4, 4), np.float32)
_BAD_RECORDS = {
    "float64_array": ({"id": 1, "label": "a", "x": _X.astype(np.float64)}, "'x'"),
    "one_dimensional_array": ({"id": 1, "label": "a", "x": _X[0]}, "'x'"),
    "missing_field": ({"id": 1, "x": _X}, "'label'"),
    "extra_field": ({"id": 1, "label": "a", "x": _X, "z": 0}, "'z'"),
    "bool_for_int": ({"id": True, "label": "a", "x": _X}, "'id'"),
    "int_past_64_bits": ({"id": 2**63, "label": "a", "x": _X}, "'id'"),
    "numpy_scalar": ({"id": np.int64(1), "label": "a", "x": _X}, "'id'"),
    "list_for_array": ({"id": 1, "label": "a", "x": [[0.0] * 4] * 4}, "'x'"),
    "lone_surrogate": ({"id": 1, "label": "\ud800", "x": _X}, "'label'"),
    "bytes_for_str": ({"id": 1, "label": b"a", "x": _X}, "'label'"),
    "masked_array": ({"id": 1, "label": "a", "x": np.ma.masked_array(_X)}, "'x'"),
    "object_array": ({"id": 1, "label": "a", "x": np.full((4, 4), None)}, "'x'"),
    "non_str_key": ({"id": 1, "label": "a", "x": _X, 0: 1}, "keys of records[37]"),
}


@pytest.mark.parametrize(("bad", "field"), _BAD_RECORDS.values(), ids=_BAD_RECORDS.keys())
def test_a_bad_record_raises_pyarrows_refusal_naming_the_record_and_field(
    bad: Mapping[str, Any], field: str, check_chunk: int, tmp_path: pathlib.Path
) -> None:
    records = _with_bad_record(bad)
    try:
        pa.Table.from_pylist(records)
    except Exception as error:  # Whatever pyarrow raises for these records (ArrowInvalid, OverflowError, ...).
        pyarrows = error
    with pytest.raises(type(pyarrows)) as raised:
        write_parquet_record(tmp_path / "bad.parquet", records)
    assert type(raised.value) is type(pyarrows)
    assert str(raised.value) == str(pyarrows)
    notes = " ".join(getattr(raised.value, "__notes__", []))
    assert "records[37]" in notes
    assert field in notes
    assert not (tmp_path / "bad.parquet").exists()


def test_the_first_bad_record_is_the_one_named(check_chunk: int, tmp_path: pathlib.Path) -> None:
    records = _with_bad_record({"id": 1, "label": "a", "x": _X[0]}, index=12)
    records[40] = {"id": 1, "label": "a", "x": _X.astype(np.float64)}
    with pytest.raises(pa.ArrowInvalid) as raised:
        write_parquet_record(tmp_path / "bad.parquet", records)
    notes = " ".join(raised.value.__notes__)
    assert "records[12]['x']" in notes
    assert "records[40]" not in notes


@pytest.mark.parametrize("where", ["missing_folder", "existing_file_kept"])
def test_a_bad_record_is_refused_before_the_destination_is_looked_at(where: str, tmp_path: pathlib.Path) -> None:
    records = _with_bad_record({"id": 1, "label": "a", "x": _X[0]})
    if where == "missing_folder":
        path, overwrite = tmp_path / "missing" / "bad.parquet", True
    else:
        path, overwrite = tmp_path / "bad.parquet", False
        path.write_bytes(b"kept")
    with pytest.raises(pa.ArrowInvalid):
        write_parquet_record(path, records, overwrite=overwrite)
    if where == "existing_file_kept":
        assert path.read_bytes() == b"kept"


def test_a_file_is_replaced_only_once_every_row_group_is_written(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.setattr(_parquet_write, "_ROW_GROUP_MAX_ROWS", 16)
    path = tmp_path / "records.parquet"
    path.write_bytes(b"before")
    seen: list[int] = []

    def progress(done: int, total: int) -> None:
        seen.append(done)
        assert path.read_bytes() == b"before"
        if done == 48:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_parquet_record(path, _int_labels(), progress=progress)
    assert seen == [0, 16, 32, 48]
    assert path.read_bytes() == b"before"
    assert sorted(file.name for file in tmp_path.iterdir()) == ["records.parquet"]


def test_progress_counts_rows_row_group_by_row_group_and_no_thread_is_left(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.setattr(_parquet_write, "_ROW_GROUP_MAX_ROWS", 128)
    threads = set(threading.enumerate())
    seen: list[tuple[int, int]] = []
    write_parquet_record(
        tmp_path / "records.parquet", _int_labels(), progress=lambda done, total: seen.append((done, total))
    )
    assert seen == [(0, 300), (128, 300), (256, 300), (300, 300)]
    assert set(threading.enumerate()) <= threads
