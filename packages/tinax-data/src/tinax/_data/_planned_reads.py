"""Planned reads: the rows of the batches ahead, read row group by row group in file order.

A global shuffle asks for rows all over the file, batch after batch. Each
batch then touches a few rows of many row groups: from the cache, the cost
is taking a row or two out of each of them; past the cache, every few rows
decode a whole row group again. Yet the order is known before the first
batch: it is a pure function of the seed and the epoch, and grain's own
datasets compute it.

:class:`PlannedBatchMapDataset` is grain's batch over a pipeline's rows (it
replaces tinax's bulk batch, node for node) with a :class:`ReadPlanner`.
Once batches are read one after another (every batch ``stride`` rows after
the one before, as grain's iterator reads them, or each worker process its
own share), the planner computes the source positions of a window of
batches ahead through a twin of the pipeline's datasets over positions
instead of records (the same grain classes, seeds and slices, so the same
positions), asks the source for all their rows at once, each row group
decoded once for the window in file order (``ParquetRecordSource.
planned_window``), and serves the window's batches from that table. The
batches, their order, lengths, random access, iterator states and re-deals
are those of the pipeline without a plan: only where the rows are fetched
from changes. Any read the window does not hold (random access, a batch a
slow thread asks for late, a window that could not be read) is read the
usual way, so errors come at the batch, and with the message, they always
came with.

Windows grow fourfold from a few batches to the most rows the source allows
(see ``planned_window_rows``), so the first batch comes as soon as before.

This module imports grain; instances pickle by reference to it, and a
worker process's copy plans its own reads.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from tinax._core.logs import format_bytes, get_logger
from tinax._data._datasets import RecordSourceMapDataset
from tinax._data._grain_compat import BulkBatchMapDataset, read_many

__all__ = ["PlannedBatchMapDataset", "PositionSource", "ReadPlanner"]

_logger = get_logger("data")

#: Batches of the first window; each next window is this factor larger, up to the source's limit.
_FIRST_WINDOW_BATCHES = 4
_GROWTH = 4
#: Unplanned batch reads over a source larger than its cache before the planner says so, once.
_UNPLANNED_WARNING_AFTER = 64


class PositionSource:
    """A data source whose record ``i`` is ``i``: the bottom of a pipeline's twin over positions."""

    def __init__(self, count: int) -> None:
        self._count = count

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> int:
        return int(index)

    def _getitems(self, indices: Sequence[int]) -> list[int]:
        return list(indices)


def position_dataset(count: int) -> RecordSourceMapDataset:
    """The twin of a reader's dataset, giving positions: the same grain class over :class:`PositionSource`."""
    return RecordSourceMapDataset(PositionSource(count))


class _Window:
    """The rows of some batches ahead: a decoded table, and the row of it holding every batch's rows."""

    def __init__(self, starts: Sequence[int], stride: int, length: int, table: Any, rows: np.ndarray[Any, Any]) -> None:
        self._slots = {start: slot for slot, start in enumerate(starts)}
        self.stride = stride
        self.length = length
        self.last_start = starts[-1]
        self._table = table
        self._rows = rows

    def holds(self, start: int, length: int) -> bool:
        return length == self.length and start in self._slots

    def records(self, start: int, length: int) -> list[Any]:
        slot = self._slots[start]
        return self._table.records(self._rows[slot * length : (slot + 1) * length])  # type: ignore[no-any-return]


class ReadPlanner:
    """Plans the reads of a pipeline's batches ahead, in one process (see the module docstring).

    Args:
      positions: The twin of the pipeline's rows dataset: ``read_many`` of
        it gives the source positions the rows dataset reads.
      source: The record source under the pipeline (a Parquet reader).
      limit: The row indices the batches read stay below (the rows dataset's
        length times the epochs, or ``sys.maxsize`` for an endless repeat).
    """

    def __init__(self, positions: Any, source: Any, *, limit: int) -> None:
        self._positions = positions
        self._source = source
        self._limit = limit
        self._start_process()

    def _start_process(self) -> None:
        self._lock = threading.Lock()
        self._window: _Window | None = None
        self._last_start: int | None = None
        self._last_stride: int | None = None
        self._next_batches = _FIRST_WINDOW_BATCHES
        self._unplanned = 0
        self._told = False

    def __getstate__(self) -> dict[str, Any]:
        return {"positions": self._positions, "source": self._source, "limit": self._limit}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._positions = state["positions"]
        self._source = state["source"]
        self._limit = state["limit"]
        self._start_process()

    def read(self, items: range) -> list[Any] | None:
        """The records of one batch's rows from a planned window, or None to read them the usual way."""
        start, length = items.start, len(items)
        if length == 0 or items.step != 1:
            return None
        with self._lock:
            window = self._window
            if window is None or not window.holds(start, length):
                window = self._plan(start, length)
        if window is None:
            return None
        try:
            return window.records(start, length)
        except Exception:  # Read again the usual way, which raises at this batch as it always did.
            return None

    def _plan(self, start: int, length: int) -> _Window | None:
        # Called with the lock held; returns the window holding this batch, if any.
        window = self._window
        if window is not None and start == window.last_start + window.stride:
            stride: int | None = window.stride
            continues = steady = True
        else:
            stride = None if self._last_start is None else start - self._last_start
            continues = False
            steady = stride is not None and stride >= length and stride == self._last_stride
        self._last_start, self._last_stride = start, stride
        if not steady or stride is None:
            self._note_unplanned()
            return None
        self._window = None  # The window read is done: its memory goes before the next one's comes.
        if not continues:
            self._next_batches = _FIRST_WINDOW_BATCHES
        most = max(1, self._source.planned_window_rows() // length)
        batches = min(self._next_batches, most)
        starts = [start + stride * step for step in range(batches) if start + stride * step + length <= self._limit]
        if not starts:
            return None
        self._next_batches = batches * _GROWTH
        indices = np.concatenate([np.arange(first, first + length, dtype=np.int64) for first in starts])
        try:
            positions = np.asarray(read_many(self._positions, indices.tolist()), dtype=np.int64)
            table, rows = self._source.planned_window(positions)
        except Exception:  # Read the usual way, which raises at the batch it always raised at.
            return None
        self._window = _Window(starts, stride, length, table, rows)
        if batches == most:
            self._tell(len(indices))
        return self._window

    def _tell(self, rows: int) -> None:
        """Logs once what planned reads cost over a source larger than its cache."""
        if self._told:
            return
        source = self._source
        decoded = source.decoded_file_bytes()
        budget = source.cache_bytes
        if decoded <= budget or len(source.row_group_ends) <= 1:
            return
        self._told = True
        # This process's rows of an epoch (its shard), read in windows of ``rows``.
        count = len(self._positions)
        _logger.info(
            "the decoded rows of %s (about %s) exceed its cache_bytes (%s): a shuffled pass reads them in "
            "windows of %d rows, decoding the row groups they touch about %.1f times per epoch. A cache_bytes "
            "above the decoded size decodes each row group once; so does shuffle_window=N, which shuffles row "
            "groups instead of rows",
            getattr(source, "_path", "the reader"),
            format_bytes(int(decoded)),
            format_bytes(budget),
            rows,
            count / rows,
        )

    def _note_unplanned(self) -> None:
        """Warns once where reads the plan cannot hold decode row groups for every few rows."""
        if self._told:
            return
        self._unplanned += 1
        if self._unplanned < _UNPLANNED_WARNING_AFTER:
            return
        source = self._source
        decoded = source.decoded_file_bytes()
        if decoded <= source.cache_bytes:
            return
        self._told = True
        _logger.warning(
            "batches of a pipeline over %s are read out of order (random access, or several threads), so they "
            "cannot be planned: its decoded rows (about %s) exceed its cache_bytes (%s), and every batch of a "
            "shuffled order decodes row groups again for a few rows each. Pass read_parquet_record a cache_bytes "
            "above the decoded size, or training_batches a shuffle_window, to read each row group once per epoch",
            getattr(source, "_path", "the reader"),
            format_bytes(int(decoded)),
            format_bytes(source.cache_bytes),
        )


class PlannedBatchMapDataset(BulkBatchMapDataset):
    """tinax's bulk batch, reading batches from a :class:`ReadPlanner`'s windows where it holds them."""

    def __init__(
        self,
        parent: Any,
        batch_size: int,
        *,
        drop_remainder: bool,
        batch_fn: Any,
        planner: ReadPlanner,
    ) -> None:
        super().__init__(parent, batch_size, drop_remainder=drop_remainder, batch_fn=batch_fn)
        self._planner = planner

    def _get_parent_items_fn(self, items: range) -> list[Any]:
        from tinax._data._shutdown import check_reads_go_on

        check_reads_go_on("a batch")
        found = self._planner.read(items)
        if found is not None:
            return found
        return read_many(self.parents[0], items)


def planned_limit(rows_length: int, num_epochs: int | None) -> int:
    """The row indices a pipeline's batches read stay below."""
    return sys.maxsize if num_epochs is None else rows_length * num_epochs


def shuffled_batches(
    dataset: Any,
    ordered: Any,
    rows: Any,
    *,
    seed: int,
    row_slices: Sequence[slice],
    batch_size: int,
    batch_fn: Any,
    num_epochs: int | None,
) -> PlannedBatchMapDataset | None:
    """The planned batches of a globally shuffled training pipeline over a Parquet reader, or None.

    Args:
      dataset: The pipeline's dataset; planned only where it is the dataset
        ``read_parquet_record`` returned.
      ordered: The pipeline's ``dataset.seed(seed).shuffle()``.
      rows: The pipeline's rows: ``ordered`` cut by ``row_slices``.
      seed: The pipeline's seed.
      row_slices: The slices that cut ``ordered`` into ``rows``, in turn.
      batch_size: The rows of a batch.
      batch_fn: The batch function.
      num_epochs: The pipeline's epochs (None: endless).
    """
    from tinax._data._datasets import record_source_of
    from tinax._data._parquet_source import ParquetRecordSource

    source = record_source_of(dataset)
    if type(source) is not ParquetRecordSource:
        return None
    twin = position_dataset(len(source)).seed(seed).shuffle()
    # The same grain classes at the same depth under the same seed: the same
    # shuffle. Should grain's seeding ever differ between the two, no plan.
    if getattr(twin, "_seed", None) != getattr(ordered, "_seed", None) or type(twin) is not type(ordered):
        return None
    for cut in row_slices:
        twin = twin.slice(cut)
    if len(twin) != len(rows):
        return None
    planner = ReadPlanner(twin, source, limit=planned_limit(len(rows), num_epochs))
    return PlannedBatchMapDataset(rows, batch_size, drop_remainder=True, batch_fn=batch_fn, planner=planner)
