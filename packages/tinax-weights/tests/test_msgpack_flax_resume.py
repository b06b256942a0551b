"""load_msgpack returns the file's leaves as flax's ``from_bytes`` (and tinax 0.2) returned them.

A state saved after training differs from a fresh target in the kind of its
numeric leaves, never in their shapes: ``TrainState.create`` holds ``step=0``,
a Python int, and ``jax.device_get`` of a trained state holds an int32 array.
Only shapes, the structure and the kind of text, bytes and None leaves are
checked against the target.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from tinax.weights import load_msgpack, save_msgpack


def flax_loaded(path: Any, target: dict[str, Any]) -> Any:
    """What ``flax.serialization.from_bytes``, which tinax 0.2 loaded with, returns for the file."""
    # tinax-weights installs without flax; its own tests then compare with the file.
    serialization = pytest.importorskip("flax.serialization", reason="flax gives 0.2's loads for reference")

    return serialization.from_bytes(target, path.read_bytes())


def assert_identical_leaf(actual: object, expected: object) -> None:
    """Same type, dtype, shape and value: the file's leaf, unchanged."""
    assert type(actual) is type(expected)
    assert getattr(actual, "dtype", None) == getattr(expected, "dtype", None)
    assert np.shape(actual) == np.shape(expected)  # type: ignore[arg-type]
    assert np.asarray(actual).tobytes() == np.asarray(expected).tobytes()


# (leaf in the file, leaf of the target): differences a save after training, a
# device_get or another precision produce, which flax loads unchanged.
NUMERIC_KINDS = [
    (np.asarray(3), 0),
    (np.asarray(3, np.int32), 0),
    (np.int64(3), 0),
    (np.float32(1.5), 0.0),
    (3, np.asarray(0)),
    (3, np.zeros((), np.int32)),
    (1.5, np.zeros((), np.float32)),
    (1.5, jnp.zeros((), jnp.bfloat16)),
    (3, 0.0),
    (1.5, 0),
    (True, 0),
    (3, 0j),
    (np.array([1.5, 2.5], np.float32), np.zeros(2, np.float64)),
    (np.array([1.5, 2.5], np.float32), jnp.zeros(2, jnp.bfloat16)),
    (np.ones((2, 3), ml_dtypes.bfloat16), jax.ShapeDtypeStruct((2, 3), jnp.float32)),
    (np.asarray(3, np.int32), np.int64(0)),
    (np.float32(3), np.int64(0)),
    (np.asarray(2**40), np.zeros((), np.int32)),
]
NUMERIC_KIND_IDS = [
    "int64[]-for-int", "int32[]-for-int", "np.int64-for-int", "np.float32-for-float", "int-for-int64[]",
    "int-for-int32[]", "float-for-float32[]", "float-for-jax-bfloat16[]", "int-for-float", "float-for-int",
    "bool-for-int", "int-for-complex", "float32[2]-for-float64[2]", "float32[2]-for-jax-bfloat16[2]",
    "bfloat16[2,3]-for-ShapeDtypeStruct-float32", "int32[]-for-np.int64", "np.float32-for-np.int64",
    "int64[]-beyond-int32-for-int32[]",
]  # fmt: skip


@pytest.mark.parametrize(("stored", "target"), NUMERIC_KINDS, ids=NUMERIC_KIND_IDS)
def test_a_number_or_array_of_the_targets_shape_loads_as_the_file_holds_it(tmp_path, stored, target):
    path = tmp_path / "state.msgpack"
    save_msgpack(path, {"v": stored, "w": {"step": stored}}, overwrite=False)
    loaded = load_msgpack(path, {"v": target, "w": {"step": target}}, max_bytes=1 << 10)
    assert_identical_leaf(loaded["v"], stored)
    assert_identical_leaf(loaded["w"]["step"], stored)


@pytest.mark.parametrize(("stored", "target"), NUMERIC_KINDS, ids=NUMERIC_KIND_IDS)
def test_a_number_or_array_of_the_targets_shape_loads_as_flax_loads_it(tmp_path, stored, target):
    path = tmp_path / "state.msgpack"
    save_msgpack(path, {"v": stored, "w": {"step": stored}}, overwrite=False)
    expected = flax_loaded(path, {"v": target, "w": {"step": target}})
    loaded = load_msgpack(path, {"v": target, "w": {"step": target}}, max_bytes=1 << 10)
    assert_identical_leaf(loaded["v"], expected["v"])
    assert_identical_leaf(loaded["w"]["step"], expected["w"]["step"])


def test_the_reported_resume_of_a_step_saved_as_an_array_into_an_int_loads_the_array(tmp_path):
    path = tmp_path / "s.msgpack"
    save_msgpack(path, {"step": np.asarray(3)}, overwrite=True)
    loaded = load_msgpack(path, {"step": 0}, max_bytes=1000)
    assert list(loaded) == ["step"]
    assert_identical_leaf(loaded["step"], np.asarray(3))


@pytest.mark.parametrize(
    ("stored", "target", "expected", "got"),
    [
        (
            np.zeros(2, np.float32),
            np.zeros(3, np.float32),
            "shape (3,) (target holds a float32[3] array)",
            "float32[2] (numpy.ndarray)",
        ),
        (np.zeros(2, np.float32), np.zeros((1, 2), np.float32), "shape (1, 2)", "float32[2] (numpy.ndarray)"),
        (np.zeros(2, np.float32), np.zeros((), np.float32), "shape () (target holds a float32[] array)", "float32[2]"),
        (np.zeros(2, np.float32), 0, "shape () (target holds a Python int)", "float32[2] (numpy.ndarray)"),
        (np.zeros(2, np.float32), np.float32(0), "shape () (target holds a NumPy float32 scalar)", "float32[2]"),
        (3, np.zeros(2, np.int64), "shape (2,) (target holds a int64[2] array)", "3 (int)"),
        (1.5, jnp.zeros(2, jnp.float32), "shape (2,) (target holds a float32[2] array)", "1.5 (float)"),
    ],
    ids=["2-for-3", "2-for-1x2", "2-for-0d", "2-for-int", "2-for-np.float32", "int-for-2", "float-for-jax-2"],
)
def test_a_number_or_array_of_another_shape_is_refused(tmp_path, stored, target, expected, got):
    path = tmp_path / "state.msgpack"
    save_msgpack(path, {"params": {"w": stored}}, overwrite=False)
    with pytest.raises(ValueError, match="does not match target") as caught:
        load_msgpack(path, {"params": {"w": target}}, max_bytes=1 << 10)
    message = str(caught.value)
    assert f"['params']['w']: expected an array or number of {expected}" in message
    assert f"got {got}" in message


@pytest.mark.parametrize(
    ("stored", "target", "expected", "got"),
    [
        ("a", 0, "an array or number of shape () (target holds a Python int)", "'a' (str)"),
        ("a", np.zeros((), np.float32), "an array or number of shape () (target holds a float32[] array)", "'a' (str)"),
        (None, np.zeros(2, np.float32), "an array or number of shape (2,) (target holds a float32[2] array)", "None"),
        (3, "x", "a Python str", "3 (int)"),
        (np.int64(3), None, "None", "np.int64(3) (int64)"),
        (b"a", "x", "a Python str", "b'a' (bytes)"),
        ({"a": 1}, 0, "an array or number of shape () (target holds a Python int)", "a mapping"),
        ([1, 2], 0.0, "an array or number of shape () (target holds a Python float)", "a mapping"),
    ],
    ids=["str-for-int", "str-for-array", "none-for-array", "int-for-str", "number-for-none", "bytes-for-str",
         "map-for-int", "list-for-int"],
)  # fmt: skip
def test_text_bytes_none_or_a_container_where_the_other_kind_belongs_is_refused(
    tmp_path, stored, target, expected, got
):
    # No save of target's state can hold them: a jitted step or device_get never
    # turns a number into text or None, nor a leaf into a map.
    path = tmp_path / "state.msgpack"
    save_msgpack(path, {"v": stored}, overwrite=False)
    with pytest.raises(ValueError, match="does not match target") as caught:
        load_msgpack(path, {"v": target}, max_bytes=1 << 10)
    assert f"['v']: expected {expected}, got {got}" in str(caught.value)


def _training(steps: int, state: Any) -> tuple[Any, list[float]]:
    """Runs ``steps`` jitted steps of a small regression; returns the state and each step's loss."""
    x = np.linspace(-1.0, 1.0, 32, dtype=np.float32).reshape(8, 4)
    y = np.linspace(0.0, 1.0, 24, dtype=np.float32).reshape(8, 3)

    @jax.jit
    def step(state: Any) -> tuple[Any, jax.Array]:
        def loss(params: Any) -> jax.Array:
            return jnp.mean((state.apply_fn({"params": params}, x) - y) ** 2)

        value, grads = jax.value_and_grad(loss)(state.params)
        return state.apply_gradients(grads=grads), value

    losses = []
    for _ in range(steps):
        state, value = step(state)
        losses.append(float(value))
    return state, losses


def _fresh_train_state() -> Any:
    import flax.linen as nn
    import optax
    from flax.training import train_state

    model = nn.Dense(3)
    params = model.init(jax.random.key(0), np.zeros((1, 4), np.float32))["params"]
    return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(1e-2))


@pytest.mark.parametrize("writer", ["save_msgpack", "flax-to_bytes-as-tinax-0.2"])
@pytest.mark.parametrize("layout", ["wrapped", "to_state_dict"])
def test_a_flax_train_state_resumes_from_a_file_with_the_losses_of_an_uninterrupted_run(tmp_path, writer, layout):
    serialization = pytest.importorskip("flax.serialization", reason="the resume is flax's TrainState")
    pytest.importorskip("optax", reason="TrainState.create takes an optax optimizer")

    _, uninterrupted = _training(6, _fresh_train_state())
    trained, first = _training(3, _fresh_train_state())
    host = jax.device_get(trained)
    assert type(host.step) is np.ndarray  # The Python int 0 of TrainState.create, once a jitted step ran.

    fresh = _fresh_train_state()
    saved: dict[str, Any] = {"state": host} if layout == "wrapped" else serialization.to_state_dict(host)
    target: dict[str, Any] = {"state": fresh} if layout == "wrapped" else serialization.to_state_dict(fresh)
    path = tmp_path / "train_state.msgpack"
    if writer == "save_msgpack":
        save_msgpack(path, saved, overwrite=False)
    else:
        path.write_bytes(serialization.to_bytes(saved))
    loaded = load_msgpack(path, target, max_bytes=1 << 20)
    resumed = loaded["state"] if layout == "wrapped" else serialization.from_state_dict(fresh, loaded)

    assert type(resumed) is type(fresh)
    assert_identical_leaf(resumed.step, np.asarray(3, np.int32))
    flax_resumed = serialization.from_bytes(target, path.read_bytes())
    flax_state = flax_resumed["state"] if layout == "wrapped" else serialization.from_state_dict(fresh, flax_resumed)
    for ours, theirs in zip(jax.tree.leaves(resumed), jax.tree.leaves(flax_state), strict=True):
        assert_identical_leaf(ours, theirs)
    _, rest = _training(3, resumed)
    assert first + rest == uninterrupted
