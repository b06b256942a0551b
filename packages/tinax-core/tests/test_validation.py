"""The shared argument checks and their single message shape."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from tinax._core import validation
from tinax._core.keys import require_coordinate, require_key
from tinax._core.shapes import is_extended_dtype, logical_nbytes, require_shape


def test_describe_shows_value_and_type():
    assert validation.describe(True) == "True (bool)"
    assert validation.describe("abc") == "'abc' (str)"
    assert validation.describe(np.ones((2, 3), np.float32)) == "float32[2, 3] (numpy.ndarray)"
    assert validation.describe(jnp.ones(4, jnp.int8)) == "int8[4] (jax.Array)"
    assert validation.describe(np.int64(3)) == "np.int64(3) (int64)"


def test_describe_cuts_long_reprs():
    text = validation.describe("x" * 500)
    assert len(text) < 100
    assert text.endswith("... (str)")


def test_describe_survives_a_broken_repr():
    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("boom")

    assert validation.describe(Broken()) == "<unrepresentable> (Broken)"


def test_message_shape():
    assert validation.expectation_message("step", "an int >= 0", -1) == "step must be an int >= 0, got -1 (int)"


@pytest.mark.parametrize("value", [True, False, np.bool_(True)])
def test_require_int_rejects_bools(value):
    with pytest.raises(TypeError, match=r"count must be an int"):
        validation.require_int(value, "count")


@pytest.mark.parametrize("value", [1.0, "1", None, [1]])
def test_require_int_rejects_non_integers(value):
    with pytest.raises(TypeError, match=r"count must be an int"):
        validation.require_int(value, "count")


def test_require_int_accepts_numpy_integers_and_returns_python_ints():
    result = validation.require_int(np.int32(7), "count")
    assert result == 7
    assert type(result) is int


def test_require_int_bounds():
    assert validation.require_int(5, "x", minimum=0, maximum=5) == 5
    with pytest.raises(ValueError, match=r"x must be an int in \[0, 5\], got 6 \(int\)"):
        validation.require_int(6, "x", minimum=0, maximum=5)
    with pytest.raises(ValueError, match=r"x must be an int >= 2, got 1 \(int\)"):
        validation.require_int(1, "x", minimum=2)
    with pytest.raises(ValueError, match=r"x must be an int <= 2, got 3 \(int\)"):
        validation.require_int(3, "x", maximum=2)


def test_type_and_value_error_is_both_and_declared_once():
    assert issubclass(validation.TypeAndValueError, TypeError)
    assert issubclass(validation.TypeAndValueError, ValueError)
    with pytest.raises(validation.TypeAndValueError, match=r"^x must be an int, got 'a' \(str\)$"):
        validation.fail_type_and_value("x", "an int", "a")


@pytest.mark.parametrize("value", [np.int64(6), np.uint8(9), np.int32(-1), jnp.int32(6)], ids=repr)
def test_require_int_out_of_bounds_non_python_integer_is_also_a_type_error(value):
    # tinax 0.2 took Python ints only: any other integer was the wrong type, whatever its value.
    with pytest.raises(ValueError, match=r"^x must be an int in \[0, 5\], got ") as caught:
        validation.require_int(value, "x", minimum=0, maximum=5)
    assert isinstance(caught.value, TypeError)


def test_require_int_out_of_bounds_python_int_is_only_a_value_error():
    with pytest.raises(ValueError, match="must be an int") as caught:
        validation.require_int(6, "x", minimum=0, maximum=5)
    assert not isinstance(caught.value, TypeError)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (3, False),
        (True, False),
        (np.bool_(True), False),
        (np.int64(3), True),
        (np.uint32(3), True),
        (jnp.int32(3), True),
        (np.array(3, np.int16), True),
        (np.array([3]), False),
        (jnp.arange(3), False),
        (np.float32(3), False),
        (3.0, False),
        ("3", False),
        (None, False),
    ],
    ids=repr,
)
def test_is_non_python_int(value, expected):
    assert validation.is_non_python_int(value) is expected


def test_reported_as_both_converts_plain_errors_only_after_a_widening():
    for error in (TypeError("x must be a str, got 1 (int)"), ValueError("x must be >= 0, got -1 (int)")):
        with pytest.raises(validation.TypeAndValueError, match=str(error)[:10]), validation.reported_as_both(True):
            raise error
        with pytest.raises(type(error)) as caught, validation.reported_as_both(False):
            raise error
        assert type(caught.value) is type(error)


class _SpecificError(ValueError):
    pass


def test_reported_as_both_keeps_specific_errors_and_the_cause():
    with pytest.raises(_SpecificError), validation.reported_as_both(True):
        raise _SpecificError("kept")
    cause = OSError("underneath")
    with pytest.raises(validation.TypeAndValueError) as caught, validation.reported_as_both(True):
        raise ValueError("outer") from cause
    assert caught.value.__cause__ is cause


def test_positive_and_non_negative_ints():
    assert validation.require_positive_int(1, "n") == 1
    assert validation.require_non_negative_int(0, "n") == 0
    with pytest.raises(ValueError, match=r"n must be an int >= 1, got 0"):
        validation.require_positive_int(0, "n")
    with pytest.raises(ValueError, match=r"n must be an int >= 0, got -1"):
        validation.require_non_negative_int(-1, "n")
    with pytest.raises(TypeError, match=r"n must be an int >= 1, got True \(bool\)"):
        validation.require_positive_int(True, "n")
    with pytest.raises(TypeError, match=r"n must be an int >= 0, got False \(bool\)"):
        validation.require_non_negative_int(False, "n")
    assert validation.require_optional_positive_int(None, "n") is None
    with pytest.raises(TypeError, match="or None"):
        validation.require_optional_positive_int(True, "n")


def test_require_bool():
    assert validation.require_bool(False, "flag") is False
    with pytest.raises(TypeError, match=r"flag must be a bool, got 1 \(int\)"):
        validation.require_bool(1, "flag")


def test_require_str():
    assert validation.require_str("a", "name") == "a"
    assert validation.require_str("", "name", allow_empty=True) == ""
    with pytest.raises(ValueError, match="name must be a non-empty str"):
        validation.require_str("", "name")
    with pytest.raises(TypeError, match="name must be a non-empty str"):
        validation.require_str(b"a", "name")


def test_require_one_of():
    assert validation.require_one_of("forward", "mode", ("forward", "reverse")) == "forward"
    with pytest.raises(ValueError, match=r"mode must be one of 'forward', 'reverse', got 'sideways' \(str\)"):
        validation.require_one_of("sideways", "mode", ("forward", "reverse"))
    with pytest.raises(TypeError, match="mode must be one of"):
        validation.require_one_of(1, "mode", ("forward", "reverse"))


def test_require_instance_and_callable():
    assert validation.require_instance(3, "x", int, "an int") == 3
    with pytest.raises(TypeError, match=r"x must be an int, got 'a' \(str\)"):
        validation.require_instance("a", "x", int, "an int")
    assert validation.require_callable(len, "f") is len
    with pytest.raises(TypeError, match="f must be callable"):
        validation.require_callable(3, "f")


def test_require_sequence_checks_each_item_with_its_index():
    assert validation.require_sequence([1, 2], "sizes", item_check=validation.require_positive_int) == (1, 2)
    with pytest.raises(TypeError, match=r"sizes\[1\] must be an int >= 1, got True \(bool\)"):
        validation.require_sequence([1, True], "sizes", item_check=validation.require_positive_int)
    with pytest.raises(ValueError, match=r"sizes\[0\] must be an int >= 1, got 0"):
        validation.require_sequence([0], "sizes", item_check=validation.require_positive_int)


def test_require_sequence_refuses_strings_and_iterators():
    with pytest.raises(TypeError, match="names must be a sequence"):
        validation.require_sequence("abc", "names")
    with pytest.raises(TypeError, match="names must be a sequence"):
        validation.require_sequence(iter([1]), "names")
    with pytest.raises(ValueError, match="names must be a non-empty sequence"):
        validation.require_sequence([], "names", non_empty=True)


def test_require_unique():
    validation.require_unique(["a", "b"], "names")
    with pytest.raises(ValueError, match="names must not repeat items, got 'a' more than once"):
        validation.require_unique(["a", "b", "a"], "names")


def test_require_path(tmp_path):
    assert validation.require_path(str(tmp_path), "path") == tmp_path
    assert validation.require_path(tmp_path, "path") == tmp_path
    with pytest.raises(TypeError, match="path must be a str or os.PathLike"):
        validation.require_path(b"/tmp", "path")
    with pytest.raises(TypeError, match="path must be a str or os.PathLike"):
        validation.require_path(3, "path")
    with pytest.raises(ValueError, match="path must be a non-empty path"):
        validation.require_path("", "path")


def test_require_existing_path(tmp_path):
    assert validation.require_existing_path(tmp_path, "path") == tmp_path
    with pytest.raises(FileNotFoundError, match="does not exist"):
        validation.require_existing_path(tmp_path / "missing", "path")


def test_mappings():
    assert validation.require_str_mapping({"a": 1}, "m") == {"a": 1}
    with pytest.raises(TypeError, match="m must be a mapping with str keys"):
        validation.require_str_mapping([("a", 1)], "m")
    with pytest.raises(TypeError, match="keys of m must be str"):
        validation.require_str_mapping({1: 1}, "m")
    source = {"a": "b"}
    copied = validation.require_str_to_str_mapping(source, "metadata")
    assert copied == source
    assert copied is not source
    with pytest.raises(TypeError, match=r"metadata\['a'\] must be a str, got 1 \(int\)"):
        validation.require_str_to_str_mapping({"a": 1}, "metadata")


def test_require_shape():
    assert require_shape([2, 3], "shape") == (2, 3)
    with pytest.raises(TypeError, match=r"shape\[0\] must be an int >= 0, got True"):
        require_shape([True], "shape")
    with pytest.raises(ValueError, match=r"shape\[1\] must be an int >= 0, got -1"):
        require_shape([1, -1], "shape")


def test_logical_nbytes_and_extended_dtypes():
    import jax

    key_dtype = jax.random.key(0).dtype
    assert is_extended_dtype(key_dtype)
    assert not is_extended_dtype(np.float32)
    assert logical_nbytes((2, 3), np.float32) == 24
    assert logical_nbytes((2,), key_dtype) is None


def test_require_key_and_coordinates():
    import jax

    key = jax.random.key(0)
    assert require_key(key, "key") is key
    legacy = jax.random.PRNGKey(0)
    assert require_key(legacy, "key") is legacy
    with pytest.raises(ValueError, match="key must be a single PRNG key"):
        require_key(jax.random.split(key, 2), "key")
    with pytest.raises(ValueError, match="key must be a single PRNG key"):
        require_key(jnp.zeros(2, jnp.int32), "key")
    with pytest.raises(TypeError, match="key must be a single PRNG key"):
        require_key(jnp.uint32(0), "key")
    with pytest.raises(TypeError, match="key must be a single PRNG key"):
        require_key("key", "key")
    assert require_coordinate(2**32 - 1, "step") == 2**32 - 1
    with pytest.raises(ValueError, match=r"step must be an int in \[0, 2\*\*32 - 1\], got 4294967296"):
        require_coordinate(2**32, "step")
    with pytest.raises(TypeError, match=r"step must be an int in \[0, 2\*\*32 - 1\], got True \(bool\)"):
        require_coordinate(True, "step")
    with pytest.raises(TypeError, match="unsigned integer scalar"):
        require_coordinate(jnp.int32(1), "step")
    assert require_coordinate(np.uint32(5), "step") == 5


def test_host_array_checks_and_snapshots():
    from tinax._core.host import apply_copy_policy, require_host_array

    array = np.arange(4, dtype=np.int32)
    assert require_host_array(array, "array") is array
    with pytest.raises(TypeError, match=r"array must be a numpy.ndarray, got \[1\] \(list\)"):
        require_host_array([1], "array")
    with pytest.raises(TypeError, match="numeric or bool dtype"):
        require_host_array(np.array([object()]), "array")
    snapshot = apply_copy_policy(array, copy=True)
    array[0] = 99
    assert snapshot[0] == 0
    assert apply_copy_policy(array, copy=False) is array
