"""Key streams per process, step and stream never collide, and never repeat the root's own splits.

A training run derives one key per (process, step, stream) coordinate with
``tinax.random.derive_process_step_key`` and, elsewhere, splits its root with
``split_key``. Any two of those keys being equal would silently correlate two
"independent" random draws. The grid here is 8 processes x 256 steps x 4
streams (8192 keys), derived in one jitted ``vmap`` with unsigned coordinate
arrays and compared by their raw key data.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tinax.random import derive_key, derive_process_step_key, split_key

PROCESSES = 8
STEPS = 256
STREAMS = 4
ROOT_SEED = 2026


def _grid_key_data_of(root: jax.Array, processes: jax.Array, steps: jax.Array, streams: jax.Array) -> jax.Array:
    def one(process: jax.Array, step: jax.Array, stream: jax.Array) -> jax.Array:
        key = derive_process_step_key(root, process_index=process, step=step, stream=stream)
        return jax.random.key_data(key)

    over_streams = jax.vmap(one, in_axes=(None, None, 0))
    over_steps = jax.vmap(over_streams, in_axes=(None, 0, None))
    over_processes = jax.vmap(over_steps, in_axes=(0, None, None))
    return over_processes(processes, steps, streams)


# One compilation serves every root: the root is an argument, not a constant.
_derive_grid = jax.jit(_grid_key_data_of)


def _grid_key_data(root: jax.Array) -> np.ndarray:
    """Key data of every (process, step, stream) key, shaped (PROCESSES, STEPS, STREAMS, words)."""
    return np.asarray(
        _derive_grid(
            root,
            jnp.arange(PROCESSES, dtype=jnp.uint32),
            jnp.arange(STEPS, dtype=jnp.uint32),
            jnp.arange(STREAMS, dtype=jnp.uint32),
        )
    )


def _rows(key_data: np.ndarray) -> set[bytes]:
    flat = np.ascontiguousarray(key_data.reshape(-1, key_data.shape[-1]))
    return {row.tobytes() for row in flat}


def test_grid_of_process_step_stream_keys_is_collision_free() -> None:
    root = jax.random.key(ROOT_SEED)
    key_data = _grid_key_data(root)

    assert key_data.shape[:3] == (PROCESSES, STEPS, STREAMS)
    assert key_data.dtype == np.uint32
    grid = _rows(key_data)
    assert len(grid) == PROCESSES * STEPS * STREAMS

    # Neither the root nor any key its splits hand out is one of the derived keys.
    continuation, operation_keys = split_key(root, count=PROCESSES * STEPS)
    split_rows = _rows(np.asarray(jax.random.key_data(operation_keys)))
    split_rows |= _rows(np.asarray(jax.random.key_data(continuation))[None])
    assert len(split_rows) == PROCESSES * STEPS + 1
    assert not grid & split_rows
    assert np.asarray(jax.random.key_data(root)).tobytes() not in grid


def test_same_coordinates_give_the_same_key() -> None:
    root = jax.random.key(ROOT_SEED)
    key_data = _grid_key_data(root)

    # The whole grid again, from a fresh root made from the same seed: identical.
    np.testing.assert_array_equal(_grid_key_data(jax.random.key(ROOT_SEED)), key_data)
    # Eager Python-int coordinates give what the traced uint32 coordinates gave.
    for process, step, stream in [(0, 0, 0), (7, 255, 3), (3, 17, 1), (5, 128, 2)]:
        eager = derive_process_step_key(root, process_index=process, step=step, stream=stream)
        np.testing.assert_array_equal(np.asarray(jax.random.key_data(eager)), key_data[process, step, stream])
        same_by_position = derive_key(root, process, step, stream)
        np.testing.assert_array_equal(
            np.asarray(jax.random.key_data(same_by_position)), key_data[process, step, stream]
        )
    # The default stream is stream 0.
    default_stream = derive_process_step_key(root, process_index=2, step=9)
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(default_stream)), key_data[2, 9, 0])


def test_another_root_gives_a_disjoint_grid() -> None:
    grid = _rows(_grid_key_data(jax.random.key(ROOT_SEED)))
    other = _rows(_grid_key_data(jax.random.key(ROOT_SEED + 1)))

    assert len(other) == PROCESSES * STEPS * STREAMS
    assert not grid & other
