"""Readers under damage and abandonment: damaged dictionary pages, iterators nobody closes.

A Parquet file another tool wrote carries no tinax checksums, so a flipped
bit in a data page may reach the decoded values; a damaged dictionary index
is then a ValueError naming the file and the record, never an IndexError.
An iterator its program stops reading and never closes does not keep the
process alive.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tinax.data import read_parquet_record, split_by_column


def _dictionary_file(path: Any) -> tuple[int, int]:
    """A foreign file with a dictionary-encoded string column; returns the byte range of that column's data pages."""
    rows = 40
    table = pa.table(
        {
            "id": pa.array(range(rows), pa.int32()),
            "split": pa.array(["train" if index % 3 else "test" for index in range(rows)]).dictionary_encode(),
            "label": pa.array([f"l{index % 5}" if index % 7 else None for index in range(rows)]).dictionary_encode(),
        }
    )
    # No page checksums (pyarrow's default), no compression: a flip reaches the decoder as it is.
    pq.write_table(table, path, row_group_size=rows, compression="none")
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(1)
    assert chunk.has_dictionary_page
    assert chunk.dictionary_page_offset < chunk.data_page_offset
    return chunk.data_page_offset, chunk.dictionary_page_offset + chunk.total_compressed_size


def test_bit_flips_in_a_dictionary_encoded_column_give_only_value_errors_naming_the_file_and_record(tmp_path):
    original_path = tmp_path / "dictionary.parquet"
    start, end = _dictionary_file(original_path)
    original = original_path.read_bytes()
    mutated = tmp_path / "flipped.parquet"
    outcomes = {"read": 0, "refused": 0, "index outside": 0}
    wrong = []
    for position in range(start, end):
        for bit in range(8):
            data = bytearray(original)
            data[position] ^= 1 << bit
            mutated.write_bytes(bytes(data))
            for mapping in ("python", "numpy"):
                try:
                    dataset = read_parquet_record(mutated, mapping=mapping)
                    for index in range(len(dataset)):
                        dataset[index]
                except ValueError as error:
                    outcomes["refused"] += 1
                    if str(mutated) not in str(error):
                        wrong.append(f"{position}.{bit}/{mapping}: unnamed {error!r}")
                    if "dictionary index" in str(error):
                        outcomes["index outside"] += 1
                        if "record " not in str(error):
                            wrong.append(f"{position}.{bit}/{mapping}: no record in {error!r}")
                except Exception as error:  # Any undocumented error is a failure.
                    wrong.append(f"{position}.{bit}/{mapping}: {error!r}")
                else:
                    outcomes["read"] += 1
            # The column-only pass of split_by_column reads the same pages.
            try:
                split_by_column(read_parquet_record(mutated), "split")
            except ValueError as error:
                if "dictionary index" in str(error) and str(mutated) not in str(error):
                    wrong.append(f"{position}.{bit}/split: unnamed {error!r}")
            except Exception as error:
                wrong.append(f"{position}.{bit}/split: {error!r}")
    assert wrong == [], "\n".join(wrong[:10])
    # The flips exercise the check: some give indices outside the dictionary.
    assert outcomes["index outside"] > 0, outcomes
    assert outcomes["read"] > 0, outcomes


def test_a_dictionary_index_outside_the_dictionary_is_a_value_error_naming_file_and_record(tmp_path, monkeypatch):
    from tinax._data import _parquet_source
    from tinax._data._arrow_values import column_getter

    indices = pa.array([0, 1, 7, -1, None, 1], pa.int32())
    damaged = pa.DictionaryArray.from_arrays(indices, pa.array(["a", "b"]), safe=False)
    for mapping in ("python", "numpy"):
        get = column_getter(damaged, mapping)
        assert [get(row) for row in (0, 1, 4, 5)] == ["a", "b", None, "b"]
        for row, index in ((2, 7), (3, -1)):
            with pytest.raises(ValueError, match=f"row {row} holds the dictionary index {index}, outside its"):
                get(row)
    # Through the reader, with the decoded row group damaged as a flipped bit damages it.
    path = tmp_path / "names.parquet"
    pq.write_table(pa.table({"name": pa.array(["a", "b", "a", "b", None, "b"]).dictionary_encode()}), path)
    monkeypatch.setattr(
        _parquet_source.ParquetRecordSource, "_read_group", lambda self, group, columns: pa.table({"name": damaged})
    )
    dataset = read_parquet_record(path)
    assert dataset[1] == {"name": "b"}
    with pytest.raises(ValueError, match=r"record 2 is malformed \(column 'name': row 2 holds the dictionary index 7"):
        dataset[2]
    with pytest.raises(ValueError, match=r"record 3 is malformed .*dictionary index -1") as caught:
        dataset._source._getitems([0, 3])
    assert str(path) in str(caught.value)
    assert isinstance(caught.value.__cause__, ValueError), "the cause is chained"
    # The column-only pass of split_by_column names the record too (pyarrow's own conversion refuses the column).
    with pytest.raises(ValueError, match=r"record 2 is malformed \(column 'name': row 2 holds the dictionary index 7"):
        split_by_column(dataset, "name", values=("a", "b"))
