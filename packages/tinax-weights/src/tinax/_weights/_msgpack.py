"""Flax msgpack state dicts, read and written without flax.

The format is what ``flax.serialization.to_bytes`` writes for a state dict;
docs/guide/weights.md, section "The msgpack format", describes it. The writer
streams one leaf at a time and the reader (:mod:`._msgpack_read`) decodes in
pieces, so neither holds the whole file. Array extension headers are framed by
hand: ``msgpack.ExtType`` holds its payload as bytes and would copy each array
twice (measured with ``hatch run bench:weights --cases write``: up to 4x the
time, 2x the memory).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from tinax._core import dtypes, validation
from tinax._core._compat02 import MissingPathError, ValueOverflowError
from tinax._core.logs import Operation, get_logger
from tinax._weights._msgpack_read import (
    CHUNKED_ARRAY_MARKER,
    COMPLEX_EXTENSION,
    NDARRAY_EXTENSION,
    SCALAR_EXTENSION,
    read_state_tree,
    unchunk,
)
from tinax._weights._remote import (
    RemotePath,
    display,
    location_to_read,
    location_to_write,
    open_to_read,
    read_whole,
    write_atomically,
)
from tinax._weights._safetensors._header import numpy_shape_problem
from tinax._weights._state_dicts import Container, container_of, legacy_namedtuple_entries

__all__ = ["load_msgpack", "save_msgpack"]

#: Arrays larger than this are chunked, at flax's threshold, so files stay byte-identical to flax's.
_MAX_CHUNK_BYTES = 2**30
_logger = get_logger("weights")

_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1

_PYTHON_NUMBERS: tuple[type, ...] = (bool, int, float, complex)
_PYTHON_LEAVES: tuple[type, ...] = (*_PYTHON_NUMBERS, str, bytes, type(None))

_LEAF_EXPECTATION = (
    "a mapping, list, tuple or namedtuple, a numpy.ndarray or jax.Array, a NumPy scalar, "
    "or a bool, int, float, complex, str, bytes or None"
)
_DTYPE_EXPECTATION = "an array or scalar with a bool, integer, floating, complex or ml_dtypes dtype"


# Writing


def save_msgpack(path: str | os.PathLike[str], state: Mapping[str, Any], *, overwrite: bool) -> None:
    """Writes a state dict as a Flax msgpack file, atomically.

    The bytes are those of ``flax.serialization.to_bytes(state)`` (keys in the
    mapping's order), so flax reads the file, except that an array with a
    non-native byte order is written in native order (flax would misread it).
    Containers are stored as flax stores them and :func:`load_msgpack` rebuilds
    them from its target: a list or tuple as the map ``{"0": ..., "1": ...}``, a
    namedtuple (every optax state) as the map of its fields, a non-str key as
    ``str(key)``, a flax-registered dataclass (``TrainState``) as flax's
    ``to_state_dict`` gives it. Every leaf is checked before anything is written;
    the file is streamed to a temporary file that takes the name ``path`` once
    complete. A successful save logs one INFO line to the ``tinax.weights`` logger.

    Args:
      path: The file, or a ``gs://`` or ``s3://`` URL of an object (uploaded once
        complete, create-if-absent without ``overwrite``). A local file's folder
        must exist; it must not be a symbolic link.
      state: A mapping of nested mappings, lists, tuples, namedtuples or
        flax-registered dataclasses, and leaves: ``numpy.ndarray`` s, fully
        addressable ``jax.Array`` s and NumPy scalars of a bool, integer, floating,
        complex or ml_dtypes dtype, or Python ``bool``, ``int`` (64-bit range),
        ``float``, ``complex``, ``str``, ``bytes`` or ``None``. Arrays over
        2**30 bytes are chunked as flax chunks them.
      overwrite: Whether an existing file at ``path`` may be replaced.

    Raises:
      TypeError: If an argument has the wrong type, or the format cannot carry a leaf (the message names its key path).
      ValueError: If an int is outside 64 bits (also OverflowError), the state is malformed, or ``path`` is a symlink.
      IsADirectoryError: If ``path`` is, or becomes before the rename, a directory (also a ValueError).
      ImportError: If ``path`` is a ``gs://`` or ``s3://`` URL and its client (gcsfs or s3fs) is not installed.
      FileExistsError: If ``path`` exists and ``overwrite`` is False.
      FileNotFoundError: If the folder of ``path`` does not exist, or no file can exist at ``path`` (also a ValueError).

    Examples:
      >>> import numpy as np
      >>> from tinax.weights import save_msgpack
      >>> save_msgpack("state.msgpack", {"params": {"w": np.ones(2, np.float32)}, "step": 3}, overwrite=False)
      >>> save_msgpack("state.msgpack", {"step": 4}, overwrite=False)
      Traceback (most recent call last):
      FileExistsError: ...
    """
    destination = location_to_write(path, "path")
    validation.require_bool(overwrite, "overwrite")
    tree = _checked_container(_root_container(state, "state"), state, "state", frozenset())
    operation = Operation(_logger, "saved", "a state dict to", display(destination))
    with write_atomically(destination, overwrite=overwrite, needed_by="tinax.weights.save_msgpack") as handle:
        _write_state(handle, tree, max_chunk_bytes=_MAX_CHUNK_BYTES)
        written = handle.tell()
    operation.done(nbytes=written)


def _root_container(value: object, where: str) -> Container:
    """How a state or target, which must be a mapping, is stored as a map."""
    container = container_of(value) if isinstance(value, Mapping) else None
    if container is None:
        validation.fail_type(where, "a mapping", value)
    return container


def _checked_container(container: Container, value: object, where: str, ancestors: frozenset[int]) -> dict[str, Any]:
    """Checks a state and returns flax's state dict of it: plain dicts with str keys, and leaves."""
    if id(value) in ancestors:
        raise ValueError(f"{where} contains itself; a state dict must be a tree")
    ancestors = ancestors | {id(value)}
    checked: dict[str, Any] = {}
    labels: dict[str, str] = {}
    for key, suffix, item in container.entries:
        validation.require_utf8(key, f"keys of {where}")
        if key == CHUNKED_ARRAY_MARKER:
            raise ValueError(
                f"keys of {where} must not be {CHUNKED_ARRAY_MARKER!r}, which flax reads as the mark of a chunked array"
            )
        _check_distinct(key, suffix, where, labels)
        item_where = f"{where}{suffix}"
        inner = container_of(item)
        if inner is not None:
            checked[key] = _checked_container(inner, item, item_where, ancestors)
        else:
            _check_leaf(item, item_where)
            checked[key] = item
    return checked


def _check_distinct(key: str, suffix: str, where: str, labels: dict[str, str]) -> None:
    """Refuses a key whose text an earlier key of the container has; ``labels`` holds those seen."""
    if key in labels:
        raise ValueError(
            f"keys of {where} must have distinct text, since the file stores each key as str(key): "
            f"{labels[key]} and {suffix} are both {key!r}"
        )
    labels[key] = suffix


def _check_leaf(value: object, where: str) -> None:
    if _is_jax_array(value) or isinstance(value, (np.ndarray, np.generic)):
        # Subclasses carry state (a mask, a matrix's semantics) that the bytes would silently drop.
        if isinstance(value, np.ndarray) and type(value) not in (np.ndarray, np.memmap):
            validation.fail_type(where, "a plain numpy.ndarray (or numpy.memmap), not a subclass", value)
        _require_carried_dtype(value, where)
        return
    # Exact types only: msgpack (and flax) cannot write subclasses such as IntEnum.
    if type(value) is int and not _INT_MIN <= value <= _INT_MAX:
        raise ValueOverflowError(  # The OverflowError msgpack raised in tinax 0.2.
            validation.expectation_message(where, "an int in [-2**63, 2**64 - 1], the range msgpack can store", value)
        )
    if type(value) is str:
        validation.require_utf8(value, where)
    if type(value) in _PYTHON_LEAVES:
        return
    validation.fail_type(where, _LEAF_EXPECTATION, value)


def _require_carried_dtype(value: Any, where: str) -> np.dtype[Any]:
    """Returns the native-order dtype of an array-like or scalar, or raises TypeError if the format cannot carry it."""
    try:
        dtype = dtypes.array_dtype(np.dtype(value.dtype))
    # Extended dtypes (PRNG keys) have none; malformed descriptions make NumPy raise even SyntaxError.
    except (TypeError, ValueError, SyntaxError, OverflowError, RecursionError):
        dtype = None
    if dtype is None:
        validation.fail_type(where, _DTYPE_EXPECTATION, value)
    return dtype


def _is_jax_array(value: object) -> bool:
    # Without jax imported nothing can be a jax.Array, and this module must not import it.
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(value, jax.Array)


def _write_state(handle: BinaryIO, state: dict[str, Any], *, max_chunk_bytes: int) -> None:
    """Streams an already checked state dict to ``handle`` in flax's encoding."""
    import msgpack

    packer = msgpack.Packer(use_bin_type=True, strict_types=True, autoreset=True)
    _write_mapping(handle, packer, state, max_chunk_bytes)


def _write_mapping(handle: BinaryIO, packer: Any, mapping: dict[str, Any], max_chunk_bytes: int) -> None:
    import msgpack

    handle.write(packer.pack_map_header(len(mapping)))
    for key, value in mapping.items():
        handle.write(packer.pack(key))
        if isinstance(value, dict):
            _write_mapping(handle, packer, value, max_chunk_bytes)
        elif isinstance(value, np.ndarray):
            _write_array(handle, packer, value, max_chunk_bytes)
        elif _is_jax_array(value):
            # One array's host copy at a time, where flax converted them all first.
            _write_array(handle, packer, np.asarray(value), max_chunk_bytes)
        elif isinstance(value, np.generic):
            _write_ndarray_extension(handle, packer, np.asarray(value), SCALAR_EXTENSION)
        elif type(value) is complex:
            handle.write(packer.pack(msgpack.ExtType(COMPLEX_EXTENSION, packer.pack([value.real, value.imag]))))
        else:
            handle.write(packer.pack(value))


def _write_array(handle: BinaryIO, packer: Any, array: np.ndarray[Any, Any], max_chunk_bytes: int) -> None:
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    if array.size * array.dtype.itemsize <= max_chunk_bytes:
        _write_ndarray_extension(handle, packer, array, NDARRAY_EXTENSION)
        return
    chunk_length = max(1, max_chunk_bytes // array.dtype.itemsize)
    flat = array.reshape(-1)
    starts = range(0, flat.size, chunk_length)
    handle.write(packer.pack_map_header(3))
    for item in (CHUNKED_ARRAY_MARKER, True, "shape", {str(axis): extent for axis, extent in enumerate(array.shape)}):
        handle.write(packer.pack(item))
    handle.write(packer.pack("chunks"))
    handle.write(packer.pack_map_header(len(starts)))
    for index, start in enumerate(starts):
        handle.write(packer.pack(str(index)))
        _write_ndarray_extension(handle, packer, flat[start : start + chunk_length], NDARRAY_EXTENSION)


def _write_ndarray_extension(handle: BinaryIO, packer: Any, array: np.ndarray[Any, Any], code: int) -> None:
    contiguous = array if array.flags.c_contiguous else np.array(array, order="C")
    header = b"\x93" + packer.pack(list(contiguous.shape)) + packer.pack(contiguous.dtype.name)
    header += _sized_header((0xC4, 0xC5, 0xC6), contiguous.nbytes, "bin")
    handle.write(_extension_header(code, len(header) + contiguous.nbytes))
    handle.write(header)
    if contiguous.nbytes:
        handle.write(contiguous.reshape(-1).view(np.uint8).data)


def _extension_header(code: int, length: int) -> bytes:
    """Encodes a msgpack ext header as msgpack's packer does (fixext where it can)."""
    fixed = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}
    if length in fixed:
        return bytes((fixed[length], code))
    return _sized_header((0xC7, 0xC8, 0xC9), length, "extension") + bytes((code,))


def _sized_header(markers: tuple[int, int, int], length: int, kind: str) -> bytes:
    """The marker of the narrowest of the 8, 16 and 32-bit forms, then ``length`` big-endian."""
    for marker, width in zip(markers, (1, 2, 4), strict=True):
        if length < 1 << (8 * width):
            return bytes((marker,)) + length.to_bytes(width, "big")
    raise ValueError(f"a msgpack {kind} holds at most 2**32 - 1 bytes, got {length}")


# Loading


@dataclass(frozen=True)
class _ExpectedLeaf:
    """Where ``target`` holds a leaf: any array or number of ``shape``, or for a str, bytes or None exactly ``kind``.

    Any type and dtype is accepted, as flax does: a resumed ``TrainState.step`` is an int32 array, a fresh one an int.
    """

    shape: tuple[int, ...] = ()
    target: str = ""  # How messages name target's leaf.
    kind: type | None = None

    def expected(self) -> str:
        if self.kind is None:
            return f"an array or number of shape {self.shape} (target holds {self.target})"
        return "None" if self.kind is type(None) else f"a Python {self.kind.__name__}"

    def accepts(self, value: object) -> bool:
        if self.kind is not None:
            return type(value) is self.kind
        if isinstance(value, (np.ndarray, np.generic)):
            return value.shape == self.shape
        return type(value) in _PYTHON_NUMBERS and self.shape == ()


@dataclass(frozen=True)
class _ExpectedTree:
    """Where ``target`` holds a container: these children, by their keys in the file."""

    children: dict[str, Any]  # _ExpectedTree or _ExpectedLeaf
    labels: dict[str, str]  # How messages name each child after its container.
    container: Container
    kind: str  # The type name of target's container.

    def describe(self) -> str:
        # The file holds every container as a map; lists, tuples and namedtuples by their items.
        return f"a map of the items of a {self.kind}" if self.container.exact else "a mapping"


@dataclass
class _Mismatches:
    missing: list[str]
    leaves: list[str]

    def count(self) -> int:
        return len(self.missing) + len(self.leaves)


def load_msgpack(path: str | os.PathLike[str], target: Mapping[str, Any], *, max_bytes: int) -> Any:
    """Reads a Flax msgpack state dict into the structure of ``target``.

    Like ``flax.serialization.from_bytes`` for a state dict, without flax. The
    file is compared with ``target`` key by key and leaf by leaf, and every
    difference is reported at once. Where ``target`` holds an array or a number,
    the file must hold an array or number of the same shape, of any type and
    dtype (an int32 array loads where ``target`` holds the int ``0``, as in
    flax); a str, bytes or None needs exactly that type. Values are never
    compared. Keys a mapping of ``target`` lacks are dropped, as flax drops them;
    a list, tuple or namedtuple must have exactly the file's items. The weights
    guide's section "How a file is matched against its target" gives the rules.
    A successful load logs one INFO line to the ``tinax.weights`` logger.

    Args:
      path: The msgpack file, or a ``gs://`` or ``s3://`` URL of an object,
        fetched whole once its size is known to be within ``max_bytes``.
      target: The expected structure: a mapping of nested mappings, lists,
        tuples, namedtuples or flax-registered dataclasses, and leaves: arrays
        (anything with ``shape`` and ``dtype``), NumPy scalars, or Python bool,
        int, float, complex, str, bytes or None. A non-str key is looked up as
        ``str(key)``.
      max_bytes: The largest file size to accept. Loading holds the loaded values
        plus about twice the largest array (and the whole file under msgpack's
        pure-Python fallback); a crafted file cannot make the decoder allocate
        more than a small multiple of the file size.

    Returns:
      The loaded state with the structure of ``target`` (plain dicts in its key
      order, its list, tuple and namedtuple types, flax-registered types rebuilt
      by ``from_state_dict``), with the file's leaves as the file holds them:
      fresh, writable, C-contiguous NumPy arrays (also where ``target`` holds a
      ``jax.Array``), NumPy scalars and Python values.

    Raises:
      TypeError: If an argument has the wrong type, or ``target`` holds a leaf or array-like the format cannot carry.
      ValueError: If an argument is bad or the file too big, malformed or unlike ``target`` (some also msgpack's type).
      ImportError: If ``path`` is a ``gs://`` or ``s3://`` URL and its client (gcsfs or s3fs) is not installed.
      FileNotFoundError: If no file exists at ``path`` (for a directory or an impossible path, also a ValueError).

    Examples:
      >>> import numpy as np
      >>> from tinax.weights import load_msgpack, save_msgpack
      >>> save_msgpack("state.msgpack", {"params": {"w": np.ones(2, np.float32)}, "step": 3}, overwrite=False)
      >>> target = {"params": {"w": np.zeros(2, np.float32)}, "step": 0}  # structure, shapes and types only
      >>> load_msgpack("state.msgpack", target, max_bytes=1 << 20)
      {'params': {'w': array([1., 1.], dtype=float32)}, 'step': 3}
    """
    source = location_to_read(path, "path")
    if not isinstance(target, Mapping):
        validation.fail_type("target", "a mapping", target)
    limit = validation.require_positive_int(max_bytes, "max_bytes")
    operation = Operation(_logger, "loaded", "a state dict from", display(source))
    # tinax 0.2 refused a NumPy integer max_bytes with TypeError, so a later refusal of such a call is
    # both types; a missing file is reported before the target's leaves are checked, as 0.2 did.
    with validation.reported_as_both(validation.is_non_python_int(max_bytes)):
        with open_to_read(
            source, kind="msgpack file", needed_by="tinax.weights.load_msgpack", directory_error=MissingPathError
        ) as (handle, size):
            expected = _expected_tree(_root_container(target, "target"), target, "target", frozenset())
            if size > limit:
                raise ValueError(
                    f"{str(source)!r} holds {size} bytes, more than max_bytes={limit}; raise max_bytes to load it"
                )
            if isinstance(source, RemotePath):
                # The decoder needs every byte: fetched in a few large GETs, not its many small reads.
                handle = read_whole(handle, size, source=source.url, what="the state dict's bytes")
            loaded = read_state_tree(handle, size, source)
        mismatches = _Mismatches([], [])
        restored = _restore_tree(expected, loaded, "", mismatches)
        problems = mismatches.leaves
        if mismatches.missing:
            problems = [f"missing from the file: {', '.join(mismatches.missing)}", *problems]
        if problems:
            listed = "\n".join(f"  - {problem}" for problem in problems)
            raise ValueError(f"{str(source)!r} does not match target:\n{listed}")
    operation.done(nbytes=size)
    return restored


def _expected_tree(container: Container, value: object, where: str, ancestors: frozenset[int]) -> _ExpectedTree:
    """Checks ``target`` and reduces it to keys, leaf expectations and containers to rebuild."""
    if id(value) in ancestors:
        raise ValueError(f"{where} contains itself; a target must be a tree")
    ancestors = ancestors | {id(value)}
    children: dict[str, Any] = {}
    labels: dict[str, str] = {}
    for key, suffix, item in container.entries:
        _check_distinct(key, suffix, where, labels)
        item_where = f"{where}{suffix}"
        inner = container_of(item)
        if inner is not None:
            children[key] = _expected_tree(inner, item, item_where, ancestors)
        else:
            children[key] = _target_leaf(item, item_where)
    return _ExpectedTree(children, labels, container, type(value).__name__)


def _target_leaf(value: object, where: str) -> _ExpectedLeaf:
    expected = f"{_LEAF_EXPECTATION}, or an array-like with shape and dtype"
    if isinstance(value, np.generic):
        return _ExpectedLeaf((), f"a NumPy {_require_carried_dtype(value, where)} scalar")
    if type(value) in _PYTHON_NUMBERS:
        return _ExpectedLeaf((), f"a Python {type(value).__name__}")
    if type(value) in _PYTHON_LEAVES:
        return _ExpectedLeaf(kind=type(value))
    shape = getattr(value, "shape", None)
    raw_dtype = getattr(value, "dtype", None)
    if isinstance(value, (str, bytes, Mapping)) or shape is None or raw_dtype is None:
        validation.fail_type(where, expected, value)
    dtype = _require_carried_dtype(value, where)
    # A str is a sequence, and "12" would read as the shape (1, 2).
    extents = validation.require_sequence(
        shape, f"{where}.shape", item_check=validation.require_non_negative_int, description="a sequence of ints"
    )
    problem = numpy_shape_problem(extents, dtype.itemsize)
    if problem is not None:
        raise ValueError(f"{where}.shape is not a shape of any array: {problem}")
    return _ExpectedLeaf(extents, f"a {dtype}[{', '.join(map(str, extents))}] array")


def _restore_tree(expected: _ExpectedTree, loaded: dict[Any, Any], where: str, mismatches: _Mismatches) -> Any:
    """Rebuilds one container of ``target`` from the file's map; None once anything in it mismatches."""
    if expected.container.fields is not None:
        loaded = legacy_namedtuple_entries(loaded, expected.container.fields)
    problems = mismatches.count()
    restored: dict[str, Any] = {}
    for key, child in expected.children.items():
        child_where = f"{where}{expected.labels[key]}"
        if key not in loaded:
            mismatches.missing.append(child_where)
            continue
        # Popping releases each loaded value (a chunked array's pieces, say) once it is restored.
        restored[key] = _restore_value(child, loaded.pop(key), child_where, mismatches)
    if expected.container.exact and loaded:
        # flax refuses a list, tuple or namedtuple whose length or fields differ from the target's.
        extra = ", ".join(repr(key) for key in loaded)
        mismatches.leaves.append(f"{where or 'the file'}: holds entries {extra} that target's container lacks")
    # Otherwise what is left is what a mapping of target does not ask for: flax drops it, and so does this.
    if mismatches.count() != problems:
        return None
    return expected.container.rebuild(restored)


def _restore_value(expected: _ExpectedTree | _ExpectedLeaf, value: object, where: str, mismatches: _Mismatches) -> Any:
    chunked = isinstance(value, dict) and CHUNKED_ARRAY_MARKER in value
    if isinstance(expected, _ExpectedTree):
        if isinstance(value, dict) and not chunked:
            return _restore_tree(expected, value, where, mismatches)
        mismatches.leaves.append(f"{where}: expected {expected.describe()}, got {_describe_loaded(value)}")
        return None
    if chunked:
        try:
            value = unchunk(value)  # type: ignore[arg-type]
        except ValueError as error:
            mismatches.leaves.append(f"{where}: a malformed chunked array ({error})")
            return None
    if not expected.accepts(value):
        mismatches.leaves.append(f"{where}: expected {expected.expected()}, got {_describe_loaded(value)}")
        return None
    return value


def _describe_loaded(value: object) -> str:
    if isinstance(value, dict):
        return "a chunked array" if CHUNKED_ARRAY_MARKER in value else "a mapping"
    return validation.describe(value)
