"""Batches read straight from a reader's source: positions computed per batch with NumPy (imports grain).

grain maps a batch's indices down the chain one Python int per node and row; :class:`DirectBatchMapDataset`
replaces tinax's bulk batch node for node (same graph, same default seeds) and computes a whole batch's
source positions at once with a twin of the chain, checked against grain on a sample first. Where the twin
would differ, or the dataset is not a reader's, it reads down the chain; the batches are the same.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from tinax._data._grain_compat import BulkBatchMapDataset, read_many
from tinax._data._stacking import StackedColumns, stack_records, stacks_columns

__all__ = ["BatchPositions", "DirectBatchMapDataset", "read_positions"]


#: Rows whose shuffled positions are computed at once, for the batches ahead (half a MiB of int64).
_POSITIONS_AHEAD = 1 << 16
#: Blocks past those rows that a window shuffle tells threads filling ahead of, in the order its batches read them.
_BLOCKS_AHEAD = 256


class BatchPositions(Protocol):
    """Maps a batch's row indices to source positions at once (``_planned_reads.VectorPositions``)."""

    @property
    def shuffled(self) -> bool:
        """Whether consecutive indices map to scattered positions (computed ahead, then)."""
        ...

    def range_positions(self, start: int, stop: int) -> np.ndarray[Any, Any] | range:
        """The source positions of the indices ``range(start, stop)``."""
        ...

    def block_starts_ahead(self, index: int, count: int) -> np.ndarray[Any, Any] | None:
        """Where the next ``count`` blocks read from ``index`` on start, where batches read whole blocks in turn."""
        ...


def read_positions(source: Any, positions: np.ndarray[Any, Any] | range, *, stacked: bool) -> Any:
    """The records of a source at valid positions, or, with ``stacked``, their :class:`StackedColumns`."""
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
    return StackedColumns(stack_records(records), len(records)) if stacked else records


class DirectBatchMapDataset(BulkBatchMapDataset):
    """tinax's bulk batch, reading a batch's rows from the source at positions computed at once (None: as grain)."""

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

        # A batch queued in a prefetch thread at interpreter shutdown is dropped before any read.
        check_reads_go_on("a batch")
        return self.read_rows(items)

    def read_rows(self, items: range) -> Any:
        """The rows of ``items`` of the parent, as the batch function takes them."""
        if self._positions is None or items.step != 1 or not len(items):
            rows = read_many(self.parents[0], items)
            return StackedColumns(stack_records(rows), len(rows)) if self._stacked and rows else rows
        return read_positions(self._source, self._positions_of(items.start, items.stop), stacked=self._stacked)

    def _positions_of(self, start: int, stop: int) -> np.ndarray[Any, Any] | range:
        """Source positions of rows ``start`` to ``stop``; shuffled ones computed far ahead (fixed cost per call)."""
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
            # A window shuffle's next blocks too, so that threads ahead are never out of blocks the batches read
            # (within this epoch: its plan is computed, the next one's need not be yet).
            blocks = self._positions.block_starts_ahead(end, _BLOCKS_AHEAD) if end < epoch_end else None
            expect_positions(found if blocks is None else np.concatenate([found, blocks]))
        return found[: stop - start]
