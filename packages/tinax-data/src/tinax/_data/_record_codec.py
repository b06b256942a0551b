"""The tinax record format (version 1): what a record may hold, its header and its byte encoding.

See docs/guide/data.md, "The tinax record format", for the values accepted, the
JSON header, the record encoding and the ``source_id``. Headers carry only JSON
and raw numbers, and only the dtypes the format writes are accepted from them,
so reading a crafted file cannot run code.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import math
import os
import pathlib
import re
import stat
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, NoReturn

import numpy as np

from tinax._core import dtypes, validation

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "FieldSpec",
    "RecordHeader",
    "RecordSchema",
    "dtype_from_descriptor",
    "record_position",
]

FORMAT_NAME = "tinax-records"
FORMAT_VERSION = 1

KIND_NONE = "none"
KIND_BOOL = "bool"
KIND_INT = "int"
KIND_FLOAT = "float"
KIND_STR = "str"
KIND_BYTES = "bytes"
KIND_ARRAY = "array"

_PLAIN_KINDS: dict[type, str] = {
    type(None): KIND_NONE,
    bool: KIND_BOOL,
    int: KIND_INT,
    float: KIND_FLOAT,
    str: KIND_STR,
    bytes: KIND_BYTES,
}
_PLAIN_TYPES: dict[str, type] = {kind: kind_type for kind_type, kind in _PLAIN_KINDS.items()}
_KINDS = frozenset((*_PLAIN_KINDS.values(), KIND_ARRAY))
_KIND_TEXT = {
    KIND_NONE: "None",
    KIND_BOOL: "a bool",
    KIND_INT: "an int",
    KIND_FLOAT: "a float",
    KIND_STR: "a str",
    KIND_BYTES: "bytes",
}
_SUPPORTED_TEXT = (
    "None, a bool, int, float, str, bytes or a numpy.ndarray of a bool, integer, floating, complex or ml_dtypes dtype"
)

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
# NumPy's limit on the number of dimensions (NPY_MAXDIMS in NumPy 2).
_MAX_NDIM = 64

_BOOL = struct.Struct("<?")
_INT = struct.Struct("<q")
_FLOAT = struct.Struct("<d")
_LENGTH = struct.Struct("<Q")

# The descriptors of the NumPy part of tinax-core's dtype table, with byte order: the only
# strings a header may hand to numpy.dtype, so a crafted one cannot ask for another type.
_BUILTIN_DESCRIPTOR = re.compile(r"[<>|](b1|i[1248]|u[1248]|f[248]|c(8|16))")


# What stat says of a path that cannot name a file: nothing can be there.
_NO_FILE_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG})


def require_record_file(file: pathlib.Path, container: str) -> None:
    """Checks that a path names a regular file before a reader opens it.

    FileNotFoundError says why not; an OSError where the file system refuses to say, as 0.2's ``is_file`` raised.
    """
    try:
        mode = os.stat(file).st_mode
    except ValueError as error:  # An embedded NUL: no file can have that name.
        raise FileNotFoundError(f"No {container} file at {str(file)!r}: nothing is there ({error})") from error
    except OSError as error:
        if error.errno not in _NO_FILE_ERRNOS:
            raise
        reason = "nothing is there" if error.errno == errno.ENOENT else f"nothing is there ({error.strerror})"
        raise FileNotFoundError(f"No {container} file at {str(file)!r}: {reason}") from error
    if stat.S_ISREG(mode):
        return
    what = "a folder" if stat.S_ISDIR(mode) else "something that is not a regular file"
    raise FileNotFoundError(f"No {container} file at {str(file)!r}: {what} is there")


def record_position(index: object, count: int, path: object) -> int:
    """A record index checked as a sequence checks it (negatives included, bools refused), as a position."""
    position = index if type(index) is int else validation.require_int(index, "index")
    if position < 0:
        position += count
    if not 0 <= position < count:
        raise IndexError(f"index {index} is out of range for {count} records in {str(path)!r}")
    return position


def _ml_dtype(name: str) -> np.dtype[Any] | None:
    """Returns the ml_dtypes type of that name from tinax-core's dtype table, or None."""
    dtype = dtypes.array_dtypes().get(name)
    return dtype if dtype is not None and dtype.type.__module__.partition(".")[0] == "ml_dtypes" else None


def dtype_descriptor(dtype: np.dtype[Any]) -> str | None:
    """Returns how the format writes ``dtype``, or None if it cannot be stored."""
    if dtypes.array_dtype(dtype) is None:
        return None
    ml_dtype = _ml_dtype(dtype.name)
    if ml_dtype is not None:
        return dtype.name if ml_dtype == dtype else None
    return dtype.str


def dtype_from_descriptor(descriptor: object) -> np.dtype[Any]:
    """A stored dtype descriptor back as a dtype; only those :func:`dtype_descriptor` writes are accepted."""
    if isinstance(descriptor, str):
        if _BUILTIN_DESCRIPTOR.fullmatch(descriptor):
            dtype = np.dtype(descriptor)
            if dtype.str == descriptor:
                return dtype
        known = _ml_dtype(descriptor)
        if known is not None:
            return known
    raise ValueError(f"unknown array dtype {descriptor!r}")


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """One field of a record: its name, kind and, for arrays, dtype and ndim."""

    name: str
    kind: str
    dtype: np.dtype[Any] | None = None
    ndim: int | None = None

    def describe(self) -> str:
        """Says what every value of this field must be, for error messages."""
        if self.kind != KIND_ARRAY:
            return _KIND_TEXT[self.kind]
        return f"a numpy.ndarray of dtype {self.dtype} with {self.ndim} dimension{'s' if self.ndim != 1 else ''}"

    def to_json(self) -> dict[str, Any]:
        """Returns the header entry of the field."""
        entry: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.kind == KIND_ARRAY:
            assert self.dtype is not None
            entry["dtype"] = dtype_descriptor(self.dtype)
            entry["ndim"] = self.ndim
        return entry


def _classify(value: object, where: str) -> FieldSpec:
    """The field a value belongs to (with an empty name); TypeError for an unsupported kind."""
    kind = _PLAIN_KINDS.get(type(value))
    if kind is not None:
        return FieldSpec("", kind)
    if isinstance(value, np.generic):
        validation.fail_type(
            where,
            f"{_SUPPORTED_TEXT}; wrap a NumPy scalar with numpy.asarray(...) for a 0-d array or use .item()",
            value,
        )
    if type(value) is np.ndarray or isinstance(value, np.memmap):
        if dtype_descriptor(value.dtype) is None:
            validation.fail_type(where, _SUPPORTED_TEXT, value)
        return FieldSpec("", KIND_ARRAY, value.dtype, value.ndim)
    raise TypeError(validation.expectation_message(where, _SUPPORTED_TEXT, value))


class RecordSchema:
    """The fields every record of one file has (in the first record's key order), and their codec."""

    def __init__(self, fields: tuple[FieldSpec, ...]) -> None:
        self.fields = fields
        self.names = tuple(field.name for field in fields)
        self._name_set = frozenset(self.names)
        self._named_decoders = tuple((field.name, _decoder(field)) for field in fields)
        # The exact Python type of each plain field (None for arrays), and each array
        # field's packer of extents: bound once, used for every record.
        # Typed Any: mypy would narrow a value of ``type(value) is plain_type`` to object.
        self._plain_types: tuple[Any, ...] = tuple(_PLAIN_TYPES.get(field.kind) for field in fields)
        self._extents = tuple(
            struct.Struct(f"<{field.ndim}Q") if field.kind == KIND_ARRAY else None for field in fields
        )
        self._batch_decoders = tuple(_batch_decoder(field) for field in fields)
        self._encoders = tuple(zip(self.names, self._plain_types, self._extents, fields, strict=True))

    @classmethod
    def from_first_record(cls, record: object) -> RecordSchema:
        """Derives the schema from ``records[0]``."""
        mapping = _require_record(record, 0)
        fields = []
        for name, value in mapping.items():
            spec = _classify(value, f"records[0][{name!r}]")
            fields.append(dataclasses.replace(spec, name=name))
        return cls(tuple(fields))

    def checked_values(self, record: object, index: int) -> list[Any]:
        """Checks one record against the schema; returns its stored values (str as UTF-8, arrays C-contiguous).

        The authority on refusals: TypeError for unsupported kinds, ValueError for mismatches with the first record.
        """
        mapping = _require_record(record, index)
        if len(mapping) != len(self.fields) or not self._name_set.issuperset(mapping):
            self._fail_keys(mapping, index)
        values: list[Any] = []
        for field, plain_type in zip(self.fields, self._plain_types, strict=True):
            try:
                value: Any = mapping[field.name]
            except KeyError:
                self._fail_keys(mapping, index)
            # Fast path: a value of the field's exact type needs no classifying.
            if plain_type is not None and type(value) is plain_type:
                if plain_type is int:
                    if not _INT64_MIN <= value <= _INT64_MAX:
                        validation.fail_value(_where(index, field), "an int in [-2**63, 2**63 - 1]", value)
                elif plain_type is str:
                    try:
                        value = value.encode("utf-8")
                    except UnicodeEncodeError:
                        validation.require_utf8(value, _where(index, field))
                values.append(value)
                continue
            if (
                plain_type is None
                and type(value) is np.ndarray
                and value.ndim == field.ndim
                and value.dtype == field.dtype
            ):
                values.append(value if value.flags.c_contiguous else np.ascontiguousarray(value))
                continue
            where = _where(index, field)
            spec = _classify(value, where)
            if spec.kind != field.kind or spec.dtype != field.dtype or spec.ndim != field.ndim:
                validation.fail_value(where, f"{field.describe()} like records[0][{field.name!r}]", value)
            values.append(_stored_value(field.kind, value, where))
        return values

    def encode_parts(self, values: list[Any]) -> list[Any]:
        """Byte pieces of a record's encoding, from :meth:`checked_values`; joined, they are the encoding."""
        parts: list[Any] = []
        for field, extents, value in zip(self.fields, self._extents, values, strict=True):
            kind = field.kind
            if kind == KIND_INT:
                parts.append(_INT.pack(value))
            elif kind == KIND_FLOAT:
                parts.append(_FLOAT.pack(value))
            elif kind == KIND_BOOL:
                parts.append(_BOOL.pack(value))
            elif kind in (KIND_STR, KIND_BYTES):
                parts.append(_LENGTH.pack(len(value)))
                parts.append(value)
            elif kind == KIND_ARRAY:
                assert extents is not None
                parts.append(extents.pack(*value.shape))
                parts.append(array_bytes(value))
        return parts

    def encode(self, record: object, index: int) -> bytes:
        """One record's encoding: a fast path for exact-typed dicts, else joined :meth:`encode_parts`."""
        if type(record) is dict and len(record) == len(self.fields) and self._name_set.issuperset(record):
            parts: list[Any] = []
            append = parts.append
            for name, plain_type, extents, field in self._encoders:
                value: Any = record[name]
                if extents is not None:
                    if type(value) is not np.ndarray or value.ndim != field.ndim or value.dtype != field.dtype:
                        break
                    if not value.flags.c_contiguous:
                        value = np.ascontiguousarray(value)
                    append(extents.pack(*value.shape))
                    append(array_bytes(value))
                elif type(value) is not plain_type:
                    break
                elif plain_type is int:
                    if not _INT64_MIN <= value <= _INT64_MAX:
                        break
                    append(_INT.pack(value))
                elif plain_type is float:
                    append(_FLOAT.pack(value))
                elif plain_type is str:
                    try:
                        value = value.encode("utf-8")
                    except UnicodeEncodeError:
                        break
                    append(_LENGTH.pack(len(value)))
                    append(value)
                elif plain_type is bytes:
                    append(_LENGTH.pack(len(value)))
                    append(value)
                elif plain_type is bool:
                    append(_BOOL.pack(value))
            else:
                return b"".join(parts)
        # Anything else is checked, and refused, the long way.
        return b"".join(self.encode_parts(self.checked_values(record, index)))

    def decode(self, data: bytes) -> dict[str, Any]:
        """Decodes one record's encoding; ValueError if the bytes are not a record of this schema."""
        record: dict[str, Any] = {}
        offset = 0
        name = ""
        try:
            for name, decoder in self._named_decoders:
                record[name], offset = decoder(data, offset)
        except (struct.error, IndexError) as error:
            raise ValueError(f"the record ends inside field {name!r}") from error
        except (ValueError, OverflowError, MemoryError) as error:
            raise ValueError(f"field {name!r} cannot be decoded: {error}") from error
        if offset != len(data):
            raise ValueError(f"the record has {len(data) - offset} bytes after its last field")
        return record

    def decode_many(self, data: Sequence[bytes]) -> list[dict[str, Any]] | None:
        """Decodes several records at once, field by field with NumPy, as :meth:`decode` would.

        None if any encoding is malformed: :meth:`decode` of each then says which and why.
        """
        count = len(data)
        if not count:
            return []
        joined = b"".join(data)
        ends = np.cumsum(np.fromiter(map(len, data), np.int64, count))
        # Each record's position in ``joined`` of the field being decoded.
        offsets = np.empty(count, np.int64)
        offsets[0] = 0
        offsets[1:] = ends[:-1]
        batch = _Batch(joined, np.frombuffer(joined, np.uint8), ends)
        columns: list[list[Any]] = []
        for decode_column in self._batch_decoders:
            decoded = decode_column(batch, offsets)
            if decoded is None:
                return None
            column, offsets = decoded
            columns.append(column)
        if not np.array_equal(offsets, ends):
            return None  # Bytes after the last field.
        if not columns:
            return [{} for _ in range(count)]
        names = self.names
        return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]

    def decode_stacked(self, data: Sequence[bytes]) -> dict[str, np.ndarray[Any, Any]] | None:
        """Decodes several records straight into one stacked array per field, as stacking :meth:`decode_many` would.

        None where records differ in length or shape, hold text, bytes or None, or are malformed.
        """
        count = len(data)
        if not count:
            return None
        length = len(data[0])
        if any(len(record) != length for record in data):
            return None
        # Row r holds record r's bytes: each fixed-size field is a block of columns.
        table = np.frombuffer(b"".join(data), np.uint8).reshape(count, length)
        offset = 0
        stacked: dict[str, np.ndarray[Any, Any]] = {}
        for field in self.fields:
            kind = field.kind
            if kind == KIND_BOOL:
                if offset + 1 > length or (table[:, offset] > 1).any():
                    return None
                stacked[field.name] = table[:, offset] == 1
                offset += 1
            elif kind in (KIND_INT, KIND_FLOAT):
                if offset + 8 > length:
                    return None
                number = np.dtype(np.int64 if kind == KIND_INT else np.float64)
                octets = table[:, offset : offset + 8].copy()
                stacked[field.name] = octets.view(number.newbyteorder("<")).reshape(count).astype(number, copy=False)
                offset += 8
            elif kind == KIND_ARRAY:
                assert field.dtype is not None
                assert field.ndim is not None
                extents_size = 8 * field.ndim
                if offset + extents_size > length:
                    return None
                extents = table[:, offset : offset + extents_size].copy().view("<u8").reshape(count, field.ndim)
                if field.ndim and ((extents != extents[0]).any() or (extents[0] >= _BATCH_EXTENT_LIMIT).any()):
                    return None
                shape = tuple(int(extent) for extent in extents[0])
                offset += extents_size
                nbytes = math.prod(shape) * field.dtype.itemsize
                if offset + nbytes > length:
                    return None
                elements = table[:, offset : offset + nbytes].copy().view(field.dtype).reshape(count, *shape)
                if not elements.dtype.isnative:
                    # np.stack gives arrays of another byte order in the native one (as ArrayColumn.stacked does).
                    elements = elements.astype(elements.dtype.newbyteorder("="))
                stacked[field.name] = elements
                offset += nbytes
            else:
                return None
        if offset != length:
            return None  # Bytes after the last field.
        return stacked

    def _fail_keys(self, mapping: Mapping[str, Any], index: int) -> NoReturn:
        missing = [name for name in self.names if name not in mapping]
        if missing:
            raise ValueError(
                f"records[{index}] must have the fields of records[0] {list(self.names)}, "
                f"but has no field {missing[0]!r}"
            )
        extra = [name for name in mapping if name not in self._name_set]
        raise ValueError(
            f"records[{index}] must have the fields of records[0] {list(self.names)}, "
            f"but has the extra field {extra[0]!r}"
        )


def array_bytes(array: np.ndarray[Any, Any]) -> memoryview:
    """Views a C-contiguous array's elements as flat bytes (no copy)."""
    return array.reshape(-1).view(np.uint8).data


def _require_record(record: object, index: int) -> Mapping[str, Any]:
    where = f"records[{index}]"
    if not isinstance(record, Mapping):
        validation.fail_type(where, "a mapping of str field names to values", record)
    return validation.require_str_mapping(record, where)


def _stored_value(kind: str, value: Any, where: str) -> Any:
    if kind == KIND_INT and not _INT64_MIN <= value <= _INT64_MAX:
        validation.fail_value(where, "an int in [-2**63, 2**63 - 1]", value)
    if kind == KIND_STR:
        return validation.require_utf8(value, where)
    if kind == KIND_ARRAY and not value.flags.c_contiguous:
        return np.ascontiguousarray(value)
    return value


_Decoder = Callable[[bytes, int], tuple[Any, int]]


def _decoder(field: FieldSpec) -> _Decoder:
    # Each decoder returns (value, offset after it); hot, so each binds what it needs up front.
    kind = field.kind
    if kind == KIND_NONE:
        return lambda data, offset: (None, offset)
    if kind == KIND_BOOL:
        return _decode_bool
    if kind in (KIND_INT, KIND_FLOAT):
        unpack = (_INT if kind == KIND_INT else _FLOAT).unpack_from
        return lambda data, offset: (unpack(data, offset)[0], offset + 8)
    if kind == KIND_STR:
        return _decode_str
    if kind == KIND_BYTES:
        return _decode_sized
    assert field.dtype is not None
    assert field.ndim is not None
    dtype, itemsize, ndim = field.dtype, field.dtype.itemsize, field.ndim
    unpack_extents = struct.Struct(f"<{ndim}Q").unpack_from
    extents_size = 8 * ndim
    frombuffer, empty, prod = np.frombuffer, np.empty, math.prod

    def decode_array(data: bytes, offset: int) -> tuple[Any, int]:
        shape = unpack_extents(data, offset)
        offset += extents_size
        count = shape[0] if ndim == 1 else prod(shape)
        if not count:
            return empty(shape, dtype), offset
        if count * itemsize > len(data) - offset:
            # Checked before NumPy sees it: extents of 2**63 or more overflow its sizes.
            raise ValueError(f"an array of shape {shape} needs {count * itemsize} bytes but the record ends first")
        # frombuffer refuses a short buffer; the copy makes the view aligned, writable and owning.
        array = frombuffer(data, dtype, count, offset)
        return (array if ndim == 1 else array.reshape(shape)).copy(), offset + count * itemsize

    return decode_array


def _decode_bool(data: bytes, offset: int) -> tuple[Any, int]:
    byte = data[offset]  # IndexError here means a short record.
    if byte > 1:
        raise ValueError(f"a bool field holds the byte {byte}")
    return byte == 1, offset + 1


def _decode_sized(data: bytes, offset: int) -> tuple[bytes, int]:
    (length,) = _LENGTH.unpack_from(data, offset)
    start = offset + 8
    end = start + length
    if end > len(data):
        raise ValueError(f"a field declares {length} bytes but the record ends before them")
    return data[start:end], end


def _decode_str(data: bytes, offset: int) -> tuple[Any, int]:
    raw, end = _decode_sized(data, offset)
    return raw.decode("utf-8"), end


class _Batch(NamedTuple):
    """The encodings of several records, joined, for :meth:`RecordSchema.decode_many`."""

    #: Every record's encoding, one after the other.
    joined: bytes
    #: ``joined`` as a NumPy array of bytes (no copy).
    octets: np.ndarray[Any, Any]
    #: Where each record ends in ``joined``.
    ends: np.ndarray[Any, Any]


#: Decodes one field of every record of a batch, given each record's offset of the field: the
#: values and the offsets after the field, or None where a record is not well formed.
_BatchDecoder = Callable[[_Batch, np.ndarray[Any, Any]], tuple[list[Any], np.ndarray[Any, Any]] | None]

# Extents from this far up are left to the one-record decoder and its messages.
_BATCH_EXTENT_LIMIT = 2**40


def _gathered(batch: _Batch, offsets: np.ndarray[Any, Any], size: int) -> np.ndarray[Any, Any] | None:
    """The ``size`` bytes at each offset, one row per record; None if a record ends before them."""
    if (offsets + size > batch.ends).any():
        return None
    return batch.octets[offsets[:, None] + np.arange(size)]


def _batch_decoder(field: FieldSpec) -> _BatchDecoder:
    kind = field.kind
    if kind == KIND_NONE:
        return lambda batch, offsets: ([None] * len(offsets), offsets)
    if kind == KIND_BOOL:
        return _decode_bools
    if kind in (KIND_INT, KIND_FLOAT):
        number = np.dtype("<i8" if kind == KIND_INT else "<f8")

        def decode_numbers(batch: _Batch, offsets: np.ndarray[Any, Any]) -> Any:
            octets = _gathered(batch, offsets, 8)
            if octets is None:
                return None
            # tolist gives Python ints and floats, as struct does.
            return octets.view(number).ravel().tolist(), offsets + 8

        return decode_numbers
    if kind in (KIND_STR, KIND_BYTES):
        text = kind == KIND_STR

        def decode_sized(batch: _Batch, offsets: np.ndarray[Any, Any]) -> Any:
            octets = _gathered(batch, offsets, 8)
            if octets is None:
                return None
            lengths = octets.view("<u8").ravel()
            starts = offsets + 8
            # Compared as uint64, so that a crafted length of 2**63 or more stays a large number.
            if (lengths > (batch.ends - starts).astype(np.uint64)).any():
                return None
            stops = starts + lengths.astype(np.int64)
            joined = batch.joined
            pieces: list[Any] = [
                joined[start:stop] for start, stop in zip(starts.tolist(), stops.tolist(), strict=True)
            ]
            if text:
                try:
                    pieces = [piece.decode("utf-8") for piece in pieces]
                except UnicodeDecodeError:
                    return None
            return pieces, stops

        return decode_sized
    assert field.dtype is not None
    assert field.ndim is not None
    return _array_batch_decoder(field.dtype, field.ndim)


def _decode_bools(batch: _Batch, offsets: np.ndarray[Any, Any]) -> Any:
    octets = _gathered(batch, offsets, 1)
    if octets is None or (octets > 1).any():
        return None
    return (octets.ravel() == 1).tolist(), offsets + 1


def _array_batch_decoder(dtype: np.dtype[Any], ndim: int) -> _BatchDecoder:
    itemsize = dtype.itemsize
    extents_size = 8 * ndim
    frombuffer, empty, prod = np.frombuffer, np.empty, math.prod

    def decode_arrays(batch: _Batch, offsets: np.ndarray[Any, Any]) -> Any:
        count = len(offsets)
        if ndim:
            octets = _gathered(batch, offsets, extents_size)
            if octets is None:
                return None
            extents = octets.view("<u8").reshape(count, ndim)
            if (extents >= _BATCH_EXTENT_LIMIT).any():
                return None
        else:
            extents = np.zeros((count, 0), np.uint64)
        starts = offsets + extents_size
        joined, ends = batch.joined, batch.ends
        if (extents == extents[0]).all():
            # One shape for every record: one check for all, then one copy each.
            shape = tuple(extents[0].tolist())
            size = prod(shape)
            nbytes = size * itemsize
            if nbytes > int((ends - starts).min()):
                return None
            if not size:
                return [empty(shape, dtype) for _ in range(count)], starts
            if ndim == 1:
                arrays = [frombuffer(joined, dtype, size, start).copy() for start in starts.tolist()]
            else:
                arrays = [frombuffer(joined, dtype, size, start).reshape(shape).copy() for start in starts.tolist()]
            return arrays, starts + nbytes
        # Shapes differ from record to record (token sequences, say).
        arrays = []
        stops = []
        for row, start, end in zip(extents.tolist(), starts.tolist(), ends.tolist(), strict=True):
            shape = tuple(row)
            size = prod(shape)
            stop = start + size * itemsize
            if stop > end:
                return None
            arrays.append(frombuffer(joined, dtype, size, start).reshape(shape).copy() if size else empty(shape, dtype))
            stops.append(stop)
        return arrays, np.asarray(stops, np.int64)

    return decode_arrays


def _where(index: int, field: FieldSpec) -> str:
    """Names a field of a record in messages."""
    return f"records[{index}][{field.name!r}]"


@dataclasses.dataclass(frozen=True)
class RecordHeader:
    """What a file's header says: the schema, the record count and the content digest."""

    schema: RecordSchema
    count: int
    content_sha256: str

    def to_json_bytes(self) -> bytes:
        """Returns the canonical header (sorted keys, no spaces) as UTF-8 JSON."""
        header = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "count": self.count,
            "content_sha256": self.content_sha256,
            "fields": [field.to_json() for field in self.schema.fields],
        }
        return json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    @property
    def source_id(self) -> str:
        """The identity of the records (see docs/guide/data.md, "The tinax record format")."""
        return f"{FORMAT_NAME}:{hashlib.sha256(self.to_json_bytes()).hexdigest()[:32]}"

    @classmethod
    def from_json_bytes(cls, data: bytes) -> RecordHeader:
        """Parses and checks a stored header; ValueError for one this version cannot read (newer ones included)."""
        try:
            header = json.loads(data.decode("utf-8"))
        except RecursionError as error:
            # A crafted header nested thousands deep exhausts the parser's stack.
            raise ValueError("the header is JSON nested too deeply to be a tinax header") from error
        except ValueError as error:  # UnicodeDecodeError, JSONDecodeError, an int of too many digits.
            raise ValueError(f"the header is not UTF-8 JSON ({error})") from error
        if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
            raise ValueError(f"the header does not declare the {FORMAT_NAME!r} format")
        version = header.get("version")
        if type(version) is not int or version < 1:
            raise ValueError(f"the header declares no valid format version, got {version!r}")
        if version > FORMAT_VERSION:
            raise ValueError(
                f"the file uses format version {version}, newer than the newest this tinax-data reads "
                f"({FORMAT_VERSION}); upgrade tinax-data to read it"
            )
        count = header.get("count")
        if type(count) is not int or count < 0:
            raise ValueError(f"the header declares no valid record count, got {count!r}")
        digest = header.get("content_sha256")
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ValueError(f"the header declares no valid content digest, got {digest!r}")
        entries = header.get("fields")
        if not isinstance(entries, list):
            raise ValueError("the header has no list of fields")
        fields = tuple(_field_from_json(entry) for entry in entries)
        names = [field.name for field in fields]
        if len(set(names)) != len(names):
            raise ValueError(f"the header repeats a field name: {names}")
        return cls(RecordSchema(fields), count, digest)


def _field_from_json(entry: object) -> FieldSpec:
    # The kind is checked to be a str first: a list or dict there is unhashable.
    if (
        not isinstance(entry, dict)
        or not isinstance(entry.get("name"), str)
        or not isinstance(entry.get("kind"), str)
        or entry["kind"] not in _KINDS
    ):
        raise ValueError(f"the header has a malformed field entry {entry!r}")
    if entry["kind"] != KIND_ARRAY:
        return FieldSpec(entry["name"], entry["kind"])
    ndim = entry.get("ndim")
    if type(ndim) is not int or not 0 <= ndim <= _MAX_NDIM:
        raise ValueError(f"the header has a malformed field entry {entry!r}")
    return FieldSpec(entry["name"], KIND_ARRAY, dtype_from_descriptor(entry.get("dtype")), ndim)
