"""The grain datasets the readers and splits return: grain's own, refusing bool indices, iterated in order.

``grain.MapDataset.source(source)`` reduces every index modulo the source's
length before the source sees it, so ``True`` reaches a tinax source as the
int 1 and reads record 1. :class:`RecordSourceMapDataset` is grain's source
dataset with a ``__getitem__`` that refuses bools (and NumPy bools) with
TypeError first and otherwise reads as grain does: slices, ints, NumPy ints,
length, iteration, transformations and worker processes behave exactly as
for the dataset ``MapDataset.source`` returns. Int indices (and batched
reads) go to the source directly, modulo the length as grain reduces them,
without grain's per-record metrics. It is a
subclass, not a wrapper, so no node is added to the dataset graph and grain's
default seeds stay where they are. grain's classes behind ``MapDataset.source``
and ``MapDataset.slice`` have no public names: ``_grain_compat`` finds them.

Iterating one of these datasets (``for row in dataset``, ``list(dataset)``,
``iter(dataset)``) reads its elements in order in the calling thread, many
consecutive ones at a time (:class:`SequentialIterator`), where grain's
``MapDataset.__iter__`` starts 16 prefetch threads that read one element
each: for a reader whose reads take turns under a lock (the Parquet reader)
those threads only queue, and iteration ran ten times slower than the
pipelines. The elements, their order and the iterator's state are those of
grain's iterator; ``to_iter_dataset`` still gives grain's own.

This module imports grain, so tinax imports it only when a function that
builds a dataset runs; instances pickle by reference to the class here, and
unpickling imports the module (and grain) in the worker process.
"""

from __future__ import annotations

import collections
from typing import Any

import grain
import numpy as np

from tinax._core.validation import fail_type
from tinax._data._grain_compat import SLICE_MAP_DATASET, SOURCE_MAP_DATASET, read_many

__all__ = [
    "MappedMapDataset",
    "RecordSourceMapDataset",
    "SequentialIterator",
    "SlicedMapDataset",
    "record_source_of",
    "source_dataset",
]

#: grain's dataset that ``MapDataset.map`` builds (no public name; see ``_grain_compat``).
_MAP_MAP_DATASET: type[Any] = type(grain.MapDataset.range(1).map(int))

#: How many consecutive elements a plain iteration reads at once: one call
#: down to the source (a Parquet reader reads them row group by row group),
#: few enough that the elements read ahead take little memory.
ITERATION_CHUNK = 256


class SequentialIterator(grain.DatasetIterator):  # type: ignore[misc]
    """Iterates a finite MapDataset in order, in the calling thread, reading chunks of elements at once.

    It gives what grain's iterator of ``MapDataset.__iter__`` gives: every
    element in order, None elements (filtered-out rows) skipped, and the
    state ``{"next_index": n}``, so a state saved from either restores into
    the other. An element that cannot be read raises when the iteration
    reaches it, after every element before it, as in grain's iterator without
    threads; the elements of its chunk are then read one at a time.
    """

    _MUTATES_ELEMENT_SPEC = False

    def __init__(self, dataset: grain.MapDataset, *, chunk: int = ITERATION_CHUNK) -> None:
        super().__init__()
        self._dataset = dataset
        self._length = len(dataset)
        self._chunk = chunk
        self._next_index = 0
        # Elements already read, from self._next_index on.
        self._pending: collections.deque[Any] = collections.deque()
        # Up to here, elements are read one at a time (a chunk that failed).
        self._single_until = 0

    def __next__(self) -> Any:
        self._assert_not_closed()
        while True:
            if not self._pending:
                if self._next_index >= self._length:
                    raise StopIteration
                self._read_ahead()
            element = self._pending.popleft()
            self._next_index += 1
            if element is not None:
                return element

    def _read_ahead(self) -> None:
        start = self._next_index
        if start < self._single_until:
            self._pending.append(self._dataset[start])
            return
        stop = min(start + self._chunk, self._length)
        try:
            elements = read_many(self._dataset, range(start, stop))
        except Exception:
            # Read again one at a time, so that the elements before the
            # failing one come out and the error is raised at its own turn.
            self._single_until = stop
            self._pending.append(self._dataset[start])
            return
        self._pending.extend(elements)

    def get_state(self) -> dict[str, Any]:
        return {"next_index": self._next_index}

    def set_state(self, state: dict[str, Any]) -> None:
        next_index = state["next_index"]
        # grain's iterator takes the index, then refuses one out of range.
        if not 0 <= next_index <= self._length:
            raise IndexError(
                f"Checkpoint `next_index` {next_index} is out of range for dataset of length {self._length}."
            )
        self._next_index = int(next_index)
        self._pending.clear()
        self._single_until = 0

    # grain's private protocol of moving an iterator, which its worker processes use.
    def _get_next_index(self) -> int:
        return self._next_index

    def _set_next_index(self, index: int) -> None:
        self.set_state({"next_index": index})

    def __str__(self) -> str:
        return f"SequentialIterator(length={self._length}, chunk={self._chunk})"


class RecordSourceMapDataset(SOURCE_MAP_DATASET):  # type: ignore[misc]
    """grain's dataset over a random-access source, refusing bool indices."""

    def __init__(self, source: Any) -> None:
        super().__init__(source)
        # Kept under a name of ours: grain's own reference is private.
        self._record_source = source

    @property
    def record_source(self) -> Any:
        """The data source this dataset reads."""
        return self._record_source

    def __getitem__(self, index: Any) -> Any:
        """Returns the record at ``index``, or a sliced dataset for a slice, as grain does.

        Raises:
          TypeError: If ``index`` is a bool or a NumPy bool (grain would read
            it as 0 or 1), or what the source raises for other non-ints.
          IndexError: As the source raises it.
        """
        if type(index) is int:
            # grain's own read (index modulo the length) without its per-record
            # metrics, which cost more than reading a cached record.
            source = self._record_source
            return source[index % len(source)]
        if isinstance(index, (bool, np.bool_)):
            fail_type("index", "an int", index)
        return super().__getitem__(index)

    def _getitems(self, indices: Any) -> Any:
        """Returns the records at several indices, read by the source at once where it can."""
        source = self._record_source
        count = len(source)
        return read_many(source, [index % count for index in indices])

    def __iter__(self) -> SequentialIterator:
        """Iterates the records in order in this thread, reading many at once (see :class:`SequentialIterator`)."""
        return SequentialIterator(self)


class SlicedMapDataset(SLICE_MAP_DATASET):  # type: ignore[misc]
    """grain's ``MapDataset.slice`` result, refusing bool indices.

    A subclass, like :class:`RecordSourceMapDataset`, so that the dataset
    graph and grain's default seeds are those of ``parent.slice(sl)``.
    """

    def __init__(self, parent: grain.MapDataset, sl: slice) -> None:
        super().__init__(parent=parent, sl=sl)

    def __getitem__(self, index: Any) -> Any:
        """Returns the record at ``index``, or a sliced dataset for a slice, as grain does.

        Raises:
          TypeError: If ``index`` is a bool or a NumPy bool (grain would read
            it as 0 or 1).
        """
        if isinstance(index, (bool, np.bool_)):
            fail_type("index", "an int", index)
        return super().__getitem__(index)

    def __iter__(self) -> SequentialIterator:
        """Iterates the rows in order in this thread, reading many at once (see :class:`SequentialIterator`)."""
        return SequentialIterator(self)


class MappedMapDataset(_MAP_MAP_DATASET):  # type: ignore[misc]
    """grain's ``MapDataset.map`` result, iterated as :class:`SequentialIterator` iterates.

    A subclass, so that the dataset graph and grain's default seeds are those
    of ``parent.map(transform)``.
    """

    def __init__(self, parent: grain.MapDataset, transform: Any) -> None:
        super().__init__(parent, transform)

    def __iter__(self) -> SequentialIterator:
        """Iterates the rows in order in this thread, reading many at once (see :class:`SequentialIterator`)."""
        return SequentialIterator(self)


def record_source_of(dataset: Any) -> Any | None:
    """Returns the data source under a dataset a tinax reader returned, or None for any other dataset."""
    if type(dataset) is not RecordSourceMapDataset:
        return None
    return dataset.record_source


def source_dataset(source: Any) -> grain.MapDataset:
    """Returns ``grain.MapDataset.source(source)``, refusing bool indices.

    Args:
      source: A random-access data source (``len`` and integer indexing).

    Returns:
      A :class:`RecordSourceMapDataset` over ``source``.
    """
    return RecordSourceMapDataset(source)
