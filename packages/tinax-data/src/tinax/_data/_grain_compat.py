"""Every private grain name tinax-data relies on, in one place, each with a fallback.

grain's dataset API has no public way to read several elements at once, to
reach the data source under ``MapDataset.source``, or to name the classes of
its source, slice and batch datasets, so tinax uses grain's own private
names for these. Each is reached only through this module: when grain
changes one, the fallback keeps tinax working (more slowly, or with less
checking), and ``tests/test_grain_compat.py`` fails to say which name moved.

This module imports grain, so it is imported only by modules that build or
walk grain datasets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grain

__all__ = [
    "BATCH_MAP_DATASET",
    "SLICE_MAP_DATASET",
    "SOURCE_MAP_DATASET",
    "BulkBatchMapDataset",
    "get_next_index",
    "iterator_length",
    "replace_parent_iterator",
    "read_many",
    "set_next_index",
    "wrapped_source",
]

#: grain's dataset over a data source, which ``MapDataset.source`` builds (no public name).
SOURCE_MAP_DATASET: type[Any] = type(grain.MapDataset.source(()))
#: grain's dataset that ``MapDataset.slice`` builds (no public name).
SLICE_MAP_DATASET: type[Any] = type(grain.MapDataset.source(()).slice(slice(0)))
#: grain's dataset that ``MapDataset.batch`` builds (no public name).
BATCH_MAP_DATASET: type[Any] = type(grain.MapDataset.range(1).batch(1))


def read_many(dataset: Any, indices: Sequence[int]) -> list[Any]:
    """Returns the elements at several indices, as indexing each would give them.

    grain's datasets (and batched data sources) read many at once through
    their private ``_getitems``; anything without it is indexed one by one.
    """
    many = getattr(dataset, "_getitems", None)
    if many is None:
        return [dataset[index] for index in indices]
    return list(many(list(indices)))


def wrapped_source(dataset: Any) -> Any | None:
    """Returns the data source under grain's source dataset, or None for any other dataset."""
    if not isinstance(dataset, SOURCE_MAP_DATASET):
        return None
    return getattr(dataset, "_source", None)


def iterator_length(iterator: Any) -> int | None:
    """The element count grain's in-process iterator knows, or None where it knows none."""
    length = getattr(iterator, "_dataset_length", None)
    return length if type(length) is int else None


def replace_parent_iterator(iterator: Any, replacement: Any) -> None:
    """Makes ``replacement`` the one parent of a grain iterator, as if it had been built with it.

    grain's base iterator keeps its parents (which ``close`` and
    ``start_prefetch`` reach) and a context holding its options and the
    worker identity, which it hands to the parents it is built with; a parent
    put in place later joins them the same way. Should grain no longer keep
    a context under this name, the replacement keeps its own: grain's
    defaults.
    """
    iterator._parents = (replacement,)
    context = getattr(iterator, "_ctx", None)
    if context is None:
        return
    pending = [replacement]
    while pending:
        node = pending.pop()
        node._ctx = context
        pending.extend(getattr(node, "_parents", ()))


def get_next_index(iterator: Any) -> int:
    """The index of the element a grain iterator gives next (grain's private protocol).

    Raises:
      NotImplementedError: If the iterator cannot say (grain's own answer),
        or grain no longer has the protocol.
    """
    get = getattr(iterator, "_get_next_index", None)
    if get is None:
        raise NotImplementedError(f"{type(iterator).__name__} cannot say which element comes next")
    return int(get())


def set_next_index(iterator: Any, index: int) -> None:
    """Moves a grain iterator to the element at ``index`` (grain's private protocol).

    Raises:
      NotImplementedError: If the iterator cannot move (grain's own answer),
        or grain no longer has the protocol.
    """
    move = getattr(iterator, "_set_next_index", None)
    if move is None:
        raise NotImplementedError(f"{type(iterator).__name__} cannot move to another element")
    move(index)


class BulkBatchMapDataset(BATCH_MAP_DATASET):  # type: ignore[misc]
    """grain's batch, reading the rows of a batch with one :func:`read_many` call.

    Every grain dataset's batched read gives what indexing each position
    gives, so the batches are the same; a record source that reads many
    records at once (the Parquet reader) skips grain's per-row overhead.
    Should grain stop reading through the hook overridden here, its batch
    reads row by row again: the same batches, more slowly.
    """

    def _get_parent_items_fn(self, items: range) -> list[Any]:
        # grain's hook for reading a batch's rows: a cached property there that
        # gives a function, a method here, called the same way.
        from tinax._data._shutdown import check_reads_go_on

        # A batch queued in a prefetch thread when the interpreter shuts down
        # is dropped before any of its rows is read, whatever its dataset.
        check_reads_go_on("a batch")
        return read_many(self.parents[0], items)
