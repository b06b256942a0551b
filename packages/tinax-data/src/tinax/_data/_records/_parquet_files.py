"""Random access to the rows of many Parquet files as one dataset: the reader behind a folder, a pattern or a list.

The files' row groups, one file after another, are the dataset's row groups,
so everything the one-file reader does by row group works across files.
Schemas, hive partitions and reopening rules: docs/guide/data.md, section
"Datasets of many files".
"""

from __future__ import annotations

import urllib.parse
from typing import Any, NamedTuple, cast

import numpy as np
import pyarrow as pa

from tinax._data._compat02 import CorruptParquetError
from tinax._data._records._file_sets import FileSet, combined_header, require_one_kind
from tinax._data._records._parquet_footer import _Footer, checked_range
from tinax._data._records._parquet_source import ParquetRecordSource
from tinax._data._records._record_codec import RecordHeader
from tinax._data._records._record_file_source import DEFAULT_CACHE_BYTES, FileSetSource, OpenFiles

__all__ = ["ParquetFilesSource"]

# The folder name of a missing partition value, as Hive, Spark and pyarrow write it.
_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


class _Files(NamedTuple):
    """What the footers of a dataset's files say: the header of a :class:`ParquetFilesSource`."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    footers: tuple[_Footer, ...]
    #: The files' columns unified, then the partition fields.
    schema: pa.Schema
    file_columns: tuple[tuple[str, ...], ...]
    partition_names: tuple[str, ...]
    partition_values: tuple[tuple[Any, ...], ...]
    #: Uncompressed bytes of each file's row groups, as its footer says.
    stored_bytes: tuple[int, ...]


class ParquetFilesSource(FileSetSource, ParquetRecordSource):
    """The one-file reader over the row groups of several Parquet files, one after the other.

    Pickles as root, names and footers; a copy refuses a file whose footer changed.
    """

    _files_header: _Files

    def __init__(self, files: FileSet, *, mapping: str = "python", cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        """Reads every file's footer, checks them against each other and unifies their schemas."""
        self._given = files.given
        self._named_files = files.files
        super().__init__(files.root, mapping=mapping, cache_bytes=cache_bytes)

    def _reading_handle(self, header: Any) -> _OpenFiles:
        return _OpenFiles(self, header)

    def _read_headers(self) -> _Files:
        names = tuple(file.name for file in self._named_files)

        # One file after the other: a footer is parsed in about as long as it takes to read from a local disk,
        # under the interpreter lock, so threads only took turns (three times slower on two cores).
        found = [self.read_footer(file.path) for file in self._named_files]
        footers = tuple(item[0] for item in found)
        schemas = [item[1] for item in found]
        header = require_one_kind(self._given, names, [footer.header_bytes for footer in footers])
        own_columns = {column for found_schema in schemas for column in found_schema.names}
        partition_names, partition_types, partition_values = _partitions(names, own_columns)
        if header is not None:
            schema = schemas[0]
            with_shapes = next((name for name, footer in zip(names, footers, strict=True) if footer.empty_shapes), None)
            if with_shapes is not None:
                raise ValueError(
                    f"the tinax record file {with_shapes!r} keeps the shapes of arrays with no element in its field "
                    "metadata, which a dataset of many files does not combine: read it on its own"
                )
            if partition_names:
                raise ValueError(
                    f"{self._given} holds tinax record files in hive partition folders ({names[0]!r}): tinax "
                    "records read back as written, so partition values cannot become fields of them"
                )
        else:
            schema = _unified(names, schemas)
            for name, kind in zip(partition_names, partition_types, strict=True):
                schema = schema.append(pa.field(name, kind))
        return _Files(
            names,
            tuple(item[2] for item in found),
            footers,
            schema,
            tuple(tuple(found_schema.names) for found_schema in schemas),
            partition_names,
            partition_values,
            tuple(item[3] for item in found),
        )

    def _adopt(self, header: Any) -> None:
        files: _Files = header
        starts = np.cumsum([0] + [footer.group_ends[-1] if footer.group_ends else 0 for footer in files.footers])
        group_ends = tuple(
            int(start + end)
            for start, footer in zip(starts.tolist(), files.footers, strict=False)
            for end in footer.group_ends
        )
        file_of_group = [index for index, footer in enumerate(files.footers) for _ in footer.group_ends]
        checks = [
            check for footer in files.footers for check in (footer.group_checks or [None] * len(footer.group_ends))
        ]
        header_bytes = None
        if files.footers[0].header_bytes is not None:
            parsed = [RecordHeader.from_json_bytes(footer.header_bytes or b"") for footer in files.footers]
            header_bytes = combined_header(parsed).to_json_bytes()
        combined = _Footer(header_bytes, group_ends, tuple(checks) if any(checks) else None)  # type: ignore[arg-type]
        super()._adopt(combined)
        # The files' own footers stand for the dataset: pickled with it, compared when a handle opens a file.
        self._header = header
        self._files_header = files
        self._column_names = tuple(files.schema.names)
        self._file_of_group = np.asarray(file_of_group, dtype=np.int64)
        self._first_group_of_file = np.searchsorted(self._file_of_group, np.arange(len(files.names)))
        self._all_checksummed = all(footer.group_checks is not None for footer in files.footers)
        rows = np.diff(starts).tolist()
        self.file_set: list[list[Any]] = [
            [name, size, int(count)] for name, size, count in zip(files.names, files.sizes, rows, strict=True)
        ]

    @property
    def checksummed(self) -> bool:
        """Whether every file carries tinax checksums."""
        return self._all_checksummed

    @property
    def checksummed_files(self) -> int:
        """How many of the files carry tinax checksums."""
        return sum(footer.group_checks is not None for footer in self._files_header.footers)

    @property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of the rows: the files' columns unified, then the hive partition fields."""
        return self._files_header.schema

    def locate_group(self, group_index: int) -> tuple[int, int]:
        """The file (its index) that holds a row group of the dataset, and the row group's index in that file."""
        file_index = int(self._file_of_group[group_index])
        return file_index, group_index - int(self._first_group_of_file[file_index])

    def _read_group(self, group_index: int, columns: Any, parquet_file: Any = None) -> pa.Table:
        # The file is opened (and its footer checked) before its row group's bytes are checked, so that a
        # file replaced since the dataset opened is named as such rather than as a corrupt row group.
        if parquet_file is None:
            parquet_file = self._handle()
        parquet_file.file_of_group(group_index)
        return super()._read_group(group_index, columns, parquet_file)

    def _object_of_group(self, parquet_file: Any, group_index: int) -> Any:
        return super()._object_of_group(parquet_file.file_of_group(group_index), group_index)

    def _verify_row_group(self, group_index: int) -> tuple[int, bytes] | None:
        assert self._group_checks is not None
        # Files tinax did not write hold no checksums: their row groups' entries are None.
        check = cast("tuple[int, int, str] | None", self._group_checks[group_index])
        if check is None:
            return None  # A file tinax did not write has no checksums of its own.
        start, end, expected = check
        file_index, local = self.locate_group(group_index)
        found, data = checked_range(self.file_path(file_index), start, end)
        if found != expected:
            raise CorruptParquetError(
                f"the bytes of row group {local} of {self._files_header.names[file_index]!r} do not match the checksum "
                "written with them: it is corrupt"
            )
        return None if data is None else (start, data)

    def decoded_row_bytes(self) -> float:
        """The decoded size of a row: as measured in this process, else as the footers' uncompressed sizes say."""
        if self._decoded_rows:
            return self._decoded_bytes / self._decoded_rows
        return sum(self._files_header.stored_bytes) / max(self._count, 1)

    def __repr__(self) -> str:
        if self._schema is None:
            rows = f"plain Parquet rows, mapping={self._mapping!r}"
        else:
            rows = f"fields={list(self._schema.names)}, source_id={self.source_id!r}"
        return (
            f"ParquetFilesSource(root={str(self._path)!r}, files={len(self.file_set)}, records={self._count}, "
            f"row_groups={len(self._group_ends)}, {rows})"
        )


class _OpenFiles:
    """Stands in for the one-file reader's ``ParquetFile``, one thread at a time; keeps a few files open (LRU)."""

    def __init__(self, source: ParquetFilesSource, files: _Files) -> None:
        self._source = source
        self._files = files
        self._opened = OpenFiles(source, files.footers, "footer")

    @property
    def schema_arrow(self) -> pa.Schema:
        return self._files.schema

    def read_row_group(self, group_index: int, columns: list[str] | None = None) -> pa.Table:
        """Reads a row group of the dataset, its columns in the dataset's schema."""
        source, files = self._source, self._files
        file_index, local = source.locate_group(group_index)
        parquet_file = self.file_of_group(group_index)
        own_columns = files.file_columns[file_index]
        wanted = list(files.schema.names) if columns is None else columns
        if source.schema is not None:
            return parquet_file.read_row_group(local, columns=columns)
        table = parquet_file.read_row_group(local, columns=[name for name in wanted if name in own_columns])
        rows = table.num_rows
        arrays = []
        for name in wanted:
            field = files.schema.field(name)
            if name in files.partition_names:
                value = files.partition_values[file_index][files.partition_names.index(name)]
                arrays.append(pa.repeat(pa.scalar(value, field.type), rows))
            elif name in own_columns:
                column = table.column(name)
                arrays.append(column if column.type == field.type else column.cast(field.type))
            else:
                arrays.append(pa.nulls(rows, field.type))
        return pa.Table.from_arrays(arrays, schema=pa.schema([files.schema.field(name) for name in wanted]))

    def file_of_group(self, group_index: int) -> Any:
        """The open ``ParquetFile`` holding a row group; a ValueError if the file changed since opening."""
        return self._opened.get(self._source.locate_group(group_index)[0])

    def close(self) -> None:
        self._opened.close()


def _partitions(
    names: tuple[str, ...], file_columns: set[str]
) -> tuple[tuple[str, ...], tuple[pa.DataType, ...], tuple[tuple[Any, ...], ...]]:
    """The hive partition fields (names, types, each file's values), as ``HivePartitioning.discover()`` finds them.

    Keys and values are URL-decoded; a key the files hold as a column (Polars keeps it) adds no field.
    """
    found: list[dict[str, str | None]] = []
    keys: dict[str, None] = {}
    for name in names:
        values: dict[str, str | None] = {}
        for segment in name.split("/")[:-1]:
            encoded_key, equals, encoded_value = segment.partition("=")
            if not equals:
                continue
            key = urllib.parse.unquote(encoded_key)
            if key in file_columns:
                continue
            values[key] = None if encoded_value == _HIVE_NULL else urllib.parse.unquote(encoded_value)
            keys.setdefault(key)
        found.append(values)
    types = [_partition_type([text for values in found if (text := values.get(key)) is not None]) for key in keys]
    rows = []
    for values in found:
        row = []
        for key, kind in zip(keys, types, strict=True):
            text = values.get(key)
            row.append(int(text) if text is not None and kind == pa.int32() else text)
        rows.append(tuple(row))
    return tuple(keys), tuple(types), tuple(rows)


def _partition_type(texts: list[str]) -> pa.DataType:
    """int32 where every value of a partition key reads as one, else string (as pyarrow's discovery infers)."""
    try:
        pa.array(texts, pa.string()).cast(pa.int32())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.string()
    return pa.int32()


def _unified(names: tuple[str, ...], schemas: list[pa.Schema]) -> pa.Schema:
    """The files' schemas unified by ``pyarrow.unify_schemas``, every field nullable; a ValueError names two files."""
    plain = [schema.remove_metadata() for schema in schemas]
    try:
        unified = pa.unify_schemas(plain)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        first_seen: dict[str, tuple[str, pa.DataType]] = {}
        for name, schema in zip(names, plain, strict=True):
            for field in schema:
                seen = first_seen.setdefault(field.name, (name, field.type))
                try:
                    pa.unify_schemas([pa.schema([pa.field(field.name, seen[1])]), pa.schema([field])])
                except (pa.ArrowInvalid, pa.ArrowTypeError):
                    raise ValueError(
                        f"the files {seen[0]!r} and {name!r} cannot be read as one dataset: column {field.name!r} is "
                        f"{seen[1]} in the first and {field.type} in the second, which pyarrow cannot unify"
                    ) from error
        raise ValueError(f"the files' schemas cannot be unified: {error}") from error
    return pa.schema([field.with_nullable(True) for field in unified])
