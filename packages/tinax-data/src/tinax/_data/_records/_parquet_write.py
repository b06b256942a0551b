"""Writes records to Parquet: 0.2's plain table where pyarrow converts them, else the tinax format.

The tinax format stores Arrow-native columns (tensor or nested-list arrays,
nearest-type storage for dtypes Arrow lacks) plus the header and dtype metadata;
every file also gets page CRCs and SHA-256 digests of row groups and footer,
which pyarrow alone does not write. See docs/guide/data.md, "Writing Parquet
files" and "The tinax record format". The reader is ``_parquet_source``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import math
import operator
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tinax._core import storage, validation
from tinax._core.files import atomic_path
from tinax._core.logs import Operation, get_logger
from tinax._core.progress import Progress, ProgressChoice, Reporter, require_progress
from tinax._data._records._arrow_columns import _array_column as _array_column
from tinax._data._records._arrow_columns import _native_arrow_schema as _native_arrow_schema
from tinax._data._records._arrow_columns import _row_group_table, empty_shapes_entry
from tinax._data._records._arrow_columns import _storage as _storage
from tinax._data._records._arrow_columns import _to_storage as _to_storage
from tinax._data._records._parquet_checksums import (
    _ZERO_DIGEST,
    CHECKSUM_KEY,
    METADATA_KEY,
    _checksum_value,
    seal_checksums,
)
from tinax._data._records._paths import DestinationErrors, require_record_path, writable_destination
from tinax._data._records._record_codec import (
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

__all__ = ["write_parquet_record"]

_logger = get_logger("data")

_ROW_GROUP_TARGET_BYTES = 1 << 20
_ROW_GROUP_MAX_ROWS = 4096
#: Records checked at a time: bounds the lists of field values the checks build.
_CHECK_CHUNK = 1 << 16
#: The rows of a row group pyarrow's ``write_table`` makes by default (its ``_DEFAULT_ROW_GROUP_SIZE``).
_PYARROW_ROW_GROUP_ROWS = 1024 * 1024


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
      TypeError: If an argument has the wrong type, or pyarrow cannot convert a value outside the tinax format.
      ValueError: If ``records`` is empty or its fields differ, ``progress`` is another str, or pyarrow refuses values.
      OverflowError: If an int does not fit in 64 bits (pyarrow's error, as in 0.2).
      FileNotFoundError: If ``path`` is empty (also a ValueError) or its folder does not exist.
      NotADirectoryError: If a part of the folder of ``path`` is a regular file.
      IsADirectoryError: If ``path`` is a folder.
      FileExistsError: If a file exists at ``path`` and ``overwrite`` is False.
      OSError: If the file system or the store refuses the write.
      ImportError: If tqdm or rich for ``progress="bar"``, or the URL's store client, is missing (nothing is written).

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
    plan = _plan_tinax_records(records)
    if isinstance(plan, Exception):
        refused = _plain_table(records) if converted is None else converted
        if isinstance(refused, pa.Table):
            # Only if a pyarrow converts what _pyarrow_refuses says it cannot: then 0.2's path still holds.
            return _publish_plain_table(destination, refused, records, overwrite=overwrite, reporting=reporting)
        # Neither a plain table nor the tinax format: pyarrow's error, as tinax 0.2 raised it.
        refused.add_note(f"the records do not fit the tinax record format either: {plan}")
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


def _plan_tinax_records(records: Sequence[Mapping[str, Any]]) -> _TinaxPlan | TypeError | ValueError:
    """Checks every record against the tinax format, once, and plans the file; the error if they do not fit it."""
    try:
        schema = RecordSchema.from_first_record(records[0])
    except (TypeError, ValueError) as error:
        return error
    checker = _RecordChecker(schema)
    cutter = _RowGroupCutter()
    for start in range(0, len(records), _CHECK_CHUNK):
        sizes = checker.checked_sizes(records, start, min(start + _CHECK_CHUNK, len(records)))
        if isinstance(sizes, Exception):
            return sizes
        cutter.add(sizes)
    if not schema.fields:
        return ValueError("records[0] has no fields")
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

    def checked_sizes(
        self, records: Sequence[Mapping[str, Any]], start: int, stop: int
    ) -> np.ndarray[Any, Any] | TypeError | ValueError:
        """The stored size of each of ``records[start:stop]`` (what row groups are cut by), or why one is refused."""
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

    def _sizes_one_by_one(
        self, records: Sequence[Mapping[str, Any]], start: int, stop: int
    ) -> np.ndarray[Any, Any] | TypeError | ValueError:
        sizes = np.empty(stop - start, dtype=np.int64)
        fields = self._schema.fields
        for index in range(start, stop):
            try:
                values = self._schema.checked_values(records[index], index)
            except (TypeError, ValueError) as error:
                return error
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


def _write_row_group(writer: Any, table: pa.Table, digest: Any, encodings: np.ndarray[Any, Any]) -> int:
    """Writes a row group and adds its records' encodings to the content digest; returns its rows."""
    digest.update(encodings)
    writer.write_table(table, row_group_size=table.num_rows)
    return int(table.num_rows)
