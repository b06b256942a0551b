"""The grain dataset over a tinax data source: grain's own, refusing bool indices.

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

This module imports grain, so tinax imports it only when a function that
builds a dataset runs; instances pickle by reference to the class here, and
unpickling imports the module (and grain) in the worker process.
"""

from __future__ import annotations

from typing import Any

import grain
import numpy as np

from tinax._core.validation import fail_type
from tinax._data._grain_compat import SLICE_MAP_DATASET, SOURCE_MAP_DATASET, read_many

__all__ = ["RecordSourceMapDataset", "SlicedMapDataset", "record_source_of", "source_dataset"]


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
