"""What every subcommand produces, as aligned text or as JSON of one published schema.

A :class:`Report` has a kind, a path, problems, a summary of named values and named tables.
``--json`` prints :meth:`Report.to_json` (described by ``schema.json`` next to this module);
failures print :func:`error_document`. Display labels become snake_case JSON names.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import math
import pathlib
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "SCHEMA",
    "SCHEMA_ID",
    "SCHEMA_VERSION",
    "ERROR_TYPES",
    "InspectOptions",
    "Report",
    "Shown",
    "Table",
    "error_document",
    "json_key",
    "json_value",
    "schema_text",
]

#: The name of the JSON Schema file, shipped next to this module.
SCHEMA_FILE = "schema.json"


def schema_text() -> str:
    """The published JSON Schema, read by path so it works where ``tinax`` cannot import (``_tinax_command``)."""
    return pathlib.Path(__file__).with_name(SCHEMA_FILE).read_text(encoding="utf-8")


#: The JSON Schema (draft 2020-12) of every ``tinax ... --json`` document.
SCHEMA: dict[str, Any] = json.loads(schema_text())
#: The schema's ``$id``, which every document carries as its ``schema``.
SCHEMA_ID: str = SCHEMA["$id"]
#: Raised when the JSON output changes incompatibly (a field removed or retyped).
SCHEMA_VERSION: int = SCHEMA["properties"]["schema_version"]["const"]
#: The kinds of error a document's ``error.type`` names.
ERROR_TYPES: tuple[str, ...] = tuple(SCHEMA["$defs"]["error"]["properties"]["type"]["enum"])


@dataclasses.dataclass(frozen=True)
class InspectOptions:
    """The caller's ``tinax inspect`` choices: ``names`` (fnmatch pattern), ``head`` records, ``max_bytes``."""

    names: str | None = None
    head: int = 0
    max_bytes: int = 2**30


@dataclasses.dataclass(frozen=True)
class Shown:
    """A value shown as ``text`` in the text form and as ``data`` in the JSON form."""

    text: str
    data: Any


@dataclasses.dataclass(frozen=True)
class Table:
    """A named table: column names and one mapping per row."""

    name: str
    columns: tuple[str, ...]
    rows: tuple[Mapping[str, Any], ...]


@dataclasses.dataclass
class Report:
    """The result of one subcommand; any ``problems`` make the command exit 1."""

    command: str
    kind: str
    path: str | None = None
    problems: list[str] = dataclasses.field(default_factory=list)
    summary: dict[str, Any] = dataclasses.field(default_factory=dict)
    tables: list[Table] = dataclasses.field(default_factory=list)
    bytes_read: int | None = None

    @property
    def ok(self) -> bool:
        """Whether no problem was found."""
        return not self.problems

    def add_table(self, name: str, columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> None:
        """Appends a table; every row must have exactly ``columns`` as keys."""
        self.tables.append(Table(name, tuple(columns), tuple(rows)))

    def to_json(self) -> dict[str, Any]:
        """Returns the document :data:`SCHEMA` describes, with snake_case names and JSON values."""
        document = _document(self.command, self.kind, self.path)
        document["ok"] = self.ok
        document["problems"] = list(self.problems)
        document["summary"] = _named({name: json_value(value) for name, value in self.summary.items()})
        document["tables"] = _named(
            {
                table.name: {
                    "columns": [json_key(column) for column in table.columns],
                    "rows": [
                        _named({column: json_value(value) for column, value in row.items()}) for row in table.rows
                    ],
                }
                for table in self.tables
            }
        )
        document["bytes_read"] = self.bytes_read
        return document

    def to_text(self) -> str:
        """Returns the human-readable form: aligned summary lines, then each table, then the problems."""
        lines: list[str] = []
        fields: dict[str, Any] = {"kind": self.kind}
        if self.path is not None:
            fields["path"] = self.path
        fields.update(self.summary)
        if self.bytes_read is not None:
            fields["bytes read"] = self.bytes_read
        width = max(len(name) for name in fields)
        lines.extend(f"{name + ':':<{width + 1}} {_cell(value)}" for name, value in fields.items())
        for table in self.tables:
            lines += ["", f"{table.name} ({len(table.rows)})", *_aligned(table)]
        if self.problems:
            lines += ["", f"problems ({len(self.problems)})", *(f"  {problem}" for problem in self.problems)]
        return "\n".join(lines)


def _document(command: str | None, kind: str | None, path: str | None) -> dict[str, Any]:
    """Every key of a document, in the schema's order, with the values of a command that did nothing."""
    return {
        "schema": SCHEMA_ID,
        "schema_version": SCHEMA_VERSION,
        "command": command,
        "kind": kind,
        "path": path,
        "ok": False,
        "error": None,
        "problems": [],
        "summary": {},
        "tables": {},
        "bytes_read": None,
    }


def error_document(
    command: str | None,
    *,
    error_type: str,
    message: str,
    exit_code: int,
    exception: BaseException | None = None,
    kind: str | None = None,
    path: str | None = None,
) -> dict[str, Any]:
    """The document of a failed command: ``ok`` false, ``error`` set (ValueError for unknown ``error_type``)."""
    if error_type not in ERROR_TYPES:
        raise ValueError(f"error_type must be one of {ERROR_TYPES}, got {error_type!r}")
    document = _document(command, kind, path)
    document["error"] = {
        "type": error_type,
        "message": message,
        "exception": None if exception is None else type(exception).__name__,
        "exit_code": exit_code,
    }
    return document


_NOT_A_KEY_CHARACTER = re.compile(r"[^a-z0-9]+")


def json_key(label: str) -> str:
    """Returns the snake_case JSON name of a display label: ``"files checked"`` becomes ``"files_checked"``."""
    return _NOT_A_KEY_CHARACTER.sub("_", label.lower()).strip("_")


def _named(values: Mapping[str, Any]) -> dict[str, Any]:
    named: dict[str, Any] = {}
    for label, value in values.items():
        key = json_key(label)
        if key in named or not key:
            raise ValueError(f"the label {label!r} gives the JSON name {key!r}, which is empty or already taken")
        named[key] = value
    return named


_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


def _non_finite_name(value: float) -> str:
    return "NaN" if math.isnan(value) else _NON_FINITE[value]


def json_value(value: Any) -> Any:
    """Converts a value to JSON data per the schema's ``value`` definition (tagged objects for arrays, bytes...).

    NumPy is never imported here; its types are recognised only once a reader has imported it.
    """
    if isinstance(value, Shown):
        return json_value(value.data)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)  # an IntEnum, say, as its number
    if isinstance(value, str):
        return str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else {"type": "float", "value": _non_finite_name(value)}
    if isinstance(value, complex):
        return {"type": "complex", "real": json_value(value.real), "imag": json_value(value.imag)}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"type": "bytes", "base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Mapping):
        return {str(key): json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(item) for item in value]
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray):
        return {
            "type": "ndarray",
            "dtype": str(value.dtype),
            "shape": [int(extent) for extent in value.shape],
            "values": _element(value.tolist()),
        }
    if numpy is not None and isinstance(value, numpy.generic):
        return json_value(value.item())
    if isinstance(value, (datetime.date, datetime.time)):
        return {"type": _class_name(value), "value": value.isoformat()}
    return {"type": _class_name(value), "value": str(value)}


def _element(value: Any) -> Any:
    """An element (or nested list) from ``ndarray.tolist()`` in the compact array form."""
    if isinstance(value, list):
        return [_element(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return _non_finite_name(value)
    if isinstance(value, complex):
        return [_element(value.real), _element(value.imag)]
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json_value(value)


def _class_name(value: object) -> str:
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _cell(value: Any) -> str:
    if isinstance(value, Shown):
        return value.text
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(map(str, value)) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, Mapping):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _aligned(table: Table) -> list[str]:
    cells = [[_cell(row.get(column)) for column in table.columns] for row in table.rows]
    widths = [max([len(column), *(len(row[index]) for row in cells)]) for index, column in enumerate(table.columns)]
    # A column of numbers (blanks allowed) is right-aligned.
    numeric = []
    for column in table.columns:
        present = [row.get(column) for row in table.rows if row.get(column) is not None]
        numeric.append(bool(present) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present))

    def line(values: Sequence[str]) -> str:
        parts = [
            value.rjust(width) if right else value.ljust(width)
            for value, width, right in zip(values, widths, numeric, strict=True)
        ]
        return ("  " + "  ".join(parts)).rstrip()

    return [line(table.columns), *(line(row) for row in cells)]
