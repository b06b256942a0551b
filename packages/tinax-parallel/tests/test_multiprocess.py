"""Real multi-process runs: each test starts N local processes as one JAX runtime.

The ``_body_*`` functions run inside the child processes (the harness loads
this file there by path); the tests only look at the JSON they return. The
pytest process itself never starts the distributed runtime.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from tinax.parallel import from_process_local_data, layout, make_mesh, shard_mapped
from tinax_testing import run_processes

# Each test here starts several JAX processes: longer than the suite's default limit.
pytestmark = pytest.mark.timeout(600)

LAYOUTS = [
    pytest.param(2, 4, id="2proc-x-4dev"),
    pytest.param(4, 2, id="4proc-x-2dev"),
]

ROWS_PER_DEVICE = 2


def _process_major_devices() -> list[jax.Device]:
    return sorted(jax.devices(), key=lambda device: (device.process_index, device.id))


def _error(error: BaseException) -> dict[str, str]:
    return {"type": type(error).__name__, "message": str(error)}


def _shards_match(array: jax.Array, expected: np.ndarray) -> bool:
    return all(np.array_equal(np.asarray(shard.data), expected[shard.index]) for shard in array.addressable_shards)


# ---------------------------------------------------------------------------
# Bodies run in the children.


def _body_assemble_rows() -> dict[str, Any]:
    devices = _process_major_devices()
    rows = ROWS_PER_DEVICE * len(devices)
    expected = np.arange(rows * 3, dtype=np.int32).reshape(rows, 3)
    mesh = make_mesh(devices, (len(devices),), ("data",), axis_types=(AxisType.Explicit,))
    sharding = layout(mesh, ("data", None))
    per_process = rows // jax.process_count()
    start = jax.process_index() * per_process
    local = expected[start : start + per_process].copy()

    array = from_process_local_data(local, sharding, expected.shape, copy=True, replica_policy="disallow")
    own_rows = sorted({row for shard in array.addressable_shards for row in range(*shard.index[0].indices(rows))})
    total = jax.jit(jnp.sum)(array)
    return {
        "process": jax.process_index(),
        "shape": list(array.shape),
        "rows": own_rows,
        "shards_ok": _shards_match(array, expected),
        "total": int(np.asarray(total)),
        "expected_total": int(expected.sum()),
    }


def _cross_process_mesh() -> Mesh:
    # 'data' runs over the devices of one process, 'model' across processes,
    # so anything not split on 'model' is held by every process.
    count = jax.process_count()
    devices = _process_major_devices()
    per_process = len(devices) // count
    grid = [devices[process * per_process + local] for local in range(per_process) for process in range(count)]
    return make_mesh(grid, (per_process, count), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)


def _body_replicated_across_processes(partitions: list[str | None]) -> dict[str, Any]:
    mesh = _cross_process_mesh()
    sharding = layout(mesh, tuple(partitions))
    rows = 2 * mesh.shape["data"]
    expected = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    result: dict[str, Any] = {"process": jax.process_index()}
    try:
        from_process_local_data(expected.copy(), sharding, expected.shape, copy=True, replica_policy="disallow")
    except Exception as error:
        result["disallow"] = _error(error)
    else:
        result["disallow"] = None
    array = from_process_local_data(
        expected.copy(), sharding, expected.shape, copy=True, replica_policy="assume_consistent"
    )
    result["shards_ok"] = _shards_match(array, expected)
    result["total"] = float(np.asarray(jax.jit(jnp.sum)(array)))
    result["expected_total"] = float(expected.sum())
    return result


def _body_wrong_declared_process() -> dict[str, Any]:
    count, index = jax.process_count(), jax.process_index()
    devices = _process_major_devices()
    mesh = make_mesh(devices, (len(devices),), ("data",), axis_types=(AxisType.Explicit,))
    sharding = layout(mesh, ("data",))
    per_process = len(devices) // count
    local = np.arange(index * per_process, (index + 1) * per_process, dtype=np.int32)
    outcomes: dict[str, Any] = {"process": index}
    for name, declared in {
        "index": {"process_index": (index + 1) % count},
        "count": {"process_count": count + 1},
        "index_out_of_range": {"process_index": count},
    }.items():
        try:
            from_process_local_data(local, sharding, (len(devices),), copy=True, replica_policy="disallow", **declared)
        except Exception as error:
            outcomes[name] = _error(error)
        else:
            outcomes[name] = None
    right = from_process_local_data(
        local, sharding, (len(devices),), copy=True, replica_policy="disallow", process_index=index, process_count=count
    )
    outcomes["right_ok"] = _shards_match(right, np.arange(len(devices), dtype=np.int32))
    return outcomes


def _body_psum() -> dict[str, Any]:
    devices = _process_major_devices()
    mesh = make_mesh(devices, (len(devices),), ("data",), axis_types=(AxisType.Manual,))
    # The input lives on the same devices under an Auto mesh: a NamedSharding
    # over a Manual mesh cannot hold data.
    input_sharding = NamedSharding(Mesh(np.array(devices), ("data",)), PartitionSpec("data"))
    per_process = len(devices) // jax.process_count()
    start = jax.process_index() * per_process
    local = np.arange(start + 1, start + per_process + 1, dtype=np.float32)
    values = from_process_local_data(local, input_sharding, (len(devices),), copy=True, replica_policy="disallow")

    summed = shard_mapped(
        lambda block: jax.lax.psum(block, "data"),
        mesh=mesh,
        in_specs=PartitionSpec("data"),
        out_specs=PartitionSpec(),
    )
    return {
        "process": jax.process_index(),
        "eager": np.asarray(summed(values)).tolist(),
        "jit": np.asarray(jax.jit(summed)(values)).tolist(),
        "expected": float(len(devices) * (len(devices) + 1) // 2),
    }


# ---------------------------------------------------------------------------
# Tests run in the pytest process.


@pytest.mark.parametrize(("processes", "devices"), LAYOUTS)
def test_from_process_local_data_assembles_each_process_rows(processes: int, devices: int) -> None:
    results = run_processes(_body_assemble_rows, num_processes=processes, devices_per_process=devices)

    rows = ROWS_PER_DEVICE * processes * devices
    per_process = rows // processes
    assert [result["process"] for result in results] == list(range(processes))
    for process, result in enumerate(results):
        assert result["shape"] == [rows, 3]
        assert result["rows"] == list(range(process * per_process, (process + 1) * per_process))
        assert result["shards_ok"] is True
        assert result["total"] == result["expected_total"] == rows * 3 * (rows * 3 - 1) // 2


@pytest.mark.parametrize(("processes", "devices"), LAYOUTS)
@pytest.mark.parametrize(
    "partitions", [pytest.param(["data", None], id="data-only"), pytest.param([None, None], id="replicated")]
)
def test_replica_policy_across_processes(processes: int, devices: int, partitions: list[str | None]) -> None:
    results = run_processes(
        _body_replicated_across_processes,
        num_processes=processes,
        devices_per_process=devices,
        args=[partitions],
    )

    assert [result["process"] for result in results] == list(range(processes))
    for result in results:
        assert result["disallow"] is not None
        assert result["disallow"]["type"] == "ValueError"
        assert "replica_policy='disallow'" in result["disallow"]["message"]
        assert result["shards_ok"] is True
        assert result["total"] == result["expected_total"]


@pytest.mark.parametrize(("processes", "devices"), LAYOUTS)
def test_wrong_declared_process_index_or_count(processes: int, devices: int) -> None:
    results = run_processes(_body_wrong_declared_process, num_processes=processes, devices_per_process=devices)

    for process, result in enumerate(results):
        assert result["process"] == process
        assert result["index"]["type"] == "RuntimeError"
        assert f"this is process {process}" in result["index"]["message"]
        assert result["count"]["type"] == "RuntimeError"
        assert f"has {processes} processes" in result["count"]["message"]
        assert result["index_out_of_range"]["type"] == "RuntimeError"
        assert f"process_index is {processes}" in result["index_out_of_range"]["message"]
        assert result["right_ok"] is True


@pytest.mark.parametrize(("processes", "devices"), LAYOUTS)
def test_shard_mapped_psum_across_processes(processes: int, devices: int) -> None:
    results = run_processes(_body_psum, num_processes=processes, devices_per_process=devices)

    total = processes * devices
    for process, result in enumerate(results):
        assert result["process"] == process
        assert result["eager"] == result["jit"] == [result["expected"]]
        assert result["expected"] == total * (total + 1) / 2
