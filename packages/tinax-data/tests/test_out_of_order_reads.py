"""Rows read out of order past the row-group cache are told once; in-order passes and reads within the cache are not."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from grain.sharding import ShardOptions

from tinax.data import read_parquet_record, training_batches

ROW_GROUPS = 60
ROWS_PER_GROUP = 100


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "tinax.data" and record.levelno == logging.WARNING
    ]


@pytest.fixture(scope="module")
def many_groups(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plain Parquet file of 60 row groups, each of about 100 rows of 64 float32 values."""
    path = tmp_path_factory.mktemp("out-of-order") / "rows.parquet"
    rows = ROW_GROUPS * ROWS_PER_GROUP
    values = np.random.default_rng(0).standard_normal((rows, 64), dtype=np.float32)
    table = pa.table({"id": pa.array(range(rows), pa.int64()), "x": pa.array(list(values), pa.list_(pa.float32()))})
    pq.write_table(table, path, row_group_size=ROWS_PER_GROUP)
    return path


def _cache_for(path: Path, times_smaller: int) -> int:
    """A cache_bytes that the file's decoded rows exceed about ``times_smaller`` times."""
    decoded = pq.read_table(path).nbytes
    return max(1, decoded // times_smaller)


def test_random_access_past_the_cache_warns_once(many_groups, caplog):
    dataset = read_parquet_record(many_groups, cache_bytes=_cache_for(many_groups, 20))
    order = np.random.default_rng(1).permutation(len(dataset))[:3000].tolist()
    with caplog.at_level(logging.WARNING, logger="tinax.data"):
        ids = [dataset[index]["id"] for index in order]
    assert ids == order
    told = _warnings(caplog)
    assert len(told) == 1, told
    assert "out of order" in told[0]
    assert str(many_groups) in told[0]
    assert "cache_bytes" in told[0]


def test_random_access_within_the_cache_says_nothing(many_groups, caplog):
    dataset = read_parquet_record(many_groups, cache_bytes=4 * pq.read_table(many_groups).nbytes)
    order = np.random.default_rng(2).permutation(len(dataset))[:3000].tolist()
    with caplog.at_level(logging.WARNING, logger="tinax.data"):
        assert [dataset[index]["id"] for index in order] == order
    assert _warnings(caplog) == []


def test_in_order_passes_past_the_cache_say_nothing(many_groups, caplog):
    dataset = read_parquet_record(many_groups, cache_bytes=_cache_for(many_groups, 20))
    with caplog.at_level(logging.WARNING, logger="tinax.data"):
        for _ in range(3):  # Several epochs: each row group is decoded again once per pass.
            assert [dataset[index]["id"] for index in range(len(dataset))] == list(range(len(dataset)))
    assert _warnings(caplog) == []


def test_window_shuffled_epochs_past_the_cache_say_nothing(many_groups, caplog):
    dataset = read_parquet_record(many_groups, cache_bytes=_cache_for(many_groups, 20))
    batches = training_batches(
        dataset,
        shard_options=ShardOptions(0, 1, drop_remainder=True),
        seed=3,
        shuffle=True,
        num_epochs=4,
        batch_size=50,
        batch_fn=lambda rows: [row["id"] for row in rows],
        shuffle_window=2,
    )
    with caplog.at_level(logging.WARNING, logger="tinax.data"):
        seen = [row for batch in batches for row in batch]
    assert sorted(seen) == sorted(list(range(len(dataset))) * 4)
    assert _warnings(caplog) == []


def test_a_pipeline_read_out_of_order_warns_once_in_all(many_groups, caplog):
    # Random access to a pipeline's batches is told by the planner; the reader beneath it stays quiet.
    dataset = read_parquet_record(many_groups, cache_bytes=_cache_for(many_groups, 20))
    batches = training_batches(
        dataset,
        shard_options=ShardOptions(0, 1, drop_remainder=True),
        seed=4,
        shuffle=True,
        num_epochs=1,
        batch_size=20,
        batch_fn=lambda rows: [row["id"] for row in rows],
    )
    order = np.random.default_rng(5).permutation(len(batches)).tolist()
    with caplog.at_level(logging.WARNING, logger="tinax.data"):
        for index in order:
            batches[index]
    assert len(_warnings(caplog)) == 1
