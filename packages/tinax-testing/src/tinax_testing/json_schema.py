"""A checker for the subset of JSON Schema that the ``tinax`` command's report schema uses."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tinax._core._command._report import SCHEMA

__all__ = ["schema_problems"]


def schema_problems(document: object, schema: Mapping[str, Any] = SCHEMA, where: str = "$") -> list[str]:
    """Checks ``document`` against the JSON Schema subset that the command's ``SCHEMA`` uses.

    Covers ``type``, ``enum``, ``const``, ``required``, ``properties``,
    ``additionalProperties``, ``propertyNames``, ``items``, ``pattern``,
    ``minimum``, ``anyOf`` and ``$ref`` to the schema's own ``$defs``:
    enough for the command's schema, so that tests check its output without
    a JSON Schema library.

    Args:
      document: The parsed JSON document.
      schema: The schema, or the part of ``SCHEMA`` that applies at ``where``.
      where: The JSON path of ``document``, for the messages.

    Returns:
      One line per violation; empty if the document conforms.
    """
    return _problems(document, schema, where, schema if "$defs" in schema else SCHEMA)


def _problems(document: object, schema: Mapping[str, Any], where: str, root: Mapping[str, Any]) -> list[str]:
    if "$ref" in schema:
        reference = schema["$ref"]
        if not reference.startswith("#/$defs/"):
            raise ValueError(f"schema_problems follows only references to #/$defs/, got {reference!r}")
        return _problems(document, root["$defs"][reference.removeprefix("#/$defs/")], where, root)
    if "anyOf" in schema:
        options = [_problems(document, option, where, root) for option in schema["anyOf"]]
        if all(options):
            # Report the option the document's type matched, rather than one it could never be.
            mismatch = f"{where}: expected "
            return min(options, key=lambda found: (found[0].startswith(mismatch), len(found)))
    types = schema.get("type")
    if types is not None:
        allowed = [types] if isinstance(types, str) else list(types)
        if not any(_is_type(document, name) for name in allowed):
            return [f"{where}: expected {' or '.join(allowed)}, got {type(document).__name__}"]
    problems: list[str] = []
    if "const" in schema and not _same(document, schema["const"]):
        problems.append(f"{where}: {document!r} is not {schema['const']!r}")
    if "enum" in schema and not any(_same(document, item) for item in schema["enum"]):
        problems.append(f"{where}: {document!r} is not one of {schema['enum']}")
    if "pattern" in schema and isinstance(document, str) and re.search(schema["pattern"], document) is None:
        problems.append(f"{where}: {document!r} does not match {schema['pattern']!r}")
    number = isinstance(document, (int, float)) and not isinstance(document, bool)
    if "minimum" in schema and number and document < schema["minimum"]:
        problems.append(f"{where}: {document!r} is less than {schema['minimum']!r}")
    if isinstance(document, dict):
        problems.extend(f"{where}: lacks {key!r}" for key in schema.get("required", ()) if key not in document)
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        names = schema.get("propertyNames")
        for key, value in document.items():
            if names is not None:
                problems.extend(_problems(key, names, f"{where}[key {key!r}]", root))
            if key in properties:
                problems.extend(_problems(value, properties[key], f"{where}.{key}", root))
            elif extra is False:
                problems.append(f"{where}: unexpected key {key!r}")
            elif isinstance(extra, Mapping):
                problems.extend(_problems(value, extra, f"{where}.{key}", root))
    if isinstance(document, list) and "items" in schema:
        for index, item in enumerate(document):
            problems.extend(_problems(item, schema["items"], f"{where}[{index}]", root))
    return problems


def _same(value: object, expected: object) -> bool:
    """JSON equality: a bool is not a number, and 1 equals 1.0."""
    if isinstance(value, bool) or isinstance(expected, bool):
        return type(value) is type(expected) and value == expected
    return value == expected


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
