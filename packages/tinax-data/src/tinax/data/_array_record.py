"""Records in ArrayRecord files, read back as random-access Grain datasets.

A file written by :func:`write_array_record` holds one ArrayRecord record per
tinax record, encoded as ``tinax.data._record_codec`` describes, followed by
one last record: the line ``tinax-records`` (with its newline) and the JSON header. The
header goes last because the records are streamed and checked as they come,
and only the end knows their count and digest. array-record is an optional
dependency (the ``arrayrecord`` extra), imported when a function here runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pathlib
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tinax._core import validation
from tinax._core.files import atomic_path
from tinax._core.optional import import_optional
from tinax.data._record_codec import RecordHeader, RecordSchema, record_position

if TYPE_CHECKING:
    import grain

__all__ = ["ArrayRecordSource", "read_array_record", "write_array_record"]

_INSTALL_HINT = 'pip install "tinax-data[arrayrecord]"'
_HEADER_MAGIC = b"tinax-records\n"
# No readahead: records are read one at a time in random order. The buffer
# size is the one Grain's own ArrayRecord source uses.
_READER_OPTIONS = "readahead_buffer_size:0"
_FILE_READER_BUFFER_SIZE = 32768


def _array_record_module(function: str) -> Any:
    return import_optional(
        "array_record.python.array_record_module", needed_by=f"tinax.data.{function}", install_hint=_INSTALL_HINT
    )


def write_array_record(
    path: str | os.PathLike[str], records: Iterable[Mapping[str, Any]], *, group_size: int = 1
) -> None:
    """Writes records to a new ArrayRecord file, atomically.

    The records are checked and written one at a time, so ``records`` may be
    a generator over more data than fits in memory. The file appears at
    ``path`` only once every record has been written and flushed to disk; if
    any record is refused, nothing appears there.

    Args:
      path: Where to create the file. Its folder must exist and nothing may
        exist at the path yet.
      records: Mappings of str field names to values. Every record must have
        the first record's fields, with values of the same kind (and for
        arrays, the same dtype and number of dimensions; extents may vary).
        See the package README for the values a record may hold.
      group_size: Records per ArrayRecord chunk. 1 (the default) gives the
        fastest random access; larger groups compress better but each read
        decompresses the whole group.

    Raises:
      TypeError: If ``path`` is not a path, ``group_size`` is not an int (or
        is a bool), ``records`` is not an iterable of mappings, a key is not a
        str, or a value is of no supported kind (NumPy scalars, lists and
        object arrays included).
      ValueError: If ``group_size`` is below 1, or a record's fields, value
        kinds, array dtypes or array ndims differ from the first record's
        (the message names the record index and the field), or a value is out
        of range.
      FileExistsError: If something exists at ``path``.
      FileNotFoundError: If the folder of ``path`` does not exist.
      ImportError: If array-record is not installed.
      OSError: If the file system refuses the write.
    """
    destination = validation.require_path(path, "path")
    group_size = validation.require_positive_int(group_size, "group_size")
    if isinstance(records, (Mapping, str, bytes, bytearray)) or not isinstance(records, Iterable):
        validation.fail_type("records", "an iterable of mappings", records)
    module = _array_record_module("write_array_record")
    with atomic_path(destination, overwrite=False) as temporary:
        writer = module.ArrayRecordWriter(str(temporary), f"group_size:{group_size}")
        try:
            _write_records(writer, records, destination)
        except BaseException:
            with contextlib.suppress(RuntimeError):
                writer.close()
            raise
        try:
            writer.close()
        except RuntimeError as error:
            raise OSError(f"writing {str(destination)!r} failed: {error}") from error


def _write_records(writer: Any, records: Iterable[Mapping[str, Any]], destination: pathlib.Path) -> None:
    if not writer.ok():
        raise OSError(f"array-record could not start writing {str(destination)!r}")
    schema: RecordSchema | None = None
    digest = hashlib.sha256()
    count = 0
    for index, record in enumerate(records):
        if schema is None:
            schema = RecordSchema.from_first_record(record)
        data = b"".join(schema.encode_parts(schema.checked_values(record, index)))
        digest.update(data)
        _write(writer, data, destination)
        count += 1
    header = RecordHeader(schema if schema is not None else RecordSchema(()), count, digest.hexdigest())
    _write(writer, _HEADER_MAGIC + header.to_json_bytes(), destination)


def _write(writer: Any, data: bytes, destination: pathlib.Path) -> None:
    try:
        writer.write(data)
    except RuntimeError as error:
        raise OSError(f"writing {str(destination)!r} failed: {error}") from error


def read_array_record(path: str | os.PathLike[str]) -> grain.MapDataset:
    """Opens an ArrayRecord file written by :func:`write_array_record`.

    Only the header is read on open. Records are read and decoded when they
    are indexed, so the dataset supports ``len``, indexing, ``shuffle`` and
    every other ``MapDataset`` transformation, and it can be sent to Grain's
    multiprocessing workers (each reopens the file on first use).

    Args:
      path: The file.

    Returns:
      A ``grain.MapDataset`` of ``dict`` records, equal to the ones written,
      over an :class:`ArrayRecordSource`. A record that turns out to be
      corrupt when it is read raises ``ValueError`` naming the path and index.

    Raises:
      TypeError: If ``path`` is not a path.
      FileNotFoundError: If nothing exists at ``path``.
      ValueError: If ``path`` is not a file written by
        :func:`write_array_record` (a foreign, truncated or malformed file,
        or one from a newer format version); the cause is chained.
      ImportError: If array-record is not installed.
    """
    file = validation.require_path(path, "path")
    _array_record_module("read_array_record")
    file = validation.require_existing_path(file, "path")
    if not file.is_file():
        validation.fail_value("path", "a file", str(file))
    import grain

    return grain.MapDataset.source(ArrayRecordSource(file.absolute()))


class ArrayRecordSource:
    """Random access to the records of one file written by :func:`write_array_record`.

    A Grain random-access data source. It pickles as its path and header
    only; an unpickled copy (in a Grain worker, say) opens the file on first
    use and checks that it still has the same header.

    Attributes:
      source_id: The identity of the records, derived from the header (see
        the package README); equal for equal records, whatever the path.
    """

    def __init__(self, path: pathlib.Path) -> None:
        """Opens the file and reads its header.

        Args:
          path: The file, preferably absolute so that workers with another
            working directory find it too.

        Raises:
          ValueError: If the file is not one :func:`write_array_record` wrote.
        """
        self._path = path
        self._lock = threading.Lock()
        reader, header_bytes = self._open_and_read_header()
        self._set_header(header_bytes)
        self._reader: Any = reader

    def _set_header(self, header_bytes: bytes) -> None:
        header = self._parse_header(header_bytes)
        self._header_bytes = header_bytes
        self._schema = header.schema
        self._count = header.count
        self.source_id: str = header.source_id

    def _parse_header(self, header_bytes: bytes) -> RecordHeader:
        try:
            return RecordHeader.from_json_bytes(header_bytes)
        except ValueError as error:
            raise self._unreadable(str(error)) from error

    def _unreadable(self, reason: str) -> ValueError:
        return ValueError(f"{str(self._path)!r} is not a readable tinax ArrayRecord file: {reason}")

    def _open_and_read_header(self) -> tuple[Any, bytes]:
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
            if total < 1:
                raise self._unreadable("it holds no records, not even the tinax header")
            last = reader.read([total - 1])[0]
        except RuntimeError as error:
            raise self._unreadable(f"array-record cannot read it ({error})") from error
        if not last.startswith(_HEADER_MAGIC):
            raise self._unreadable(
                "its last record is not a tinax header; it was not written by tinax.data.write_array_record"
            )
        header_bytes = last[len(_HEADER_MAGIC) :]
        header = self._parse_header(header_bytes)
        if header.count != total - 1:
            raise self._unreadable(f"the header declares {header.count} records but the file holds {total - 1}")
        return reader, header_bytes

    def _open_reader(self) -> Any:
        with self._lock:
            if self._reader is None:
                reader, header_bytes = self._open_and_read_header()
                if header_bytes != self._header_bytes:
                    raise ValueError(f"{str(self._path)!r} changed since it was opened: its header is different")
                self._reader = reader
            return self._reader

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> dict[str, Any]:
        position = record_position(index, self._count, self._path)
        reader = self._reader if self._reader is not None else self._open_reader()
        try:
            data = reader.read([position])[0]
        except RuntimeError as error:
            raise ValueError(f"{str(self._path)!r}: record {position} cannot be read ({error})") from error
        try:
            return self._schema.decode(data)
        except ValueError as error:
            raise ValueError(f"{str(self._path)!r}: record {position} is malformed ({error})") from error

    def __getstate__(self) -> dict[str, Any]:
        return {"path": os.fspath(self._path), "header": self._header_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._path = pathlib.Path(state["path"])
        self._lock = threading.Lock()
        self._reader = None
        self._set_header(state["header"])

    def __repr__(self) -> str:
        return (
            f"ArrayRecordSource(path={os.fspath(self._path)!r}, records={self._count}, "
            f"fields={list(self._schema.names)}, source_id={self.source_id!r})"
        )
