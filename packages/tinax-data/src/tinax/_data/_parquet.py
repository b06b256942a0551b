"""Records in Parquet files, read back as random-access Grain datasets.

:func:`write_parquet_record` writes the tinax record format when the records
fit it (see ``tinax._data._record_codec``) as Arrow-native columns: plain
values as ``null``, ``bool``, ``int64``, ``double``, ``large_string`` and
``large_binary`` columns; an array field as a ``fixed_shape_tensor`` column
when every record's array has one shape (a plain column for 0-d arrays), or
as ``large_list`` nested once per dimension when extents vary. Elements
Arrow has no type for are stored as the nearest one (raw bits for
``ml_dtypes`` types, float pairs for complex numbers, little-endian values
for big-endian arrays), and each array column's field metadata names the
exact dtype. A field whose arrays have a zero extent before a non-zero one
keeps the layout of earlier 0.3 files, ``struct<shape: list<int64>, data:
large_binary>``, which also still reads. The file's key-value metadata holds
the JSON header of ``tinax._data._record_codec`` under ``tinax.records`` and
the checksums under ``tinax.records.checksums``. Other Parquet readers see
numbers; tinax reads the arrays back exactly.

Records that do not fit the format (lists, nested mappings, NumPy scalars,
fields missing from some records, a field that is an int in one record and a
float in another, ...) are written as tinax 0.2 wrote every file: a plain
Arrow table built by ``pyarrow.Table.from_pylist``, whose types pyarrow
infers. Such files, and any other Parquet file (tinax 0.2's and other tools'
included), read under the caller's mapping (``tinax._data._arrow_values``):
pyarrow's ``to_pylist`` rows by default, as 0.2 read them.

Row groups of the tinax format hold about 1 MiB of data (at most 4096
records, at least one). Reading opens only the footer. Indexing reads the one
row group that holds the record and keeps it as Arrow buffers in a
per-process cache bounded by a memory budget (least recently used first
out), so random access works on files much larger than memory, and access
within the cached groups costs about as much as indexing a list. Batched
reads gather each row group's rows column by column.

Why not pyarrow alone: pyarrow has no Arrow type for ``bfloat16``, the float8
types or ``int4``, and its page checksums leave the footer (where the header
lives) unchecked, so the array columns, the dtype metadata and the row-group
and footer digests are written here; pyarrow still does all Parquet encoding
and decoding.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import os
import pathlib
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from tinax._core import validation
from tinax._core.files import atomic_path, atomic_write
from tinax._data._arrow_values import MAPPINGS, ArrayColumn, column_getter, many_values, require_mappable
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
    dtype_descriptor,
    record_position,
    require_record_file,
)
from tinax._data._record_source import RecordFileSource

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
#: The default memory budget of a reader's cache of decoded row groups.
DEFAULT_CACHE_BYTES = 512 << 20
#: Key, in the Arrow field metadata of an array column, of the field's exact dtype.
FIELD_DTYPE_KEY = b"tinax.dtype"


def _legacy_arrow_type(field: FieldSpec) -> pa.DataType:
    """The column type of an early tinax 0.3 file, which stored arrays as shapes and raw bytes."""
    import pyarrow as pa

    if field.kind == KIND_ARRAY:
        # The child field is named as Parquet names list elements, so the schema reads back unchanged.
        shape = pa.list_(pa.field("element", pa.int64(), nullable=False))
        return pa.struct(
            [pa.field("shape", shape, nullable=False), pa.field("data", pa.large_binary(), nullable=False)]
        )
    return _plain_arrow_type(field.kind)


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
    """How the elements of an array field are stored in Arrow.

    Attributes:
      dtype: The NumPy dtype of the stored elements (little-endian, one Arrow has).
      pairs: Whether each element is stored as two (a complex number as its
        real and imaginary parts, on a trailing axis of 2).
    """

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


_LEGACY = "legacy"


def _native_arrow_type(field: FieldSpec, fixed_shape: tuple[int, ...] | str | None) -> pa.DataType:
    """The Arrow-native column type of a field; arrays of one shape in every record are tensors."""
    import pyarrow as pa

    if field.kind != KIND_ARRAY:
        return _plain_arrow_type(field.kind)
    if fixed_shape == _LEGACY:
        return _legacy_arrow_type(field)
    assert not isinstance(fixed_shape, str)
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


def _native_arrow_schema(schema: RecordSchema, fixed_shapes: Mapping[str, tuple[int, ...] | str | None]) -> pa.Schema:
    import pyarrow as pa

    fields = []
    for field in schema.fields:
        metadata = None
        if field.kind == KIND_ARRAY:
            assert field.dtype is not None
            # Where Arrow has no such dtype (bfloat16, float8, int4, complex, big-endian), other tools
            # see the stored numbers; this names the exact dtype for them.
            metadata = {FIELD_DTYPE_KEY: dtype_descriptor(field.dtype) or ""}
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
    path: str | os.PathLike[str], records: Sequence[Mapping[str, Any]], *, overwrite: bool = False
) -> None:
    """Writes records to a Parquet file of Arrow-native columns, atomically.

    Records that fit the tinax record format (see the package README: the
    same fields in every record, each holding the same kind of plain value or
    NumPy array) are written in it, one row group at a time, and read back
    exactly. Plain values are native columns (``int64``, ``double``,
    ``bool``, ``large_string``, ``large_binary``, ``null``); an array field
    whose arrays have one shape in every record is an Arrow
    ``fixed_shape_tensor`` column (a plain column for 0-d arrays), and one
    whose shapes vary is a column of nested ``large_list`` values, one level
    per dimension. pandas, Polars, DuckDB and pyarrow read these as numbers.
    dtypes Arrow lacks are stored as the nearest Arrow type (``bfloat16``,
    the float8 types and ``int4`` as their raw bits in unsigned integers of
    the same width, complex numbers as float pairs on a trailing axis of 2,
    big-endian values as little-endian ones), with the exact dtype in the
    field metadata and the tinax header, so tinax reads them back exactly.

    Any other records tinax 0.2 accepted (lists, nested mappings, NumPy
    scalars, dates, fields missing from some records, ints and floats mixed
    in one field, ...) are written as a plain Arrow table, as 0.2 wrote
    them, and read back as pyarrow's ``to_pylist`` gives them (a missing
    field as None, a tuple as a list, an int among floats as a float, ...).

    The file appears at ``path`` only once every record has been written and
    flushed to disk; if any record is refused, the file that was there (if
    any) is left as it was.

    Args:
      path: Where to write the file. Its folder must exist.
      records: A non-empty, finite sequence (a list or tuple, or any
        ``collections.abc.Sequence``) of mappings of field names to values.
      overwrite: Whether a file already at ``path`` may be replaced. The
        default refuses it.

    Raises:
      TypeError: If ``path`` is not a path, ``records`` is not a sequence (a
        generator or another one-shot iterable included), a record is not
        a mapping, or ``overwrite`` is not a bool; or, for records outside
        the tinax format, pyarrow cannot convert a value (the pyarrow error,
        as tinax 0.2 let it through).
      ValueError: If ``records`` is empty, ``records[0]`` has no fields (a
        Parquet row needs a column), or a record has a field that
        ``records[0]`` lacks and the records are outside the tinax format
        (tinax 0.2 silently dropped such fields); or pyarrow refuses the
        values (``pyarrow.ArrowInvalid``, such as a bool and an int in one
        field).
      OverflowError: If, outside the tinax format, an int does not fit in 64
        bits (pyarrow's error, as in tinax 0.2).
      FileNotFoundError: If the folder of ``path`` does not exist.
      FileExistsError: If a file already exists at ``path`` and
        ``overwrite`` is False.
      IsADirectoryError: If ``path`` is a folder.
      OSError: If the file system refuses the write.

    Examples:
      >>> import numpy as np
      >>> import pyarrow.parquet as pq
      >>> from tinax.data import write_parquet_record
      >>> write_parquet_record("rows.parquet", [{"text": "a", "x": np.zeros(2)}, {"text": "b", "x": np.ones(2)}])
      >>> pq.read_table("rows.parquet").column("text").to_pylist()  # plain Arrow columns for other tools
      ['a', 'b']
    """
    destination = validation.require_path(path, "path")
    _require_records(records)
    validation.require_bool(overwrite, "overwrite")
    if destination.is_dir():
        # The OS error tinax 0.2 gave for a folder, checked before the no-clobber refusal.
        raise IsADirectoryError(f"path must be a file to create, got the folder {str(destination)!r}")
    try:
        _write_tinax_records(destination, records, overwrite=overwrite)
    except _OutsideTheFormatError:
        _write_plain_table(destination, records, overwrite=overwrite)


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


def _fixed_shapes(
    schema: RecordSchema, records: Sequence[Mapping[str, Any]]
) -> dict[str, tuple[int, ...] | str | None]:
    """The layout of every array field: the shape every record's array has, None where shapes vary.

    A field with an empty array of two or more dimensions is ``_LEGACY``: stored
    as extents and raw bytes, the one layout that keeps every extent of it.

    Records that break the format are found later, when each is checked; here
    anything without the first record's shape only makes the field vary.
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for field in schema.fields:
        if field.kind == KIND_ARRAY:
            shapes[field.name] = tuple(records[0][field.name].shape)
    varying, hollow = set(), set()
    for record in records:
        for name, shape in shapes.items():
            found = getattr(record.get(name), "shape", None)
            if found != shape:
                varying.add(name)
            if isinstance(found, tuple) and any(
                extent == 0 and any(found[position + 1 :]) for position, extent in enumerate(found)
            ):
                hollow.add(name)
    layouts: dict[str, tuple[int, ...] | str | None] = {}
    for name, shape in shapes.items():
        if name not in varying and math.prod(shape) > 0:
            layouts[name] = shape
        elif name in hollow:
            # Nested lists lose the extents after a zero one, and Arrow has no
            # empty tensors: such a field keeps the extents and raw bytes.
            layouts[name] = _LEGACY
        else:
            layouts[name] = None
    return layouts


def _write_tinax_records(destination: pathlib.Path, records: Sequence[Mapping[str, Any]], *, overwrite: bool) -> None:
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
    arrow_schema = _native_arrow_schema(schema, _fixed_shapes(schema, records))
    digest = hashlib.sha256()
    with atomic_path(destination, overwrite=overwrite) as temporary:
        # Dictionary encoding only for plain values: an array column's numbers rarely repeat, and the
        # abandoned dictionary page of every row group would grow the file by half.
        plain = [field.name for field in schema.fields if field.kind != KIND_ARRAY]
        writer = pq.ParquetWriter(temporary, arrow_schema, write_page_checksum=True, use_dictionary=plain)
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


def _write_plain_table(destination: pathlib.Path, records: Sequence[Mapping[str, Any]], *, overwrite: bool) -> None:
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
    with atomic_write(destination, overwrite=overwrite) as handle:
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
        elif field.kind == KIND_ARRAY and pa.types.is_struct(arrow_type):
            columns.append(_legacy_array_column(arrow_type, values))
        elif field.kind == KIND_ARRAY:
            assert field.dtype is not None
            columns.append(_array_column(arrow_type, _storage(field.dtype), values))
        else:
            columns.append(pa.array(values, arrow_type))
    return pa.Table.from_arrays(columns, schema=arrow_schema)


def _legacy_array_column(arrow_type: pa.StructType, arrays: list[np.ndarray[Any, Any]]) -> pa.Array:
    import pyarrow as pa

    shape_field, data_field = arrow_type.field(0), arrow_type.field(1)
    shapes = pa.array([list(array.shape) for array in arrays], shape_field.type)
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum([array.nbytes for array in arrays], out=offsets[1:])
    data = pa.py_buffer(b"".join(array_bytes(array) for array in arrays))
    payloads = pa.Array.from_buffers(pa.large_binary(), len(arrays), [None, pa.py_buffer(offsets), data])
    return pa.StructArray.from_arrays([shapes, payloads], fields=[shape_field, data_field])


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


def read_parquet_record(
    path: str | os.PathLike[str], *, mapping: str = "python", cache_bytes: int = DEFAULT_CACHE_BYTES
) -> grain.MapDataset:
    """Opens a Parquet file as a random-access dataset of dict rows.

    A file :func:`write_parquet_record` wrote in the tinax record format reads
    back exactly as written, whatever ``mapping`` says. Any other Parquet file
    (one tinax 0.2 wrote, one written in the plain-table fallback, or one
    from pyarrow, pandas, Polars, DuckDB, Spark, ...) reads with no tinax
    metadata, its values mapped as ``mapping`` says (the package README has
    the table for every Arrow type):

    - ``"python"`` (the default): exactly pyarrow's ``to_pylist`` rows, as
      tinax 0.2 read every file. Lists are Python lists, structs dicts, and a
      missing value is None.
    - ``"numpy"``: the same scalars, strings, bytes, dates, timestamps,
      decimals and dicts, but lists and large lists of numbers, fixed-size
      lists and ``fixed_shape_tensor`` values become NumPy arrays of their
      exact shape (rectangular nested lists included). A missing value is
      None where a scalar goes; where an array would need it (a missing list,
      a missing element, ragged nested lists), reading that row raises a
      ValueError naming the column and the row. Columns of a type without a
      mapping (maps, unions, intervals, other extension types) are refused
      when the file is opened.

    Only the footer is read on open. Indexing reads the row group that holds
    the record and keeps it decoded as Arrow buffers (no Python object per
    row) in a per-process cache of at most ``cache_bytes`` of decoded data,
    evicting the least recently used row groups. A file whose columns fit the
    budget is read once, however it is indexed; for a larger file, indexing
    in a random order reads a row group for almost every record, so shuffle
    it by row groups instead (``training_batches``'s ``shuffle_window``).
    The dataset supports ``len``, indexing, ``shuffle`` and every other
    ``MapDataset`` transformation, and can be sent to Grain's multiprocessing
    workers (each reopens the file on first use, with its own cache).

    Args:
      path: The file.
      mapping: ``"python"`` or ``"numpy"``, how the values of a file outside
        the tinax format become Python values.
      cache_bytes: The memory budget of the cache of decoded row groups, in
        bytes (the Arrow-decoded size). One row group is always kept, even
        if it alone is larger.

    Returns:
      A ``grain.MapDataset`` of ``dict`` rows over a
      :class:`ParquetRecordSource`. For the tinax format it equals what
      :func:`read_array_record` gives for the same records. A row group that
      turns out to be corrupt when it is read raises ``ValueError`` naming
      the path and index.

    Raises:
      TypeError: If ``path`` is not a path, ``mapping`` is not a str or
        ``cache_bytes`` not an int.
      FileNotFoundError: If no file exists at ``path`` (a folder included).
      ValueError: If ``path`` is not a Parquet file (a
        ``pyarrow.ArrowInvalid``, as tinax 0.2 raised), or carries the tinax
        metadata but contradicts it (truncated, columns that do not match,
        a newer format version), the cause chained; if ``mapping`` is not
        one of the two, ``cache_bytes`` is below 1, or, with
        ``mapping="numpy"``, a column has a type without a mapping.

    Examples:
      >>> from tinax.data import read_parquet_record, write_parquet_record
      >>> write_parquet_record("rows.parquet", [{"text": "a", "label": 0}, {"text": "b", "label": 1}])
      >>> dataset = read_parquet_record("rows.parquet")
      >>> len(dataset), dataset[1]
      (2, {'text': 'b', 'label': 1})
    """
    file = validation.require_path(path, "path")
    mapping = validation.require_str(mapping, "mapping")
    if mapping not in MAPPINGS:
        validation.fail_value("mapping", f"one of {list(MAPPINGS)}", mapping)
    cache_bytes = validation.require_positive_int(cache_bytes, "cache_bytes")
    require_record_file(file, "Parquet")
    # grain's source dataset, refusing bool indices that it would read as 0 or 1.
    from tinax._data._datasets import source_dataset

    return source_dataset(ParquetRecordSource(file.absolute(), mapping=mapping, cache_bytes=cache_bytes))


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


class _RowGroup:
    """One decoded row group: a value getter per column, over Arrow buffers."""

    def __init__(self, getters: Sequence[tuple[str, Callable[[int], Any]]], nbytes: int) -> None:
        self.nbytes = nbytes
        self._getters = tuple(getters)

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


def _tinax_getters(schema: RecordSchema, table: pa.Table) -> list[tuple[str, Callable[[int], Any]]]:
    """Getters that give a tinax-format row group's records exactly as written (of the columns read)."""
    getters: list[tuple[str, Callable[[int], Any]]] = []
    present = set(table.column_names)
    for field in schema.fields:
        if field.name not in present:
            continue
        column = table.column(field.name).combine_chunks()
        if field.kind != KIND_NONE and column.null_count:
            raise ValueError(f"field {field.name!r} has missing values")
        if field.kind != KIND_ARRAY:
            getters.append((field.name, column_getter(column, "python")))
        elif column.type == _legacy_arrow_type(field):
            getters.append((field.name, _legacy_array_getter(field, column, table.num_rows)))
        else:
            getters.append((field.name, _native_array_getter(field, column)))
    return getters


def _native_array_getter(field: FieldSpec, column: Any) -> Callable[[int], Any]:
    assert field.dtype is not None
    assert field.ndim is not None
    storage = _storage(field.dtype)
    arrays = ArrayColumn(column, dtype=field.dtype, pairs=storage.pairs, ndim=field.ndim)
    if arrays.bad_rows:
        row, reason = next(iter(arrays.bad_rows.items()))
        raise ValueError(f"field {field.name!r} has {reason} in row {row}")
    return arrays.getter()


def _legacy_array_getter(field: FieldSpec, column: Any, rows: int) -> Callable[[int], Any]:
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


def _tinax_columns_match(schema: RecordSchema, arrow_schema: pa.Schema) -> bool:
    """Whether a file's columns are those the header's fields are written as (this or the earlier layout)."""
    if list(arrow_schema.names) != list(schema.names):
        return False
    for field, arrow_type in zip(schema.fields, arrow_schema.types, strict=True):
        if arrow_type == _legacy_arrow_type(field):
            continue
        if field.kind == KIND_ARRAY:
            if not _is_native_array_type(field, arrow_type):
                return False
        elif arrow_type != _plain_arrow_type(field.kind):
            return False
    return True


class _Footer(NamedTuple):
    """What a Parquet file's footer says, as far as reading records goes."""

    #: The tinax header, None for a file outside the tinax format.
    header_bytes: bytes | None
    #: The position after the last record of every row group.
    group_ends: tuple[int, ...]
    #: The byte range and SHA-256 of every row group (tinax format only).
    group_checks: tuple[tuple[int, int, str], ...] | None


class ParquetRecordSource(RecordFileSource[_Footer]):
    """Random access to the rows of one Parquet file.

    A Grain random-access data source over the file's row groups, with a
    per-process cache of decoded row groups bounded by a memory budget. A
    file in the tinax record format (one :func:`write_parquet_record` wrote
    with the ``tinax.records`` metadata) gives its records back exactly; any
    other Parquet file gives its rows under the chosen mapping. The source
    pickles as its path, options and what its footer said; an unpickled copy
    (in a Grain worker, say) opens the file on first use and checks that it
    still says the same.

    Attributes:
      source_id: For the tinax format only: the identity of the records,
        derived from the header (see the package README); equal for equal
        records, whatever the path or container format. Other files have no
        identity, since naming their content would mean reading all of it.
    """

    _header_name = "footer"
    _column_names: tuple[str, ...]

    def __init__(self, path: pathlib.Path, *, mapping: str = "python", cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        """Opens the file and reads its footer.

        Args:
          path: The file, preferably absolute so that workers with another
            working directory find it too.
          mapping: ``"python"`` or ``"numpy"`` (see :func:`read_parquet_record`).
          cache_bytes: The memory budget of the row-group cache.

        Raises:
          ValueError: If the file is not Parquet (a ``pyarrow.ArrowInvalid``),
            carries the tinax metadata but contradicts it, or has a column
            the mapping cannot give.
        """
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

    def _unreadable(self, reason: str) -> ValueError:
        return ValueError(f"{str(self._path)!r} is not a readable tinax Parquet record file: {reason}")

    def _adopt(self, header: _Footer) -> None:
        super()._adopt(header)
        self._group_ends = list(header.group_ends)
        self._group_checks = header.group_checks
        if header.header_bytes is None:
            self._count = self._group_ends[-1] if self._group_ends else 0
            return
        parsed = RecordHeader.from_json_bytes(header.header_bytes)
        self._schema = parsed.schema
        self._count = parsed.count
        self.source_id: str = parsed.source_id

    @property
    def row_group_ends(self) -> tuple[int, ...]:
        """The position after the last record of every row group, in file order."""
        return tuple(self._group_ends)

    @property
    def column_names(self) -> tuple[str, ...]:
        """The names of the file's columns, which are the keys of every row."""
        return self._column_names

    @property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of the file's columns, as pyarrow reads it from the footer.

        Raises:
          ValueError: If the file changed since this source read its footer.
        """
        return self._handle().schema_arrow

    def _open(self) -> tuple[Any, _Footer]:
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
        self._column_names = tuple(arrow_schema.names)
        group_ends = tuple(int(end) for end in np.cumsum(group_rows, dtype=np.int64))
        header_bytes = key_values.get(METADATA_KEY)
        stored_checksums = key_values.get(CHECKSUM_KEY)
        if header_bytes is None:
            if stored_checksums is not None or _footer_holds_checksums(self._path):
                # A damaged footer can lose its key-value list and still parse:
                # the checksum entry's bytes are still there, unparsed.
                raise self._unreadable("it carries tinax checksums but no tinax header: its footer is damaged")
            if self._mapping == "numpy":
                require_mappable(arrow_schema, repr(str(self._path)))
            return parquet_file, _Footer(None, group_ends, None)
        try:
            header = RecordHeader.from_json_bytes(header_bytes)
        except ValueError as error:
            raise self._unreadable(str(error)) from error
        # Names and types must match; nullability may differ, since missing values are refused when read.
        if not _tinax_columns_match(header.schema, arrow_schema):
            found = {name: str(kind) for name, kind in zip(arrow_schema.names, arrow_schema.types, strict=True)}
            wanted = {field.name: field.describe() for field in header.schema.fields}
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
        return parquet_file, _Footer(header_bytes, group_ends, group_checks)

    def _verified_footer(self, metadata: Any, stored: bytes) -> tuple[tuple[int, int, str], ...]:
        """Checks the footer's digest and returns every row group's range and digest."""
        footer_digest, group_digests = _parse_checksums(stored, metadata.num_row_groups)
        with open(self._path, "rb") as handle:
            footer, footer_start = _read_raw_footer(handle, "the file")
        if _footer_digest(footer, stored, group_digests) != footer_digest:
            raise ValueError("its footer does not match its checksum: the footer is corrupt")
        ranges = _row_group_ranges(metadata, footer_start, "the file")
        return tuple((start, end, digest) for (start, end), digest in zip(ranges, group_digests, strict=True))

    def __getitem__(self, index: int) -> dict[str, Any]:
        position = self._position(index)
        with self._lock:
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
        groups = np.searchsorted(np.asarray(self._group_ends, dtype=np.int64), positions, side="right")
        # The batch's positions grouped by row group, each group's in batch order.
        order = np.argsort(groups, kind="stable")
        cuts = np.flatnonzero(np.diff(groups[order])) + 1
        records: list[Any] = [None] * len(positions)
        with self._lock:
            for chosen in np.split(order, cuts) if len(order) else []:
                group_index = int(groups[chosen[0]])
                group = self._cache.get(group_index)
                if group is None:
                    group = self._load(group_index, int(positions[chosen[0]]))
                else:
                    self._cache.move_to_end(group_index)
                offset = self._group_ends[group_index - 1] if group_index else 0
                try:
                    found = group.records(positions[chosen] - offset)
                except ValueError as error:
                    raise ValueError(
                        f"{str(self._path)!r}: a record of row group {group_index} is malformed ({error})"
                    ) from error
                for slot, record in zip(chosen.tolist(), found, strict=True):
                    records[slot] = record
        return records

    def _record(self, position: int) -> dict[str, Any]:
        # Called with the lock held.
        group_index = bisect.bisect_right(self._group_ends, position)
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

    def _read_group(self, group_index: int, columns: Sequence[str] | None) -> pa.Table:
        # Called with the lock held, so one thread reads the file at a time.
        parquet_file = self._handle()
        if self._group_checks is not None and group_index not in self._verified:
            self._verify_row_group(group_index)
            self._verified.add(group_index)
        table = parquet_file.read_row_group(group_index, columns=None if columns is None else list(columns))
        expected_rows = self._group_ends[group_index] - (self._group_ends[group_index - 1] if group_index else 0)
        if table.num_rows != expected_rows:
            raise ValueError(f"it holds {table.num_rows} rows where the footer says {expected_rows}")
        return table

    def _getters(self, table: pa.Table) -> list[tuple[str, Callable[[int], Any]]]:
        if self._schema is not None:
            return _tinax_getters(self._schema, table)
        return [
            (name, column_getter(table.column(index).combine_chunks(), self._mapping))
            for index, name in enumerate(table.column_names)
        ]

    def _load(self, group_index: int, position: int) -> _RowGroup:
        # Called with the lock held.
        import pyarrow as pa

        try:
            table = self._read_group(group_index, None)
            group = _RowGroup(self._getters(table), int(table.nbytes))
        except (pa.ArrowException, OSError, ValueError) as error:
            raise ValueError(
                f"{str(self._path)!r}: record {position} cannot be read (row group {group_index}: {error})"
            ) from error
        # Evicted first, so the budget holds while the new row group is added.
        while self._cache and self._cached_bytes + group.nbytes > self._cache_bytes:
            _, evicted = self._cache.popitem(last=False)
            self._cached_bytes -= evicted.nbytes
        self._cache[group_index] = group
        self._cached_bytes += group.nbytes
        return group

    def column_values(self, name: str) -> list[Any]:
        """Reads one column of every row, in order, without reading the other columns.

        Args:
          name: One of :attr:`column_names`.

        Returns:
          The value each row holds in that column, as indexing the row gives it.

        Raises:
          ValueError: If a row group is corrupt or a value cannot be given,
            naming the path and the row.
        """
        import pyarrow as pa

        values: list[Any] = []
        for group_index in range(len(self._group_ends)):
            first = self._group_ends[group_index - 1] if group_index else 0
            with self._lock:
                try:
                    table = self._read_group(group_index, [name])
                    (getter,) = self._getters(table)
                except (pa.ArrowException, OSError, ValueError) as error:
                    raise ValueError(
                        f"{str(self._path)!r}: column {name!r} cannot be read (row group {group_index}: {error})"
                    ) from error
            column = table.column(0)
            if not _needs_getter(column.type):
                # Scalars: pyarrow's own conversion gives the same values, faster.
                values.extend(column.to_pylist())
                continue
            for row in range(table.num_rows):
                try:
                    values.append(getter[1](row))
                except ValueError as error:
                    raise ValueError(
                        f"{str(self._path)!r}: record {first + row} is malformed (column {name!r}: {error})"
                    ) from error
        return values

    def _verify_row_group(self, group_index: int) -> None:
        assert self._group_checks is not None
        start, end, expected = self._group_checks[group_index]
        with open(self._path, "rb") as handle:
            found = _digest_range(handle, start, end)
        if found != expected:
            raise ValueError(
                f"the bytes of row group {group_index} do not match the checksum written with them: it is corrupt"
            )

    def __repr__(self) -> str:
        if self._schema is None:
            return (
                f"ParquetRecordSource(path={os.fspath(self._path)!r}, records={self._count}, "
                f"row_groups={len(self._group_ends)}, plain Parquet rows, mapping={self._mapping!r})"
            )
        return (
            f"ParquetRecordSource(path={os.fspath(self._path)!r}, records={self._count}, "
            f"row_groups={len(self._group_ends)}, fields={list(self._schema.names)}, source_id={self.source_id!r})"
        )


def _needs_getter(arrow_type: pa.DataType) -> bool:
    """Whether a column's rows differ from its to_pylist values under some mapping (lists, tensors, structs)."""
    import pyarrow as pa
    import pyarrow.types as types

    return bool(
        types.is_list(arrow_type)
        or types.is_large_list(arrow_type)
        or types.is_fixed_size_list(arrow_type)
        or types.is_struct(arrow_type)
        or isinstance(arrow_type, pa.BaseExtensionType)
    )
