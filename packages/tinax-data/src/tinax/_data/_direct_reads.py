"""Batches read straight from a reader's source: positions computed per batch with NumPy.

A pipeline's rows are its dataset seeded, ordered (grain's shuffle, the
window shuffle, or dataset order) and cut by slices. grain maps a batch's
indices down that chain one Python int per node and row, which costs more
than taking the rows out of a decoded row group. :class:`DirectBatchMapDataset`
is grain's batch over the same rows (it replaces tinax's bulk batch node for
node, so the dataset graph and grain's default seeds stay those of the
chain) that computes a whole batch's source positions at once, with
:class:`~tinax._data._planned_reads.VectorPositions` over a twin of the
chain, and asks the source for all of them in one call. With
:func:`~tinax._data._stacking.stack_records` as the batch function, a source
that can stack its columns (the Parquet reader) gives the batch's arrays
without building a record per row.

The twin is checked against grain's own datasets on a sample of indices
before it is used, as the planned reads check theirs; where the two would
differ, or the dataset is not a reader's, the batch reads down the chain as
before. Either way the batches are the same.

This module imports grain; instances pickle by reference to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tinax._data._grain_compat import SLICE_MAP_DATASET, BulkBatchMapDataset, read_many
from tinax._data._reader_datasets import record_source_of
from tinax._data._stacking import StackedColumns, stack_records, stacks_columns

if TYPE_CHECKING:
    from tinax._data._planned_reads import VectorPositions

__all__ = ["DirectBatchMapDataset", "batch_positions", "read_positions"]


def read_positions(source: Any, positions: np.ndarray[Any, Any] | range, *, stacked: bool) -> Any:
    """The records of a source at valid positions, or, with ``stacked``, their :class:`StackedColumns`.

    Args:
      source: A reader's record source (or any random-access source).
      positions: Positions in the source, each at least 0 and below its
        length: an array, or a ``range`` of consecutive ones.
      stacked: Whether the caller's batch function is ``stack_records``.
    """
    if stacked:
        if isinstance(positions, range):
            stacked_range = getattr(source, "stacked_range", None)
            if stacked_range is not None:
                return stacked_range(positions)
        stacked_at = getattr(source, "stacked_at", None)
        if stacked_at is not None:
            return stacked_at(np.asarray(positions, dtype=np.int64))
    if isinstance(positions, range):
        positions = np.arange(positions.start, positions.stop, dtype=np.int64)
    records_at = getattr(source, "records_at", None)
    records = records_at(positions) if records_at is not None else read_many(source, positions.tolist())
    if stacked:
        return StackedColumns(stack_records(records), len(records))
    return records


class DirectBatchMapDataset(BulkBatchMapDataset):
    """tinax's bulk batch, reading a batch's rows from the source at positions computed at once.

    Args:
      parent: The pipeline's rows (the chain the batches would read).
      batch_size: The rows of a batch.
      drop_remainder: Whether a last, shorter batch is dropped.
      batch_fn: The batch function.
      positions: The source positions of ``parent``'s indices, or None to
        read down ``parent`` as grain does.
      source: The record source under ``parent``.
    """

    def __init__(
        self,
        parent: Any,
        batch_size: int,
        *,
        drop_remainder: bool,
        batch_fn: Any,
        positions: VectorPositions | None,
        source: Any,
    ) -> None:
        super().__init__(parent, batch_size, drop_remainder=drop_remainder, batch_fn=batch_fn)
        self._positions = positions
        self._source = source
        self._stacked = stacks_columns(batch_fn)

    def _get_parent_items_fn(self, items: range) -> Any:
        from tinax._data._shutdown import check_reads_go_on

        # A batch queued in a prefetch thread when the interpreter shuts down
        # is dropped before any of its rows is read, whatever its dataset.
        check_reads_go_on("a batch")
        return self.read_rows(items)

    def read_rows(self, items: range) -> Any:
        """The rows of ``items`` of the parent, as the batch function takes them."""
        if self._positions is None or items.step != 1 or not len(items):
            rows = read_many(self.parents[0], items)
            return StackedColumns(stack_records(rows), len(rows)) if self._stacked and rows else rows
        positions = self._positions.range_positions(items.start, items.stop)
        return read_positions(self._source, positions, stacked=self._stacked)


def batch_positions(
    dataset: Any,
    ordered: Any,
    rows: Any,
    *,
    seed: int | None,
    row_slices: Sequence[slice],
    order: str,
) -> VectorPositions | None:
    """The positions of a pipeline's rows in its dataset's source, computed with NumPy, or None.

    Args:
      dataset: The pipeline's dataset; only a reader's own dataset (one
        over a record source) has positions here.
      ordered: The pipeline's dataset under its slices: ``dataset`` itself,
        ``dataset.seed(seed)``, its grain shuffle or its window shuffle.
      rows: ``ordered`` cut by ``row_slices``.
      seed: The seed ``ordered`` was given, or None where it was not seeded.
      row_slices: The slices that cut ``ordered`` into ``rows``, in turn.
      order: ``"none"``, ``"shuffle"`` or ``"window"``: what ``ordered`` is.

    Returns:
      A :class:`VectorPositions` that maps ``rows``' indices to source
      positions as grain's datasets do, or None where it cannot be built or
      does not agree with them.
    """
    # The planned reads build on the direct batch, so their module is imported here.
    from tinax._data._planned_reads import VectorPositions, _vector_positions, position_dataset

    source = record_source_of(dataset)
    if source is None:
        return None
    twin: Any = position_dataset(len(source))
    if seed is not None:
        twin = twin.seed(seed)
    if order == "shuffle":
        twin = twin.shuffle()
    elif order == "window":
        from tinax._data._checked_datasets import WindowShuffleMapDataset

        twin = WindowShuffleMapDataset(twin, seed=ordered._seed, block_ends=ordered._block_ends, window=ordered._window)
    # The same grain classes at the same depth under the same seed give the
    # same order; should grain's seeding ever differ between the two, none.
    if type(twin) is not type(ordered) or getattr(twin, "_seed", None) != getattr(ordered, "_seed", None):
        return None
    twin_ordered = twin
    slices: list[Any] = []
    for cut in row_slices:
        twin = twin.slice(cut)
        slices.insert(0, twin)
    if len(twin) != len(rows) or not all(type(node) is SLICE_MAP_DATASET for node in slices):
        return None
    found = _vector_positions(twin, twin_ordered, slices, order)
    return found if isinstance(found, VectorPositions) else None
