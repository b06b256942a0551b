"""Differential cases of ``tinax.parallel``, over the 8 CPU devices the runner asks JAX for."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from diff_common import DTYPE_NAMES, Cases, random_array, rng, scaled
from diff_describe import attempt
from flax import nnx

import tinax.parallel as tp

M = "tinax.parallel"
AXIS = jax.sharding.AxisType
P = jax.sharding.PartitionSpec


def _mesh(kind: str) -> Any:
    devices = jax.devices()
    if kind == "explicit":
        return jax.make_mesh((4, 2), ("data", "model"), axis_types=(AXIS.Explicit,) * 2)
    if kind == "explicit_1d":
        return jax.make_mesh((8,), ("data",), axis_types=(AXIS.Explicit,))
    if kind == "auto":
        return jax.make_mesh((4, 2), ("data", "model"), axis_types=(AXIS.Auto,) * 2)
    if kind == "manual":
        return jax.make_mesh((4, 2), ("data", "model"), axis_types=(AXIS.Manual,) * 2)
    if kind == "manual_1d":
        return jax.make_mesh((4,), ("data",), axis_types=(AXIS.Manual,), devices=devices[:4])
    if kind == "mixed":
        return jax.make_mesh((4, 2), ("data", "model"), axis_types=(AXIS.Explicit, AXIS.Auto))
    if kind == "manual_explicit":
        return jax.make_mesh((4, 2), ("data", "model"), axis_types=(AXIS.Manual, AXIS.Explicit))
    if kind == "single":
        return jax.make_mesh((1,), ("data",), axis_types=(AXIS.Explicit,), devices=devices[:1])
    if kind == "empty":
        return jax.sharding.Mesh(np.empty((0,), dtype=object), ("data",))
    if kind == "abstract":
        return jax.sharding.AbstractMesh((4, 2), ("data", "model"), axis_types=(AXIS.Explicit,) * 2)
    if kind == "none":
        return None
    if kind == "devices":
        return devices
    raise AssertionError(kind)


MESH_KINDS = (
    "explicit",
    "explicit_1d",
    "auto",
    "manual",
    "manual_1d",
    "mixed",
    "single",
    "empty",
    "abstract",
    "none",
    "devices",
)


def _make_mesh(cases: Cases) -> None:
    function = f"{M}.make_mesh"
    device_sets: dict[str, Any] = {
        "all_list": lambda: list(jax.devices()),
        "all_tuple": lambda: tuple(jax.devices()),
        "reversed": lambda: list(reversed(jax.devices())),
        "four": lambda: jax.devices()[:4],
        "one": lambda: jax.devices()[:1],
        "empty": list,
        "duplicate": lambda: [jax.devices()[0]] * 2,
        "numpy": lambda: np.asarray(jax.devices(), dtype=object),
        "numpy_grid": lambda: np.asarray(jax.devices(), dtype=object).reshape(4, 2),
        "generator": lambda: (device for device in jax.devices()[:2]),
        "strings": lambda: ["cpu:0", "cpu:1"],
        "ids": lambda: [0, 1],
        "none": lambda: None,
        "single_device": lambda: jax.devices()[0],
    }
    shapes: dict[str, Any] = {
        "matching": None,
        "flat": "flat",
        "wrong_product": (3,),
        "empty": (),
        "zero": (0,),
        "negative": (-8,),
        "bool": (True,),
        "np_int": "np_int",
        "list": "list",
        "string": "8",
        "float": (8.0,),
    }
    for devices_name, make_devices in device_sets.items():
        cases.add(
            function,
            f"devices-{devices_name}",
            lambda _, d=make_devices: _mesh_from(d(), None),
        )
    for shape_name, shape in shapes.items():
        cases.add(function, f"shape-{shape_name}", lambda _, s=shape: _mesh_from(list(jax.devices()), s))
    names: dict[str, Any] = {
        "tuple": ("data", "model"),
        "list": ["data", "model"],
        "duplicate": ("data", "data"),
        "empty_name": ("data", ""),
        "non_string": ("data", 1),
        "too_few": ("data",),
        "string": "dm",
        "bytes": (b"data", b"model"),
        "none": None,
    }
    for label_, axis_names in names.items():
        cases.add(
            function,
            f"axis_names-{label_}",
            lambda _, n=axis_names: tp.make_mesh(jax.devices(), (4, 2), n, axis_types=(AXIS.Explicit,) * 2),
        )
    types: dict[str, Any] = {
        "explicit": (AXIS.Explicit,) * 2,
        "auto": (AXIS.Auto, AXIS.Auto),
        "manual": [AXIS.Manual, AXIS.Manual],
        "mixed": (AXIS.Explicit, AXIS.Auto),
        "manual_explicit": (AXIS.Manual, AXIS.Explicit),
        "too_few": (AXIS.Explicit,),
        "strings": ("explicit", "explicit"),
        "none_items": (None, None),
        "single_type": AXIS.Explicit,
        "none": None,
        "empty": (),
    }
    for label_, axis_types in types.items():
        cases.add(
            function,
            f"axis_types-{label_}",
            lambda _, t=axis_types: tp.make_mesh(jax.devices(), (4, 2), ("data", "model"), axis_types=t),
        )
    cases.add(function, "axis_types-missing", lambda _: tp.make_mesh(jax.devices(), (8,), ("data",)))  # type: ignore[call-arg]
    r = rng(function)
    factorizations = [(8,), (4, 2), (2, 4), (2, 2, 2), (1, 8), (8, 1), (1, 1, 8)]
    for _ in range(scaled(12)):
        shape = r.choice(factorizations)
        names_ = tuple(f"ax{index}" for index in range(len(shape)))
        kinds = tuple(r.choice([AXIS.Explicit, AXIS.Auto, AXIS.Manual]) for _ in shape)
        order = list(range(8))
        r.shuffle(order)
        cases.add(
            function,
            "random",
            lambda _, s=shape, n=names_, k=kinds, o=order: tp.make_mesh(
                [jax.devices()[index] for index in o], s, n, axis_types=k
            ),
        )


def _mesh_from(devices: Any, shape: Any) -> Any:
    count = len(devices) if hasattr(devices, "__len__") else 2
    if shape is None:
        shape = (count,)
    elif shape == "flat":
        shape = (count // 2, 2) if count % 2 == 0 and count > 1 else (count,)
    elif shape == "np_int":
        shape = (np.int64(4), np.int32(2))
    elif shape == "list":
        shape = [2, 4]
    names = tuple(f"a{index}" for index in range(len(shape))) if isinstance(shape, tuple | list) else ("a0",)
    return tp.make_mesh(devices, shape, names, axis_types=(AXIS.Explicit,) * len(names))


def _layout(cases: Cases) -> None:
    function = f"{M}.layout"
    partitions: dict[str, Any] = {
        "replicated": (),
        "rows": ("data",),
        "grid": ("data", "model"),
        "columns": (None, "model"),
        "both_axes_one_dim": (("data", "model"),),
        "both_axes_list": [("data", "model"), None],
        "unknown": ("batch",),
        "repeated": ("data", "data"),
        "repeated_in_tuple": (("data", "data"),),
        "empty_tuple": ((),),
        "empty_string": ("",),
        "list_entry": (["data"],),
        "int_entry": (0,),
        "string": "data",
        "partition_spec": P("data"),
        "none": None,
        "nested_tuple": (("data", ("model",)),),
        "many_nones": (None, None, None, "data"),
    }
    for mesh_kind in ("explicit", "auto", "manual", "mixed", "single", "empty", "abstract", "none"):
        for label_, entries in partitions.items():
            if mesh_kind != "explicit" and label_ not in ("rows", "replicated"):
                continue
            cases.add(
                function,
                f"{mesh_kind}-{label_}",
                lambda _, k=mesh_kind, e=entries: tp.layout(_mesh(k), e),
            )
    for label_, entries in partitions.items():
        cases.add(
            function,
            f"applied-{label_}",
            lambda _, e=entries: jax.device_put(jnp.zeros((8, 4, 2)), tp.layout(_mesh("explicit"), e)),
        )


def _place_host_array(cases: Cases) -> None:
    function = f"{M}.place_host_array"
    r = rng(function)
    for dtype_name in DTYPE_NAMES:
        shape = r.choice([(8,), (8, 2), (4, 6), (0, 2), (16, 3)])
        spec = r.choice([(), ("data",), ("data", "model"), (None, "model")])
        copy = r.choice([True, False])
        cases.add(
            function,
            f"dtype-{dtype_name}",
            lambda _, d=dtype_name, s=shape, p=spec, c=copy: tp.place_host_array(
                random_array(d, s, "place"), tp.layout(_mesh("explicit"), p[: len(s)]), copy=c
            ),
        )
    arrays = {
        "indivisible": lambda: np.zeros((6, 3)),
        "scalar": lambda: np.float32(1),
        "zero_d": lambda: np.asarray(1.0),
        "object": lambda: np.asarray([1, None], dtype=object),
        "string": lambda: np.asarray(["a", "b", "c", "d"]),
        "list": lambda: [1.0] * 8,
        "jax": lambda: jnp.zeros(8),
        "non_contiguous": lambda: np.zeros((16,))[::2],
        "readonly": lambda: _readonly(np.arange(8.0)),
        "big_endian": lambda: np.arange(8).astype(">i4"),
        "masked": lambda: np.ma.masked_array(np.arange(8.0), mask=[0, 1] * 4),
        "datetime": lambda: np.zeros(8, dtype="datetime64[s]"),
    }
    for name, make in arrays.items():
        cases.add(
            function,
            f"array-{name}",
            lambda _, m=make: tp.place_host_array(m(), tp.layout(_mesh("explicit"), ("data",)), copy=True),
        )
    shardings = {
        "single_device": lambda: jax.sharding.SingleDeviceSharding(jax.devices()[0]),
        "auto_named": lambda: jax.sharding.NamedSharding(_mesh("auto"), P("data")),
        "manual_named": lambda: jax.sharding.NamedSharding(_mesh("manual"), P("data")),
        "none": lambda: None,
        "device": lambda: jax.devices()[0],
        "partition_spec": lambda: P("data"),
    }
    for name, make in shardings.items():
        cases.add(
            function,
            f"sharding-{name}",
            lambda _, m=make: tp.place_host_array(np.zeros((8, 2)), m(), copy=True),
        )
    for name, copy in {"none": None, "int1": 1, "np_bool": np.bool_(False)}.items():
        cases.add(
            function,
            f"copy-{name}",
            lambda _, c=copy: tp.place_host_array(np.zeros(8), tp.layout(_mesh("explicit"), ("data",)), copy=c),
        )

    def snapshot(_: Any) -> Any:
        source = np.arange(8.0)
        placed = tp.place_host_array(source, tp.layout(_mesh("explicit"), ("data",)), copy=True)
        source[:] = -1
        return placed

    cases.add(function, "copy-snapshots-source", snapshot)


def _readonly(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _from_process_local_data(cases: Cases) -> None:
    function = f"{M}.from_process_local_data"

    def build(
        local: Any = None,
        spec: Any = ("data",),
        global_shape: Any = (8, 2),
        **keywords: Any,
    ) -> Any:
        local = np.arange(16.0).reshape(8, 2) if local is None else local
        sharding = tp.layout(_mesh("explicit"), spec) if isinstance(spec, tuple) else spec
        options = {"copy": True, "replica_policy": "disallow", **keywords}
        return tp.from_process_local_data(local, sharding, global_shape, **options)

    variants: dict[str, Any] = {
        "rows": {},
        "replicated_disallow": {"spec": ()},
        "replicated_assume": {"spec": (), "replica_policy": "assume_consistent"},
        "grid": {"spec": ("data", "model")},
        "copy_false": {"copy": False},
        "global_list": {"global_shape": [8, 2]},
        "global_numpy_ints": {"global_shape": (np.int64(8), 2)},
        "global_bool": {"global_shape": (True, 2)},
        "global_negative": {"global_shape": (-8, 2)},
        "rank_mismatch": {"global_shape": (16,)},
        "indivisible": {"global_shape": (6, 2), "local": np.zeros((6, 2))},
        "bad_local_extent": {"local": np.zeros((5, 2))},
        "policy_unknown": {"replica_policy": "trust"},
        "policy_none": {"replica_policy": None},
        "process_index_zero": {"process_index": 0, "process_count": 1},
        "process_index_one": {"process_index": 1},
        "process_index_negative": {"process_index": -1},
        "process_index_bool": {"process_index": False},
        "process_index_np": {"process_index": np.int64(0)},
        "process_count_two": {"process_count": 2},
        "process_count_zero": {"process_count": 0},
        "index_ge_count": {"process_index": 1, "process_count": 1},
        "copy_none": {"copy": None},
        "local_list": {"local": [[0.0, 1.0]] * 8},
        "local_jax": {"local": jnp.zeros((8, 2))},
        "local_object": {"local": np.zeros((8, 2), dtype=object)},
        "sharding_single": {"spec": jax.sharding.SingleDeviceSharding(jax.devices()[0])},
        "sharding_auto": {"spec": jax.sharding.NamedSharding(_mesh("auto"), P("data"))},
        "zero_size": {"local": np.zeros((0, 2)), "global_shape": (0, 2)},
        "int8": {"local": np.arange(16, dtype=np.int8).reshape(8, 2)},
        "bfloat16": {"local": random_array("bfloat16", (8, 2), "fpld")},
    }
    for name, keywords in variants.items():
        cases.add(function, name, lambda _, k=keywords: build(**k))


def _inspection(cases: Cases) -> None:
    arrays: dict[str, Any] = {
        "single_device": lambda: jnp.arange(6.0).reshape(2, 3),
        "rows": lambda: jax.device_put(jnp.zeros((8, 3)), jax.sharding.NamedSharding(_mesh("explicit"), P("data"))),
        "grid": lambda: jax.device_put(
            jnp.zeros((8, 4), jnp.bfloat16), jax.sharding.NamedSharding(_mesh("explicit"), P("data", "model"))
        ),
        "replicated": lambda: jax.device_put(
            jnp.zeros((3,), jnp.int8), jax.sharding.NamedSharding(_mesh("explicit"), P())
        ),
        "partially_replicated": lambda: jax.device_put(
            jnp.zeros((4, 2), jnp.int64), jax.sharding.NamedSharding(_mesh("explicit"), P(None, "model"))
        ),
        "scalar": lambda: jnp.asarray(1.0),
        "empty": lambda: jnp.zeros((0, 3)),
        "key": lambda: jax.random.key(0),
        "keys_sharded": lambda: jax.device_put(
            jax.random.split(jax.random.key(0), 8), jax.sharding.NamedSharding(_mesh("explicit"), P("data"))
        ),
        "raw_key": lambda: jax.random.PRNGKey(0),
        "int4": lambda: jnp.zeros((8,), jnp.int4),
        "numpy": lambda: np.zeros(3),
        "list": lambda: [1.0],
        "none": lambda: None,
        "shape_dtype_struct": lambda: jax.ShapeDtypeStruct((2,), jnp.float32),
        "committed_device": lambda: jax.device_put(jnp.zeros(2), jax.devices()[3]),
    }
    for function_name in ("addressable_indices", "addressable_payload_nbytes", "logical_payload_nbytes"):
        target = getattr(tp, function_name)
        for name, make in arrays.items():
            cases.add(f"{M}.{function_name}", f"array-{name}", lambda _, t=target, m=make: t(m()))


def _shard_mapped(cases: Cases) -> None:
    function = f"{M}.shard_mapped"

    def body(x: Any) -> Any:
        return x * 2.0

    def summed(x: Any) -> Any:
        return jax.lax.psum(jnp.sum(x), "data")

    specs = {
        "rows": (P("data"), P("data")),
        "replicated_in": (P(), P()),
        "both": (P("data", "model"), P("data", "model")),
        "unknown_axis": (P("batch"), P("batch")),
        "tuple_specs": ((P("data"),), P("data")),
        "not_a_spec": ("data", P("data")),
        "none_spec": (None, P("data")),
        "dict_specs": ({"x": P("data")}, P("data")),
    }
    for mesh_kind in ("manual", "manual_1d", "explicit", "auto", "manual_explicit", "empty", "abstract", "none"):
        for label_, (in_specs, out_specs) in specs.items():
            if mesh_kind not in ("manual",) and label_ != "rows":
                continue
            cases.add(
                function,
                f"{mesh_kind}-{label_}",
                lambda _, k=mesh_kind, i=in_specs, o=out_specs: _wrap_and_use(
                    tp.shard_mapped(body, mesh=_mesh(k), in_specs=i, out_specs=o), k
                ),
            )
    axis_name_sets: dict[str, Any] = {
        "empty": frozenset(),
        "data": frozenset({"data"}),
        "unknown": frozenset({"batch"}),
        "set": {"data"},
        "tuple": ("data",),
        "string": "data",
        "non_string": frozenset({1}),
        "none": None,
    }
    for label_, axis_names in axis_name_sets.items():
        cases.add(
            function,
            f"axis_names-{label_}",
            lambda _, a=axis_names: _wrap_and_use(
                tp.shard_mapped(
                    body, mesh=_mesh("manual_explicit"), in_specs=P("data"), out_specs=P("data"), axis_names=a
                ),
                "manual_explicit",
            ),
        )
    for label_, check_vma in {"false": False, "none": None, "int1": 1}.items():
        cases.add(
            function,
            f"check_vma-{label_}",
            lambda _, c=check_vma: _wrap_and_use(
                tp.shard_mapped(body, mesh=_mesh("manual"), in_specs=P("data"), out_specs=P("data"), check_vma=c),
                "manual",
            ),
        )
    for label_, wrapped in {"none": None, "int": 1, "builtin": abs}.items():
        cases.add(
            function,
            f"function-{label_}",
            lambda _, f=wrapped: tp.shard_mapped(f, mesh=_mesh("manual"), in_specs=P("data"), out_specs=P("data")),
        )
    cases.add(
        function,
        "collective",
        lambda _: _wrap_and_use(
            tp.shard_mapped(summed, mesh=_mesh("manual_1d"), in_specs=P("data"), out_specs=P()), "manual_1d"
        ),
    )


def _wrap_and_use(wrapped: Any, mesh_kind: str) -> Any:
    """What ``jax.eval_shape`` and a real call give for a shard-mapped function."""
    mesh = _mesh(mesh_kind)
    argument = jnp.arange(16.0).reshape(8, 2)
    abstract = jax.ShapeDtypeStruct((8, 2), jnp.float32)
    result: dict[str, Any] = {"eval_shape": attempt(jax.eval_shape, wrapped, abstract)}
    if isinstance(mesh, jax.sharding.Mesh) and not mesh.empty:
        sharded_abstract = jax.ShapeDtypeStruct(
            (8, 2), jnp.float32, sharding=jax.sharding.NamedSharding(mesh, P("data"))
        )
        result["eval_shape_sharded"] = attempt(jax.eval_shape, wrapped, sharded_abstract)
    result["call"] = attempt(wrapped, argument)
    result["jit_call"] = attempt(jax.jit(wrapped), argument)
    return result


class _Sharded(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.dense = nnx.Linear(
            4,
            8,
            kernel_init=nnx.with_partitioning(nnx.initializers.lecun_normal(), ("data", "model")),
            bias_init=nnx.with_partitioning(nnx.initializers.zeros_init(), ("model",)),
            rngs=rngs,
        )
        self.scale = nnx.Param(jnp.ones((8,)), sharding=(None,))
        self.count = nnx.BatchStat(jnp.zeros((), jnp.int32))


def _nnx(cases: Cases) -> None:
    initializers: dict[str, Any] = {
        "sharded": lambda: _Sharded(nnx.Rngs(0)),
        "plain": lambda: nnx.Linear(4, 2, rngs=nnx.Rngs(1)),
        "optimizer": lambda: nnx.Optimizer(_Sharded(nnx.Rngs(2)), optax.adam(1e-3), wrt=nnx.Param),
        "not_a_node": lambda: {"w": jnp.ones(2)},
        "array": lambda: jnp.ones(2),
        "none": lambda: None,
    }
    for mesh_kind in MESH_KINDS:
        for name, initializer in initializers.items():
            if mesh_kind not in ("explicit", "auto") and name != "sharded":
                continue
            cases.add(
                f"{M}.eager_sharded_init",
                f"{mesh_kind}-{name}",
                lambda _, i=initializer, k=mesh_kind: tp.eager_sharded_init(i, _mesh(k)),
            )
            cases.add(
                f"{M}.abstract_sharded_state",
                f"{mesh_kind}-{name}",
                lambda _, i=initializer, k=mesh_kind: tp.abstract_sharded_state(i, _mesh(k)),
            )
    for name in ("none", "int", "module_instance"):
        value = {"none": None, "int": 1, "module_instance": "instance"}[name]
        cases.add(
            f"{M}.eager_sharded_init",
            f"initializer-{name}",
            lambda _, v=value: tp.eager_sharded_init(
                _Sharded(nnx.Rngs(0)) if v == "instance" else v, _mesh("explicit")
            ),
        )
        cases.add(
            f"{M}.abstract_sharded_state",
            f"initializer-{name}",
            lambda _, v=value: tp.abstract_sharded_state(
                _Sharded(nnx.Rngs(0)) if v == "instance" else v, _mesh("explicit")
            ),
        )
    states: dict[str, Any] = {
        "model_state": lambda: nnx.state(_Sharded(nnx.Rngs(0))),
        "param_state": lambda: nnx.state(_Sharded(nnx.Rngs(0)), nnx.Param),
        "abstract": lambda: nnx.state(nnx.eval_shape(lambda: _Sharded(nnx.Rngs(0)))),
        "optimizer_state": lambda: nnx.state(
            nnx.Optimizer(_Sharded(nnx.Rngs(2)), optax.sgd(0.1, momentum=0.9), wrt=nnx.Param)
        ),
        "plain_dict": lambda: {"w": jnp.ones(2)},
        "empty_dict": dict,
        "module": lambda: _Sharded(nnx.Rngs(0)),
        "list": lambda: [jnp.ones(2)],
        "none": lambda: None,
    }
    for mesh_kind in MESH_KINDS:
        for name, make in states.items():
            if mesh_kind not in ("explicit", "auto") and name != "model_state":
                continue
            cases.add(
                f"{M}.state_shardings",
                f"{mesh_kind}-{name}",
                lambda _, s=make, k=mesh_kind: tp.state_shardings(s(), _mesh(k)),
            )


def build(cases: Cases) -> None:
    """Every case of ``tinax.parallel``."""
    _make_mesh(cases)
    _layout(cases)
    _place_host_array(cases)
    _from_process_local_data(cases)
    _inspection(cases)
    _shard_mapped(cases)
    _nnx(cases)
