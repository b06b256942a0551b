"""What the record writers and split_by_column log when they finish, and the progress they report.

Each Parquet or ArrayRecord write and each ``split_by_column`` logs one INFO
line to ``tinax.data`` with its rows (and bytes, for a write) and seconds,
and nothing at all unless logging is configured for it. All three take
``progress=``: a callback ``progress(done, total)`` counting rows, or
``"bar"``.
"""

from __future__ import annotations

import importlib.util
import logging
import pathlib
import subprocess
import sys
import textwrap
from typing import Any

import grain
import numpy as np
import pytest

from tinax.data import (
    InMemorySource,
    read_parquet_record,
    split_by_column,
    write_array_record,
    write_parquet_record,
)
from tinax_testing import import_side_effects
from tinax_testing.progress import assert_progress, progress_recorder, tinax_info_records

HAS_RICH = importlib.util.find_spec("rich") is not None
HAS_TQDM = importlib.util.find_spec("tqdm") is not None


def _array_record_available() -> None:
    pytest.importorskip("array_record.python.array_record_module", reason="array-record is not installed")


def _plain_records(count: int) -> list[dict[str, Any]]:
    # What pyarrow converts: written as tinax 0.2 wrote them, in one piece.
    return [{"id": index, "split": "test" if index % 4 == 0 else "train"} for index in range(count)]


def _tinax_records(count: int) -> list[dict[str, Any]]:
    # 2-d arrays: only the tinax format holds them, written row group by row group.
    return [{"id": index, "x": np.full((2, 2), index, dtype=np.float32)} for index in range(count)]


def _assert_written(record: logging.LogRecord, rows: int, path: pathlib.Path) -> None:
    message = record.getMessage()
    size = path.stat().st_size
    noun = "record" if rows == 1 else "records"
    assert message.startswith(f"wrote {rows} {noun} to {str(path)!r}: {rows} row"), message
    assert f"{size} bytes" in message
    assert " s" in message
    assert record.tinax_action == "wrote"
    assert record.tinax_rows == rows
    assert record.tinax_bytes == size
    assert record.tinax_path == str(path)
    assert record.tinax_seconds >= 0


# ---------------------------------------------------------------------------
# Logging


@pytest.mark.parametrize("records", [_plain_records(10), _tinax_records(10)], ids=["plain", "tinax-format"])
def test_a_parquet_write_logs_one_info_line_with_its_rows_bytes_and_seconds(tmp_path, caplog, records):
    caplog.set_level(logging.INFO, logger="tinax")
    path = tmp_path / "rows.parquet"
    write_parquet_record(path, records)
    [record] = tinax_info_records(caplog, "tinax.data")
    _assert_written(record, 10, path)


@pytest.mark.parametrize(
    "records", [_plain_records(7), _tinax_records(7), iter(_tinax_records(7)), []], ids=["json", "tinax", "gen", "none"]
)
def test_an_array_record_write_logs_one_info_line_with_its_rows_bytes_and_seconds(tmp_path, caplog, records):
    _array_record_available()
    caplog.set_level(logging.INFO, logger="tinax")
    path = tmp_path / "rows.array_record"
    write_array_record(path, records)
    [record] = tinax_info_records(caplog, "tinax.data")
    _assert_written(record, 0 if isinstance(records, list) and not records else 7, path)


@pytest.mark.parametrize("source", ["parquet", "memory"])
def test_a_split_by_column_logs_one_info_line_with_the_rows_it_read(tmp_path, caplog, source):
    if source == "parquet":
        path = tmp_path / "rows.parquet"
        write_parquet_record(path, _plain_records(12))
        dataset, name = read_parquet_record(path), str(path)
    else:
        dataset, name = grain.MapDataset.source(InMemorySource(_plain_records(12), source_id="rows-v1")), "rows-v1"
    caplog.set_level(logging.INFO, logger="tinax")
    train, test = split_by_column(dataset, "split")
    [record] = tinax_info_records(caplog, "tinax.data")
    message = record.getMessage()
    assert message.startswith(f"split 12 rows by column 'split' into 9 'train' and 3 'test' of {name!r}: 12 rows in ")
    assert (len(train), len(test)) == (9, 3)
    assert record.tinax_rows == 12
    assert record.tinax_bytes is None


def test_nothing_is_logged_at_the_default_levels(tmp_path, caplog):
    write_parquet_record(tmp_path / "rows.parquet", _plain_records(4))
    write_parquet_record(tmp_path / "arrays.parquet", _tinax_records(4))
    split_by_column(read_parquet_record(tmp_path / "rows.parquet"), "split")
    if importlib.util.find_spec("array_record") is not None:
        write_array_record(tmp_path / "rows.array_record", _plain_records(4))
    assert [record for record in caplog.records if record.name.startswith("tinax")] == []


def test_a_refused_write_or_split_logs_nothing(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tinax")
    (tmp_path / "rows.parquet").write_bytes(b"old")
    with pytest.raises(FileExistsError):
        write_parquet_record(tmp_path / "rows.parquet", _plain_records(4), overwrite=False)
    with pytest.raises(ValueError, match="never drops rows"):
        split_by_column(
            grain.MapDataset.source(InMemorySource(_plain_records(4), source_id="r")), "split", values=("a", "b")
        )
    assert [record for record in caplog.records if record.name.startswith("tinax")] == []


_QUIET_PROBE = textwrap.dedent(
    """
    import pathlib, sys
    from tinax.data import read_parquet_record, split_by_column, write_parquet_record
    path = pathlib.Path(sys.argv[1]) / "rows.parquet"
    write_parquet_record(path, [{"id": index, "split": "train" if index % 2 else "test"} for index in range(8)])
    split_by_column(read_parquet_record(path), "split")
    """
)


def test_an_application_that_configures_no_logging_sees_no_output(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-c", _QUIET_PROBE, str(tmp_path)], capture_output=True, text=True, timeout=300, check=True
    )
    assert (completed.stdout, completed.stderr) == ("", "")


# ---------------------------------------------------------------------------
# Progress


def test_parquet_progress_counts_rows_from_zero_to_the_total(tmp_path, monkeypatch):
    from tinax._data._records import _parquet_write

    calls, record = progress_recorder()
    write_parquet_record(tmp_path / "plain.parquet", _plain_records(50), progress=record)
    # pyarrow writes a plain table in one piece: the count goes from 0 to the total at once.
    assert calls == [(0, 50), (50, 50)]
    monkeypatch.setattr(_parquet_write, "_ROW_GROUP_MAX_ROWS", 16)
    calls, record = progress_recorder()
    write_parquet_record(tmp_path / "arrays.parquet", _tinax_records(50), progress=record)
    # The tinax format counts row group by row group.
    assert calls == [(0, 50), (16, 50), (32, 50), (48, 50), (50, 50)]


@pytest.mark.parametrize("kind", ["json", "tinax"])
def test_array_record_progress_counts_records_and_is_unknown_for_a_generator(tmp_path, kind):
    _array_record_available()
    records = _plain_records(2500) if kind == "json" else _tinax_records(2500)
    calls, record = progress_recorder()
    write_array_record(tmp_path / "list.array_record", records, progress=record)
    assert_progress(calls, 2500)
    assert len(calls) <= 1002, "a callback is called at most about a thousand times"
    calls, record = progress_recorder()
    write_array_record(tmp_path / "generated.array_record", iter(records[:5]), progress=record)
    assert calls == [(0, None), (1, None), (2, None), (3, None), (4, None), (5, None), (5, 5)]


@pytest.mark.parametrize("source", ["parquet", "memory"])
def test_split_by_column_progress_counts_the_rows_read(tmp_path, monkeypatch, source):
    from tinax._data._records import _parquet_write

    if source == "parquet":
        monkeypatch.setattr(_parquet_write, "_ROW_GROUP_MAX_ROWS", 16)
        path = tmp_path / "arrays.parquet"
        write_parquet_record(
            path, [{**row, "split": "train" if row["id"] % 2 else "test"} for row in _tinax_records(40)]
        )
        dataset = read_parquet_record(path)
    else:
        dataset = grain.MapDataset.source(InMemorySource(_plain_records(40), source_id="rows"))
    calls, record = progress_recorder()
    split_by_column(dataset, "split", progress=record)
    assert_progress(calls, 40)
    if source == "parquet":
        # Only the column is read, row group by row group.
        assert calls == [(0, 40), (16, 40), (32, 40), (40, 40)]


class _CancelledError(Exception):
    pass


def _cancel(done: int, total: int | None) -> None:
    if done:
        raise _CancelledError


def test_a_callback_that_raises_stops_the_write_and_publishes_nothing(tmp_path):
    with pytest.raises(_CancelledError):
        write_parquet_record(tmp_path / "plain.parquet", _plain_records(10), progress=_cancel)
    with pytest.raises(_CancelledError):
        write_parquet_record(tmp_path / "arrays.parquet", _tinax_records(10), progress=_cancel)
    if importlib.util.find_spec("array_record") is not None:
        with pytest.raises(_CancelledError):
            write_array_record(tmp_path / "rows.array_record", _plain_records(10), progress=_cancel)
        with pytest.raises(_CancelledError):
            write_array_record(tmp_path / "generated.array_record", iter(_plain_records(1)), progress=_cancel)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(_CancelledError):
        split_by_column(
            grain.MapDataset.source(InMemorySource(_plain_records(4), source_id="r")), "split", progress=_cancel
        )


def _writers() -> list[Any]:
    writers: list[Any] = [lambda path, **options: write_parquet_record(path, _plain_records(2), **options)]
    if importlib.util.find_spec("array_record") is not None:
        writers.append(lambda path, **options: write_array_record(path, _plain_records(2), **options))
    return writers


@pytest.mark.parametrize("progress", [True, 1, object()])
def test_a_progress_of_another_kind_is_a_type_error_before_anything_is_written(tmp_path, progress):
    pattern = r"progress must be None, 'bar' or a callable progress\(done, total\)"
    for write in _writers():
        with pytest.raises(TypeError, match=pattern):
            write(tmp_path / "rows", progress=progress)
    assert list(tmp_path.iterdir()) == []
    dataset = grain.MapDataset.source(InMemorySource(_plain_records(2), source_id="r"))
    with pytest.raises(TypeError, match=pattern):
        split_by_column(dataset, "split", progress=progress)


def test_a_progress_str_other_than_bar_is_a_value_error(tmp_path):
    for write in _writers():
        with pytest.raises(ValueError, match="progress must be None, 'bar' or a callable"):
            write(tmp_path / "rows", progress="tqdm")
    assert list(tmp_path.iterdir()) == []


def test_a_bar_without_tqdm_or_rich_is_an_import_error_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "rich", None)
    with pytest.raises(ImportError, match=r"tinax\.data\.write_parquet_record\(progress='bar'\)"):
        write_parquet_record(tmp_path / "rows.parquet", _plain_records(2), progress="bar")
    if importlib.util.find_spec("array_record") is not None:
        with pytest.raises(ImportError, match=r"tinax\.data\.write_array_record\(progress='bar'\)"):
            write_array_record(tmp_path / "rows.array_record", _plain_records(2), progress="bar")
    assert list(tmp_path.iterdir()) == []
    dataset = grain.MapDataset.source(InMemorySource(_plain_records(2), source_id="r"))
    with pytest.raises(ImportError, match=r"tinax\.data\.split_by_column\(progress='bar'\)"):
        split_by_column(dataset, "split", progress="bar")


@pytest.mark.parametrize(
    "library",
    [
        pytest.param("rich", marks=pytest.mark.skipif(not HAS_RICH, reason="rich is not installed here")),
        pytest.param("tqdm", marks=pytest.mark.skipif(not HAS_TQDM, reason="tqdm is not installed here")),
    ],
)
def test_a_bar_shows_the_write_and_the_split_on_stderr(tmp_path, monkeypatch, capsys, library):
    if library == "rich":
        monkeypatch.setitem(sys.modules, "tqdm", None)  # tqdm is preferred where both are installed.
    path = tmp_path / "rows.parquet"
    write_parquet_record(path, _plain_records(20), progress="bar")
    split_by_column(read_parquet_record(path), "split", progress="bar")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "rows.parquet" in captured.err
    assert "split by 'split'" in captured.err


def test_importing_tinax_data_imports_no_bar_library():
    assert import_side_effects("tinax.data", watched=("tqdm", "rich"))["integrations"] == []
