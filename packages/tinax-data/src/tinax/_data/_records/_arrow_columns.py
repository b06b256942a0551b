"""How records are laid out as Arrow columns in the tinax Parquet format.

Column types (tensors, nested lists, nearest-type storage for dtypes Arrow
lacks), a row group's columns with the records' encodings for the content
digest, and the extents nested lists lose (``EmptyShapes``).
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import json
import operator
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from tinax._data._records._record_codec import (
    KIND_ARRAY,
    KIND_BOOL,
    KIND_BYTES,
    KIND_FLOAT,
    KIND_INT,
    KIND_NONE,
    KIND_STR,
    FieldSpec,
    RecordSchema,
    dtype_descriptor,
)

if TYPE_CHECKING:
    import pyarrow as pa

#: Key, in the Arrow field metadata of an array column, of the field's exact dtype.
FIELD_DTYPE_KEY = b"tinax.dtype"
#: Key, in the Arrow field metadata of a nested-list array column, of the extents its lists lose (EmptyShapes).
FIELD_EMPTY_SHAPES_KEY = b"tinax.empty_shapes"


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
    """How an array field's elements are stored in Arrow: a little-endian dtype Arrow has, as complex pairs or not."""

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


def _native_arrow_type(field: FieldSpec, fixed_shape: tuple[int, ...] | None) -> pa.DataType:
    """The Arrow-native column type of a field; arrays of one shape in every record are tensors."""
    import pyarrow as pa

    if field.kind != KIND_ARRAY:
        return _plain_arrow_type(field.kind)
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


def _native_arrow_schema(
    schema: RecordSchema, fixed_shapes: Mapping[str, tuple[int, ...] | None], empty_shapes: Mapping[str, bytes]
) -> pa.Schema:
    import pyarrow as pa

    fields = []
    for field in schema.fields:
        metadata: dict[bytes, bytes | str] | None = None
        if field.kind == KIND_ARRAY:
            assert field.dtype is not None
            # Where Arrow has no such dtype (bfloat16, float8, int4, complex, big-endian), other tools
            # see the stored numbers; this names the exact dtype for them.
            metadata = {FIELD_DTYPE_KEY: dtype_descriptor(field.dtype) or ""}
            if field.name in empty_shapes:
                metadata[FIELD_EMPTY_SHAPES_KEY] = empty_shapes[field.name]
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


class EmptyShapes(NamedTuple):
    """Extents after the first zero one, which a nested-list column cannot hold.

    Rows whose extents match ``fill`` are not listed; ``rows``/``shapes`` list the others.
    """

    fill: tuple[int, ...]
    rows: tuple[int, ...]
    shapes: tuple[tuple[int, ...], ...]

    def shape(self, extents: tuple[int, ...], row: int | None) -> tuple[int, ...]:
        """The full shape of an empty array from its nested-list extents; ``row`` is its position or None."""
        first = extents.index(0)
        if row is not None:
            found = bisect.bisect_left(self.rows, row)
            if found < len(self.rows) and self.rows[found] == row:
                listed = self.shapes[found]
                if listed[: first + 1] != extents[: first + 1]:
                    raise ValueError(
                        f"the shape {listed} that field metadata {FIELD_EMPTY_SHAPES_KEY.decode()!r} lists for "
                        f"record {row} contradicts its nested lists, whose extents begin {extents[: first + 1]}"
                    )
                return listed
        return extents[: first + 1] + self.fill[first:]


def empty_shapes_entry(shapes: Sequence[tuple[int, ...]]) -> bytes | None:
    """Field metadata for a nested-list array field; None where the lists keep every extent.

    ``fill`` takes each dimension's most common lost extent (smallest on ties), so usually no row is listed.
    """
    losing = [(row, shape, shape.index(0)) for row, shape in enumerate(shapes) if 0 in shape[:-1]]
    if not any(any(shape[first + 1 :]) for _, shape, first in losing):
        return None  # Zeros after the first zero: what nested lists give back anyway.
    ndim = len(shapes[0])
    fill = []
    for dimension in range(1, ndim):
        counts = collections.Counter(shape[dimension] for _, shape, first in losing if first < dimension)
        fill.append(min(counts, key=lambda extent: (-counts[extent], extent)) if counts else 0)
    listed = [[row, list(shape)] for row, shape, first in losing if list(shape[first + 1 :]) != fill[first:]]
    return json.dumps({"fill": fill, "rows": listed}, separators=(",", ":")).encode("ascii")


def parse_empty_shapes(value: bytes, ndim: int, count: int) -> EmptyShapes:
    """Reads and checks the field metadata :func:`empty_shapes_entry` writes."""
    key = FIELD_EMPTY_SHAPES_KEY.decode()
    try:
        entry = json.loads(value.decode("ascii"))
    except (ValueError, RecursionError) as error:
        raise ValueError(f"field metadata {key!r} is not JSON") from error

    def extents(value: object, length: int) -> tuple[int, ...] | None:
        if not isinstance(value, list) or len(value) != length:
            return None
        if not all(type(extent) is int and 0 <= extent < 2**63 for extent in value):
            return None
        return tuple(value)

    malformed = ValueError(f"field metadata {key!r} is malformed for an array field of {ndim} dimensions")
    if not isinstance(entry, dict) or set(entry) != {"fill", "rows"} or not isinstance(entry["rows"], list):
        raise malformed
    fill = extents(entry["fill"], ndim - 1)
    if fill is None or ndim < 2:
        raise malformed
    rows: list[int] = []
    shapes: list[tuple[int, ...]] = []
    for item in entry["rows"]:
        if not isinstance(item, list) or len(item) != 2:
            raise malformed
        row, shape = item[0], extents(item[1], ndim)
        if type(row) is not int or not 0 <= row < count or (rows and row <= rows[-1]):
            raise malformed
        if shape is None or 0 not in shape[:-1]:
            raise malformed
        rows.append(row)
        shapes.append(shape)
    return EmptyShapes(fill, tuple(rows), tuple(shapes))


#: A part of every record's encoding in a row group: a matrix of one row of bytes per record, or
#: the per-record lengths and the concatenated bytes of a part whose length varies.
_EncodedPart = np.ndarray[Any, Any] | tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]


def _row_group_table(
    schema: RecordSchema, arrow_schema: pa.Schema, rows: list[Mapping[str, Any]]
) -> tuple[pa.Table, np.ndarray[Any, Any]]:
    """One row group's columns and the records' tinax encodings (for the content digest), built column-wise."""
    import pyarrow as pa

    count = len(rows)
    columns = []
    parts: list[_EncodedPart] = []
    for position, field in enumerate(schema.fields):
        values = list(map(operator.itemgetter(field.name), rows))
        arrow_type = arrow_schema.field(position).type
        if field.kind == KIND_NONE:
            columns.append(pa.nulls(count))
        elif field.kind in (KIND_INT, KIND_FLOAT):
            numbers = np.array(values, dtype=np.int64 if field.kind == KIND_INT else np.float64)
            columns.append(pa.array(numbers, arrow_type))
            parts.append(_little_endian(numbers).view(np.uint8).reshape(count, 8))
        elif field.kind == KIND_BOOL:
            columns.append(pa.array(values, arrow_type))
            parts.append(np.array(values, dtype=np.bool_).view(np.uint8).reshape(count, 1))
        elif field.kind in (KIND_STR, KIND_BYTES):
            column = pa.array(values, arrow_type)
            columns.append(column)
            parts.extend(_sized_parts(column, count))
        else:
            assert field.dtype is not None
            assert field.ndim is not None
            column, array_parts = _array_column_and_parts(arrow_type, field.dtype, field.ndim, values)
            columns.append(column)
            parts.extend(array_parts)
    return pa.Table.from_arrays(columns, schema=arrow_schema), _joined_encodings(count, parts)


def _little_endian(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return array.astype(array.dtype.newbyteorder("<"), copy=False)


def _sized_parts(column: pa.Array, count: int) -> list[_EncodedPart]:
    """The encoding parts of a str or bytes column: each value's length as a uint64, then its bytes."""
    _, offsets_buffer, data_buffer = column.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype="<i8", count=count + 1, offset=8 * column.offset)
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.empty(0, np.uint8)
    lengths = np.diff(offsets)
    header = lengths.astype("<u8").view(np.uint8).reshape(count, 8)
    return [header, (lengths, data[offsets[0] : offsets[-1]])]


def _array_column_and_parts(
    arrow_type: pa.DataType, dtype: np.dtype[Any], ndim: int, arrays: list[np.ndarray[Any, Any]]
) -> tuple[pa.Array, list[_EncodedPart]]:
    """An array field's column and encoding parts (the extents as uint64s, then the elements)."""
    import pyarrow as pa

    count = len(arrays)
    storage = _storage(dtype)
    if isinstance(arrow_type, pa.FixedShapeTensorType) or not pa.types.is_large_list(arrow_type):
        # One shape in every record: a single block holds the row group's arrays. The dtype is given
        # because NumPy would otherwise turn big-endian elements native, and the encoding keeps their order.
        block = np.concatenate(arrays, dtype=dtype) if ndim else np.stack(arrays, dtype=dtype)
        block = block.reshape(count, *arrays[0].shape)
        extents = np.frombuffer(struct.pack(f"<{ndim}Q", *block.shape[1:]), dtype=np.uint8)
        parts: list[_EncodedPart] = [
            np.broadcast_to(extents, (count, extents.size)),
            block.reshape(count, -1).view(np.uint8),
        ]
        stored = _to_storage(block, storage)
        if isinstance(arrow_type, pa.FixedShapeTensorType):
            size = int(np.prod(arrow_type.shape, dtype=np.int64))
            tensors = pa.FixedSizeListArray.from_arrays(pa.array(stored.reshape(-1)), size)
            return pa.ExtensionArray.from_storage(arrow_type, tensors), parts
        # 0-d arrays of one dtype: a plain column of their values.
        return pa.array(stored.reshape(-1), arrow_type), parts
    contiguous = [array if array.flags.c_contiguous else np.ascontiguousarray(array) for array in arrays]
    shapes = np.array([array.shape for array in contiguous], dtype="<u8").reshape(count, ndim)
    elements = [array.reshape(-1).view(np.uint8) for array in contiguous]
    lengths = np.fromiter(map(len, elements), np.int64, count)
    parts = [shapes.view(np.uint8).reshape(count, 8 * ndim), (lengths, np.concatenate(elements))]
    return _array_column(arrow_type, storage, contiguous), parts


def _joined_encodings(count: int, parts: list[_EncodedPart]) -> np.ndarray[Any, Any]:
    """The encodings of ``count`` records, each laid out part after part, one after the other."""
    if not count:
        return np.empty(0, dtype=np.uint8)
    # A part of one length in every record is a matrix too; runs of matrices are joined side by side.
    joined: list[_EncodedPart] = []
    run: list[np.ndarray[Any, Any]] = []
    for part in parts:
        if isinstance(part, tuple) and (part[0] == part[0][0]).all():
            part = part[1].reshape(count, int(part[0][0]))
        if isinstance(part, tuple):
            if run:
                joined.append(np.concatenate(run, axis=1))
                run = []
            joined.append(part)
        else:
            run.append(part)
    if run:
        joined.append(np.concatenate(run, axis=1))
    if len(joined) == 1 and not isinstance(joined[0], tuple):
        return np.ascontiguousarray(joined[0]).reshape(-1)
    # Parts of varying length: every byte is scattered to its place in the concatenated encodings.
    widths = [np.full(count, part.shape[1], np.int64) if not isinstance(part, tuple) else part[0] for part in joined]
    record_sizes = np.sum(widths, axis=0)
    places = np.zeros(count, dtype=np.int64)
    np.cumsum(record_sizes[:-1], out=places[1:])
    encodings = np.empty(int(record_sizes.sum()), dtype=np.uint8)
    for part, width in zip(joined, widths, strict=True):
        if isinstance(part, tuple):
            lengths, data = part
            if data.size:
                starts = np.zeros(count, dtype=np.int64)
                np.cumsum(lengths[:-1], out=starts[1:])
                encodings[np.arange(data.size) + np.repeat(places - starts, lengths)] = data
        elif part.shape[1]:
            encodings[(places[:, None] + np.arange(part.shape[1])).reshape(-1)] = part.reshape(-1)
        places += width
    return encodings


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
