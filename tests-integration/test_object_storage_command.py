"""`tinax inspect` on bucket URLs: single objects, prefixes and patterns, against real loopback servers."""

from __future__ import annotations

import numpy as np
import pytest

from tinax.data import write_parquet_record
from tinax.weights import save_safetensors
from tinax_testing import run_tinax
from tinax_testing.object_storage import gcs_store, object_store  # noqa: F401

RECORDS = [{"label": index, "feature": np.full((2,), index, np.float32)} for index in range(6)]


def test_an_object_is_described_from_its_header(object_store: str) -> None:  # noqa: F811
    url = f"{object_store}/model.safetensors"
    save_safetensors(url, {"w": np.arange(12, dtype=np.float32).reshape(3, 4)}, overwrite=False)
    result = run_tinax("inspect", url, "--json")
    assert result.code == 0, result.stderr
    document = result.json()
    assert document["kind"] == "safetensors"
    assert document["path"] == url
    assert [row["name"] for row in document["tables"]["tensors"]["rows"]] == ["w"]


def test_a_prefix_and_a_pattern_of_record_files_are_one_dataset(object_store: str) -> None:  # noqa: F811
    for part in range(3):
        write_parquet_record(f"{object_store}/shards/part-{part}.parquet", RECORDS[part * 2 : part * 2 + 2])
    for path in (f"{object_store}/shards", f"{object_store}/shards/*.parquet"):
        result = run_tinax("inspect", path, "--json")
        assert result.code == 0, result.stderr
        document = result.json()
        assert document["kind"] == "parquet"
        assert document["summary"]["files"] == 3
        assert document["summary"]["records"] == len(RECORDS)


def test_a_checkpoint_prefix_is_described(gcs_store: str) -> None:  # noqa: F811
    from tinax.checkpointing import save_checkpointables

    url = f"{gcs_store}/checkpoint"
    save_checkpointables(url, {"state": {"w": np.ones((2, 2), np.float32)}}).result()
    result = run_tinax("inspect", url, "--json")
    assert result.code == 0, result.stderr
    assert result.json()["kind"] == "orbax-checkpoint"


@pytest.mark.parametrize("suffix", ["missing.safetensors", "empty-prefix", "none-*.parquet"])
def test_nothing_at_the_url_is_a_usage_error(object_store: str, suffix: str) -> None:  # noqa: F811
    result = run_tinax("inspect", f"{object_store}/{suffix}", "--json")
    assert result.code == 2
    assert result.json()["error"]["type"] == "usage"
    assert "does not exist" in result.json()["error"]["message"]


def test_a_url_that_names_no_bucket_is_a_usage_error() -> None:
    result = run_tinax("inspect", "gs://", "--json")
    assert result.code == 2
    assert result.json()["error"]["type"] == "usage"
