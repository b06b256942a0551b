"""Arrow columns as Python values under the ``"python"`` and ``"numpy"`` mappings of Parquet rows.

Rows are assembled on demand from NumPy views of a row group's Arrow buffers, so
a cached row group costs its decoded size and no Python object per row. pyarrow's
``to_pylist`` makes objects for every row (0.2 used 755 MiB for 2M small rows),
and ``to_numpy`` gives neither N-D arrays nor the null policy. The mappings are
described in docs/guide/data.md, "Reading Parquet files".
"""

from __future__ import annotations

import array
import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "MAPPINGS",
    "REFUSED",
    "ArrayColumn",
    "array_description",
    "column_getter",
    "many_values",
    "stacked_values",
    "require_mappable",
    "shape_extents",
    "unmapped_type",
    "value_description",
]

#: The row mappings a reader accepts.
MAPPINGS = ("python", "numpy")

Getter = Callable[[int], Any]


def _is_numeric(arrow_type: pa.DataType) -> bool:
    import pyarrow.types as types

    return bool(types.is_integer(arrow_type) or types.is_floating(arrow_type) or types.is_boolean(arrow_type))


def _is_list(arrow_type: pa.DataType) -> bool:
    import pyarrow.types as types

    return bool(types.is_list(arrow_type) or types.is_large_list(arrow_type) or types.is_fixed_size_list(arrow_type))


def _is_tensor(arrow_type: pa.DataType) -> bool:
    import pyarrow as pa

    return isinstance(arrow_type, pa.FixedShapeTensorType)


def _leaf_type(arrow_type: pa.DataType) -> pa.DataType:
    """The type at the bottom of (possibly nested) list types."""
    while _is_list(arrow_type):
        arrow_type = arrow_type.value_type
    return arrow_type


def _becomes_array(arrow_type: pa.DataType) -> bool:
    """Whether the ``"numpy"`` mapping gives a row of this type as a NumPy array."""
    return _is_tensor(arrow_type) or (_is_list(arrow_type) and _is_numeric(_leaf_type(arrow_type)))


def unmapped_type(arrow_type: pa.DataType) -> bool:
    """Whether the ``"numpy"`` mapping has no value for an Arrow type."""
    import pyarrow as pa
    import pyarrow.types as types

    if _is_tensor(arrow_type):
        return not _is_numeric(arrow_type.value_type)
    if isinstance(arrow_type, pa.BaseExtensionType):
        return True
    if types.is_map(arrow_type) or types.is_union(arrow_type) or types.is_interval(arrow_type):
        return True
    if types.is_struct(arrow_type):
        return any(unmapped_type(arrow_type.field(index).type) for index in range(arrow_type.num_fields))
    if _is_list(arrow_type) or types.is_dictionary(arrow_type):
        return unmapped_type(arrow_type.value_type)
    return False


def require_mappable(schema: pa.Schema, what: str) -> None:
    """Refuses a schema with a column the ``"numpy"`` mapping cannot give, naming it and its Arrow type."""
    for field in schema:
        if unmapped_type(field.type):
            raise ValueError(
                f"{what}: column {field.name!r} has the Arrow type {field.type}, which mapping='numpy' has no "
                "value for (maps, unions, intervals and extension types other than fixed_shape_tensor); "
                "read it with mapping='python' for pyarrow's to_pylist values"
            )


def _with_batched_read(
    one: Getter,
    many: Callable[[np.ndarray[Any, Any]], list[Any]],
    stacked: Callable[[np.ndarray[Any, Any] | slice | None], np.ndarray[Any, Any]] | None = None,
) -> Getter:
    """Attaches bulk readers to a getter: many rows at once, and (``stacked``) rows as one array."""
    try:
        one.many = many  # type: ignore[attr-defined]
    except AttributeError:
        # A built-in method takes no attributes; a partial around it does.
        one = functools.partial(one)
        one.many = many  # type: ignore[attr-defined]
    if stacked is not None:
        one.stacked = stacked  # type: ignore[attr-defined]
    return one


def _stacked_dtype(dtype: np.dtype[Any]) -> np.dtype[Any] | None:
    """The dtype ``np.asarray`` gives the Python values of a ``dtype`` column, or None (``uint64`` may overflow)."""
    if dtype.kind == "b":
        return np.dtype(np.bool_)
    if dtype.kind == "i" or (dtype.kind == "u" and dtype.itemsize < 8):
        return np.dtype(np.int64)
    if dtype.kind == "f":
        return np.dtype(np.float64)
    return None


def stacked_values(getter: Getter, rows: np.ndarray[Any, Any] | slice | None) -> np.ndarray[Any, Any] | None:
    """Rows of a column (an array of rows, a slice, or None for all) as one stacked array where it can, else None.

    None gives the rows as the column holds them, maybe a read-only view: for callers that copy them anyway.
    """
    stacked = getattr(getter, "stacked", None)
    return None if stacked is None else stacked(rows)


def take_rows(
    values: np.ndarray[Any, Any], rows: np.ndarray[Any, Any] | slice | None, *, dtype: np.dtype[Any] | None = None
) -> np.ndarray[Any, Any]:
    """A new, writable array of some rows of ``values``; consecutive rows as one slice copy, not a gather.

    ``rows=None`` is every row, copied only where ``dtype`` differs: each copy of a decoding thread hands the
    interpreter lock to the pipeline's thread and waits to get it back.
    """
    if rows is None:
        return values if dtype is None else values.astype(dtype, copy=False)
    if isinstance(rows, slice):
        return np.array(values[rows], dtype=dtype if dtype is not None else values.dtype)
    taken: np.ndarray[Any, Any] = values[rows]
    return taken if dtype is None else taken.astype(dtype, copy=False)


#: NumPy type codes whose memoryview items are the Python values to_pylist gives (not float16).
_VIEWABLE = frozenset("bBhHiIlLqQfd?")


def many_values(getter: Getter, rows: np.ndarray[Any, Any]) -> list[Any]:
    """The values of several rows: at once where the getter can, else one by one."""
    many = getattr(getter, "many", None)
    return [getter(row) for row in rows.tolist()] if many is None else many(rows)


def _validity(column: pa.Array) -> np.ndarray[Any, Any] | None:
    return None if column.null_count == 0 else np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _none_where_null(valid: np.ndarray[Any, Any] | None, getter: Getter) -> Getter:
    if valid is None:
        return getter
    return lambda row: getter(row) if valid[row] else None


def _sized_getter(column: pa.Array, decode: bool) -> Getter:
    """Rows of a (large) string or binary column, straight from its buffers."""
    import pyarrow.types as types

    wide = types.is_large_string(column.type) or types.is_large_binary(column.type)
    buffers = column.buffers()
    offsets_dtype = np.int64 if wide else np.int32
    offsets_array = np.frombuffer(buffers[1], offsets_dtype, len(column) + 1, column.offset * offsets_dtype().itemsize)
    # array.array indexes to Python ints quickly and stores 8 bytes a row.
    offsets = array.array("q", offsets_array.astype(np.int64).tobytes())
    data = memoryview(buffers[2]) if buffers[2] is not None else memoryview(b"")
    valid = _validity(column)
    if decode:
        return _none_where_null(valid, lambda row: str(data[offsets[row] : offsets[row + 1]], "utf-8"))
    return _none_where_null(valid, lambda row: bytes(data[offsets[row] : offsets[row + 1]]))


def _scalar_getter(column: pa.Array) -> Getter | None:
    """A fast getter for the scalar types whose to_pylist value it reproduces, else None."""
    import pyarrow as pa
    import pyarrow.types as types

    arrow_type = column.type
    if types.is_null(arrow_type):
        return lambda row: None
    if types.is_integer(arrow_type) or types.is_floating(arrow_type) or types.is_boolean(arrow_type):
        valid = _validity(column)
        filled = column if valid is None else column.fill_null(False if types.is_boolean(arrow_type) else 0)
        values = np.ascontiguousarray(filled.to_numpy(zero_copy_only=False))
        one: Getter = lambda row: values[row].item()  # noqa: E731
        if values.dtype.char in _VIEWABLE:
            # A memoryview of the same buffer gives Python ints, floats and bools directly,
            # ten times faster than a NumPy scalar's item().
            one = memoryview(values).__getitem__  # type: ignore[arg-type]
        if valid is None:
            stacked_dtype = _stacked_dtype(values.dtype)
            stacked = None if stacked_dtype is None else functools.partial(take_rows, values, dtype=stacked_dtype)
            return _with_batched_read(one, lambda rows: values[rows].tolist(), stacked)
        return _none_where_null(valid, one)
    if types.is_string(arrow_type) or types.is_large_string(arrow_type):
        return _sized_getter(column, decode=True)
    if types.is_binary(arrow_type) or types.is_large_binary(arrow_type):
        return _sized_getter(column, decode=False)
    if types.is_dictionary(arrow_type):
        assert isinstance(column, pa.DictionaryArray)
        return _dictionary_getter(column)
    return None


def _dictionary_getter(column: pa.DictionaryArray) -> Getter:
    """Rows of a dictionary-encoded column, each index checked: pyarrow does not check decoded indices.

    A damaged page's out-of-range (or negative, read from the end) index is a ValueError when read.
    """
    valid = _validity(column)
    indices = np.asarray(column.indices.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    dictionary = column.dictionary.to_pylist()
    size = len(dictionary)
    outside = (indices < 0) | (indices >= size)
    if valid is not None:
        outside &= valid  # A missing value's index is never looked up.
    if not outside.any():
        # array.array indexes to Python ints quickly and stores 8 bytes a row.
        lookup = array.array("q", indices.tobytes())
        return _none_where_null(valid, lambda row: dictionary[lookup[row]])

    def get(row: int) -> Any:
        index = int(indices[row])
        if outside[row]:
            raise ValueError(
                f"row {row} holds the dictionary index {index}, outside its dictionary of {size} values: "
                "the data page is damaged"
            )
        return dictionary[index]

    return _none_where_null(valid, get)


def _one_shape(column: Any, rows: int) -> tuple[np.ndarray[Any, Any], int, tuple[int, ...]] | None:
    """The leaf values, the first row's start in them and the rows' one shape; None unless every row has it.

    None too where a value is missing or an extent is 0: the general walk then says which rows differ.
    """
    import pyarrow.types as types

    if not rows:
        return None
    level, first, per_row, extents = column, 0, 1, []
    while _is_list(level.type):
        if level.null_count:
            return None
        if types.is_fixed_size_list(level.type):
            extent = int(level.type.list_size)
            child_first = (first + level.offset) * extent
        else:
            offsets = level.offsets.to_numpy(zero_copy_only=False)
            own = offsets[first : first + rows * per_row + 1]
            extent = int(own[1]) - int(own[0])
            if not bool(np.all(np.diff(own) == extent)):
                return None
            child_first = int(own[0])
        if extent <= 0:
            return None
        extents.append(extent)
        first, per_row = child_first, per_row * extent
        level = level.values
    if level.null_count:
        return None
    return np.asarray(level.to_numpy(zero_copy_only=False)), first, tuple(extents)


class ArrayColumn:
    """A column of (nested) lists of numbers, or tensors, as one NumPy array per row.

    ``bad_rows`` maps rows that cannot be an array (missing value, ragged lists) to the reason.
    """

    def __init__(
        self,
        column: pa.Array,
        *,
        dtype: np.dtype[Any] | None = None,
        pairs: bool = False,
        ndim: int | None = None,
    ) -> None:
        """Decodes the column's structure once; ``dtype``/``pairs`` reinterpret stored elements, ``ndim`` is checked."""
        rows = len(column)
        self.bad_rows: dict[int, str] = {}
        tensor_shape: tuple[int, ...] | None = None
        if _is_tensor(column.type):
            tensor_shape = tuple(column.type.shape)
            permutation = column.type.permutation
            if permutation is not None and list(permutation) != list(range(len(tensor_shape))):
                raise ValueError(f"a fixed_shape_tensor with the permutation {permutation} has no mapping")
            column = column.storage
        if self._held_whole(column, rows, tensor_shape, dtype=dtype, pairs=pairs, ndim=ndim):
            return
        values, starts, ends, shapes = self._walk_lists(column, rows)
        shape_matrix = np.stack(shapes, axis=1) if shapes else np.zeros((rows, 0), dtype=np.int64)
        if tensor_shape is not None:
            shape_matrix = np.broadcast_to(np.asarray(tensor_shape, dtype=np.int64), (rows, len(tensor_shape)))
        if ndim is not None and shape_matrix.shape[1] != ndim + (1 if pairs else 0):
            raise ValueError(f"the column holds arrays of {shape_matrix.shape[1]} dimensions, not {ndim}")
        if pairs:
            assert dtype is not None
            values = values.view(dtype.newbyteorder("<"))
            starts, ends, shape_matrix = starts // 2, ends // 2, shape_matrix[:, :-1]
        if dtype is not None and values.dtype != dtype:
            same_bits = dtype.type.__module__.partition(".")[0] == "ml_dtypes"
            values = values.view(dtype) if same_bits else values.astype(dtype)
        self._leaf, self._starts, self._ends, self._shapes = values, starts, ends, shape_matrix
        self._fixed_shape: tuple[int, ...] | None = None
        if rows and not self.bad_rows and bool(np.all(shape_matrix == shape_matrix[0])):
            self._hold_as_block(rows, tuple(int(extent) for extent in shape_matrix[0]))

    def _held_whole(
        self,
        column: Any,
        rows: int,
        tensor_shape: tuple[int, ...] | None,
        *,
        dtype: np.dtype[Any] | None,
        pairs: bool,
        ndim: int | None,
    ) -> bool:
        """Holds the rows as one block, as the walk would, where they share one shape and miss nothing.

        A few NumPy calls where the walk makes dozens, each taking the interpreter lock from the batches' thread.
        """
        found = _one_shape(column, rows)
        if found is None:
            return False
        values, first, extents = found
        shape = extents if tensor_shape is None else tensor_shape
        if ndim is not None and len(shape) != ndim + (1 if pairs else 0):
            raise ValueError(f"the column holds arrays of {len(shape)} dimensions, not {ndim}")
        if pairs:
            if shape[-1] != 2:
                return False  # Not pairs after all: the general walk gives what it always gave.
            assert dtype is not None
            values = values.view(dtype.newbyteorder("<"))
            first, shape = first // 2, shape[:-1]
        if dtype is not None and values.dtype != dtype:
            same_bits = dtype.type.__module__.partition(".")[0] == "ml_dtypes"
            values = values.view(dtype) if same_bits else values.astype(dtype)
        size = math.prod(shape)
        self._leaf = values
        self._fixed_shape = shape
        self._block = values[first : first + size * rows].reshape((rows, *shape))
        empty = np.zeros(0, dtype=np.int64)
        self._starts, self._ends, self._shapes = empty, empty, empty.reshape(0, len(shape))
        return True

    def _walk_lists(
        self, column: Any, rows: int
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], list[np.ndarray[Any, Any]]]:
        """Records bad rows level by level; returns the leaf values, each row's leaf extent and per-level shapes."""
        import pyarrow as pa
        import pyarrow.types as types

        starts = np.arange(rows, dtype=np.int64)
        ends = starts + 1
        owners = np.arange(rows, dtype=np.int64)  # The row of every entry at the current level.
        shapes: list[np.ndarray[Any, Any]] = []
        level: Any = column
        reason = "a missing value"
        while _is_list(level.type):
            self._record_nulls(level, owners, reason)
            reason = "a missing value inside the array"
            if types.is_fixed_size_list(level.type):
                size = level.type.list_size
                offsets = (np.arange(len(level) + 1, dtype=np.int64) + level.offset) * size
            else:
                assert isinstance(level, (pa.ListArray, pa.LargeListArray))
                offsets = np.asarray(level.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
            lengths = offsets[1:] - offsets[:-1]
            # Each row's extent at this level: its first entry's length, which every other entry must share.
            row_length = np.zeros(rows, dtype=np.int64)
            has_entries = ends > starts
            row_length[has_entries] = lengths[starts[has_entries]]
            in_rows = owners >= 0
            ragged = in_rows & (lengths != row_length[np.maximum(owners, 0)])
            for row in np.unique(owners[ragged]).tolist():
                self.bad_rows.setdefault(int(row), "nested lists that are not rectangular")
            shapes.append(row_length)
            child = level.values
            if _is_list(child.type) or child.null_count:
                # Child entries outside every row (a sliced column's neighbours) belong to none: -1.
                # Only computed where needed: for the values themselves it would outweigh them.
                child_owners = np.full(len(child), -1, dtype=np.int64)
                if rows:
                    child_owners[offsets[0] : offsets[-1]] = np.repeat(owners, lengths)
                owners = child_owners
            starts, ends = offsets[starts], offsets[ends]
            level = child
        self._record_nulls(level, owners, reason)
        leaf = level.fill_null(0) if level.null_count else level
        return np.asarray(leaf.to_numpy(zero_copy_only=False)), starts, ends, shapes

    def _hold_as_block(self, rows: int, shape: tuple[int, ...]) -> None:
        """Holds the rows as one block where each has ``shape`` and follows the previous one in the leaf values."""
        size = int(np.prod(shape, dtype=np.int64))
        starts, ends, first_start = self._starts, self._ends, int(self._starts[0])
        if bool(np.all(ends - starts == size)) and bool(
            np.all(starts == first_start + size * np.arange(rows, dtype=np.int64))
        ):
            self._fixed_shape = shape
            self._block = self._leaf[first_start : first_start + size * rows].reshape((rows, *shape))
            # The block says it all: the per-row extents would only add to the cache's size.
            empty = np.zeros(0, dtype=np.int64)
            self._starts, self._ends, self._shapes = empty, empty, empty.reshape(0, len(shape))

    def _record_nulls(self, level: Any, owners: np.ndarray[Any, Any], reason: str) -> None:
        if level.null_count:
            valid = np.asarray(level.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            for row in np.unique(owners[~valid]).tolist():
                if row >= 0:
                    self.bad_rows.setdefault(int(row), reason)

    def get(self, row: int) -> np.ndarray[Any, Any]:
        """The row's array, a fresh C-contiguous copy; ValueError for a row in ``bad_rows``."""
        shape = self._fixed_shape
        if shape is not None:
            if shape:
                return self._block[row].copy()  # type: ignore[no-any-return]
            return self._block[row : row + 1].reshape(()).copy()
        reason = self.bad_rows.get(row)
        if reason is not None:
            raise ValueError(f"row {row} cannot be an array: it holds {reason}")
        start, end = int(self._starts[row]), int(self._ends[row])
        return self._leaf[start:end].reshape(tuple(self._shapes[row].tolist())).copy()

    def many(self, rows: np.ndarray[Any, Any]) -> list[Any]:
        """The arrays of several rows, each as :meth:`get` gives it."""
        if self._fixed_shape:
            # One gather for all rows, then a copy each, so every array owns its memory.
            return [array.copy() for array in self._block[rows]]
        return [self.get(row) for row in rows.tolist()]

    def stacked(self, rows: np.ndarray[Any, Any] | slice | None) -> np.ndarray[Any, Any]:
        """Several rows' arrays stacked as ``np.stack`` of :meth:`many` (see :func:`stacked_values` for None).

        ValueError where shapes differ.
        """
        if self._fixed_shape is None:
            raise ValueError("the column's arrays do not all have one shape")
        stacked = take_rows(self._block, rows)
        if not stacked.dtype.isnative:
            # np.stack gives arrays of another byte order in the native one.
            stacked = stacked.astype(stacked.dtype.newbyteorder("="))
        return stacked

    def getter(self) -> Getter:
        """:meth:`get`, able to read many rows at once."""
        # A partial, unlike a bound method, can carry the bulk reader as an attribute.
        stacked = self.stacked if self._fixed_shape is not None else None
        return _with_batched_read(functools.partial(ArrayColumn.get, self), self.many, stacked)


def column_getter(column: pa.Array, mapping: str) -> Getter:
    """``get(row)`` giving a column's values under a mapping (``"numpy"`` raises on rows that cannot be arrays)."""
    import pyarrow as pa
    import pyarrow.types as types

    fast = _scalar_getter(column)
    if fast is not None:
        return fast
    arrow_type = column.type
    if mapping == "numpy":
        if _becomes_array(arrow_type):
            return ArrayColumn(column).getter()
        if types.is_struct(arrow_type):
            assert isinstance(column, pa.StructArray)
            valid = _validity(column)
            children = [
                (arrow_type.field(index).name, column_getter(column.field(index), mapping))
                for index in range(arrow_type.num_fields)
            ]
            return _none_where_null(valid, lambda row: {name: get(row) for name, get in children})
    # Every other type: pyarrow's own conversion, as to_pylist gives it.
    values: list[Any] = column.to_pylist()
    return values.__getitem__


#: What :func:`value_description` says of a type the ``"numpy"`` mapping refuses.
REFUSED = "refused: no numpy mapping"

# Said of a type whose values only pyarrow's own conversion knows (unions, list views, ...).
_AS_PYARROW_GIVES = "as pyarrow's to_pylist gives it"


def shape_extents(arrow_type: pa.DataType) -> list[int | None]:
    """The extents a column's arrays have, outermost first (None where rows differ; none for 0-d)."""
    if _is_tensor(arrow_type):
        return [int(extent) for extent in arrow_type.shape]
    extents: list[int | None] = []
    while _is_list(arrow_type):
        size = getattr(arrow_type, "list_size", None)
        extents.append(None if size is None else int(size))
        arrow_type = arrow_type.value_type
    return extents


def array_description(dtype: np.dtype[Any], extents: list[int | None]) -> str:
    """Names an array's dtype and shape, ``*`` standing for an extent that differs by row."""
    shown = ", ".join("*" if extent is None else str(extent) for extent in extents)
    return f"numpy.ndarray {dtype}, shape ({shown}{',' if len(extents) == 1 else ''})"


def value_description(arrow_type: pa.DataType, mapping: str) -> str:
    """A short phrase for what a column of this Arrow type gives under a mapping, for ``tinax inspect``.

    Scalar types come from converting a value as pyarrow does (``pandas.Timestamp`` with pandas installed).
    """
    import pyarrow.types as types

    if mapping == "numpy":
        if unmapped_type(arrow_type):
            return REFUSED
        if _becomes_array(arrow_type):
            leaf = _leaf_type(arrow_type.value_type)
            return array_description(_numpy_dtype(leaf), shape_extents(arrow_type))
    if types.is_dictionary(arrow_type):
        return value_description(arrow_type.value_type, "python")
    if types.is_map(arrow_type):
        key = value_description(arrow_type.key_type, "python")
        item = value_description(arrow_type.item_type, "python")
        return f"list of ({key}, {item}) tuples"
    if _is_tensor(arrow_type):
        return f"flat list of {value_description(arrow_type.value_type, 'python')}"
    if _is_list(arrow_type):
        # pyarrow converts what lies inside a list, under either mapping.
        return f"list of {value_description(arrow_type.value_type, 'python')}"
    if types.is_struct(arrow_type):
        fields = (arrow_type.field(index) for index in range(arrow_type.num_fields))
        # Under "numpy" a struct's fields are mapped as columns are; under "python" pyarrow converts them.
        entries = (f"{field.name!r}: {value_description(field.type, mapping)}" for field in fields)
        return "dict {" + ", ".join(entries) + "}"
    return _scalar_description(arrow_type)


def _numpy_dtype(arrow_type: pa.DataType) -> np.dtype[Any]:
    """The dtype NumPy gives a numeric Arrow type's values (``to_pandas_dtype`` would import pandas)."""
    import pyarrow.types as types

    if types.is_boolean(arrow_type):
        return np.dtype(bool)
    code = "f" if types.is_floating(arrow_type) else "i" if types.is_signed_integer(arrow_type) else "u"
    return np.dtype(f"{code}{arrow_type.bit_width // 8}")


def _scalar_description(arrow_type: pa.DataType) -> str:
    """Names the Python type of a value of a type without children, read as a reader reads it."""
    import pyarrow as pa

    try:
        nulls = pa.nulls(1, arrow_type)
        if nulls.type.num_fields:
            return _AS_PYARROW_GIVES
        # The same buffers without the validity bitmap: one value, all zero bytes (0, "", the epoch, ...).
        zero = pa.Array.from_buffers(arrow_type, 1, [None, *nulls.buffers()[1:]])
        # to_pylist is what both mappings give; unlike the fast paths it imports no pandas for a plain number.
        (value,) = zero.to_pylist()
    except (pa.ArrowException, ValueError, TypeError, NotImplementedError):
        return _AS_PYARROW_GIVES
    if value is None:
        return "None"
    kind = type(value)
    if getattr(pa, kind.__name__, None) is kind:
        # pyarrow's own value types (MonthDayNano) say their module is builtins.
        return f"pyarrow.{kind.__name__}"
    module = kind.__module__.partition(".")[0]
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"
