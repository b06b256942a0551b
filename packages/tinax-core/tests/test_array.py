"""Behaviour of tinax.array: ownership policies and the operations that refuse silent failures."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from tinax._core.host import has_masked_elements
from tinax.array import (
    ArrayInfo,
    from_dlpack,
    from_numpy,
    inspect_array,
    one_hot,
    safe_astype,
    stack_batch,
    to_numpy,
)
from tinax_testing import import_side_effects


def aligned_float32(count: int, alignment: int = 64) -> np.ndarray:
    """A float32 array whose buffer starts on an ``alignment``-byte boundary."""
    raw = np.empty(count * 4 + alignment, dtype=np.uint8)
    offset = (-raw.ctypes.data) % alignment
    array = raw[offset : offset + count * 4].view(np.float32)
    assert array.ctypes.data % alignment == 0
    array[:] = np.arange(count, dtype=np.float32)
    return array


@pytest.fixture
def mesh8() -> jax.sharding.Mesh:
    return jax.make_mesh((8,), ("data",))


# from_numpy -----------------------------------------------------------------


def test_from_numpy_copy_true_is_independent_of_an_aligned_source():
    source = aligned_float32(64)
    result = from_numpy(source, copy=True)
    source[:] = -1.0
    np.testing.assert_array_equal(np.asarray(result), np.arange(64, dtype=np.float32))


def test_from_numpy_copy_true_is_independent_when_sharded(mesh8):
    source = aligned_float32(64)
    result = from_numpy(source, copy=True, device=NamedSharding(mesh8, PartitionSpec("data")))
    source[:] = -1.0
    np.testing.assert_array_equal(np.asarray(result), np.arange(64, dtype=np.float32))
    assert result.sharding == NamedSharding(mesh8, PartitionSpec("data"))


def test_from_numpy_copy_false_is_independent_of_an_aligned_source_as_in_tinax_02():
    source = aligned_float32(16)
    result = from_numpy(source, copy=False)
    result.block_until_ready()
    source[:] = -1.0
    np.testing.assert_array_equal(np.asarray(result), np.arange(16, dtype=np.float32))


def test_from_numpy_places_on_the_requested_device():
    device = jax.devices()[3]
    result = from_numpy(np.ones((2, 2), np.int32), copy=True, device=device)
    assert result.devices() == {device}
    assert result.committed


def test_from_numpy_rejects_non_numpy_input():
    with pytest.raises(TypeError, match=r"array must be a numpy.ndarray, got \[1, 2\] \(list\)"):
        from_numpy([1, 2], copy=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="array must be a numpy.ndarray"):
        from_numpy(jnp.ones(2), copy=True)  # type: ignore[arg-type]


def test_from_numpy_rejects_object_dtype():
    with pytest.raises(TypeError, match="numeric or bool dtype"):
        from_numpy(np.array([object()]), copy=True)


@pytest.mark.parametrize("copy", [1, None, "yes"])
def test_from_numpy_copy_must_be_a_bool(copy):
    with pytest.raises(TypeError, match="copy must be a bool"):
        from_numpy(np.ones(2), copy=copy)


def test_from_numpy_rejects_a_bad_device_kind():
    with pytest.raises(TypeError, match="device must be a jax.Device, a jax.sharding.Sharding or None"):
        from_numpy(np.ones(2), copy=True, device="cpu:0")  # type: ignore[arg-type]


def test_from_numpy_indivisible_sharding_is_a_value_error(mesh8):
    with pytest.raises(ValueError, match="cannot be placed"):
        from_numpy(np.ones(7, np.float32), copy=True, device=NamedSharding(mesh8, PartitionSpec("data")))


@pytest.mark.parametrize("copy", [True, False])
def test_from_numpy_indivisible_sharding_keeps_jaxs_own_error_class(copy):
    # On a mesh of Auto axes JAX raises its IndivisibleError, a ValueError subclass, which
    # tinax 0.2 let through; code catching that class keeps working.
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    with pytest.raises(ValueError, match="evenly divide|partitioned") as raw:
        jax.device_put(np.ones(7, np.float32), sharding)
    with pytest.raises(ValueError, match="cannot be placed") as caught:
        from_numpy(np.ones(7, np.float32), copy=copy, device=sharding)
    assert type(caught.value) is type(raw.value)
    if type(raw.value) is not ValueError:
        assert any("array float32[7] (numpy.ndarray) cannot be placed" in note for note in caught.value.__notes__)


# to_numpy -------------------------------------------------------------------


def test_to_numpy_read_only_view():
    array = jnp.arange(6).reshape(2, 3)
    host = to_numpy(array, writable=False)
    assert not host.flags.writeable
    np.testing.assert_array_equal(host, np.arange(6).reshape(2, 3))
    with pytest.raises(ValueError, match="read-only"):
        host[0, 0] = 5


def test_to_numpy_writable_is_an_independent_copy():
    array = jnp.arange(4, dtype=jnp.float32)
    first = to_numpy(array, writable=True)
    first[0] = 100.0
    second = to_numpy(array, writable=False)
    assert first.flags.writeable
    assert second[0] == 0.0
    assert not np.shares_memory(first, second)


def test_to_numpy_of_a_sharded_array(mesh8):
    array = jax.device_put(jnp.arange(16), NamedSharding(mesh8, PartitionSpec("data")))
    np.testing.assert_array_equal(to_numpy(array, writable=False), np.arange(16))


def test_to_numpy_rejects_non_arrays_keys_and_tracers():
    with pytest.raises(TypeError, match="array must be a jax.Array"):
        to_numpy(np.ones(2), writable=False)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="key_data"):
        to_numpy(jax.random.key(0), writable=False)
    # JAX's own error for a traced value used as a concrete one (a TypeError), as in tinax 0.2.
    with pytest.raises(jax.errors.ConcretizationTypeError, match="not a traced value"):
        jax.jit(lambda x: to_numpy(x, writable=False))(jnp.ones(2))


@pytest.mark.parametrize("writable", [0, None])
def test_to_numpy_writable_must_be_a_bool(writable):
    with pytest.raises(TypeError, match="writable must be a bool"):
        to_numpy(jnp.ones(2), writable=writable)


def test_to_numpy_rejects_a_deleted_array():
    array = jnp.ones(3)
    array.delete()
    with pytest.raises(ValueError, match="deleted or donated") as raised:
        to_numpy(array, writable=True)
    # JAX reports a deleted array as JaxRuntimeError, which tinax 0.2 let through.
    assert isinstance(raised.value, jax.errors.JaxRuntimeError)


@pytest.mark.parametrize("copy", [True, False])
@pytest.mark.parametrize(
    "masked",
    [
        np.ma.masked_array([1.0, 2.0, 3.0], mask=[False, True, False]),
        np.ma.masked_invalid(np.array([[1.0, np.nan], [2.0, 3.0]], dtype=np.float32)),
        np.ma.masked_all((2, 2), dtype=np.int32),
        np.ma.masked_array(np.float32(5.0), mask=True),
        np.ma.masked_array(np.arange(12).reshape(3, 4), mask=np.eye(3, 4, dtype=bool))[::2, 1:],
    ],
    ids=["one-masked", "masked-nan", "all-masked", "scalar-masked", "strided-view"],
)
def test_from_numpy_refuses_masked_arrays_with_masked_elements(masked, copy):
    with pytest.raises(ValueError, match=r"^array must be an array without masked elements \(a jax.Array cannot hold"):
        from_numpy(masked, copy=copy)


def test_from_numpy_refuses_a_masked_field_of_a_structured_mask():
    # A structured mask has one flag per field; numpy's own any() refuses it.
    masked = np.ma.masked_array(np.zeros(2, dtype=[("a", "f4")]), mask=[(False,), (True,)])
    with pytest.raises(ValueError, match="without masked elements"):
        from_numpy(masked, copy=True)

    assert has_masked_elements(masked)
    assert not has_masked_elements(np.ma.masked_array(np.zeros(2, dtype=[("a", "f4")]), mask=False))


@pytest.mark.parametrize("copy", [True, False])
@pytest.mark.parametrize(
    "unmasked",
    [
        np.ma.masked_array([1.0, 2.0, 3.0]),
        np.ma.masked_array(np.arange(6, dtype=np.int16).reshape(2, 3), mask=np.zeros((2, 3), bool)),
        np.ma.masked_invalid(np.array([1.0, 2.0])),
    ],
    ids=["nomask", "all-false-mask", "no-invalid"],
)
def test_from_numpy_accepts_masked_arrays_without_masked_elements(unmasked, copy):
    result = from_numpy(unmasked, copy=copy)
    assert isinstance(result, jax.Array)
    np.testing.assert_array_equal(np.asarray(result), np.ma.getdata(unmasked))
    assert result.dtype == jax.dtypes.canonicalize_dtype(unmasked.dtype)
    assert not isinstance(np.asarray(result), np.ma.MaskedArray)


def test_from_numpy_checks_argument_kinds_before_the_mask():
    masked = np.ma.masked_array([1.0], mask=[True])
    with pytest.raises(TypeError, match="copy must be a bool"):
        from_numpy(masked, copy=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="numeric or bool dtype"):
        from_numpy(np.ma.masked_array(np.array([object()]), mask=[True]), copy=True)


# from_dlpack ----------------------------------------------------------------


def test_from_dlpack_copy_true_is_independent_of_an_aligned_numpy_buffer():
    source = aligned_float32(64)
    result = from_dlpack(source, copy=True)
    source[:] = -1.0
    np.testing.assert_array_equal(np.asarray(result), np.arange(64, dtype=np.float32))


def test_from_dlpack_copy_true_gives_new_storage_for_a_same_device_jax_producer():
    producer = jnp.arange(8, dtype=jnp.float32)
    result = from_dlpack(producer, copy=True)
    assert result.unsafe_buffer_pointer() != producer.unsafe_buffer_pointer()
    producer.delete()  # The copy must survive its producer.
    np.testing.assert_array_equal(np.asarray(result), np.arange(8, dtype=np.float32))


def test_from_dlpack_default_and_copy_false_import_values():
    source = aligned_float32(8)
    np.testing.assert_array_equal(np.asarray(from_dlpack(source)), source)
    np.testing.assert_array_equal(np.asarray(from_dlpack(source, copy=False)), source)


def test_from_dlpack_places_on_a_requested_device():
    device = jax.devices()[2]
    result = from_dlpack(np.arange(4, dtype=np.int32), copy=True, device=device)
    assert result.devices() == {device}


def test_from_dlpack_rejects_a_non_producer():
    with pytest.raises(TypeError, match="__dlpack__"):
        from_dlpack([1, 2, 3])


def test_from_dlpack_copy_must_be_bool_or_none():
    with pytest.raises(TypeError, match="copy must be a bool"):
        from_dlpack(np.ones(2), copy=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("copy", [None, False, True])
@pytest.mark.parametrize("how", ["delete", "donate"])
def test_from_dlpack_refuses_a_deleted_array_like_to_numpy(copy, how):
    if how == "delete":
        array = jnp.arange(4.0)
        array.delete()
    else:
        array = jnp.arange(4.0)
        jax.jit(lambda value: value + 1, donate_argnums=0)(array)
        if not array.is_deleted():
            pytest.skip("this backend does not honour donation")
    with pytest.raises(
        ValueError, match=r"^array must be a live array \(it was deleted or donated\), got float32\[4\]"
    ) as raised:
        from_dlpack(array, copy=copy)
    # The same error as to_numpy's for a deleted array ...
    assert isinstance(raised.value, jax.errors.JaxRuntimeError)
    # ... and the TypeError that JAX raised here, which tinax 0.2 let through.
    assert isinstance(raised.value, TypeError)


def test_from_dlpack_refuses_a_deleted_shard_of_a_sharded_array(mesh8):
    array = jax.device_put(jnp.arange(8.0), NamedSharding(mesh8, PartitionSpec("data")))
    shard = array.addressable_shards[0].data
    shard.delete()
    with pytest.raises(ValueError, match="deleted or donated"):
        from_dlpack(shard, device=jax.devices()[0])


@pytest.mark.parametrize("copy", [None, False, True])
def test_from_dlpack_dtype_that_dlpack_cannot_carry_is_numpys_own_buffer_error(copy):
    # NumPy's __dlpack__ refuses the export itself; that error reaches the caller as it is.
    with pytest.raises(BufferError, match="DLPack") as raised:
        from_dlpack(np.array(["a", "b"]), copy=copy)
    assert not isinstance(raised.value, ValueError)


@pytest.mark.parametrize("copy", [None, False, True])
def test_from_dlpack_strided_producer_is_a_value_error_that_is_still_jaxs_runtime_error(copy):
    strided = np.arange(16, dtype=np.float32)[::2]
    with pytest.raises(ValueError, match=r"^array float32\[8\] \(numpy.ndarray\) cannot be imported") as raised:
        from_dlpack(strided, copy=copy)
    # JAX raises JaxRuntimeError here, which tinax 0.2 let through unchanged.
    assert isinstance(raised.value, jax.errors.JaxRuntimeError)
    assert isinstance(raised.value.__cause__, jax.errors.JaxRuntimeError)
    assert "striding" in str(raised.value)


class FailingProducer:
    """A DLPack producer whose own export fails with an error of its choosing."""

    def __init__(self, error: BaseException, *, in_device_query: bool = False) -> None:
        self.error = error
        self.in_device_query = in_device_query

    def __dlpack_device__(self) -> tuple[int, int]:
        if self.in_device_query:
            raise self.error
        return (1, 0)  # kDLCPU, device 0

    def __dlpack__(self, *, stream: object = None, **kwargs: object) -> object:
        raise self.error


class ProducerError(Exception):
    pass


@pytest.mark.parametrize("copy", [None, False, True])
@pytest.mark.parametrize("in_device_query", [False, True], ids=["export", "device-query"])
@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("export failed"),
        BufferError("export failed"),
        ValueError("export failed"),
        TypeError("export failed"),
        ProducerError("export failed"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_from_dlpack_lets_the_producers_own_exception_through_unchanged(copy, in_device_query, error):
    with pytest.raises(type(error)) as raised:
        from_dlpack(FailingProducer(error, in_device_query=in_device_query), copy=copy)
    assert raised.value is error
    assert raised.value.__cause__ is None


def test_from_dlpack_unsupported_device_type_is_a_type_error():
    class ElsewhereProducer(FailingProducer):
        def __dlpack_device__(self) -> tuple[int, int]:
            return (99, 0)  # no DLPack device type JAX knows

    with pytest.raises(TypeError, match="cannot be imported through DLPack") as raised:
        from_dlpack(ElsewhereProducer(RuntimeError("never exported")))
    assert isinstance(raised.value.__cause__, TypeError)


def test_from_dlpack_copy_false_onto_another_device_is_a_value_error():
    producer = jax.device_put(jnp.arange(4), jax.devices()[0])
    with pytest.raises(ValueError, match="cannot be imported through DLPack with copy=False") as raised:
        from_dlpack(producer, copy=False, device=jax.devices()[1])
    assert isinstance(raised.value.__cause__, ValueError)


# safe_astype ----------------------------------------------------------------

LOSSY = [
    (jnp.int32, jnp.int8),
    (jnp.int32, jnp.uint32),
    (jnp.int8, jnp.uint8),
    (jnp.uint32, jnp.int32),
    (jnp.float32, jnp.int32),
    (jnp.float32, jnp.float16),
    (jnp.float32, jnp.bfloat16),
    (jnp.float16, jnp.bfloat16),
    (jnp.bfloat16, jnp.float16),
    (jnp.complex64, jnp.float32),
    (jnp.int32, jnp.float32),
    (jnp.int16, jnp.float16),
    (jnp.float32, jnp.bool_),
    (jnp.int8, jnp.bool_),
    (jnp.float16, ml_dtypes.float8_e4m3fn),
]

PRESERVING = [
    (jnp.int8, jnp.int16),
    (jnp.uint8, jnp.int16),
    (jnp.uint16, jnp.uint32),
    (jnp.int8, jnp.float16),
    (jnp.uint8, jnp.bfloat16),
    (jnp.int16, jnp.float32),
    (jnp.float16, jnp.float32),
    (jnp.bfloat16, jnp.float32),
    (ml_dtypes.float8_e4m3fn, jnp.float16),
    (jnp.float32, jnp.complex64),
    (jnp.bool_, jnp.int8),
    (jnp.bool_, jnp.float32),
    (jnp.int32, jnp.int32),
]


@pytest.mark.parametrize(("source", "target"), LOSSY)
def test_safe_astype_refuses_lossy_casts(source, target):
    array = jnp.zeros(3, dtype=source)
    with pytest.raises(ValueError, match="allow_lossy=True"):
        safe_astype(array, target)
    assert safe_astype(array, target, allow_lossy=True).dtype == np.dtype(target)


@pytest.mark.parametrize(("source", "target"), PRESERVING)
def test_safe_astype_allows_value_preserving_casts(source, target):
    array = jnp.ones(3, dtype=source)
    result = safe_astype(array, target)
    assert result.dtype == np.dtype(target)
    np.testing.assert_array_equal(np.asarray(result).astype(np.complex128), np.ones(3, np.complex128))


def test_safe_astype_lossy_cast_wraps_like_upstream_when_allowed():
    result = safe_astype(jnp.array([300], dtype=jnp.int32), jnp.int8, allow_lossy=True)
    assert int(result[0]) == 44


def test_safe_astype_works_under_jit():
    cast = jax.jit(lambda x: safe_astype(x, jnp.float32))
    assert cast(jnp.ones(2, jnp.int16)).dtype == jnp.float32
    with pytest.raises(ValueError, match="can change values"):
        jax.jit(lambda x: safe_astype(x, jnp.int8))(jnp.ones(2, jnp.int32))


def test_safe_astype_refuses_64_bit_targets_that_jax_would_narrow():
    with pytest.raises(ValueError, match="jax_enable_x64"):
        safe_astype(jnp.ones(2, jnp.int32), jnp.int64)


@pytest.mark.parametrize("source", [jnp.bool_, jnp.int8, jnp.int16, jnp.uint16, jnp.float16, jnp.bfloat16, jnp.float32])
def test_safe_astype_none_is_the_default_float_dtype(source):
    # As in tinax 0.2 (and NumPy's astype): None asks for the default floating dtype.
    array = jnp.arange(3).astype(source)
    result = safe_astype(array, None)  # type: ignore[arg-type]
    assert result.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(result), np.asarray(array).astype(np.float32))


def test_safe_astype_none_still_refuses_a_lossy_cast_to_the_default_float():
    array = jnp.array([2**24 + 1], dtype=jnp.int32)
    with pytest.raises(ValueError, match="allow_lossy"):
        safe_astype(array, None)  # type: ignore[arg-type]
    assert safe_astype(array, None, allow_lossy=True).dtype == np.float32  # type: ignore[arg-type]


def test_safe_astype_none_is_float64_with_64_bit_types():
    with jax.enable_x64(True):
        array = jnp.array([2**24 + 1], dtype=jnp.int32)
        result = safe_astype(array, None)  # type: ignore[arg-type]
        assert result.dtype == np.float64
        assert int(result[0]) == 2**24 + 1


def test_safe_astype_argument_kinds():
    with pytest.raises(TypeError, match="array must be a jax.Array"):
        safe_astype(np.ones(2), jnp.float32)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="dtype must be a numeric or bool dtype"):
        safe_astype(jnp.ones(2), "not-a-dtype")
    with pytest.raises(TypeError, match="allow_lossy must be a bool"):
        safe_astype(jnp.ones(2), jnp.float32, allow_lossy=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="numeric or bool dtype"):
        safe_astype(jax.random.key(0), jnp.uint32)


class _BadDTypeAttribute:
    dtype = "no-such-dtype"


class _NumberDTypeAttribute:
    dtype = 3


class _RaisingDTypeAttribute:
    @property
    def dtype(self):
        raise RuntimeError("no dtype here")


ODD_DTYPES = [
    "not-a-dtype",
    object(),
    3,
    -1,
    2**70,
    1.5,
    float("nan"),
    "",
    "i4)",
    "int999",
    "M8[xyz]",
    ("i4", -1),
    ("i4", 2**40),
    (np.int32, "x"),
    ("f4", {"shape": 1}),
    {"names": ["a"], "formats": ["f4", "i4"]},
    "\ud800",
    _BadDTypeAttribute(),
    _NumberDTypeAttribute(),
    _RaisingDTypeAttribute(),
    ">i4",
    np.dtype(">f4"),
    "f4,i4",
    (np.int32, (2,)),
    np.ones(2),
    [np.float32],
    Ellipsis,
]


@pytest.mark.parametrize("dtype", ODD_DTYPES, ids=repr)
def test_safe_astype_dtype_that_is_no_usable_dtype_is_a_type_error_and_a_value_error(dtype):
    # tinax 0.2 raised ValueError for many of these (NumPy's or JAX's own), TypeError for others.
    with pytest.raises(TypeError, match=r"^dtype must be a numeric or bool dtype") as caught:
        safe_astype(jnp.ones(2, jnp.int8), dtype, allow_lossy=True)
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("dtype", ODD_DTYPES, ids=repr)
def test_one_hot_dtype_that_is_no_usable_dtype_is_a_type_error_and_a_value_error(dtype):
    with pytest.raises(TypeError, match=r"^dtype must be a numeric or bool dtype") as caught:
        one_hot(jnp.arange(2), num_classes=2, dtype=dtype)
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("dtype", [[("a", "f4")], "U3", "S3", "M8[s]", ("f4", -1), ("f4", (2**40, 2**40))], ids=repr)
@pytest.mark.parametrize("allow_lossy", [False, True])
def test_safe_astype_dtypes_tinax_02_refused_with_value_error_still_are(dtype, allow_lossy):
    with pytest.raises(ValueError, match="dtype must be a numeric or bool dtype"):
        safe_astype(jnp.ones(2, jnp.float32), dtype, allow_lossy=allow_lossy)


def test_unencodable_dtype_string_is_still_numpys_unicode_encode_error():
    # NumPy raises UnicodeEncodeError for a lone surrogate, and tinax 0.2 let it through.
    for call in (
        lambda: safe_astype(jnp.ones(2), "\udc80"),
        lambda: one_hot(jnp.arange(2), num_classes=2, dtype="\udc80"),
    ):
        with pytest.raises(UnicodeEncodeError) as caught:
            call()
        assert isinstance(caught.value, TypeError)
        assert str(caught.value).startswith("dtype must be a numeric or bool dtype, got '\\udc80' (str)")
        assert isinstance(caught.value.__cause__, UnicodeEncodeError)
        assert caught.value.reason == caught.value.__cause__.reason


def test_safe_astype_checks_allow_lossy_before_dtype_as_tinax_02_did():
    with pytest.raises(TypeError, match="allow_lossy must be a bool"):
        safe_astype(jnp.ones(2), "float64", allow_lossy=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        ("float32", np.float32),
        (b"i4", np.int32),
        ("<f2", np.float16),
        ("=i2", np.int16),
        (np.dtype("bfloat16"), jnp.bfloat16),
        ("int4", jnp.int4),
        (bool, np.bool_),
    ],
    ids=repr,
)
def test_safe_astype_accepts_every_form_of_a_usable_dtype(dtype, expected):
    assert safe_astype(jnp.ones(2, jnp.int8), dtype, allow_lossy=True).dtype == expected


def test_safe_astype_none_keeps_the_default_float_dtype():
    # tinax 0.2's behaviour: None is not an odd dtype but the default float.
    assert safe_astype(jnp.ones(2, jnp.int8), None).dtype == jnp.float32  # type: ignore[arg-type]


# one_hot --------------------------------------------------------------------


def test_one_hot_matches_upstream_for_valid_indices():
    indices = jnp.array([0, 2, 1])
    np.testing.assert_array_equal(one_hot(indices, num_classes=3), jax.nn.one_hot(indices, 3))
    assert one_hot(indices, num_classes=3, dtype=jnp.int8).dtype == jnp.int8


def test_one_hot_accepts_numpy_indices():
    np.testing.assert_array_equal(one_hot(np.array([1, 0]), num_classes=2), np.eye(2)[[1, 0]])


@pytest.mark.parametrize("indices", [[0, 3], [-1, 0], [-1, -1], [2, 2**31 - 1], [[1, -1], [3, 0]]], ids=repr)
@pytest.mark.parametrize("make", [jnp.array, np.array], ids=["jax", "numpy"])
def test_one_hot_out_of_range_indices_give_all_zero_rows_as_in_tinax_02(indices, make):
    # -1 is the usual padding index: its row encodes "no class".
    expected = np.asarray(jax.nn.one_hot(jnp.array(indices), 3))
    encoded = one_hot(make(indices), num_classes=3)
    np.testing.assert_array_equal(encoded, expected)
    flat = np.asarray(indices).reshape(-1)
    rows = np.asarray(encoded).reshape(-1, 3)
    for index, row in zip(flat, rows, strict=True):
        assert row.tolist() == ([0.0] * 3 if not 0 <= index < 3 else np.eye(3)[index].tolist())


def test_one_hot_out_of_range_indices_give_the_same_rows_under_jit():
    indices = jnp.array([5, -1, 1])
    encoded = jax.jit(lambda i: one_hot(i, num_classes=3, dtype=jnp.int8))(indices)
    np.testing.assert_array_equal(encoded, one_hot(indices, num_classes=3, dtype=jnp.int8))
    np.testing.assert_array_equal(encoded, [[0, 0, 0], [0, 0, 0], [0, 1, 0]])


@pytest.mark.parametrize(
    "call",
    [
        lambda: one_hot(np.arange(2), num_classes=0),
        lambda: one_hot(np.arange(2), num_classes=3, dtype="U3"),
        lambda: one_hot(jnp.arange(2), num_classes=np.int64(0)),
        lambda: one_hot(jnp.arange(2), num_classes=np.int64(3), dtype=[("a", "f4")]),
    ],
)
def test_one_hot_value_errors_after_numpy_arguments_are_also_type_errors(call):
    # tinax 0.2 refused NumPy indices and a NumPy num_classes as the wrong type.
    with pytest.raises(ValueError, match="must be") as caught:
        call()
    assert isinstance(caught.value, TypeError)


def test_one_hot_refuses_non_integer_indices():
    with pytest.raises(TypeError, match="integer dtype"):
        one_hot(jnp.array([0.0, 1.0]), num_classes=2)
    with pytest.raises(TypeError, match="integer dtype"):
        one_hot(jnp.array([True, False]), num_classes=2)
    with pytest.raises(TypeError, match="indices must be an integer jax.Array"):
        one_hot([0, 1], num_classes=2)  # type: ignore[arg-type]


def test_one_hot_num_classes_contract():
    with pytest.raises(TypeError, match=r"num_classes must be an int >= 1, got True \(bool\)"):
        one_hot(jnp.array([0]), num_classes=True)
    with pytest.raises(TypeError, match="num_classes must be an int"):
        one_hot(jnp.array([0]), num_classes=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"num_classes must be an int >= 1, got 0 \(int\)"):
        one_hot(jnp.array([0]), num_classes=0)


# stack_batch ----------------------------------------------------------------


def test_stack_batch_stacks_along_the_axis():
    arrays = [jnp.full((2, 3), value) for value in range(4)]
    assert stack_batch(arrays).shape == (4, 2, 3)
    assert stack_batch(arrays, axis=-1).shape == (2, 3, 4)
    np.testing.assert_array_equal(stack_batch(arrays, axis=1), jnp.stack(arrays, axis=1))


def test_stack_batch_names_the_array_whose_dtype_differs():
    arrays = [jnp.ones(2, jnp.float32), jnp.ones(2, jnp.float32), jnp.ones(2, jnp.int32)]
    with pytest.raises(ValueError, match=r"arrays\[2\] with dtype int32 but arrays\[0\] with dtype float32"):
        stack_batch(arrays)


def test_stack_batch_names_the_array_whose_shape_differs():
    with pytest.raises(ValueError, match=r"arrays\[1\] with shape \(3,\) but arrays\[0\] with shape \(2,\)"):
        stack_batch([jnp.ones(2), jnp.ones(3)])


def test_stack_batch_argument_contract():
    with pytest.raises(ValueError, match="arrays must be a non-empty sequence"):
        stack_batch([])
    with pytest.raises(TypeError, match=r"arrays\[1\] must be a jax.Array"):
        stack_batch([jnp.ones(2), np.ones(2)])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="arrays must be a sequence of jax.Array"):
        stack_batch(jnp.ones((2, 2)))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="axis must be an int"):
        stack_batch([jnp.ones(2)], axis=False)
    with pytest.raises(ValueError, match=r"axis must be an int in \[-2, 1\], got 2"):
        stack_batch([jnp.ones(2)], axis=2)


def test_stack_batch_checks_the_kind_of_axis_before_the_arrays_as_tinax_02_did():
    with pytest.raises(TypeError, match="axis must be an int"):
        stack_batch([jnp.ones(2), jnp.ones(2, jnp.int32)], axis=True)


@pytest.mark.parametrize(
    "arrays", [[jnp.ones(2), jnp.ones(2, jnp.int32)], [jnp.ones(2), jnp.ones(3)], [jnp.ones(2)]], ids=repr
)
def test_stack_batch_value_errors_with_a_numpy_integer_axis_are_also_type_errors(arrays):
    # tinax 0.2 refused a NumPy integer axis as the wrong type before comparing the arrays.
    axis = np.int64(0) if len(arrays) > 1 else np.int64(5)
    with pytest.raises(ValueError, match="must") as caught:
        stack_batch(arrays, axis=axis)
    assert isinstance(caught.value, TypeError)


def test_stack_batch_under_jit():
    stacked = jax.jit(lambda a, b: stack_batch([a, b]))(jnp.ones(3), jnp.zeros(3))
    np.testing.assert_array_equal(stacked, np.array([[1, 1, 1], [0, 0, 0]]))


# inspect_array --------------------------------------------------------------


def test_inspect_array_reports_metadata(mesh8):
    array = jax.device_put(jnp.zeros((16, 4), jnp.float32), NamedSharding(mesh8, PartitionSpec("data")))
    info = inspect_array(array)
    assert info == ArrayInfo(
        shape=(16, 4), dtype=np.dtype(np.float32), logical_nbytes=256, committed=True, fully_addressable=True
    )


def test_inspect_array_uncommitted_array():
    info = inspect_array(jnp.ones(3, jnp.int8))
    assert info.committed is False
    assert info.logical_nbytes == 3


def test_inspect_array_key_arrays_have_no_logical_nbytes():
    info = inspect_array(jax.random.split(jax.random.key(0), 4))
    assert info.shape == (4,)
    assert info.logical_nbytes is None


def test_inspect_array_rejects_non_arrays_and_tracers():
    with pytest.raises(TypeError, match="array must be a jax.Array"):
        inspect_array(np.ones(2))  # type: ignore[arg-type]
    with pytest.raises(jax.errors.ConcretizationTypeError, match="not a traced value"):
        jax.jit(inspect_array)(jnp.ones(2))


def test_array_info_is_immutable():
    info = inspect_array(jnp.ones(1))
    with pytest.raises(AttributeError):
        info.committed = True  # type: ignore[misc]


# imports --------------------------------------------------------------------


def test_importing_tinax_array_is_inert():
    effects = import_side_effects("tinax.array")
    assert effects == {"backends_initialized": False, "integrations": []}
