"""A checkpoint's abstract state, read from its metadata files alone, with no JAX backend started.

Orbax's own metadata readers start a backend (its handlers ask for devices), yet planning a restore
needs none. So this reads what Orbax wrote: the pytree's ``_METADATA`` (key paths and kinds), each
array's Zarr metadata via TensorStore (shape, dtype; OCDBT or per-array folders), the ``_sharding``
file and the per-process ``array_metadatas`` files (PRNG key implementations). No array data is read.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import os
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from tinax._checkpointing._compat02 import CheckpointKeyError
from tinax._checkpointing._locations import absolute_location, tensorstore_base
from tinax._checkpointing._metadata._layout import (
    PYTREE_METADATA,
    ParsedFiles,
    read_json_object,
    require_complete_checkpoint,
)
from tinax._core import validation

__all__ = [
    "StoredLeaf",
    "StoredSharding",
    "abstract_checkpointables",
    "read_scalar",
    "stored_leaves",
    "stored_leaves_of",
]

# Orbax's value types (the ``value_type`` of a ``_METADATA`` entry).
JAX_ARRAY = "jax.Array"
NUMPY_ARRAY = "np.ndarray"
SCALAR = "scalar"
STRING = "string"
# Orbax's key kinds in ``_METADATA`` (checked against Orbax by the layout tests).
_SEQUENCE_KEY = 1
# What Orbax records for a node without leaves, and the value that stands for it.
_EMPTY_VALUES: dict[str, Any] = {"None": None, "Dict": {}, "List": [], "Tuple": (), "NamedTuple": ()}
_SHARDING_FILE = "_sharding"
_ARRAY_METADATAS = "array_metadatas"


@dataclasses.dataclass(frozen=True)
class StoredSharding:
    """The sharding a ``jax.Array`` was saved with, as Orbax recorded it (mesh fields for a ``NamedSharding`` only)."""

    kind: str
    axis_names: tuple[str, ...] = ()
    axis_sizes: tuple[int, ...] = ()
    axis_types: tuple[str, ...] | None = None  # None where not recorded (Orbax before 0.12)
    spec: tuple[str | tuple[str, ...] | None, ...] = ()
    device: str | None = None  # A SingleDeviceSharding's, such as "cpu:5".

    def text(self) -> str:
        """One short line: the mesh's axes and the spec, or the device (a mesh's devices are not listed)."""
        if self.kind == "NamedSharding":
            mesh = ", ".join(f"{name}={size}" for name, size in zip(self.axis_names, self.axis_sizes, strict=True))
            return f"NamedSharding(mesh=({mesh}), spec={self.spec})"
        if self.device is not None:
            return f"{self.kind}({self.device})"
        return self.kind


@dataclasses.dataclass(frozen=True)
class StoredLeaf:
    """One entry of a saved pytree, as its metadata files describe it; keys are strings, as Orbax stores them.

    A PRNG key array has the shape and key dtype of the keys, not of their key data.
    """

    keys: tuple[str, ...]
    sequence: tuple[bool, ...]
    value_type: str
    shape: tuple[int, ...] | None = None
    dtype: Any = None
    sharding: StoredSharding | None = None
    key_impl: str | None = None

    @property
    def name(self) -> str:
        """The key path joined with ``/``, as ``tinax inspect`` lists it."""
        return "/".join(self.keys)

    @property
    def empty(self) -> bool:
        """Whether this entry is a node without leaves (None or an empty container)."""
        return self.value_type in _EMPTY_VALUES


def abstract_checkpointables(path: str | os.PathLike[str], names: Sequence[str] | None = None) -> dict[str, Any]:
    """Reads the structure, shapes, dtypes and saved shardings of a checkpoint, without any device.

    Only metadata files are read and no JAX backend is started, so a job can plan
    its restore before it picks its devices. Each saved pytree comes back as
    nested dicts and lists, keyed as stored, with these leaves:

    * a ``jax.Array`` becomes a ``jax.ShapeDtypeStruct`` (a PRNG key array keeps
      its key dtype) whose sharding is the saved ``NamedSharding``'s spec over a
      ``jax.sharding.AbstractMesh`` of the saved axes; a single-device array gets none.
    * a NumPy array becomes the read-only placeholder that
      :func:`abstract_restore_target` gives one; it restores a host array.
    * a scalar becomes a zero of its Python type, a string ``""``; None and empty
      containers stay as stored.

    To restore onto a mesh of your choosing, give every abstract array a sharding over it, e.g.
    ``jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, leaf.sharding.spec))``.
    The abstract shardings themselves restore inside ``jax.set_mesh(mesh)``.

    Args:
      path: The checkpoint folder, or a ``gs://`` URL (``str`` or ``etils.epath.Path``)
        of a prefix holding Orbax's ``commit_success.txt``.
      names: The checkpointables to read; all pytree checkpointables when None
        (others, such as a data iterator, have no abstract form).

    Returns:
      A dict of abstract pytrees, by checkpointable name.

    Raises:
      TypeError: If ``path`` is not a path or ``names`` is not a sequence of ``str``.
      ValueError: If ``path`` is no complete checkpoint, or a name is missing or no pytree (some also ``KeyError``).
      FileNotFoundError: If nothing exists at ``path``; also a ``ValueError``.
      ImportError: If ``path`` is a ``gs://`` URL and gcsfs is not installed.

    Examples:
      >>> import jax.numpy as jnp
      >>> from tinax.checkpointing import abstract_checkpointables, save_checkpointables
      >>> save_checkpointables("run/abstract", {"params": {"w": jnp.zeros((2, 3))}}).result()
      >>> abstract = abstract_checkpointables("run/abstract")  # starts no JAX backend
      >>> abstract["params"]["w"].shape, str(abstract["params"]["w"].dtype)
      ((2, 3), 'float32')
    """
    source = absolute_location(path, "path", needed_by="tinax.checkpointing.abstract_checkpointables")
    wanted = None
    if names is not None:
        wanted = validation.require_sequence(
            names, "names", item_check=validation.require_str, description="a sequence of str"
        )
    saved = require_complete_checkpoint(source)
    pytrees = sorted(name for name in saved if (source / name / PYTREE_METADATA).is_file())
    if wanted is None:
        wanted = tuple(pytrees)
    unknown = sorted(name for name in wanted if name not in saved)
    if unknown:
        raise CheckpointKeyError(
            f"names lists checkpointables {unknown} that {str(source)!r} does not hold; it holds {sorted(saved)}"
        )
    opaque = sorted(name for name in wanted if name not in pytrees)
    if opaque:
        raise CheckpointKeyError(
            f"names lists checkpointables {opaque} of {str(source)!r} that are no pytrees (a data iterator's "
            f"state, for one), so they have no abstract form; its pytrees are {pytrees}"
        )
    return {name: _nest(leaves, _abstract_leaf) for name, leaves in stored_leaves_of(source, wanted).items()}


def stored_leaves(source: pathlib.Path, name: str) -> list[StoredLeaf]:
    """Every entry (empty nodes included) of pytree ``name`` of a complete checkpoint, in Orbax's order."""
    return stored_leaves_of(source, [name])[name]


def stored_leaves_of(
    source: pathlib.Path, names: Sequence[str], parsed: ParsedFiles | None = None
) -> dict[str, list[StoredLeaf]]:
    """:func:`stored_leaves` of several pytrees, their arrays opened at once in one TensorStore context.

    JSON files already in ``parsed`` are not read again; an unreadable array raises ``CheckpointKeyError``.
    """
    import tensorstore

    context = tensorstore.Context()
    started = {name: _LeafReading(source, name, context, parsed) for name in names}
    return {name: reading.finish() for name, reading in started.items()}


class _LeafReading:
    """One pytree's entries, read from its JSON metadata at once and from its arrays' Zarr metadata on finish()."""

    def __init__(self, source: pathlib.Path, name: str, context: Any, parsed: ParsedFiles | None) -> None:
        self._source = source
        self._name = name
        metadata = read_json_object(source, pathlib.PurePath(name, PYTREE_METADATA), parsed)
        tree = metadata.get("tree_metadata")
        entries = tree.values() if isinstance(tree, dict) else ()
        self._shardings = _stored_shardings(source, name, parsed)
        self._key_impls = _key_impls(source, name, parsed)
        self._leaves = []
        for entry in entries:
            key_levels = entry["key_metadata"]
            keys = tuple(str(level["key"]) for level in key_levels)
            sequence = tuple(level["key_type"] == _SEQUENCE_KEY for level in key_levels)
            value_type = str(entry["value_metadata"]["value_type"])
            self._leaves.append(StoredLeaf(keys, sequence, value_type))
        self._with_data = [
            index for index, leaf in enumerate(self._leaves) if leaf.value_type in (JAX_ARRAY, NUMPY_ARRAY, SCALAR)
        ]
        self._params = [".".join(self._leaves[index].keys) for index in self._with_data]
        layout = _Layout(source / name, metadata, context)
        self._openings = [layout.open(param) for param in self._params]

    def finish(self) -> list[StoredLeaf]:
        leaves = list(self._leaves)
        described = _Layout.describe(self._params, self._openings, self._source, self._name)
        for index, param, (shape, dtype) in zip(self._with_data, self._params, described, strict=True):
            leaf = leaves[index]
            key_impl = self._key_impls.get(param) if leaf.value_type == JAX_ARRAY else None
            if key_impl is not None:
                shape, dtype = _key_array(shape, key_impl)
            sharding = self._shardings.get(param) if leaf.value_type == JAX_ARRAY else None
            leaves[index] = dataclasses.replace(leaf, shape=shape, dtype=dtype, sharding=sharding, key_impl=key_impl)
        return leaves


def read_scalar(source: pathlib.Path, name: str, keys: tuple[str, ...]) -> Any:
    """Reads one saved scalar's value through TensorStore, with no JAX backend; None where it cannot be read."""
    try:
        metadata = read_json_object(source, pathlib.PurePath(name, PYTREE_METADATA))
        store = _Layout(source / name, metadata).open(".".join(keys)).result()
        return np.asarray(store.read().result())[()]
    except Exception:  # a missing or damaged value: the caller reports it as unknown
        return None


class _Layout:
    """Where Orbax put a pytree's arrays: one OCDBT store or a folder per array, Zarr 3 or 2."""

    def __init__(self, folder: pathlib.Path, metadata: dict[str, Any], context: Any = None) -> None:
        """Reads the layout from the pytree's ``_METADATA`` (``use_ocdbt``, ``use_zarr3``)."""
        import tensorstore

        self._folder = folder
        self._use_ocdbt = metadata.get("use_ocdbt", True) is not False
        self._driver = "zarr3" if metadata.get("use_zarr3") else "zarr"
        self._context = tensorstore.Context() if context is None else context

    def open(self, param: str) -> Any:
        import tensorstore

        if self._use_ocdbt:
            kvstore = {"driver": "ocdbt", "base": tensorstore_base(self._folder), "path": param}
        else:
            kvstore = tensorstore_base(self._folder / param)
        spec = {"driver": self._driver, "kvstore": kvstore}
        return tensorstore.open(spec, open=True, read=True, context=self._context)

    @staticmethod
    def describe(
        params: list[str], openings: list[Any], source: pathlib.Path, name: str
    ) -> list[tuple[tuple[int, ...], np.dtype[Any]]]:
        """The shape and dtype of each array, from the openings :meth:`open` started."""
        described = []
        for param, opening in zip(params, openings, strict=True):
            try:
                store = opening.result()
            except Exception as error:  # TensorStore's own error kinds: a missing or damaged array
                raise CheckpointKeyError(
                    f"path {str(source)!r} is an incomplete checkpoint: the metadata of array {param!r} of "
                    f"checkpointable {name!r} cannot be read ({error})"
                ) from error
            described.append((tuple(int(size) for size in store.shape), np.dtype(store.dtype.numpy_dtype)))
        return described


def _stored_shardings(source: pathlib.Path, name: str, parsed: ParsedFiles | None) -> dict[str, StoredSharding]:
    """The ``_sharding`` file's records, by parameter name (the file's keys are base64 of them)."""
    import base64
    import binascii

    if not (source / name / _SHARDING_FILE).is_file():
        return {}
    records = read_json_object(source, pathlib.PurePath(name, _SHARDING_FILE), parsed)
    shardings = {}
    for encoded, text in records.items():
        try:
            param = base64.urlsafe_b64decode(encoded.encode()).decode("utf-8")
            record = json.loads(text)
        except (binascii.Error, UnicodeDecodeError, ValueError, TypeError, AttributeError):
            continue  # an entry that names no parameter; Orbax would not find it either
        if isinstance(record, dict):
            shardings[param] = _sharding_of(record)
    return shardings


def _sharding_of(record: dict[str, Any]) -> StoredSharding:
    kind = str(record.get("sharding_type"))
    if kind != "NamedSharding":
        device = record.get("device_str")
        return StoredSharding(kind, device=None if device is None else str(device))
    types = record.get("axis_types")
    return StoredSharding(
        kind,
        axis_names=tuple(str(axis) for axis in record.get("axis_names", ())),
        axis_sizes=tuple(int(size) for size in record.get("shape", ())),
        axis_types=None if not types else tuple(str(kind).rsplit(".", 1)[-1] for kind in types),
        spec=tuple(_spec_entry(entry) for entry in record.get("partition_spec", ())),
    )


def _spec_entry(entry: object) -> str | tuple[str, ...] | None:
    if entry is None:
        return None
    if isinstance(entry, list):
        return tuple(str(axis) for axis in entry)
    return str(entry)


def _key_impls(source: pathlib.Path, name: str, parsed: ParsedFiles | None) -> dict[str, str]:
    """Which arrays are PRNG keys, from every process's array metadata file (a process lists the arrays it wrote)."""
    folder = source / name / _ARRAY_METADATAS
    impls: dict[str, str] = {}
    if not folder.is_dir():
        return impls
    for file in sorted(folder.iterdir()):
        content = read_json_object(source, file.relative_to(source), parsed)
        for entry in content.get("array_metadatas", []):
            array = entry.get("array_metadata") if isinstance(entry, dict) else None
            extra = array.get("ext_metadata") if isinstance(array, dict) else None
            impl = extra.get("random_key_impl") if isinstance(extra, dict) else None
            if isinstance(array, dict) and isinstance(impl, str) and impl:
                impls[str(array["param_name"])] = impl
    return impls


def _key_array(data_shape: tuple[int, ...], impl: str) -> tuple[tuple[int, ...], Any]:
    """The shape and key dtype of a PRNG key array whose key data has ``data_shape`` (traced, no backend)."""
    trailing, dtype = _key_layout(impl)
    return data_shape[: len(data_shape) - trailing], dtype


@functools.cache
def _key_layout(impl: str) -> tuple[int, Any]:
    """How many trailing axes a key of ``impl`` adds to its key data, and its key dtype; traced once per process."""
    import jax

    key = jax.eval_shape(lambda: jax.random.key(0, impl=impl))
    return len(jax.eval_shape(jax.random.key_data, key).shape), key.dtype


def _abstract_leaf(leaf: StoredLeaf) -> Any:
    import jax

    if leaf.value_type == JAX_ARRAY:
        assert leaf.shape is not None
        sharding = _abstract_sharding(leaf.sharding, len(leaf.shape))
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding)  # type: ignore[no-untyped-call]
    if leaf.value_type == NUMPY_ARRAY:
        assert leaf.shape is not None
        return np.broadcast_to(np.zeros((), dtype=leaf.dtype), leaf.shape)
    if leaf.value_type == SCALAR:
        return np.zeros((), dtype=leaf.dtype).item()
    if leaf.value_type == STRING:
        return ""
    if leaf.empty:
        return copy.copy(_EMPTY_VALUES[leaf.value_type])
    raise CheckpointKeyError(
        f"the entry {leaf.name!r} was saved by an Orbax handler of value type {leaf.value_type!r}, which has no "
        "abstract form here"
    )


def _abstract_sharding(stored: StoredSharding | None, rank: int) -> Any:
    """The saved ``NamedSharding`` over an abstract mesh of its axes; None for any other saved sharding."""
    if stored is None or stored.kind != "NamedSharding":
        return None
    from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec

    types = None if stored.axis_types is None else tuple(AxisType[kind] for kind in stored.axis_types)
    mesh = AbstractMesh(stored.axis_sizes, stored.axis_names, axis_types=types)
    # A key array's key data had one more axis (never split), which the key array drops.
    spec = stored.spec[:rank] if all(entry is None for entry in stored.spec[rank:]) else stored.spec
    return NamedSharding(mesh, PartitionSpec(*spec))  # type: ignore[no-untyped-call]


def _nest(leaves: list[StoredLeaf], convert: Any) -> Any:
    """Nested dicts and lists, keyed as stored, holding ``convert(leaf)`` for every entry."""
    if len(leaves) == 1 and not leaves[0].keys:
        return convert(leaves[0])
    root: dict[str, Any] = {}
    sequences: set[int] = set()
    for leaf in leaves:
        node = root
        for depth, key in enumerate(leaf.keys):
            if leaf.sequence[depth]:
                sequences.add(id(node))
            if depth == len(leaf.keys) - 1:
                node[key] = convert(leaf)
            else:
                node = node.setdefault(key, {})
    return _lists(root, sequences)


def _lists(node: Any, sequences: set[int]) -> Any:
    if not isinstance(node, dict) or type(node) is not dict:
        return node
    if id(node) in sequences:
        return [_lists(node[key], sequences) for key in sorted(node, key=int)]
    return {key: _lists(value, sequences) for key, value in node.items()}
