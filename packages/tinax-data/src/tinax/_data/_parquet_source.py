"""Random access to a Parquet file's rows: the reader behind ``read_parquet_record``.

Opening reads and checks the footer only; indexing reads, checks and caches the
row group that holds the record, as Arrow buffers under an LRU memory budget.
Imports pyarrow at its top, so only ``read_parquet_record`` imports it. The
layout and checksums are those ``_parquet`` writes (see docs/guide/data.md).
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import hashlib
import itertools
import os
import pathlib
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pyarrow.types as types

from tinax._core.logs import format_bytes, get_logger
from tinax._data._arrow_values import ArrayColumn, column_getter, many_values, require_mappable, stacked_values
from tinax._data._compat02 import CorruptParquetError
from tinax._data._file_columns import WholeColumns, gather_rows, slice_rows
from tinax._data._locations import Location, RemotePath, file_size, open_object, read_object_range
from tinax._data._parquet import (
    CHECKSUM_KEY,
    CHECKSUM_MARKER,
    DEFAULT_CACHE_BYTES,
    FIELD_EMPTY_SHAPES_KEY,
    METADATA_KEY,
    EmptyShapes,
    _digest_range,
    _footer_digest,
    _is_native_array_type,
    _parse_checksums,
    _plain_arrow_type,
    _read_raw_footer,
    _row_group_ranges,
    _storage,
    parse_empty_shapes,
)
from tinax._data._record_codec import (
    KIND_ARRAY,
    KIND_NONE,
    FieldSpec,
    RecordHeader,
    RecordSchema,
    record_position,
)
from tinax._data._record_file_source import RecordFileSource
from tinax._data._shutdown import WINDOW_THREAD_PREFIX, check_reads_go_on
from tinax._data._stacking import StackedColumns, join_stacked, stack_records, stack_values

__all__ = ["CorruptParquetError", "ParquetRecordSource", "UnreadableParquetError"]

try:
    # How pyarrow unpickles a FileMetaData: it parses a footer's Thrift bytes, without opening the file again.
    from pyarrow._parquet import _reconstruct_filemetadata as _parse_footer
except ImportError:  # A pyarrow without it: footers are read by opening each file (see ``read_footer``).
    _parse_footer = None

_SYSTEM_POOL = pa.system_memory_pool()
_logger = get_logger("data")
# Reads out of order past the cache are told once a pass has loaded this many row groups, each serving
# under a quarter of its rows on average.
_LOADS_BEFORE_WARNING = 64
#: The most threads that decode one reader's row groups at once (see ``decode_threads``): past a few, their
#: work under the interpreter lock only slows down the pipeline's thread.
_MOST_DECODE_THREADS = 3
_ROWS_SERVED_FRACTION = 4
#: The last bytes of an object fetched at once on opening it: they hold the footer of most Parquet files.
_FOOTER_WINDOW = 64 * 1024


class UnreadableParquetError(pa.ArrowInvalid):  # type: ignore[misc]
    """pyarrow refuses the file or a row group with ``ArrowInvalid`` (0.2's error); also a ValueError."""


class _RowGroup:
    """One decoded row group: a value getter per column, over Arrow buffers."""

    def __init__(
        self, getters: Sequence[tuple[str, Callable[[int], Any]]], nbytes: int, table: pa.Table | None = None
    ) -> None:
        self.nbytes = nbytes
        self._getters = tuple(getters)
        #: The decoded columns the getters read (which a planned read takes rows of).
        self.table = table

    def record(self, row: int) -> dict[str, Any]:
        record = {}
        for name, getter in self._getters:
            try:
                record[name] = getter(row)
            except ValueError as error:
                raise ValueError(f"column {name!r}: {error}") from error
        return record

    def records(self, rows: np.ndarray[Any, Any]) -> list[dict[str, Any]]:
        """The records of several rows, as :meth:`record` gives each, read column by column."""
        columns = []
        for _, getter in self._getters:
            try:
                columns.append(many_values(getter, rows))
            except ValueError:
                # Found again row by row, so the message names the row that failed.
                return [self.record(row) for row in rows.tolist()]
        names = [name for name, _ in self._getters]
        return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]

    def window_fields(self, rows: np.ndarray[Any, Any]) -> dict[str, np.ndarray[Any, Any] | list[Any]]:
        """Fields of several rows for a window: stacked arrays, or value lists where the dtype depends on the rows."""
        fields: dict[str, np.ndarray[Any, Any] | list[Any]] = {}
        for name, getter in self._getters:
            found = stacked_values(getter, rows)
            fields[name] = many_values(getter, rows) if found is None else found
        return fields

    def stacked(self, rows: np.ndarray[Any, Any]) -> dict[str, np.ndarray[Any, Any]]:
        """Fields of several rows, stacked as ``stack_records`` stacks :meth:`records`.

        A ValueError here makes the caller stack the records, whose error names the record or field.
        """
        stacked = {}
        for name, getter in self._getters:
            found = stacked_values(getter, rows)
            stacked[name] = stack_values(name, many_values(getter, rows)) if found is None else found
        return stacked

    def stacked_slice(self, rows: slice) -> dict[str, np.ndarray[Any, Any]]:
        """:meth:`stacked` of consecutive rows, each field copied out of its column in one piece."""
        stacked = {}
        for name, getter in self._getters:
            found = stacked_values(getter, rows)
            if found is None:
                found = stack_values(name, many_values(getter, np.arange(rows.start, rows.stop)))
            stacked[name] = found
        return stacked

    def whole_stacked(self) -> dict[str, np.ndarray[Any, Any]] | None:
        """Every row's fields stacked from their columns alone; None where a field or row prevents it."""
        if self.table is None:
            return None
        rows = slice(0, self.table.num_rows)
        fields = {}
        for name, getter in self._getters:
            try:
                found = stacked_values(getter, rows)
            except ValueError:
                return None
            if found is None:
                return None
            fields[name] = found
        return fields


def _tinax_getters(
    schema: RecordSchema,
    table: pa.Table,
    empty_shapes: Mapping[str, EmptyShapes],
    positions_column: str | None,
) -> list[tuple[str, Callable[[int], Any]]]:
    """Getters that give a tinax-format row group's records exactly as written (of the columns read).

    ``positions_column`` names the record positions column, needed where ``empty_shapes`` lists rows.
    """
    positions = None
    if positions_column is not None:
        positions = np.asarray(table.column(positions_column).to_numpy(), dtype=np.int64)
    getters: list[tuple[str, Callable[[int], Any]]] = []
    present = set(table.column_names)
    for field in schema.fields:
        if field.name not in present:
            continue
        column = _one_array(table.column(field.name))
        if field.kind != KIND_NONE and column.null_count:
            raise ValueError(f"field {field.name!r} has missing values")
        if field.kind != KIND_ARRAY:
            getters.append((field.name, column_getter(column, "python")))
        else:
            getters.append((field.name, _native_array_getter(field, column, empty_shapes.get(field.name), positions)))
    return getters


def _native_array_getter(
    field: FieldSpec, column: Any, empty: EmptyShapes | None, positions: np.ndarray[Any, Any] | None
) -> Callable[[int], Any]:
    assert field.dtype is not None
    assert field.ndim is not None
    storage = _storage(field.dtype)
    arrays = ArrayColumn(column, dtype=field.dtype, pairs=storage.pairs, ndim=field.ndim)
    if arrays.bad_rows:
        row, reason = next(iter(arrays.bad_rows.items()))
        raise ValueError(f"field {field.name!r} has {reason} in row {row}")
    getter = arrays.getter()
    if empty is None:
        return getter

    def get(row: int) -> Any:
        array = getter(row)
        if array.size or 0 not in array.shape[:-1]:
            return array
        # No element, and extents after the first zero one that the nested lists cannot hold.
        position = None if positions is None else int(positions[row])
        try:
            shape = empty.shape(array.shape, position)
            return np.empty(shape, array.dtype)
        except ValueError as error:
            raise ValueError(f"field {field.name!r}: {error}") from error

    return get


def _mismatched_column(schema: RecordSchema, arrow_schema: pa.Schema) -> str | None:
    """Why a file's columns are not those the header's fields are written as; None where they are."""
    if list(arrow_schema.names) != list(schema.names):
        return "their names differ"
    for field, arrow_type in zip(schema.fields, arrow_schema.types, strict=True):
        if field.kind == KIND_ARRAY and not _is_native_array_type(field, arrow_type):
            # Also the struct<shape, data> columns of tinax 0.3 development builds, which no release wrote.
            return (
                f"column {field.name!r} is {arrow_type}, and an array field is read only from a fixed_shape_tensor "
                "column, nested large_list columns or, for 0-d arrays, a column of its values"
            )
        if field.kind != KIND_ARRAY and arrow_type != _plain_arrow_type(field.kind):
            return f"column {field.name!r} is {arrow_type}, not {_plain_arrow_type(field.kind)}"
    return None


class _Footer(NamedTuple):
    """What a Parquet file's footer says, as far as reading records goes."""

    #: The tinax header, None for a file outside the tinax format.
    header_bytes: bytes | None
    #: The position after the last record of every row group.
    group_ends: tuple[int, ...]
    #: The byte range and SHA-256 of every row group (of files tinax 0.3 wrote).
    group_checks: tuple[tuple[int, int, str], ...] | None
    #: SHA-256 of a non-tinax file's raw footer, to tell a replaced file of as many rows apart.
    footer_sha256: str | None = None
    #: The extents nested-list array columns lose, by field (tinax format only).
    empty_shapes: tuple[tuple[str, EmptyShapes], ...] = ()


def _verified_footer(
    metadata: Any, stored: bytes, footer: bytes, footer_start: int
) -> tuple[tuple[int, int, str], ...]:
    """Checks a raw footer against its checksum entry; returns every row group's byte range and digest."""
    footer_digest, group_digests = _parse_checksums(stored, metadata.num_row_groups)
    if _footer_digest(footer, stored, group_digests) != footer_digest:
        raise ValueError("its footer does not match its checksum: the footer is corrupt")
    ranges = _row_group_ranges(metadata, footer_start, "the file")
    return tuple((start, end, digest) for (start, end), digest in zip(ranges, group_digests, strict=True))


def _empty_shapes(header: RecordHeader, arrow_schema: pa.Schema) -> tuple[tuple[str, EmptyShapes], ...]:
    """The extents each array field's nested lists lose, from its field metadata, checked."""
    found = []
    for field in header.schema.fields:
        value = (arrow_schema.field(field.name).metadata or {}).get(FIELD_EMPTY_SHAPES_KEY)
        if value is None:
            continue
        if field.kind != KIND_ARRAY or field.ndim is None:
            raise ValueError(
                f"column {field.name!r} has field metadata {FIELD_EMPTY_SHAPES_KEY.decode()!r} but holds no arrays"
            )
        try:
            found.append((field.name, parse_empty_shapes(value, field.ndim, header.count)))
        except ValueError as error:
            raise ValueError(f"column {field.name!r}: {error}") from error
    return tuple(found)


class ParquetRecordSource(RecordFileSource[_Footer]):
    """Grain random-access source over one Parquet file, with a per-process row-group cache.

    Pickles as path, options and footer summary; a copy reopens the file on first use and checks the footer.
    """

    _header_name = "footer"
    reads_in_turn = True  # One row group at a time, under the lock; rows are assembled in Python.
    _column_names: tuple[str, ...]

    def __init__(self, path: Location, *, mapping: str = "python", cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        """Opens the file (absolute path or bucket location, for workers) and reads its footer."""
        self._mapping = mapping
        self._cache_bytes = cache_bytes
        super().__init__(path)

    def _options(self) -> dict[str, Any]:
        return {"mapping": self._mapping, "cache_bytes": self._cache_bytes, "columns": self._column_names}

    def _set_options(self, options: dict[str, Any]) -> None:
        self._mapping = options["mapping"]
        self._cache_bytes = options["cache_bytes"]
        self._column_names = tuple(options["columns"])

    def _start_process(self) -> None:
        super()._start_process()
        # Guards the cache, and makes one thread at a time read the file.
        self._lock = threading.Lock()
        self._cache: collections.OrderedDict[int, _RowGroup] = collections.OrderedDict()
        self._cached_bytes = 0
        self._verified: set[int] = set()
        # Rows and bytes decoded so far in this process: the decoded size of a row, for planned reads.
        self._decoded_rows = 0
        self._decoded_bytes = 0
        # Row groups loaded into the cache and rows served so far: a pass that decodes a row group for a
        # few rows each reads out of order past the cache.
        self._loads = 0
        self._rows_served = 0
        self._told_out_of_order = False
        # The threads filling the whole columns (see ``_adopt``) ahead of the batches.
        self._filling: list[threading.Thread] = []

    def _adopt(self, header: _Footer) -> None:
        super()._adopt(header)
        self._group_ends = list(header.group_ends)
        # Batches of stack_records read the stacked fields of the whole file, where they fit the budget.
        self._whole = WholeColumns(self._group_ends, self._cache_bytes, self._lock)
        self._group_checks = header.group_checks
        self._empty_shapes = dict(header.empty_shapes)
        self._positions_column: str | None = None
        if header.header_bytes is None:
            self._count = self._group_ends[-1] if self._group_ends else 0
            return
        parsed = RecordHeader.from_json_bytes(header.header_bytes)
        self._schema = parsed.schema
        self._count = parsed.count
        self.source_id: str = parsed.source_id
        if any(empty.rows for empty in self._empty_shapes.values()):
            # Rows are listed by record position: decoded rows carry theirs, in a column of a name no field has.
            self._positions_column = "tinax.position"
            while self._positions_column in parsed.schema.names:
                self._positions_column += "_"

    @property
    def row_group_ends(self) -> tuple[int, ...]:
        """The position after the last record of every row group, in file order."""
        return tuple(self._group_ends)

    @property
    def checksummed(self) -> bool:
        """Whether the file carries tinax checksums: its footer's, checked on open, and each row group's."""
        return self._group_checks is not None

    @property
    def column_names(self) -> tuple[str, ...]:
        """The names of the file's columns, which are the keys of every row."""
        return self._column_names

    @property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of the file's columns; ValueError if the file changed since the footer was read."""
        return self._handle().schema_arrow

    def _open(self) -> tuple[Any, _Footer]:
        parquet_file, footer = self._open_file(self._path)
        self._column_names = tuple(parquet_file.schema_arrow.names)
        return parquet_file, footer

    def _open_file(self, path: Location) -> tuple[Any, _Footer]:
        """Opens one Parquet file and reads and checks its footer; returns the file and what the footer says."""
        if isinstance(path, RemotePath):
            return self._open_object(path)
        try:
            parquet_file = pq.ParquetFile(path, page_checksum_verification=True)
            metadata = parquet_file.metadata
            arrow_schema = parquet_file.schema_arrow
        except (ValueError, pa.ArrowException, OSError) as error:
            raise _footer_error(path, error) from error
        return parquet_file, self._footer_of(path, metadata, arrow_schema, _raw_footer(path))

    def _open_object(self, path: RemotePath) -> tuple[Any, _Footer]:
        """:meth:`_open_file` for an object: its footer is fetched once, parsed here and handed to pyarrow."""
        object_file = _ObjectFile(open_object(path))
        try:
            raw = _object_footer(object_file)
        except BaseException:
            object_file.close()
            raise
        metadata = None
        if _parse_footer is not None and not isinstance(raw, ValueError):
            try:
                metadata = _parse_footer(pa.py_buffer(raw[0][:-8]))
            except Exception:
                metadata = None  # pyarrow reads the footer itself below, and raises what it raises.
        try:
            parquet_file: Any = _ObjectParquetFile(object_file, metadata=metadata, page_checksum_verification=True)
            metadata = parquet_file.metadata
            arrow_schema = parquet_file.schema_arrow
        except (ValueError, pa.ArrowException, OSError) as error:
            raise _footer_error(path, error) from error
        try:
            return parquet_file, self._footer_of(path, metadata, arrow_schema, raw)
        except BaseException:
            parquet_file.close()
            raise

    def read_footer(self, path: Location) -> tuple[_Footer, pa.Schema, int, int]:
        """Reads and checks a file's footer without opening it for rows (a dataset's per-file cost).

        Returns footer summary, Arrow schema, size and uncompressed bytes; falls back to :meth:`_open_file`.
        """
        try:
            if isinstance(path, RemotePath):
                with contextlib.closing(_ObjectFile(open_object(path))) as object_file:
                    raw = _object_footer(object_file)
                    size = object_file.size
                if isinstance(raw, ValueError):
                    raise raw
                footer, footer_start = raw
            else:
                # Unbuffered: three reads of the bytes the footer needs, not of whole blocks.
                with open(path, "rb", buffering=0) as handle:
                    footer, footer_start = _read_raw_footer(handle, "the file")
                    size = os.fstat(handle.fileno()).st_size
            # Parses the footer's Thrift bytes as pyarrow parses a pickled FileMetaData.
            metadata = _parse_footer(pa.py_buffer(footer[:-8]))
            arrow_schema = metadata.schema.to_arrow_schema()
        except Exception:
            parquet_file, found = self._open_file(path)
            try:
                metadata, arrow_schema = parquet_file.metadata, parquet_file.schema_arrow
            finally:
                parquet_file.close()
            size = file_size(path)
        else:
            found = self._footer_of(path, metadata, arrow_schema, (footer, footer_start))
        stored = sum(metadata.row_group(index).total_byte_size for index in range(metadata.num_row_groups))
        return found, arrow_schema, size, stored

    def _footer_of(
        self, path: Location, metadata: Any, arrow_schema: pa.Schema, raw: tuple[bytes, int] | ValueError
    ) -> _Footer:
        """Checks a footer's row groups, and its tinax header and checksums where present."""
        key_values, group_ends = _footer_row_groups(path, metadata)
        header_bytes = key_values.get(METADATA_KEY)
        stored_checksums = key_values.get(CHECKSUM_KEY)
        if header_bytes is None:
            return self._plain_footer(path, metadata, arrow_schema, raw, group_ends, stored_checksums)
        try:
            header = RecordHeader.from_json_bytes(header_bytes)
        except ValueError as error:
            raise _unreadable_file(path, str(error)) from error
        # Names and types must match; nullability may differ, since missing values are refused when read.
        mismatch = _mismatched_column(header.schema, arrow_schema)
        if mismatch is not None:
            found = {name: str(kind) for name, kind in zip(arrow_schema.names, arrow_schema.types, strict=True)}
            wanted = {field.name: field.describe() for field in header.schema.fields}
            raise _unreadable_file(path, f"its columns {found} do not match the header's fields {wanted}: {mismatch}")
        if metadata.num_rows != header.count or (group_ends[-1] if group_ends else 0) != header.count:
            raise _unreadable_file(
                path, f"the header declares {header.count} records but the file holds {metadata.num_rows}"
            )
        if stored_checksums is None:
            raise _unreadable_file(
                path,
                "it carries a tinax header but no checksums: its footer is damaged, or an older tinax 0.3 "
                "development version wrote it",
            )
        try:
            if isinstance(raw, ValueError):
                raise raw
            footer, footer_start = raw
            group_checks = _verified_footer(metadata, stored_checksums, footer, footer_start)
            empty_shapes = _empty_shapes(header, arrow_schema)
        except ValueError as error:
            raise _unreadable_file(path, str(error)) from error
        return _Footer(header_bytes, group_ends, group_checks, empty_shapes=empty_shapes)

    def _plain_footer(
        self,
        path: Location,
        metadata: Any,
        arrow_schema: pa.Schema,
        raw: tuple[bytes, int] | ValueError,
        group_ends: tuple[int, ...],
        stored_checksums: bytes | None,
    ) -> _Footer:
        """Checks the footer of a plain table: 0.2's, another tool's, or one tinax 0.3 wrote with its checksum entry."""
        try:
            if isinstance(raw, ValueError):
                raise raw
            footer, footer_start = raw
            if stored_checksums is not None:
                group_checks = _verified_footer(metadata, stored_checksums, footer, footer_start)
            elif CHECKSUM_MARKER in footer:
                # A damaged footer can lose its key-value list or the entry's key and still parse.
                raise ValueError("its footer holds a tinax checksum entry that pyarrow does not find in it")
            else:
                group_checks = None
        except ValueError as error:
            raise _unreadable_file(path, str(error), tinax_format=False) from error
        if self._mapping == "numpy":
            require_mappable(arrow_schema, repr(str(path)))
        return _Footer(None, group_ends, group_checks, hashlib.sha256(footer).hexdigest())

    def __getitem__(self, index: int) -> dict[str, Any]:
        position = self._position(index)
        with self._lock:
            self._rows_served += 1
            return self._record(position)

    def _getitems(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Returns the records at several positions, as indexing each would (grain's batched read)."""
        count, path = self._count, self._path
        positions = None
        if all(type(index) is int for index in indices):
            positions = np.fromiter(indices, np.int64, len(indices))
            positions[positions < 0] += count
            if len(positions) and (int(positions.min()) < 0 or int(positions.max()) >= count):
                positions = None  # Checked one by one below, for the error naming the index.
        if positions is None:
            positions = np.asarray([record_position(index, count, path) for index in indices], dtype=np.int64)
        return self.records_at(positions)

    def stacked_at(self, positions: np.ndarray[Any, Any]) -> StackedColumns:
        """Records at valid positions stacked as ``stack_records`` does, taken from the columns where possible.

        Falls back to reading and stacking records, which gives the same arrays or the same error.
        """
        arrays = self._whole_columns(positions)
        if arrays is not None:
            return StackedColumns(gather_rows(arrays, positions), len(positions))
        chosen_groups = self._chosen_groups(positions)
        try:
            columns = join_stacked(
                [
                    (chosen, group.stacked(positions[chosen] - self._group_offset(group_index)))
                    for chosen, group_index, group in chosen_groups
                ]
            )
        except ValueError:
            return StackedColumns(stack_records(self.records_at(positions)), len(positions))
        return StackedColumns(columns, len(positions))

    def stacked_range(self, positions: range) -> StackedColumns:
        """:meth:`stacked_at` of consecutive positions: one slice of each field where one row group holds them."""
        first, stop = positions.start, positions.stop
        arrays = self._whole_columns(positions) if stop > first else None
        if arrays is not None:
            return StackedColumns(slice_rows(arrays, first, stop), stop - first)
        group_index = bisect.bisect_right(self._group_ends, first)
        if stop - first < 1 or bisect.bisect_right(self._group_ends, stop - 1) != group_index:
            return self.stacked_at(np.arange(first, stop, dtype=np.int64))
        with self._lock:
            self._rows_served += stop - first
            group = self._group(group_index, first)
        offset = self._group_offset(group_index)
        try:
            columns = group.stacked_slice(slice(first - offset, stop - offset))
        except ValueError:
            return StackedColumns(stack_records(self.records_at(np.arange(first, stop))), stop - first)
        return StackedColumns(columns, stop - first)

    def may_hold_columns(self) -> bool:
        """Whether stacked batches may be read from whole held columns; the first call reads a row group to tell."""
        whole = self._whole
        if whole.refused or self._count == 0:
            return False
        columns = whole.columns
        if columns is not None and columns.arrays is not None:
            return True
        # The first row group tells: its fields' dtypes and shapes give the bytes of every row.
        return self._whole_columns(range(1)) is not None

    def _whole_columns(self, positions: np.ndarray[Any, Any] | range) -> dict[str, np.ndarray[Any, Any]] | None:
        """The whole stacked columns, holding at least the rows at ``positions``; None if they cannot be held.

        None is final for this process: callers then read row groups, raising as they always did.
        """
        whole = self._whole
        arrays = whole.arrays(positions, self._whole_stacked)
        columns = whole.columns
        if arrays is not None and columns is not None and not columns.complete and not self._filling:
            with self._lock:
                # The cache makes room for the columns; the rest of the file is decoded from the row
                # group after the last one a batch read (in order, the next batches').
                self._fit_cache(0)
                if not self._filling:
                    reference, name = weakref.ref(self), f"{WINDOW_THREAD_PREFIX}-columns"
                    self._filling = [
                        threading.Thread(target=_fill_ahead, args=(reference,), name=f"{name}-{index}")
                        for index in range(self.decode_threads())
                    ]
                    for thread in self._filling:
                        thread.start()
        return arrays

    def expect_positions(self, positions: np.ndarray[Any, Any]) -> None:
        """Tells the fill-ahead threads the upcoming batches' positions, so they decode those row groups first."""
        whole = self._whole
        if whole.refused or (whole.columns is not None and whole.columns.complete) or not len(positions):
            return
        groups = np.searchsorted(np.asarray(self._group_ends, dtype=np.int64), positions, side="right")
        _, firsts = np.unique(groups, return_index=True)
        with self._lock:
            whole.expect(groups[np.sort(firsts)].tolist())

    def largest_group_bytes(self) -> float:
        """The decoded size of the largest row group, as :meth:`decoded_row_bytes` estimates it."""
        firsts = (0, *self._group_ends[:-1])
        most_rows = max((end - first for first, end in zip(firsts, self._group_ends, strict=True)), default=0)
        return self.decoded_row_bytes() * most_rows

    def decode_threads(self) -> int:
        """How many threads decode this reader's row groups at once (at most three, one core left to the pipeline).

        pyarrow decodes without the GIL, but the work around each decode holds it, so more threads only take turns.
        """
        # The cores this process may run on (the affinity mask, where the system has one).
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        fitting = int(self.cache_bytes // 4 // max(self.largest_group_bytes(), 1.0))
        return max(1, min(_MOST_DECODE_THREADS, cores - 1, fitting))

    def _whole_stacked(self, group_index: int) -> dict[str, np.ndarray[Any, Any]] | None:
        # Called with the lock held: one row group's stacked fields, from the cache or decoded for them.
        group = self._cache.get(group_index)
        if group is None:
            group = self._decode(group_index, self._group_offset(group_index), own_memory=False)
        return group.whole_stacked()

    def _fill_next(self, parquet_file: Any) -> bool:
        """Fills the next row group the whole columns lack; False once none is left.

        Decodes outside the lock and copies under it, so batches go on meanwhile.
        """
        whole = self._whole
        with self._lock:
            columns = whole.columns
            if columns is None or columns.complete or whole.refused:
                return False
            group_index = whole.next_to_fill()
            if group_index is None:
                return False  # The rest is being decoded by the other threads.
            done = whole.in_flight[group_index] = threading.Event()
        try:
            group = self._decode(
                group_index, self._group_offset(group_index), own_memory=False, parquet_file=parquet_file
            )
            fields = group.whole_stacked()
            del group
            with self._lock:
                if columns is whole.columns and not columns.filled(group_index):
                    if not whole.fill(columns, group_index, fields):
                        return False
                    self._fit_cache(0)
        finally:
            with self._lock:
                whole.in_flight.pop(group_index, None)
            done.set()
        return True

    def _group_offset(self, group_index: int) -> int:
        return self._group_ends[group_index - 1] if group_index else 0

    def _chosen_groups(self, positions: np.ndarray[Any, Any]) -> list[tuple[np.ndarray[Any, Any], int, _RowGroup]]:
        """The row groups holding valid positions, each with the slots of the positions it holds."""
        if len(positions):
            lowest, highest = int(positions.min()), int(positions.max())
            group_index = bisect.bisect_right(self._group_ends, lowest)
            if group_index == bisect.bisect_right(self._group_ends, highest):
                # One row group holds the batch (rows read in order, mostly): nothing to sort.
                with self._lock:
                    self._rows_served += len(positions)
                    group = self._group(group_index, lowest)
                return [(np.arange(len(positions)), group_index, group)]
        groups = np.searchsorted(np.asarray(self._group_ends, dtype=np.int64), positions, side="right")
        # The batch's positions grouped by row group, each group's in batch order.
        order = np.argsort(groups, kind="stable")
        cuts = np.flatnonzero(np.diff(groups[order])) + 1
        # Records are assembled outside the lock (decoded row groups never change), so grain's threads do not queue.
        chosen_groups: list[tuple[np.ndarray[Any, Any], int, _RowGroup]] = []
        with self._lock:
            self._rows_served += len(positions)
            for chosen in np.split(order, cuts) if len(order) else []:
                group_index = int(groups[chosen[0]])
                chosen_groups.append((chosen, group_index, self._group(group_index, int(positions[chosen[0]]))))
        return chosen_groups

    def records_at(self, positions: np.ndarray[Any, Any]) -> list[dict[str, Any]]:
        """The records at valid positions (each at least 0 and below the count), as indexing gives them."""
        chosen_groups = self._chosen_groups(positions)
        records: list[Any] = [None] * len(positions)
        for chosen, group_index, group in chosen_groups:
            offset = self._group_ends[group_index - 1] if group_index else 0
            try:
                found = group.records(positions[chosen] - offset)
            except ValueError as error:
                # Read again one by one, so the message names the record that failed.
                for position in positions[chosen].tolist():
                    try:
                        group.record(position - offset)
                    except ValueError as record_error:
                        raise ValueError(
                            f"{str(self._path)!r}: record {position} is malformed ({record_error})"
                        ) from record_error
                raise ValueError(
                    f"{str(self._path)!r}: a record of row group {group_index} is malformed ({error})"
                ) from error
            for slot, record in zip(chosen.tolist(), found, strict=True):
                records[slot] = record
        return records

    def _group(self, group_index: int, position: int) -> _RowGroup:
        # Called with the lock held: the cached row group, else the one read and cached now.
        group = self._cache.get(group_index)
        if group is None:
            return self._load(group_index, position)
        self._cache.move_to_end(group_index)
        return group

    def _record(self, position: int) -> dict[str, Any]:
        # Called with the lock held.
        group_index = bisect.bisect_right(self._group_ends, position)
        group = self._group(group_index, position)
        row = position - (self._group_ends[group_index - 1] if group_index else 0)
        try:
            return group.record(row)
        except ValueError as error:
            raise ValueError(f"{str(self._path)!r}: record {position} is malformed ({error})") from error

    def _read_group(self, group_index: int, columns: Sequence[str] | None, parquet_file: Any = None) -> pa.Table:
        # Called with the lock held, so one thread reads the file at a time; or with a handle of the
        # caller's own (see ``_fill_ahead``).
        check_reads_go_on(f"row group {group_index} of {str(self._path)!r}")
        if parquet_file is None:
            parquet_file = self._handle()
        verified = None
        if self._group_checks is not None and group_index not in self._verified:
            verified = self._verify_row_group(group_index)
            self._verified.add(group_index)
        if verified is None:
            table = parquet_file.read_row_group(group_index, columns=None if columns is None else list(columns))
        else:
            # An object's row group is decoded from the bytes just verified, not fetched a second time.
            with self._object_of_group(parquet_file, group_index).staged(*verified):
                table = parquet_file.read_row_group(group_index, columns=None if columns is None else list(columns))
        first = self._group_ends[group_index - 1] if group_index else 0
        expected_rows = self._group_ends[group_index] - first
        if table.num_rows != expected_rows:
            raise ValueError(f"it holds {table.num_rows} rows where the footer says {expected_rows}")
        if self._positions_column is not None:
            positions = pa.array(np.arange(first, first + expected_rows, dtype=np.int64))
            table = table.append_column(self._positions_column, positions)
        return table

    def _getters(self, table: pa.Table) -> list[tuple[str, Callable[[int], Any]]]:
        if self._schema is not None:
            return _tinax_getters(self._schema, table, self._empty_shapes, self._positions_column)
        return [
            (name, column_getter(_one_array(table.column(index)), self._mapping))
            for index, name in enumerate(table.column_names)
        ]

    def _decode(
        self, group_index: int, position: int, *, own_memory: bool = True, parquet_file: Any = None
    ) -> _RowGroup:
        # Called with the lock held, or with a handle of the caller's own: reads, checks and decodes one row group.
        try:
            table = self._read_group(group_index, None, parquet_file)
            if own_memory:
                table = _in_system_memory(table)
            group = _RowGroup(self._getters(table), int(table.nbytes), table)
        except (pa.ArrowException, OSError, ValueError) as error:
            raise _read_error(error)(
                f"{str(self._path)!r}: record {position} cannot be read (row group {group_index}: {error})"
            ) from error
        self._decoded_rows += table.num_rows
        self._decoded_bytes += group.nbytes
        return group

    def _load(self, group_index: int, position: int) -> _RowGroup:
        # Called with the lock held.
        group = self._decode(group_index, position)
        self._note_load()
        self._keep(group_index, group)
        return group

    def _keep(self, group_index: int, group: _RowGroup) -> None:
        # Called with the lock held. Evicted first, so the budget holds while the new row group is added.
        self._fit_cache(group.nbytes)
        self._cache[group_index] = group
        self._cached_bytes += group.nbytes

    def _fit_cache(self, adding: int) -> None:
        # Called with the lock held: evicts row groups until ``adding`` more bytes fit the budget left
        # beside the stacked fields held whole.
        budget = self._cache_bytes - self._whole.nbytes
        while self._cache and self._cached_bytes + adding > budget:
            _, evicted = self._cache.popitem(last=False)
            self._cached_bytes -= evicted.nbytes

    def _note_load(self) -> None:
        # Called with the lock held. In order, or in windows of row groups, every load serves about a row
        # group's rows; out of order past the cache, each serves a few before the cache drops it.
        self._loads += 1
        if self._told_out_of_order or self._loads < _LOADS_BEFORE_WARNING:
            return
        group_rows = self._count / max(len(self._group_ends), 1)
        if _ROWS_SERVED_FRACTION * self._rows_served >= self._loads * group_rows:
            return
        if self.decoded_file_bytes() <= self._cache_bytes:
            return
        self.warn_out_of_order_once(
            "rows of %s are read out of order (random access, or several threads taking rows out of turn): its "
            "decoded rows (about %s) exceed its cache_bytes (%s), so %d row groups of about %d rows were decoded "
            "for %d rows. Pass read_parquet_record a cache_bytes above the decoded size, or read in order "
            "(training_batches plans the reads of a shuffled pass)",
            str(self._path),
            format_bytes(int(self.decoded_file_bytes())),
            format_bytes(self._cache_bytes),
            self._loads,
            round(group_rows),
            self._rows_served,
        )

    def warn_out_of_order_once(self, message: str, *args: object) -> None:
        """Logs a warning that reads out of order past the cache decode row groups again, once per process."""
        if self._told_out_of_order:
            return
        self._told_out_of_order = True
        _logger.warning(message, *args)

    def empty_cache(self) -> None:
        """Drops every cached row group: past the cache, a planned window takes the cache's place."""
        with self._lock:
            self._cache.clear()
            self._cached_bytes = 0
            self._whole.columns = None

    # What planned reads (``tinax._data._planned_reads``) size their windows by.

    @property
    def cache_bytes(self) -> int:
        """The memory budget of the row-group cache."""
        return self._cache_bytes

    def decoded_row_bytes(self) -> float:
        """The decoded size of a row: as measured in this process, else as the footer's uncompressed sizes say."""
        if self._decoded_rows:
            return self._decoded_bytes / self._decoded_rows
        estimate = getattr(self, "_footer_row_bytes", None)
        if estimate is None:
            metadata = self._handle().metadata
            stored = sum(metadata.row_group(index).total_byte_size for index in range(metadata.num_row_groups))
            estimate = self._footer_row_bytes = stored / max(self._count, 1)
        return float(estimate)

    def decoded_file_bytes(self) -> float:
        """The decoded size of every row, as :meth:`decoded_row_bytes` estimates it."""
        return self.decoded_row_bytes() * self._count

    def column_values(self, name: str, *, advance: Callable[[int], None] | None = None) -> list[Any]:
        """Reads one column of every row, in order, as indexing gives the values; ``advance`` gets rows read."""
        values: list[Any] = []
        for group_index in range(len(self._group_ends)):
            first = self._group_ends[group_index - 1] if group_index else 0
            with self._lock:
                try:
                    table = self._read_group(group_index, [name])
                    (getter,) = self._getters(table)
                except (pa.ArrowException, OSError, ValueError) as error:
                    raise _read_error(error)(
                        f"{str(self._path)!r}: column {name!r} cannot be read (row group {group_index}: {error})"
                    ) from error
            column = table.column(0)
            if not _needs_getter(column.type):
                # Scalars: pyarrow's own conversion gives the same values, faster.
                try:
                    values.extend(column.to_pylist())
                except pa.ArrowException:
                    # A damaged value pyarrow refuses: read again row by row, naming the record.
                    pass
                else:
                    if advance is not None:
                        advance(table.num_rows)
                    continue
            for row in range(table.num_rows):
                try:
                    values.append(getter[1](row))
                except ValueError as error:
                    raise ValueError(
                        f"{str(self._path)!r}: record {first + row} is malformed (column {name!r}: {error})"
                    ) from error
            if advance is not None:
                advance(table.num_rows)
        return values

    def _object_of_group(self, parquet_file: Any, group_index: int) -> _ObjectFile:
        """The open object (of a source over objects) that holds a row group."""
        del group_index
        return cast("_ObjectFile", parquet_file.object_file)

    def _verify_row_group(self, group_index: int) -> tuple[int, bytes] | None:
        """Checks a row group's bytes against their digest; returns an object's bytes with their offset."""
        assert self._group_checks is not None
        start, end, expected = self._group_checks[group_index]
        found, data = checked_range(self._path, start, end)
        if found != expected:
            raise CorruptParquetError(
                f"the bytes of row group {group_index} do not match the checksum written with them: it is corrupt"
            )
        return None if data is None else (start, data)

    def __repr__(self) -> str:
        if self._schema is None:
            rows = f"plain Parquet rows, mapping={self._mapping!r}"
        else:
            rows = f"fields={list(self._schema.names)}, source_id={self.source_id!r}"
        return (
            f"ParquetRecordSource(path={str(self._path)!r}, records={self._count}, "
            f"row_groups={len(self._group_ends)}, {rows})"
        )


def _fill_ahead(reference: weakref.ref[ParquetRecordSource]) -> None:
    """Thread body: fills the row groups a reader's whole columns lack until none is left.

    Holds the reader only per row group, so it ends once pipelines are gone; a read error just ends the thread.
    """
    source = reference()
    if source is None:
        return
    parquet_file = None
    try:
        parquet_file, header = source._open()
        if header != source._header:
            return
        while source is not None and source._fill_next(parquet_file):
            del source
            source = reference()
    except Exception:
        return
    finally:
        if parquet_file is not None:
            parquet_file.close()
        source = reference()
        if source is not None:
            with source._lock:
                # Once the last one is out, a later batch may start them again (after the columns were dropped).
                if threading.current_thread() in source._filling:
                    source._filling.remove(threading.current_thread())


class _ObjectFile:
    """An open object as pyarrow reads it: ranged reads, except a staged range served from memory.

    Reads pin the object's version (GCS generation, S3 ETag), so a replaced object fails instead of mixing bytes.
    """

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self.size = int(handle.size)
        self._position = 0
        self._staged: tuple[int, bytes] | None = None
        # gcsfs's files read the object's latest generation; its ranged reads can ask for this one.
        self._generation = (getattr(handle, "details", None) or {}).get("generation")

    @property
    def closed(self) -> bool:
        return bool(self._handle.closed)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self.size}[whence]
        self._position = base + offset
        return self._position

    def read(self, count: int = -1) -> bytes:
        start = self._position
        end = self.size if count is None or count < 0 else min(start + count, self.size)
        staged = self._staged
        if staged is not None and staged[0] <= start and end <= staged[0] + len(staged[1]):
            data = staged[1][start - staged[0] : end - staged[0]]
        elif start >= end:
            data = b""
        else:
            data = self._fetch(start, end)
        self._position = start + len(data)
        return bytes(data)

    def _fetch(self, start: int, end: int) -> bytes:
        # s3fs's error for a read whose ETag no longer matches (s3fs is loaded wherever an S3 object is read).
        expired = getattr(sys.modules.get("s3fs.utils"), "FileExpired", FileNotFoundError)
        _logger.debug("fetching bytes [%d, %d) of the object %r", start, end, self._handle.path)
        try:
            if self._generation is not None:
                data = self._handle.fs.cat_file(self._handle.path, start=start, end=end, generation=self._generation)
            else:
                self._handle.seek(start)
                data = self._handle.read(end - start)
        except (FileNotFoundError, expired) as error:
            raise ValueError(
                f"the object {self._handle.path!r} changed since it was opened (or is gone): {error}"
            ) from error
        return bytes(data)

    @contextlib.contextmanager
    def staged(self, start: int, data: bytes) -> Iterator[None]:
        """Serves reads inside ``[start, start + len(data))`` from ``data`` during the block."""
        self._staged = (start, data)
        try:
            yield
        finally:
            self._staged = None

    def close(self) -> None:
        self._handle.close()


def _object_footer(object_file: _ObjectFile) -> tuple[bytes, int] | ValueError:
    """An object's raw footer (or the ValueError), from one fetch of its last :data:`_FOOTER_WINDOW` bytes."""
    start = max(object_file.size - _FOOTER_WINDOW, 0)
    object_file.seek(start)
    tail = object_file.read()
    with object_file.staged(start, tail):
        try:
            return _read_raw_footer(object_file, "the file")
        except ValueError as error:
            return error


class _ObjectParquetFile(pq.ParquetFile):  # type: ignore[misc]
    """A ``pyarrow.parquet.ParquetFile`` over an open object (ranged reads), which it closes when it is closed."""

    def __init__(self, object_file: _ObjectFile, **options: Any) -> None:
        self.object_file = object_file
        try:
            super().__init__(object_file, **options)
        except BaseException:
            object_file.close()
            raise

    def close(self, force: bool = False) -> None:
        super().close(force=force)
        self.object_file.close()


def checked_range(path: Location, start: int, end: int) -> tuple[str, bytes | None]:
    """The SHA-256 of bytes ``[start, end)`` of a file; for an object also the bytes, so they are fetched once."""
    if isinstance(path, RemotePath):
        _logger.debug("fetching bytes [%d, %d) of the object %r", start, end, path.fs_path)
        data = read_object_range(path, start, end)
        if len(data) != end - start:
            raise ValueError("the file ends inside a row group")
        return hashlib.sha256(data).hexdigest(), data
    with open(path, "rb") as handle:
        return _digest_range(handle, start, end), None


def _raw_footer(path: pathlib.Path) -> tuple[bytes, int] | ValueError:
    """A Parquet file's footer bytes and offset (see ``_read_raw_footer``), or the ValueError saying why not."""
    try:
        with open(path, "rb") as handle:
            return _read_raw_footer(handle, "the file")
    except ValueError as error:
        return error


def _footer_row_groups(path: Location, metadata: Any) -> tuple[dict[bytes, bytes], tuple[int, ...]]:
    """A footer's key-value metadata and the end row of each of its row groups, whose counts are checked."""
    try:
        key_values = metadata.metadata or {}
        group_rows = [metadata.row_group(index).num_rows for index in range(metadata.num_row_groups)]
    except (ValueError, pa.ArrowException, OSError) as error:
        raise _footer_error(path, error) from error
    negative = next((index for index, rows in enumerate(group_rows) if rows < 0), None)
    if negative is not None:
        raise UnreadableParquetError(
            f"{str(path)!r} is not a readable Parquet file: its footer gives row group {negative} "
            f"{group_rows[negative]} rows, a negative count: the footer is damaged"
        )
    return key_values, tuple(itertools.accumulate(group_rows))


def _footer_error(path: Location, error: BaseException) -> BaseException:
    """What to raise where pyarrow cannot read a file's footer, given what pyarrow raised."""
    if isinstance(error, OSError) and not isinstance(error, pa.ArrowException):
        if type(error) is not OSError:  # FileNotFoundError, PermissionError, ...: the file system's word.
            return error
        # pyarrow's plain OSError for an undecodable footer: still an OSError, and tinax's ValueError.
        return CorruptParquetError(
            f"{str(path)!r} is not a readable Parquet file: pyarrow cannot read its footer ({error})"
        )
    # ArrowInvalid (0.2's error for non-Parquet), other pyarrow errors, a damaged name's UnicodeDecodeError.
    return UnreadableParquetError(
        f"{str(path)!r} is not a readable Parquet file: pyarrow cannot read its footer ({error})"
    )


def _unreadable_file(path: Location, reason: str, *, tinax_format: bool = True) -> ValueError:
    what = "a readable tinax Parquet record file" if tinax_format else "a readable Parquet file"
    return ValueError(f"{str(path)!r} is not {what}: {reason}")


def _read_error(error: BaseException) -> type[ValueError]:
    """The error class for an unreadable row group: ValueError, also pyarrow's type where pyarrow refused it."""
    if isinstance(error, CorruptParquetError) or type(error) is OSError:
        return CorruptParquetError
    if isinstance(error, pa.ArrowInvalid):
        return UnreadableParquetError
    return ValueError


def _needs_getter(arrow_type: pa.DataType) -> bool:
    """Whether a column's rows differ from its to_pylist values under some mapping (lists, tensors, structs)."""
    return bool(
        types.is_list(arrow_type)
        or types.is_large_list(arrow_type)
        or types.is_fixed_size_list(arrow_type)
        or types.is_struct(arrow_type)
        or isinstance(arrow_type, pa.BaseExtensionType)
    )


def _in_system_memory(table: pa.Table) -> pa.Table:
    """A copy of a decoded row group in the system allocator.

    pyarrow's pool fragmented around long-lived cached groups (the process grew to about twice the cache size).
    """
    columns: list[pa.Array | pa.ChunkedArray] = []
    for column in table.columns:
        if column.num_chunks == 0:
            columns.append(column)
            continue
        try:
            columns.append(pa.concat_arrays(column.chunks, memory_pool=_SYSTEM_POOL))
        except pa.ArrowException:
            # A type pyarrow cannot concatenate, or a copy it cannot make, stays where it was decoded.
            columns.append(column)
    return pa.Table.from_arrays(columns, schema=table.schema)


def _one_array(column: pa.ChunkedArray) -> pa.Array:
    """A column's values as one array: its only chunk itself, since combining would copy even that."""
    if column.num_chunks == 1:
        return column.chunk(0)
    return column.combine_chunks()
