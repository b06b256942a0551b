"""What every subcommand produces, as aligned text or as JSON of one documented schema.

A :class:`Report` is a kind, a path, an ok flag with the problems found, a
flat summary of named values and named tables. The text form prints the
summary as aligned ``name: value`` lines and each table as aligned columns;
``--json`` prints :meth:`Report.to_json`, which :data:`SCHEMA` describes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["SCHEMA", "SCHEMA_VERSION", "InspectOptions", "Report", "Table", "schema_problems"]

#: Raised when the JSON output changes incompatibly (a field removed or retyped).
SCHEMA_VERSION = 1

# A table cell: a scalar, or a list of ints (a shape).
_CELL: dict[str, Any] = {
    "type": ["string", "integer", "number", "boolean", "null", "array"],
    "items": {"type": "integer"},
}
_VALUE: dict[str, Any] = {"type": ["string", "integer", "number", "boolean", "null", "array", "object"]}

#: The JSON Schema (draft 2020-12 subset) of every ``tinax ... --json`` document.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["schema_version", "command", "kind", "path", "ok", "problems", "summary", "tables", "bytes_read"],
    "additionalProperties": False,
    "properties": {
        "schema_version": {"type": "integer", "enum": [SCHEMA_VERSION]},
        "command": {"type": "string", "enum": ["info", "inspect"]},
        "kind": {"type": "string"},
        "path": {"type": ["string", "null"]},
        "ok": {"type": "boolean"},
        "problems": {"type": "array", "items": {"type": "string"}},
        "summary": {"type": "object", "additionalProperties": _VALUE},
        "tables": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["columns", "rows"],
                "additionalProperties": False,
                "properties": {
                    "columns": {"type": "array", "items": {"type": "string"}},
                    "rows": {"type": "array", "items": {"type": "object", "additionalProperties": _CELL}},
                },
            },
        },
        "bytes_read": {"type": ["integer", "null"]},
    },
}


@dataclasses.dataclass(frozen=True)
class InspectOptions:
    """The caller's choices for ``tinax inspect``, passed to every inspector.

    Attributes:
      names: A shell-style pattern (``fnmatch``) that tensor or array names
        must match to be listed, or None for all.
      head: How many records a record file inspector prints (0 for none).
      max_bytes: The largest file an inspector may decode whole (msgpack).
    """

    names: str | None = None
    head: int = 0
    max_bytes: int = 2**30


@dataclasses.dataclass(frozen=True)
class Table:
    """A named table: column names and one mapping per row."""

    name: str
    columns: tuple[str, ...]
    rows: tuple[Mapping[str, Any], ...]


@dataclasses.dataclass
class Report:
    """The result of one subcommand.

    Attributes:
      command: ``"info"`` or ``"inspect"``.
      kind: What was inspected (``"safetensors"``, ``"orbax-checkpoint"``,
        ...), or ``"environment"`` for ``info``.
      path: The inspected path, or None.
      problems: What a check found wrong; the command exits 1 if any.
      summary: Named values, in display order.
      tables: Named tables, in display order.
      bytes_read: How many bytes of the inspected files the readers read, where counted.
    """

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
        """Returns the document :data:`SCHEMA` describes."""
        return {
            "schema_version": SCHEMA_VERSION,
            "command": self.command,
            "kind": self.kind,
            "path": self.path,
            "ok": self.ok,
            "problems": list(self.problems),
            "summary": dict(self.summary),
            "tables": {
                table.name: {"columns": list(table.columns), "rows": [dict(row) for row in table.rows]}
                for table in self.tables
            },
            "bytes_read": self.bytes_read,
        }

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
            lines.append("")
            lines.append(f"{table.name} ({len(table.rows)})")
            lines.extend(_aligned(table))
        if self.problems:
            lines.append("")
            lines.append(f"problems ({len(self.problems)})")
            lines.extend(f"  {problem}" for problem in self.problems)
        return "\n".join(lines)


def _cell(value: Any) -> str:
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


def schema_problems(document: object, schema: Mapping[str, Any] = SCHEMA, where: str = "$") -> list[str]:
    """Checks ``document`` against the JSON Schema subset :data:`SCHEMA` uses.

    Covers ``type``, ``enum``, ``required``, ``properties``,
    ``additionalProperties`` and ``items``: enough for :data:`SCHEMA`, so that
    tests and scripts can check output without a JSON Schema library.

    Returns:
      One line per violation; empty if the document conforms.
    """
    problems: list[str] = []
    types = schema.get("type")
    if types is not None:
        allowed = [types] if isinstance(types, str) else list(types)
        if not any(_is_type(document, name) for name in allowed):
            return [f"{where}: expected {' or '.join(allowed)}, got {type(document).__name__}"]
    if "enum" in schema and document not in schema["enum"]:
        problems.append(f"{where}: {document!r} is not one of {schema['enum']}")
    if isinstance(document, dict):
        problems.extend(f"{where}: lacks {key!r}" for key in schema.get("required", ()) if key not in document)
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, value in document.items():
            if key in properties:
                problems.extend(schema_problems(value, properties[key], f"{where}.{key}"))
            elif extra is False:
                problems.append(f"{where}: unexpected key {key!r}")
            elif isinstance(extra, Mapping):
                problems.extend(schema_problems(value, extra, f"{where}.{key}"))
    if isinstance(document, list) and "items" in schema:
        for index, item in enumerate(document):
            problems.extend(schema_problems(item, schema["items"], f"{where}[{index}]"))
    return problems


def _is_type(value: object, name: str) -> bool:
    checks: dict[str, Any] = {
        "object": lambda item: isinstance(item, dict),
        "array": lambda item: isinstance(item, list),
        "string": lambda item: isinstance(item, str),
        "integer": lambda item: isinstance(item, int) and not isinstance(item, bool),
        "number": lambda item: isinstance(item, (int, float)) and not isinstance(item, bool),
        "boolean": lambda item: isinstance(item, bool),
        "null": lambda item: item is None,
    }
    return bool(checks[name](value))
