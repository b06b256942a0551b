"""Checked train/test splits that keep random access and a derived source identity.

A split is a view: a data source that holds its parent dataset and the parent
positions of its rows, wrapped in ``grain.MapDataset.source``. So each part
keeps ``len`` and random access, reads its rows from the parent only when
asked, shuffles and shards like any other source, and carries a ``source_id``
derived from the parent's (or none, when the parent has none).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tinax._core.validation import (
    describe,
    fail_type,
    fail_value,
    require_bool,
    require_int,
    require_sequence,
    require_str,
)
from tinax.data._sources import find_source_id

if TYPE_CHECKING:
    from grain import MapDataset

__all__ = ["split_by_column", "split_random"]

_MAX_SEED = 2**32 - 1


class _RowSelection:
    """A random-access data source over chosen rows of a parent grain dataset.

    Row ``i`` of the selection is row ``positions[i]`` of the parent, with
    ``drop_column`` (when set) left out of a fresh dict; the parent's row
    object is never modified.
    """

    def __init__(
        self,
        parent: MapDataset[dict[str, Any]],
        positions: np.ndarray[Any, np.dtype[np.int64]],
        *,
        drop_column: str | None,
        source_id: str | None,
        description: str,
    ) -> None:
        self._parent = parent
        self._positions = positions
        self._drop_column = drop_column
        self._description = description
        # Only a named parent gives a named part: a made-up identity would let
        # an unidentified source through the pipelines' state checks.
        if source_id is not None:
            self.source_id = source_id

    def __len__(self) -> int:
        return len(self._positions)

    def __getitem__(self, index: int) -> dict[str, Any]:
        position = int(self._positions[index])
        row = self._parent[position]
        if self._drop_column is None:
            return row  # type: ignore[no-any-return]
        mapping = _require_row(row, position, self._drop_column)
        return {key: value for key, value in mapping.items() if key != self._drop_column}

    def __repr__(self) -> str:
        return f"_RowSelection({self._description}, rows={len(self._positions)})"


def _require_row(row: object, position: int, column: str) -> Mapping[str, Any]:
    if row is None:
        raise ValueError(
            f"dataset[{position}] must be a row, got None (a filtered-out row); a split needs every row present"
        )
    if not isinstance(row, Mapping):
        fail_type(f"dataset[{position}]", f"a mapping with a {column!r} column", row)
    if column not in row:
        names = ", ".join(repr(name) for name in list(row)[:10])
        raise ValueError(f"dataset[{position}] must have a {column!r} column, got a row with columns {names}")
    return row


def _require_map_dataset(dataset: object) -> Any:
    import grain

    if not isinstance(dataset, grain.MapDataset):
        fail_type("dataset", "a grain.MapDataset", dataset)
    return grain


def _part(
    grain: Any,
    dataset: MapDataset[dict[str, Any]],
    positions: list[int] | np.ndarray[Any, np.dtype[np.int64]],
    *,
    drop_column: str | None,
    parent_id: str | None,
    description: str,
) -> MapDataset[dict[str, Any]]:
    source_id = None if parent_id is None else f"{parent_id}/{description}"
    selection = _RowSelection(
        dataset,
        np.asarray(positions, dtype=np.int64),
        drop_column=drop_column,
        source_id=source_id,
        description=description,
    )
    return grain.MapDataset.source(selection)


def split_by_column(
    dataset: MapDataset[dict[str, Any]],
    column: str,
    *,
    values: tuple[str, str] = ("train", "test"),
    drop_column: bool = True,
) -> tuple[MapDataset[dict[str, Any]], MapDataset[dict[str, Any]]]:
    """Splits a dataset of dict rows in two by the value of one column.

    Every row is read once, through ``dataset[i]``, when the split is made.
    Each row's ``column`` must hold exactly one of the two ``values``: a row
    with any other value (a third label, a misspelling, ``bytes`` instead of
    ``str``) stops the split with an error naming the value and the row, so no
    row is ever dropped without notice. A value may match no row, which gives
    an empty part.

    Each part is a random-access ``grain.MapDataset`` over the rows of its
    value, in their original order; it reads rows from ``dataset`` lazily. When
    ``dataset`` has a source identity (see :class:`InMemorySource`), each part
    gets a derived one, ``"<parent id>/split_by_column(column=..., value=...)"``,
    so pipeline state checks tell the parts apart. A part of an unidentified
    dataset is unidentified too.

    Args:
      dataset: A ``grain.MapDataset`` whose rows are mappings with str keys.
      column: The column that says which part a row belongs to.
      values: The two values of ``column``, in the order the parts are
        returned. They must be distinct strings.
      drop_column: Whether the parts' rows leave ``column`` out (as a fresh
        dict; the parent's rows are not modified).

    Returns:
      ``(rows with values[0], rows with values[1])``.

    Raises:
      TypeError: If ``dataset`` is not a ``grain.MapDataset``, ``column`` or
        an item of ``values`` is not a ``str``, ``values`` is not a sequence,
        ``drop_column`` is not a bool, or a row is not a mapping.
      ValueError: If ``column`` or a value is empty, ``values`` does not hold
        exactly two distinct values, a row is missing (None) or lacks
        ``column``, or a row's ``column`` holds neither value.
    """
    grain = _require_map_dataset(dataset)
    column = require_str(column, "column")
    first, second = _require_two_values(values)
    require_bool(drop_column, "drop_column")

    positions: dict[str, list[int]] = {first: [], second: []}
    for position in range(len(dataset)):
        value = _require_row(dataset[position], position, column)[column]
        # Only real strings can match; a bytes b"train" is a different value.
        chosen = positions.get(value) if isinstance(value, str) else None
        if chosen is None:
            raise ValueError(
                f"dataset[{position}][{column!r}] must be {first!r} or {second!r}, got {describe(value)}; "
                "split_by_column never drops rows with other values"
            )
        chosen.append(position)

    parent_id = find_source_id(dataset)
    dropped = column if drop_column else None
    first_part, second_part = (
        _part(
            grain,
            dataset,
            positions[value],
            drop_column=dropped,
            parent_id=parent_id,
            description=f"split_by_column(column={column!r}, value={value!r})",
        )
        for value in (first, second)
    )
    return first_part, second_part


def _require_two_values(values: object) -> tuple[str, str]:
    items = require_sequence(
        values, "values", item_check=lambda item, name: require_str(item, name), description="a tuple of two str"
    )
    if len(items) != 2:
        fail_value("values", "a tuple of exactly two str", values)
    if items[0] == items[1]:
        fail_value("values", "two distinct str", values)
    return items[0], items[1]


def split_random(
    dataset: MapDataset[dict[str, Any]],
    train_ratio: float,
    *,
    seed: int,
    drop_column: str | None = None,
) -> tuple[MapDataset[dict[str, Any]], MapDataset[dict[str, Any]]]:
    """Splits a dataset in two at random, reproducibly for a seed.

    The train part gets ``floor(train_ratio * len(dataset) + 0.5)`` rows (the
    ratio rounded half up), the test part the rest. Which rows go where is
    decided by a NumPy permutation of the row positions seeded with ``seed``:
    the same seed, length and ratio give the same parts (with a given NumPy
    version), the parts are disjoint and together hold every row. Within each
    part the rows keep their original order; shuffling is the pipeline's job.
    No row is read to make the split, except row 0 when ``drop_column`` is
    set, so that a misspelled column fails here rather than mid-training.

    Each part is a random-access ``grain.MapDataset`` that reads its rows from
    ``dataset`` lazily. When ``dataset`` has a source identity, each part gets
    a derived one, ``"<parent id>/split_random(train_ratio=..., seed=...,
    part='train'|'test')"``; a part of an unidentified dataset is unidentified.

    Args:
      dataset: A ``grain.MapDataset`` (of dict rows when ``drop_column`` is
        set).
      train_ratio: The share of rows for the train part, a float strictly
        between 0 and 1.
      seed: An int in [0, 2**32 - 1] that fixes the split.
      drop_column: A column to leave out of every row of both parts (for
        example a column that is meaningless after the split), or None to
        keep rows as they are. Rows lose it as fresh dicts; the parent's rows
        are not modified. A row without it raises ValueError when read.

    Returns:
      ``(train part, test part)``.

    Raises:
      TypeError: If ``dataset`` is not a ``grain.MapDataset``, ``train_ratio``
        is not a float (ints and bools included), ``seed`` is not an int (or
        is a bool), ``drop_column`` is not None or a ``str``, or row 0 is not
        a mapping when ``drop_column`` is set.
      ValueError: If ``train_ratio`` is not strictly between 0 and 1, ``seed``
        is out of range, ``drop_column`` is empty or missing from row 0, or
        either part would be empty (too few rows for the ratio).
    """
    grain = _require_map_dataset(dataset)
    ratio = _require_ratio(train_ratio)
    seed = require_int(seed, "seed", minimum=0, maximum=_MAX_SEED)
    if drop_column is not None:
        drop_column = require_str(drop_column, "drop_column")

    total = len(dataset)
    train_count = math.floor(ratio * total + 0.5)
    if not 0 < train_count < total:
        emptied = "train" if train_count == 0 else "test"
        raise ValueError(
            f"train_ratio must leave rows in both parts, got {ratio!r} for a dataset of {total} rows, "
            f"which leaves the {emptied} part empty"
        )
    if drop_column is not None:
        _require_row(dataset[0], 0, drop_column)

    permutation = np.random.default_rng(seed).permutation(total)
    parent_id = find_source_id(dataset)
    parts = []
    for name, chosen in (("train", permutation[:train_count]), ("test", permutation[train_count:])):
        parts.append(
            _part(
                grain,
                dataset,
                np.sort(chosen),
                drop_column=drop_column,
                parent_id=parent_id,
                description=f"split_random(train_ratio={ratio!r}, seed={seed}, part={name!r})",
            )
        )
    return parts[0], parts[1]


def _require_ratio(train_ratio: object) -> float:
    expected = "a float strictly between 0 and 1"
    if isinstance(train_ratio, bool) or not isinstance(train_ratio, (float, np.floating)):
        fail_type("train_ratio", expected, train_ratio)
    ratio = float(train_ratio)
    if not 0.0 < ratio < 1.0:  # NaN fails this too.
        fail_value("train_ratio", expected, train_ratio)
    return ratio
