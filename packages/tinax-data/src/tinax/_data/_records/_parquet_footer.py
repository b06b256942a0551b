"""Opening a Parquet file for the reader: its footer read and checked, locally or as an object.

The footer's row groups, tinax header and checksums are checked on opening; an
object is read through ranged reads that pin its version. The layout and
checksums are those ``_parquet_write`` writes (see docs/guide/data.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import pathlib
import sys
from collections.abc import Iterator
from typing import Any, NamedTuple, cast

import pyarrow as pa
import pyarrow.parquet as pq

from tinax._core.logs import get_logger
from tinax._data._compat02 import CorruptParquetError
from tinax._data._records._arrow_columns import (
    FIELD_EMPTY_SHAPES_KEY,
    EmptyShapes,
    _is_native_array_type,
    _plain_arrow_type,
    parse_empty_shapes,
)
from tinax._data._records._arrow_values import require_mappable
from tinax._data._records._locations import Location, RemotePath, file_size, open_object, read_object_range
from tinax._data._records._parquet_checksums import (
    CHECKSUM_KEY,
    CHECKSUM_MARKER,
    METADATA_KEY,
    DigestProcess,
    _digest_range,
    _footer_digest,
    _parse_checksums,
    _read_raw_footer,
    _row_group_ranges,
    range_digests,
)
from tinax._data._records._record_codec import KIND_ARRAY, RecordHeader, RecordSchema
from tinax._data._records._record_file_source import RecordFileSource

try:
    # How pyarrow unpickles a FileMetaData: it parses a footer's Thrift bytes, without opening the file again.
    from pyarrow._parquet import _reconstruct_filemetadata as _parse_footer
except ImportError:  # A pyarrow without it: footers are read by opening each file (see ``read_footer``).
    _parse_footer = None

_logger = get_logger("data")
#: The last bytes of an object fetched at once on opening it: they hold the footer of most Parquet files.
_FOOTER_WINDOW = 64 * 1024


class UnreadableParquetError(pa.ArrowInvalid):  # type: ignore[misc]
    """pyarrow refuses the file or a row group with ``ArrowInvalid`` (0.2's error); also a ValueError."""


def read_error_class(error: BaseException) -> type[ValueError]:
    """The error class for an unreadable row group: ValueError, also pyarrow's type where pyarrow refused it."""
    if isinstance(error, CorruptParquetError) or type(error) is OSError:
        return CorruptParquetError
    if isinstance(error, pa.ArrowInvalid):
        return UnreadableParquetError
    return ValueError


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


class ParquetOpening(RecordFileSource[_Footer]):
    """Opens Parquet files and reads and checks their footers: the base of ``ParquetRecordSource``."""

    _mapping: str
    _group_checks: tuple[tuple[int, int, str], ...] | None

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
            raise _corrupt_group(group_index)
        return None if data is None else (start, data)

    def _verify_run(self, group_index: int, last_group: int, hasher: DigestProcess | None = None) -> None:
        """Checks consecutive row groups of a local file against their digests, their bytes read at once."""
        assert self._group_checks is not None
        checks = self._group_checks[group_index : last_group + 1]
        ranges = [(start, end) for start, end, _ in checks]
        found = range_digests(cast("pathlib.Path", self._path), ranges, hasher)
        for index, (digest, (_, _, expected)) in enumerate(zip(found, checks, strict=True), start=group_index):
            if digest != expected:
                raise _corrupt_group(index)


def _corrupt_group(group_index: int) -> CorruptParquetError:
    return CorruptParquetError(
        f"the bytes of row group {group_index} do not match the checksum written with them: it is corrupt"
    )


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
