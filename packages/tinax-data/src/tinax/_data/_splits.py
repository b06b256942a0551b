"""Train/test splits that keep random access and a derived source identity.

``split_random`` rebuilds 0.2's grain chain (index shuffle, two slices,
optional column drop), so it gives 0.2's parts row for row. ``split_by_column``
reads the column once and gives each part as a lazy view of its parent.
See docs/guide/data.md, section "How rows are split".
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tinax._core.logs import Operation, get_logger
from tinax._core.progress import Progress, require_progress
from tinax._core.validation import (
    describe,
    fail_type,
    fail_value,
    is_non_python_int,
    reported_as_both,
    require_bool,
    require_int,
    require_str,
)
from tinax._data._compat02 import MissingColumnError
from tinax._data._records._source_identity import find_source_id

if TYPE_CHECKING:
    from grain import MapDataset

__all__ = ["MissingColumnError", "split_by_column", "split_random"]

_logger = get_logger("data")


class _DropColumn:
    """Returns a row without one column as a fresh dict; a class so parts pickle for worker processes."""

    def __init__(self, column: str) -> None:
        self.column = column

    def __call__(self, row: Mapping[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in row.items() if key != self.column}

    def __repr__(self) -> str:
        return f"_DropColumn({self.column!r})"


class _RowSelection:
    """A random-access source whose row ``i`` is row ``positions[i]`` of a parent dataset."""

    def __init__(
        self,
        parent: MapDataset[Any],
        positions: np.ndarray[Any, np.dtype[np.int64]],
        *,
        drop_column: str | None,
        source_id: str | None,
        description: str,
    ) -> None:
        self._parent = parent
        self._positions = positions
        self._drop = None if drop_column is None else _DropColumn(drop_column)
        self._description = description
        # Only a named parent gives a named part: a made-up identity would
        # claim a content the parent never vouched for.
        if source_id is not None:
            self.source_id = source_id

    def __len__(self) -> int:
        return len(self._positions)

    def __getitem__(self, index: int) -> Any:
        """Returns row ``index``; bools and floats are refused rather than read as 1, 0 or a mask."""
        count = len(self._positions)
        position = index if type(index) is int else require_int(index, "index")
        if position < 0:
            position += count
        if not 0 <= position < count:
            raise IndexError(f"index {index} is out of range for the {count} rows of {self._description}")
        row = self._parent[int(self._positions[position])]
        return row if self._drop is None else self._drop(row)

    def __repr__(self) -> str:
        return f"_RowSelection({self._description}, rows={len(self._positions)})"


def _require_map_dataset(dataset: object) -> Any:
    import grain

    if not isinstance(dataset, grain.MapDataset):
        fail_type("dataset", "a grain.MapDataset", dataset)
    return grain


def _derived_id(parent_id: str | None, description: str) -> str | None:
    return None if parent_id is None else f"{parent_id}/{description}"


def split_by_column(
    dataset: MapDataset[dict[str, Any]],
    column: str,
    *,
    values: tuple[str, str] = ("train", "test"),
    drop_column: bool = True,
    progress: Progress = None,
) -> tuple[MapDataset[dict[str, Any]], MapDataset[dict[str, Any]]]:
    """Splits a dataset of rows in two by the value of one column.

    A row whose ``column`` equals ``values[0]`` goes to the first part, one
    equal to ``values[1]`` to the second; any other value is an error, so no
    row is dropped silently. Rows are read once when the split is made; each
    part then reads its rows lazily, in original order, under a source
    identity derived from the parent's. Logs one INFO line to ``tinax.data``.

    Args:
      dataset: A finite ``grain.MapDataset`` of mapping rows (or None rows).
      column: The column that says which part a row belongs to.
      values: Exactly two distinct values of ``column``, in the order of the
        returned parts.
      drop_column: Whether the parts' rows leave ``column`` out (as fresh dicts).
      progress: None, a callable ``progress(done, total)`` called with the rows
        read, or ``"bar"`` for a progress bar on standard error.

    Returns:
      ``(rows with values[0], rows with values[1])``.

    Raises:
      TypeError: If an argument has the wrong type or a row cannot be looked up by ``column``.
      ValueError: If ``values`` is not two distinct values, ``dataset`` is infinite, or a row holds neither value.
      MissingColumnError: If a row has no ``column`` (a ValueError and a KeyError).
      ImportError: If ``progress="bar"`` and neither tqdm nor rich is installed.

    Examples:
      >>> import grain
      >>> from tinax.data import InMemorySource, split_by_column
      >>> rows = [{"x": 0, "split": "train"}, {"x": 1, "split": "test"}, {"x": 2, "split": "train"}]
      >>> train, test = split_by_column(grain.MapDataset.source(InMemorySource(rows, source_id="demo-v1")), "split")
      >>> list(train), list(test)
      ([{'x': 0}, {'x': 2}], [{'x': 1}])
    """
    _require_map_dataset(dataset)
    column = require_str(column, "column", allow_empty=True)
    require_bool(drop_column, "drop_column")
    first, second = _require_two_values(values)
    total = len(dataset)
    if total >= sys.maxsize:
        fail_value("dataset", "a finite grain.MapDataset: splitting reads every row", dataset)
    reporting = require_progress(progress, needed_by="tinax.data.split_by_column")
    operation = Operation(_logger, "split", f"{total} rows by column {column!r} of", _logged_name(dataset))

    positions: tuple[list[int], list[int]] = ([], [])
    with reporting.reporting(total, unit="rows", description=f"split by {column!r}") as reporter:
        column_values = _column_of_source(dataset, column, reporter.advance)
        for position in range(total):
            if column_values is not None:
                value = column_values[position]
            else:
                row = dataset[position]
                reporter.advance(1)
                if row is None:
                    continue
                value = _column_value(row, position, column)
            if value == first:
                positions[0].append(position)
            elif value == second:
                positions[1].append(position)
            else:
                raise ValueError(
                    f"dataset[{position}][{column!r}] must be {describe(first)} or {describe(second)}, got "
                    f"{describe(value)}; split_by_column never drops rows with other values"
                )
    operation.what = (
        f"{total} rows by column {column!r} into {len(positions[0])} {first!r} and {len(positions[1])} {second!r} of"
    )
    operation.done(rows=total)

    from tinax._data._records._reader_datasets import source_dataset

    parent_id = find_source_id(dataset)
    parts = []
    for chosen, value in zip(positions, (first, second), strict=True):
        description = f"split_by_column(column={column!r}, value={value!r})"
        selection = _RowSelection(
            dataset,
            np.asarray(chosen, dtype=np.int64),
            drop_column=column if drop_column else None,
            source_id=_derived_id(parent_id, description),
            description=description,
        )
        parts.append(source_dataset(selection))
    return parts[0], parts[1]


def _column_of_source(dataset: Any, column: str, advance: Callable[[int], None]) -> list[Any] | None:
    """One column of every row, read alone, for a Parquet reader's own dataset; else None."""
    from tinax._data._records._parquet_source import ParquetRecordSource
    from tinax._data._records._reader_datasets import record_source_of

    source = record_source_of(dataset)
    if not isinstance(source, ParquetRecordSource) or column not in source.column_names:
        return None
    return source.column_values(column, advance=advance)


def _logged_name(dataset: Any) -> str:
    """What a split's log line names: the reader's file, else the source identity or the dataset."""
    from tinax._data._records._reader_datasets import record_source_of

    path = getattr(record_source_of(dataset), "_path", None)
    return str(path) if path is not None else find_source_id(dataset) or str(dataset)


def _column_value(row: Any, position: int, column: str) -> Any:
    try:
        return row[column]
    except KeyError:
        names = ", ".join(repr(name) for name in list(row)[:10]) if isinstance(row, Mapping) else "?"
        raise MissingColumnError(
            f"dataset[{position}] must have a {column!r} column, got a row with columns {names}"
        ) from None
    except TypeError as error:
        raise TypeError(f"dataset[{position}] must be a row with a {column!r} column, got {describe(row)}") from error


def _require_two_values(values: object) -> tuple[Any, Any]:
    if not isinstance(values, Iterable):
        fail_type("values", "an iterable of two distinct values, such as a tuple", values)
    items = tuple(values)
    if len(items) != 2:
        fail_value("values", "exactly two distinct values", values)
    if items[0] == items[1]:
        fail_value("values", "two distinct values", values)
    return items[0], items[1]


def split_random(
    dataset: MapDataset[dict[str, Any]],
    train_ratio: float,
    *,
    seed: int,
    drop_column: str | None = None,
) -> tuple[MapDataset[dict[str, Any]], MapDataset[dict[str, Any]]]:
    """Shuffles a dataset reproducibly and cuts it in two at a ratio.

    The rows take the order of ``dataset.shuffle(seed=seed)``; the first part
    is the first ``round(train_ratio * len(dataset))`` of them (Python's
    ``round``), clamped so neither part is empty, and the second the rest.
    The same length, ratio and seed give the same parts. No row is read to
    split; each part reads lazily from ``dataset`` and, when ``dataset`` has a
    source identity, gets one derived from it.

    Args:
      dataset: A ``grain.MapDataset`` (of mapping rows when ``drop_column`` is set).
      train_ratio: The share of rows in the first part, strictly between 0 and 1.
      seed: The shuffle seed, an int in [0, 2**32 - 1].
      drop_column: A column to leave out of both parts' rows (as fresh dicts;
        rows without it are kept whole), or None.

    Returns:
      ``(first part, second part)``.

    Raises:
      TypeError: If an argument has the wrong type (bools included).
      ValueError: If ``train_ratio`` is outside (0, 1), ``dataset`` has under two rows, or ``seed`` is out of range.

    Examples:
      >>> import grain
      >>> from tinax.data import InMemorySource, split_random
      >>> dataset = grain.MapDataset.source(InMemorySource([{"x": i} for i in range(10)], source_id="demo-v1"))
      >>> train, test = split_random(dataset, 0.8, seed=0)
      >>> len(train), len(test), sorted(row["x"] for part in (train, test) for row in part) == list(range(10))
      (8, 2, True)
    """
    # After an argument tinax 0.2 refused with TypeError and 0.3 accepts (a
    # NumPy float ratio, a NumPy integer seed), a later refusal is both types.
    with reported_as_both(_is_numpy_non_python_float(train_ratio) or is_non_python_int(seed)):
        _require_map_dataset(dataset)
        ratio = _require_ratio(train_ratio)
        seed = require_int(seed, "seed")
        if drop_column is not None:
            drop_column = require_str(drop_column, "drop_column", allow_empty=True)
        total = len(dataset)
        if total < 2:
            fail_value("dataset", "a grain.MapDataset of at least two rows to split", dataset)
        # grain checks the seed's range when it builds the shuffle.
        shuffled = dataset.shuffle(seed=seed)

    first_count = min(max(round(ratio * total), 1), total - 1)
    from tinax._data._records._reader_datasets import MappedMapDataset, SlicedMapDataset

    parent_id = find_source_id(dataset)
    parts = []
    for name, bounds in (("train", slice(0, first_count)), ("test", slice(first_count, total))):
        part = SlicedMapDataset(shuffled, bounds)
        if drop_column is not None:
            part = MappedMapDataset(part, _DropColumn(drop_column))  # part.map(...), iterated in this thread
        # An attribute, not a wrapper: an extra node would move every default seed derived above.
        source_id = _derived_id(parent_id, f"split_random(train_ratio={ratio!r}, seed={seed}, part={name!r})")
        if source_id is not None:
            setattr(part, "source_id", source_id)  # noqa: B010 (grain's classes declare no such attribute)
        parts.append(part)
    return parts[0], parts[1]


def _is_numpy_non_python_float(value: object) -> bool:
    """Whether a value is a NumPy float that is not a Python float (numpy.float64 is one, which 0.2 took)."""
    return isinstance(value, np.floating) and type(value) is not np.float64


def _require_ratio(train_ratio: object) -> float:
    expected = "a float strictly between 0 and 1"
    if isinstance(train_ratio, bool) or not isinstance(train_ratio, (int, float, np.floating)):
        fail_type("train_ratio", expected, train_ratio)
    # Compared before the conversion, which overflows for an int beyond the float range.
    if not 0 < train_ratio < 1:  # NaN fails this too; so does every int.
        fail_value("train_ratio", expected, train_ratio)
    return float(train_ratio)
