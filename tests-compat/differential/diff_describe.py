"""Turns whatever a tinax call returned (or raised) into plain, comparable data.

Both sides of the differential check (tinax 0.2 in its own environment, and
ours) describe their results with this module, so the two descriptions can
be compared with ``==`` after they are pickled. A description holds only
builtins: dicts, lists, tuples, str, int, bool, None and bytes. It keeps
what a caller can observe:

- values bit for bit (arrays by their bytes, floats by their IEEE bits);
- dtypes, shapes, weak types, shardings (mesh axes, sizes, axis types,
  device ids and the partition spec) and whether an array is committed;
- the type of every container and leaf by its qualified name. A tinax class
  is named by the public module that exports it (``tinax.array.ArrayInfo``)
  or, when no public module does, by ``tinax.<private>.`` and its qualified
  name, so that the two releases' private module layouts do not matter;
- for an exception, the qualified names of its class's MRO.

JAX, NumPy, Flax, Grain and the other libraries are imported only when a
value of theirs is met, so describing never imports JAX by itself (the
``tinax.device`` cases need JAX unimported).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import logging
import os
import re
import struct
import sys
import types
from collections.abc import Iterable, Mapping
from pathlib import PurePath
from typing import Any

#: The public modules of tinax 0.2, whose exported classes name tinax types.
PUBLIC_MODULES = (
    "tinax.array",
    "tinax.jit",
    "tinax.grad",
    "tinax.random",
    "tinax.device",
    "tinax.debug",
    "tinax.stdlib",
    "tinax.parallel",
    "tinax.nn",
    "tinax.data",
    "tinax.checkpointing",
    "tinax.checkpointing.legacy.v0",
    "tinax.weights",
)

#: How many items of a dataset or iterator are described.
MAX_ITEMS = 64
#: Deeper nesting than this is described by type only.
MAX_DEPTH = 40

_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_public_names: dict[int, str] = {}
_public_names_from: set[str] = set()
#: Strings equal to or starting with one of these folders are written relative to it.
_folders: list[tuple[str, str]] = []


def set_folders(folders: Mapping[str, str | os.PathLike[str]]) -> None:
    """Folders whose absolute paths differ between the sides: each is replaced by its label."""
    _folders.clear()
    for label, folder in folders.items():
        text = os.fspath(folder)
        _folders.append((text, label))
        resolved = os.path.realpath(text)
        if resolved != text:
            _folders.append((resolved, label))
    _folders.sort(key=lambda pair: -len(pair[0]))


def relative_text(text: str) -> str:
    """``text`` with the case folders replaced by their labels."""
    for folder, label in _folders:
        if folder in text:
            text = text.replace(folder, label)
    return text


def _refresh_public_names() -> None:
    for module_name in PUBLIC_MODULES:
        if module_name in _public_names_from:
            continue
        module = sys.modules.get(module_name)
        if module is None:
            continue
        _public_names_from.add(module_name)
        for attribute in dir(module):
            if attribute.startswith("_"):
                continue
            value = getattr(module, attribute, None)
            if isinstance(value, type) and value.__module__.startswith("tinax"):
                _public_names.setdefault(id(value), f"{module_name}.{attribute}")


def type_name(cls: type) -> str:
    """The qualified name of ``cls``; a tinax class by its public module, or ``tinax.<private>.``."""
    module = getattr(cls, "__module__", "?") or "?"
    qualname = getattr(cls, "__qualname__", getattr(cls, "__name__", "?"))
    if module == "tinax" or module.startswith("tinax."):
        _refresh_public_names()
        public = _public_names.get(id(cls))
        if public is not None:
            return public
        return f"tinax.<private>.{qualname}"
    return f"{module}.{qualname}"


def mro_names(cls: type) -> list[str]:
    """The qualified names of every class in ``cls``'s MRO, most derived first."""
    return [type_name(base) for base in cls.__mro__]


def describe_exception(error: BaseException) -> dict[str, Any]:
    """An exception: its class, the names of its MRO, and an exit code for SystemExit."""
    description: dict[str, Any] = {"k": "raise", "t": type_name(type(error)), "mro": mro_names(type(error))}
    if isinstance(error, SystemExit):
        description["code"] = error.code if isinstance(error.code, int | None) else str(error.code)
    # The message is kept for the report only; it is never compared.
    description["message"] = relative_text(_ADDRESS.sub("0x?", str(error)))[:400]
    return description


class Raised:
    """What a step of a case raised, kept as a value so later steps still run."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class RaisedNames:
    """An exception that another interpreter raised, by the names of its class's MRO."""

    def __init__(self, names: list[str]) -> None:
        self.names = names


def attempt(function: Any, *arguments: Any, **keywords: Any) -> Any:
    """``function(*arguments, **keywords)``, or a ``Raised`` holding what it raised."""
    try:
        return function(*arguments, **keywords)
    except Exception as error:
        return Raised(error)


def _float_bits(value: float) -> str:
    return struct.pack("<d", value).hex()


def _module(name: str) -> Any:
    return sys.modules.get(name)


def _is_jax_array(value: object) -> bool:
    jax = _module("jax")
    return jax is not None and isinstance(value, jax.Array)


def describe_dtype(dtype: Any) -> dict[str, Any]:
    """A dtype (NumPy, ml_dtypes or a JAX extended dtype) by its type and name."""
    return {"k": "dtype", "t": type_name(type(dtype)), "str": str(dtype)}


def describe_sharding(sharding: Any, depth: int) -> dict[str, Any]:
    """A sharding by what it places where."""
    jax = _module("jax")
    if jax is not None and isinstance(sharding, jax.sharding.NamedSharding):
        return {
            "k": "named_sharding",
            "mesh": describe(sharding.mesh, depth + 1),
            "spec": describe(sharding.spec, depth + 1),
            "memory_kind": sharding.memory_kind,
        }
    if jax is not None and isinstance(sharding, jax.sharding.SingleDeviceSharding):
        device = next(iter(sharding.device_set))
        return {"k": "single_device_sharding", "device": [device.platform, device.id]}
    return {"k": "sharding", "t": type_name(type(sharding)), "repr": _ADDRESS.sub("0x?", repr(sharding))}


def _array_payload(array: Any) -> dict[str, Any]:
    jax = _module("jax")
    np = _module("numpy")
    if jax.dtypes.issubdtype(array.dtype, jax.dtypes.prng_key):
        data = np.asarray(jax.random.key_data(array))
        return {"impl": str(jax.random.key_impl(array)), "key_data": data.tobytes(), "key_dtype": str(data.dtype)}
    host = np.asarray(array)
    return {"data": host.tobytes(), "host_dtype": host.dtype.str}


def describe_jax_array(array: Any, depth: int) -> dict[str, Any]:
    """A concrete JAX array: dtype, shape, weak type, placement and its bytes."""
    description: dict[str, Any] = {
        "k": "jax_array",
        "t": type_name(type(array)),
        "dtype": str(array.dtype),
        "shape": list(array.shape),
        "weak_type": bool(getattr(array, "weak_type", False)),
    }
    if array.is_deleted():
        description["deleted"] = True
        return description
    description["committed"] = bool(array.committed)
    description["sharding"] = describe_sharding(array.sharding, depth)
    if array.is_fully_addressable:
        description.update(_array_payload(array))
    else:
        description["addressable"] = False
    return description


def describe_ndarray(array: Any, depth: int) -> dict[str, Any]:
    """A NumPy array: its type, dtype, shape, writeability and bytes (object arrays by element)."""
    np = _module("numpy")
    description: dict[str, Any] = {
        "k": "ndarray",
        "t": type_name(type(array)),
        "dtype": describe_dtype(array.dtype),
        "byteorder": array.dtype.byteorder,
        "shape": list(array.shape),
        "writeable": bool(array.flags.writeable),
    }
    if isinstance(array, np.ma.MaskedArray):
        description["mask"] = np.ma.getmaskarray(array).tobytes()
        array = np.ma.getdata(array)
    if array.dtype.hasobject:
        description["items"] = [describe(item, depth + 1) for item in array.reshape(-1).tolist()]
    else:
        description["data"] = np.ascontiguousarray(array).tobytes()
    return description


def _describe_mapping(value: Mapping[Any, Any], depth: int) -> dict[str, Any]:
    return {
        "k": "map",
        "t": type_name(type(value)),
        "items": [[describe(key, depth + 1), describe(item, depth + 1)] for key, item in value.items()],
    }


def _describe_fields(value: Any, names: Iterable[str], depth: int) -> dict[str, Any]:
    """Named attributes, by name; an attribute whose read raises is described by its exception."""
    fields = {}
    for name in names:
        try:
            fields[name] = describe(getattr(value, name), depth + 1)
        except Exception as error:  # A property that raises is part of what a caller sees.
            fields[name] = describe_exception(error)
    return fields


def _flax_description(value: Any, depth: int) -> dict[str, Any] | None:
    nnx = sys.modules.get("flax.nnx")
    if nnx is None:
        return None
    if isinstance(value, nnx.Variable):
        metadata = dict(value.get_metadata()) if hasattr(value, "get_metadata") else {}
        return {
            "k": "variable",
            "t": type_name(type(value)),
            "value": describe(value.get_raw_value() if hasattr(value, "get_raw_value") else value.value, depth + 1),
            "metadata": describe(dict(sorted(metadata.items())), depth + 1),
        }
    if isinstance(value, nnx.GraphDef):
        return {"k": "graphdef", "t": type_name(type(value)), "repr": _ADDRESS.sub("0x?", repr(value))}
    node_types = tuple(getattr(nnx, name) for name in ("Module", "Pytree", "Object") if hasattr(nnx, name))
    if isinstance(value, node_types):
        graphdef, state = nnx.split(value)
        return {
            "k": "module",
            "t": type_name(type(value)),
            "graphdef": describe(graphdef, depth + 1),
            "state": describe(state, depth + 1),
        }
    graph_state = getattr(nnx, "GraphState", None)
    if graph_state is not None and isinstance(value, graph_state):
        # Flax keeps the two halves in private attributes; the mapping view is the state.
        fields = [name for name in ("_graphdef", "_state") if hasattr(value, name)]
        return {
            "k": "graph_state",
            "t": type_name(type(value)),
            "fields": _describe_fields(value, fields, depth),
            "mapping": _describe_mapping(value, depth),
        }
    return None


def _grain_description(value: Any, depth: int) -> dict[str, Any] | None:
    grain = sys.modules.get("grain")
    if grain is None:
        return None
    if isinstance(value, grain.MapDataset):
        length = len(value)
        shown = min(length, MAX_ITEMS)
        return {
            "k": "map_dataset",
            "t": type_name(type(value)),
            "len": length,
            "items": [describe(value[index], depth + 1) for index in range(shown)],
        }
    if isinstance(value, grain.DatasetIterator):
        return {"k": "dataset_iterator", "t": type_name(type(value)), "state": describe(value.get_state(), depth + 1)}
    if isinstance(value, grain.IterDataset):
        items = []
        for item in value:
            items.append(describe(item, depth + 1))
            if len(items) >= MAX_ITEMS:
                break
        return {"k": "iter_dataset", "t": type_name(type(value)), "items": items}
    return None


def _jax_description(value: Any, depth: int) -> dict[str, Any] | None:
    jax = _module("jax")
    if jax is None:
        return None
    if isinstance(value, jax.Array):
        if isinstance(value, jax.core.Tracer):
            return {"k": "tracer", "t": type_name(type(value))}
        return describe_jax_array(value, depth)
    if isinstance(value, jax.ShapeDtypeStruct):
        return {
            "k": "shape_dtype_struct",
            "t": type_name(type(value)),
            "shape": list(value.shape),
            "dtype": str(value.dtype),
            "weak_type": bool(value.weak_type),
            "sharding": None if value.sharding is None else describe_sharding(value.sharding, depth),
        }
    if isinstance(value, jax.sharding.Sharding):
        return describe_sharding(value, depth)
    if isinstance(value, jax.sharding.Mesh | jax.sharding.AbstractMesh):
        devices = [] if isinstance(value, jax.sharding.AbstractMesh) else [d.id for d in value.devices.flat]
        return {
            "k": "mesh",
            "t": type_name(type(value)),
            "axis_names": list(value.axis_names),
            "axis_sizes": [int(size) for size in value.axis_sizes],
            "axis_types": [str(axis_type) for axis_type in value.axis_types],
            "devices": devices,
        }
    if isinstance(value, jax.sharding.PartitionSpec):
        return {
            "k": "partition_spec",
            "t": type_name(type(value)),
            "entries": [describe(entry, depth + 1) for entry in value],
            "unreduced": sorted(getattr(value, "unreduced", ()) or ()),
            "reduced": sorted(getattr(value, "reduced", ()) or ()),
        }
    if isinstance(value, jax.Device):
        return {"k": "device", "t": type_name(type(value)), "platform": value.platform, "id": value.id}
    return None


def describe(value: Any, depth: int = 0) -> Any:
    """The comparable description of ``value`` (see the module docstring)."""
    if depth > MAX_DEPTH:
        return {"k": "too_deep", "t": type_name(type(value))}
    if isinstance(value, Raised):
        return describe_exception(value.error)
    if isinstance(value, RaisedNames):
        return {"k": "raise", "t": value.names[0], "mro": list(value.names)}
    if value is None or value is Ellipsis:
        return {"k": "py", "t": type_name(type(value))}
    if isinstance(value, bool | int | str | bytes) and not isinstance(value, enum.Enum):
        # Subclasses are recorded by their type and their builtin value, so the record holds builtins only.
        payload: Any
        if isinstance(value, str):
            payload = relative_text(str.__str__(value))
        elif isinstance(value, bool):
            payload = bool(value)
        elif isinstance(value, int):
            payload = int.__index__(value)
        else:
            payload = bytes(value)
        return {"k": "py", "t": type_name(type(value)), "v": payload}
    if isinstance(value, float):
        return {"k": "py", "t": type_name(type(value)), "bits": _float_bits(value), "v": repr(value)}
    if isinstance(value, complex):
        return {"k": "py", "t": type_name(type(value)), "bits": _float_bits(value.real) + _float_bits(value.imag)}
    np = _module("numpy")
    if np is not None:
        if isinstance(value, np.ndarray):
            return describe_ndarray(value, depth)
        if isinstance(value, np.generic):
            return {
                "k": "np_scalar",
                "t": type_name(type(value)),
                "dtype": describe_dtype(value.dtype),
                "data": np.asarray(value).tobytes() if not value.dtype.hasobject else repr(value),
            }
        if isinstance(value, np.dtype):
            return describe_dtype(value)
    jax_description = _jax_description(value, depth)
    if jax_description is not None:
        return jax_description
    if isinstance(value, BaseException):
        return {"k": "exception_value", "t": type_name(type(value)), "mro": mro_names(type(value))}
    if isinstance(value, type):
        return {"k": "type", "name": type_name(value)}
    if isinstance(value, enum.Enum):
        return {"k": "enum", "t": type_name(type(value)), "name": value.name}
    if isinstance(value, PurePath):
        return {"k": "path", "t": type_name(type(value)), "v": relative_text(str(value))}
    flax_description = _flax_description(value, depth)
    if flax_description is not None:
        return flax_description
    grain_description = _grain_description(value, depth)
    if grain_description is not None:
        return grain_description
    if isinstance(value, logging.Logger):
        return describe_logger(value)
    if isinstance(value, Mapping):
        return _describe_mapping(value, depth)
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):
        return {"k": "namedtuple", "t": type_name(type(value)), "fields": _describe_fields(value, value._fields, depth)}
    if isinstance(value, list | tuple):
        return {"k": "seq", "t": type_name(type(value)), "items": [describe(item, depth + 1) for item in value]}
    if isinstance(value, set | frozenset):
        items = [describe(item, depth + 1) for item in value]
        return {"k": "set", "t": type_name(type(value)), "items": sorted(items, key=repr)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = [field.name for field in dataclasses.fields(value)]
        return {"k": "dataclass", "t": type_name(type(value)), "fields": _describe_fields(value, names, depth)}
    if isinstance(value, types.SimpleNamespace) or type(value).__name__ == "Namespace":
        return {"k": "namespace", "t": type_name(type(value)), "fields": describe(dict(vars(value)), depth + 1)}
    if isinstance(value, types.FunctionType | types.BuiltinFunctionType | types.MethodType | functools.partial):
        return {"k": "callable", "t": type_name(type(value))}
    if callable(value) and not hasattr(value, "__dict__"):
        return {"k": "callable", "t": type_name(type(value))}
    return {"k": "object", "t": type_name(type(value)), "repr": relative_text(_ADDRESS.sub("0x?", repr(value)))[:400]}


def describe_logger(logger: logging.Logger) -> dict[str, Any]:
    """A logger: name, level, propagation, its handlers, and whether the registry knows it."""
    handlers = []
    for handler in logger.handlers:
        formatter = handler.formatter
        handlers.append(
            {
                "t": type_name(type(handler)),
                "level": handler.level,
                "format": None if formatter is None else formatter._fmt,
                "datefmt": None if formatter is None else formatter.datefmt,
                "stream": type_name(type(getattr(handler, "stream", None))),
            }
        )
    return {
        "k": "logger",
        "t": type_name(type(logger)),
        "name": logger.name,
        "level": logger.level,
        "propagate": logger.propagate,
        "disabled": logger.disabled,
        "handlers": handlers,
        "registered": logger.name in logging.Logger.manager.loggerDict,
        "parent": None if logger.parent is None else logger.parent.name,
    }


__all__ = [
    "Raised",
    "RaisedNames",
    "attempt",
    "describe",
    "describe_exception",
    "mro_names",
    "relative_text",
    "set_folders",
    "type_name",
]
