"""Differential cases of ``tinax.array``."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from diff_common import (
    DTYPE_NAMES,
    INTEGER_DTYPE_NAMES,
    SHAPES,
    Cases,
    jax_scalars,
    numpy_dtype,
    python_and_numpy_scalars,
    random_array,
    rng,
    scaled,
    size_scalars,
)

import tinax.array as ta

M = "tinax.array"


def _device_put(array: np.ndarray) -> jax.Array:
    return jnp.asarray(array)


def _sharding(spec: tuple[Any, ...]) -> jax.sharding.NamedSharding:
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Explicit,) * 2)
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))


def _inside_jit(function: Any, *arguments: Any) -> Any:
    """What ``function`` returns (or raises) when called on traced ``arguments``."""
    seen: list[Any] = []

    def body(*traced: Any) -> Any:
        seen.append(function(*traced))
        return traced[0]

    jax.jit(body)(*arguments)
    value = seen[0]
    return jax.tree.map(lambda leaf: type(leaf).__name__ if isinstance(leaf, jax.core.Tracer) else leaf, value)


def _from_numpy(cases: Cases) -> None:
    function = f"{M}.from_numpy"
    r = rng(function)
    for dtype_name in DTYPE_NAMES:
        for shape in r.sample(SHAPES, 2):
            copy = r.choice([True, False])
            cases.add(
                function,
                f"dtype-{dtype_name}",
                lambda _, d=dtype_name, s=shape, c=copy: ta.from_numpy(random_array(d, s, "from_numpy"), copy=c),
            )
    layouts = {
        "transposed": lambda: random_array("float32", (3, 4), "t").T,
        "strided": lambda: random_array("int32", (10,), "s")[::3],
        "reversed": lambda: random_array("float32", (5,), "r")[::-1],
        "fortran": lambda: np.asfortranarray(random_array("float32", (2, 3), "f")),
        "readonly": lambda: _readonly(random_array("int16", (4,), "ro")),
        "big_endian": lambda: random_array("int32", (3,), "be").astype(">i4"),
        "big_endian_float": lambda: random_array("float64", (2,), "bef").astype(">f8"),
        "zero_d": lambda: np.array(7, dtype=np.uint8),
        "masked": lambda: np.ma.masked_array([1.0, 2.0, 3.0], mask=[False, True, False]),
        "matrix": lambda: np.asmatrix(np.arange(4, dtype=np.float32).reshape(2, 2)),
        "object": lambda: np.array([1, "a"], dtype=object),
        "string": lambda: np.array(["ab", "c"]),
        "datetime": lambda: np.array(["2020-01-01"], dtype="datetime64[D]"),
        "structured": lambda: np.zeros(2, dtype=[("a", "i4"), ("b", "f4")]),
    }
    for name, make in layouts.items():
        for copy in (True, False):
            cases.add(function, f"layout-{name}", lambda _, m=make, c=copy: ta.from_numpy(m(), copy=c))
    not_arrays = {
        "list": lambda: [1, 2, 3],
        "tuple": lambda: (1.0,),
        "np_scalar": lambda: np.float32(1.5),
        "py_int": lambda: 3,
        "jax_array": lambda: jnp.arange(3),
        "none": lambda: None,
        "memoryview": lambda: memoryview(b"abc"),
        "empty_list": list,
    }
    for name, make in not_arrays.items():
        cases.add(function, f"not-ndarray-{name}", lambda _, m=make: ta.from_numpy(m(), copy=True))
    copies = {"none": None, "int1": 1, "np_bool": np.bool_(True), "str": "yes", "int0": 0}
    for name, copy in copies.items():
        cases.add(function, f"copy-{name}", lambda _, c=copy: ta.from_numpy(np.arange(3), copy=c))
    devices = {
        "none": lambda: None,
        "device0": lambda: jax.devices()[0],
        "device5": lambda: jax.devices()[5],
        "single_device_sharding": lambda: jax.sharding.SingleDeviceSharding(jax.devices()[2]),
        "named_rows": lambda: _sharding(("data",)),
        "named_replicated": lambda: _sharding(()),
        "named_2d": lambda: _sharding(("data", "model")),
        "string": lambda: "cpu",
        "int": lambda: 0,
        "device_list": lambda: jax.devices()[:2],
    }
    for name, make in devices.items():
        for copy in (True, False):
            cases.add(
                function,
                f"device-{name}",
                lambda _, m=make, c=copy: ta.from_numpy(random_array("float32", (8, 2), "dev"), copy=c, device=m()),
            )

    def independent(_: Any, copy: bool, offset: int) -> Any:
        source = _aligned(np.arange(6, dtype=np.float32), offset)
        result = ta.from_numpy(source, copy=copy)
        result.block_until_ready()
        source[:] = -1
        return result

    for copy in (True, False):
        for offset in (0, 4):
            cases.add(
                function, f"mutate-after-offset{offset}", lambda folder, c=copy, o=offset: independent(folder, c, o)
            )


def _readonly(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _to_numpy(cases: Cases) -> None:
    function = f"{M}.to_numpy"
    r = rng(function)
    for dtype_name in DTYPE_NAMES:
        for shape in r.sample(SHAPES, 2):
            writable = r.choice([True, False])
            cases.add(
                function,
                f"dtype-{dtype_name}",
                lambda _, d=dtype_name, s=shape, w=writable: ta.to_numpy(
                    _device_put(random_array(d, s, "to_numpy", special=True)), writable=w
                ),
            )

    def mutate(_: Any) -> Any:
        source = jnp.arange(4, dtype=jnp.int32)
        host = ta.to_numpy(source, writable=True)
        host[0] = 99
        return host, source

    cases.add(function, "writable-is-a-copy", mutate)

    def readonly_write(_: Any) -> Any:
        host = ta.to_numpy(jnp.arange(3.0), writable=False)
        host[0] = 1.0
        return host

    cases.add(function, "readonly-refuses-writes", readonly_write)
    inputs = {
        "sharded": lambda: jax.device_put(jnp.arange(16.0).reshape(8, 2), _sharding(("data",))),
        "sharded_2d": lambda: jax.device_put(
            jnp.arange(16, dtype=jnp.int8).reshape(4, 4), _sharding(("data", "model"))
        ),
        "key": lambda: jax.random.key(0),
        "raw_key": lambda: jax.random.PRNGKey(3),
        "weak_scalar": lambda: jnp.asarray(2.5),
        "numpy": lambda: np.arange(3),
        "list": lambda: [1, 2],
        "py_float": lambda: 1.0,
        "np_scalar": lambda: np.int32(4),
        "none": lambda: None,
        "shape_dtype_struct": lambda: jax.ShapeDtypeStruct((2,), jnp.float32),
        "eval_shape": lambda: jax.eval_shape(lambda: jnp.zeros(3)),
    }
    for name, make in inputs.items():
        for writable in (True, False):
            cases.add(function, f"input-{name}", lambda _, m=make, w=writable: ta.to_numpy(m(), writable=w))
    for name, writable in {"none": None, "int1": 1, "np_bool": np.bool_(False), "str": "no"}.items():
        cases.add(function, f"writable-{name}", lambda _, w=writable: ta.to_numpy(jnp.arange(2), writable=w))

    def donated(_: Any) -> Any:
        array = jnp.arange(4.0)
        jax.jit(lambda x: x + 1, donate_argnums=0)(array)
        return ta.to_numpy(array, writable=True)

    cases.add(function, "deleted-array", donated)
    cases.add(function, "traced", lambda _: _inside_jit(lambda x: ta.to_numpy(x, writable=True), jnp.arange(2.0)))


def _from_dlpack(cases: Cases) -> None:
    function = f"{M}.from_dlpack"
    r = rng(function)
    for dtype_name in DTYPE_NAMES:
        shape = r.choice(SHAPES)
        copy = r.choice([True, False, None])
        source = r.choice(["numpy", "jax"])
        if source == "numpy" and copy is False and 0 in shape:
            # Whether JAX takes an empty NumPy buffer without a copy depends on
            # where the allocator put it, in either release, so such a case
            # would pass or fail by chance.
            copy = None
        cases.add(
            function,
            f"{source}-{dtype_name}",
            lambda _, d=dtype_name, s=shape, c=copy, src=source: ta.from_dlpack(_dlpack_source(src, d, s), copy=c),
        )
    for name, copy in {"none": None, "true": True, "false": False, "int1": 1, "np_bool": np.bool_(True)}.items():
        for offset in (0, 4):
            cases.add(
                function,
                f"copy-{name}-offset{offset}",
                lambda _, c=copy, o=offset: ta.from_dlpack(_aligned(np.arange(4, dtype=np.int32), o), copy=c),
            )
    devices = {
        "device3": lambda: jax.devices()[3],
        "single_device_sharding": lambda: jax.sharding.SingleDeviceSharding(jax.devices()[1]),
        "string": lambda: "cpu",
    }
    for name, make in devices.items():
        for copy in (True, None):
            cases.add(
                function,
                f"device-{name}",
                lambda _, m=make, c=copy: ta.from_dlpack(
                    _aligned(np.arange(4.0, dtype=np.float32)), copy=c, device=m()
                ),
            )
    not_providers = {
        "list": lambda: [1, 2],
        "bytes": lambda: b"ab",
        "none": lambda: None,
        "readonly": lambda: _readonly(_aligned(np.arange(3))),
        "noncontiguous": lambda: _aligned(np.arange(10))[::2],
        "np_scalar": lambda: np.float32(2),
    }
    for name, make in not_providers.items():
        for copy in (True, None):
            cases.add(function, f"input-{name}", lambda _, m=make, c=copy: ta.from_dlpack(m(), copy=c))

    def independent(_: Any) -> Any:
        source = _aligned(np.arange(4, dtype=np.float32))
        result = ta.from_dlpack(source, copy=True)
        source[:] = 5
        return result

    cases.add(function, "copy-true-is-independent", independent)


def _aligned(array: np.ndarray, offset: int = 0) -> np.ndarray:
    """A copy of ``array`` whose buffer starts ``offset`` bytes past a 64-byte boundary.

    JAX imports a NumPy buffer without a copy only when it is 64-byte aligned,
    and NumPy's allocator gives no such promise: the cases place their data
    where they want it, so that both sides see the same alignment.
    """
    raw = np.empty(array.nbytes + 128, dtype=np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    placed = raw[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    placed[...] = array
    return placed


def _dlpack_source(source: str, dtype_name: str, shape: tuple[int, ...]) -> Any:
    array = random_array(dtype_name, shape, "dlpack")
    return _aligned(array) if source == "numpy" else jnp.asarray(array)


def _inspect_array(cases: Cases) -> None:
    function = f"{M}.inspect_array"
    r = rng(function)
    for dtype_name in DTYPE_NAMES:
        shape = r.choice(SHAPES)
        cases.add(
            function,
            f"dtype-{dtype_name}",
            lambda _, d=dtype_name, s=shape: ta.inspect_array(_device_put(random_array(d, s, "inspect"))),
        )
    inputs = {
        "key": lambda: jax.random.key(1),
        "key_batch": lambda: jax.random.split(jax.random.key(1), 3),
        "key_rbg": lambda: jax.random.key(2, impl="rbg"),
        "raw_key": lambda: jax.random.PRNGKey(1),
        "committed": lambda: jax.device_put(jnp.arange(3), jax.devices()[4]),
        "sharded": lambda: jax.device_put(jnp.zeros((8, 4), jnp.bfloat16), _sharding(("data", "model"))),
        "weak": lambda: jnp.asarray(1.0),
        "numpy": lambda: np.zeros(3),
        "np_scalar": lambda: np.float32(1),
        "list": lambda: [1],
        "none": lambda: None,
        "shape_dtype_struct": lambda: jax.ShapeDtypeStruct((2, 2), jnp.int8),
        "eval_shape": lambda: jax.eval_shape(lambda: jnp.zeros((2,), jnp.float16)),
    }
    for name, make in inputs.items():
        cases.add(function, f"input-{name}", lambda _, m=make: ta.inspect_array(m()))

    def donated(_: Any) -> Any:
        array = jnp.arange(4.0)
        jax.jit(lambda x: x * 2, donate_argnums=0)(array)
        return ta.inspect_array(array)

    cases.add(function, "deleted-array", donated)
    cases.add(function, "traced", lambda _: _inside_jit(ta.inspect_array, jnp.arange(2.0)))


def _array_info(cases: Cases) -> None:
    function = f"{M}.ArrayInfo"

    def construct(_: Any, arguments: tuple[Any, ...]) -> Any:
        info = ta.ArrayInfo(*arguments)
        copy = ta.ArrayInfo(*arguments)
        return {
            "value": info,
            "repr": repr(info),
            "equal": info == copy,
            "hash_equal": _hash_or_error(info) == _hash_or_error(copy),
            "fields": [field.name for field in dataclasses.fields(info)],
            "has_dict": hasattr(info, "__dict__"),
        }

    argument_sets = {
        "float32": ((2, 3), np.dtype("float32"), 24, True, True),
        "key": ((), jax.random.key(0).dtype, None, False, True),
        "empty": ((0,), np.dtype("int8"), 0, False, False),
    }
    for name, arguments in argument_sets.items():
        cases.add(function, f"construct-{name}", lambda folder, a=arguments: construct(folder, a))

    def frozen(_: Any) -> Any:
        info = ta.ArrayInfo((1,), np.dtype("int32"), 4, True, True)
        info.shape = (2,)  # type: ignore[misc]
        return info

    cases.add(function, "frozen", frozen)
    cases.add(
        function,
        "keywords",
        lambda _: ta.ArrayInfo(shape=(1,), dtype="x", logical_nbytes=None, committed=False, fully_addressable=True),
    )
    cases.add(function, "missing-field", lambda _: ta.ArrayInfo((1,), np.dtype("int32")))  # type: ignore[call-arg]


def _hash_or_error(value: Any) -> Any:
    try:
        return hash(value)
    except TypeError as error:
        return type(error).__name__


def _one_hot(cases: Cases) -> None:
    function = f"{M}.one_hot"
    r = rng(function)
    output_dtypes = [None, "float32", "bfloat16", "float16", "int8", "int32", "bool", "uint8"]
    for _ in range(scaled(48)):
        dtype_name = r.choice(INTEGER_DTYPE_NAMES)
        shape = r.choice([(), (1,), (5,), (2, 3), (0,), (3, 0)])
        num_classes = r.choice([1, 2, 3, 5, 8])
        out = r.choice(output_dtypes)
        low = r.choice([-1, 0]) if np.dtype(dtype_name).kind == "i" else 0
        values = (
            np.asarray(
                [r.randint(low, num_classes + 1) for _ in range(int(np.prod(shape, dtype=np.int64)))], dtype=np.int64
            )
            .astype(dtype_name)
            .reshape(shape)
        )
        cases.add(
            function,
            f"indices-{dtype_name}",
            lambda _, v=values, n=num_classes, o=out: ta.one_hot(jnp.asarray(v), num_classes=n, dtype=o),
        )
    padding = np.asarray([0, -1, 2, -1, 1], dtype=np.int32)
    cases.add(function, "padding-minus-one", lambda _: ta.one_hot(jnp.asarray(padding), num_classes=3))
    cases.add(function, "out-of-range", lambda _: ta.one_hot(jnp.asarray([0, 3, 7, -5]), num_classes=3))
    # Sizes past 2**31 would ask for gigabytes: they are left out.
    num_classes_values = dict(size_scalars())
    for name, value in num_classes_values.items():
        cases.add(function, f"num_classes-{name}", lambda _, n=value: ta.one_hot(jnp.arange(3), num_classes=n))
    for name, value in jax_scalars():
        cases.add(function, f"num_classes-{name}", lambda _, n=value: ta.one_hot(jnp.arange(3), num_classes=n))
    indices = {
        "float": lambda: jnp.asarray([0.0, 1.0]),
        "bool": lambda: jnp.asarray([True, False]),
        "numpy_int": lambda: np.asarray([0, 2, -1]),
        "numpy_int8": lambda: np.asarray([1, 0], dtype=np.int8),
        "numpy_float": lambda: np.asarray([0.0]),
        "list": lambda: [0, 1],
        "py_int": lambda: 1,
        "np_scalar": lambda: np.int32(1),
        "jax_scalar": lambda: jnp.asarray(2),
        "key": lambda: jax.random.key(0),
        "none": lambda: None,
        "empty_list": list,
        "complex": lambda: jnp.asarray([1 + 0j]),
    }
    for name, make in indices.items():
        cases.add(function, f"input-{name}", lambda _, m=make: ta.one_hot(m(), num_classes=3))
    dtypes = {"str_foo": "foo", "object": object, "py_float": float, "py_int": int, "np_type": np.float16, "void": "V4"}
    for name, out in dtypes.items():
        cases.add(function, f"dtype-{name}", lambda _, o=out: ta.one_hot(jnp.arange(2), num_classes=2, dtype=o))
    cases.add(function, "jit", lambda _: jax.jit(lambda i: ta.one_hot(i, num_classes=4))(jnp.asarray([3, -1, 0, 9])))
    cases.add(
        function,
        "eval_shape",
        lambda _: jax.eval_shape(
            lambda i: ta.one_hot(i, num_classes=6, dtype=jnp.bfloat16), jax.ShapeDtypeStruct((2, 5), jnp.int16)
        ),
    )
    cases.add(
        function,
        "vmap",
        lambda _: jax.vmap(lambda i: ta.one_hot(i, num_classes=3))(jnp.asarray([[0, 1], [2, -1]])),
    )
    cases.add(
        function,
        "sharded",
        lambda _: ta.one_hot(jax.device_put(jnp.arange(8) % 3, _sharding(("data",))), num_classes=3),
    )


def _safe_astype(cases: Cases) -> None:
    function = f"{M}.safe_astype"
    r = rng(function)
    for _ in range(scaled(64)):
        source = r.choice(DTYPE_NAMES)
        target = r.choice(DTYPE_NAMES)
        shape = r.choice(SHAPES)
        lossy = r.choice([True, False])
        spelled = r.choice(["name", "dtype", "type"])
        cases.add(
            function,
            f"{source}-to-{target}",
            lambda _, s=source, t=target, sh=shape, lo=lossy, sp=spelled: ta.safe_astype(
                _device_put(random_array(s, sh, "astype", special=True)), _spell(t, sp), allow_lossy=lo
            ),
        )
    targets = {
        "py_float": float,
        "py_int": int,
        "py_bool": bool,
        "py_complex": complex,
        "jnp_float32": jnp.float32,
        "str_foo": "foo",
        "none": None,
        "object": object,
        "key_dtype": jax.random.key(0).dtype,
        "str_i8": "i8",
        "byteswapped": np.dtype(">f4"),
    }
    for name, target in targets.items():
        for lossy in (False, True):
            cases.add(
                function,
                f"target-{name}",
                lambda _, t=target, lo=lossy: ta.safe_astype(jnp.asarray([1.5, -2.0]), t, allow_lossy=lo),
            )
    for name, lossy in {"none": None, "int1": 1, "np_bool": np.bool_(True), "str": "yes"}.items():
        cases.add(
            function, f"allow_lossy-{name}", lambda _, lo=lossy: ta.safe_astype(jnp.arange(3), "int8", allow_lossy=lo)
        )
    inputs = {
        "numpy": lambda: np.arange(3, dtype=np.int32),
        "list": lambda: [1, 2],
        "py_int": lambda: 3,
        "np_scalar": lambda: np.int32(3),
        "key": lambda: jax.random.key(0),
        "weak": lambda: jnp.asarray(3),
        "none": lambda: None,
    }
    for name, make in inputs.items():
        cases.add(function, f"input-{name}", lambda _, m=make: ta.safe_astype(m(), "float32"))
    cases.add(
        function, "jit", lambda _: jax.jit(lambda x: ta.safe_astype(x, jnp.float32))(jnp.arange(3, dtype=jnp.int16))
    )
    cases.add(
        function,
        "eval_shape",
        lambda _: jax.eval_shape(lambda x: ta.safe_astype(x, "int64"), jax.ShapeDtypeStruct((3,), jnp.int8)),
    )


def _spell(dtype_name: str, how: str) -> Any:
    if how == "name":
        return dtype_name
    dtype = numpy_dtype(dtype_name)
    return dtype if how == "dtype" else dtype.type


def _stack_batch(cases: Cases) -> None:
    function = f"{M}.stack_batch"
    r = rng(function)
    for _ in range(scaled(40)):
        dtype_name = r.choice(DTYPE_NAMES)
        shape = r.choice(SHAPES)
        count = r.choice([1, 2, 3])
        axis = r.randint(-len(shape) - 2, len(shape) + 1)
        container = r.choice(["list", "tuple"])
        cases.add(
            function,
            f"{dtype_name}-{container}",
            lambda _, d=dtype_name, s=shape, n=count, a=axis, c=container: ta.stack_batch(
                (list if c == "list" else tuple)(_device_put(random_array(d, s, "stack", i)) for i in range(n)), axis=a
            ),
        )
    inputs = {
        "empty_list": list,
        "empty_tuple": lambda: (),
        "mixed_dtypes": lambda: [jnp.zeros(2, jnp.float32), jnp.zeros(2, jnp.int32)],
        "mixed_weak": lambda: [jnp.zeros(2, jnp.float32), jnp.asarray([1.0, 2.0])],
        "mixed_shapes": lambda: [jnp.zeros(2), jnp.zeros(3)],
        "numpy": lambda: [np.zeros(2), np.zeros(2)],
        "mixed_numpy": lambda: [jnp.zeros(2), np.zeros(2, np.float32)],
        "python_scalars": lambda: [1, 2],
        "jax_scalars": lambda: [jnp.asarray(1), jnp.asarray(2)],
        "keys": lambda: [jax.random.key(0), jax.random.key(1)],
        "string": lambda: "ab",
        "bytes": lambda: b"ab",
        "generator": lambda: (jnp.zeros(1) for _ in range(2)),
        "dict": lambda: {"a": jnp.zeros(1)},
        "single_array": lambda: jnp.zeros((2, 2)),
        "none": lambda: None,
        "sharded": lambda: [jax.device_put(jnp.arange(8.0), _sharding(("data",))) for _ in range(2)],
    }
    for name, make in inputs.items():
        cases.add(function, f"input-{name}", lambda _, m=make: ta.stack_batch(m()))
    for name, axis in {**dict(python_and_numpy_scalars()), **dict(jax_scalars())}.items():
        cases.add(function, f"axis-{name}", lambda _, a=axis: ta.stack_batch([jnp.zeros((2, 3))] * 2, axis=a))
    cases.add(
        function,
        "jit",
        lambda _: jax.jit(lambda a, b: ta.stack_batch([a, b], axis=-1))(jnp.arange(3.0), jnp.ones(3)),
    )
    cases.add(
        function,
        "eval_shape",
        lambda _: jax.eval_shape(
            lambda a, b: ta.stack_batch((a, b), axis=1),
            jax.ShapeDtypeStruct((2, 4), jnp.float16),
            jax.ShapeDtypeStruct((2, 4), jnp.float16),
        ),
    )


def build(cases: Cases) -> None:
    """Every case of ``tinax.array``."""
    _from_numpy(cases)
    _to_numpy(cases)
    _from_dlpack(cases)
    _inspect_array(cases)
    _array_info(cases)
    _one_hot(cases)
    _safe_astype(cases)
    _stack_batch(cases)
