"""Records in ArrayRecord files, read back as random-access Grain datasets.

Records ``json.dumps`` takes (judged by the first) are written as tinax 0.2
wrote them, one UTF-8 JSON text each; others go in the tinax record format,
ending in a ``tinax-records`` header record (see docs/guide/data.md, "The tinax
record format"). grain's ``ArrayRecordDataSource`` knows no header, so it cannot
decode tinax records or spot a changed file. array-record is imported lazily.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import pathlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from typing import Any, NamedTuple

import numpy as np

from tinax._core import storage, validation
from tinax._core._compat02 import TypeAndAttributeError
from tinax._core.files import atomic_path
from tinax._core.logs import Operation, get_logger
from tinax._core.optional import import_optional
from tinax._core.progress import Progress, ProgressChoice, require_progress
from tinax._data._compat02 import (
    ArrayRecordWriteError,
    UnreadableArrayRecordError,
    _DestinationIsFolderError,
    _EmptyDestinationError,
    _FolderIsFileError,
    _FolderMissingError,
    _NotJsonError,
    _UnwritableError,
)
from tinax._data._file_columns import WholeColumns, gather_rows, kept_whole, slice_rows, stacked_alike
from tinax._data._locations import Location, file_size
from tinax._data._parquet import DEFAULT_CACHE_BYTES
from tinax._data._paths import DestinationErrors, require_record_path, writable_destination
from tinax._data._record_codec import RecordHeader, RecordSchema
from tinax._data._record_file_source import RecordFileSource
from tinax._data._shutdown import check_reads_go_on
from tinax._data._stacking import StackedColumns, stack_records

__all__ = ["ArrayRecordSource", "ArrayRecordWriteError", "UnreadableArrayRecordError", "write_array_record"]

_logger = get_logger("data")
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


_DESTINATION_ERRORS = DestinationErrors(_FolderMissingError, _FolderIsFileError, _DestinationIsFolderError)
_WRITE_ERRORS: tuple[tuple[type[OSError], type[ArrayRecordWriteError]], ...] = (
    (FileNotFoundError, _FolderMissingError),
    (NotADirectoryError, _FolderIsFileError),
    (IsADirectoryError, _DestinationIsFolderError),
    (PermissionError, _UnwritableError),
)


def _array_record_module(function: str) -> Any:
    return import_optional(
        "array_record.python.array_record_module", needed_by=f"tinax.data.{function}", install_hint=_INSTALL_HINT
    )


def write_array_record(
    path: str | os.PathLike[str],
    records: Iterable[Mapping[str, Any]],
    *,
    group_size: int = 1,
    overwrite: bool = True,
    progress: Progress = None,
) -> None:
    """Writes records to an ArrayRecord file, atomically.

    Records are streamed, so ``records`` may be a generator larger than memory.
    Records ``json.dumps`` takes are written as tinax 0.2 wrote them (UTF-8 JSON,
    read back as ``json.loads`` gives); if the first record holds NumPy arrays or
    bytes, all are written in the tinax record format and read back exactly. The
    file appears only once fully written and flushed; a refused record leaves any
    old file untouched. A successful write logs one INFO line (rows, bytes,
    seconds) to the ``tinax.data`` logger.

    Args:
      path: The file; its folder must exist, and a symlink there is followed. A
        ``gs://`` or ``s3://`` URL is uploaded as one whole object (needs the
        ``gcs`` or ``s3`` extra).
      records: An iterable of records (a ``str``, ``bytes`` or mapping is refused).
      group_size: Records per ArrayRecord chunk: 1 (the default) reads fastest at
        random, larger groups compress better.
      overwrite: Whether a file already at ``path`` is replaced (default True, as in 0.2).
      progress: None, a callable ``progress(done, total)`` (``total`` None for
        records without a length; raising stops the write), or ``"bar"`` for a
        progress bar on standard error (tqdm, else rich).

    Raises:
      TypeError: If an argument has the wrong type, or a record is neither JSON
        (``json``'s error, as in 0.2; also a ValueError after the first record)
        nor in the tinax format.
      ValueError: If ``group_size`` is out of range, ``progress`` is another str,
        or a JSON record is circular.
      ArrayRecordWriteError: A RuntimeError, as in 0.2, if the path is empty, a
        folder, or under a missing folder or a file (also the matching OSError),
        or the write fails.
      FileExistsError: If a file exists at ``path`` (or another writer created the
        object meanwhile) and ``overwrite`` is False.
      ImportError: If array-record, tqdm or rich for ``progress="bar"``, or the
        URL's store client is missing (before anything is written).

    Examples:
      >>> import numpy as np
      >>> from tinax.data import read_array_record, write_array_record
      >>> write_array_record("rows.array_record", ({"x": np.full(2, i), "label": i % 2} for i in range(3)))
      >>> len(read_array_record("rows.array_record"))
      3
    """
    # After a NumPy integer group_size, which tinax 0.2 refused with TypeError, a later refusal is both types.
    with validation.reported_as_both(validation.is_non_python_int(group_size)):
        remote = storage.as_remote(path, "path")
        destination = require_record_path(path, "path", empty_error=_EmptyDestinationError) if remote is None else None
        group_size = validation.require_positive_int(group_size, "group_size")
        validation.require_bool(overwrite, "overwrite")
        if isinstance(records, (Mapping, str, bytes, bytearray)) or not isinstance(records, Iterable):
            validation.fail_type("records", "an iterable of records (not a str, bytes or a single mapping)", records)
        reporting = require_progress(progress, needed_by="tinax.data.write_array_record")
    module = _array_record_module("write_array_record")
    options = f"group_size:{group_size}"
    if remote is None:
        assert destination is not None
        with _reported_as_write_errors(destination):
            destination = writable_destination(destination, _DESTINATION_ERRORS)
        operation = Operation(_logger, "wrote", "records to", destination)
        count = _write_file(module, destination, options, records, overwrite=overwrite, reporting=reporting)
        nbytes = _size(destination) if operation.enabled else None
    else:
        # array-record writes local files only: the whole file is written locally, then published as one
        # object that appears whole or not at all (and, without overwrite, only where none is).
        fs = storage.filesystem(remote, distribution="tinax-data", needed_by="tinax.data.write_array_record")
        operation = Operation(_logger, "wrote", "records to", remote.url)
        with storage.local_copy_to_publish(fs, remote, overwrite=overwrite) as local:
            count = _write_file(module, local, options, records, overwrite=True, reporting=reporting)
            nbytes = _size(local)
    if operation.enabled:
        operation.what = f"{count} {'record' if count == 1 else 'records'} to"
        operation.done(rows=count, nbytes=nbytes)


def _write_file(
    module: Any,
    destination: pathlib.Path,
    options: str,
    records: Iterable[Any],
    *,
    overwrite: bool,
    reporting: ProgressChoice,
) -> int:
    """Writes checked records to a local file, atomically; returns how many."""
    total = len(records) if isinstance(records, Sized) else None
    # The last report comes before the file is published, so a callback that raises leaves nothing behind.
    with (
        _published(destination, overwrite=overwrite) as temporary,
        reporting.reporting(total, unit="rows", description=destination.name) as reporter,
    ):
        return _write_records(module, temporary, options, iter(records), destination, reporter.advance)


def _size(path: pathlib.Path) -> int | None:
    """The size of a file just written, for the log line; None if it cannot be found out."""
    try:
        return path.stat().st_size
    except OSError:
        return None


@contextlib.contextmanager
def _reported_as_write_errors(destination: pathlib.Path) -> Iterator[None]:
    """Raises the file-system failures of the block as ArrayRecordWriteError, the RuntimeError of tinax 0.2."""
    try:
        yield
    except OSError as error:
        if isinstance(error, (RuntimeError, FileExistsError)):
            raise
        kind = next((kind for base, kind in _WRITE_ERRORS if isinstance(error, base)), ArrayRecordWriteError)
        if error.errno is None:
            raise kind(f"writing {str(destination)!r} failed: {error}") from error
        raise kind(error.errno, f"writing {str(destination)!r} failed: {error.strerror}", error.filename) from error


@contextlib.contextmanager
def _published(destination: pathlib.Path, *, overwrite: bool) -> Iterator[pathlib.Path]:
    """``atomic_path``, whose own file-system failures are ArrayRecordWriteError; the block's errors pass unchanged."""
    manager = atomic_path(destination, overwrite=overwrite)
    with _reported_as_write_errors(destination):
        temporary = manager.__enter__()
    try:
        yield temporary
    except BaseException as error:
        # Removes the temporary file and gives the error back.
        manager.__exit__(type(error), error, error.__traceback__)
        raise
    with _reported_as_write_errors(destination):
        manager.__exit__(None, None, None)


@contextlib.contextmanager
def _writing(module: Any, path: pathlib.Path, options: str, destination: pathlib.Path) -> Iterator[Any]:
    try:
        writer = module.ArrayRecordWriter(str(path), options)
    except RuntimeError as error:
        raise ArrayRecordWriteError(f"array-record could not start writing {str(destination)!r}: {error}") from error
    if not writer.ok():
        raise ArrayRecordWriteError(f"array-record could not start writing {str(destination)!r}")
    try:
        yield writer
    except BaseException:
        with contextlib.suppress(RuntimeError):
            writer.close()
        raise
    try:
        writer.close()
    except RuntimeError as error:
        raise ArrayRecordWriteError(f"writing {str(destination)!r} failed: {error}") from error


_NO_RECORD = object()


def _write_records(
    module: Any,
    temporary: pathlib.Path,
    options: str,
    records: Iterator[Any],
    destination: pathlib.Path,
    advance: Callable[[int], None],
) -> int:
    """Writes the records, calling ``advance(1)`` after each; returns how many were written."""
    with _writing(module, temporary, options, destination) as writer:
        first = next(records, _NO_RECORD)
        if first is _NO_RECORD:
            return 0  # A file without records, as tinax 0.2 wrote it.
        # json.dumps with its defaults, as tinax 0.2 encoded records.
        dumps, write = json.dumps, writer.write
        try:
            data = dumps(first).encode("utf-8")
        except (TypeError, ValueError) as error:
            refused = error
        else:
            # What tinax 0.2 could write, written as it wrote it (names held locally: it runs once per record).
            count = 0
            for encoded in itertools.chain([data], (dumps(record).encode("utf-8") for record in records)):
                try:
                    write(encoded)
                except RuntimeError as error:
                    raise _write_failed(destination, error) from error
                advance(1)
                count += 1
            return count
        return _write_tinax_records(writer, first, records, refused, destination, advance)


def _write_tinax_records(
    writer: Any,
    first: Any,
    rest: Iterator[Any],
    refused: Exception,
    destination: pathlib.Path,
    advance: Callable[[int], None],
) -> int:
    """Writes records whose first one is not JSON in the tinax format, or raises what tinax 0.2 raised."""
    try:
        schema = RecordSchema.from_first_record(first)
        data = schema.encode(first, 0)
        if tuple(first) != schema.names:
            raise _fields_out_of_order(schema, first, 0)
    except (TypeError, ValueError) as error:
        # Neither JSON nor the tinax format: json's error, as tinax 0.2 raised it.
        refused.add_note(f"records[0] does not fit the tinax record format either: {error}")
        raise refused from None
    digest = hashlib.sha256(data)
    _write_record(writer, data, destination)
    advance(1)
    count = 1
    # The loop of _write_record, inlined: it runs once per record.
    encode, names, update, write = schema.encode, schema.names, digest.update, writer.write
    for index, record in enumerate(rest, start=1):
        try:
            data = encode(record, index)
            if tuple(record) != names:
                raise _fields_out_of_order(schema, record, index)
        except TypeError:
            raise
        except ValueError as error:
            # A ValueError, and the TypeError tinax 0.2 raised.
            raise validation.TypeAndValueError(
                f"{error}; records must all fit the tinax record format once records[0] is not JSON ({refused})"
            ) from error
        update(data)
        try:
            write(data)
        except RuntimeError as error:
            raise _write_failed(destination, error) from error
        advance(1)
        count += 1
    header = RecordHeader(schema, count, digest.hexdigest())
    _write_record(writer, _HEADER_MAGIC + header.to_json_bytes(), destination)
    return count


def _fields_out_of_order(schema: RecordSchema, record: Any, index: int) -> ValueError:
    return ValueError(
        f"records[{index}] must have the fields of records[0] in its order {list(schema.names)}, got {list(record)}"
    )


def _write_record(writer: Any, data: bytes, destination: pathlib.Path) -> None:
    try:
        writer.write(data)
    except RuntimeError as error:
        raise _write_failed(destination, error) from error


def _write_failed(destination: pathlib.Path, error: RuntimeError) -> ArrayRecordWriteError:
    return ArrayRecordWriteError(f"writing {str(destination)!r} failed: {error}")


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
        arrays = self._whole.arrays(positions, self._block_fields) if len(positions) else None
        if arrays is not None:
            return StackedColumns(gather_rows(arrays, positions), len(positions))
        return StackedColumns(stack_records(self._getitems(positions.tolist())), len(positions))

    def stacked_range(self, positions: range) -> StackedColumns:
        """:meth:`stacked_at` of consecutive positions."""
        first, stop = positions.start, positions.stop
        arrays = self._whole.arrays(positions, self._block_fields) if stop > first else None
        if arrays is not None:
            return StackedColumns(slice_rows(arrays, first, stop), stop - first)
        return StackedColumns(stack_records(self._getitems(list(positions))), stop - first)

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
                refused = _NotJsonError(
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
