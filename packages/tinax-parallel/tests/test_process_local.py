"""Single-process tests for from_process_local_data (multi-process runs live elsewhere)."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh

from tinax._parallel._process_local import cross_process_replicas
from tinax.parallel import from_process_local_data, layout, make_mesh

EXPLICIT = AxisType.Explicit


def mesh_2x4() -> Mesh:
    return make_mesh(jax.devices(), (2, 4), ("data", "model"), axis_types=(EXPLICIT, EXPLICIT))


def aligned(shape: tuple[int, ...]) -> np.ndarray:
    count = int(np.prod(shape))
    raw = np.zeros(count * 4 + 64, dtype=np.uint8)
    offset = (-raw.ctypes.data) % 64
    view = raw[offset : offset + count * 4].view(np.float32).reshape(shape)
    view[...] = np.arange(count, dtype=np.float32).reshape(shape)
    return view


def build(local=None, sharding=None, global_shape=(4, 8), **overrides):
    arguments = {"copy": True, "replica_policy": "disallow"}
    arguments.update(overrides)
    if local is None:
        local = np.arange(32, dtype=np.float32).reshape(4, 8)
    if sharding is None:
        sharding = layout(mesh_2x4(), ["data", "model"])
    return from_process_local_data(local, sharding, global_shape, **arguments)


@pytest.mark.parametrize("policy", ["disallow", "assume_consistent"])
@pytest.mark.parametrize("copy", [True, False])
def test_single_process_assembles_the_whole_array(policy, copy):
    sharding = layout(mesh_2x4(), ["data", None])
    result = build(sharding=sharding, copy=copy, replica_policy=policy)
    assert result.shape == (4, 8)
    assert result.sharding == sharding
    np.testing.assert_array_equal(np.asarray(result), np.arange(32, dtype=np.float32).reshape(4, 8))


def test_declared_process_index_and_count_that_match_are_accepted():
    result = build(process_index=0, process_count=1)
    assert result.shape == (4, 8)


def test_copy_true_snapshots_an_aligned_source():
    local = aligned((4, 8))
    expected = local.copy()
    mesh = make_mesh(jax.devices()[:1], (1,), ("x",), axis_types=(EXPLICIT,))
    result = build(local=local, sharding=layout(mesh, [None, None]))
    local[...] = -1.0
    np.testing.assert_array_equal(np.asarray(result), expected)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"local": [[1.0]]}, "local_data must be a numpy.ndarray"),
        ({"local": np.array([[object()]])}, "numeric or bool dtype"),
        ({"sharding": "S"}, "sharding must be a jax.sharding.NamedSharding"),
        ({"global_shape": 4}, "global_shape must be a sequence of ints"),
        ({"global_shape": (4, True)}, r"global_shape\[1\] must be an int"),
        ({"copy": 1}, "copy must be a bool"),
        ({"replica_policy": None}, "replica_policy must be one of"),
        ({"process_index": True}, "process_index must be an int"),
        ({"process_index": 0.0}, "process_index must be an int"),
        ({"process_count": True}, "process_count must be an int"),
        ({"process_count": "1"}, "process_count must be an int"),
    ],
)
def test_rejects_wrong_kinds(overrides, match):
    with pytest.raises(TypeError, match=match):
        build(**overrides)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"replica_policy": "gather"}, "replica_policy must be one of 'disallow', 'assume_consistent'"),
        ({"process_index": -1}, "process_index must be an int >= 0"),
        ({"process_count": 0}, "process_count must be an int >= 1"),
        ({"global_shape": (4, 8, 1)}, "local_data has rank 2 .* rank 3"),
        ({"global_shape": (-4, 8)}, r"global_shape\[0\] must be an int >= 0"),
        (
            {"global_shape": (3, 8), "local": np.zeros((3, 8), np.float32)},
            r"global_shape dimension 0 of extent 3 .* mesh axes \('data',\)",
        ),
        ({"global_shape": (4, 16)}, r"local_data must have shape \(4, 16\)"),
        ({"local": np.zeros((2, 8), np.float32)}, r"local_data must have shape \(4, 8\)"),
    ],
)
def test_rejects_bad_values(overrides, match):
    with pytest.raises(ValueError, match=match):
        build(**overrides)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"process_count": 2}, "process_count is 2, but the JAX runtime has 1"),
        ({"process_index": 0, "process_count": 2}, "process_count is 2"),
        # An index the runtime cannot have disagrees with it, as in tinax 0.2.
        ({"process_index": 1}, "process_index is 1, but the JAX runtime says this is process 0"),
        ({"process_index": 2, "process_count": 2}, "process_index is 2"),
        ({"process_index": 1, "process_count": 1}, "process_index is 1"),
    ],
)
def test_rejects_a_runtime_mismatch(overrides, match):
    with pytest.raises(RuntimeError, match=match) as raised:
        build(**overrides)
    assert not isinstance(raised.value, ValueError)


def refuse_lookup(what: str):
    def lookup(*args, **kwargs):
        raise AssertionError(f"{what} was queried")

    return lookup


@pytest.mark.parametrize(
    ("declared", "queried"),
    [
        ({}, set()),
        ({"process_index": 0}, {"process_index"}),
        ({"process_count": 1}, {"process_count"}),
        ({"process_index": 0, "process_count": 1}, {"process_index", "process_count"}),
    ],
    ids=["nothing", "index", "count", "both"],
)
def test_process_identity_is_queried_only_when_declared(monkeypatch, declared, queried):
    asked: list[str] = []
    for name in ("process_index", "process_count"):
        runtime = getattr(jax, name)
        if name in queried:
            monkeypatch.setattr(jax, name, lambda runtime=runtime, name=name: (asked.append(name), runtime())[1])
        else:
            monkeypatch.setattr(jax, name, refuse_lookup(name))
    result = build(**declared)
    np.testing.assert_array_equal(np.asarray(result), np.arange(32, dtype=np.float32).reshape(4, 8))
    assert set(asked) == queried


def test_rejects_a_process_index_the_runtime_disagrees_with(monkeypatch):
    monkeypatch.setattr(jax, "process_index", lambda: 3)
    with pytest.raises(RuntimeError, match="process_index is 0, but the JAX runtime says this is process 3"):
        build(process_index=0, process_count=1)


@dataclass(frozen=True)
class FakeDevice:
    id: int
    process_index: int


def test_cross_process_replicas_finds_blocks_held_by_several_processes():
    first, second = slice(0, 2), slice(2, 4)
    indices = {
        FakeDevice(0, 0): (first,),
        FakeDevice(1, 0): (second,),
        FakeDevice(2, 1): (first,),
        FakeDevice(3, 1): (slice(2, 4, 1),),
    }
    assert cross_process_replicas(indices, (4,)) == [(((0, 2, 1),), (0, 1)), (((2, 4, 1),), (0, 1))]


def test_cross_process_replicas_ignores_replicas_within_one_process():
    first, second = slice(0, 2), slice(2, 4)
    indices = {
        FakeDevice(0, 0): (first,),
        FakeDevice(1, 0): (first,),
        FakeDevice(2, 1): (second,),
        FakeDevice(3, 1): (second,),
    }
    assert cross_process_replicas(indices, (4,)) == []
    assert cross_process_replicas({FakeDevice(0, 0): (slice(0, 2),), FakeDevice(1, 1): (slice(2, 4),)}, (4,)) == []


def test_single_process_layouts_never_replicate_across_processes():
    sharding = layout(mesh_2x4(), [None, None])
    assert cross_process_replicas(sharding.devices_indices_map((4, 8)), (4, 8)) == []


@pytest.mark.parametrize("copy", [True, False])
def test_rejects_local_data_with_masked_elements(copy):
    local = np.ma.masked_array(np.arange(32, dtype=np.float32).reshape(4, 8), mask=False)
    local[0, 0] = np.ma.masked
    with pytest.raises(ValueError, match="masked"):
        build(local=local, copy=copy)


def test_accepts_a_masked_array_without_masked_elements_as_its_data():
    local = np.ma.masked_array(np.arange(32, dtype=np.float32).reshape(4, 8), mask=False)
    np.testing.assert_array_equal(np.asarray(build(local=local)), np.arange(32, dtype=np.float32).reshape(4, 8))
