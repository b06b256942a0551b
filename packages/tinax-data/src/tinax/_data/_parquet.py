"""Writes records to Parquet: 0.2's plain table where pyarrow converts them, else the tinax format.

The tinax format stores Arrow-native columns (tensor or nested-list arrays,
nearest-type storage for dtypes Arrow lacks) plus the header and dtype metadata;
every file also gets page CRCs and SHA-256 digests of row groups and footer,
which pyarrow alone does not write. See docs/guide/data.md, "Writing Parquet
files" and "The tinax record format". The reader is ``_parquet_source``.
"""

from __future__ import annotations

import bisect
import collections
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import json
import math
import operator
import os
import pathlib
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from tinax._core import storage, validation
from tinax._core.files import atomic_path
from tinax._core.logs import Operation, get_logger
from tinax._core.progress import Progress, ProgressChoice, Reporter, require_progress
from tinax._data._paths import DestinationErrors, require_record_path, writable_destination
from tinax._data._record_codec import (
    KIND_ARRAY,
    KIND_BOOL,
    KIND_BYTES,
    KIND_FLOAT,
    KIND_INT,
    KIND_NONE,
    KIND_STR,
    FieldSpec,
    RecordHeader,
    RecordSchema,
    dtype_descriptor,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DEFAULT_CACHE_BYTES", "write_parquet_record"]

_logger = get_logger("data")

METADATA_KEY = b"tinax.records"
#: Key of the checksums of a tinax-format file: the SHA-256 of the bytes of
#: every row group, and of the footer (with its own digest written as zeros).
CHECKSUM_KEY = b"tinax.records.checksums"
#: How every checksum entry starts (see _checksum_value); no other file's footer holds it.
CHECKSUM_MARKER = b'{"footer_sha256":"'
_MAGIC = b"PAR1"
_ZERO_DIGEST = "0" * 64
_HASH_CHUNK = 1 << 20
_ROW_GROUP_TARGET_BYTES = 1 << 20
_ROW_GROUP_MAX_ROWS = 4096
#: Records checked at a time: bounds the lists of field values the checks build.
_CHECK_CHUNK = 1 << 16
#: The rows of a row group pyarrow's ``write_table`` makes by default (its ``_DEFAULT_ROW_GROUP_SIZE``).
_PYARROW_ROW_GROUP_ROWS = 1024 * 1024
#: The default memory budget of a reader's cache of decoded row groups.
DEFAULT_CACHE_BYTES = 512 << 20
#: Key, in the Arrow field metadata of an array column, of the field's exact dtype.
FIELD_DTYPE_KEY = b"tinax.dtype"
#: Key, in the Arrow field metadata of a nested-list array column, of the extents its lists lose (EmptyShapes).
FIELD_EMPTY_SHAPES_KEY = b"tinax.empty_shapes"


def _plain_arrow_type(kind: str) -> pa.DataType:
    import pyarrow as pa

    types: dict[str, Callable[[], pa.DataType]] = {
        KIND_NONE: pa.null,
        KIND_BOOL: pa.bool_,
        KIND_INT: pa.int64,
        KIND_FLOAT: pa.float64,
        KIND_STR: pa.large_string,
        KIND_BYTES: pa.large_binary,
    }
    return types[kind]()


@dataclasses.dataclass(frozen=True)
class _Storage:
    """How an array field's elements are stored in Arrow: a little-endian dtype Arrow has, as complex pairs or not."""

    dtype: np.dtype[Any]
    pairs: bool


def _storage(dtype: np.dtype[Any]) -> _Storage:
    if dtype.kind == "c":
        return _Storage(np.dtype(f"<f{dtype.itemsize // 2}"), True)
    if dtype.type.__module__.partition(".")[0] == "ml_dtypes":
        # No Arrow type: the raw bits, as the unsigned integer of the same width.
        return _Storage(np.dtype(f"<u{dtype.itemsize}"), False)
    if dtype.kind == "b":
        return _Storage(np.dtype(bool), False)
    return _Storage(dtype.newbyteorder("<"), False)


def _to_storage(array: np.ndarray[Any, Any], storage: _Storage) -> np.ndarray[Any, Any]:
    """The stored elements of a C-contiguous array (its shape, plus a trailing 2 for pairs)."""
    if storage.pairs:
        flat = np.ascontiguousarray(array.astype(array.dtype.newbyteorder("<"), copy=False))
        return flat.reshape(-1).view(storage.dtype).reshape((*array.shape, 2))
    if array.dtype.type.__module__.partition(".")[0] == "ml_dtypes":
        return array.view(storage.dtype)
    return array.astype(storage.dtype, copy=False)


def _native_arrow_type(field: FieldSpec, fixed_shape: tuple[int, ...] | None) -> pa.DataType:
    """The Arrow-native column type of a field; arrays of one shape in every record are tensors."""
    import pyarrow as pa

    if field.kind != KIND_ARRAY:
        return _plain_arrow_type(field.kind)
    assert field.dtype is not None
    assert field.ndim is not None
    storage = _storage(field.dtype)
    value_type = pa.from_numpy_dtype(storage.dtype)
    if fixed_shape is not None:
        shape = (*fixed_shape, 2) if storage.pairs else fixed_shape
        return value_type if not shape else pa.fixed_shape_tensor(value_type, list(shape))
    arrow_type = pa.list_(value_type, 2) if storage.pairs else value_type
    for _ in range(field.ndim):
        arrow_type = pa.large_list(arrow_type)
    return arrow_type


def _native_arrow_schema(
    schema: RecordSchema, fixed_shapes: Mapping[str, tuple[int, ...] | None], empty_shapes: Mapping[str, bytes]
) -> pa.Schema:
    import pyarrow as pa

    fields = []
    for field in schema.fields:
        metadata: dict[bytes, bytes | str] | None = None
        if field.kind == KIND_ARRAY:
            assert field.dtype is not None
            # Where Arrow has no such dtype (bfloat16, float8, int4, complex, big-endian), other tools
            # see the stored numbers; this names the exact dtype for them.
            metadata = {FIELD_DTYPE_KEY: dtype_descriptor(field.dtype) or ""}
            if field.name in empty_shapes:
                metadata[FIELD_EMPTY_SHAPES_KEY] = empty_shapes[field.name]
        arrow_type = _native_arrow_type(field, fixed_shapes.get(field.name))
        fields.append(pa.field(field.name, arrow_type, nullable=field.kind == KIND_NONE, metadata=metadata))
    return pa.schema(fields)


def _is_native_array_type(field: FieldSpec, arrow_type: pa.DataType) -> bool:
    """Whether a column type is one the writer gives an array field (any fixed shape)."""
    import pyarrow as pa

    assert field.dtype is not None
    assert field.ndim is not None
    storage = _storage(field.dtype)
    value_type = pa.from_numpy_dtype(storage.dtype)
    stored_ndim = field.ndim + (1 if storage.pairs else 0)
    if isinstance(arrow_type, pa.FixedShapeTensorType):
        return (
            arrow_type.value_type == value_type
            and len(arrow_type.shape) == stored_ndim
            and stored_ndim > 0
            and arrow_type.permutation is None
            and (not storage.pairs or arrow_type.shape[-1] == 2)
        )
    if stored_ndim == 0:
        return bool(arrow_type == value_type)
    return bool(arrow_type == _native_arrow_type(field, None))


def write_parquet_record(
    path: str | os.PathLike[str],
    records: Sequence[Mapping[str, Any]],
    *,
    overwrite: bool = True,
    progress: Progress = None,
) -> None:
    """Writes records to a Parquet file, atomically.

    Records ``pyarrow.Table.from_pylist`` takes are written as tinax 0.2 wrote
    them (a plain Arrow table); records it refuses but that fit the tinax record
    format (n-d or 0-d arrays, ``ml_dtypes``, complex, big-endian, ...) are written
    in that format and read back exactly. Every file carries page checksums and
    tinax's row-group and footer digests. The file appears only once fully written
    and flushed; a refused record leaves any old file untouched. The data guide's
    "Writing Parquet files" section gives the column types. A successful write
    logs one INFO line (rows, bytes, seconds) to the ``tinax.data`` logger.

    Args:
      path: The file; its folder must exist, and a symlink there is followed. A
        ``gs://`` or ``s3://`` URL is uploaded as one whole object (needs the
        ``gcs`` or ``s3`` extra).
      records: A non-empty, finite ``collections.abc.Sequence`` of mappings.
      overwrite: Whether a file already at ``path`` is replaced (default True, as in 0.2).
      progress: None, a callable ``progress(done, total)`` called with rows written
        (a plain table jumps from 0 to the total; raising stops the write), or
        ``"bar"`` for a progress bar on standard error (tqdm, else rich).

    Raises:
      TypeError: If an argument has the wrong type (a generator as ``records``
        included), or pyarrow cannot convert a value outside the tinax format.
      ValueError: If ``progress`` is another str, ``records`` is empty, the first
        record has no fields or lacks a later record's field, or pyarrow refuses
        the values (``ArrowInvalid``) outside the tinax format.
      OverflowError: If an int does not fit in 64 bits (pyarrow's error, as in 0.2).
      FileNotFoundError: If ``path`` is empty (also a ValueError) or its folder does not exist.
      NotADirectoryError: If a part of the folder of ``path`` is a regular file.
      IsADirectoryError: If ``path`` is a folder.
      FileExistsError: If a file exists at ``path`` (or another writer created the
        object meanwhile) and ``overwrite`` is False.
      OSError: If the file system or the store refuses the write.
      ImportError: If ``progress="bar"`` without tqdm or rich, or the URL's store
        client is missing (before anything is written).

    Examples:
      >>> import numpy as np
      >>> import pyarrow.parquet as pq
      >>> from tinax.data import write_parquet_record
      >>> write_parquet_record("rows.parquet", [{"text": "a", "x": np.zeros(2)}, {"text": "b", "x": np.ones(2)}])
      >>> pq.read_table("rows.parquet").column("text").to_pylist()  # plain Arrow columns for other tools
      ['a', 'b']
    """
    remote = storage.as_remote(path, "path")
    destination = require_record_path(path, "path") if remote is None else None
    _require_records(records)
    validation.require_bool(overwrite, "overwrite")
    reporting = require_progress(progress, needed_by="tinax.data.write_parquet_record")
    count = len(records)
    written = f"{count} {'record' if count == 1 else 'records'} to"
    if remote is None:
        assert destination is not None
        operation = Operation(_logger, "wrote", written, destination)
        destination = _write_file(destination, records, overwrite=overwrite, reporting=reporting)
        operation.done(rows=count, nbytes=_size(destination) if operation.enabled else None)
        return
    # An object is written whole to a local file first, then published as one object that appears whole
    # or not at all (and, without overwrite, only where none is).
    fs = storage.filesystem(remote, distribution="tinax-data", needed_by="tinax.data.write_parquet_record")
    operation = Operation(_logger, "wrote", written, remote.url)
    with storage.local_copy_to_publish(fs, remote, overwrite=overwrite) as temporary:
        local = _write_file(temporary, records, overwrite=True, reporting=reporting)
        nbytes = _size(local)
    operation.done(rows=count, nbytes=nbytes)


def _write_file(
    destination: pathlib.Path, records: Sequence[Mapping[str, Any]], *, overwrite: bool, reporting: ProgressChoice
) -> pathlib.Path:
    """Writes checked records to a local file as ``write_parquet_record`` does; returns the path written."""
    import pyarrow as pa

    count = len(records)
    # tinax 0.2's conversion first: what it converts is written as 0.2 wrote it. Where pyarrow is sure
    # to refuse the records, its conversion is put off until its error is the one to raise.
    converted = None if _pyarrow_refuses(records[0]) else _plain_table(records)
    if isinstance(converted, pa.Table):
        return _publish_plain_table(destination, converted, records, overwrite=overwrite, reporting=reporting)
    try:
        plan = _plan_tinax_records(records)
    except _OutsideTheFormatError as outside:
        refused = _plain_table(records) if converted is None else converted
        if isinstance(refused, pa.Table):
            # Only if a pyarrow converts what _pyarrow_refuses says it cannot: then 0.2's path still holds.
            return _publish_plain_table(destination, refused, records, overwrite=overwrite, reporting=reporting)
        # Neither a plain table nor the tinax format: pyarrow's error, as tinax 0.2 raised it.
        refused.add_note(f"the records do not fit the tinax record format either: {outside.__cause__}")
        raise refused from None
    destination = writable_destination(destination, DestinationErrors())
    with reporting.reporting(count, unit="rows", description=destination.name) as reporter:
        _write_tinax_records(destination, plan, records, overwrite=overwrite, reporter=reporter)
    return destination


def _pyarrow_refuses(first: Mapping[str, Any]) -> bool:
    """Whether ``Table.from_pylist`` must refuse records starting with ``first`` (a non-1-d array in it)."""
    import pyarrow as pa

    if type(first) is not dict:
        return False
    for value in first.values():
        if type(value) is np.ndarray and value.ndim != 1:
            try:
                pa.array([value])
            except Exception:  # pyarrow's ArrowInvalid today; any refusal will do.
                return True
    return False


def _plain_table(records: Sequence[Mapping[str, Any]]) -> pa.Table | Exception:
    """The records converted as tinax 0.2 converted them, or the error pyarrow raised."""
    import pyarrow as pa

    try:
        # pyarrow reads the rows it is given without keeping them, so plain dicts need no copy.
        exact = isinstance(records, (list, tuple)) and set(map(type, records)) == {dict}
        return pa.Table.from_pylist(records if exact else [dict(record) for record in records])
    except Exception as error:  # pyarrow's ArrowInvalid, ArrowTypeError, OverflowError, ...
        return error


def _publish_plain_table(
    destination: pathlib.Path,
    table: pa.Table,
    records: Sequence[Mapping[str, Any]],
    *,
    overwrite: bool,
    reporting: ProgressChoice,
) -> pathlib.Path:
    """Writes records that pyarrow converted as tinax 0.2 wrote them; returns where the file is."""
    destination = writable_destination(destination, DestinationErrors())
    _require_columns(records)
    with reporting.reporting(len(records), unit="rows", description=destination.name) as reporter:
        _write_plain_table(destination, table, overwrite=overwrite, reporter=reporter)
    return destination


def _size(path: pathlib.Path) -> int | None:
    """The size of a file just written, for the log line; None if it cannot be found out."""
    try:
        return path.stat().st_size
    except OSError:
        return None


class _OutsideTheFormatError(Exception):
    """The records do not fit the tinax format (the reason is the cause)."""


def _require_records(records: object) -> None:
    expected = (
        "a non-empty finite sequence of mappings such as a list "
        "(a generator or other one-shot iterable is not accepted)"
    )
    if isinstance(records, (str, bytes, bytearray)) or not isinstance(records, Sequence):
        validation.fail_type("records", expected, records)
    # An instance of a Mapping subclass is a Mapping, so one look per type clears the usual records at once;
    # anything else is looked at record by record, to name the first that is not a mapping.
    if not all(issubclass(kind, Mapping) for kind in set(map(type, records))):
        for index, record in enumerate(records):
            if not isinstance(record, Mapping):
                validation.fail_type(f"records[{index}]", "a mapping of field names to values", record)
    if len(records) == 0:
        validation.fail_value("records", expected, records)


def _require_columns(records: Sequence[Mapping[str, Any]]) -> None:
    """Refuses records a plain table would silently drop fields of (0.2 lost them): no fields, or extra ones."""
    if not records[0]:
        validation.fail_value(
            "records[0]", "a mapping with at least one field (a Parquet row needs a column)", records[0]
        )
    # A field only some records lack is a null in those records, which the file can say.
    columns = set(records[0])
    if all(map(columns.issuperset, records)):
        return
    for index, record in enumerate(records):
        extra = [key for key in record if key not in columns]
        if extra:
            raise ValueError(
                f"records[{index}] must have only fields that records[0] has, got the extra field {extra[0]!r}: "
                f"a Parquet file has the columns of records[0], {list(records[0])}, and would lose it"
            )


@dataclasses.dataclass(frozen=True)
class _TinaxPlan:
    """What a tinax-format write must know before its first row group.

    ``fixed_shapes`` is None for fields stored as nested lists; ``group_ends`` the position after each row group.
    """

    schema: RecordSchema
    fixed_shapes: dict[str, tuple[int, ...] | None]
    empty_shapes: dict[str, bytes]
    group_ends: list[int]


def _plan_tinax_records(records: Sequence[Mapping[str, Any]]) -> _TinaxPlan:
    """Checks every record against the tinax format, once, and plans the file."""
    try:
        schema = RecordSchema.from_first_record(records[0])
    except (TypeError, ValueError) as error:
        raise _OutsideTheFormatError from error
    checker = _RecordChecker(schema)
    cutter = _RowGroupCutter()
    for start in range(0, len(records), _CHECK_CHUNK):
        cutter.add(checker.checked_sizes(records, start, min(start + _CHECK_CHUNK, len(records))))
    if not schema.fields:
        raise _OutsideTheFormatError from ValueError("records[0] has no fields")
    fixed_shapes: dict[str, tuple[int, ...] | None] = {}
    empty_shapes: dict[str, bytes] = {}
    for field in schema.fields:
        if field.kind != KIND_ARRAY:
            continue
        distinct = checker.shapes[field.name]
        if len(distinct) == 1 and math.prod(next(iter(distinct))) > 0:
            fixed_shapes[field.name] = next(iter(distinct))
            continue
        fixed_shapes[field.name] = None
        entry = empty_shapes_entry([tuple(record[field.name].shape) for record in records])
        if entry is not None:
            empty_shapes[field.name] = entry
    return _TinaxPlan(schema, fixed_shapes, empty_shapes, cutter.finish())


_EXACT_TYPES: dict[str, type] = {
    KIND_NONE: type(None),
    KIND_BOOL: bool,
    KIND_INT: int,
    KIND_FLOAT: float,
    KIND_STR: str,
    KIND_BYTES: bytes,
}


class _RecordChecker:
    """Checks records against a schema a slice at a time, with the stored size of each.

    Plain-dict slices are checked in bulk; others (or failures) go through ``checked_values``, which names errors.
    """

    def __init__(self, schema: RecordSchema) -> None:
        self._schema = schema
        self.shapes: dict[str, set[tuple[int, ...]]] = {
            field.name: set() for field in schema.fields if field.kind == KIND_ARRAY
        }
        self._known_dtypes: dict[str, set[np.dtype[Any]]] = {name: set() for name in self.shapes}

    def checked_sizes(self, records: Sequence[Mapping[str, Any]], start: int, stop: int) -> np.ndarray[Any, Any]:
        """Checks ``records[start:stop]``; returns the stored size of each (what row groups are cut by)."""
        sizes = self._quick_sizes(_record_slice(records, start, stop))
        return sizes if sizes is not None else self._sizes_one_by_one(records, start, stop)

    def _quick_sizes(self, rows: list[Mapping[str, Any]]) -> np.ndarray[Any, Any] | None:
        fields = self._schema.fields
        if not fields or set(map(type, rows)) != {dict} or set(map(len, rows)) != {len(fields)}:
            return None
        sizes = np.zeros(len(rows), dtype=np.int64)
        for field in fields:
            try:
                values = list(map(operator.itemgetter(field.name), rows))
            except KeyError:
                return None
            # A row with each field name and no more keys than fields has exactly the schema's keys. (A key
            # of a class built to compare equal to a str would pass here; checked_values refuses it.)
            size = self._array_sizes(field, values) if field.kind == KIND_ARRAY else _plain_sizes(field, values)
            if size is None:
                return None
            sizes += size
        return sizes

    def _array_sizes(self, field: FieldSpec, values: list[Any]) -> int | np.ndarray[Any, Any] | None:
        assert field.ndim is not None
        if set(map(type, values)) != {np.ndarray}:
            return None
        # Equal dtypes are written alike (same descriptor), so one of each kind stands for the others.
        for dtype in set(map(operator.attrgetter("dtype"), values)):
            if dtype not in self._known_dtypes[field.name]:
                if dtype_descriptor(dtype) is None or dtype != field.dtype:
                    return None
                self._known_dtypes[field.name].add(dtype)
        shapes = set(map(operator.attrgetter("shape"), values))
        if any(len(shape) != field.ndim for shape in shapes):
            return None
        self.shapes[field.name] |= shapes
        if len(shapes) == 1:
            return 8 * field.ndim + int(values[0].nbytes)
        return 8 * field.ndim + np.fromiter(map(operator.attrgetter("nbytes"), values), np.int64, len(values))

    def _sizes_one_by_one(self, records: Sequence[Mapping[str, Any]], start: int, stop: int) -> np.ndarray[Any, Any]:
        sizes = np.empty(stop - start, dtype=np.int64)
        fields = self._schema.fields
        for index in range(start, stop):
            try:
                values = self._schema.checked_values(records[index], index)
            except (TypeError, ValueError) as error:
                raise _OutsideTheFormatError from error
            sizes[index - start] = _stored_size(self._schema, values)
            for field, value in zip(fields, values, strict=True):
                if field.kind == KIND_ARRAY:
                    self.shapes[field.name].add(value.shape)
        return sizes


def _plain_sizes(field: FieldSpec, values: list[Any]) -> int | np.ndarray[Any, Any] | None:
    """The stored size of each plain value of a field, or None unless each is as ``checked_values`` wants it."""
    if set(map(type, values)) != {_EXACT_TYPES[field.kind]}:
        return None
    if field.kind == KIND_INT:
        try:
            np.array(values, dtype=np.int64)  # Raises for an int outside 64 bits, unlike min and max, in one pass.
        except OverflowError:
            return None
    if field.kind == KIND_STR:
        # An ASCII str is as long as its UTF-8 (and asking is free); others are encoded, which also
        # refuses a lone surrogate as checked_values does.
        if all(map(str.isascii, values)):
            return 8 + np.fromiter(map(len, values), np.int64, len(values))
        try:
            return 8 + np.fromiter(map(len, map(str.encode, values)), np.int64, len(values))
        except UnicodeEncodeError:
            return None
    if field.kind == KIND_BYTES:
        return 8 + np.fromiter(map(len, values), np.int64, len(values))
    return 8


def _record_slice(records: Sequence[Mapping[str, Any]], start: int, stop: int) -> list[Mapping[str, Any]]:
    if isinstance(records, (list, tuple)):
        return list(records[start:stop])
    return [records[index] for index in range(start, stop)]


class _RowGroupCutter:
    """Where row groups end: each closes at the record that brings it to the target bytes or row count."""

    def __init__(self) -> None:
        self.ends: list[int] = []
        self._seen = 0
        self._pending_rows = 0
        self._pending_bytes = 0

    def add(self, sizes: np.ndarray[Any, Any]) -> None:
        """Takes the stored sizes of the next records."""
        totals = np.cumsum(sizes)
        count = len(sizes)
        position = 0
        while position < count:
            before = int(totals[position - 1]) if position else 0
            # The first record at which the bytes, or else the rows, reach their limit.
            by_bytes = int(np.searchsorted(totals, before + _ROW_GROUP_TARGET_BYTES - self._pending_bytes))
            last = min(by_bytes, position + _ROW_GROUP_MAX_ROWS - self._pending_rows - 1)
            if last >= count:
                self._pending_bytes += int(totals[-1]) - before
                self._pending_rows += count - position
                break
            self.ends.append(self._seen + last + 1)
            self._pending_rows = self._pending_bytes = 0
            position = last + 1
        self._seen += count

    def finish(self) -> list[int]:
        """Closes the last row group; returns every row group's end."""
        if self._pending_rows:
            self.ends.append(self._seen)
            self._pending_rows = self._pending_bytes = 0
        return self.ends


class EmptyShapes(NamedTuple):
    """Extents after the first zero one, which a nested-list column cannot hold.

    Rows whose extents match ``fill`` are not listed; ``rows``/``shapes`` list the others.
    """

    fill: tuple[int, ...]
    rows: tuple[int, ...]
    shapes: tuple[tuple[int, ...], ...]

    def shape(self, extents: tuple[int, ...], row: int | None) -> tuple[int, ...]:
        """The full shape of an empty array from its nested-list extents; ``row`` is its position or None."""
        first = extents.index(0)
        if row is not None:
            found = bisect.bisect_left(self.rows, row)
            if found < len(self.rows) and self.rows[found] == row:
                listed = self.shapes[found]
                if listed[: first + 1] != extents[: first + 1]:
                    raise ValueError(
                        f"the shape {listed} that field metadata {FIELD_EMPTY_SHAPES_KEY.decode()!r} lists for "
                        f"record {row} contradicts its nested lists, whose extents begin {extents[: first + 1]}"
                    )
                return listed
        return extents[: first + 1] + self.fill[first:]


def empty_shapes_entry(shapes: Sequence[tuple[int, ...]]) -> bytes | None:
    """Field metadata for a nested-list array field; None where the lists keep every extent.

    ``fill`` takes each dimension's most common lost extent (smallest on ties), so usually no row is listed.
    """
    losing = [(row, shape, shape.index(0)) for row, shape in enumerate(shapes) if 0 in shape[:-1]]
    if not any(any(shape[first + 1 :]) for _, shape, first in losing):
        return None  # Zeros after the first zero: what nested lists give back anyway.
    ndim = len(shapes[0])
    fill = []
    for dimension in range(1, ndim):
        counts = collections.Counter(shape[dimension] for _, shape, first in losing if first < dimension)
        fill.append(min(counts, key=lambda extent: (-counts[extent], extent)) if counts else 0)
    listed = [[row, list(shape)] for row, shape, first in losing if list(shape[first + 1 :]) != fill[first:]]
    return json.dumps({"fill": fill, "rows": listed}, separators=(",", ":")).encode("ascii")


def parse_empty_shapes(value: bytes, ndim: int, count: int) -> EmptyShapes:
    """Reads and checks the field metadata :func:`empty_shapes_entry` writes."""
    key = FIELD_EMPTY_SHAPES_KEY.decode()
    try:
        entry = json.loads(value.decode("ascii"))
    except (ValueError, RecursionError) as error:
        raise ValueError(f"field metadata {key!r} is not JSON") from error

    def extents(value: object, length: int) -> tuple[int, ...] | None:
        if not isinstance(value, list) or len(value) != length:
            return None
        if not all(type(extent) is int and 0 <= extent < 2**63 for extent in value):
            return None
        return tuple(value)

    malformed = ValueError(f"field metadata {key!r} is malformed for an array field of {ndim} dimensions")
    if not isinstance(entry, dict) or set(entry) != {"fill", "rows"} or not isinstance(entry["rows"], list):
        raise malformed
    fill = extents(entry["fill"], ndim - 1)
    if fill is None or ndim < 2:
        raise malformed
    rows: list[int] = []
    shapes: list[tuple[int, ...]] = []
    for item in entry["rows"]:
        if not isinstance(item, list) or len(item) != 2:
            raise malformed
        row, shape = item[0], extents(item[1], ndim)
        if type(row) is not int or not 0 <= row < count or (rows and row <= rows[-1]):
            raise malformed
        if shape is None or 0 not in shape[:-1]:
            raise malformed
        rows.append(row)
        shapes.append(shape)
    return EmptyShapes(fill, tuple(rows), tuple(shapes))


def _write_tinax_records(
    destination: pathlib.Path,
    plan: _TinaxPlan,
    records: Sequence[Mapping[str, Any]],
    *,
    overwrite: bool,
    reporter: Reporter,
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = plan.schema
    arrow_schema = _native_arrow_schema(schema, plan.fixed_shapes, plan.empty_shapes)
    digest = hashlib.sha256()
    with atomic_path(destination, overwrite=overwrite) as temporary:
        # Dictionary encoding only for plain values: an array column's numbers rarely repeat, and the
        # abandoned dictionary page of every row group would grow the file by half.
        plain = [field.name for field in schema.fields if field.kind != KIND_ARRAY]
        writer = pq.ParquetWriter(temporary, arrow_schema, write_page_checksum=True, use_dictionary=plain)
        try:
            # pyarrow encodes a row group, and hashlib hashes its records, without holding the GIL: one
            # thread does both while this one converts the next row group, at most one ahead.
            with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tinax-parquet-writer") as thread:
                written: concurrent.futures.Future[int] | None = None
                start = 0
                for end in plan.group_ends:
                    # The records were checked when the plan was made; here they are only converted.
                    table, encodings = _row_group_table(schema, arrow_schema, _record_slice(records, start, end))
                    if written is not None:
                        reporter.advance(written.result())
                    written = thread.submit(_write_row_group, writer, table, digest, encodings)
                    start = end
                if written is not None:
                    reporter.advance(written.result())
            header = RecordHeader(schema, len(records), digest.hexdigest())
            placeholder = _checksum_value(_ZERO_DIGEST, [_ZERO_DIGEST] * len(plan.group_ends))
            writer.add_key_value_metadata({METADATA_KEY: header.to_json_bytes(), CHECKSUM_KEY: placeholder})
        except pa.ArrowException as error:
            _close_quietly(writer)
            raise OSError(f"writing {str(destination)!r} failed: {error}") from error
        except BaseException:
            _close_quietly(writer)
            raise
        try:
            writer.close()
        except pa.ArrowException as error:
            raise OSError(f"writing {str(destination)!r} failed: {error}") from error
        seal_checksums(temporary)


def _checksum_value(footer_digest: str, group_digests: Sequence[str]) -> bytes:
    """Returns the checksum entry: fixed-length JSON, so a digest can be patched in place."""
    entry = {"footer_sha256": footer_digest, "row_groups_sha256": list(group_digests)}
    return json.dumps(entry, separators=(",", ":")).encode("ascii")


def _read_raw_footer(handle: Any, what: str) -> tuple[bytes, int]:
    """Reads an open Parquet file's footer with its 8-byte trailer, and its offset; ValueError if not Parquet."""
    size = handle.seek(0, os.SEEK_END)
    handle.seek(0)
    if size < 12 or handle.read(4) != _MAGIC:
        raise ValueError(f"{what} does not start with the Parquet magic bytes")
    handle.seek(size - 8)
    trailer = handle.read(8)
    length = int.from_bytes(trailer[:4], "little")
    if trailer[4:] != _MAGIC or length > size - 12:
        raise ValueError(f"{what} does not end with a Parquet footer")
    start = size - 8 - length
    handle.seek(start)
    return handle.read(length) + trailer, start


def _row_group_ranges(metadata: Any, footer_start: int, what: str) -> list[tuple[int, int]]:
    """Returns the byte range of every row group, checking that they tile the data."""
    ranges = []
    expected_start = len(_MAGIC)
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        start = end = expected_start
        for column in range(row_group.num_columns):
            chunk = row_group.column(column)
            first = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
            if first != end:
                raise ValueError(f"{what}: row group {group} does not follow the bytes before it")
            end = first + chunk.total_compressed_size
        ranges.append((start, end))
        expected_start = end
    if expected_start != footer_start:
        raise ValueError(f"{what}: its row groups do not end where its footer starts")
    return ranges


def _digest_range(handle: Any, start: int, end: int) -> str:
    digest = hashlib.sha256()
    handle.seek(start)
    remaining = end - start
    while remaining:
        chunk = handle.read(min(remaining, _HASH_CHUNK))
        if not chunk:
            raise ValueError("the file ends inside a row group")
        digest.update(chunk)
        remaining -= len(chunk)
    return digest.hexdigest()


def _footer_digest(footer: bytes, stored: bytes, group_digests: Sequence[str]) -> str:
    """The footer's digest: its bytes with the checksum entry's footer digest as zeros."""
    if footer.count(stored) != 1:
        raise ValueError("its checksum entry cannot be found in its footer")
    return hashlib.sha256(footer.replace(stored, _checksum_value(_ZERO_DIGEST, group_digests))).hexdigest()


def seal_checksums(path: pathlib.Path) -> None:
    """Writes the digests into a closed file whose checksum entry holds zero placeholders.

    Row-group digests first, then the footer's; same lengths, so the footer keeps its layout.
    """
    import pyarrow.parquet as pq

    metadata = pq.ParquetFile(path).metadata
    with open(path, "r+b") as handle:
        try:
            footer, footer_start = _read_raw_footer(handle, str(path))
            ranges = _row_group_ranges(metadata, footer_start, str(path))
        except ValueError as error:
            raise OSError(f"sealing {str(path)!r} failed: {error}") from error
        placeholder = _checksum_value(_ZERO_DIGEST, [_ZERO_DIGEST] * len(ranges))
        if footer.count(placeholder) != 1:
            raise OSError(f"sealing {str(path)!r} failed: its footer holds no checksum entry to fill in")
        group_digests = [_digest_range(handle, start, end) for start, end in ranges]
        with_groups = footer.replace(placeholder, _checksum_value(_ZERO_DIGEST, group_digests))
        footer_digest = hashlib.sha256(with_groups).hexdigest()
        sealed = with_groups.replace(
            _checksum_value(_ZERO_DIGEST, group_digests), _checksum_value(footer_digest, group_digests)
        )
        handle.seek(footer_start)
        handle.write(sealed)
        handle.flush()


def _parse_checksums(stored: bytes, groups: int) -> tuple[str, list[str]]:
    try:
        entry = json.loads(stored.decode("ascii"))
    except (ValueError, RecursionError) as error:
        raise ValueError("its checksum entry is not JSON") from error
    if not isinstance(entry, dict):
        raise ValueError("its checksum entry is not a JSON object")
    digests = entry.get("row_groups_sha256")
    footer_digest = entry.get("footer_sha256")
    if (
        set(entry) != {"footer_sha256", "row_groups_sha256"}
        or not isinstance(digests, list)
        or len(digests) != groups
        or not all(_is_digest(value) for value in [footer_digest, *digests])
        or stored != _checksum_value(footer_digest, digests)  # type: ignore[arg-type]
    ):
        raise ValueError(f"its checksum entry is malformed or does not list {groups} row groups")
    return footer_digest, digests  # type: ignore[return-value]


def _is_digest(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(char in "0123456789abcdef" for char in value)


def _write_plain_table(destination: pathlib.Path, table: pa.Table, *, overwrite: bool, reporter: Reporter) -> None:
    """Writes the table as ``pq.write_table`` does, plus page checksums and the checksum entry.

    The entry's length depends on the row-group count, so a file that guessed it wrong is written again.
    """
    import pyarrow.parquet as pq

    with atomic_path(destination, overwrite=overwrite) as temporary:
        groups = max(1, -(-table.num_rows // _PYARROW_ROW_GROUP_ROWS))
        _write_table_with_entry(temporary, table, groups)
        written = pq.ParquetFile(temporary).metadata.num_row_groups
        if written != groups:
            _write_table_with_entry(temporary, table, written)
        seal_checksums(temporary)
        # One write, as tinax 0.2 wrote the table (its row groups are pyarrow's), so one step; before the
        # file is published, so that a callback that raises still leaves nothing behind.
        reporter.advance(table.num_rows)


def _write_table_with_entry(path: pathlib.Path, table: pa.Table, groups: int) -> None:
    import pyarrow.parquet as pq

    # pyarrow.parquet.write_table's own writer and defaults (so 0.2's columns, encodings and row groups),
    # with page checksums and, after the Arrow schema in the key-value metadata, the checksum entry.
    with pq.ParquetWriter(path, table.schema, write_page_checksum=True) as writer:
        writer.write_table(table)
        writer.add_key_value_metadata({CHECKSUM_KEY: _checksum_value(_ZERO_DIGEST, [_ZERO_DIGEST] * groups)})


def _close_quietly(writer: Any) -> None:
    import pyarrow as pa

    # The temporary file is discarded anyway; the first error is the one to report.
    with contextlib.suppress(pa.ArrowException, OSError):
        writer.close()


def _stored_size(schema: RecordSchema, values: list[Any]) -> int:
    size = 0
    for field, value in zip(schema.fields, values, strict=True):
        if field.kind == KIND_ARRAY:
            size += value.nbytes + 8 * value.ndim
        elif field.kind in (KIND_STR, KIND_BYTES):
            size += len(value) + 8
        else:
            size += 8
    return size


#: A part of every record's encoding in a row group: a matrix of one row of bytes per record, or
#: the per-record lengths and the concatenated bytes of a part whose length varies.
_EncodedPart = np.ndarray[Any, Any] | tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]


def _write_row_group(writer: Any, table: pa.Table, digest: Any, encodings: np.ndarray[Any, Any]) -> int:
    """Writes a row group and adds its records' encodings to the content digest; returns its rows."""
    digest.update(encodings)
    writer.write_table(table, row_group_size=table.num_rows)
    return int(table.num_rows)


def _row_group_table(
    schema: RecordSchema, arrow_schema: pa.Schema, rows: list[Mapping[str, Any]]
) -> tuple[pa.Table, np.ndarray[Any, Any]]:
    """One row group's columns and the records' tinax encodings (for the content digest), built column-wise."""
    import pyarrow as pa

    count = len(rows)
    columns = []
    parts: list[_EncodedPart] = []
    for position, field in enumerate(schema.fields):
        values = list(map(operator.itemgetter(field.name), rows))
        arrow_type = arrow_schema.field(position).type
        if field.kind == KIND_NONE:
            columns.append(pa.nulls(count))
        elif field.kind in (KIND_INT, KIND_FLOAT):
            numbers = np.array(values, dtype=np.int64 if field.kind == KIND_INT else np.float64)
            columns.append(pa.array(numbers, arrow_type))
            parts.append(_little_endian(numbers).view(np.uint8).reshape(count, 8))
        elif field.kind == KIND_BOOL:
            columns.append(pa.array(values, arrow_type))
            parts.append(np.array(values, dtype=np.bool_).view(np.uint8).reshape(count, 1))
        elif field.kind in (KIND_STR, KIND_BYTES):
            column = pa.array(values, arrow_type)
            columns.append(column)
            parts.extend(_sized_parts(column, count))
        else:
            assert field.dtype is not None
            assert field.ndim is not None
            column, array_parts = _array_column_and_parts(arrow_type, field.dtype, field.ndim, values)
            columns.append(column)
            parts.extend(array_parts)
    return pa.Table.from_arrays(columns, schema=arrow_schema), _joined_encodings(count, parts)


def _little_endian(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return array.astype(array.dtype.newbyteorder("<"), copy=False)


def _sized_parts(column: pa.Array, count: int) -> list[_EncodedPart]:
    """The encoding parts of a str or bytes column: each value's length as a uint64, then its bytes."""
    _, offsets_buffer, data_buffer = column.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype="<i8", count=count + 1, offset=8 * column.offset)
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.empty(0, np.uint8)
    lengths = np.diff(offsets)
    header = lengths.astype("<u8").view(np.uint8).reshape(count, 8)
    return [header, (lengths, data[offsets[0] : offsets[-1]])]


def _array_column_and_parts(
    arrow_type: pa.DataType, dtype: np.dtype[Any], ndim: int, arrays: list[np.ndarray[Any, Any]]
) -> tuple[pa.Array, list[_EncodedPart]]:
    """An array field's column and encoding parts (the extents as uint64s, then the elements)."""
    import pyarrow as pa

    count = len(arrays)
    storage = _storage(dtype)
    if isinstance(arrow_type, pa.FixedShapeTensorType) or not pa.types.is_large_list(arrow_type):
        # One shape in every record: a single block holds the row group's arrays. The dtype is given
        # because NumPy would otherwise turn big-endian elements native, and the encoding keeps their order.
        block = np.concatenate(arrays, dtype=dtype) if ndim else np.stack(arrays, dtype=dtype)
        block = block.reshape(count, *arrays[0].shape)
        extents = np.frombuffer(struct.pack(f"<{ndim}Q", *block.shape[1:]), dtype=np.uint8)
        parts: list[_EncodedPart] = [
            np.broadcast_to(extents, (count, extents.size)),
            block.reshape(count, -1).view(np.uint8),
        ]
        stored = _to_storage(block, storage)
        if isinstance(arrow_type, pa.FixedShapeTensorType):
            size = int(np.prod(arrow_type.shape, dtype=np.int64))
            tensors = pa.FixedSizeListArray.from_arrays(pa.array(stored.reshape(-1)), size)
            return pa.ExtensionArray.from_storage(arrow_type, tensors), parts
        # 0-d arrays of one dtype: a plain column of their values.
        return pa.array(stored.reshape(-1), arrow_type), parts
    contiguous = [array if array.flags.c_contiguous else np.ascontiguousarray(array) for array in arrays]
    shapes = np.array([array.shape for array in contiguous], dtype="<u8").reshape(count, ndim)
    elements = [array.reshape(-1).view(np.uint8) for array in contiguous]
    lengths = np.fromiter(map(len, elements), np.int64, count)
    parts = [shapes.view(np.uint8).reshape(count, 8 * ndim), (lengths, np.concatenate(elements))]
    return _array_column(arrow_type, storage, contiguous), parts


def _joined_encodings(count: int, parts: list[_EncodedPart]) -> np.ndarray[Any, Any]:
    """The encodings of ``count`` records, each laid out part after part, one after the other."""
    if not count:
        return np.empty(0, dtype=np.uint8)
    # A part of one length in every record is a matrix too; runs of matrices are joined side by side.
    joined: list[_EncodedPart] = []
    run: list[np.ndarray[Any, Any]] = []
    for part in parts:
        if isinstance(part, tuple) and (part[0] == part[0][0]).all():
            part = part[1].reshape(count, int(part[0][0]))
        if isinstance(part, tuple):
            if run:
                joined.append(np.concatenate(run, axis=1))
                run = []
            joined.append(part)
        else:
            run.append(part)
    if run:
        joined.append(np.concatenate(run, axis=1))
    if len(joined) == 1 and not isinstance(joined[0], tuple):
        return np.ascontiguousarray(joined[0]).reshape(-1)
    # Parts of varying length: every byte is scattered to its place in the concatenated encodings.
    widths = [np.full(count, part.shape[1], np.int64) if not isinstance(part, tuple) else part[0] for part in joined]
    record_sizes = np.sum(widths, axis=0)
    places = np.zeros(count, dtype=np.int64)
    np.cumsum(record_sizes[:-1], out=places[1:])
    encodings = np.empty(int(record_sizes.sum()), dtype=np.uint8)
    for part, width in zip(joined, widths, strict=True):
        if isinstance(part, tuple):
            lengths, data = part
            if data.size:
                starts = np.zeros(count, dtype=np.int64)
                np.cumsum(lengths[:-1], out=starts[1:])
                encodings[np.arange(data.size) + np.repeat(places - starts, lengths)] = data
        elif part.shape[1]:
            encodings[(places[:, None] + np.arange(part.shape[1])).reshape(-1)] = part.reshape(-1)
        places += width
    return encodings


def _array_column(arrow_type: pa.DataType, storage: _Storage, arrays: list[np.ndarray[Any, Any]]) -> pa.Array:
    import pyarrow as pa

    stored = [_to_storage(array, storage) for array in arrays]
    if isinstance(arrow_type, pa.FixedShapeTensorType):
        block = np.stack(stored) if stored else np.empty((0, *arrow_type.shape), storage.dtype)
        size = int(np.prod(arrow_type.shape, dtype=np.int64))
        flat = pa.array(block.reshape(-1))
        tensors = pa.FixedSizeListArray.from_arrays(flat, size)
        return pa.ExtensionArray.from_storage(arrow_type, tensors)
    if not pa.types.is_large_list(arrow_type):
        # 0-d arrays of one dtype: a plain column of their values.
        return pa.array(np.asarray([array.reshape(()) for array in stored], storage.dtype).reshape(-1), arrow_type)
    # Nested lists, one level per dimension: each level's offsets come from the extents.
    flat = pa.array(np.concatenate([array.reshape(-1) for array in stored]) if stored else np.empty(0, storage.dtype))
    ndim = stored[0].ndim - (1 if storage.pairs else 0)
    shapes = np.asarray([array.shape[:ndim] for array in stored], dtype=np.int64).reshape(len(stored), ndim)
    child: pa.Array = pa.FixedSizeListArray.from_arrays(flat, 2) if storage.pairs else flat
    # Level k has one entry per index of the first k dimensions; each entry holds shape[k] items.
    counts = [np.ones(len(stored), dtype=np.int64)]
    for level in range(ndim):
        counts.append(counts[-1] * shapes[:, level])
    for level in reversed(range(ndim)):
        lengths = np.repeat(shapes[:, level], counts[level])
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        child = pa.LargeListArray.from_arrays(pa.array(offsets), child)
    return child.cast(arrow_type)
