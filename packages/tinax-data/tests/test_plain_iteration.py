"""Plain iteration of the datasets tinax returns: in order, in the calling thread, many rows at a time.

``for row in dataset`` over a reader's dataset (or a split of one) gives
exactly ``[dataset[i] for i in range(len(dataset))]``, as grain's own
iteration does, without grain's prefetch threads, which only queue on the
Parquet reader's lock. The iterator's state is grain's.
"""

from __future__ import annotations

import threading
from typing import Any

import grain
import ml_dtypes
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tinax.data import (
    InMemorySource,
    read_array_record,
    read_parquet_record,
    split_by_column,
    split_random,
    write_array_record,
    write_parquet_record,
)

_ROWS = 700  # Several iteration chunks (256 rows), and a last one that is not full.


def _records(kind: str) -> list[dict[str, Any]]:
    if kind == "plain":
        # What 0.2 wrote too: JSON ArrayRecord records, pyarrow's plain Parquet table.
        return [
            {"id": index, "split": "test" if index % 5 == 0 else "train", "x": [index, index + 0.5]}
            for index in range(_ROWS)
        ]
    # Values only the tinax format holds: 2-d arrays, bfloat16, bytes.
    return [
        {
            "id": index,
            "split": "test" if index % 5 == 0 else "train",
            "x": np.full((2, 2), index, dtype=ml_dtypes.bfloat16),
            "blob": bytes([index % 256]),
        }
        for index in range(_ROWS)
    ]


def _array_record_available() -> None:
    pytest.importorskip("array_record.python.array_record_module", reason="array-record is not installed")


def _dataset(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, case: str) -> grain.MapDataset:
    from tinax._data._records import _parquet_write

    # Row groups of 64 rows: iteration chunks cross row groups.
    monkeypatch.setattr(_parquet_write, "_ROW_GROUP_MAX_ROWS", 64)
    container, _, layout = case.partition("/")
    records = _records(layout or "plain")
    if container == "parquet":
        path = tmp_path / "rows.parquet"
        if layout == "plain":
            pq.write_table(pa.Table.from_pylist(records), path, row_group_size=64)
        else:
            write_parquet_record(path, records)
        return read_parquet_record(path)
    if container == "array_record":
        _array_record_available()
        path = tmp_path / "rows.array_record"
        write_array_record(path, records)
        return read_array_record(path)
    assert container == "memory"
    return grain.MapDataset.source(InMemorySource(records, source_id="rows"))


def _parts(dataset: grain.MapDataset) -> dict[str, grain.MapDataset]:
    by_column = split_by_column(dataset, "split")
    by_column_kept = split_by_column(dataset, "split", drop_column=False)
    randomly = split_random(dataset, 0.7, seed=3)
    dropped = split_random(dataset, 0.7, seed=3, drop_column="split")
    return {
        "split_by_column train": by_column[0],
        "split_by_column test, column kept": by_column_kept[1],
        "split_random train": randomly[0],
        "split_random test": randomly[1],
        "split_random train, column dropped": dropped[0],
        "split_random test, column dropped": dropped[1],
    }


def _same(first: list[Any], second: list[Any]) -> bool:
    if len(first) != len(second):
        return False
    for one, other in zip(first, second, strict=True):
        if one.keys() != other.keys():
            return False
        for key in one:
            left, right = one[key], other[key]
            if isinstance(left, np.ndarray):
                if not (left.dtype == right.dtype and left.shape == right.shape and np.array_equal(left, right)):
                    return False
            elif left != right or type(left) is not type(right):
                return False
    return True


_CASES = ["parquet/plain", "parquet/tinax", "array_record/plain", "array_record/tinax", "memory"]


@pytest.mark.parametrize("case", _CASES)
def test_iterating_a_dataset_tinax_returns_gives_the_rows_of_indexing_in_order(tmp_path, monkeypatch, case):
    dataset = _dataset(tmp_path, monkeypatch, case)
    datasets = {} if case == "memory" else {"the reader's dataset": dataset}
    datasets.update(_parts(dataset))
    for name, chosen in datasets.items():
        indexed = [chosen[index] for index in range(len(chosen))]
        iterated = list(chosen)
        assert _same(iterated, indexed), name
        assert _same(list(iter(chosen)), indexed), name
        # grain's own iteration (its prefetch threads) gives the same rows.
        assert _same(list(chosen.to_iter_dataset()), indexed), name


def _grain_prefetch_threads() -> set[threading.Thread]:
    # Threads themselves, not their idents, which a new thread may reuse from one that has exited.
    return {thread for thread in threading.enumerate() if thread.name.startswith("grain-prefetch")}


@pytest.mark.parametrize("case", ["parquet/plain", "parquet/tinax", "array_record/tinax"])
def test_plain_iteration_reads_many_rows_at_a_time_in_the_calling_thread(tmp_path, monkeypatch, case):
    dataset = _dataset(tmp_path, monkeypatch, case)
    source = dataset._source
    reads: list[tuple[str, list[int]]] = []
    single = type(source).__getitem__
    many = getattr(type(source), "_getitems", None)

    def read_one(self: Any, index: int) -> Any:
        reads.append((threading.current_thread().name, [index]))
        return single(self, index)

    def read_many(self: Any, indices: Any) -> Any:
        reads.append((threading.current_thread().name, list(indices)))
        assert many is not None
        return many(self, indices)

    monkeypatch.setattr(type(source), "__getitem__", read_one)
    if many is not None:
        monkeypatch.setattr(type(source), "_getitems", read_many)
    before = _grain_prefetch_threads()
    iterator = iter(dataset)
    rows = [next(iterator) for _ in range(300)]
    assert _grain_prefetch_threads() - before == set(), "no prefetch threads"
    assert [row["id"] for row in rows] == list(range(300))
    assert {name for name, _ in reads} == {threading.current_thread().name}
    if many is not None:
        # Two reads of 256 consecutive rows so far: one call each down to the source.
        assert [indices for _, indices in reads] == [list(range(256)), list(range(256, 512))]
    iterator.close()
    with pytest.raises(ValueError, match="closed iterator"):
        next(iterator)


def test_plain_iteration_states_are_grains_and_restore_either_way(tmp_path, monkeypatch):
    dataset = _dataset(tmp_path, monkeypatch, "parquet/plain")
    grains = grain.MapDataset.source(dataset._source)
    ours = iter(dataset)
    theirs = iter(grains)
    for _ in range(300):
        assert next(ours)["id"] == next(theirs)["id"]
    assert ours.get_state() == theirs.get_state() == {"next_index": 300}
    # A state of either iterator restores into the other.
    restored = iter(dataset)
    restored.set_state(theirs.get_state())
    assert [row["id"] for row in restored] == list(range(300, _ROWS))
    into_grain = iter(grains)
    into_grain.set_state(ours.get_state())
    assert next(into_grain)["id"] == 300
    ours.set_state({"next_index": 5})
    assert next(ours)["id"] == 5
    ours.set_state({"next_index": _ROWS})
    assert list(ours) == []
    with pytest.raises(IndexError, match=f"out of range for dataset of length {_ROWS}"):
        ours.set_state({"next_index": _ROWS + 1})
    ours.close()
    theirs.close()
    into_grain.close()


def test_plain_iteration_raises_at_an_unreadable_row_after_every_row_before_it(tmp_path):
    _array_record_available()
    import json

    from array_record.python.array_record_module import ArrayRecordWriter

    path = tmp_path / "foreign.array_record"
    writer = ArrayRecordWriter(str(path), "group_size:1")
    for index in range(600):
        # Record 300 is not JSON; records 10, 20, ... decode to None (rows a filter removed), which iteration skips.
        writer.write(b"\xff" if index == 300 else json.dumps(None if index % 10 == 0 else {"id": index}).encode())
    writer.close()
    dataset = read_array_record(path)
    expected = [index for index in range(300) if index % 10]
    iterator = iter(dataset)
    found = [next(iterator)["id"] for _ in expected]
    assert found == expected
    with pytest.raises(ValueError, match="record 300") as caught:
        next(iterator)
    with pytest.raises(type(caught.value), match="record 300"):
        dataset[300]
    # As grain's iterator without threads: the same row fails again, and the state stays before it.
    assert iterator.get_state() == {"next_index": 300}
    with pytest.raises(type(caught.value), match="record 300"):
        next(iterator)
    iterator.set_state({"next_index": 301})
    assert [row["id"] for row in iterator] == [index for index in range(301, 600) if index % 10]
    # grain's own iteration skips the same None rows.
    grains = iter(grain.MapDataset.source(dataset._source).slice(slice(301, None)))
    assert [row["id"] for row in grains] == [index for index in range(301, 600) if index % 10]
