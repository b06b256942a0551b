"""Records in ArrayRecord files read back as a random-access Grain source.

A file of tinax records ends in a ``tinax-records`` header record (see
docs/guide/data.md, "The tinax record format"); any other file holds JSON
records, as tinax 0.2 wrote them. grain's ``ArrayRecordDataSource`` knows no
header, so it cannot decode tinax records or spot a changed file. array-record
is imported lazily.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from tinax._core._compat02 import TypeAndAttributeError
from tinax._core.optional import import_optional
from tinax._data._compat02 import UnreadableArrayRecordError
from tinax._data._records._file_columns import (
    WholeColumns,
    fill_threads,
    gather_rows,
    kept_whole,
    slice_rows,
    stacked_alike,
    start_filling,
)
from tinax._data._records._locations import Location, file_size
from tinax._data._records._record_codec import RecordHeader
from tinax._data._records._record_file_source import DEFAULT_CACHE_BYTES, RecordFileSource
from tinax._data._shutdown import check_reads_go_on
from tinax._data._stacking import StackedColumns, stack_records

__all__ = ["ArrayRecordSource", "UnreadableArrayRecordError"]

_INSTALL_HINT = 'pip install "tinax-data[arrayrecord]"'
_HEADER_MAGIC = b"tinax-records\n"
# No readahead: records are read one at a time in random order (buffer size as Grain's own source).
_READER_OPTIONS = "readahead_buffer_size:0"
_FILE_READER_BUFFER_SIZE = 32768
#: The reader of whole blocks of records, in order: with a readahead buffer, one system call reads many
#: one-record chunks (files of ``group_size=1``), where the random-access reader makes one per record.
_BLOCK_READER_OPTIONS = "readahead_buffer_size:1M,max_parallelism:4"
#: The records read and stacked at once into the stacked fields held whole.
_WHOLE_COLUMNS_BLOCK = 4096


def _array_record_module(function: str) -> Any:
    return import_optional(
        "array_record.python.array_record_module", needed_by=f"tinax.data.{function}", install_hint=_INSTALL_HINT
    )


class _LastRecord(NamedTuple):
    """What an ArrayRecord file's last record says: the tinax header (None for JSON records) and the record count."""

    header_bytes: bytes | None
    total: int
    #: JSON records only: SHA-256 of size and last record, to tell a replaced file of as many records apart.
    fingerprint: str | None = None


class ArrayRecordSource(RecordFileSource[_LastRecord]):
    """Grain random-access source over one ArrayRecord file: tinax records exactly, else ``json.loads``/``decode``.

    Pickles as its path and last record; a copy reopens the file on first use and checks it still says the same.
    """

    _header_name = "last record"

    def __init__(
        self,
        path: Location,
        *,
        decode: Callable[[bytes], Any] | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        """Opens the file (an absolute path, for workers) and reads its last record."""
        self._decode = decode
        self._cache_bytes = cache_bytes
        super().__init__(path)

    def _options(self) -> dict[str, Any]:
        return {"decode": self._decode, "cache_bytes": self._cache_bytes}

    def _set_options(self, options: dict[str, Any]) -> None:
        self._decode = options["decode"]
        self._cache_bytes = options.get("cache_bytes", DEFAULT_CACHE_BYTES)

    def _start_process(self) -> None:
        super()._start_process()
        # Guards the stacked fields held whole (see ``_adopt``) while they are filled.
        self._lock = threading.Lock()
        self._block_reader: Any = None
        # The threads reading blocks ahead of the batches into the fields held whole (see ``_whole_arrays``),
        # started once: one that stops at a block of mixed layouts leaves the rest to the batches.
        self._filling: list[threading.Thread] = []
        self._filled_ahead = False

    def _adopt(self, header: _LastRecord) -> None:
        super()._adopt(header)
        if header.header_bytes is None:
            self._count = header.total
        else:
            parsed = self._parse_header(header.header_bytes)
            self._schema = parsed.schema
            self._count = parsed.count
            self.source_id: str = parsed.source_id
        # Batches of stack_records read the stacked fields of every record, held whole where they fit the
        # budget, filled block by block of records as batches reach them.
        ends = [*range(_WHOLE_COLUMNS_BLOCK, self._count, _WHOLE_COLUMNS_BLOCK), self._count] if self._count else []
        self._whole = WholeColumns(ends, self._cache_bytes, self._lock)

    def stacked_at(self, positions: np.ndarray[Any, Any]) -> StackedColumns:
        """Records at valid positions stacked as ``stack_records`` does, from whole held fields where they fit."""
        arrays = self._whole_arrays(positions) if len(positions) else None
        if arrays is not None:
            return StackedColumns(gather_rows(arrays, positions), len(positions))
        return StackedColumns(stack_records(self._getitems(positions.tolist())), len(positions))

    def stacked_range(self, positions: range) -> StackedColumns:
        """:meth:`stacked_at` of consecutive positions."""
        first, stop = positions.start, positions.stop
        arrays = self._whole_arrays(positions) if stop > first else None
        if arrays is not None:
            return StackedColumns(slice_rows(arrays, first, stop), stop - first)
        return StackedColumns(stack_records(self._getitems(list(positions))), stop - first)

    def _whole_arrays(self, positions: np.ndarray[Any, Any] | range) -> dict[str, np.ndarray[Any, Any]] | None:
        """The fields held whole with at least ``positions`` filled, or None; starts the threads filling the rest."""
        whole = self._whole
        arrays = whole.arrays(positions, self._block_fields)
        columns = whole.columns
        if arrays is None or columns is None or columns.complete or self._filled_ahead or not self._reads_blocks():
            return arrays
        with self._lock:
            if not self._filled_ahead:
                # Blocks are read through a reader of each thread's own, without the interpreter lock, while the
                # pipeline's thread slices the blocks already held.
                self._filled_ahead = True
                block_bytes = columns.nbytes / self._count * _WHOLE_COLUMNS_BLOCK
                self._filling = start_filling(self, fill_threads(self._cache_bytes, block_bytes))
        return arrays

    def _reads_blocks(self) -> bool:
        # Whole blocks are stacked from their bytes for tinax-format records of one local file.
        return self._schema is not None and type(self) is ArrayRecordSource and isinstance(self._path, pathlib.Path)

    def _open_ahead(self) -> tuple[Any, _LastRecord]:
        return self._open_file(self._path, options=_BLOCK_READER_OPTIONS)

    def _fill_next(self, reader: Any) -> bool:
        """Reads and stacks the next block the whole fields lack, through ``reader``; False once none is left."""
        whole = self._whole
        with whole.reserving() as reserved:
            if reserved is None:
                return False
            columns, (block,) = reserved
            first = block * _WHOLE_COLUMNS_BLOCK
            stop = min(first + _WHOLE_COLUMNS_BLOCK, self._count)
            check_reads_go_on(f"records {first} to {stop - 1} of {str(self._path)!r}")
            assert self._schema is not None
            fields = self._schema.decode_stacked(reader.read(first, stop))
            if fields is None or not all(kept_whole(array.dtype) for array in fields.values()):
                # Records of more than one layout: the batches stack them as they reach them.
                return False
            with self._lock:
                if columns is whole.columns and not columns.filled(block):
                    return whole.fill(columns, [block], fields)
        return True

    def _block_fields(self, block: int) -> dict[str, np.ndarray[Any, Any]] | None:
        # Called with the lock held: a block's records, read and stacked, where they stack alike.
        first = block * _WHOLE_COLUMNS_BLOCK
        stop = min(first + _WHOLE_COLUMNS_BLOCK, self._count)
        if self._schema is not None:
            # Records of one layout (numbers, arrays of one shape) are stacked from their bytes directly.
            check_reads_go_on(f"records {first} to {stop - 1} of {str(self._path)!r}")
            try:
                data = self._blocks_handle().read(first, stop)
            except RuntimeError:
                data = None  # Read again below, record by record, for the error indexing raises.
            fields = None if data is None else self._schema.decode_stacked(data)
            if fields is not None and all(kept_whole(array.dtype) for array in fields.values()):
                return fields
        return stacked_alike(self._getitems(list(range(first, stop))))

    def _blocks_handle(self) -> Any:
        """The reader of whole blocks (lock held): a local file's own, opened once per process, else the usual one."""
        if type(self) is not ArrayRecordSource or not isinstance(self._path, pathlib.Path):
            return self._handle()
        if self._block_reader is None:
            self._block_reader = self._unchanged(self._open_file(self._path, options=_BLOCK_READER_OPTIONS))
        return self._block_reader

    def _parse_header(self, header_bytes: bytes, path: Location | None = None) -> RecordHeader:
        try:
            return RecordHeader.from_json_bytes(header_bytes)
        except ValueError as error:
            raise self._unreadable(str(error), path) from error

    def _unreadable(self, reason: str, path: Location | None = None) -> UnreadableArrayRecordError:
        where = self._path if path is None else path
        return UnreadableArrayRecordError(f"{str(where)!r} is not a readable ArrayRecord record file: {reason}")

    def _open(self) -> tuple[Any, _LastRecord]:
        return self._open_file(self._path)

    def _open_file(self, path: Location, *, options: str = _READER_OPTIONS) -> tuple[Any, _LastRecord]:
        """Opens one ArrayRecord file and reads its last record; returns the reader and what the record says."""
        module = _array_record_module("read_array_record")
        try:
            reader = module.ArrayRecordReader(str(path), options, file_reader_buffer_size=_FILE_READER_BUFFER_SIZE)
            if not reader.ok():
                # The reader reports its reason only when asked to read.
                reader.read()
                raise self._unreadable("array-record cannot open it", path)
            total = reader.num_records()
            last = reader.read([total - 1])[0] if total else b""
        except RuntimeError as error:
            raise self._unreadable(f"array-record cannot read it ({error})", path) from error
        if not last.startswith(_HEADER_MAGIC):
            # No tinax header (no JSON text starts with its line): JSON records, as 0.2 wrote them.
            size = file_size(path, "ArrayRecord")
            fingerprint = hashlib.sha256(size.to_bytes(8, "little") + last).hexdigest()
            return reader, _LastRecord(None, total, fingerprint)
        header_bytes = last[len(_HEADER_MAGIC) :]
        header = self._parse_header(header_bytes, path)
        if header.count != total - 1:
            raise self._unreadable(f"the header declares {header.count} records but the file holds {total - 1}", path)
        return reader, _LastRecord(header_bytes, total)

    def _position(self, index: int) -> int:
        try:
            return super()._position(index)
        except TypeError as error:
            raise TypeAndAttributeError(str(error)) from error

    def __getitem__(self, index: int) -> Any:
        position = self._position(index)
        check_reads_go_on(f"record {position} of {str(self._path)!r}")
        reader = self._handle()
        try:
            # A one-record range, not a list: array-record reads lists through its thread pool, at a high fixed cost.
            data = reader.read(position, position + 1)[0]
        except RuntimeError as error:
            raise ValueError(f"{str(self._path)!r}: record {position} cannot be read ({error})") from error
        return self._decoded(data, position)

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        """Records at several indices in one array-record call (grain's batched read).

        On any failure they are read again one by one, so the error names the record.
        """
        positions = self._positions(indices)
        if not positions:
            return []
        check_reads_go_on(f"records {positions[0]} to {positions[-1]} of {str(self._path)!r}")
        reader = self._handle()
        first = positions[0]
        try:
            if positions[-1] - first == len(positions) - 1 and positions == list(range(first, first + len(positions))):
                data = reader.read(first, first + len(positions))
            else:
                data = reader.read(positions)
        except RuntimeError:
            return [self[position] for position in positions]
        if self._schema is not None:
            records = self._schema.decode_many(data)
            if records is not None:
                return records
        elif self._decode is None:
            loads = json.loads
            try:
                return [loads(record) for record in data]
            except Exception:
                pass  # Decoded again below, one by one, for the error indexing raises.
        return [self._decoded(record, position) for record, position in zip(data, positions, strict=True)]

    def _positions(self, indices: Sequence[int]) -> list[int]:
        """The positions of several indices, checked as indexing checks each."""
        count = self._count
        if all(type(index) is int and -count <= index < count for index in indices):
            return [index + count if index < 0 else index for index in indices]
        return [self._position(index) for index in indices]

    def _decoded(self, data: bytes, position: int) -> Any:
        """Decodes the record at ``position``, raising what indexing raises for a record that is not well formed."""
        if self._schema is None:
            if self._decode is not None:
                try:
                    return self._decode(data)
                except Exception as error:
                    raise ValueError(
                        f"{str(self._path)!r}: record {position} cannot be decoded by decode ({error!r})"
                    ) from error
            try:
                return json.loads(data)
            except json.JSONDecodeError as error:
                # Still the JSONDecodeError tinax 0.2 raised, now naming the file and the way out.
                refused = json.JSONDecodeError(
                    f"{str(self._path)!r}: record {position} is neither a tinax record nor JSON ({error.msg}); "
                    "for files of another record encoding, pass decode= to read_array_record",
                    error.doc,
                    error.pos,
                )
                refused.add_note(f"reading record {position} of {str(self._path)!r}")
                raise refused from error
            except ValueError as error:  # UnicodeDecodeError, kept as it is.
                error.add_note(
                    f"reading record {position} of {str(self._path)!r}; for files of another record encoding, "
                    "pass decode= to read_array_record"
                )
                raise
        try:
            return self._schema.decode(data)
        except ValueError as error:
            raise ValueError(f"{str(self._path)!r}: record {position} is malformed ({error})") from error

    def __repr__(self) -> str:
        if self._schema is None:
            return f"ArrayRecordSource(path={str(self._path)!r}, records={self._count}, JSON records)"
        return (
            f"ArrayRecordSource(path={str(self._path)!r}, records={self._count}, "
            f"fields={list(self._schema.names)}, source_id={self.source_id!r})"
        )
