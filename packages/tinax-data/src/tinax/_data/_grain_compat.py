"""Every private grain name tinax-data relies on, in one place, each with a fallback.

grain has no public way to read many elements at once, reach a source dataset's source, or name its
source, slice and batch classes. If grain moves a name, the fallback keeps tinax working (slower or with
less checking) and ``tests/test_grain_compat.py`` says which. Imports grain.
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
    """The elements at several indices, through grain's private ``_getitems`` where there is one."""
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
    """Makes ``replacement`` the one parent of a grain iterator, sharing its context (options, worker identity).

    Without grain's ``_ctx``, the replacement keeps grain's defaults.
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
    """The index of the element a grain iterator gives next (private protocol; NotImplementedError without it)."""
    get = getattr(iterator, "_get_next_index", None)
    if get is None:
        raise NotImplementedError(f"{type(iterator).__name__} cannot say which element comes next")
    return int(get())


def set_next_index(iterator: Any, index: int) -> None:
    """Moves a grain iterator to the element at ``index`` (private protocol; NotImplementedError without it)."""
    move = getattr(iterator, "_set_next_index", None)
    if move is None:
        raise NotImplementedError(f"{type(iterator).__name__} cannot move to another element")
    move(index)


class BulkBatchMapDataset(BATCH_MAP_DATASET):  # type: ignore[misc]
    """grain's batch, reading a batch's rows with one :func:`read_many` call: the same batches, less per-row cost.

    Should grain drop the hook overridden here, batches read row by row again.
    """

    def _get_parent_items_fn(self, items: range) -> list[Any]:
        # grain's hook: a cached property giving a function there, a method here, called the same way.
        from tinax._data._shutdown import check_reads_go_on

        # A batch queued in a prefetch thread at interpreter shutdown is dropped before any read.
        check_reads_go_on("a batch")
        return read_many(self.parents[0], items)
