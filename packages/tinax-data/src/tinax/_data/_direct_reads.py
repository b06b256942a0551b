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

from typing import Any, Protocol

import numpy as np

from tinax._data._grain_compat import BulkBatchMapDataset, read_many
from tinax._data._stacking import StackedColumns, stack_records, stacks_columns

__all__ = ["BatchPositions", "DirectBatchMapDataset", "read_positions"]


#: Rows whose shuffled positions are computed at once, for the batches ahead (half a MiB of int64).
_POSITIONS_AHEAD = 1 << 16


class BatchPositions(Protocol):
    """Maps a batch's row indices to source positions at once (``_planned_reads.VectorPositions``)."""

    @property
    def shuffled(self) -> bool:
        """Whether consecutive indices map to scattered positions (computed ahead, then)."""
        ...

    def range_positions(self, start: int, stop: int) -> np.ndarray[Any, Any] | range:
        """The source positions of the indices ``range(start, stop)``."""
        ...


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
        positions: BatchPositions | None,
        source: Any,
    ) -> None:
        super().__init__(parent, batch_size, drop_remainder=drop_remainder, batch_fn=batch_fn)
        self._positions = positions
        self._source = source
        self._stacked = stacks_columns(batch_fn)
        # Source positions computed ahead: (first row, row after the last, positions).
        self._ahead: tuple[int, int, np.ndarray[Any, Any]] | None = None

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
        return read_positions(self._source, self._positions_of(items.start, items.stop), stacked=self._stacked)

    def _positions_of(self, start: int, stop: int) -> np.ndarray[Any, Any] | range:
        """The source positions of rows ``start`` to ``stop``, from those computed ahead where they are.

        Shuffled positions cost a few NumPy passes per call whatever their
        number, so they are computed for :data:`_POSITIONS_AHEAD` rows at
        once and the batches that follow take theirs from them.
        """
        assert self._positions is not None
        ahead = self._ahead
        if ahead is not None and ahead[0] <= start and stop <= ahead[1]:
            return ahead[2][start - ahead[0] : stop - ahead[0]]
        if not self._positions.shuffled:
            return self._positions.range_positions(start, stop)
        # Within the epoch of ``start``: grain's batch asks each epoch's rows as indices past the first's.
        epoch_length = len(self.parents[0])
        epoch_end = (start // epoch_length + 1) * epoch_length if epoch_length else stop
        end = max(stop, min(start + _POSITIONS_AHEAD, epoch_end))
        found = self._positions.range_positions(start, end)
        if isinstance(found, range):
            return range(found.start, found.start + stop - start)
        self._ahead = (start, end, found)
        expect_positions = getattr(self._source, "expect_positions", None)
        if self._stacked and expect_positions is not None:
            expect_positions(found)
        return found[: stop - start]
