"""Tests for place_host_array."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from tinax.parallel import layout, make_mesh, place_host_array

EXPLICIT = AxisType.Explicit


def mesh_2x4() -> Mesh:
    return make_mesh(jax.devices(), (2, 4), ("data", "model"), axis_types=(EXPLICIT, EXPLICIT))


def aligned(shape: tuple[int, ...], dtype: type = np.float32) -> np.ndarray:
    """A C-contiguous array whose buffer starts on a 64-byte boundary."""
    count = int(np.prod(shape))
    itemsize = np.dtype(dtype).itemsize
    raw = np.zeros(count * itemsize + 64, dtype=np.uint8)
    offset = (-raw.ctypes.data) % 64
    view = raw[offset : offset + count * itemsize].view(dtype).reshape(shape)
    assert view.ctypes.data % 64 == 0
    view[...] = np.arange(count, dtype=dtype).reshape(shape)
    return view


class _RemoteSharding(NamedSharding):
    """A NamedSharding that claims some of its devices live in another process."""

    @property
    def is_fully_addressable(self) -> bool:
        return False


@pytest.mark.parametrize("copy", [True, False])
def test_place_host_array_places_by_the_layout(copy):
    sharding = layout(mesh_2x4(), ["data", "model"])
    host = np.arange(32, dtype=np.float32).reshape(4, 8)
    placed = place_host_array(host, sharding, copy=copy)
    assert isinstance(placed, jax.Array)
    assert placed.sharding == sharding
    assert placed.shape == (4, 8)
    np.testing.assert_array_equal(np.asarray(placed), np.arange(32, dtype=np.float32).reshape(4, 8))
    shard = next(shard for shard in placed.addressable_shards if shard.device == jax.devices()[5])
    np.testing.assert_array_equal(np.asarray(shard.data), host[2:4, 2:4])


def test_place_host_array_copy_true_snapshots_an_aligned_source():
    host = aligned((8, 16))
    expected = host.copy()
    placed = place_host_array(host, layout(mesh_2x4(), ["data", None]), copy=True)
    host[...] = -1.0  # Mutate immediately, before the transfer can be assumed done.
    np.testing.assert_array_equal(np.asarray(placed), expected)


def test_place_host_array_copy_true_snapshots_on_one_device():
    mesh = make_mesh(jax.devices()[:1], (1,), ("x",), axis_types=(EXPLICIT,))
    host = aligned((64,))
    expected = host.copy()
    placed = place_host_array(host, layout(mesh, [None]), copy=True)
    host[...] = 7.0
    np.testing.assert_array_equal(np.asarray(placed), expected)


def test_place_host_array_copy_false_gives_correct_values_when_source_is_kept():
    host = aligned((8, 16))
    placed = place_host_array(host, layout(mesh_2x4(), [None, "model"]), copy=False)
    np.testing.assert_array_equal(np.asarray(placed), np.arange(128, dtype=np.float32).reshape(8, 16))


def test_place_host_array_shorter_layout_replicates_trailing_dimensions():
    sharding = layout(mesh_2x4(), ["data"])
    placed = place_host_array(np.ones((2, 3, 5), np.int32), sharding, copy=True)
    assert placed.shape == (2, 3, 5)
    assert all(shard.data.shape == (1, 3, 5) for shard in placed.addressable_shards)


def test_place_host_array_accepts_auto_mesh_shardings():
    mesh = make_mesh(jax.devices(), (8,), ("x",), axis_types=(AxisType.Auto,))
    sharding = NamedSharding(mesh, PartitionSpec("x"))
    placed = place_host_array(np.arange(16, dtype=np.int32), sharding, copy=True)
    assert int(jnp.sum(placed)) == 120


def test_place_host_array_rejects_an_indivisible_shape_naming_dimension_and_axes():
    sharding = layout(mesh_2x4(), [None, ("data", "model")])
    with pytest.raises(ValueError, match=r"array dimension 1 of extent 12.*mesh axes \('data', 'model'\)"):
        place_host_array(np.zeros((3, 12), np.float32), sharding, copy=True)


def test_place_host_array_rejects_a_rank_mismatch():
    sharding = layout(mesh_2x4(), ["data", "model", None])
    with pytest.raises(ValueError, match=r"rank 2 .* describes 3 dimensions"):
        place_host_array(np.zeros((2, 4), np.float32), sharding, copy=False)


def test_place_host_array_rank_mismatch_is_also_the_index_error_of_tinax_02():
    with pytest.raises(IndexError) as caught:
        place_host_array(np.asarray(1.0), layout(mesh_2x4(), ("data",)), copy=True)
    assert isinstance(caught.value, ValueError)
    assert "rank 0" in str(caught.value)


@pytest.mark.parametrize("axis_types", [(AxisType.Manual,) * 2, (EXPLICIT, AxisType.Manual)], ids=["manual", "half"])
def test_place_host_array_refuses_a_sharding_over_manual_axes_with_a_value_error(axis_types):
    mesh = make_mesh(jax.devices(), (4, 2), ("data", "model"), axis_types=axis_types)
    with pytest.raises(ValueError, match=r"sharding must be over a mesh without Manual axes.*'model'"):
        place_host_array(np.zeros((8, 2)), NamedSharding(mesh, PartitionSpec("data")), copy=True)


def test_place_host_array_rejects_a_non_fully_addressable_sharding():
    mesh = mesh_2x4()
    sharding = _RemoteSharding(mesh, PartitionSpec("data"))
    with pytest.raises(ValueError, match="sharding must be fully addressable"):
        place_host_array(np.zeros((2,), np.float32), sharding, copy=True)


@pytest.mark.parametrize(
    ("array", "sharding", "copy", "match"),
    [
        ([1.0, 2.0], "SH", True, "array must be a numpy.ndarray"),
        (jnp.zeros(2), "SH", True, "array must be a numpy.ndarray"),
        (np.array([object(), object()]), "SH", True, "numeric or bool dtype"),
        (np.zeros(2), jax.devices, True, "sharding must be a jax.sharding.NamedSharding"),
        (np.zeros(2), "SH", 1, "copy must be a bool"),
        (np.zeros(2), "SH", None, "copy must be a bool"),
    ],
)
def test_place_host_array_rejects_wrong_kinds(array, sharding, copy, match):
    if sharding == "SH":
        sharding = layout(mesh_2x4(), ["data"])
    elif sharding is jax.devices:
        sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    with pytest.raises(TypeError, match=match):
        place_host_array(array, sharding, copy=copy)


@pytest.mark.parametrize("copy", [True, False])
def test_place_host_array_refuses_a_masked_array_with_masked_elements(copy):
    values = np.ma.masked_array(np.arange(8, dtype=np.float32).reshape(2, 4), mask=False)
    values[1, 2] = np.ma.masked
    with pytest.raises(ValueError, match="masked"):
        place_host_array(values, layout(mesh_2x4(), ["data", "model"]), copy=copy)


@pytest.mark.parametrize("copy", [True, False])
def test_place_host_array_places_the_data_of_a_masked_array_without_masked_elements(copy):
    values = np.ma.masked_array(np.arange(8, dtype=np.float32).reshape(2, 4), mask=False)
    placed = place_host_array(values, layout(mesh_2x4(), ["data", "model"]), copy=copy)
    np.testing.assert_array_equal(np.asarray(placed), np.arange(8, dtype=np.float32).reshape(2, 4))
