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
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import numpy as np

from tinax._core import validation
from tinax._data._records._record_decoders import _BATCH_EXTENT_LIMIT, _Batch, _batch_decoder, _decoder
from tinax._data._records._record_fields import (
    _BOOL,
    _FLOAT,
    _INT,
    _INT64_MAX,
    _INT64_MIN,
    _KINDS,
    _LENGTH,
    _MAX_NDIM,
    _PLAIN_TYPES,
    KIND_ARRAY,
    KIND_BOOL,
    KIND_BYTES,
    KIND_FLOAT,
    KIND_INT,
    KIND_NONE,
    KIND_STR,
    FieldSpec,
    _classify,
    dtype_descriptor,
    dtype_from_descriptor,
)

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "KIND_ARRAY",
    "KIND_BOOL",
    "KIND_BYTES",
    "KIND_FLOAT",
    "KIND_INT",
    "KIND_NONE",
    "KIND_STR",
    "FieldSpec",
    "RecordHeader",
    "RecordSchema",
    "dtype_descriptor",
    "dtype_from_descriptor",
    "record_position",
    "require_record_file",
]

FORMAT_NAME = "tinax-records"
FORMAT_VERSION = 1


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
