"""Records in ArrayRecord files, read back as random-access Grain datasets.

:func:`write_array_record` writes every input tinax 0.2 could write as 0.2
wrote it: one ArrayRecord record per record, holding
``json.dumps(record)`` encoded as UTF-8, so tinax 0.2's reader, grain's
``ArrayRecordDataSource`` with ``json.loads``, and any other JSON reader
read such a file as before. Whether the records are JSON is decided by the
first one: records whose first record ``json.dumps`` refuses (it holds NumPy
arrays or bytes, which 0.2 could not write) are written in the tinax record
format instead, if they all fit it.

A file in the tinax record format holds one ArrayRecord record per tinax
record, encoded as ``tinax._data._record_codec`` describes, followed by one
last record: the line ``tinax-records`` (with its newline) and the JSON
header. The header goes last because the records are streamed and checked as
they come, and only the end knows their count and digest. JSON never starts
with that line, so the reader tells the two kinds of file apart by the last
record alone.

Why not grain's ``ArrayRecordDataSource``: it gives raw bytes and knows no
header, so it can neither decode tinax records nor tell a changed file from
the one a worker was sent; array-record's own reader still does every read.

array-record is an optional dependency (the ``arrayrecord`` extra), imported
when a function here runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from tinax._core import storage, validation
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
    _IndexTypeError,
    _NotJsonError,
    _OutsideTheFormatError,
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

if TYPE_CHECKING:
    pass

__all__ = [
    "ArrayRecordSource",
    "ArrayRecordWriteError",
    "UnreadableArrayRecordError",
    "write_array_record",
]

_logger = get_logger("data")
_INSTALL_HINT = 'pip install "tinax-data[arrayrecord]"'
_HEADER_MAGIC = b"tinax-records\n"
# No readahead: records are read one at a time in random order. The buffer
# size is the one Grain's own ArrayRecord source uses.
_READER_OPTIONS = "readahead_buffer_size:0"
_FILE_READER_BUFFER_SIZE = 32768
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

    The records are written one at a time, so ``records`` may be a generator
    over more data than fits in memory. Records that ``json.dumps`` takes
    (everything tinax 0.2 could write) are written as 0.2 wrote them: each
    record is the UTF-8 of ``json.dumps(record)``, so 0.2 and any JSON reader
    read the file as before, and :func:`read_array_record` gives back what
    ``json.loads`` gives (a tuple as a list, a non-str key as a str, ...).
    Records whose first record holds NumPy arrays or bytes, which JSON cannot
    hold, are written in the tinax record format if they all fit it (see the
    package README: the same fields in every record, each holding the same
    kind of plain value or NumPy array) and read back exactly.

    The file appears at ``path`` only once every record has been written and
    flushed to disk; if any record is refused, the file that was there (if
    any) is left as it was. A write that succeeds logs one INFO line to the
    ``tinax.data`` logger with its rows, bytes and seconds.

    Args:
      path: Where to write the file. Its folder must exist. A symbolic link
        there is followed: the file it points to is replaced, as tinax 0.2
        wrote through it. A ``gs://`` or ``s3://`` URL (a str or an
        ``etils.epath.Path``) names an object: the file is written locally
        first, then uploaded as one object that appears whole or not at
        all (needs ``tinax-data[gcs]`` or ``tinax-data[s3]``).
      records: An iterable of records (a ``str``, ``bytes`` or mapping, whose
        items would be characters, ints or keys, is refused).
      group_size: Records per ArrayRecord chunk. 1 (the default) gives the
        fastest random access; larger groups compress better but each read
        decompresses the whole group.
      overwrite: Whether a file already at ``path`` is replaced. The default
        replaces it, as tinax 0.2 did; False refuses it.
      progress: None (the default) reports nothing; a callable
        ``progress(done, total)`` is called with records written, from
        ``(0, total)`` to ``(total, total)``, where ``total`` is
        ``len(records)``, or None for records without a length (a
        generator; the last call is then ``(done, done)``); ``"bar"`` draws
        a progress bar on standard error (tqdm, else rich). An exception the
        callback raises stops the write, and nothing is published.

    Raises:
      TypeError: If ``path`` is not a path, ``group_size`` is not an int (or
        is a bool), ``overwrite`` is not a bool, ``progress`` is neither
        None, ``"bar"`` nor callable, ``records`` is not an
        iterable of records, or a record is not JSON-serializable (the
        ``json`` error, as tinax 0.2 let it through) and its records are
        not in the tinax format either (for a record after the first, an
        error that is also a ValueError).
      ValueError: If ``group_size`` is below 1 (or above array-record's
        limit), ``progress`` is a str other than ``"bar"``, or a JSON record
        is circular (``json``'s error).
      ArrayRecordWriteError: If ``path`` is empty (also a
        FileNotFoundError), its folder does not exist (also a
        FileNotFoundError), a part of its folder is a regular file (also a
        NotADirectoryError), ``path`` is a folder (also an
        IsADirectoryError), or the file system or array-record fails to
        write; a RuntimeError, as in tinax 0.2.
      FileExistsError: If a file already exists at ``path`` and ``overwrite``
        is False (for an object: also where another writer created it
        during the upload).
      ImportError: If array-record is not installed, ``progress="bar"``
        and neither tqdm nor rich is, or ``path`` is a URL whose store's
        client is not (before anything is written).

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


def _open_writer(module: Any, path: pathlib.Path, options: str, destination: pathlib.Path) -> Any:
    try:
        writer = module.ArrayRecordWriter(str(path), options)
    except RuntimeError as error:
        raise ArrayRecordWriteError(f"array-record could not start writing {str(destination)!r}: {error}") from error
    if not writer.ok():
        raise ArrayRecordWriteError(f"array-record could not start writing {str(destination)!r}")
    return writer


@contextlib.contextmanager
def _writing(module: Any, path: pathlib.Path, options: str, destination: pathlib.Path) -> Iterator[Any]:
    writer = _open_writer(module, path, options, destination)
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
        try:
            data = _json_record(first)
        except (TypeError, ValueError) as error:
            refused = error
        else:
            # What tinax 0.2 could write, written as it wrote it.
            _write_record(writer, data, destination)
            advance(1)
            count = 1
            # The loop of _json_record and _write_record, inlined: it runs once per record.
            dumps, write = json.dumps, writer.write
            for record in records:
                data = dumps(record).encode("utf-8")
                try:
                    write(data)
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
        data = _tinax_record(schema, first, 0)
    except (TypeError, ValueError) as error:
        # Neither JSON nor the tinax format: json's error, as tinax 0.2 raised it.
        refused.add_note(f"records[0] does not fit the tinax record format either: {error}")
        raise refused from None
    digest = hashlib.sha256(data)
    _write_record(writer, data, destination)
    advance(1)
    count = 1
    # The loop of _tinax_record and _write_record, inlined: it runs once per record.
    encode, names, update, write = schema.encode, schema.names, digest.update, writer.write
    for index, record in enumerate(rest, start=1):
        try:
            data = encode(record, index)
            if tuple(record) != names:
                raise _fields_out_of_order(schema, record, index)
        except TypeError:
            raise
        except ValueError as error:
            raise _OutsideTheFormatError(
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


def _tinax_record(schema: RecordSchema, record: Any, index: int) -> bytes:
    """The encoding of one record in the tinax format.

    Raises:
      TypeError: If the record is not a mapping with str keys, or a value is
        of no supported kind.
      ValueError: If the record does not agree with the schema.
    """
    data = schema.encode(record, index)
    if tuple(record) != schema.names:
        raise _fields_out_of_order(schema, record, index)
    return data


def _fields_out_of_order(schema: RecordSchema, record: Any, index: int) -> ValueError:
    return ValueError(
        f"records[{index}] must have the fields of records[0] in its order {list(schema.names)}, got {list(record)}"
    )


def _json_record(record: Any) -> bytes:
    # json.dumps with its defaults, as tinax 0.2 encoded records.
    return json.dumps(record).encode("utf-8")


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
    #: For JSON records: the SHA-256 of the file's size and last record, so
    #: that a file replaced by another one of as many records is told apart.
    #: None in the tinax format, whose header says more.
    fingerprint: str | None = None


class ArrayRecordSource(RecordFileSource[_LastRecord]):
    """Random access to the records of one ArrayRecord file.

    A Grain random-access data source. A file in the tinax record format gives
    its records back exactly; a file of JSON records (tinax 0.2's format)
    gives ``json.loads`` of each. It pickles as its path and what its last
    record said; an unpickled copy (in a Grain worker, say) opens the file on
    first use and checks that it still says the same.

    Attributes:
      source_id: For the tinax format only: the identity of the records,
        derived from the header (see the package README); equal for equal
        records, whatever the path. JSON files have no identity, since naming
        their content would mean reading all of it.
    """

    _header_name = "last record"

    def __init__(
        self,
        path: Location,
        *,
        decode: Callable[[bytes], Any] | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        """Opens the file and reads its last record.

        Args:
          path: The file, preferably absolute so that workers with another
            working directory find it too.
          decode: Turns a record of a file without the tinax header into
            the record; None reads such records as JSON.
          cache_bytes: The memory budget of the stacked fields held whole
            for batches of ``stack_records``.

        Raises:
          UnreadableArrayRecordError: If the file is not ArrayRecord, or its
            tinax header is malformed.
        """
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
        """The records at valid positions, stacked field by field as ``stack_records`` stacks them.

        From the stacked fields of every record held whole, where they fit
        ``cache_bytes`` and stack alike; else from the records themselves,
        which gives the same arrays or the same error.

        Args:
          positions: Record positions, each at least 0 and below the count.
        """
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
                data = self._handle().read(first, stop)
            except RuntimeError:
                data = None  # Read again below, record by record, for the error indexing raises.
            fields = None if data is None else self._schema.decode_stacked(data)
            if fields is not None and all(kept_whole(array.dtype) for array in fields.values()):
                return fields
        return stacked_alike(self._getitems(list(range(first, stop))))

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

    def _open_file(self, path: Location) -> tuple[Any, _LastRecord]:
        """Opens one ArrayRecord file and reads its last record; returns the reader and what the record says.

        Raises:
          UnreadableArrayRecordError: As the constructor says, naming ``path``.
        """
        module = _array_record_module("read_array_record")
        try:
            reader = module.ArrayRecordReader(
                str(path), _READER_OPTIONS, file_reader_buffer_size=_FILE_READER_BUFFER_SIZE
            )
            if not reader.ok():
                # The reader reports its reason only when asked to read.
                reader.read()
                raise self._unreadable("array-record cannot open it", path)
            total = reader.num_records()
            last = reader.read([total - 1])[0] if total else b""
        except RuntimeError as error:
            raise self._unreadable(f"array-record cannot read it ({error})", path) from error
        if not last.startswith(_HEADER_MAGIC):
            # No tinax header: records of JSON, as tinax 0.2 wrote them (a JSON
            # text never starts with the header's line).
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
            raise _IndexTypeError(str(error)) from error

    def __getitem__(self, index: int) -> Any:
        position = self._position(index)
        check_reads_go_on(f"record {position} of {str(self._path)!r}")
        reader = self._handle()
        try:
            # A one-record range: array-record reads a list of positions
            # through its thread pool, a fixed cost many times one record's.
            data = reader.read(position, position + 1)[0]
        except RuntimeError as error:
            raise ValueError(f"{str(self._path)!r}: record {position} cannot be read ({error})") from error
        return self._decoded(data, position)

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        """Returns the records at several indices, as indexing each would (grain's batched read).

        The records are read with one array-record call (a range when the
        positions are consecutive, as in order and in plain iteration) and
        decoded together. Should the read or any record fail, the records
        are read again one by one, so that the error is the one indexing
        raises and names the record.
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
