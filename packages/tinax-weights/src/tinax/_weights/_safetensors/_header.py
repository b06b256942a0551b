"""The safetensors header: its description classes, a complete validator and an encoder.

docs/guide/weights.md, section "The safetensors format", describes the layout
and what a valid header is. Upstream's reader does not serve here: it checks a
header only as far as it maps the file, its one error type names neither file
nor tensor, and it has no float8 loads into NumPy, byte budgets or bounded
header-only reads.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import threading
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, Protocol

import numpy as np

from tinax._core import validation
from tinax._weights._compat02 import malformed_safetensors
from tinax._weights._safetensors import _dtypes
from tinax._weights._safetensors._dtypes import SafetensorsDtype

__all__ = [
    "LENGTH_FIELD_BYTES",
    "MAX_HEADER_BYTES",
    "METADATA_KEY",
    "ParsedHeader",
    "ReadableFile",
    "SafetensorsInfo",
    "TensorInfo",
    "distinct_keys",
    "encode_header",
    "forget_validated_headers",
    "metadata_nbytes",
    "numpy_shape_problem",
    "read_exactly",
    "read_header",
]

#: Size of the little-endian header-length field at the start of every file.
LENGTH_FIELD_BYTES = 8
#: Largest header accepted, the same bound as the upstream reader's.
MAX_HEADER_BYTES = 100_000_000
#: The reserved header key that holds the str-to-str metadata.
METADATA_KEY = "__metadata__"

_TENSOR_KEYS = ("dtype", "shape", "data_offsets")
_INT_TYPE = {int}
# Longer shapes take the step-by-step path, whose size check stays cheap for any rank.
_MAX_PLAIN_RANK = 16
_HEADER_ALIGNMENT = 8
# NumPy's limits: 64 dimensions (NPY_MAXDIMS); every extent, and the byte count
# of the non-zero extents (checked even beside a 0), within intp.
_MAX_NUMPY_RANK = 64
_MAX_NUMPY_INDEX = int(np.iinfo(np.intp).max)

_Fail = Callable[[str], NoReturn]
# The tensors, the metadata and its encoded size.
_Validated = tuple[dict[str, "TensorInfo"], dict[str, str], int]

# Most headers fit in the first read; larger ones take a second.
_FIRST_READ_BYTES = 64 * 1024
# Headers remembered for repeated reads; the size cap is a few thousand tensors, about a megabyte of objects.
_REMEMBERED_HEADERS = 4
_REMEMBERED_HEADER_MAX_BYTES = 256 * 1024
_remembered: collections.OrderedDict[tuple[int, bytes], _Validated] = collections.OrderedDict()
_remembered_lock = threading.Lock()


class ReadableFile(Protocol):
    """What the readers use of an open file: a local ``io.FileIO`` or an object's file of ranged GETs."""

    def seek(self, offset: int, whence: int = 0, /) -> int: ...

    def readinto(self, buffer: memoryview, /) -> int | None: ...

    def read(self, size: int = -1, /) -> bytes | None: ...

    def tell(self) -> int: ...


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """What a safetensors header says about one tensor.

    Two descriptions are equal when their shapes and dtypes are: ``data_offsets``
    does not take part, so a description read from a file equals one written by hand.

    Attributes:
      shape: The extents, a tuple of non-negative ints (any sequence of ints is accepted).
      dtype: The safetensors dtype name (``"F32"``, ``"BF16"``, the float8 names
        such as ``"F8_E4M3"``, the packed ``"F4"``, ...), given as a name or as a
        NumPy dtype or scalar type that has one. Stored as a ``SafetensorsDtype``:
        a ``str`` equal to the name (as in tinax 0.2) that also compares equal to
        the exact NumPy or ml_dtypes type, which :attr:`numpy_dtype` gives.
      data_offsets: ``(start, end)`` byte offsets of the data relative to the
        payload start, or None for a description not read from a file.

    Raises:
      TypeError: If ``shape`` is not a sequence of ints, or ``dtype`` is not a safetensors dtype name or NumPy type.
      ValueError: If an extent is negative, ``dtype`` is unknown, packed elements split a byte, or the offsets are bad.
    """

    shape: tuple[int, ...]
    # Typed as tinax 0.2 typed it; the value is always a SafetensorsDtype.
    dtype: str
    data_offsets: tuple[int, int] | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "shape",
            validation.require_sequence(
                self.shape, "shape", item_check=validation.require_non_negative_int, description="a sequence of ints"
            ),
        )
        dtype = _require_tensor_dtype(self.dtype)
        object.__setattr__(self, "dtype", dtype)
        if math.prod(self.shape) * dtype.bits % 8:
            expected = f"a shape whose {dtype} elements fill whole bytes ({dtype.bits} bits each)"
            validation.fail_value("shape", expected, self.shape)
        if self.data_offsets is not None:
            offsets = validation.require_sequence(
                self.data_offsets,
                "data_offsets",
                item_check=validation.require_non_negative_int,
                description="a (start, end) pair of ints",
            )
            if len(offsets) != 2 or offsets[0] > offsets[1]:
                validation.fail_value("data_offsets", "a (start, end) pair with start <= end", self.data_offsets)
            object.__setattr__(self, "data_offsets", (offsets[0], offsets[1]))

    @property
    def nbytes(self) -> int:
        """The size of the tensor's data in bytes."""
        return _dtypes.tensor_nbytes(self.dtype, self.shape)

    @property
    def numpy_dtype(self) -> np.dtype[Any] | None:
        """The exact NumPy or ml_dtypes type of the elements, native byte order; None for packed types."""
        return _dtypes.SAFETENSORS_DTYPES.get(self.dtype)


_DTYPE_EXPECTATION = "a safetensors dtype name (a str) or a NumPy dtype that has one"


def _require_tensor_dtype(value: object) -> SafetensorsDtype:
    if isinstance(value, SafetensorsDtype):
        return value
    if isinstance(value, str):
        return _dtypes.safetensors_dtype(value)
    # numpy.dtype reads None as float64 and True as bool: neither is meant here.
    if value is None or isinstance(value, bool):
        validation.fail_type("dtype", _DTYPE_EXPECTATION, value)
    try:
        dtype = np.dtype(value)  # type: ignore[call-overload]
    # A malformed description makes NumPy raise ValueError or even SyntaxError.
    except (TypeError, ValueError, SyntaxError, OverflowError, RecursionError):
        validation.fail_type("dtype", _DTYPE_EXPECTATION, value)
    name = _dtypes.dtype_name(dtype)
    if name is None:
        validation.fail_type("dtype", _DTYPE_EXPECTATION, value)
    return _dtypes.KNOWN_NAMES[name]


@dataclasses.dataclass(frozen=True)
class SafetensorsInfo:
    """The validated header of a safetensors file.

    Attributes:
      tensors: Name to :class:`TensorInfo`, sorted by name; any mapping is
        accepted and stored as a new dict.
      metadata: The ``__metadata__`` mapping of str to str, sorted by name (as in
        tinax 0.2), empty when the file has none; any such mapping (or None) is
        accepted and stored as a new dict.

    Raises:
      TypeError: If ``tensors`` is not a mapping of str to :class:`TensorInfo` or ``metadata`` not of str to str.
    """

    tensors: Mapping[str, TensorInfo]
    metadata: Mapping[str, str]

    def __post_init__(self) -> None:
        tensors = validation.require_str_mapping(self.tensors, "tensors")
        for name, info in tensors.items():
            validation.require_instance(info, f"tensors[{name!r}]", TensorInfo, "a TensorInfo")
            if name == METADATA_KEY:
                # The header keeps this key for the metadata, so no file can hold such a tensor.
                validation.fail_value("tensors", f"tensor names other than {METADATA_KEY!r}", name)
        metadata = {} if self.metadata is None else validation.require_str_to_str_mapping(self.metadata, "metadata")
        object.__setattr__(self, "tensors", dict(tensors))
        object.__setattr__(self, "metadata", _sorted_by_name(metadata))

    @classmethod
    def _validated(cls, tensors: dict[str, TensorInfo], metadata: dict[str, str]) -> SafetensorsInfo:
        # From a just-validated header: skips __post_init__'s pass over every tensor on each load.
        info = object.__new__(cls)
        object.__setattr__(info, "tensors", tensors)
        object.__setattr__(info, "metadata", metadata)
        return info

    @property
    def nbytes(self) -> int:
        """The total size of all tensors' data in bytes."""
        return sum(info.nbytes for info in self.tensors.values())

    @property
    def total_bytes(self) -> int:
        """The total size of all tensors' data in bytes (the same as :attr:`nbytes`)."""
        return self.nbytes


@dataclasses.dataclass(frozen=True)
class ParsedHeader:
    """A validated header and where the payload starts in the file."""

    info: SafetensorsInfo
    payload_start: int


def distinct_keys(repeats: list[tuple[str, list[Any]]]) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """A ``json.loads`` ``object_pairs_hook`` that adds to ``repeats`` each key an object repeats with other values.

    json keeps the last silently, which could load the wrong tensor; the same value twice is accepted, as upstream does.
    Each entry is the key and its values in file order.
    """

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result = dict(pairs)
        if len(result) != len(pairs):
            repeated = next((key for key, value in pairs if value != result[key]), None)
            if repeated is not None:
                repeats.append((repeated, [item for name, item in pairs if name == repeated]))
        return result

    return hook


def _refuse_constant(constant: str) -> NoReturn:
    raise ValueError(f"{constant} is not valid JSON")


def _sorted_by_name(metadata: Mapping[str, str]) -> dict[str, str]:
    return {key: metadata[key] for key in sorted(metadata)}


def metadata_nbytes(metadata: Mapping[str, str]) -> int:
    """The compact UTF-8 JSON size of metadata: what :func:`encode_header` writes, ``max_metadata_bytes`` limits."""
    return len(json.dumps(dict(metadata), ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))


def read_exactly(handle: ReadableFile, buffer: memoryview, offset: int) -> int:
    """Fills ``buffer`` from byte ``offset`` of ``handle``; returns the count, short only if the file ended."""
    handle.seek(offset)
    filled = 0
    total = buffer.nbytes
    while filled < total:
        count = handle.readinto(buffer[filled:])
        if not count:
            break
        filled += count
    return filled


def read_header(
    handle: ReadableFile, *, file_size: int, source: str, max_metadata_bytes: int, first_read_bytes: int | None = None
) -> ParsedHeader:
    """Reads and completely validates the header of an open safetensors file.

    Results for the last few small headers are remembered by exact bytes and file size; callers get fresh mappings.
    """

    def fail(problem: str) -> NoReturn:
        raise malformed_safetensors(f"{source} is not a valid safetensors file: {problem}")

    header_bytes = _read_header_bytes(handle, file_size, fail, first_read_bytes or _FIRST_READ_BYTES)
    payload_start = LENGTH_FIELD_BYTES + len(header_bytes)
    key = (file_size, header_bytes)
    cacheable = len(header_bytes) <= _REMEMBERED_HEADER_MAX_BYTES
    with _remembered_lock:
        validated = _remembered.get(key) if cacheable else None
        if validated is not None:
            _remembered.move_to_end(key)
    if validated is None:
        validated = _validate(header_bytes, file_size - payload_start, fail)
        if cacheable:
            with _remembered_lock:
                _remembered[key] = validated
                while len(_remembered) > _REMEMBERED_HEADERS:
                    _remembered.popitem(last=False)
    tensors, metadata, metadata_size = validated
    if metadata and metadata_size > max_metadata_bytes:
        raise ValueError(
            f"the {METADATA_KEY} of {source} encodes to {metadata_size} bytes, more than "
            f"max_metadata_bytes={max_metadata_bytes}; pass a larger max_metadata_bytes to read it"
        )
    return ParsedHeader(SafetensorsInfo._validated(dict(tensors), dict(metadata)), payload_start)


def forget_validated_headers() -> None:
    """Drops every remembered header validation, so the next read validates in full."""
    with _remembered_lock:
        _remembered.clear()


def _read_header_bytes(handle: ReadableFile, file_size: int, fail: _Fail, first_read_bytes: int) -> bytes:
    if file_size < LENGTH_FIELD_BYTES:
        fail(f"it has {file_size} bytes, fewer than the {LENGTH_FIELD_BYTES}-byte header length field")
    # One read covers the length field and, usually, the whole header.
    first = bytearray(min(file_size, first_read_bytes))
    received = read_exactly(handle, memoryview(first), 0)
    if received < LENGTH_FIELD_BYTES:
        fail("the file ended inside the header length field (it changed while being read)")
    header_length = int.from_bytes(first[:LENGTH_FIELD_BYTES], "little")
    limit = min(MAX_HEADER_BYTES, file_size - LENGTH_FIELD_BYTES)
    if header_length < 2 or header_length > limit:
        reason = (
            f"the cap of {MAX_HEADER_BYTES} bytes"
            if limit == MAX_HEADER_BYTES
            else f"the {file_size - LENGTH_FIELD_BYTES} bytes that follow the length field"
        )
        fail(f"the header length field says {header_length} bytes; it must be at least 2 and at most {reason}")
    header_end = LENGTH_FIELD_BYTES + header_length
    if header_end <= received:
        return bytes(first[LENGTH_FIELD_BYTES:header_end])
    rest = bytearray(header_end - received)
    if read_exactly(handle, memoryview(rest), received) != len(rest):
        fail("the file ended inside the header (it changed while being read)")
    return bytes(first[LENGTH_FIELD_BYTES:received]) + rest


def _validate(header_bytes: bytes, payload_size: int, fail: _Fail) -> _Validated:
    header = _parse_json(header_bytes, fail)
    if not isinstance(header, dict):
        fail(f"the header must be a JSON object, got a JSON {_json_kind(header)}")
    metadata = _check_metadata(header.pop(METADATA_KEY, None), fail)

    # Headers of thousands of tensors are parsed on every load: a plainly valid entry passes one
    # compound test; anything else takes the step-by-step checks, which name the exact problem.
    dtypes = _dtypes.SAFETENSORS_DTYPES
    names = _dtypes.KNOWN_NAMES
    new_info = object.__new__
    spans: list[tuple[int, int, int, str, TensorInfo]] = []
    for index, (name, entry) in enumerate(header.items()):
        try:
            dtype_text = entry["dtype"]
            dtype = dtypes[dtype_text]
            shape = entry["shape"]
            start, end = entry["data_offsets"]
            plainly_valid = (
                len(entry) == 3
                and name.isascii()
                and type(shape) is list
                and len(shape) <= _MAX_PLAIN_RANK
                and {*map(type, shape)} <= _INT_TYPE
                and (not shape or min(shape) >= 0)
                and type(start) is int
                and type(end) is int
                and 0 <= start <= end <= payload_size
                and end - start == math.prod(shape) * dtype.itemsize
                # An empty span (an extent of 0) bounds no extent, and NumPy still limits the others.
                and (end != start or numpy_shape_problem(shape, dtype.itemsize) is None)
            )
        except (TypeError, KeyError, ValueError):
            plainly_valid = False
        if plainly_valid:
            # __post_init__'s checks hold already; running them for thousands of tensors is measurable.
            info = new_info(TensorInfo)
            vars(info).update(shape=tuple(shape), dtype=names[dtype_text], data_offsets=(start, end))
        else:
            checked_shape, checked_dtype, (start, end) = _check_tensor(name, entry, payload_size, fail)
            info = TensorInfo(checked_shape, checked_dtype, (start, end))
        spans.append((start, end, index, name, info))

    # Contiguity: by offset (ties in header order), each tensor starts where the last ended; the last ends the file.
    spans.sort()
    by_offset: dict[str, TensorInfo] = {}
    cursor = 0
    previous: str | None = None
    for start, end, _, name, info in spans:
        if start != cursor:
            if start < cursor:
                fail(f"tensor {name!r} (data_offsets [{start}, {end}]) overlaps {previous!r}, which ends at {cursor}")
            after = f"after tensor {previous!r}" if previous is not None else "at the start of the payload"
            fail(f"tensor {name!r} starts at {start}, leaving bytes {cursor} to {start} {after} unused")
        by_offset[name] = info
        cursor = end
        previous = name
    if cursor != payload_size:
        last = (
            f"the last tensor ({previous!r}) ends" if previous is not None else "the header describes no data and ends"
        )
        fail(f"{last} at payload byte {cursor}, but the payload has {payload_size} bytes")
    # Described by name, as the upstream reader lists them; the metadata too, as tinax 0.2 gave it.
    tensors = {name: by_offset[name] for name in sorted(by_offset)}
    return tensors, _sorted_by_name(metadata), metadata_nbytes(metadata)


def _parse_json(header_bytes: bytes, fail: _Fail) -> Any:
    try:
        text = header_bytes.decode("utf-8")
    except UnicodeDecodeError as error:
        fail(f"the header is not UTF-8 ({error})")
    repeats: list[tuple[str, list[Any]]] = []
    try:
        document = json.loads(text, object_pairs_hook=distinct_keys(repeats), parse_constant=_refuse_constant)
    except RecursionError:
        fail("the header JSON nests too deeply")
    except ValueError as error:
        fail(f"the header is not valid JSON ({error})")
    if repeats:
        fail(f"the header JSON repeats the key {repeats[0][0]!r} in one object")
    return document


def _check_metadata(value: object, fail: _Fail) -> dict[str, str]:
    if value is None:  # The upstream reader accepts an explicit null as "no metadata".
        return {}
    if not isinstance(value, dict):
        fail(f"{METADATA_KEY} must be a JSON object of str to str, got a JSON {_json_kind(value)}")
    for key, item in value.items():
        if not isinstance(item, str):
            fail(f"{METADATA_KEY}[{key!r}] must be a str, got {validation.describe(item)}")
        for text in (key, item):
            problem = validation.utf8_problem(text)
            if problem is not None:
                fail(f"{METADATA_KEY} entry {key!r} {problem}")
    return value


def _check_tensor(
    name: str, entry: object, payload_size: int, fail: _Fail
) -> tuple[tuple[int, ...], SafetensorsDtype, tuple[int, int]]:
    problem = validation.utf8_problem(name)
    if problem is not None:
        fail(f"the tensor name {name!r} {problem}")

    def fail_tensor(text: str) -> NoReturn:
        fail(f"tensor {name!r}: {text}")

    fields = _tensor_fields(entry, fail_tensor)
    dtype_text = fields["dtype"]
    if type(dtype_text) is not str:
        fail_tensor(f"dtype must be a str, got {validation.describe(dtype_text)}")
    dtype = _dtypes.KNOWN_NAMES.get(dtype_text)
    if dtype is None:
        fail_tensor(f"unknown dtype {dtype_text!r}; known: {', '.join(_dtypes.KNOWN_NAMES)}")
    shape = fields["shape"]
    element_count = _capped_element_count(shape, payload_size * 2, fail_tensor)

    offsets = fields["data_offsets"]
    if type(offsets) is not list or len(offsets) != 2 or any(type(item) is not int or item < 0 for item in offsets):
        fail_tensor(f"data_offsets must be a JSON array of two non-negative ints, got {validation.describe(offsets)}")
    start, end = offsets
    if start > end:
        fail_tensor(f"data_offsets [{start}, {end}] end before they start")
    if end > payload_size:
        fail_tensor(f"data_offsets [{start}, {end}] run past the end of the {payload_size}-byte payload")
    if element_count > payload_size * 2:
        fail_tensor(
            f"data_offsets [{start}, {end}] span {end - start} bytes, but shape {shape} of {dtype_text} needs more "
            "bytes than the whole payload"
        )
    # A rank beyond NumPy's, or huge extents beside a 0, pass the span check but NumPy would refuse them.
    # Packed sub-byte elements count as a byte each: no array type holds them.
    shape_problem = numpy_shape_problem(shape, max(1, dtype.bits // 8))
    if shape_problem is not None:
        fail_tensor(shape_problem)
    bits = element_count * dtype.bits
    if bits % 8:
        fail_tensor(f"shape {shape} of {dtype_text} ({dtype.bits}-bit elements) does not fill whole bytes")
    if end - start != bits // 8:
        fail_tensor(
            f"data_offsets [{start}, {end}] span {end - start} bytes, but shape {shape} of {dtype_text} needs "
            f"{bits // 8} bytes"
        )
    return tuple(shape), dtype, (start, end)


def _tensor_fields(entry: object, fail_tensor: _Fail) -> dict[str, Any]:
    """A tensor's entry as a dict that has every one of ``_TENSOR_KEYS``."""
    if type(entry) is list:
        # Upstream (serde) also reads the three fields as an array, and tinax 0.2 read such files through it.
        if len(entry) != len(_TENSOR_KEYS):
            fail_tensor(
                f"an entry given as a JSON array must hold the {len(_TENSOR_KEYS)} fields "
                f"[{', '.join(_TENSOR_KEYS)}] in that order, got {validation.describe(entry)}"
            )
        entry = dict(zip(_TENSOR_KEYS, entry, strict=True))
    if type(entry) is not dict:
        fail_tensor(
            f"its entry must be a JSON object (or an array of [{', '.join(_TENSOR_KEYS)}]), "
            f"got {validation.describe(entry)}"
        )
    # Other keys are ignored, as the upstream reader ignores them.
    missing = [key for key in _TENSOR_KEYS if key not in entry]
    if missing:
        fail_tensor(f"its entry must have the keys {list(_TENSOR_KEYS)}; missing {missing}")
    return entry


def _capped_element_count(shape: object, cap: int, fail_tensor: _Fail) -> int:
    """The element count of a JSON shape, exact up to ``cap``; past it, some count above ``cap`` (or 0)."""
    if type(shape) is not list:
        fail_tensor(f"shape must be a JSON array of non-negative ints, got {validation.describe(shape)}")
    # The product stops growing past the most elements the payload could hold (two per byte)
    # unless an extent is 0, so a hostile shape costs no more than a valid one; below the cap it is exact.
    element_count = 1
    for extent in shape:
        if type(extent) is not int or extent < 0:
            fail_tensor(f"shape must be a JSON array of non-negative ints, got {validation.describe(shape)}")
        if element_count <= cap or extent == 0:
            element_count *= extent
    return element_count


def numpy_shape_problem(shape: list[int] | tuple[int, ...], itemsize: int) -> str | None:
    """Returns why NumPy cannot make an array of ``shape`` with ``itemsize``-byte elements, or None.

    NumPy refuses a shape whose non-zero extents exceed its index type even when another extent is 0.
    """
    if len(shape) > _MAX_NUMPY_RANK:
        return f"shape has {len(shape)} dimensions; NumPy arrays have at most {_MAX_NUMPY_RANK}"
    nbytes = itemsize
    for extent in shape:
        if extent > _MAX_NUMPY_INDEX:
            return (
                f"shape {list(shape)} has the extent {extent}, more than {_MAX_NUMPY_INDEX}, the largest NumPy can "
                "index"
            )
        if extent:
            nbytes *= extent
            if nbytes > _MAX_NUMPY_INDEX:
                return (
                    f"shape {list(shape)} is one that NumPy cannot represent: its non-zero extents span more than "
                    f"{_MAX_NUMPY_INDEX} bytes (NumPy refuses such a shape even when another extent is 0)"
                )
    return None


def _json_kind(value: object) -> str:
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def encode_header(
    entries: list[tuple[str, str, tuple[int, ...], int, int]], metadata: Mapping[str, str] | None
) -> bytes:
    """Encodes a header as upstream does: length field, then compact JSON space-padded to 8 bytes."""
    header: dict[str, Any] = {}
    if metadata is not None:
        header[METADATA_KEY] = dict(metadata)
    for name, dtype_text, shape, start, end in entries:
        header[name] = {"dtype": dtype_text, "shape": list(shape), "data_offsets": [start, end]}
    text = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    padded = text + b" " * (-len(text) % _HEADER_ALIGNMENT)
    return len(padded).to_bytes(LENGTH_FIELD_BYTES, "little") + padded
