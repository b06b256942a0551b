"""Records on disk, through training batches and host placement, into one compiled step on a 2x4 mesh.

The seam: ``tinax.data`` writes and reads records and cuts deterministic
batches; ``tinax.parallel.place_host_array`` lays each host batch out over the
``data`` axis of an Explicit (data, model) mesh; ``tinax.jit.bounded_jit``
compiles a step once and runs it over every batch. The test checks what each
device holds, that the step never retraces, and that its results equal NumPy's.

The features, weights and targets are small integers stored as float32, so
every product and sum in the step is an exactly representable integer: the
results do not depend on the reduction order, and "equal" means bit for bit.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

pytest.importorskip("grain", reason="training_batches builds a grain pipeline")

import grain
import jax
import jax.numpy as jnp
from jax.sharding import AxisType, Mesh

from tinax.data import InMemorySource, read_parquet_record, training_batches, write_parquet_record
from tinax.jit import bounded_jit
from tinax.parallel import layout, make_mesh, place_host_array

ROWS = 48
FEATURES = 4
TARGETS = 3
BATCH_SIZE = 8
DATA_AXIS = 2
MODEL_AXIS = 4
SEED = 11


def _records() -> list[dict[str, Any]]:
    generator = np.random.default_rng(3)
    features = generator.integers(-4, 5, size=(ROWS, FEATURES)).astype(np.float32)
    targets = generator.integers(-9, 10, size=(ROWS, TARGETS)).astype(np.float32)
    return [{"row": index, "x": features[index], "y": targets[index]} for index in range(ROWS)]


def _stack(rows: Sequence[dict[str, Any]]) -> dict[str, np.ndarray]:
    return {
        "row": np.asarray([row["row"] for row in rows], dtype=np.int32),
        "x": np.stack([row["x"] for row in rows]),
        "y": np.stack([row["y"] for row in rows]),
    }


def _batches(dataset: Any) -> list[dict[str, np.ndarray]]:
    pipeline = training_batches(
        dataset,
        shard_options=grain.sharding.ShardOptions(shard_index=0, shard_count=1, drop_remainder=True),
        seed=SEED,
        shuffle=True,
        num_epochs=1,
        batch_size=BATCH_SIZE,
        batch_fn=_stack,
    )
    return list(iter(pipeline))


def _mesh() -> Mesh:
    return make_mesh(
        jax.devices(), (DATA_AXIS, MODEL_AXIS), ("data", "model"), axis_types=(AxisType.Explicit, AxisType.Explicit)
    )


def _assert_rows_split_over_data(placed: jax.Array, host: np.ndarray, mesh: Mesh) -> None:
    """Each device holds the rows of its data coordinate, whole along every other dimension."""
    rows_per_shard = host.shape[0] // DATA_AXIS
    shards = placed.addressable_shards
    assert len(shards) == DATA_AXIS * MODEL_AXIS
    assert {shard.device for shard in shards} == set(mesh.devices.flat)
    for shard in shards:
        [[data_index, _model_index]] = np.argwhere(mesh.devices == shard.device)
        first = int(data_index) * rows_per_shard
        rows = slice(first, first + rows_per_shard)
        assert shard.index[0] == rows
        assert all(entry == slice(None) for entry in shard.index[1:])
        np.testing.assert_array_equal(np.asarray(shard.data), host[rows])


def test_parquet_batches_placed_over_data_feed_a_step_traced_once(tmp_path: pathlib.Path) -> None:
    records = _records()
    path = tmp_path / "rows.parquet"
    write_parquet_record(path, records)
    # The NumPy mapping gives the arrays back with their dtype; the default,
    # as in tinax 0.2, gives lists of Python numbers.
    parquet_batches = _batches(read_parquet_record(path, mapping="numpy"))
    in_memory_batches = _batches(grain.MapDataset.source(InMemorySource(records, source_id="seam-data-jit/v1")))

    # Reading back through Parquet (NumPy mapping) changes nothing: the same rows, in the same batches.
    assert len(parquet_batches) == ROWS // BATCH_SIZE
    for from_file, from_memory in zip(parquet_batches, in_memory_batches, strict=True):
        assert from_file.keys() == from_memory.keys()
        for name in from_file:
            assert from_file[name].dtype == from_memory[name].dtype
            np.testing.assert_array_equal(from_file[name], from_memory[name])
    # One epoch, shuffled: every record exactly once, not in file order.
    rows_seen = np.concatenate([batch["row"] for batch in parquet_batches])
    assert sorted(rows_seen.tolist()) == list(range(ROWS))
    assert rows_seen.tolist() != list(range(ROWS))

    mesh = _mesh()
    rows_layout = layout(mesh, ("data", None))
    weights_host = np.random.default_rng(4).integers(-3, 4, size=(FEATURES, TARGETS)).astype(np.float32)
    weights = place_host_array(weights_host, layout(mesh, (None, None)), copy=True)
    total = place_host_array(np.zeros(TARGETS, np.float32), layout(mesh, (None,)), copy=True)

    def step(total: jax.Array, weights: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
        residual = x @ weights - y
        return total + jnp.sum(residual * residual, axis=0), residual

    step_fn = bounded_jit(step, max_traces=1, mesh=mesh)
    expected_total = np.zeros(TARGETS, np.float32)
    for batch in parquet_batches:
        x = place_host_array(batch["x"], rows_layout, copy=True)
        y = place_host_array(batch["y"], rows_layout, copy=True)
        assert x.sharding == rows_layout
        assert y.sharding == rows_layout
        _assert_rows_split_over_data(x, batch["x"], mesh)
        _assert_rows_split_over_data(y, batch["y"], mesh)

        total, residual = step_fn(total, weights, x, y)

        expected_residual = batch["x"] @ weights_host - batch["y"]
        expected_total += np.sum(expected_residual * expected_residual, axis=0)
        # The per-row result stays where its rows are.
        assert residual.sharding == rows_layout
        _assert_rows_split_over_data(residual, expected_residual, mesh)
        np.testing.assert_array_equal(np.asarray(residual), expected_residual)

    assert step_fn.trace_count == 1
    assert total.dtype == np.float32
    assert total.sharding.is_fully_replicated
    np.testing.assert_array_equal(np.asarray(total), expected_total)
    # Not vacuous: the accumulated squared residuals are large and differ per target.
    assert len(set(expected_total.tolist())) == TARGETS
    assert expected_total.min() > 0
