"""The grain datasets the readers and splits return: grain's own, refusing bool indices, iterated in order.

grain reduces indices modulo the length, so ``True`` would read record 1; these subclasses of grain's
classes (not wrappers, so default seeds stay put) refuse bools. Iteration reads chunks in the calling
thread: grain's 16 prefetch threads only queued on the Parquet reader's lock (ten times slower), while
elements, order and state stay grain's. Imports grain, so it is imported only when a dataset is built.
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

#: Consecutive elements a plain iteration reads in one call to the source; few, to bound memory.
ITERATION_CHUNK = 256


class SequentialIterator(grain.DatasetIterator):  # type: ignore[misc]
    """Iterates a finite MapDataset in order in this thread, in chunks; elements and state match grain's iterator.

    A failing read raises at its own element's turn, the chunk then read one element at a time.
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
            # Read one at a time so the error is raised at its own turn.
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
        """Returns the record at ``index`` (or a sliced dataset), as grain does, refusing bools."""
        if type(index) is int:
            # grain's read without its per-record metrics, which cost more than reading a cached record.
            source = self._record_source
            return source[index % len(source)]
        if isinstance(index, (bool, np.bool_)):
            fail_type("index", "an int", index)
        return super().__getitem__(index)

    def _getitems(self, indices: Any) -> Any:
        """Returns the records at several indices, read by the source at once where it can."""
        count = len(self._record_source)
        return read_many(self._record_source, [index % count for index in indices])

    def __iter__(self) -> SequentialIterator:
        """Iterates the records in order in this thread, reading many at once (see :class:`SequentialIterator`)."""
        return SequentialIterator(self)


class SlicedMapDataset(SLICE_MAP_DATASET):  # type: ignore[misc]
    """grain's ``MapDataset.slice`` result, refusing bool indices (a subclass, so seeds match ``parent.slice``)."""

    def __getitem__(self, index: Any) -> Any:
        """Returns the record at ``index`` (or a sliced dataset), as grain does, refusing bools."""
        if isinstance(index, (bool, np.bool_)):
            fail_type("index", "an int", index)
        return super().__getitem__(index)

    def __iter__(self) -> SequentialIterator:
        """Iterates the rows in order in this thread, reading many at once (see :class:`SequentialIterator`)."""
        return SequentialIterator(self)


class MappedMapDataset(_MAP_MAP_DATASET):  # type: ignore[misc]
    """grain's ``MapDataset.map`` result, iterated in order (a subclass, so seeds match ``parent.map``)."""

    def __iter__(self) -> SequentialIterator:
        """Iterates the rows in order in this thread, reading many at once (see :class:`SequentialIterator`)."""
        return SequentialIterator(self)


def record_source_of(dataset: Any) -> Any | None:
    """Returns the data source under a dataset a tinax reader returned, or None for any other dataset."""
    return dataset.record_source if type(dataset) is RecordSourceMapDataset else None


def source_dataset(source: Any) -> grain.MapDataset:
    """Returns ``grain.MapDataset.source(source)``, refusing bool indices."""
    return RecordSourceMapDataset(source)
