"""Sharded exports to a bucket from 2 real processes of 4 CPU devices each, against the loopback servers.

The ``_body_*`` functions run in the child processes (the harness loads this
file there by path); the servers' addresses reach them through the
environment that the parent's fixture set.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from tinax.weights import load_sharded_safetensors, save_sharded_safetensors
from tinax_testing import run_processes
from tinax_testing.object_storage import object_store  # noqa: F401

pytestmark = pytest.mark.timeout(600)


def _process_mesh(process: int) -> Mesh:
    return Mesh(np.array([device for device in jax.devices() if device.process_index == process]), ("x",))


def _arrays() -> dict[str, jax.Array]:
    everywhere = Mesh(np.array(sorted(jax.devices(), key=lambda device: device.id)), ("x",))
    layouts = {
        "first": (NamedSharding(_process_mesh(0), PartitionSpec("x")), np.arange(32, dtype=np.float32).reshape(8, 4)),
        "second": (NamedSharding(_process_mesh(1), PartitionSpec("x")), np.arange(64, dtype=np.int32).reshape(16, 4)),
        "copied": (NamedSharding(everywhere, PartitionSpec()), np.arange(3, dtype=np.float32)),
    }
    return {
        name: jax.make_array_from_callback(
            value.shape, sharding, lambda index, value=value: value[index], dtype=value.dtype
        )
        for name, (sharding, value) in layouts.items()
    }


def _body_export(prefix: str) -> dict[str, Any]:
    arrays = _arrays()
    index = f"{prefix}/model.safetensors.index.json"
    # Each tensor in a file of its own: each file has one owner.
    save_sharded_safetensors(index, arrays, overwrite=False, max_file_bytes=1)
    shardings = {name: array.sharding for name, array in arrays.items()}
    loaded = load_sharded_safetensors(index, shardings=shardings, max_bytes=1 << 20)
    same = {
        name: all(
            np.array_equal(np.asarray(shard.data), np.asarray(original.data))
            for shard, original in zip(loaded.arrays[name].addressable_shards, array.addressable_shards, strict=True)
        )
        for name, array in arrays.items()
    }
    # One file with shards of both processes cannot be one object written by one process.
    try:
        save_sharded_safetensors(f"{prefix}/single.safetensors", arrays, overwrite=False)
        refused = ""
    except ValueError as error:
        refused = str(error)
    return {"same": same, "refused": refused}


def test_each_process_uploads_its_own_files_and_the_index_comes_last(object_store: str) -> None:  # noqa: F811
    import fsspec

    results = run_processes(_body_export, num_processes=2, devices_per_process=4, args=(object_store,), timeout=240)
    for result in results:
        assert all(result["same"].values()), result
        assert "shards of several processes" in result["refused"]
    scheme, _, key = object_store.partition("://")
    fs = fsspec.filesystem(scheme)
    fs.invalidate_cache()
    names = sorted(path.rpartition("/")[2] for path in fs.find(key))
    assert names == [
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
        "model.safetensors.index.json",
    ]
