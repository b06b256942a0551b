"""Records in ArrayRecord files, read back as random-access Grain datasets.

A file in the tinax record format holds one ArrayRecord record per tinax
record, encoded as ``tinax._data._record_codec`` describes, followed by one
last record: the line ``tinax-records`` (with its newline) and the JSON
header. The header goes last because the records are streamed and checked as
they come, and only the end knows their count and digest.

Records that do not fit the format (lists, nested mappings, fields missing
from some records, ints and floats mixed in one field, ints beyond 64 bits,
...) are written as tinax 0.2 wrote every file: one ArrayRecord record per
record, holding ``json.dumps(record)``. Such files, tinax 0.2's included,
read back through ``json.loads``, as 0.2 read them. The writer streams, so it
learns that records do not fit only when it meets the first such record; it
then rewrites the records it has written so far as JSON, reading them back
from its own temporary file, and goes on in JSON.

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
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from tinax._core import validation
from tinax._core.files import atomic_path
from tinax._core.optional import import_optional
from tinax._data._record_codec import RecordHeader, RecordSchema, require_record_file
from tinax._data._record_source import RecordFileSource

if TYPE_CHECKING:
    import grain

__all__ = [
    "ArrayRecordSource",
    "ArrayRecordWriteError",
    "UnreadableArrayRecordError",
    "read_array_record",
    "write_array_record",
]

_INSTALL_HINT = 'pip install "tinax-data[arrayrecord]"'
_HEADER_MAGIC = b"tinax-records\n"
# No readahead: records are read one at a time in random order. The buffer
# size is the one Grain's own ArrayRecord source uses.
_READER_OPTIONS = "readahead_buffer_size:0"
_FILE_READER_BUFFER_SIZE = 32768
# Records read back per call when a write switches to JSON.
_REWRITE_CHUNK = 256


class ArrayRecordWriteError(OSError, RuntimeError):
    """Writing an ArrayRecord file failed.

    An OSError, as tinax reports file-system failures, and a RuntimeError,
    which is what array-record (and so tinax 0.2) raised.
    """


class _FolderMissingError(FileNotFoundError, ArrayRecordWriteError):
    """The folder of the destination does not exist."""


class _DestinationIsFolderError(IsADirectoryError, ArrayRecordWriteError):
    """The destination is a folder."""


class _NotJsonError(json.JSONDecodeError):
    """A record of a file without the tinax header is not JSON: the message names the file and ``decode``."""

    def __init__(self, message: str, doc: str, pos: int) -> None:
        super().__init__(message, doc, pos)
        # JSONDecodeError appends the line and column; the message already says what matters.
        self.args = (message,)

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.args[0], self.doc, self.pos))


class UnreadableArrayRecordError(ValueError, RuntimeError):
    """A file is not an ArrayRecord file tinax can read.

    A ValueError, as tinax reports malformed files, and a RuntimeError, which
    is what array-record (and so tinax 0.2) raised for a file that is not
    ArrayRecord at all.
    """


def _array_record_module(function: str) -> Any:
    return import_optional(
        "array_record.python.array_record_module", needed_by=f"tinax.data.{function}", install_hint=_INSTALL_HINT
    )


def write_array_record(
    path: str | os.PathLike[str],
    records: Iterable[Mapping[str, Any]],
    *,
    group_size: int = 1,
    overwrite: bool = False,
) -> None:
    """Writes records to an ArrayRecord file, atomically.

    The records are checked and written one at a time, so ``records`` may be
    a generator over more data than fits in memory. Records that fit the
    tinax record format (see the package README: the same fields in every
    record, each holding the same kind of plain value or NumPy array, bytes
    and arrays included) are written in it and read back exactly. Any other
    records tinax 0.2 accepted, that is anything ``json.dumps`` takes (lists,
    nested mappings, fields missing from some records, ints beyond 64 bits,
    ...), are written as JSON, one record each, as 0.2 wrote them, and read
    back as ``json.loads`` gives them (a tuple as a list, a non-str key as a
    str, ...).

    The file appears at ``path`` only once every record has been written and
    flushed to disk; if any record is refused, the file that was there (if
    any) is left as it was.

    Args:
      path: Where to write the file. Its folder must exist.
      records: An iterable of records (a ``str``, ``bytes`` or mapping, whose
        items would be characters, ints or keys, is refused).
      group_size: Records per ArrayRecord chunk. 1 (the default) gives the
        fastest random access; larger groups compress better but each read
        decompresses the whole group.
      overwrite: Whether a file already at ``path`` may be replaced. The
        default refuses it.

    Raises:
      TypeError: If ``path`` is not a path, ``group_size`` is not an int (or
        is a bool), ``overwrite`` is not a bool, ``records`` is not an iterable of records, or the records
        are outside the tinax format and one is not JSON-serializable (the
        ``json`` error, as tinax 0.2 let it through).
      ValueError: If ``group_size`` is below 1 (or above array-record's
        limit).
      ArrayRecordWriteError: If the folder of ``path`` does not exist (also a
        FileNotFoundError), ``path`` is a folder (also an IsADirectoryError),
        or array-record fails to write; a RuntimeError, as in tinax 0.2.
      FileExistsError: If a file already exists at ``path`` and ``overwrite``
        is False.
      ImportError: If array-record is not installed.

    Examples:
      >>> import numpy as np
      >>> from tinax.data import read_array_record, write_array_record
      >>> write_array_record("rows.array_record", ({"x": np.full(2, i), "label": i % 2} for i in range(3)))
      >>> len(read_array_record("rows.array_record"))
      3
    """
    destination = validation.require_path(path, "path")
    group_size = validation.require_positive_int(group_size, "group_size")
    validation.require_bool(overwrite, "overwrite")
    if isinstance(records, (Mapping, str, bytes, bytearray)) or not isinstance(records, Iterable):
        validation.fail_type("records", "an iterable of records (not a str, bytes or a single mapping)", records)
    module = _array_record_module("write_array_record")
    if not destination.parent.is_dir():
        raise _FolderMissingError(f"the folder of {str(destination)!r} does not exist")
    if destination.is_dir():
        raise _DestinationIsFolderError(f"{str(destination)!r} is a folder, not a file")
    options = f"group_size:{group_size}"
    with atomic_path(destination, overwrite=overwrite) as temporary:
        _write_records(module, temporary, options, iter(records), destination)


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


def _write_records(
    module: Any, temporary: pathlib.Path, options: str, records: Iterator[Any], destination: pathlib.Path
) -> None:
    schema: RecordSchema | None = None
    digest = hashlib.sha256()
    count = 0
    outside: list[Any] = []  # The first record outside the format, once met.
    with _writing(module, temporary, options, destination) as writer:
        for index, record in enumerate(records):
            try:
                if schema is None:
                    schema = RecordSchema.from_first_record(record)
                data = b"".join(schema.encode_parts(schema.checked_values(record, index)))
                # The format gives every record the fields in records[0]'s
                # order; JSON keeps each record's own order, as tinax 0.2 did.
                if tuple(record) != schema.names:
                    raise ValueError("the record's fields come in another order")
            except (TypeError, ValueError):
                outside.append(record)
                break
            digest.update(data)
            _write_record(writer, data, destination)
            count += 1
        if not outside:
            header = RecordHeader(schema if schema is not None else RecordSchema(()), count, digest.hexdigest())
            _write_record(writer, _HEADER_MAGIC + header.to_json_bytes(), destination)
            return
    # From the first record outside the format on, the whole file is JSON: the
    # records written so far go first, read back from the file just closed.
    with (
        atomic_path(temporary, overwrite=True) as rewritten,
        _writing(module, rewritten, options, destination) as writer,
    ):
        if schema is not None and count:
            for written in _read_back(module, temporary, schema, count):
                _write_record(writer, _json_record(written), destination)
        for record in outside:
            _write_record(writer, _json_record(record), destination)
        for record in records:
            _write_record(writer, _json_record(record), destination)


def _read_back(module: Any, path: pathlib.Path, schema: RecordSchema, count: int) -> Iterator[dict[str, Any]]:
    reader = module.ArrayRecordReader(str(path), _READER_OPTIONS, file_reader_buffer_size=_FILE_READER_BUFFER_SIZE)
    try:
        for start in range(0, count, _REWRITE_CHUNK):
            for data in reader.read(list(range(start, min(start + _REWRITE_CHUNK, count)))):
                yield schema.decode(data)
    finally:
        reader.close()


def _json_record(record: Any) -> bytes:
    # json.dumps with its defaults, as tinax 0.2 encoded records; its TypeError
    # for a value JSON cannot hold propagates as it did from 0.2.
    return json.dumps(record).encode("utf-8")


def _write_record(writer: Any, data: bytes, destination: pathlib.Path) -> None:
    try:
        writer.write(data)
    except RuntimeError as error:
        raise ArrayRecordWriteError(f"writing {str(destination)!r} failed: {error}") from error


def read_array_record(
    path: str | os.PathLike[str], *, decode: Callable[[bytes], Any] | None = None
) -> grain.MapDataset:
    """Opens an ArrayRecord file of records as a random-access dataset.

    A file :func:`write_array_record` wrote in the tinax record format reads
    back exactly as written. Any other file's records are given by
    ``decode`` when it is given; without it they are read as JSON records
    (tinax 0.2's format, and the JSON fallback's) through ``json.loads``, as
    tinax 0.2 read them, and a record that is not JSON raises a ValueError
    naming the path and suggesting ``decode``. Only the last record is read on open. Records are read
    and decoded when they are indexed, so the dataset supports ``len``,
    indexing, ``shuffle`` and every other ``MapDataset`` transformation, and
    it can be sent to Grain's multiprocessing workers (each reopens the file
    on first use).

    Args:
      path: The file.
      decode: For files without the tinax header: a function that turns one
        record's bytes into the record (a protocol buffer parser, say). It
        must be picklable (a module-level function) to reach Grain's worker
        processes. Ignored for files in the tinax format.

    Returns:
      A ``grain.MapDataset`` of records over an :class:`ArrayRecordSource`. A
      record that turns out to be corrupt when it is read raises
      ``ValueError`` naming the path and index (for JSON records, the
      ``json.JSONDecodeError`` tinax 0.2 raised, with the path and index in
      a note).

    Raises:
      TypeError: If ``path`` is not a path, or ``decode`` is neither None nor
        callable.
      FileNotFoundError: If no file exists at ``path`` (a folder included).
      UnreadableArrayRecordError: If ``path`` is not an ArrayRecord file, or
        holds a tinax header that is malformed or from a newer format
        version (a ValueError, and the RuntimeError tinax 0.2 raised); the
        cause is chained.
      ImportError: If array-record is not installed.

    Examples:
      >>> import numpy as np
      >>> from tinax.data import read_array_record, write_array_record
      >>> write_array_record("rows.array_record", [{"x": np.arange(2.0) + i, "label": i} for i in range(3)])
      >>> dataset = read_array_record("rows.array_record")
      >>> dataset[2]["x"].tolist(), dataset[2]["label"]
      ([2.0, 3.0], 2)
    """
    file = validation.require_path(path, "path")
    if decode is not None:
        validation.require_callable(decode, "decode")
    _array_record_module("read_array_record")
    require_record_file(file, "ArrayRecord")
    # grain's source dataset, refusing bool indices that it would read as 0 or 1.
    from tinax._data._datasets import source_dataset

    return source_dataset(ArrayRecordSource(file.absolute(), decode=decode))


class _LastRecord(NamedTuple):
    """What an ArrayRecord file's last record says: the tinax header (None for JSON records) and the record count."""

    header_bytes: bytes | None
    total: int


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

    def __init__(self, path: pathlib.Path, *, decode: Callable[[bytes], Any] | None = None) -> None:
        """Opens the file and reads its last record.

        Args:
          path: The file, preferably absolute so that workers with another
            working directory find it too.
          decode: Turns a record of a file without the tinax header into
            the record; None reads such records as JSON.

        Raises:
          UnreadableArrayRecordError: If the file is not ArrayRecord, or its
            tinax header is malformed.
        """
        self._decode = decode
        super().__init__(path)

    def _options(self) -> dict[str, Any]:
        return {"decode": self._decode}

    def _set_options(self, options: dict[str, Any]) -> None:
        self._decode = options["decode"]

    def _adopt(self, header: _LastRecord) -> None:
        super()._adopt(header)
        if header.header_bytes is None:
            self._count = header.total
            return
        parsed = self._parse_header(header.header_bytes)
        self._schema = parsed.schema
        self._count = parsed.count
        self.source_id: str = parsed.source_id

    def _parse_header(self, header_bytes: bytes) -> RecordHeader:
        try:
            return RecordHeader.from_json_bytes(header_bytes)
        except ValueError as error:
            raise self._unreadable(str(error)) from error

    def _unreadable(self, reason: str) -> UnreadableArrayRecordError:
        return UnreadableArrayRecordError(f"{str(self._path)!r} is not a readable ArrayRecord record file: {reason}")

    def _open(self) -> tuple[Any, _LastRecord]:
        module = _array_record_module("read_array_record")
        try:
            reader = module.ArrayRecordReader(
                str(self._path), _READER_OPTIONS, file_reader_buffer_size=_FILE_READER_BUFFER_SIZE
            )
            if not reader.ok():
                # The reader reports its reason only when asked to read.
                reader.read()
                raise self._unreadable("array-record cannot open it")
            total = reader.num_records()
            last = reader.read([total - 1])[0] if total else b""
        except RuntimeError as error:
            raise self._unreadable(f"array-record cannot read it ({error})") from error
        if not last.startswith(_HEADER_MAGIC):
            # No tinax header: records of JSON, as tinax 0.2 wrote them (a JSON
            # text never starts with the header's line).
            return reader, _LastRecord(None, total)
        header_bytes = last[len(_HEADER_MAGIC) :]
        header = self._parse_header(header_bytes)
        if header.count != total - 1:
            raise self._unreadable(f"the header declares {header.count} records but the file holds {total - 1}")
        return reader, _LastRecord(header_bytes, total)

    def __getitem__(self, index: int) -> Any:
        position = self._position(index)
        reader = self._handle()
        try:
            data = reader.read([position])[0]
        except RuntimeError as error:
            raise ValueError(f"{str(self._path)!r}: record {position} cannot be read ({error})") from error
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
            return f"ArrayRecordSource(path={os.fspath(self._path)!r}, records={self._count}, JSON records)"
        return (
            f"ArrayRecordSource(path={os.fspath(self._path)!r}, records={self._count}, "
            f"fields={list(self._schema.names)}, source_id={self.source_id!r})"
        )
