"""The row groups' checksums hashed in a child interpreter: the same digests and errors as hashing them here."""

from __future__ import annotations

import errno
import os
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from grain.sharding import ShardOptions

from tinax._data._compat02 import CorruptParquetError
from tinax._data._records import _parquet_source
from tinax._data._records._parquet_checksums import DigestProcess, range_digests
from tinax._data._records._reader_datasets import record_source_of
from tinax._data._shutdown import WINDOW_THREAD_PREFIX
from tinax.data import read_parquet_record, stack_records, training_batches, write_parquet_record

ROWS = 12_000


@pytest.fixture
def checked_file(tmp_path: Path) -> Path:
    """A tinax-format file of several row groups, each with its digest in the footer."""
    path = tmp_path / "checked.parquet"
    x = np.random.default_rng(3).standard_normal((ROWS, 8, 8))
    write_parquet_record(path, [{"id": index, "x": x[index]} for index in range(ROWS)])
    return path


def _ranges_and_digests(path: Path) -> tuple[list[tuple[int, int]], list[str]]:
    checks = record_source_of(read_parquet_record(path))._group_checks
    assert checks is not None
    assert len(checks) > 2
    return [(start, end) for start, end, _ in checks], [digest for _, _, digest in checks]


def test_a_child_gives_the_digests_written_in_the_footer(checked_file):
    ranges, written = _ranges_and_digests(checked_file)
    hasher = DigestProcess()
    try:
        assert hasher.digests(checked_file, ranges) == written
        assert hasher.digests(checked_file, ranges[1:2]) == written[1:2]
        child = hasher._process
        assert child is not None
        assert child.pid != os.getpid()
        assert child.poll() is None
    finally:
        hasher.close()
    # Closing ends the child.
    assert child.poll() is not None
    assert range_digests(checked_file, ranges) == written


def test_a_file_gone_raises_what_reading_it_here_raises(checked_file):
    ranges, _ = _ranges_and_digests(checked_file)
    checked_file.unlink()
    with pytest.raises(FileNotFoundError) as here:
        range_digests(checked_file, ranges)
    hasher = DigestProcess()
    try:
        with pytest.raises(FileNotFoundError) as raised:
            hasher.digests(checked_file, ranges)
    finally:
        hasher.close()
    assert raised.value.errno == here.value.errno == errno.ENOENT
    assert raised.value.filename == str(checked_file)


def test_a_file_cut_short_raises_the_value_error_of_reading_it_here(checked_file):
    ranges, _ = _ranges_and_digests(checked_file)
    data = checked_file.read_bytes()
    checked_file.write_bytes(data[: ranges[-1][0] + 10])
    hasher = DigestProcess()
    try:
        with pytest.raises(ValueError, match="ends inside a row group"):
            hasher.digests(checked_file, ranges)
    finally:
        hasher.close()
    with pytest.raises(ValueError, match="ends inside a row group"):
        range_digests(checked_file, ranges)


def test_a_child_that_stopped_leaves_the_hashing_to_this_thread(checked_file):
    ranges, written = _ranges_and_digests(checked_file)
    hasher = DigestProcess()
    try:
        assert hasher.digests(checked_file, ranges[:1]) == written[:1]
        child = hasher._process
        assert child is not None
        child.kill()
        child.wait()
        assert hasher.digests(checked_file, ranges) is None
        assert range_digests(checked_file, ranges, hasher) == written
    finally:
        hasher.close()


def test_a_frozen_program_hashes_in_its_own_thread(checked_file, monkeypatch):
    ranges, written = _ranges_and_digests(checked_file)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    hasher = DigestProcess()
    assert hasher.digests(checked_file, ranges) is None
    assert hasher._process is None
    assert range_digests(checked_file, ranges, hasher) == written


def _join_threads_ahead() -> None:
    """Waits for the threads filling the whole columns: with the batches held back, they read the rest in runs."""
    for thread in threading.enumerate():
        if thread.name.startswith(WINDOW_THREAD_PREFIX):
            thread.join(timeout=60)
            assert not thread.is_alive()


def _pipeline(dataset: Any) -> Any:
    return training_batches(
        dataset, shard_options=ShardOptions(0, 1, drop_remainder=True), seed=0, shuffle=False, num_epochs=1,
        batch_size=100, batch_fn=stack_records,
    )  # fmt: skip


def test_threads_reading_ahead_hash_in_children_where_cores_are_spare_and_end_them(checked_file, monkeypatch):
    monkeypatch.setattr(_parquet_source, "usable_cores", lambda: 16)
    started: list[DigestProcess] = []
    original = DigestProcess._running

    def noted(self: DigestProcess) -> Any:
        child = original(self)
        if child is not None and self not in started:
            started.append(self)
        return child

    monkeypatch.setattr(DigestProcess, "_running", noted)
    expected = np.arange(ROWS // 100 * 100)
    dataset = read_parquet_record(checked_file)
    source = record_source_of(dataset)
    batches = iter(_pipeline(dataset))
    first = next(batches)
    _join_threads_ahead()
    ids = np.concatenate([first["id"], *(batch["id"] for batch in batches)])
    assert np.array_equal(ids, expected)
    assert source.groups_per_read() > 1
    assert started
    # Every child ended with the thread that started it.
    assert all(hasher._process is None for hasher in started)


def test_a_damaged_row_group_found_by_a_child_fails_its_batch_with_the_usual_error(checked_file, monkeypatch):
    monkeypatch.setattr(_parquet_source, "usable_cores", lambda: 16)
    ranges, _ = _ranges_and_digests(checked_file)
    damaged = len(ranges) - 1
    data = bytearray(checked_file.read_bytes())
    data[ranges[damaged][1] - 1] ^= 0x01
    checked_file.write_bytes(bytes(data))
    answered: list[list[str]] = []
    original = DigestProcess.digests

    def noted(self: DigestProcess, path: Path, asked: Any) -> Any:
        found = original(self, path, asked)
        if found is not None:
            answered.append(found)
        return found

    monkeypatch.setattr(DigestProcess, "digests", noted)
    batches = iter(_pipeline(read_parquet_record(checked_file)))
    next(batches)
    _join_threads_ahead()
    with pytest.raises(CorruptParquetError, match=f"row group {damaged}"):
        for _ in batches:
            pass
    assert answered


def test_threads_reading_ahead_hash_in_their_own_thread_where_no_core_is_spare(checked_file, monkeypatch):
    monkeypatch.setattr(_parquet_source, "usable_cores", lambda: 2)
    monkeypatch.setattr(DigestProcess, "__init__", lambda self: pytest.fail("no child was to be made"))
    ids = np.concatenate([batch["id"] for batch in _pipeline(read_parquet_record(checked_file))])
    assert np.array_equal(ids, np.arange(ROWS // 100 * 100))
