"""Tests for tinax.random: derivation equals fold_in chains, eagerly and under jit."""

from __future__ import annotations

import re
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tinax.random
from tinax.random import derive_key, derive_process_step_key, split_key
from tinax_testing import import_side_effects, parameter_summary

COORDINATE_MAX = 2**32 - 1


def typed_key(seed: int = 0) -> jax.Array:
    return jax.random.key(seed)


def raw_key(seed: int = 0) -> jax.Array:
    return jax.random.PRNGKey(seed)


def key_bits(key: jax.Array) -> np.ndarray:
    """The key's data as a NumPy array, for typed and raw keys alike."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(key))
    return np.asarray(key)


def assert_same_key(actual: jax.Array, expected: jax.Array) -> None:
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(key_bits(actual), key_bits(expected))


def fold_chain(key: jax.Array, *coordinates: int) -> jax.Array:
    for coordinate in coordinates:
        key = jax.random.fold_in(key, coordinate)
    return key


key_kinds = pytest.mark.parametrize("make_key", [typed_key, raw_key], ids=["typed", "raw"])

# Every public function, reduced to "give it this key" or "give it this coordinate", so the
# shared key and coordinate checks run against each of them.
WITH_KEY: dict[str, Callable[[object], object]] = {
    "derive_key": lambda key: derive_key(key, 1),  # type: ignore[arg-type]
    "derive_process_step_key": lambda key: derive_process_step_key(key, process_index=0, step=1),  # type: ignore[arg-type]
    "split_key": lambda key: split_key(key, count=2),  # type: ignore[arg-type]
}
WITH_COORDINATE: dict[str, Callable[[jax.Array, object], jax.Array]] = {
    "coordinates[0]": lambda key, value: derive_key(key, value),  # type: ignore[arg-type]
    "coordinates[2]": lambda key, value: derive_key(key, 0, 1, value),  # type: ignore[arg-type]
    "process_index": lambda key, value: derive_process_step_key(key, process_index=value, step=0),  # type: ignore[arg-type]
    "step": lambda key, value: derive_process_step_key(key, process_index=0, step=value),  # type: ignore[arg-type]
    "stream": lambda key, value: derive_process_step_key(key, process_index=0, step=0, stream=value),  # type: ignore[arg-type]
}
coordinate_cases = pytest.mark.parametrize(("name", "derive"), list(WITH_COORDINATE.items()), ids=list(WITH_COORDINATE))


# --- public surface ---------------------------------------------------------------------------------------------


def test_public_names() -> None:
    assert tinax.random.__all__ == ["derive_key", "derive_process_step_key", "split_key"]


@pytest.mark.parametrize(
    ("name", "parameters"),
    [
        ("derive_key", [("key", "POSITIONAL_OR_KEYWORD", None), ("coordinates", "VAR_POSITIONAL", None)]),
        ("derive_process_step_key", [("key", "POSITIONAL_OR_KEYWORD", None), ("process_index", "KEYWORD_ONLY", None),
                                     ("step", "KEYWORD_ONLY", None), ("stream", "KEYWORD_ONLY", 0)]),
        ("split_key", [("key", "POSITIONAL_OR_KEYWORD", None), ("count", "KEYWORD_ONLY", None)]),
    ],
)  # fmt: skip
def test_signatures_match_the_compatible_surface(name: str, parameters: list[tuple[str, str, object]]) -> None:
    assert parameter_summary(getattr(tinax.random, name)) == parameters


def test_importing_the_module_is_inert() -> None:
    effects = import_side_effects("tinax.random")
    assert effects["backends_initialized"] is False
    assert effects["integrations"] == []


# --- derive_key -------------------------------------------------------------------------------------------------


@key_kinds
@pytest.mark.parametrize("coordinates", [(0,), (7,), (1, 2), (3, 0, COORDINATE_MAX), (5, 5, 5, 5)])
def test_derive_key_equals_a_fold_in_chain(make_key: Callable[[], jax.Array], coordinates: tuple[int, ...]) -> None:
    key = make_key()
    assert_same_key(derive_key(key, *coordinates), fold_chain(key, *coordinates))


def test_derive_key_depends_on_coordinate_order() -> None:
    key = typed_key()
    assert not np.array_equal(key_bits(derive_key(key, 1, 2)), key_bits(derive_key(key, 2, 1)))


def test_derive_key_differs_from_its_input_and_between_coordinates() -> None:
    key = typed_key()
    derived = {tuple(key_bits(derive_key(key, value)).tolist()) for value in (0, 1, 2, COORDINATE_MAX)}
    assert len(derived) == 4
    assert tuple(key_bits(key).tolist()) not in derived


def test_derive_key_is_deterministic() -> None:
    assert_same_key(derive_key(typed_key(3), 4, 5), derive_key(typed_key(3), 4, 5))


@key_kinds
def test_derive_key_without_coordinates_returns_the_key_itself_as_in_tinax_02(
    make_key: Callable[[], jax.Array],
) -> None:
    key = make_key()
    path: tuple[int, ...] = ()
    assert derive_key(key) is key
    assert derive_key(key, *path) is key


def test_derive_key_without_coordinates_still_checks_the_key() -> None:
    with pytest.raises(ValueError, match=r"^key must be a single PRNG key"):
        derive_key(jax.random.split(typed_key(), 2))
    with pytest.raises(TypeError, match=r"^key must be a single PRNG key"):
        derive_key(3)  # type: ignore[arg-type]


def test_derive_key_without_coordinates_under_jit_is_the_key() -> None:
    key = typed_key(5)
    assert_same_key(jax.jit(lambda k: derive_key(k))(key), key)


def test_derive_key_accepts_numpy_and_small_unsigned_coordinates() -> None:
    key = typed_key()
    expected = fold_chain(key, 9, 10, 11, 12)
    coordinates = (np.uint32(9), np.int64(10), jnp.uint8(11), np.array(12, dtype=np.uint16))
    assert_same_key(derive_key(key, *coordinates), expected)  # type: ignore[arg-type]


# --- derive_process_step_key ------------------------------------------------------------------------------------


@key_kinds
@pytest.mark.parametrize(("process_index", "step", "stream"), [(0, 0, 0), (0, 42, 0), (3, 42, 1), (7, 0, 9)])
def test_derive_process_step_key_equals_derive_key_in_process_step_stream_order(
    make_key: Callable[[], jax.Array], process_index: int, step: int, stream: int
) -> None:
    key = make_key()
    actual = derive_process_step_key(key, process_index=process_index, step=step, stream=stream)
    assert_same_key(actual, derive_key(key, process_index, step, stream))
    assert_same_key(actual, fold_chain(key, process_index, step, stream))


def test_derive_process_step_key_streams_default_to_zero() -> None:
    key = typed_key()
    assert_same_key(derive_process_step_key(key, process_index=2, step=5), derive_key(key, 2, 5, 0))


def test_derive_process_step_key_does_not_confuse_process_and_step() -> None:
    key = typed_key()
    first = derive_process_step_key(key, process_index=1, step=2)
    swapped = derive_process_step_key(key, process_index=2, step=1)
    assert not np.array_equal(key_bits(first), key_bits(swapped))


# --- split_key --------------------------------------------------------------------------------------------------


@key_kinds
@pytest.mark.parametrize("count", [1, 2, 5])
def test_split_key_matches_one_jax_split(make_key: Callable[[], jax.Array], count: int) -> None:
    key = make_key()
    expected = jax.random.split(key, count + 1)
    result = split_key(key, count=count)
    assert isinstance(result, tuple)
    continuation, operation_keys = result
    assert_same_key(continuation, expected[0])
    assert_same_key(operation_keys, expected[1:])
    assert operation_keys.shape[0] == count
    assert continuation.shape == key.shape


def test_split_key_continuation_differs_from_the_input_and_the_operation_keys() -> None:
    key = typed_key()
    continuation, operation_keys = split_key(key, count=3)
    seen = {tuple(key_bits(k).tolist()) for k in (key, continuation, *operation_keys)}
    assert len(seen) == 5


@key_kinds
def test_split_key_with_count_zero_gives_an_empty_key_batch(make_key: Callable[[], jax.Array]) -> None:
    # As in tinax 0.2: the continuation is still split off, and no operation key is made.
    key = make_key()
    continuation, operation_keys = split_key(key, count=0)
    expected = jax.random.split(key, 1)
    assert_same_key(continuation, expected[0])
    assert continuation.shape == key.shape
    assert operation_keys.shape[0] == 0
    assert operation_keys.dtype == key.dtype
    assert operation_keys.shape[1:] == key.shape
    assert not np.array_equal(key_bits(continuation), key_bits(key))


def test_split_key_with_count_zero_under_jit_matches_eager() -> None:
    key = typed_key(31)
    jitted_continuation, jitted_keys = jax.jit(lambda key: split_key(key, count=0))(key)
    continuation, operation_keys = split_key(key, count=0)
    assert_same_key(jitted_continuation, continuation)
    assert jitted_keys.shape == operation_keys.shape == (0,)


@pytest.mark.parametrize("count", [True, False, 1.0, "2", None, np.bool_(True)])
def test_split_key_count_of_the_wrong_kind_is_a_type_error(count: object) -> None:
    with pytest.raises(TypeError, match=r"^count must be an int >= 0, got "):
        split_key(typed_key(), count=count)  # type: ignore[arg-type]


@pytest.mark.parametrize("count", [-1, -5])
def test_split_key_negative_count_is_a_value_error(count: int) -> None:
    with pytest.raises(ValueError, match=r"^count must be an int >= 0, got "):
        split_key(typed_key(), count=count)


# --- coordinate checks ------------------------------------------------------------------------------------------


@coordinate_cases
def test_the_coordinate_bounds_are_inclusive(name: str, derive: Callable[[jax.Array, object], jax.Array]) -> None:
    key = typed_key()
    derive(key, 0)
    derive(key, COORDINATE_MAX)


@coordinate_cases
@pytest.mark.parametrize("value", [-1, COORDINATE_MAX + 1, 2**64, np.int64(-3)])
def test_out_of_range_python_coordinates_are_a_value_error(
    name: str, derive: Callable[[jax.Array, object], jax.Array], value: object
) -> None:
    with pytest.raises(ValueError, match=rf"^{re.escape(name)} must be an int in \[0, 2\*\*32 - 1\], got "):
        derive(typed_key(), value)


@coordinate_cases
@pytest.mark.parametrize("value", [np.int64(-3), np.uint64(2**40), np.int32(-1)])
def test_out_of_range_numpy_coordinates_are_also_the_type_error_of_tinax_02(
    name: str, derive: Callable[[jax.Array, object], jax.Array], value: object
) -> None:
    # tinax 0.2 refused signed or 64-bit NumPy scalars as the wrong type, whatever their value.
    with pytest.raises(TypeError, match=rf"^{re.escape(name)} must be an int in \[0, 2\*\*32 - 1\], got ") as caught:
        derive(typed_key(), value)
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    "call",
    [
        lambda: derive_key(raw_key(), True),
        lambda: derive_key(raw_key(), 1, "2"),
        lambda: derive_process_step_key(raw_key(), process_index=True, step=0),
        lambda: split_key(raw_key(), count=True),
        lambda: split_key(raw_key(), count=1.5),
    ],
)
def test_a_later_type_error_after_a_raw_key_is_also_the_value_error_of_tinax_02(call: Callable[[], object]) -> None:
    # tinax 0.2 refused the raw key itself, with a ValueError, before looking further.
    with pytest.raises(TypeError) as caught:
        call()
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    "call",
    [
        lambda: derive_key(typed_key(), np.uint64(1), -1),
        lambda: derive_key(typed_key(), np.int64(1), 2**32),
        lambda: derive_process_step_key(typed_key(), process_index=np.int64(0), step=-1),
        lambda: split_key(typed_key(), count=np.int64(-1)),
    ],
)
def test_a_later_value_error_after_a_numpy_integer_is_also_the_type_error_of_tinax_02(
    call: Callable[[], object],
) -> None:
    with pytest.raises(ValueError, match="must be an int") as caught:
        call()
    assert isinstance(caught.value, TypeError)


def test_a_type_error_after_python_arguments_is_only_a_type_error() -> None:
    with pytest.raises(TypeError) as caught:
        derive_key(typed_key(), 1, True)
    assert not isinstance(caught.value, ValueError)


@coordinate_cases
@pytest.mark.parametrize("value", [True, False, np.bool_(False), 1.0, "1", None])
def test_bool_and_non_integer_coordinates_are_a_type_error(
    name: str, derive: Callable[[jax.Array, object], jax.Array], value: object
) -> None:
    with pytest.raises(TypeError, match=rf"^{re.escape(name)} must be an int in \[0, 2\*\*32 - 1\], got "):
        derive(typed_key(), value)


@coordinate_cases
@pytest.mark.parametrize(
    "value",
    [
        jnp.int32(1),
        jnp.float32(1.0),
        jnp.array([1, 2], dtype=jnp.uint32),
        jnp.zeros((1,), dtype=jnp.uint32),
        np.array(1, dtype=np.int32),
        np.array(1, dtype=np.uint64),
        np.array([1], dtype=np.uint32),
        jnp.bool_(True),
    ],
    ids=[
        "int32",
        "float32",
        "uint32-vector",
        "uint32-1-element",
        "numpy-int32",
        "numpy-uint64",
        "numpy-vector",
        "bool",
    ],
)
def test_arrays_that_are_not_unsigned_32_bit_scalars_are_a_type_error(
    name: str, derive: Callable[[jax.Array, object], jax.Array], value: object
) -> None:
    with pytest.raises(TypeError, match=rf"^{re.escape(name)} must be an unsigned integer scalar array"):
        derive(typed_key(), value)


@coordinate_cases
def test_a_key_is_not_a_coordinate(name: str, derive: Callable[[jax.Array, object], jax.Array]) -> None:
    with pytest.raises(TypeError, match=rf"^{re.escape(name)} must be an unsigned integer scalar array"):
        derive(typed_key(), typed_key(1))


# --- key checks -------------------------------------------------------------------------------------------------


# The exception types are tinax 0.2's: an array whose shape no single key has is a bad value
# (ValueError), anything else that is not a key is the wrong kind of object (TypeError).


@pytest.mark.parametrize("call", list(WITH_KEY.values()), ids=list(WITH_KEY))
@pytest.mark.parametrize(
    "key",
    [jnp.uint32(5), np.uint32(5), np.asarray(5, dtype=np.uint32), 0, None, object(), [0, 1]],
    ids=["uint32-scalar", "numpy-uint32-scalar", "numpy-0d-array", "int", "none", "object", "list"],
)
def test_a_non_array_or_a_scalar_that_is_no_key_is_a_type_error(call: Callable[[object], object], key: object) -> None:
    with pytest.raises(TypeError, match=r"^key must be a single PRNG key"):
        call(key)


@pytest.mark.parametrize("call", list(WITH_KEY.values()), ids=list(WITH_KEY))
@pytest.mark.parametrize(
    "key",
    [
        jax.random.split(jax.random.key(0), 3),
        jax.random.key(0).reshape(1, 1),
        jax.random.split(jax.random.PRNGKey(0), 3),
        jnp.array([0, 1], dtype=jnp.int32),
        jnp.array([0, 1, 2], dtype=jnp.uint32),
        np.array([0, 1], dtype=np.uint32),
        np.zeros((2,), dtype=np.float32),
    ],
    ids=[
        "typed-batch",
        "typed-2d",
        "raw-batch",
        "int32-vector",
        "uint32-wrong-length",
        "numpy-raw-key",
        "float-vector",
    ],
)
def test_an_array_of_a_shape_no_single_key_has_is_a_value_error(call: Callable[[object], object], key: object) -> None:
    with pytest.raises(ValueError, match=r"^key must be a single PRNG key"):
        call(key)


@pytest.mark.parametrize("call", list(WITH_KEY.values()), ids=list(WITH_KEY))
def test_a_raw_key_of_another_implementation_is_refused_under_the_default(call: Callable[[object], object]) -> None:
    rbg_data = jax.random.key_data(jax.random.key(0, impl="rbg"))  # four words, not threefry's two
    with pytest.raises(ValueError, match=r"^key must be a single PRNG key"):
        call(rbg_data)


@pytest.mark.parametrize("call", list(WITH_KEY.values()), ids=list(WITH_KEY))
def test_a_typed_key_of_another_implementation_is_accepted(call: Callable[[object], object]) -> None:
    call(jax.random.key(0, impl="rbg"))


# --- under jit --------------------------------------------------------------------------------------------------


@key_kinds
def test_derive_key_under_jit_with_traced_coordinates_matches_eager(make_key: Callable[[], jax.Array]) -> None:
    key = make_key()
    coordinates = (jnp.uint32(4), jnp.uint32(COORDINATE_MAX), jnp.uint16(6))
    jitted = jax.jit(derive_key)(key, *coordinates)
    assert_same_key(jitted, derive_key(key, *coordinates))
    assert_same_key(jitted, fold_chain(key, 4, COORDINATE_MAX, 6))


def test_derive_key_under_jit_with_mixed_static_and_traced_coordinates_matches_eager() -> None:
    key = typed_key()

    @jax.jit
    def derive(key: jax.Array, step: jax.Array) -> jax.Array:
        return derive_key(key, 3, step, COORDINATE_MAX)

    assert_same_key(derive(key, jnp.uint32(11)), derive_key(key, 3, 11, COORDINATE_MAX))


@key_kinds
def test_derive_process_step_key_under_jit_matches_eager(make_key: Callable[[], jax.Array]) -> None:
    key = make_key()

    @jax.jit
    def derive(key: jax.Array, process_index: jax.Array, step: jax.Array, stream: jax.Array) -> jax.Array:
        return derive_process_step_key(key, process_index=process_index, step=step, stream=stream)

    jitted = derive(key, jnp.uint32(2), jnp.uint32(42), jnp.uint32(1))
    assert_same_key(jitted, derive_process_step_key(key, process_index=2, step=42, stream=1))
    assert_same_key(jitted, derive_key(key, 2, 42, 1))


def test_a_jitted_step_loop_gives_the_eager_keys() -> None:
    key = typed_key()
    jitted = jax.jit(lambda key, step: derive_process_step_key(key, process_index=0, step=step))
    for step in range(3):
        assert_same_key(jitted(key, jnp.uint32(step)), derive_process_step_key(key, process_index=0, step=step))


@key_kinds
@pytest.mark.parametrize("count", [1, 4])
def test_split_key_under_jit_matches_eager(make_key: Callable[[], jax.Array], count: int) -> None:
    key = make_key()
    jitted_continuation, jitted_keys = jax.jit(lambda key: split_key(key, count=count))(key)
    continuation, operation_keys = split_key(key, count=count)
    assert_same_key(jitted_continuation, continuation)
    assert_same_key(jitted_keys, operation_keys)


def test_split_key_refuses_a_traced_count() -> None:
    with pytest.raises(TypeError, match=r"^count must be an int >= 0, got "):
        jax.jit(lambda key, count: split_key(key, count=count))(typed_key(), 2)


@coordinate_cases
@pytest.mark.parametrize(
    "value",
    [jnp.int32(1), jnp.float32(1.0), jnp.array([1, 2], dtype=jnp.uint32), jnp.bool_(True)],
    ids=["int32", "float32", "uint32-vector", "bool"],
)
def test_traced_coordinates_that_are_not_unsigned_32_bit_scalars_are_a_type_error(
    name: str, derive: Callable[[jax.Array, object], jax.Array], value: jax.Array
) -> None:
    with pytest.raises(TypeError, match=rf"^{re.escape(name)} must be an unsigned integer scalar array .*traced"):
        jax.jit(derive)(typed_key(), value)


@coordinate_cases
def test_traced_uint64_coordinates_are_a_type_error(
    name: str, derive: Callable[[jax.Array, object], jax.Array]
) -> None:
    with jax.enable_x64(True):  # Without 64-bit mode, JAX would quietly narrow the argument to uint32.
        value = jnp.asarray(1, dtype=jnp.uint64)
        assert value.dtype == jnp.uint64
        with pytest.raises(TypeError, match=rf"^{re.escape(name)} must be an unsigned integer scalar array"):
            derive(typed_key(), value)
        with pytest.raises(TypeError, match=rf"^{re.escape(name)} must be an unsigned integer scalar array .*traced"):
            jax.jit(derive)(typed_key(), value)


def test_a_traced_batched_key_is_a_value_error() -> None:
    keys = jax.random.split(typed_key(), 2)
    with pytest.raises(ValueError, match=r"^key must be a single PRNG key"):
        jax.jit(lambda keys: derive_key(keys, 1))(keys)
