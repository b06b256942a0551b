"""Records in Parquet files, read back as random-access Grain datasets.

:func:`write_parquet_record` writes the tinax record format when the records
fit it (see ``tinax._data._record_codec``): one column per field, plain values
as native Parquet columns (``null``, ``bool``, ``int64``, ``double``,
``large_string``, ``large_binary``), and each array field as a
``struct<shape: list<int64>, data: large_binary>`` column holding the extents
and the raw C-order bytes of each record's array. The file's key-value
metadata holds the JSON header of ``tinax._data._record_codec`` under the key
``tinax.records``, with the dtype and ndim of every array field. Other Parquet
readers see ordinary columns; tinax reads the arrays back exactly.

Records that do not fit the format (lists, nested mappings, NumPy scalars,
fields missing from some records, a field that is an int in one record and a
float in another, ...) are written as tinax 0.2 wrote every file: a plain
Arrow table built by ``pyarrow.Table.from_pylist``, whose types pyarrow
infers. Such files, and any other Parquet file (tinax 0.2's included), read
back as pyarrow's ``to_pylist`` rows, as 0.2 read them.

Row groups of the tinax format hold about 1 MiB of data (at most 4096
records, at least one). Reading opens only the footer. Indexing reads the one
row group that holds the record, decodes it into Python values and keeps the
most recently used row groups in a per-process cache of about 64 MiB, so
random access works on files much larger than memory and sequential or
shuffled access within the cached groups costs about as much as indexing a
list.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import functools
import hashlib
import json
import os
import pathlib
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tinax._core import validation
from tinax._core.files import atomic_path, atomic_write
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
    array_bytes,
    array_from_bytes,
    record_position,
    require_record_file,
)

if TYPE_CHECKING:
    import grain
    import pyarrow as pa

__all__ = ["ParquetRecordSource", "read_parquet_record", "write_parquet_record"]

METADATA_KEY = b"tinax.records"
#: Key of the checksums of a tinax-format file: the SHA-256 of the bytes of
#: every row group, and of the footer (with its own digest written as zeros).
CHECKSUM_KEY = b"tinax.records.checksums"
_MAGIC = b"PAR1"
_ZERO_DIGEST = "0" * 64
_HASH_CHUNK = 1 << 20
_ROW_GROUP_TARGET_BYTES = 1 << 20
_ROW_GROUP_MAX_ROWS = 4096
_CACHE_BYTES = 64 << 20


def _arrow_type(field: FieldSpec) -> pa.DataType:
    import pyarrow as pa

    if field.kind == KIND_ARRAY:
        # The child field is named as Parquet names list elements, so the schema reads back unchanged.
        shape = pa.list_(pa.field("element", pa.int64(), nullable=False))
        return pa.struct(
            [pa.field("shape", shape, nullable=False), pa.field("data", pa.large_binary(), nullable=False)]
        )
    types: dict[str, Callable[[], pa.DataType]] = {
        KIND_NONE: pa.null,
        KIND_BOOL: pa.bool_,
        KIND_INT: pa.int64,
        KIND_FLOAT: pa.float64,
        KIND_STR: pa.large_string,
        KIND_BYTES: pa.large_binary,
    }
    return types[field.kind]()


def _arrow_schema(schema: RecordSchema) -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [pa.field(field.name, _arrow_type(field), nullable=field.kind == KIND_NONE) for field in schema.fields]
    )


def write_parquet_record(path: str | os.PathLike[str], records: Sequence[Mapping[str, Any]]) -> None:
    """Writes records to a Parquet file, atomically, replacing any file at ``path``.

    Records that fit the tinax record format (see the package README: the
    same fields in every record, each holding the same kind of plain value or
    NumPy array) are written in it, one row group at a time, and read back
    exactly. Any other records tinax 0.2 accepted (lists, nested mappings,
    NumPy scalars, dates, fields missing from some records, ints and floats
    mixed in one field, ...) are written as a plain Arrow table, as 0.2 wrote
    them, and read back as pyarrow's ``to_pylist`` gives them (a missing
    field as None, a tuple as a list, an int among floats as a float, ...).

    The file appears at ``path`` only once every record has been written and
    flushed to disk; if any record is refused, the file that was there (if
    any) is left as it was.

    Args:
      path: Where to write the file. Its folder must exist, and no file may
        be there yet: an existing file is refused, never replaced.
      records: A non-empty, finite sequence (a list or tuple, or any
        ``collections.abc.Sequence``) of mappings of field names to values.

    Raises:
      TypeError: If ``path`` is not a path, ``records`` is not a sequence (a
        generator or another one-shot iterable included), or a record is not
        a mapping; or, for records outside the tinax format, pyarrow cannot
        convert a value (the pyarrow error, as tinax 0.2 let it through).
      ValueError: If ``records`` is empty, ``records[0]`` has no fields (a
        Parquet row needs a column), or a record has a field that
        ``records[0]`` lacks and the records are outside the tinax format
        (tinax 0.2 silently dropped such fields); or pyarrow refuses the
        values (``pyarrow.ArrowInvalid``, such as a bool and an int in one
        field).
      OverflowError: If, outside the tinax format, an int does not fit in 64
        bits (pyarrow's error, as in tinax 0.2).
      FileNotFoundError: If the folder of ``path`` does not exist.
      FileExistsError: If a file already exists at ``path``.
      IsADirectoryError: If ``path`` is a folder.
      OSError: If the file system refuses the write.
    """
    destination = validation.require_path(path, "path")
    _require_records(records)
    if destination.is_dir():
        # The OS error tinax 0.2 gave for a folder, checked before the no-clobber refusal.
        raise IsADirectoryError(f"path must be a file to create, got the folder {str(destination)!r}")
    try:
        _write_tinax_records(destination, records)
    except _OutsideTheFormatError:
        _write_plain_table(destination, records)


class _OutsideTheFormatError(Exception):
    """The records do not fit the tinax format; they are written as a plain table instead."""


def _require_records(records: object) -> None:
    expected = (
        "a non-empty finite sequence of mappings such as a list "
        "(a generator or other one-shot iterable is not accepted)"
    )
    if isinstance(records, (str, bytes, bytearray)) or not isinstance(records, Sequence):
        validation.fail_type("records", expected, records)
    for index, record in enumerate(records):
        if not isinstance(record, Mapping):
            validation.fail_type(f"records[{index}]", "a mapping of field names to values", record)
    if len(records) == 0:
        validation.fail_value("records", expected, records)


def _write_tinax_records(destination: pathlib.Path, records: Sequence[Mapping[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    count = len(records)
    try:
        schema = RecordSchema.from_first_record(records[0])
    except (TypeError, ValueError) as error:
        raise _OutsideTheFormatError from error
    if not schema.fields:
        # A Parquet file counts its rows by its columns' values: without a
        # column, the rows would read back as none at all (as in tinax 0.2).
        validation.fail_value(
            "records[0]", "a mapping with at least one field (a Parquet row needs a column)", records[0]
        )
    arrow_schema = _arrow_schema(schema)
    digest = hashlib.sha256()
    with atomic_path(destination, overwrite=False) as temporary:
        writer = pq.ParquetWriter(temporary, arrow_schema, write_page_checksum=True)
        groups = 0
        try:
            pending: list[list[Any]] = []
            pending_bytes = 0
            for index in range(count):
                try:
                    values = schema.checked_values(records[index], index)
                except (TypeError, ValueError) as error:
                    raise _OutsideTheFormatError from error
                for part in schema.encode_parts(values):
                    digest.update(part)
                pending.append(values)
                pending_bytes += _stored_size(schema, values)
                if pending_bytes >= _ROW_GROUP_TARGET_BYTES or len(pending) >= _ROW_GROUP_MAX_ROWS:
                    writer.write_table(_row_group(schema, arrow_schema, pending), row_group_size=len(pending))
                    groups += 1
                    pending, pending_bytes = [], 0
            if pending:
                writer.write_table(_row_group(schema, arrow_schema, pending), row_group_size=len(pending))
                groups += 1
            header = RecordHeader(schema, count, digest.hexdigest())
            placeholder = _checksum_value(_ZERO_DIGEST, [_ZERO_DIGEST] * groups)
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
    """Reads the footer of an open Parquet file as bytes.

    Returns:
      The footer with its 8-byte trailer (length and magic), and its offset.

    Raises:
      ValueError: If the file does not start and end as Parquet does.
    """
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


# How every checksum entry starts (see _checksum_value); no other file's footer holds it.
_CHECKSUM_MARKER = b'{"footer_sha256":"'


def _footer_holds_checksums(path: pathlib.Path) -> bool:
    """Whether the raw footer of a file pyarrow parsed holds a tinax checksum entry."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(size - 8, 0))
            length = int.from_bytes(handle.read(4), "little")
            handle.seek(max(size - 8 - length, 0))
            return _CHECKSUM_MARKER in handle.read(length)
    except OSError:
        return False


def _footer_digest(footer: bytes, stored: bytes, group_digests: Sequence[str]) -> str:
    """The footer's digest: its bytes with the checksum entry's footer digest as zeros."""
    if footer.count(stored) != 1:
        raise ValueError("its checksum entry cannot be found in its footer")
    return hashlib.sha256(footer.replace(stored, _checksum_value(_ZERO_DIGEST, group_digests))).hexdigest()


def seal_checksums(path: pathlib.Path) -> None:
    """Writes the checksums into a closed Parquet file whose checksum entry holds zeros.

    The file must carry, under :data:`CHECKSUM_KEY`, the entry
    :func:`_checksum_value` gives for zero digests, one per row group. The
    digests of the row groups' bytes go in first, then the digest of the
    footer they are part of; both have the placeholders' length, so the
    footer keeps its size and layout.

    Args:
      path: The written (and closed) file.

    Raises:
      OSError: If the file is not as this writer left it.
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


def _write_plain_table(destination: pathlib.Path, records: Sequence[Mapping[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    # pyarrow takes the columns from records[0] and would drop any other field
    # without a word, as tinax 0.2 did; a field only some records lack is a
    # null in those records, which the file can say.
    columns = set(records[0])
    for index, record in enumerate(records):
        extra = [key for key in record if key not in columns]
        if extra:
            raise ValueError(
                f"records[{index}] must have only fields that records[0] has, got the extra field {extra[0]!r}: "
                f"a Parquet file has the columns of records[0], {list(records[0])}, and would lose it"
            )
    # pyarrow's own errors (ArrowInvalid, ArrowTypeError, OverflowError, ...)
    # propagate unchanged, as they did from tinax 0.2.
    table = pa.Table.from_pylist([dict(record) for record in records])
    with atomic_write(destination, overwrite=False) as handle:
        # Page checksums, which pyarrow verifies when reading through tinax.
        pq.write_table(table, handle, write_page_checksum=True)


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


def _row_group(schema: RecordSchema, arrow_schema: pa.Schema, rows: list[list[Any]]) -> pa.Table:
    import pyarrow as pa

    columns = []
    for position, field in enumerate(schema.fields):
        values = [row[position] for row in rows]
        arrow_type = arrow_schema.field(position).type
        if field.kind == KIND_NONE:
            columns.append(pa.nulls(len(values)))
        elif field.kind == KIND_STR:
            # The values are already UTF-8; view them as strings without decoding.
            columns.append(pa.array(values, pa.large_binary()).view(pa.large_string()))
        elif field.kind == KIND_ARRAY:
            columns.append(_array_column(arrow_type, values))
        else:
            columns.append(pa.array(values, arrow_type))
    return pa.Table.from_arrays(columns, schema=arrow_schema)


def _array_column(arrow_type: pa.StructType, arrays: list[np.ndarray[Any, Any]]) -> pa.Array:
    import pyarrow as pa

    shape_field, data_field = arrow_type.field(0), arrow_type.field(1)
    shapes = pa.array([list(array.shape) for array in arrays], shape_field.type)
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum([array.nbytes for array in arrays], out=offsets[1:])
    data = pa.py_buffer(b"".join(array_bytes(array) for array in arrays))
    payloads = pa.Array.from_buffers(pa.large_binary(), len(arrays), [None, pa.py_buffer(offsets), data])
    return pa.StructArray.from_arrays([shapes, payloads], fields=[shape_field, data_field])


def read_parquet_record(path: str | os.PathLike[str]) -> grain.MapDataset:
    """Opens a Parquet file as a random-access dataset of dict rows.

    A file :func:`write_parquet_record` wrote in the tinax record format reads
    back exactly as written. Any other Parquet file (one tinax 0.2 wrote, one
    written in the plain-table fallback, or one from another tool) reads back
    as pyarrow's ``to_pylist`` rows, as tinax 0.2 read it.

    Only the footer is read on open. Indexing reads the row group that holds
    the record (recently used row groups stay cached), so the dataset
    supports ``len``, indexing, ``shuffle`` and every other ``MapDataset``
    transformation without loading the file, and it can be sent to Grain's
    multiprocessing workers (each reopens the file on first use).

    Args:
      path: The file.

    Returns:
      A ``grain.MapDataset`` of ``dict`` rows over a
      :class:`ParquetRecordSource`. For the tinax format it equals what
      :func:`read_array_record` gives for the same records. A row group that
      turns out to be corrupt when it is read raises ``ValueError`` naming
      the path and index.

    Raises:
      TypeError: If ``path`` is not a path.
      FileNotFoundError: If no file exists at ``path`` (a folder included).
      ValueError: If ``path`` is not a Parquet file (a
        ``pyarrow.ArrowInvalid``, as tinax 0.2 raised), or carries the tinax
        metadata but contradicts it (truncated, columns that do not match,
        a newer format version); the cause is chained.
    """
    file = validation.require_path(path, "path")
    require_record_file(file, "Parquet")
    # grain's source dataset, refusing bool indices that it would read as 0 or 1.
    from tinax._data._datasets import source_dataset

    return source_dataset(ParquetRecordSource(file.absolute()))


@functools.cache
def _unreadable_parquet_error() -> type[ValueError]:
    # Defined on first use: subclassing pyarrow's error needs pyarrow, which
    # importing tinax.data must not import.
    import pyarrow as pa

    class UnreadableParquetError(pa.ArrowInvalid):  # type: ignore[misc]
        """The file is not Parquet: a ValueError, and the ``pyarrow.ArrowInvalid`` tinax 0.2 let through."""

        def __reduce__(self) -> tuple[Any, ...]:
            # Pickled (from a Grain worker, say) as a call that defines the class first.
            return (_new_unreadable_parquet_error, (str(self),))

    UnreadableParquetError.__module__ = __name__
    return UnreadableParquetError


class CorruptParquetError(OSError, ValueError):
    """A Parquet footer pyarrow cannot decode: the OSError pyarrow raised, and a ValueError."""


def _new_unreadable_parquet_error(message: str) -> ValueError:
    return _unreadable_parquet_error()(message)


class _PlainRowGroup:
    """One row group of a plain Parquet file, as pyarrow's Python rows."""

    def __init__(self, table: pa.Table) -> None:
        self.nbytes = int(table.nbytes)
        self._rows = table.to_pylist()

    def record(self, row: int) -> dict[str, Any]:
        return self._rows[row]  # type: ignore[no-any-return]


class _DecodedRowGroup:
    """One row group as Python columns, ready to give out records."""

    def __init__(self, schema: RecordSchema, table: pa.Table) -> None:
        self.nbytes = int(table.nbytes)
        getters: list[tuple[str, Callable[[int], Any]]] = []
        for field in schema.fields:
            column = table.column(field.name)
            if field.kind != KIND_NONE and column.null_count:
                raise ValueError(f"field {field.name!r} has missing values")
            if field.kind == KIND_ARRAY:
                getters.append((field.name, _array_getter(field, column.combine_chunks(), table.num_rows)))
            else:
                getters.append((field.name, column.to_pylist().__getitem__))
        self._getters = tuple(getters)

    def record(self, row: int) -> dict[str, Any]:
        return {name: getter(row) for name, getter in self._getters}


def _array_getter(field: FieldSpec, column: Any, rows: int) -> Callable[[int], Any]:
    assert field.dtype is not None
    assert field.ndim is not None
    dtype, ndim = field.dtype, field.ndim
    shape_lists, payloads = column.flatten()
    if shape_lists.null_count or payloads.null_count:
        raise ValueError(f"field {field.name!r} has missing values")
    shape_offsets = np.asarray(shape_lists.offsets)
    if len(shape_offsets) != rows + 1 or np.any(np.diff(shape_offsets) != ndim):
        raise ValueError(f"field {field.name!r} holds shapes that do not have {ndim} dimensions")
    shape_values = np.asarray(shape_lists.values)[shape_offsets[0] : shape_offsets[-1]]
    shapes = [tuple(shape) for shape in shape_values.reshape(rows, ndim).tolist()]
    buffers = payloads.buffers()
    offsets = np.frombuffer(buffers[1], np.int64, rows + 1, payloads.offset * 8).tolist()
    data = buffers[2] if buffers[2] is not None else b""

    def get(row: int) -> Any:
        start = offsets[row]
        return array_from_bytes(data, start, offsets[row + 1] - start, dtype, shapes[row])

    return get


class ParquetRecordSource:
    """Random access to the rows of one Parquet file.

    A Grain random-access data source over the file's row groups, with a small
    per-process cache of decoded row groups. A file in the tinax record format
    (one :func:`write_parquet_record` wrote with the ``tinax.records``
    metadata) gives its records back exactly; any other Parquet file gives
    pyarrow's ``to_pylist`` rows. The source pickles as its path and what its
    footer said; an unpickled copy (in a Grain worker, say) opens the file on
    first use and checks that it still says the same.

    Attributes:
      source_id: For the tinax format only: the identity of the records,
        derived from the header (see the package README); equal for equal
        records, whatever the path or container format. Other files have no
        identity, since naming their content would mean reading all of it.
    """

    def __init__(self, path: pathlib.Path) -> None:
        """Opens the file and reads its footer.

        Args:
          path: The file, preferably absolute so that workers with another
            working directory find it too.

        Raises:
          ValueError: If the file is not Parquet (a ``pyarrow.ArrowInvalid``),
            or carries the tinax metadata but contradicts it.
        """
        self._path = path
        self._lock = threading.Lock()
        self._cache: collections.OrderedDict[int, _DecodedRowGroup | _PlainRowGroup] = collections.OrderedDict()
        self._cached_bytes = 0
        parquet_file, header_bytes, group_ends, group_checks = self._open_and_read_footer()
        self._set_footer(header_bytes, group_ends, group_checks)
        self._file: Any = parquet_file

    def _unreadable(self, reason: str) -> ValueError:
        return ValueError(f"{str(self._path)!r} is not a readable tinax Parquet record file: {reason}")

    def _set_footer(
        self, header_bytes: bytes | None, group_ends: list[int], group_checks: list[tuple[int, int, str]] | None
    ) -> None:
        self._header_bytes = header_bytes
        self._group_ends = group_ends
        # The byte range and SHA-256 of every row group (tinax format only).
        self._group_checks = group_checks
        if header_bytes is None:
            self._schema: RecordSchema | None = None
            self._count = group_ends[-1] if group_ends else 0
            return
        header = RecordHeader.from_json_bytes(header_bytes)
        self._schema = header.schema
        self._count = header.count
        self.source_id: str = header.source_id

    def _open_and_read_footer(self) -> tuple[Any, bytes | None, list[int], list[tuple[int, int, str]] | None]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            parquet_file = pq.ParquetFile(self._path, page_checksum_verification=True)
            metadata = parquet_file.metadata
            key_values = metadata.metadata or {}
            group_rows = [metadata.row_group(index).num_rows for index in range(metadata.num_row_groups)]
            arrow_schema = parquet_file.schema_arrow
        except (ValueError, pa.ArrowException) as error:
            # ArrowInvalid (tinax 0.2's error for a file that is not Parquet),
            # pyarrow's other errors, and the UnicodeDecodeError of a damaged
            # column name.
            raise _unreadable_parquet_error()(
                f"{str(self._path)!r} is not a readable Parquet file: pyarrow cannot read its footer ({error})"
            ) from error
        except OSError as error:
            if type(error) is not OSError:  # FileNotFoundError, PermissionError, ...: the file system's word.
                raise
            # pyarrow's plain OSError for a footer it cannot decode (a damaged
            # Thrift structure): an OSError as before, and the ValueError
            # tinax gives for a malformed file.
            raise CorruptParquetError(
                f"{str(self._path)!r} is not a readable Parquet file: pyarrow cannot read its footer ({error})"
            ) from error
        group_ends = [int(end) for end in np.cumsum(group_rows, dtype=np.int64)]
        header_bytes = key_values.get(METADATA_KEY)
        stored_checksums = key_values.get(CHECKSUM_KEY)
        if header_bytes is None:
            if stored_checksums is not None or _footer_holds_checksums(self._path):
                # A damaged footer can lose its key-value list and still parse:
                # the checksum entry's bytes are still there, unparsed.
                raise self._unreadable("it carries tinax checksums but no tinax header: its footer is damaged")
            return parquet_file, None, group_ends, None
        try:
            header = RecordHeader.from_json_bytes(header_bytes)
        except ValueError as error:
            raise self._unreadable(str(error)) from error
        expected = _arrow_schema(header.schema)
        # Names and types must match; nullability may differ, since missing values are refused when read.
        if arrow_schema.names != expected.names or arrow_schema.types != expected.types:
            found = {name: str(kind) for name, kind in zip(arrow_schema.names, arrow_schema.types, strict=True)}
            wanted = {name: str(kind) for name, kind in zip(expected.names, expected.types, strict=True)}
            raise self._unreadable(f"its columns {found} do not match the header's fields {wanted}")
        if metadata.num_rows != header.count or (group_ends[-1] if group_ends else 0) != header.count:
            raise self._unreadable(f"the header declares {header.count} records but the file holds {metadata.num_rows}")
        if stored_checksums is None:
            raise self._unreadable(
                "it carries a tinax header but no checksums: its footer is damaged, or an older tinax 0.3 "
                "development version wrote it"
            )
        try:
            group_checks = self._verified_footer(metadata, stored_checksums)
        except (OSError, ValueError) as error:
            raise self._unreadable(str(error)) from error
        return parquet_file, header_bytes, group_ends, group_checks

    def _verified_footer(self, metadata: Any, stored: bytes) -> list[tuple[int, int, str]]:
        """Checks the footer's digest and returns every row group's range and digest."""
        footer_digest, group_digests = _parse_checksums(stored, metadata.num_row_groups)
        with open(self._path, "rb") as handle:
            footer, footer_start = _read_raw_footer(handle, "the file")
        if _footer_digest(footer, stored, group_digests) != footer_digest:
            raise ValueError("its footer does not match its checksum: the footer is corrupt")
        ranges = _row_group_ranges(metadata, footer_start, "the file")
        return [(start, end, digest) for (start, end), digest in zip(ranges, group_digests, strict=True)]

    def _open_file(self) -> Any:
        # Called with the lock held.
        if self._file is None:
            parquet_file, header_bytes, group_ends, group_checks = self._open_and_read_footer()
            if (header_bytes, group_ends, group_checks) != (self._header_bytes, self._group_ends, self._group_checks):
                raise ValueError(f"{str(self._path)!r} changed since it was opened: its footer is different")
            self._file = parquet_file
        return self._file

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> dict[str, Any]:
        position = record_position(index, self._count, self._path)
        group_index = bisect.bisect_right(self._group_ends, position)
        with self._lock:
            group = self._cache.get(group_index)
            if group is None:
                group = self._load(group_index, position)
            else:
                self._cache.move_to_end(group_index)
        row = position - (self._group_ends[group_index - 1] if group_index else 0)
        try:
            return group.record(row)
        except ValueError as error:
            raise ValueError(f"{str(self._path)!r}: record {position} is malformed ({error})") from error

    def _load(self, group_index: int, position: int) -> _DecodedRowGroup | _PlainRowGroup:
        # Called with the lock held, so one thread reads the file at a time.
        import pyarrow as pa

        parquet_file = self._open_file()
        try:
            if self._group_checks is not None:
                self._verify_row_group(group_index)
            table = parquet_file.read_row_group(group_index)
            expected_rows = self._group_ends[group_index] - (self._group_ends[group_index - 1] if group_index else 0)
            if table.num_rows != expected_rows:
                raise ValueError(f"it holds {table.num_rows} rows where the footer says {expected_rows}")
            group = _PlainRowGroup(table) if self._schema is None else _DecodedRowGroup(self._schema, table)
        except (pa.ArrowException, OSError, ValueError) as error:
            raise ValueError(
                f"{str(self._path)!r}: record {position} cannot be read (row group {group_index}: {error})"
            ) from error
        self._cache[group_index] = group
        self._cached_bytes += group.nbytes
        while self._cached_bytes > _CACHE_BYTES and len(self._cache) > 1:
            _, evicted = self._cache.popitem(last=False)
            self._cached_bytes -= evicted.nbytes
        return group

    def _verify_row_group(self, group_index: int) -> None:
        assert self._group_checks is not None
        start, end, expected = self._group_checks[group_index]
        with open(self._path, "rb") as handle:
            found = _digest_range(handle, start, end)
        if found != expected:
            raise ValueError(
                f"the bytes of row group {group_index} do not match the checksum written with them: it is corrupt"
            )

    def __getstate__(self) -> dict[str, Any]:
        return {
            "path": os.fspath(self._path),
            "header": self._header_bytes,
            "group_ends": self._group_ends,
            "group_checks": self._group_checks,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._path = pathlib.Path(state["path"])
        self._lock = threading.Lock()
        self._cache = collections.OrderedDict()
        self._cached_bytes = 0
        self._file = None
        checks = state.get("group_checks")
        self._set_footer(
            state["header"], state["group_ends"], None if checks is None else [tuple(check) for check in checks]
        )

    def __repr__(self) -> str:
        if self._schema is None:
            return (
                f"ParquetRecordSource(path={os.fspath(self._path)!r}, records={self._count}, "
                f"row_groups={len(self._group_ends)}, plain Parquet rows)"
            )
        return (
            f"ParquetRecordSource(path={os.fspath(self._path)!r}, records={self._count}, "
            f"row_groups={len(self._group_ends)}, fields={list(self._schema.names)}, source_id={self.source_id!r})"
        )
