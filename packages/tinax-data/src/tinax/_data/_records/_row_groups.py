"""A decoded row group of a Parquet file: a value getter per column, over Arrow buffers.

Imports pyarrow at its top: only the reader and, as they read, planned windows import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.types as types

from tinax._data._records._arrow_columns import EmptyShapes, _storage
from tinax._data._records._arrow_values import ArrayColumn, column_getter, many_values, stacked_values
from tinax._data._records._file_columns import stretches
from tinax._data._records._record_codec import KIND_ARRAY, KIND_NONE, FieldSpec, RecordSchema
from tinax._data._stacking import stack_values

_SYSTEM_POOL = pa.system_memory_pool()


class _RowGroup:
    """One decoded row group: a value getter per column, over Arrow buffers."""

    def __init__(
        self, getters: Sequence[tuple[str, Callable[[int], Any]]], nbytes: int, table: pa.Table | None = None
    ) -> None:
        self.nbytes = nbytes
        self._getters = tuple(getters)
        #: The decoded columns the getters read (which a planned read takes rows of).
        self.table = table

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

    def window_fields(self, rows: np.ndarray[Any, Any]) -> dict[str, np.ndarray[Any, Any] | list[Any]]:
        """Fields of several rows for a window: stacked arrays, or value lists where the dtype depends on the rows."""
        fields: dict[str, np.ndarray[Any, Any] | list[Any]] = {}
        for name, getter in self._getters:
            found = stacked_values(getter, rows)
            fields[name] = many_values(getter, rows) if found is None else found
        return fields

    def stacked(self, rows: np.ndarray[Any, Any]) -> dict[str, np.ndarray[Any, Any]]:
        """Fields of several rows, stacked as ``stack_records`` stacks :meth:`records`.

        A ValueError here makes the caller stack the records, whose error names the record or field.
        """
        stacked = {}
        for name, getter in self._getters:
            found = stacked_values(getter, rows)
            stacked[name] = stack_values(name, many_values(getter, rows)) if found is None else found
        return stacked

    def stacked_slice(self, rows: slice) -> dict[str, np.ndarray[Any, Any]]:
        """:meth:`stacked` of consecutive rows, each field copied out of its column in one piece."""
        stacked = {}
        for name, getter in self._getters:
            found = stacked_values(getter, rows)
            if found is None:
                found = stack_values(name, many_values(getter, np.arange(rows.start, rows.stop)))
            stacked[name] = found
        return stacked

    def whole_stacked(self) -> dict[str, np.ndarray[Any, Any]] | None:
        """Every row's fields stacked from their columns alone; None where a field or row prevents it.

        The arrays may be read-only views of the decoded columns: callers copy them.
        """
        if self.table is None:
            return None
        fields = {}
        for name, getter in self._getters:
            try:
                found = stacked_values(getter, None)
            except ValueError:
                return None
            if found is None:
                return None
            fields[name] = found
        return fields


def _tinax_getters(
    schema: RecordSchema,
    table: pa.Table,
    empty_shapes: Mapping[str, EmptyShapes],
    positions_column: str | None,
) -> list[tuple[str, Callable[[int], Any]]]:
    """Getters that give a tinax-format row group's records exactly as written (of the columns read).

    ``positions_column`` names the record positions column, needed where ``empty_shapes`` lists rows.
    """
    positions = None
    if positions_column is not None:
        positions = np.asarray(table.column(positions_column).to_numpy(), dtype=np.int64)
    getters: list[tuple[str, Callable[[int], Any]]] = []
    present = set(table.column_names)
    for field in schema.fields:
        if field.name not in present:
            continue
        column = _one_array(table.column(field.name))
        if field.kind != KIND_NONE and column.null_count:
            raise ValueError(f"field {field.name!r} has missing values")
        if field.kind != KIND_ARRAY:
            getters.append((field.name, column_getter(column, "python")))
        else:
            getters.append((field.name, _native_array_getter(field, column, empty_shapes.get(field.name), positions)))
    return getters


def _native_array_getter(
    field: FieldSpec, column: Any, empty: EmptyShapes | None, positions: np.ndarray[Any, Any] | None
) -> Callable[[int], Any]:
    assert field.dtype is not None
    assert field.ndim is not None
    storage = _storage(field.dtype)
    arrays = ArrayColumn(column, dtype=field.dtype, pairs=storage.pairs, ndim=field.ndim)
    if arrays.bad_rows:
        row, reason = next(iter(arrays.bad_rows.items()))
        raise ValueError(f"field {field.name!r} has {reason} in row {row}")
    getter = arrays.getter()
    if empty is None:
        return getter

    def get(row: int) -> Any:
        array = getter(row)
        if array.size or 0 not in array.shape[:-1]:
            return array
        # No element, and extents after the first zero one that the nested lists cannot hold.
        position = None if positions is None else int(positions[row])
        try:
            shape = empty.shape(array.shape, position)
            return np.empty(shape, array.dtype)
        except ValueError as error:
            raise ValueError(f"field {field.name!r}: {error}") from error

    return get


def _needs_getter(arrow_type: pa.DataType) -> bool:
    """Whether a column's rows differ from its to_pylist values under some mapping (lists, tensors, structs)."""
    return bool(
        types.is_list(arrow_type)
        or types.is_large_list(arrow_type)
        or types.is_fixed_size_list(arrow_type)
        or types.is_struct(arrow_type)
        or isinstance(arrow_type, pa.BaseExtensionType)
    )


def _in_system_memory(table: pa.Table) -> pa.Table:
    """A copy of a decoded row group in the system allocator.

    pyarrow's pool fragmented around long-lived cached groups (the process grew to about twice the cache size).
    """
    columns: list[pa.Array | pa.ChunkedArray] = []
    for column in table.columns:
        if column.num_chunks == 0:
            columns.append(column)
            continue
        try:
            columns.append(pa.concat_arrays(column.chunks, memory_pool=_SYSTEM_POOL))
        except pa.ArrowException:
            # A type pyarrow cannot concatenate, or a copy it cannot make, stays where it was decoded.
            columns.append(column)
    return pa.Table.from_arrays(columns, schema=table.schema)


def describe_run(run: Sequence[int]) -> str:
    """Row groups read together, as a message names them: ``3 to 7`` for those that follow each other, ``3, 9``."""
    return ", ".join(f"{first} to {last}" if last > first else str(first) for first, last in stretches(run))


def _one_array(column: pa.ChunkedArray) -> pa.Array:
    """A column's values as one array: its only chunk itself, since combining would copy even that."""
    if column.num_chunks == 1:
        return column.chunk(0)
    return column.combine_chunks()
