"""training_batches in two processes of one real JAX runtime, sharded by JAX process.

The ``_body_*`` function runs inside the child processes (the harness loads
this file there by path); the test only looks at the JSON it returns. The
pytest process itself never starts the distributed runtime.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grain
import jax
import pytest
from grain.sharding import ShardByJaxProcess

from tinax.data import InMemorySource, training_batches
from tinax_testing import run_processes

# Each test here starts several JAX processes: longer than the suite's default limit.
pytestmark = pytest.mark.timeout(600)


def _ids(rows: Sequence[dict[str, int]]) -> list[int]:
    return [row["id"] for row in rows]


def _epoch_ids(row_count: int) -> dict[str, Any]:
    dataset = grain.MapDataset.source(InMemorySource([{"id": index} for index in range(row_count)], source_id="mp"))
    # Built after jax.distributed.initialize, which the harness ran.
    shard_options = ShardByJaxProcess(drop_remainder=True)

    def build() -> grain.MapDataset:
        return training_batches(
            dataset,
            shard_options=shard_options,
            seed=5,
            shuffle=True,
            num_epochs=1,
            batch_size=4,
            batch_fn=_ids,
        )

    ids = [index for batch in build() for index in batch]
    return {
        "shard": [shard_options.shard_index, shard_options.shard_count],
        "ids": ids,
        "reproducible": ids == [index for batch in build() for index in batch],
    }


def _body_training_rows() -> dict[str, Any]:
    return {
        "process": jax.process_index(),
        "even": _epoch_ids(24),
        "odd": _epoch_ids(25),
    }


def test_processes_read_disjoint_rows_that_cover_the_epoch():
    results = run_processes(_body_training_rows, num_processes=2, devices_per_process=1, timeout=180.0)

    assert [result["process"] for result in results] == [0, 1]
    for case, row_count in (("even", 24), ("odd", 25)):
        shards = [result[case] for result in results]
        assert [shard["shard"] for shard in shards] == [[0, 2], [1, 2]]
        assert all(shard["reproducible"] for shard in shards)
        first, second = (shard["ids"] for shard in shards)
        assert len(first) == len(second) == 12, "whole global batches of 2 x 4 rows: equal steps everywhere"
        # One global shuffle of all rows, cut to whole global batches; each
        # process takes its contiguous block of it.
        order = list(grain.MapDataset.range(row_count).seed(5).shuffle())[:24]
        assert first == order[:12]
        assert second == order[12:]
        assert first != sorted(first), "the rows are shuffled"
