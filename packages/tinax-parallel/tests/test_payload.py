"""Tests for logical_payload_nbytes, addressable_payload_nbytes and addressable_indices."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from tinax.parallel import (
    addressable_indices,
    addressable_payload_nbytes,
    layout,
    logical_payload_nbytes,
    make_mesh,
)

EXPLICIT = AxisType.Explicit


def mesh_2x4() -> Mesh:
    return make_mesh(jax.devices(), (2, 4), ("data", "model"), axis_types=(EXPLICIT, EXPLICIT))


def sharded(shape: tuple[int, ...], partitions: list[str | None], dtype: type = np.float32) -> jax.Array:
    return jax.device_put(np.zeros(shape, dtype), layout(mesh_2x4(), partitions))


def sharded_keys() -> jax.Array:
    keys = jax.random.split(jax.random.key(0), 8)
    mesh = make_mesh(jax.devices(), (2, 4), ("data", "model"), axis_types=(AxisType.Auto, AxisType.Auto))
    return jax.device_put(keys, NamedSharding(mesh, PartitionSpec("model")))


# logical_payload_nbytes ------------------------------------------------------


def test_logical_payload_nbytes_counts_one_copy():
    assert logical_payload_nbytes(sharded((4, 8), [None, None])) == 4 * 8 * 4
    assert logical_payload_nbytes(sharded((4, 8), ["data", "model"])) == 4 * 8 * 4
    assert logical_payload_nbytes(jnp.zeros((3,), jnp.int8)) == 3
    assert logical_payload_nbytes(jnp.zeros((0, 5))) == 0
    assert logical_payload_nbytes(jnp.float32(1)) == 4


def test_logical_payload_nbytes_is_none_for_keys():
    assert logical_payload_nbytes(jax.random.key(0)) is None
    assert logical_payload_nbytes(sharded_keys()) is None


def test_logical_payload_nbytes_sizes_traced_values():
    seen = []

    def body(x):
        seen.append(logical_payload_nbytes(x))
        return x

    jax.jit(body)(jnp.zeros((2, 3), jnp.float32))
    assert seen == [24]


@pytest.mark.parametrize("value", [np.zeros(2), [1, 2], None, jax.ShapeDtypeStruct((2,), jnp.float32)])
def test_logical_payload_nbytes_rejects_non_arrays(value):
    with pytest.raises(TypeError, match="array must be a jax.Array"):
        logical_payload_nbytes(value)


# addressable_payload_nbytes --------------------------------------------------


def test_addressable_payload_nbytes_counts_replicas_on_each_device():
    # Fully replicated over 8 local devices: 8 full copies.
    assert addressable_payload_nbytes(sharded((4, 8), [None, None])) == 8 * 4 * 8 * 4
    # Split over "data" (2) and replicated over "model" (4): each device holds half.
    assert addressable_payload_nbytes(sharded((4, 8), ["data", None])) == 8 * (2 * 8 * 4)
    # Split over every device: exactly one copy in total.
    assert addressable_payload_nbytes(sharded((4, 8), ["data", "model"])) == 4 * 8 * 4


def test_addressable_payload_nbytes_single_device_equals_logical():
    value = jnp.zeros((5, 3), jnp.float16)
    assert addressable_payload_nbytes(value) == logical_payload_nbytes(value) == 30


def test_addressable_payload_nbytes_handles_scalars_and_empty_arrays():
    assert addressable_payload_nbytes(sharded((), [])) == 8 * 4
    assert addressable_payload_nbytes(sharded((0, 8), [None, "model"])) == 0


def test_addressable_payload_nbytes_is_none_for_keys():
    assert addressable_payload_nbytes(sharded_keys()) is None


def test_addressable_payload_nbytes_does_not_touch_deleted_data():
    value = sharded((4, 8), ["data", "model"])
    value.delete()
    assert addressable_payload_nbytes(value) == 4 * 8 * 4


def test_addressable_payload_nbytes_rejects_tracers():
    def body(x):
        addressable_payload_nbytes(x)
        return x

    # JAX's own error for a traced value used as a concrete one, as tinax 0.2 raised it.
    with pytest.raises(jax.errors.ConcretizationTypeError, match="array must be a concrete jax.Array"):
        jax.jit(body)(jnp.zeros(2))


@pytest.mark.parametrize("value", [np.zeros(2), 3, None])
def test_addressable_payload_nbytes_rejects_non_arrays(value):
    with pytest.raises(TypeError, match="array must be a jax.Array"):
        addressable_payload_nbytes(value)


# addressable_indices ---------------------------------------------------------


def test_addressable_indices_maps_every_local_device():
    value = sharded((4, 8), ["data", "model"])
    indices = addressable_indices(value)
    assert set(indices) == set(jax.devices())
    assert indices[jax.devices()[0]] == (slice(0, 2), slice(0, 2))
    assert indices[jax.devices()[7]] == (slice(2, 4), slice(6, 8))
    for shard in value.addressable_shards:
        assert indices[shard.device] == shard.index


def test_addressable_indices_of_a_sharded_key_array_have_the_key_rank():
    keys = sharded_keys()
    indices = addressable_indices(keys)
    assert set(indices) == set(jax.devices())
    for device, index in indices.items():
        assert index is not None
        assert len(index) == keys.ndim == 1
        position = jax.devices().index(device) % 4
        assert index[0] == slice(2 * position, 2 * position + 2)
    # Shard.index carries an extra trailing slice for the key data.
    assert all(len(shard.index) == 2 for shard in keys.addressable_shards)


def test_addressable_indices_returns_a_fresh_dict():
    value = sharded((4,), ["data"])
    first = addressable_indices(value)
    first.clear()
    assert len(addressable_indices(value)) == 8


def test_addressable_indices_rejects_tracers():
    def body(x):
        addressable_indices(x)
        return x

    # JAX's own error for a traced value used as a concrete one, as tinax 0.2 raised it.
    with pytest.raises(jax.errors.ConcretizationTypeError, match="array must be a concrete jax.Array"):
        jax.jit(body)(jnp.zeros(2))


@pytest.mark.parametrize("value", [np.zeros(2), "x", None])
def test_addressable_indices_rejects_non_arrays(value):
    with pytest.raises(TypeError, match="array must be a jax.Array"):
        addressable_indices(value)
