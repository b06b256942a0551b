"""ArrayRecord reads of many records at once, and the writer's bytes.

A batch of records read with one array-record call and decoded together
must be, record for record, what indexing gives: the same types, dtypes,
values and errors. The writer's output must stay the bytes earlier versions
wrote: the digests below were taken from the writer before batched
encoding, over the records these tests build.
"""

from __future__ import annotations

import hashlib
import json
import math
import pathlib
import random
from typing import Any

import grain
import ml_dtypes
import numpy as np
import pytest

from tinax.data import evaluation_batches, read_array_record, training_batches, write_array_record

array_record_module = pytest.importorskip(
    "array_record.python.array_record_module",
    reason='array-record is not installed (the tinax-data "arrayrecord" extra)',
)

# SHA-256 of every stored record (the tinax header included), concatenated,
# as the writer before batched encoding stored them.
_TINAX_RECORDS_SHA256 = "9c1488476cae0a304d4d9f73079d054ee5ed17fb9f214cb2ae8db8310eecee7f"
_RAGGED_RECORDS_SHA256 = "8f78600c78387f90227c0b6622f5c3be4b3875b20a516f927660cc31d6910433"


def _tinax_records(count: int = 150) -> list[dict[str, Any]]:
    rng = np.random.default_rng(3)
    records = []
    for index in range(count):
        grid = rng.standard_normal((3, 4))
        records.append(
            {
                "nothing": None,
                "flag": index % 3 == 0,
                "id": (-1) ** index * index * 2**40,
                "score": index / 7 if index % 11 else -math.inf,
                "name": "ünïcode-" * (index % 4) + str(index),
                "blob": bytes(range(index % 9)),
                "image": rng.integers(0, 255, (2, 3, 2), dtype=np.uint8),
                "wide": grid.astype(">f8"),
                "strided": grid.T.astype(np.float32),  # not C-contiguous before it is written
                "scalar": np.asarray(index, np.int64),
                "half": np.arange(4, dtype=ml_dtypes.bfloat16) + index,
                "nibbles": np.arange(-2, 3, dtype=ml_dtypes.int4),
                "complex": np.full(2, index + 1j, np.complex64),
                "empty": np.zeros((0, 3), np.int16),
                "mask": np.arange(5) % (index % 3 + 1) == 0,
            }
        )
    return records


def _ragged_records(count: int = 120) -> list[dict[str, Any]]:
    # Token sequences of different lengths, some empty; a label after them.
    rng = np.random.default_rng(5)
    return [
        {
            "tokens": rng.integers(0, 30_000, index % 17, dtype=np.int32),
            "patch": rng.standard_normal((index % 3, 2)).astype(np.float16),
            "label": f"class-{index % 5}",
        }
        for index in range(count)
    ]


def _json_records(count: int = 150) -> list[Any]:
    return [
        {"id": index, "name": f"név-{index}", "score": index / 3, "tags": ["a", index], "flag": None}
        if index % 7
        else [index, "a list record"]
        for index in range(count)
    ]


def _assert_same_record(actual: Any, expected: Any) -> None:
    assert type(actual) is type(expected)
    if isinstance(expected, dict):
        assert list(actual) == list(expected)
        for name in expected:
            _assert_same_record(actual[name], expected[name])
    elif isinstance(expected, np.ndarray):
        assert actual.dtype == expected.dtype
        assert actual.dtype.str == expected.dtype.str
        assert actual.shape == expected.shape
        assert actual.tobytes() == expected.tobytes()
        assert actual.flags.owndata
        assert actual.flags.writeable
        assert actual.flags.c_contiguous
        assert actual.flags.aligned
    elif isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(actual)
    else:
        assert actual == expected


def _assert_same_records(actual: list[Any], expected: list[Any]) -> None:
    assert len(actual) == len(expected)
    for one, other in zip(actual, expected, strict=True):
        _assert_same_record(one, other)


def _stored_records_sha256(path: pathlib.Path) -> str:
    reader = array_record_module.ArrayRecordReader(str(path))
    digest = hashlib.sha256()
    for record in reader.read(0, reader.num_records()):
        digest.update(record)
    reader.close()
    return digest.hexdigest()


def _raw_copy(path: pathlib.Path, group_size: int) -> bytes:
    """The file array-record's own writer writes from the records stored in ``path``."""
    reader = array_record_module.ArrayRecordReader(str(path))
    stored = reader.read(0, reader.num_records())
    reader.close()
    copy = path.with_suffix(".copy")
    writer = array_record_module.ArrayRecordWriter(str(copy), f"group_size:{group_size}")
    for record in stored:
        writer.write(record)
    writer.close()
    return copy.read_bytes()


@pytest.fixture(params=["tinax", "ragged", "json"])
def written(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> pathlib.Path:
    records = {"tinax": _tinax_records, "ragged": _ragged_records, "json": _json_records}[request.param]()
    path = tmp_path / f"{request.param}.array_record"
    write_array_record(path, records)
    return path


def test_a_batch_read_gives_the_records_indexing_gives_in_any_order(written):
    dataset = read_array_record(written)
    source = dataset.record_source
    one_by_one = [dataset[index] for index in range(len(dataset))]
    in_order = list(range(len(dataset)))
    shuffled = random.Random(0).sample(in_order, len(in_order))
    repeated_and_negative = [3, 3, -1, 0, -len(dataset), 7, 5, 6]
    _assert_same_records(source._getitems(in_order), one_by_one)
    _assert_same_records(source._getitems(in_order[10:40]), one_by_one[10:40])
    _assert_same_records(source._getitems(shuffled), [one_by_one[index] for index in shuffled])
    _assert_same_records(
        source._getitems(repeated_and_negative), [one_by_one[index] for index in repeated_and_negative]
    )
    _assert_same_records(source._getitems([np.int64(2), 4]), [one_by_one[2], one_by_one[4]])
    assert source._getitems([]) == []


def test_tinax_records_read_in_batches_are_what_was_written(tmp_path):
    records = _tinax_records()
    path = tmp_path / "arrays.array_record"
    write_array_record(path, records)
    read = read_array_record(path).record_source._getitems(list(range(len(records))))
    expected = [{**record, "strided": np.ascontiguousarray(record["strided"])} for record in records]
    _assert_same_records(read, expected)


def test_plain_iteration_reads_what_indexing_reads(written):
    dataset = read_array_record(written)
    _assert_same_records(list(dataset), [dataset[index] for index in range(len(dataset))])


def _rows(rows: list[Any]) -> list[Any]:
    return rows


def _stacked(rows: list[Any]) -> dict[str, Any]:
    # By field, as a stacking batch function gathers them; JSON files mix in rows that are lists.
    if not all(isinstance(row, dict) for row in rows):
        return {"rows": rows}
    return {name: [row[name] for row in rows] for name in rows[0]}


class _RowByRow:
    """The same records, read by indexing one at a time (no batched read)."""

    def __init__(self, dataset: grain.MapDataset) -> None:
        self._dataset = dataset

    def __len__(self) -> int:
        return len(self._dataset)

    def __getitem__(self, index: int) -> Any:
        return self._dataset[index]


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("batch_size", [1, 16, 50])
def test_training_batches_are_those_of_reading_row_by_row(written, shuffle, batch_size):
    dataset = read_array_record(written)
    row_by_row = grain.MapDataset.source(_RowByRow(dataset))
    one_process = grain.sharding.ShardOptions(0, 1, drop_remainder=True)
    settings = {"shard_options": one_process, "seed": 4, "shuffle": shuffle, "num_epochs": 2}
    ours = training_batches(dataset, batch_size=batch_size, batch_fn=_rows, **settings)
    theirs = training_batches(row_by_row, batch_size=batch_size, batch_fn=_rows, **settings)
    assert len(ours) == len(theirs)
    for batch, expected in zip(ours, theirs, strict=True):
        _assert_same_records(batch, expected)


@pytest.mark.parametrize("batch_size", [1, 16, 64])
def test_evaluation_batches_are_those_of_reading_row_by_row(written, batch_size):
    dataset = read_array_record(written)
    row_by_row = grain.MapDataset.source(_RowByRow(dataset))
    for shard_index in range(2):
        shard = grain.sharding.ShardOptions(shard_index, 2)
        ours = list(evaluation_batches(dataset, shard_options=shard, batch_size=batch_size, batch_fn=_rows))
        theirs = list(evaluation_batches(row_by_row, shard_options=shard, batch_size=batch_size, batch_fn=_rows))
        assert len(ours) == len(theirs)
        for batch, expected in zip(ours, theirs, strict=True):
            _assert_same_records(batch, expected)


def test_training_batches_stacked_by_field_match_row_by_row(written):
    dataset = read_array_record(written)
    row_by_row = grain.MapDataset.source(_RowByRow(dataset))
    one_process = grain.sharding.ShardOptions(0, 1, drop_remainder=True)
    settings = {"shard_options": one_process, "seed": 1, "shuffle": True, "num_epochs": 1, "batch_size": 32}
    ours = list(training_batches(dataset, batch_fn=_stacked, **settings))
    theirs = list(training_batches(row_by_row, batch_fn=_stacked, **settings))
    for batch, expected in zip(ours, theirs, strict=True):
        assert list(batch) == list(expected)
        for name in expected:
            _assert_same_records(batch[name], expected[name])


# ---------------------------------------------------------------------------
# Damaged records


def _crafted(path: pathlib.Path, records: list[bytes], fields: list[dict[str, Any]]) -> None:
    header = {
        "format": "tinax-records",
        "version": 1,
        "count": len(records),
        "content_sha256": "0" * 64,
        "fields": fields,
    }
    writer = array_record_module.ArrayRecordWriter(str(path), "group_size:1")
    for record in [*records, b"tinax-records\n" + json.dumps(header).encode()]:
        writer.write(record)
    writer.close()


def _good(index: int) -> bytes:
    # Fields id (int), name (str), x (1-d float32 of 2 elements).
    name = f"n{index}".encode()
    x = np.arange(2, dtype="<f4") + index
    return (
        index.to_bytes(8, "little", signed=True)
        + len(name).to_bytes(8, "little")
        + name
        + (2).to_bytes(8, "little")
        + x.tobytes()
    )


_FIELDS = [
    {"name": "id", "kind": "int"},
    {"name": "name", "kind": "str"},
    {"name": "x", "kind": "array", "dtype": "<f4", "ndim": 1},
]


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: data[:5], id="cut-inside-the-int"),
        pytest.param(lambda data: data[:20], id="cut-inside-the-str"),
        pytest.param(lambda data: data[:-3], id="cut-inside-the-array"),
        pytest.param(lambda data: data + b"\x00", id="a-byte-too-many"),
        pytest.param(lambda data: data[:8] + (2**63).to_bytes(8, "little") + data[16:], id="a-huge-str-length"),
        pytest.param(lambda data: data[:8] + data[8:16] + b"\xff\xfe" + data[18:], id="not-utf-8"),
        pytest.param(lambda data: data[:-16] + (2**62).to_bytes(8, "little") + data[-8:], id="a-huge-extent"),
    ],
)
def test_a_damaged_record_in_a_batch_fails_as_indexing_it_fails(tmp_path, damage):
    path = tmp_path / "damaged.array_record"
    records = [_good(index) for index in range(10)]
    records[6] = damage(records[6])
    _crafted(path, records, _FIELDS)
    dataset = read_array_record(path)
    assert dataset[5] == {"id": 5, "name": "n5", "x": pytest.approx(np.arange(2) + 5)}
    with pytest.raises(ValueError, match=rf"'{path}': record 6 is malformed") as by_index:
        dataset[6]
    for indices in (list(range(10)), [9, 6, 1], [6]):
        with pytest.raises(type(by_index.value), match=rf"'{path}': record 6 is malformed") as in_batch:
            dataset.record_source._getitems(indices)
        assert str(in_batch.value) == str(by_index.value)


def test_a_record_that_is_not_json_in_a_batch_fails_as_indexing_it_fails(tmp_path):
    path = tmp_path / "json.array_record"
    writer = array_record_module.ArrayRecordWriter(str(path), "group_size:1")
    for record in [b'{"id": 0}', b'{"id": 1}', b"{not json", b'{"id": 3}']:
        writer.write(record)
    writer.close()
    dataset = read_array_record(path)
    with pytest.raises(json.JSONDecodeError) as by_index:
        dataset[2]
    with pytest.raises(json.JSONDecodeError, match=rf"'{path}': record 2 is neither") as in_batch:
        dataset.record_source._getitems([0, 1, 2, 3])
    assert type(in_batch.value) is type(by_index.value)
    assert str(in_batch.value) == str(by_index.value)
    assert in_batch.value.__notes__ == by_index.value.__notes__


def _refuse_odd(data: bytes) -> Any:
    value = json.loads(data)
    if value["id"] % 2:
        raise KeyError("odd")
    return value


def test_a_decode_failure_in_a_batch_fails_as_indexing_it_fails(tmp_path):
    path = tmp_path / "other.array_record"
    writer = array_record_module.ArrayRecordWriter(str(path), "group_size:1")
    for index in range(4):
        writer.write(json.dumps({"id": index}).encode())
    writer.close()
    dataset = read_array_record(path, decode=_refuse_odd)
    with pytest.raises(ValueError, match="record 1 cannot be decoded") as by_index:
        dataset[1]
    with pytest.raises(ValueError, match=rf"'{path}': record 1 cannot be decoded by decode") as in_batch:
        dataset.record_source._getitems([0, 1, 2])
    assert str(in_batch.value) == str(by_index.value)


def test_a_corrupt_chunk_in_a_batch_names_its_record(tmp_path):
    path = tmp_path / "corrupt.array_record"
    write_array_record(path, [{"id": index, "x": np.full(50, index, np.float32)} for index in range(100)])
    data = bytearray(path.read_bytes())
    data[5000:5040] = b"\xff" * 40
    path.write_bytes(bytes(data))
    dataset = read_array_record(path)
    failing = []
    for index in range(100):
        try:
            dataset[index]
        except ValueError:
            failing.append(index)
    assert failing
    with pytest.raises(ValueError, match=rf"'{path}': record {failing[0]} cannot be read"):
        dataset.record_source._getitems(list(range(100)))


def test_indices_out_of_range_or_not_ints_fail_as_indexing_fails(tmp_path):
    path = tmp_path / "rows.array_record"
    write_array_record(path, [{"id": index, "x": np.zeros(2)} for index in range(5)])
    source = read_array_record(path).record_source
    with pytest.raises(IndexError, match="index 5 is out of range for 5 records"):
        source._getitems([0, 5])
    with pytest.raises(IndexError, match="index -6 is out of range"):
        source._getitems([-6])
    with pytest.raises(TypeError) as by_index:
        source[1.0]
    with pytest.raises(type(by_index.value)):
        source._getitems([0, 1.0])


# ---------------------------------------------------------------------------
# The writer's bytes


@pytest.mark.parametrize(
    ("make", "digest"), [(_tinax_records, _TINAX_RECORDS_SHA256), (_ragged_records, _RAGGED_RECORDS_SHA256)]
)
@pytest.mark.parametrize("group_size", [1, 4])
def test_tinax_format_files_are_the_bytes_the_earlier_writer_wrote(tmp_path, make, digest, group_size):
    path = tmp_path / "records.array_record"
    write_array_record(path, iter(make()), group_size=group_size)
    assert _stored_records_sha256(path) == digest
    # The container around those records is array-record's own.
    assert path.read_bytes() == _raw_copy(path, group_size)


@pytest.mark.parametrize("group_size", [1, 3])
def test_json_files_are_the_bytes_of_json_dumps_as_0_2_wrote_them(tmp_path, group_size):
    records = [*_json_records(), {}, {"big": 2**70, 3: "a non-str key", "nan": math.nan}]
    ours, theirs = tmp_path / "ours.array_record", tmp_path / "theirs.array_record"
    write_array_record(ours, iter(records), group_size=group_size)
    writer = array_record_module.ArrayRecordWriter(str(theirs), f"group_size:{group_size}")
    for record in records:
        writer.write(json.dumps(record).encode("utf-8"))
    writer.close()
    assert ours.read_bytes() == theirs.read_bytes()


def test_records_outside_the_common_case_still_encode_as_before(tmp_path):
    # Values the one-pass encoding leaves to the checks: a memmap, a dict
    # subclass, keys in another order (refused), an int beyond 64 bits (refused).
    import collections

    memmapped = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.float32, shape=(3,))
    memmapped[:] = [1, 2, 3]
    path = tmp_path / "mixed.array_record"
    write_array_record(path, [{"id": 1, "x": np.zeros(3, np.float32)}, collections.OrderedDict(id=2, x=memmapped)])
    read = list(read_array_record(path))
    assert read[1]["id"] == 2
    assert read[1]["x"].tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match=r"records\[1\] must have the fields of records\[0\] in its order"):
        write_array_record(tmp_path / "order.array_record", [{"id": 1, "x": np.zeros(3)}, {"x": np.zeros(3), "id": 2}])
    with pytest.raises(ValueError, match=r"records\[1\]\['id'\] must be an int in \[-2\*\*63, 2\*\*63 - 1\]"):
        write_array_record(
            tmp_path / "big.array_record", [{"id": 1, "x": np.zeros(3)}, {"id": 2**63, "x": np.zeros(3)}]
        )
    with pytest.raises(ValueError, match=r"records\[1\]\['x'\]"):
        write_array_record(
            tmp_path / "dtype.array_record", [{"id": 1, "x": np.zeros(3)}, {"id": 2, "x": np.zeros(3, np.float32)}]
        )
