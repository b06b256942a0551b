"""What code written for tinax 0.2 relies on: leafless states, targets without shardings, quiet loads, error classes.

Each test states a behaviour tinax 0.2 had and 0.3 keeps, checked with real
optax and Flax NNX states (imported only where a test needs them: neither is
a dependency of tinax-checkpointing) and real checkpoint folders.
"""

from __future__ import annotations

import json
import logging
import pathlib
import shutil
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec, SingleDeviceSharding

from tinax.checkpointing import (
    TrainingCheckpoint,
    abstract_restore_target,
    load_checkpointables,
    load_training_checkpoint,
    save_checkpointables,
    save_training_checkpoint,
)
from tinax.checkpointing.legacy.v0 import (
    load_legacy_v0_grain_iterator,
    load_legacy_v0_pytree,
    save_legacy_v0_grain_iterator,
    save_legacy_v0_pytree,
)


def _optax() -> Any:
    return pytest.importorskip("optax", reason="optax is not installed (it is not a dependency of tinax-checkpointing)")


def _nnx() -> Any:
    return pytest.importorskip(
        "flax.nnx", reason="flax is not installed (it is not a dependency of tinax-checkpointing)"
    )


def _iterator() -> Any:
    iterator = iter(grain.MapDataset.range(12).batch(3).to_iter_dataset())
    next(iterator)
    return iterator


def _params() -> dict[str, jax.Array]:
    return {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(3)}


def _optimizers() -> dict[str, Any]:
    optax = _optax()
    return {
        "sgd": optax.sgd(0.1),
        "chain": optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.1)),
        "adam": optax.adam(1e-3),
        "masked": optax.masked(optax.adam(1e-3), {"w": True, "b": False}),
    }


def _same_values(restored: Any, expected: Any) -> None:
    assert jax.tree_util.tree_structure(restored) == jax.tree_util.tree_structure(expected)
    for got, want in zip(jax.tree_util.tree_leaves(restored), jax.tree_util.tree_leaves(expected), strict=True):
        if jnp.issubdtype(want.dtype, jax.dtypes.prng_key):
            got, want = jax.random.key_data(got), jax.random.key_data(want)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


# ---------------------------------------------------------------------------
# States without leaves (optax's sgd state is one) save and load


@pytest.mark.parametrize("name", ["sgd", "chain", "adam", "masked"])
def test_optax_states_with_and_without_leaves_round_trip_in_a_training_checkpoint(tmp_path, name):
    params = _params()
    state = _optimizers()[name].init(params)
    if name in ("sgd", "chain"):
        assert jax.tree_util.tree_leaves(state) == []  # (EmptyState(), EmptyState()) and the like
    path = tmp_path / "checkpoint"
    save_training_checkpoint(path, 3, params, state, jax.random.key(0), None, _iterator()).result()
    restored = load_training_checkpoint(
        path,
        abstract_restore_target(params),
        abstract_restore_target(state),
        abstract_restore_target(jax.random.key(1)),
        None,
        _iterator(),
    )
    assert restored.step == 3
    _same_values(restored.optimizer, state)
    _same_values(restored.model, params)


@pytest.mark.parametrize("name", ["sgd", "chain", "masked"])
def test_optax_states_round_trip_as_checkpointables(tmp_path, name):
    params = _params()
    state = _optimizers()[name].init(params)
    save_checkpointables(tmp_path / "checkpoint", {"optimizer": state}).result()
    restored = load_checkpointables(tmp_path / "checkpoint", {"optimizer": abstract_restore_target(state)})
    _same_values(restored["optimizer"], state)


def test_an_nnx_optimizer_and_model_round_trip_into_freshly_initialized_state(tmp_path):
    nnx, optax = _nnx(), _optax()
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(params=0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    path = tmp_path / "checkpoint"
    save_training_checkpoint(
        path, 1, nnx.state(model), nnx.state(optimizer), jax.random.key(2), {}, _iterator()
    ).result()
    fresh = nnx.Linear(3, 2, rngs=nnx.Rngs(params=9))
    fresh_optimizer = nnx.Optimizer(fresh, optax.sgd(0.1), wrt=nnx.Param)
    restored = load_training_checkpoint(
        path,
        abstract_restore_target(nnx.state(fresh)),
        abstract_restore_target(nnx.state(fresh_optimizer)),
        abstract_restore_target(jax.random.key(0)),
        {},
        _iterator(),
    )
    _same_values(restored.model, nnx.state(model))
    _same_values(restored.optimizer, nnx.state(optimizer))
    assert restored.auxiliary == {}


# ---------------------------------------------------------------------------
# Targets without shardings load where the checkpoint recorded the arrays


def _placed_state() -> dict[str, jax.Array]:
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
    return {
        "kernel": jax.device_put(jnp.arange(16.0).reshape(8, 2), NamedSharding(mesh, PartitionSpec("data", "model"))),
        "bias": jax.device_put(jnp.ones(3, jnp.bfloat16), SingleDeviceSharding(jax.devices()[5])),
        "keys": jax.device_put(jax.random.split(jax.random.key(4), 8), NamedSharding(mesh, PartitionSpec("data"))),
        "key": jax.random.key(5),
    }


def test_targets_without_shardings_load_onto_the_placement_the_checkpoint_recorded(tmp_path):
    state = _placed_state()
    save_checkpointables(tmp_path / "checkpoint", {"state": state}).result()
    # What jax.eval_shape gives where no mesh is explicit: shapes and dtypes only.
    target = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype), state)
    for built in (target, abstract_restore_target(target)):
        restored = load_checkpointables(tmp_path / "checkpoint", {"state": built})["state"]
        _same_values(restored, state)
        for name, leaf in restored.items():
            assert leaf.sharding.is_equivalent_to(state[name].sharding, leaf.ndim), name


def test_an_nnx_eval_shape_model_loads_into_a_training_checkpoint_target(tmp_path):
    nnx, optax = _nnx(), _optax()

    def build() -> Any:
        model = nnx.Linear(4, 2, rngs=nnx.Rngs(params=0))
        return model, nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)

    model, optimizer = build()
    path = tmp_path / "checkpoint"
    save_training_checkpoint(
        path, 7, nnx.state(model), nnx.state(optimizer), jax.random.key(3), None, _iterator()
    ).result()
    abstract_model, abstract_optimizer = nnx.eval_shape(build)
    restored = load_training_checkpoint(
        path,
        nnx.state(abstract_model),
        nnx.state(abstract_optimizer),
        jax.eval_shape(lambda: jax.random.key(0)),
        None,
        _iterator(),
    )
    assert restored.step == 7
    _same_values(restored.model, nnx.state(model))
    _same_values(restored.optimizer, nnx.state(optimizer))
    np.testing.assert_array_equal(jax.random.key_data(restored.rng), jax.random.key_data(jax.random.key(3)))


def test_a_target_without_sharding_for_a_saved_numpy_array_is_a_value_and_key_error(tmp_path):
    save_checkpointables(tmp_path / "checkpoint", {"state": {"host": np.arange(4)}}).result()
    target = {"host": jax.ShapeDtypeStruct((4,), np.int64)}
    with pytest.raises(ValueError, match=r"targets\['state'\]\['host'\] .* records no placement") as caught:
        load_checkpointables(tmp_path / "checkpoint", {"state": target})
    assert isinstance(caught.value, KeyError)  # tinax 0.2 let Orbax's KeyError through.


def test_a_recorded_placement_on_a_device_this_process_lacks_is_a_value_and_key_error(tmp_path):
    path = tmp_path / "checkpoint"
    save_checkpointables(path, {"state": {"w": jax.device_put(jnp.ones(2), jax.devices()[5])}}).result()
    # As if written on a machine with more devices than this one.
    sharding_file = path / "state" / "_sharding"
    sharding_file.write_text(sharding_file.read_text().replace("cpu:5", "cpu:99"))
    with pytest.raises(
        ValueError, match=r"targets\['state'\]\['w'\] .* names devices this process does not have"
    ) as caught:
        load_checkpointables(path, {"state": {"w": jax.ShapeDtypeStruct((2,), jnp.float32)}})
    assert isinstance(caught.value, KeyError)
    # A target that says where the array goes still loads it.
    device = SingleDeviceSharding(jax.devices()[0])
    loaded = load_checkpointables(path, {"state": {"w": jax.ShapeDtypeStruct((2,), jnp.float32, sharding=device)}})
    np.testing.assert_array_equal(np.asarray(loaded["state"]["w"]), np.ones(2))


# ---------------------------------------------------------------------------
# Loads report nothing that tinax 0.2's did not


def test_loading_a_training_checkpoint_with_an_iterator_logs_nothing(tmp_path, caplog):
    nnx, optax = _nnx(), _optax()
    model = nnx.Linear(2, 2, rngs=nnx.Rngs(params=0))
    optimizer = nnx.Optimizer(model, optax.adam(0.01), wrt=nnx.Param)
    auxiliary = {"loss": jnp.asarray(0.25)}
    path = tmp_path / "checkpoint"
    save_training_checkpoint(
        path, 2, nnx.state(model), nnx.state(optimizer), jax.random.key(1), auxiliary, _iterator()
    ).result()
    with caplog.at_level(logging.INFO):
        restored = load_training_checkpoint(
            path,
            abstract_restore_target(nnx.state(model)),
            abstract_restore_target(nnx.state(optimizer)),
            abstract_restore_target(jax.random.key(0)),
            abstract_restore_target(auxiliary),
            iter(grain.MapDataset.range(12).batch(3).to_iter_dataset()),
        )
    # Orbax's metadata of the whole checkpoint logged a warning for the iterator, which has none.
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING] == []
    assert np.asarray(next(restored.iterator)).tolist() == [3, 4, 5]


# ---------------------------------------------------------------------------
# Errors of the classes tinax 0.2 raised


@pytest.fixture(scope="module")
def training_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("saved") / "checkpoint"
    save_training_checkpoint(
        path, 1, _params(), {"count": jnp.asarray(1)}, jax.random.key(0), None, _iterator()
    ).result()
    return path


@pytest.mark.parametrize(
    "content", [b"{", b"[]", b"null", b"", b'"text"'], ids=["unclosed", "list", "null", "empty", "str"]
)
def test_damaged_iterator_state_is_a_value_and_key_error(training_checkpoint, tmp_path, content):
    path = shutil.copytree(training_checkpoint, tmp_path / "checkpoint")
    for state_file in (path / "iterator").glob("process_*.json"):
        state_file.write_bytes(content)
    params = _params()
    with pytest.raises(ValueError, match="iterator/process_0-of-1.json") as caught:
        load_training_checkpoint(
            path,
            abstract_restore_target(params),
            abstract_restore_target({"count": jnp.asarray(1)}),
            abstract_restore_target(jax.random.key(0)),
            None,
            _iterator(),
        )
    assert isinstance(caught.value, KeyError)  # tinax 0.2 let Orbax's NoEntryError (a KeyError) through.


def test_loading_an_empty_folder_is_a_value_and_key_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="incomplete checkpoint") as caught:
        load_checkpointables(tmp_path / "empty", {"model": {"w": np.ndarray}})
    assert isinstance(caught.value, KeyError)  # What tinax 0.2 (Orbax) raised.


@pytest.mark.parametrize(
    "save",
    [
        lambda path: save_legacy_v0_pytree(path, {"w": np.ones(2)}),
        lambda path: save_legacy_v0_grain_iterator(path, _iterator()),
        lambda path: save_checkpointables(path, {"w": np.ones(2)}),
    ],
    ids=["legacy-pytree", "legacy-iterator", "v1"],
)
@pytest.mark.parametrize("depth", [["x"], ["x", "y"]], ids=["parent", "ancestor"])
def test_a_destination_below_a_regular_file_is_not_a_directory_error(tmp_path, save, depth):
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="cannot be created") as caught:
        save(tmp_path.joinpath("file", *depth))
    assert isinstance(caught.value, ValueError)
    assert type(caught.value).__name__ == "NotAFolderDestinationError"  # a declared class, not one built per call
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["file"]


def test_a_destination_below_a_broken_link_is_file_not_found(tmp_path):
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="broken symbolic link") as caught:
        save_legacy_v0_pytree(tmp_path / "gone" / "checkpoint", {"w": np.ones(2)})
    assert isinstance(caught.value, ValueError)


def test_a_legacy_iterator_position_outside_the_dataset_is_an_index_error(tmp_path):
    path = tmp_path / "iterator"
    save_legacy_v0_grain_iterator(path, _iterator())
    for state_file in path.glob("process_*.json"):
        state = json.loads(state_file.read_text())
        state_file.write_text(json.dumps({**state, "next_index": -1}))
    with pytest.raises(IndexError, match="out of range") as caught:
        load_legacy_v0_grain_iterator(path, _iterator())
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, KeyError)
    assert isinstance(caught.value.__cause__, IndexError)


@pytest.mark.parametrize("load", [load_legacy_v0_pytree, lambda path: load_legacy_v0_grain_iterator(path, _iterator())])
def test_a_legacy_path_named_like_an_unfinished_save_is_a_value_error_whether_or_not_it_exists(tmp_path, load):
    path = tmp_path / "checkpoint.orbax-checkpoint-tmp"
    with pytest.raises(ValueError, match="temporary suffix") as caught:
        load(path)
    assert not isinstance(caught.value, FileNotFoundError)  # tinax 0.2 judged the name first
    path.mkdir()
    with pytest.raises(ValueError, match="temporary suffix"):
        load(path)


@pytest.mark.parametrize(
    ("step", "iterator", "error"),
    [(-1, None, ValueError), (True, None, TypeError), ("1", None, TypeError), (1, [1, 2], TypeError)],
    ids=["negative-step", "bool-step", "str-step", "list-iterator"],
)
def test_a_training_checkpoint_record_checks_its_step_and_iterator(step, iterator, error):
    with pytest.raises(error):
        TrainingCheckpoint(step, None, None, None, None, _iterator() if iterator is None else iterator)
