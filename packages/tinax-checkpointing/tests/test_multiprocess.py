"""A sharded training state saved and loaded by 2 processes of 4 devices each, as one JAX runtime.

The ``_body_*`` functions run inside the child processes (the harness loads
this file there by path); the test reads the checkpoint they wrote. The pytest
process never starts the distributed runtime.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from tinax.checkpointing import abstract_restore_target, load_checkpointables, save_checkpointables
from tinax_testing import run_processes

# Each test here starts several JAX processes: longer than the suite's default limit.
pytestmark = pytest.mark.timeout(600)

SHARDED = {"weights": ("data", "model"), "bias": ("data",)}


def _host_values() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    return {
        "weights": rng.standard_normal((32, 16), dtype=np.float32),
        "bias": rng.standard_normal((32,), dtype=np.float32),
        "table": rng.standard_normal((8, 16), dtype=np.float32),
    }


def _mesh(shape: tuple[int, int]) -> jax.sharding.Mesh:
    devices = sorted(jax.devices(), key=lambda device: (device.process_index, device.id))
    return jax.make_mesh(shape, ("data", "model"), axis_types=(AxisType.Explicit,) * 2, devices=devices)


def _state(mesh: jax.sharding.Mesh) -> dict[str, Any]:
    host = _host_values()

    def place(name: str, spec: PartitionSpec) -> jax.Array:
        value = host[name]
        return jax.make_array_from_callback(value.shape, NamedSharding(mesh, spec), lambda index: value[index])

    replicated = NamedSharding(mesh, PartitionSpec())
    return {
        "weights": place("weights", PartitionSpec(*SHARDED["weights"])),
        "bias": place("bias", PartitionSpec(*SHARDED["bias"])),
        "table": place("table", PartitionSpec(None, "model")),  # Held by both processes.
        "key": jax.jit(lambda: jax.random.key(5), out_shardings=replicated)(),
        "step": 9,
    }


def _boxes(array: jax.Array) -> list[list[list[int]]]:
    """The [start, stop) box of every shard this process holds."""
    return [
        [list(part.indices(extent)[:2]) for part, extent in zip(shard.index, array.shape, strict=True)]
        for shard in array.addressable_shards
    ]


def _shards_equal(array: jax.Array, expected: np.ndarray) -> bool:
    return all(np.array_equal(np.asarray(shard.data), expected[shard.index]) for shard in array.addressable_shards)


def _restored_correctly(restored: dict[str, Any], targets: dict[str, Any]) -> dict[str, bool]:
    host = _host_values()
    checks = {name: _shards_equal(restored[name], host[name]) for name in host}
    checks.update({f"{name}-sharding": restored[name].sharding == targets[name].sharding for name in host})
    expected_key = np.asarray(jax.random.key_data(jax.random.key(5)))
    checks["key"] = all(
        np.array_equal(np.asarray(jax.random.key_data(shard.data)), expected_key)
        for shard in restored["key"].addressable_shards
    )
    checks["step"] = restored["step"] == 9
    return checks


# ---------------------------------------------------------------------------
# Body run in the children.


def _body_save_then_load(directory: str) -> dict[str, Any]:
    path = os.path.join(directory, "checkpoint")
    state = _state(_mesh((4, 2)))
    save_checkpointables(path, {"state": state}).result()

    # Every process loads in the same order: onto the saving layout, onto a
    # transposed mesh, and as host NumPy.
    same = abstract_restore_target(state)
    same_result = _restored_correctly(load_checkpointables(path, {"state": same})["state"], same)
    other_mesh = _mesh((2, 4))
    other = abstract_restore_target(_state(other_mesh))
    other_result = _restored_correctly(load_checkpointables(path, {"state": other})["state"], other)
    host_target = {**other, "weights": np.ndarray, "table": np.ndarray}
    host_loaded = load_checkpointables(path, {"state": host_target})["state"]
    host = _host_values()
    return {
        "process": jax.process_index(),
        "boxes": {name: _boxes(state[name]) for name in SHARDED},
        "same_mesh": same_result,
        "other_mesh": other_result,
        "host_numpy": {
            name: isinstance(host_loaded[name], np.ndarray) and np.array_equal(host_loaded[name], host[name])
            for name in ("weights", "table")
        },
    }


# ---------------------------------------------------------------------------
# The test.


def _chunk_boxes(folder: str, name: str, shape: tuple[int, ...], chunk_shape: list[int]) -> list[list[list[int]]]:
    import tensorstore

    store = tensorstore.KvStore.open({"driver": "ocdbt", "base": f"file://{folder}/"}).result()
    prefix = f"{name}/c/".encode()
    boxes = []
    for key in store.list().result():
        if key.startswith(prefix):
            grid = [int(part) for part in key[len(prefix) :].decode().split("/")]
            boxes.append(
                [
                    [index * extent, min((index + 1) * extent, size)]
                    for index, extent, size in zip(grid, chunk_shape, shape, strict=True)
                ]
            )
    return boxes


def _inside(box: list[list[int]], container: list[list[int]]) -> bool:
    return all(low >= start and high <= stop for (low, high), (start, stop) in zip(box, container, strict=True))


def test_two_processes_save_their_own_shards_and_load_onto_any_layout(tmp_path):
    results = run_processes(
        _body_save_then_load, num_processes=2, devices_per_process=4, args=[str(tmp_path)], timeout=240
    )
    assert [result["process"] for result in results] == [0, 1]
    for result in results:
        assert all(result["same_mesh"].values()), result["same_mesh"]
        assert all(result["other_mesh"].values()), result["other_mesh"]
        assert all(result["host_numpy"].values()), result["host_numpy"]

    import tensorstore

    folder = tmp_path / "checkpoint" / "state"
    assert (tmp_path / "checkpoint" / "_CHECKPOINT_METADATA").is_file()
    assert {f"ocdbt.process_{index}" for index in range(2)} <= {entry.name for entry in folder.iterdir()}
    merged = tensorstore.KvStore.open({"driver": "ocdbt", "base": f"file://{folder}/"}).result()
    host = _host_values()
    for name in SHARDED:
        shape = host[name].shape
        chunk_shape = json.loads(merged.read(f"{name}/zarr.json".encode()).result().value)["chunk_grid"][
            "configuration"
        ]["chunk_shape"]
        written = 0
        for result in results:
            process = result["process"]
            boxes = _chunk_boxes(str(folder / f"ocdbt.process_{process}"), name, shape, chunk_shape)
            # Each process wrote chunks, and only chunks of shards it holds.
            assert boxes, (name, process)
            for box in boxes:
                assert any(_inside(box, held) for held in result["boxes"][name]), (name, process, box)
            written += len(boxes)
        # Between them they wrote every chunk exactly once.
        assert written == math.prod(-(-size // extent) for size, extent in zip(shape, chunk_shape, strict=True))
