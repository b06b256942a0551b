"""``tinax inspect`` for Parquet and ArrayRecord record files (registered by :mod:`._sniff`).

Files are opened by the readers' own source classes, so validation and checksums match the readers;
only footers or last records are read unless ``--head N`` asks for records. A folder or pattern is
described as one dataset, with a table of its files.
"""

from __future__ import annotations

import pathlib
from typing import Any

from tinax._core._command._report import InspectOptions, Report, Shown
from tinax._data._records._array_record import ArrayRecordSource
from tinax._data._records._array_record_open import require_readable_store
from tinax._data._records._arrow_values import MAPPINGS, array_description, shape_extents, value_description
from tinax._data._records._file_sets import FileSet, resolve_record_paths
from tinax._data._records._locations import RemotePath
from tinax._data._records._parquet_source import ParquetRecordSource
from tinax._data._records._record_codec import KIND_ARRAY, FieldSpec

__all__ = ["inspect_array_record", "inspect_parquet"]

_SHOWN_CHARACTERS = 120


def inspect_parquet(path: pathlib.Path | str, options: InspectOptions) -> Report:
    """Describes a Parquet file: schema (each column's value as the reader gives it), rows, row groups, checksums."""
    found = resolve_record_paths(str(path), "path", "Parquet")
    if isinstance(found, FileSet):
        from tinax._data._records._parquet_files import ParquetFilesSource

        source: ParquetRecordSource = ParquetFilesSource(found, mapping="python")
    elif isinstance(found, RemotePath):
        source = ParquetRecordSource(found, mapping="python")
    else:
        source = ParquetRecordSource(pathlib.Path(path).absolute(), mapping="python")
    report = Report("inspect", "parquet", str(path))
    tinax_format = source.schema is not None
    ends = source.row_group_ends
    report.summary["format"] = "tinax records" if tinax_format else "plain Parquet (read as tinax 0.2 did)"
    _add_files(report, source)
    report.summary["records"] = len(source)
    report.summary["row groups"] = len(ends)
    checksummed = source.checksummed
    many = isinstance(found, FileSet)
    report.summary["footer checksum"] = _footer_checksum(source, many)
    if tinax_format:
        report.summary["source id"] = source.source_id
    _add_parquet_schema(report, source)
    if not many:
        # Each row group starts where the one before it ends.
        groups = [
            {"row group": index, "first record": start, "records": end - start}
            for index, (start, end) in enumerate(zip((0, *ends), ends, strict=False))
        ]
        report.add_table("row groups", ("row group", "first record", "records"), groups)
    _add_head(report, source, options)
    if checksummed:
        report.summary["row group checksums"] = (
            f"verified for the row groups of the first {options.head} records"
            if options.head
            else "present (verified when records are read; --head N reads some)"
        )
    return report


def _footer_checksum(source: ParquetRecordSource, many: bool) -> str:
    """The summary line on the footers' checksums, of one file or of every file of a dataset."""
    if source.checksummed:
        return "verified for every file" if many else "verified"
    with_checksums = getattr(source, "checksummed_files", 0)
    if with_checksums:
        files = len(getattr(source, "file_set", ()))
        return f"verified for {with_checksums} of {files} files (the others not written by tinax 0.3)"
    return "none (not written by tinax 0.3)"


def _add_parquet_schema(report: Report, source: ParquetRecordSource) -> None:
    """The schema table: each column's Arrow type and the value the reader gives for it."""
    arrow_schema = source.arrow_schema
    columns = zip(arrow_schema.names, arrow_schema.types, strict=True)
    if source.schema is not None:
        report.summary["values"] = "as written, whatever mapping= says (the tinax header fixes them)"
        fields = {field.name: field for field in source.schema.fields}
        report.add_table(
            "schema",
            ("column", "arrow type", "tinax field", "value"),
            [
                {
                    "column": name,
                    "arrow type": str(kind),
                    "tinax field": fields[name].describe(),
                    "value": _tinax_value(fields[name], kind),
                }
                for name, kind in columns
            ],
        )
    else:
        report.summary["values"] = (
            "as read_parquet_record(path, mapping=...) gives them; * is an extent that differs by row"
        )
        report.add_table(
            "schema",
            ("column", "arrow type", *(f"{mapping} mapping" for mapping in MAPPINGS)),
            [
                {
                    "column": name,
                    "arrow type": str(kind),
                    **{f"{mapping} mapping": value_description(kind, mapping) for mapping in MAPPINGS},
                }
                for name, kind in columns
            ],
        )


def inspect_array_record(path: pathlib.Path | str, options: InspectOptions) -> Report:
    """Describes an ArrayRecord file: record count, the tinax header and schema where present."""
    found = resolve_record_paths(str(path), "path", "ArrayRecord")
    if isinstance(found, FileSet):
        from tinax._data._records._array_record_files import ArrayRecordFilesSource

        if isinstance(found.root, RemotePath):
            require_readable_store(found.root)
        source: ArrayRecordSource = ArrayRecordFilesSource(found)
    elif isinstance(found, RemotePath):
        require_readable_store(found)
        source = ArrayRecordSource(found)
    else:
        source = ArrayRecordSource(pathlib.Path(path).absolute())
    report = Report("inspect", "array-record", str(path))
    schema = source.schema
    tinax_format = schema is not None
    report.summary["format"] = "tinax records" if tinax_format else "JSON records (as tinax 0.2 wrote them)"
    _add_files(report, source)
    report.summary["records"] = len(source)
    report.summary["checksums"] = "Riegeli chunk hashes, verified as each chunk is read"
    if schema is not None:
        report.summary["source id"] = source.source_id
        report.add_table(
            "schema",
            ("field", "tinax field"),
            [{"field": field.name, "tinax field": field.describe()} for field in schema.fields],
        )
    _add_head(report, source, options)
    return report


def _add_files(report: Report, source: Any) -> None:
    """For a dataset of many files: their count and a table of them, in the dataset's order."""
    files = getattr(source, "file_set", None)
    if files is None:
        return
    report.summary["files"] = len(files)
    first = 0
    rows = []
    for name, size, count in files:
        rows.append({"file": name, "first record": first, "records": count, "bytes": size})
        first += count
    report.add_table("files", ("file", "first record", "records", "bytes"), rows)


def _tinax_value(field: FieldSpec, arrow_type: Any) -> str:
    """What the reader gives for a tinax field: the header's dtype, with the Arrow type's fixed extents."""
    if field.kind != KIND_ARRAY:
        # The reader reads scalar fields through the "python" mapping.
        return value_description(arrow_type, "python")
    assert field.dtype is not None
    assert field.ndim is not None
    # A complex dtype is stored as float pairs on a trailing axis, which the header's ndim leaves out.
    return array_description(field.dtype, shape_extents(arrow_type)[: field.ndim])


def _add_head(report: Report, source: Any, options: InspectOptions) -> None:
    count = min(options.head, len(source))
    if not count:
        return
    # The text form shows each record in one short line; the JSON form holds its values.
    rows = []
    for index in range(count):
        record = source[index]
        rows.append({"index": index, "record": Shown(_shown_record(record), record)})
    report.add_table("records", ("index", "record"), rows)


def _shown_record(record: object) -> str:
    if isinstance(record, dict):
        text = "{" + ", ".join(f"{key!r}: {_shown_value(value)}" for key, value in record.items()) + "}"
    else:
        text = _shown_value(record)
    return text if len(text) <= _SHOWN_CHARACTERS else text[: _SHOWN_CHARACTERS - 3] + "..."


def _shown_value(value: object) -> str:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None and len(shape) > 0:
        return f"{dtype}{list(shape)}"
    return " ".join(repr(value).split())
