"""Batches as one NumPy array per field, built from rows or straight from decoded columns (NumPy only).

Given :func:`stack_records` as batch function, a tinax reader skips the records and hands over
:class:`StackedColumns` built from its columns, which :func:`stack_records` returns as they are; column
reads fall back to stacking rows wherever that would give other arrays, so both ways agree exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tinax._core.validation import expectation_message, fail_type, fail_value

__all__ = ["StackedColumns", "join_stacked", "stack_records", "stack_values", "stacks_columns"]


class StackedColumns:
    """A batch a reader already stacked, one array per field; :func:`stack_records` returns ``columns`` unchanged."""

    __slots__ = ("_length", "columns")

    def __init__(self, columns: dict[str, np.ndarray[Any, Any]], length: int) -> None:
        self.columns = columns
        self._length = length

    def __len__(self) -> int:
        return self._length

    def __repr__(self) -> str:
        return f"StackedColumns(rows={self._length}, fields={list(self.columns)})"


def stack_values(name: str, values: Sequence[Any]) -> np.ndarray[Any, Any]:
    """``np.stack`` of each value's ``np.asarray``; a ValueError naming the field if shapes differ."""
    arrays = [np.asarray(value) for value in values]
    try:
        return np.stack(arrays)
    except ValueError as error:
        shapes = sorted({array.shape for array in arrays})
        raise ValueError(
            expectation_message(f"field {name!r}", "values of one shape in every record of the batch", shapes)
        ) from error


def stack_records(records: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray[Any, Any]]:
    """Stacks a batch of records field by field: a batch function for the pipelines.

    Each field becomes ``np.stack`` of every record's ``np.asarray`` value
    (ints ``int64``, floats ``float64``, strings fixed-width ``str_``). As
    ``batch_fn`` of :func:`training_batches` or :func:`evaluation_batches`
    over a :func:`read_parquet_record` dataset, it also lets the reader build
    the batch straight from its columns; the arrays are the same either way.

    Args:
      records: The records of one batch: mappings with the same fields.

    Returns:
      A dict from each field name (in the first record's order) to its stacked array.

    Raises:
      TypeError: If ``records`` is not a sequence, or a record is not a mapping.
      ValueError: If ``records`` is empty, a record's fields differ from the first's, or a field mixes shapes.

    Examples:
      >>> from tinax.data import stack_records
      >>> batch = stack_records([{"id": 1, "x": [0.5, 1.5]}, {"id": 2, "x": [2.5, 3.5]}])
      >>> batch["id"].dtype, batch["x"].shape
      (dtype('int64'), (2, 2))
    """
    if isinstance(records, StackedColumns):
        return records.columns
    given: object = records
    if not isinstance(given, Sequence) or isinstance(given, (str, bytes)):
        fail_type("records", "a sequence of mappings (the records of one batch)", records)
    if not records:
        fail_value("records", "at least one record", "an empty sequence")
    first = records[0]
    if not isinstance(first, Mapping):
        fail_type("records[0]", "a mapping of field names to values", first)
    names = list(first)
    for index, record in enumerate(records):
        if not isinstance(record, Mapping):
            fail_type(f"records[{index}]", "a mapping of field names to values", record)
        if len(record) != len(names) or any(name not in record for name in names):
            fail_value(f"records[{index}]", f"the fields of records[0] ({names})", f"the fields {list(record)}")
    return {name: stack_values(name, [record[name] for record in records]) for name in names}


def stacks_columns(batch_fn: Callable[..., Any]) -> bool:
    """Whether a pipeline with this batch function may read its batches column by column."""
    return batch_fn is stack_records


def join_stacked(parts: Sequence[tuple[np.ndarray[Any, Any], dict[str, np.ndarray[Any, Any]]]]) -> dict[str, Any]:
    """Joins a batch stacked in parts, each ``(slots it fills, stacked fields)``, back into the batch's order."""
    if not parts:
        raise ValueError("no rows to join")
    if len(parts) == 1:
        slots, columns = parts[0]
        if bool(np.all(slots[1:] > slots[:-1])):
            return columns
        return {name: array[np.argsort(slots, kind="stable")] for name, array in columns.items()}
    order = np.argsort(np.concatenate([slots for slots, _ in parts]), kind="stable")
    first = parts[0][1]
    return {name: np.concatenate([columns[name] for _, columns in parts])[order] for name in first}
