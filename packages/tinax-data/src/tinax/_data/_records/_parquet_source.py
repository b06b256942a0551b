"""Random access to a Parquet file's rows: the reader behind ``read_parquet_record``.

Opening reads and checks the footer only; indexing reads, checks and caches the
row group that holds the record, as Arrow buffers under an LRU memory budget.
Imports pyarrow at its top, so only ``read_parquet_record`` imports it. The
layout and checksums are those ``_parquet_write`` writes (see docs/guide/data.md).
"""

from __future__ import annotations

import bisect
import collections
import pathlib
import threading
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

import numpy as np
import pyarrow as pa

from tinax._core.logs import format_bytes, get_logger
from tinax._data._compat02 import CorruptParquetError
from tinax._data._records._arrow_values import column_getter
from tinax._data._records._file_columns import (
    WholeColumns,
    fill_threads,
    gather_rows,
    slice_rows,
    start_filling,
    stretches,
    usable_cores,
)
from tinax._data._records._locations import Location
from tinax._data._records._parquet_checksums import DigestProcess
from tinax._data._records._parquet_footer import ParquetOpening, UnreadableParquetError, _Footer, read_error_class
from tinax._data._records._record_codec import RecordHeader, record_position
from tinax._data._records._record_file_source import DEFAULT_CACHE_BYTES, FileSetSource
from tinax._data._records._row_groups import (
    _in_system_memory,
    _needs_getter,
    _one_array,
    _RowGroup,
    _tinax_getters,
    describe_run,
)
from tinax._data._shutdown import check_reads_go_on
from tinax._data._stacking import StackedColumns, join_stacked, stack_records

__all__ = ["CorruptParquetError", "ParquetRecordSource", "UnreadableParquetError"]

_logger = get_logger("data")
# Reads out of order past the cache are told once a pass has loaded this many row groups, each serving
# under a quarter of its rows on average.
_LOADS_BEFORE_WARNING = 64
_ROWS_SERVED_FRACTION = 4
#: Most consecutive row groups one pyarrow call decodes ahead (its threads share them outside the lock).
_GROUPS_PER_READ = 16
#: Fewest consecutive row groups hashed in a child: for fewer, asking costs about what hashing here does.
_CHILD_HASHED_RUN = 4


class AheadReads:
    """A decoding thread's own handle on the file, and the child that hashes its runs of row groups, if any."""

    def __init__(self, parquet_file: Any, hasher: DigestProcess | None) -> None:
        self.parquet_file = parquet_file
        self.hasher = hasher

    def close(self) -> None:
        self.parquet_file.close()
        if self.hasher is not None:
            self.hasher.close()


class ParquetRecordSource(ParquetOpening):
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
        # The threads filling the whole columns (see ``_adopt``) ahead of the batches, and the most row groups
        # each reads at once, with whether it is alone (both set as they start).
        self._filling: list[threading.Thread] = []
        self._fill_reads = (1, True)

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
                    threads = self.decode_threads()
                    self._fill_reads = (self.groups_per_read(), threads == 1)
                    self._filling = start_filling(self, threads)
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
        """How many threads decode this reader's row groups at once, as :func:`fill_threads` sizes them."""
        return fill_threads(self.cache_bytes, self.largest_group_bytes())

    def window_threads(self) -> int:
        """How many threads decode a planned window past the cache, which the pipeline waits for: its core too."""
        return fill_threads(self.cache_bytes, self.largest_group_bytes(), leave_a_core=False)

    def _whole_stacked(self, group_index: int) -> dict[str, np.ndarray[Any, Any]] | None:
        # Called with the lock held: one row group's stacked fields, from the cache or decoded for them.
        group = self._cache.get(group_index)
        if group is None:
            group = self._decode(group_index, self._group_offset(group_index), own_memory=False)
        return group.whole_stacked()

    def _reads_runs(self) -> bool:
        # Consecutive row groups in one call: one local file's; objects and many-file sets stage bytes per group.
        return isinstance(self._path, pathlib.Path) and not isinstance(self, FileSetSource)

    def groups_per_read(self, *, past_cache: bool = False) -> int:
        """How many consecutive row groups a decoding thread reads in one call (one for objects and file sets).

        All threads' reads fit a quarter of the cache while filling the whole columns, a sixteenth past it.
        """
        if not self._reads_runs():
            return 1
        share = 16 if past_cache else 4
        fitting = int(self.cache_bytes // share // max(self.largest_group_bytes(), 1.0))
        threads = self.window_threads() if past_cache else self.decode_threads()
        return max(1, min(_GROUPS_PER_READ, fitting // threads))

    def _open_ahead(self) -> tuple[AheadReads, _Footer]:
        parquet_file, header = self._open()
        # A child per decoding thread pays only where each has a core of its own besides the pipeline's.
        spare = usable_cores() >= 2 * self.decode_threads() + 2
        return AheadReads(parquet_file, DigestProcess() if spare else None), header

    def _fill_next(self, ahead: AheadReads) -> bool:
        """Fills the next row groups (a few in a row) the whole columns lack; False once none is left.

        Decodes outside the lock and copies under it, so batches go on meanwhile.
        """
        whole = self._whole
        most, alone = self._fill_reads
        with whole.reserving(most, alone=alone) as reserved:
            if reserved is None:
                return False  # Nothing is left, or the other threads are decoding the rest.
            columns, run = reserved
            group = self._decode(run[0], self._group_offset(run[0]), own_memory=False, ahead=ahead, run=run)
            fields = group.whole_stacked()
            del group
            with self._lock:
                # One copy per field for row groups that follow each other, else per row group; where a batch
                # filled some meanwhile, the others.
                if columns is whole.columns and not whole.fill(columns, run, fields):
                    return False
                self._fit_cache(0)
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
        # caller's own (see ``fill_ahead``).
        check_reads_go_on(f"row group {group_index} of {str(self._path)!r}")
        if parquet_file is None:
            parquet_file = self._handle()
        verified = self._verify_once(group_index)
        # An object's row group is decoded from the bytes just verified, not fetched a second time.
        staged = self._object_of_group(parquet_file, group_index).staged(*verified) if verified else nullcontext()
        with staged:
            table = parquet_file.read_row_group(group_index, columns=None if columns is None else list(columns))
        return self._checked_rows(table, (group_index,))

    def _read_run(self, run: Sequence[int], ahead: AheadReads) -> pa.Table:
        # A local file's row groups in one call, decoded in pyarrow's threads (handle of the caller's).
        for checked in run:
            check_reads_go_on(f"row group {checked} of {str(self._path)!r}")
        if self._group_checks is not None and not self._verified.issuperset(run):
            # Measured: a child pays for long runs read in order; for the shuffles' scattered runs it slowed them.
            hasher = ahead.hasher if len(run) >= _CHILD_HASHED_RUN and not self._whole.told else None
            for first, last in stretches(run):
                self._verify_run(first, last, hasher)
            self._verified.update(run)
        table = ahead.parquet_file.read_row_groups(list(run), use_threads=True)
        return self._checked_rows(table, run)

    def _verify_once(self, group_index: int) -> tuple[int, bytes] | None:
        if self._group_checks is None or group_index in self._verified:
            return None
        verified = self._verify_row_group(group_index)
        self._verified.add(group_index)
        return verified

    def _checked_rows(self, table: pa.Table, run: Sequence[int]) -> pa.Table:
        spans = [(self._group_offset(group), self._group_ends[group]) for group in run]
        expected_rows = sum(stop - first for first, stop in spans)
        if table.num_rows != expected_rows:
            raise ValueError(f"it holds {table.num_rows} rows where the footer says {expected_rows}")
        if self._positions_column is not None:
            positions = np.concatenate([np.arange(first, stop, dtype=np.int64) for first, stop in spans])
            table = table.append_column(self._positions_column, pa.array(positions))
        return table

    def _getters(self, table: pa.Table) -> list[tuple[str, Callable[[int], Any]]]:
        if self._schema is not None:
            return _tinax_getters(self._schema, table, self._empty_shapes, self._positions_column)
        return [
            (name, column_getter(_one_array(table.column(index)), self._mapping))
            for index, name in enumerate(table.column_names)
        ]

    def _decode(
        self,
        group_index: int,
        position: int,
        *,
        own_memory: bool = True,
        ahead: AheadReads | None = None,
        run: Sequence[int] | None = None,
    ) -> _RowGroup:
        # Called with the lock held, or with reads of the caller's own: reads, checks and decodes one row
        # group, or those of ``run`` (which starts with it) as one table (those need ``ahead``).
        groups = f"row group {group_index}"
        try:
            if run is None or len(run) == 1:
                table = self._read_group(group_index, None, None if ahead is None else ahead.parquet_file)
            else:
                assert ahead is not None
                groups = f"row groups {describe_run(run)}"
                table = self._read_run(run, ahead)
            if own_memory:
                table = _in_system_memory(table)
            group = _RowGroup(self._getters(table), int(table.nbytes), table)
        except (pa.ArrowException, OSError, ValueError) as error:
            raise read_error_class(error)(
                f"{str(self._path)!r}: record {position} cannot be read ({groups}: {error})"
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

    # What planned reads (``tinax._data._pipelines._planned_reads``) size their windows by.

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
                    raise read_error_class(error)(
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

    def __repr__(self) -> str:
        if self._schema is None:
            rows = f"plain Parquet rows, mapping={self._mapping!r}"
        else:
            rows = f"fields={list(self._schema.names)}, source_id={self.source_id!r}"
        return (
            f"ParquetRecordSource(path={str(self._path)!r}, records={self._count}, "
            f"row_groups={len(self._group_ends)}, {rows})"
        )
