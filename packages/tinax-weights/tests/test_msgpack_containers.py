"""save_msgpack and load_msgpack with the containers tinax 0.2 stored through flax.

tinax 0.2 saved with ``flax.serialization.to_bytes`` and loaded with
``from_bytes``: lists, tuples, namedtuples (every optax state), ``jax.Array``
leaves, non-str keys and flax dataclasses all went in, and came back as the
target's containers. The byte strings below are what tinax 0.2 wrote.
"""

from __future__ import annotations

import collections
import os
import pathlib
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_dtypes
import msgpack
import numpy as np
import pytest

from tinax.weights import load_msgpack, save_msgpack


class Pair(NamedTuple):
    x: Any
    y: Any


def mixed_state() -> dict[Any, Any]:
    return {
        "layers": [{"w": np.arange(2, dtype=np.float32)}, (1, "a")],
        "nt": Pair(x=np.int8(3), y=None),
        7: True,
        "j": jnp.arange(3, dtype=jnp.int32),
        "e": (),
    }


# What tinax 0.2 wrote for mixed_state().
MIXED_STATE_02 = (
    b"\x85\xa6layers\x82\xa10\x81\xa1w\xc7\x15\x01\x93\x91\x02\xa7float32\xc4\x08\x00\x00\x00\x00\x00\x00\x80?"
    b"\xa11\x82\xa10\x01\xa11\xa1a\xa2nt\x82\xa1x\xc7\n\x03\x93\x90\xa4int8\xc4\x01\x03\xa1y\xc0\xa17\xc3"
    b"\xa1j\xc7\x17\x01\x93\x91\x03\xa5int32\xc4\x0c\x00\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00\xa1e\x80"
)


def assert_same_tree(actual: object, expected: object) -> None:
    """Compares containers by exact type and keys, arrays by dtype, shape and values (restored as NumPy)."""
    if isinstance(expected, jax.Array):
        assert type(actual) is np.ndarray
        expected = np.asarray(expected)
    if isinstance(expected, (np.ndarray, np.generic)):
        assert type(actual) is type(expected)
        assert actual.dtype == expected.dtype  # type: ignore[attr-defined]
        assert actual.shape == expected.shape  # type: ignore[attr-defined]
        assert np.asarray(actual).tobytes() == np.asarray(expected).tobytes()
        return
    assert type(actual) is type(expected)
    if isinstance(expected, dict):
        assert list(actual) == list(expected)  # type: ignore[call-overload]
        for key in expected:
            assert_same_tree(actual[key], expected[key])  # type: ignore[index]
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)  # type: ignore[arg-type]
        for got, want in zip(actual, expected, strict=True):  # type: ignore[call-overload]
            assert_same_tree(got, want)
    else:
        assert actual == expected


def round_trip(tmp_path: os.PathLike[str], state: Any) -> tuple[bytes, Any]:
    path = os.path.join(tmp_path, "state.msgpack")
    save_msgpack(path, state, overwrite=False)
    with open(path, "rb") as file:
        content = file.read()
    return content, load_msgpack(path, state, max_bytes=len(content))


def test_save_msgpack_writes_02s_bytes_for_lists_tuples_namedtuples_jax_arrays_and_int_keys(tmp_path):
    content, restored = round_trip(tmp_path, mixed_state())
    assert content == MIXED_STATE_02
    assert_same_tree(restored, mixed_state())


def test_save_msgpack_stores_containers_as_flaxs_str_keyed_maps(tmp_path):
    content, _ = round_trip(tmp_path, mixed_state())
    raw = msgpack.unpackb(content, raw=False, ext_hook=lambda code, data: code)
    assert raw == {
        "layers": {"0": {"w": 1}, "1": {"0": 1, "1": "a"}},  # A list and a tuple: their items under "0", "1", ...
        "nt": {"x": 3, "y": None},  # A namedtuple: its fields (3 is the NumPy scalar extension).
        "7": True,  # An int key: its text.
        "j": 1,  # A jax.Array: the ndarray extension.
        "e": {},
    }


def test_load_msgpack_reads_02s_file_into_list_tuple_and_namedtuple_targets(tmp_path):
    path = tmp_path / "written-by-02.msgpack"
    path.write_bytes(MIXED_STATE_02)
    restored = load_msgpack(path, mixed_state(), max_bytes=len(MIXED_STATE_02))
    assert_same_tree(restored, mixed_state())
    assert list(restored) == ["layers", "nt", 7, "j", "e"]
    assert restored["layers"][0]["w"].flags.writeable


OPTAX_TRANSFORMS = {
    "adam": lambda optax: optax.adam(1e-3),
    "chain": lambda optax: optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3)),
    "masked": lambda optax: optax.masked(optax.adam(1e-3), {"w": True, "b": False}),
    "sgd": lambda optax: optax.sgd(0.1),
    "sgd-momentum": lambda optax: optax.sgd(0.1, momentum=0.9),
    "inject-hyperparams": lambda optax: optax.inject_hyperparams(optax.adam)(learning_rate=1e-3),
    "multi-steps": lambda optax: optax.MultiSteps(optax.adam(1e-3), every_k_schedule=4),
}


def optax_state(optax: Any, name: str) -> dict[str, Any]:
    params = {"w": jnp.ones((2, 3)), "b": jnp.zeros(3, jnp.bfloat16)}
    transform = OPTAX_TRANSFORMS[name](optax)
    opt_state = transform.init(params)
    grads = jax.tree_util.tree_map(lambda leaf: jnp.full_like(leaf, 0.5), params)
    _, opt_state = transform.update(grads, opt_state, params)  # Non-zero moments and counts.
    return {"params": params, "opt_state": opt_state, "step": 1}


def test_save_msgpack_round_trips_optax_adam_state_like_02(tmp_path):
    optax = pytest.importorskip("optax")
    state = optax_state(optax, "adam")
    _, restored = round_trip(tmp_path, state)
    adam, empty = restored["opt_state"]
    assert type(adam) is optax.ScaleByAdamState
    assert type(empty) is optax.EmptyState
    assert adam.count.dtype == np.int32
    assert adam.count.shape == ()
    assert int(adam.count) == 1
    assert adam.mu["b"].dtype == ml_dtypes.bfloat16
    assert_same_tree(restored, state)


@pytest.mark.parametrize("name", sorted(OPTAX_TRANSFORMS))
def test_save_msgpack_writes_flaxs_bytes_for_optax_states_and_restores_them_like_02(tmp_path, name):
    optax = pytest.importorskip("optax")
    serialization = pytest.importorskip("flax.serialization", reason="flax gives 0.2's bytes for reference")
    state = optax_state(optax, name)
    content, restored = round_trip(tmp_path, state)
    assert content == serialization.to_bytes(state)  # What tinax 0.2's save_msgpack wrote.
    assert_same_tree(restored, state)
    assert jax.tree_util.tree_structure(restored) == jax.tree_util.tree_structure(state)


def test_save_msgpack_stores_sgds_pair_of_empty_states_as_02_did(tmp_path):
    optax = pytest.importorskip("optax")
    state = {"opt": optax.sgd(0.1).init({"w": np.zeros(2)})}
    content, restored = round_trip(tmp_path, state)
    assert content == b"\x81\xa3opt\x82\xa10\x80\xa11\x80"
    assert restored == {"opt": (optax.EmptyState(), optax.EmptyState())}
    assert type(restored["opt"]) is tuple


def test_save_msgpack_writes_jax_array_leaves_as_their_host_values(tmp_path):
    leaves = {
        "f32": jnp.arange(6, dtype=jnp.float32).reshape(2, 3),
        "bf16": jnp.array([1.5, -2], jnp.bfloat16),
        "scalar": jnp.float32(3),
        "int4": jnp.array([1, -2], jnp.int4),
    }
    host = {key: np.asarray(value) for key, value in leaves.items()}
    (tmp_path / "jax").mkdir()
    (tmp_path / "numpy").mkdir()
    jax_file, restored = round_trip(tmp_path / "jax", leaves)
    numpy_file, _ = round_trip(tmp_path / "numpy", host)
    assert jax_file == numpy_file
    assert_same_tree(restored, host)


def test_save_msgpack_refuses_jax_arrays_the_format_cannot_carry(tmp_path):
    with pytest.raises(TypeError, match=r"state\['key'\] must be an array or scalar with a bool"):
        save_msgpack(tmp_path / "state.msgpack", {"key": jax.random.key(0)}, overwrite=False)
    assert os.listdir(tmp_path) == []


def test_save_msgpack_stores_non_str_keys_by_their_text_and_load_restores_the_targets_keys(tmp_path):
    state = {"m": {0: np.ones(2), 1: np.zeros(2)}, 5: "five", True: 1, 2.5: None}
    content, restored = round_trip(tmp_path, state)
    assert list(msgpack.unpackb(content, ext_hook=lambda code, data: code)) == ["m", "5", "True", "2.5"]
    assert_same_tree(restored, state)
    assert list(restored["m"]) == [0, 1]


def test_save_msgpack_refuses_keys_whose_text_repeats(tmp_path):
    with pytest.raises(ValueError, match=r"keys of state\['m'\] must have distinct text"):
        save_msgpack(tmp_path / "state.msgpack", {"m": {1: 0, "1": 0}}, overwrite=False)
    assert os.listdir(tmp_path) == []
    save_msgpack(tmp_path / "saved.msgpack", {"1": 0}, overwrite=False)
    with pytest.raises(ValueError, match=r"keys of target must have distinct text"):
        load_msgpack(tmp_path / "saved.msgpack", {1: 0, "1": 0}, max_bytes=100)


def test_load_msgpack_reports_a_missing_file_before_the_targets_leaves_as_tinax_02_did(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_msgpack(tmp_path / "missing.msgpack", {"k": jax.random.key(0)}, max_bytes=100)
    with pytest.raises(TypeError, match="target must be a mapping"):
        load_msgpack(tmp_path / "missing.msgpack", [0], max_bytes=100)


def test_load_msgpack_requires_lists_tuples_and_namedtuples_to_match_the_files_items_as_flax_did(tmp_path):
    path = tmp_path / "state.msgpack"
    save_msgpack(path, {"l": [1, 2, 3], "n": Pair(1, 2)}, overwrite=False)
    with pytest.raises(ValueError, match=r"\['l'\]: holds entries '2' that target's container lacks"):
        load_msgpack(path, {"l": [0, 0]}, max_bytes=100)
    with pytest.raises(ValueError, match=r"missing from the file: \['l'\]\[3\]"):
        load_msgpack(path, {"l": [0, 0, 0, 0]}, max_bytes=100)
    Other = collections.namedtuple("Other", ["x", "z"])
    with pytest.raises(ValueError, match=r"missing from the file: \['n'\]\.z") as caught:
        load_msgpack(path, {"n": Other(0, 0)}, max_bytes=100)
    assert "holds entries 'y'" in str(caught.value)
    with pytest.raises(ValueError, match=r"\['l'\]\[0\]: expected a Python str, got 1 \(int\)"):
        load_msgpack(path, {"l": ("", 0, 0)}, max_bytes=100)


def test_load_msgpack_reads_a_stored_list_into_a_tuple_or_a_str_keyed_mapping_as_flax_did(tmp_path):
    path = tmp_path / "state.msgpack"
    save_msgpack(path, {"l": [1, 2, 3]}, overwrite=False)
    assert load_msgpack(path, {"l": (0, 0, 0)}, max_bytes=100) == {"l": (1, 2, 3)}
    assert load_msgpack(path, {"l": {"0": 0, "2": 0}}, max_bytes=100) == {"l": {"0": 1, "2": 3}}
    save_msgpack(path, {"l": 5}, overwrite=True)
    with pytest.raises(ValueError, match=r"\['l'\]: expected a map of the items of a list, got 5"):
        load_msgpack(path, {"l": [0]}, max_bytes=100)


def test_load_msgpack_reads_namedtuples_in_the_form_flax_wrote_before_2022(tmp_path):
    path = tmp_path / "old.msgpack"
    legacy = {"name": "Pair", "fields": {"0": "x", "1": "y"}, "values": {"0": 1, "1": "b"}}
    path.write_bytes(msgpack.packb({"n": legacy}))
    assert load_msgpack(path, {"n": Pair(0, "")}, max_bytes=100) == {"n": Pair(1, "b")}


def test_jax_partial_round_trips_its_arguments_as_flax_did(tmp_path):
    state = {"f": jax.tree_util.Partial(max, np.int32(1), key=None)}
    content, restored = round_trip(tmp_path, state)
    raw = msgpack.unpackb(content, ext_hook=lambda code, data: code)
    assert raw == {"f": {"args": {"0": 3}, "keywords": {"key": None}}}
    assert type(restored["f"]) is jax.tree_util.Partial
    assert restored["f"].func is max
    assert restored["f"].args == (np.int32(1),)
    assert restored["f"].keywords == {"key": None}


def test_flax_dataclasses_and_frozen_dicts_round_trip_as_flax_restores_them(tmp_path):
    optax = pytest.importorskip("optax")
    serialization = pytest.importorskip("flax.serialization")
    from flax.core import FrozenDict
    from flax.training import train_state

    params = {"w": jnp.ones((2, 3))}
    trained = train_state.TrainState.create(apply_fn=jnp.tanh, params=params, tx=optax.adam(1e-3))
    state = FrozenDict({"train": trained, "frozen": FrozenDict({"b": np.ones(2)})})
    content, restored = round_trip(tmp_path, state)
    assert content == serialization.to_bytes(state)
    assert type(restored) is FrozenDict
    assert type(restored["frozen"]) is FrozenDict
    restored_train = restored["train"]
    assert type(restored_train) is train_state.TrainState
    assert restored_train.apply_fn is jnp.tanh  # Not stored: flax takes it from the target.
    assert type(restored_train.opt_state[0]) is optax.ScaleByAdamState
    assert_same_tree(restored_train.params, trained.params)


def test_an_int_outside_msgpacks_range_is_also_the_overflow_error_of_tinax_02(tmp_path):
    with pytest.raises(ValueError, match=r"state\['i'\] must be an int in \[-2\*\*63, 2\*\*64 - 1\]") as caught:
        save_msgpack(tmp_path / "state.msgpack", {"i": 2**70}, overwrite=False)
    assert isinstance(caught.value, OverflowError)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("path", ["", pathlib.Path("")])
def test_an_empty_destination_is_the_current_folder_and_refused_as_a_directory(tmp_path, path):
    from tinax.weights import save_safetensors

    with pytest.raises(IsADirectoryError) as caught:
        save_msgpack(path, {"i": 1}, overwrite=False)
    assert isinstance(caught.value, ValueError)
    with pytest.raises(IsADirectoryError):
        save_safetensors(path, {"w": np.zeros(2, np.float32)}, overwrite=False)


def test_numpy_integer_limits_that_refuse_a_file_are_also_type_errors_as_in_tinax_02(tmp_path):
    from tinax.weights import load_safetensors, save_safetensors

    save_msgpack(tmp_path / "state.msgpack", {"i": 1}, overwrite=False)
    with pytest.raises(ValueError, match="more than max_bytes=3") as caught:
        load_msgpack(tmp_path / "state.msgpack", {"i": 0}, max_bytes=np.int8(3))
    assert isinstance(caught.value, TypeError)
    save_safetensors(tmp_path / "w.safetensors", {"w": np.zeros(4, np.float32)}, overwrite=False)
    with pytest.raises(ValueError, match="more than max_bytes=2") as caught:
        load_safetensors(tmp_path / "w.safetensors", max_bytes=np.int32(2))
    assert isinstance(caught.value, TypeError)
    assert load_msgpack(tmp_path / "state.msgpack", {"i": 0}, max_bytes=np.int64(100)) == {"i": 1}


def test_safetensors_info_refuses_a_tensor_named_like_the_metadata_key():
    from tinax.weights import SafetensorsInfo, TensorInfo

    with pytest.raises(ValueError, match="__metadata__"):
        SafetensorsInfo({"__metadata__": TensorInfo((1,), "F32")}, {})
