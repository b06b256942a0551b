"""Planned reads: the rows of the batches ahead, read row group by row group in file order.

A global shuffle's order is known in advance (seed and epoch), as is a window shuffle's, so
:class:`ReadPlanner` computes a window of batches' source positions through a
position twin of the pipeline (same grain classes and seeds) and decodes each
row group once per window. Batches, states and errors are unchanged: reads the
window does not hold go the usual way. Windows grow fourfold up to the cache budget.
"""

from __future__ import annotations

import collections
import sys
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from tinax._core.logs import format_bytes, get_logger
from tinax._data._grain_compat import SLICE_MAP_DATASET, read_many
from tinax._data._pipelines._direct_reads import DirectBatchMapDataset
from tinax._data._pipelines._position_twins import (
    PositionSource,
    VectorPositions,
    _vector_positions,
    position_dataset,
    shuffled_indices,
)
from tinax._data._pipelines._window_reads import (
    _PIECE_ROWS,
    _by_row_group,
    _make_room,
    _return_freed_memory,
    _stacked_in_threads,
    _StackedWindow,
    past_cache,
    read_window,
    window_rows,
)
from tinax._data._shutdown import WINDOW_THREAD_PREFIX, check_reads_go_on
from tinax._data._stacking import StackedColumns, stacks_columns

__all__ = [
    "PlannedBatchMapDataset",
    "PositionSource",
    "ReadPlanner",
    "VectorPositions",
    "batch_positions",
    "shuffled_indices",
]

_logger = get_logger("data")

#: Batches of the first window; each next window is this factor larger, up to the source's limit.
_FIRST_WINDOW_BATCHES = 4
_GROWTH = 4
#: Windows read ahead at once, each in a thread of its own, where the file fits the cache.
_WINDOWS_AHEAD = 3
#: Unplanned batch reads over a source larger than its cache before the planner says so, once.
_UNPLANNED_WARNING_AFTER = 64


class _Window:
    """The rows of some batches ahead: a decoded table, and the row of it holding every batch's rows."""

    def __init__(self, starts: Sequence[int], stride: int, length: int, table: Any, rows: np.ndarray[Any, Any]) -> None:
        self._count = len(rows)
        self._slots = {start: slot for slot, start in enumerate(starts)}
        self.stride = stride
        self.length = length
        self.last_start = starts[-1]
        self._table = table
        self._rows = rows

    def holds(self, start: int, length: int) -> bool:
        return length == self.length and start in self._slots

    def __len__(self) -> int:
        return self._count

    def records(self, start: int, length: int, *, stacked: bool = False) -> Any:
        slot = self._slots[start]
        rows = self._rows[slot * length : (slot + 1) * length]
        if stacked:
            return StackedColumns(self._table.stacked(rows), length)
        return self._table.records(rows)


class _WindowAhead:
    """A planner's next window, read in a thread of its own while the current one is served (None if unreadable)."""

    def __init__(self, planner: ReadPlanner, starts: list[int], stride: int, length: int, batches: int) -> None:
        self._first = starts[0]
        self.last_start = starts[-1]
        self._stride = stride
        self._length = length
        self.batches = batches
        self._window: _Window | None = None
        self._done = threading.Event()
        # Not a daemon: the interpreter joins it before it exits, rather than stopping it inside pyarrow,
        # and once shutdown starts its reads stop at the next row group (see ``_shutdown``).
        thread = threading.Thread(
            target=self._read, args=(planner, starts, stride, length), name=f"{WINDOW_THREAD_PREFIX}-{starts[0]}"
        )
        thread.start()

    def _read(self, planner: ReadPlanner, starts: list[int], stride: int, length: int) -> None:
        try:
            self._window = planner._read_batches(starts, stride, length)
        finally:
            self._done.set()

    def holds(self, start: int, length: int, stride: int) -> bool:
        return (start, length, stride) == (self._first, self._length, self._stride)

    def result(self) -> _Window | None:
        self._done.wait()
        return self._window


def read_stacked_window(source: Any, positions: np.ndarray[Any, Any]) -> tuple[Any, np.ndarray[Any, Any]]:
    """:func:`read_window` for batches of ``stack_records``: one array per field, in the order of ``positions``.

    Past the cache, ``window_threads`` threads copy rows straight in where the row groups' parts are alike.
    """
    past = _make_room(source)
    try:
        columns = _stacked_in_threads(source, positions) if past else None
        if columns is not None:
            return _StackedWindow(dict(columns)), np.arange(len(positions), dtype=np.int64)
        # Joined part by part, where the dtypes of the parts may differ.
        return _stacked_in_parts(source, positions, past=past)
    finally:
        if past:
            _return_freed_memory()


def _stacked_in_parts(
    source: Any, positions: np.ndarray[Any, Any], *, past: bool
) -> tuple[_StackedWindow, np.ndarray[Any, Any]]:
    """The stacked fields at ``positions``, each row group's part read in turn and the parts joined."""
    order, row_groups = _by_row_group(source, positions, past=past)
    parts: list[dict[str, np.ndarray[Any, Any] | list[Any]]] = []
    for group, chosen in row_groups:
        parts.append(group.window_fields(chosen))
        del group
    if not parts:
        raise ValueError("no rows to read")
    # From file order to the order of ``positions``: row i of the window is positions[i].
    columns: dict[str, np.ndarray[Any, Any] | list[Any]] = {}
    for name in list(parts[0]):
        # Each field's parts go as soon as they are joined, so that the window is never held twice.
        pieces = [part.pop(name) for part in parts]
        if all(isinstance(piece, np.ndarray) for piece in pieces):
            joined = np.concatenate(pieces)
            in_order = np.empty_like(joined)
            in_order[order] = joined
            columns[name] = in_order
        else:
            # A part that stacked gives its rows back as the values themselves: Python
            # scalars for numbers, the rows' arrays for arrays.
            values = [
                value
                for piece in pieces
                for value in (piece.tolist() if isinstance(piece, np.ndarray) and piece.ndim == 1 else piece)
            ]
            listed: list[Any] = [None] * len(values)
            for slot, value in zip(order.tolist(), values, strict=True):
                listed[slot] = value
            columns[name] = listed
        del pieces
    return _StackedWindow(columns), np.arange(len(positions), dtype=np.int64)


class ReadPlanner:
    """Plans the reads of a pipeline's batches ahead, in one process.

    ``positions`` is the rows' position twin; ``limit`` bounds row indices (``sys.maxsize`` when endless).
    ``scattered`` orders (a global shuffle) spread each window over the whole file; the window shuffle's do not.
    """

    def __init__(
        self, positions: Any, source: Any, *, limit: int, stacked: bool = False, scattered: bool = True
    ) -> None:
        self._positions = positions
        self._source = source
        self._limit = limit
        self._stacked = stacked
        self._scattered = scattered
        self._start_process()

    def _start_process(self) -> None:
        self._lock = threading.Lock()
        self._window: _Window | None = None
        self._last_start: int | None = None
        self._last_stride: int | None = None
        self._next_batches = _FIRST_WINDOW_BATCHES
        self._unplanned = 0
        self._told = False
        self._ahead: collections.deque[_WindowAhead] = collections.deque()
        self._ahead_batches = _FIRST_WINDOW_BATCHES

    def __getstate__(self) -> dict[str, Any]:
        return {
            "positions": self._positions,
            "source": self._source,
            "limit": self._limit,
            "stacked": self._stacked,
            "scattered": self._scattered,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._positions = state["positions"]
        self._source = state["source"]
        self._limit = state["limit"]
        self._stacked = state["stacked"]
        self._scattered = state["scattered"]
        self._start_process()

    def read(self, items: range, *, stacked: bool = False) -> Any:
        """One batch's records from a planned window (:class:`StackedColumns` with ``stacked``), or None."""
        start, length = items.start, len(items)
        if length == 0 or items.step != 1:
            return None
        if stacked and isinstance(self._positions, VectorPositions) and self._source.may_hold_columns():
            # The file's stacked fields held whole serve every batch with one gather per field: windows
            # would only add a copy (read directly, which falls back here should they not fit).
            return None
        with self._lock:
            window = self._window
            if window is None or not window.holds(start, length):
                window = None  # Not held here while the next window is read.
                window = self._plan(start, length)
            if window is not None and self._stacked:
                self._read_ahead(window)
        if window is None:
            return None
        try:
            return window.records(start, length, stacked=stacked)
        except Exception:  # Read again the usual way, which raises at this batch as it always did.
            return None

    def _plan(self, start: int, length: int) -> _Window | None:
        # Called with the lock held; returns the window holding this batch, if any.
        window = self._window
        if window is not None and start == window.last_start + window.stride:
            stride: int = window.stride
            continues = steady = True
        elif self._last_start is None:
            # The first read is planned alone (the next confirms ``stride``), so a pass past the cache never fills it.
            stride, continues, steady = length, False, True
        else:
            stride = start - self._last_start
            continues = False
            steady = stride >= length and stride == self._last_stride
        first_read = self._last_start is None
        window = None  # The window read is done: its memory goes before the next one's comes.
        self._last_start, self._last_stride = start, stride
        if not steady:
            self._note_unplanned()
            return None
        self._window = None
        ahead = self._ahead.popleft() if self._ahead else None
        most = max(1, window_rows(self._source) // length)
        if not continues:
            self._next_batches = 1 if first_read else (most if past_cache(self._source) else _FIRST_WINDOW_BATCHES)
        if ahead is not None and continues and ahead.holds(start, length, stride):
            # The window a thread read ahead: the one computed here, had it not.
            self._next_batches = self._growth(ahead.batches, most)
            self._window = ahead.result()
            if self._window is not None and ahead.batches == most:
                self._tell(len(self._window))
            return self._window
        # Reads no longer in order: the windows read ahead are not the next ones.
        self._ahead.clear()
        batches = min(self._next_batches, most)
        starts = self._window_starts(start, stride, length, batches)
        if not starts:
            return None
        self._next_batches = self._growth(batches, most)
        self._window = self._read_batches(starts, stride, length)
        if self._window is not None and batches == most:
            self._tell(len(self._window))
        return self._window

    def _growth(self, batches: int, most: int) -> int:
        """The batches of the window after one of ``batches``: fourfold in cache, the budget's most past it."""
        return most if past_cache(self._source) else batches * _GROWTH

    def _window_starts(self, start: int, stride: int, length: int, batches: int) -> list[int]:
        return [start + stride * step for step in range(batches) if start + stride * step + length <= self._limit]

    def _read_ahead(self, window: _Window) -> None:
        """Starts reading the window after ``window`` in its own thread (lock held)."""
        # Several windows ahead where the file fits the cache (each a few thousand rows, read on cores of
        # their own); past it, one, so that the two held at once stay within the budget.
        wanted = 1 if past_cache(self._source) else _WINDOWS_AHEAD
        if len(self._ahead) >= wanted:
            return
        most = max(1, window_rows(self._source) // window.length)
        if self._ahead:
            last = self._ahead[-1]
            start, batches = last.last_start + window.stride, min(self._ahead_batches, most)
        else:
            start, batches = window.last_start + window.stride, min(self._next_batches, most)
        while len(self._ahead) < wanted:
            starts = self._window_starts(start, window.stride, window.length, batches)
            if not starts:
                return
            self._ahead.append(_WindowAhead(self, starts, window.stride, window.length, batches))
            start = starts[-1] + window.stride
            batches = min(self._growth(batches, most), most)
            self._ahead_batches = batches

    def _read_batches(self, starts: list[int], stride: int, length: int) -> _Window | None:
        """Reads the window of the batches at ``starts``, or None where it cannot (they are read the usual way)."""
        try:
            positions = self._window_positions(starts, stride, length)
            table, rows = self._read_window(positions)
            del positions
        except Exception:  # Read the usual way, which raises at the batch it always raised at.
            return None
        return _Window(starts, stride, length, table, rows)

    def _window_positions(self, starts: list[int], stride: int, length: int) -> np.ndarray[Any, Any]:
        """The source positions of the batches at ``starts``, one after the other."""
        twin = self._positions
        if not self._scattered and stride == length and isinstance(twin, VectorPositions):
            # Batches that follow each other in a window shuffle: slices of its windows' rows.
            return np.asarray(twin.range_positions(starts[0], starts[-1] + length), dtype=np.int64)
        indices = np.concatenate([np.arange(first, first + length, dtype=np.int64) for first in starts])
        if not isinstance(twin, VectorPositions):
            return np.asarray(read_many(twin, indices.tolist()), dtype=np.int64)
        # Piece by piece: the shuffle's arrays take many times the positions' bytes.
        positions = np.empty(len(indices), dtype=np.int64)
        for begin in range(0, len(indices), _PIECE_ROWS):
            positions[begin : begin + _PIECE_ROWS] = twin.positions(indices[begin : begin + _PIECE_ROWS])
        return positions

    def _read_window(self, positions: np.ndarray[Any, Any]) -> tuple[Any, np.ndarray[Any, Any]]:
        """Reads a window: of stacked fields for ``stack_records``' batches, else of records."""
        if self._stacked:
            try:
                return read_stacked_window(self._source, positions)
            except ValueError:
                # Fields that stack in no window (arrays whose shape changes from row group to row
                # group): the windows hold records from now on, each batch stacked from them.
                self._stacked = False
        return read_window(self._source, positions)

    def _tell(self, rows: int) -> None:
        """Logs once what planned reads cost over a source larger than its cache (a scattered order's)."""
        if self._told or not self._scattered:
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
        # The reader's own warning about rows read out of order would say the same: one of the two is logged.
        window = ", or training_batches a shuffle_window," if self._scattered else ""
        source.warn_out_of_order_once(
            "batches of a pipeline over %s are read out of order (random access, or several threads), so they "
            "cannot be planned: its decoded rows (about %s) exceed its cache_bytes (%s), and every batch of a "
            "shuffled order decodes row groups again for a few rows each. Pass read_parquet_record a cache_bytes "
            f"above the decoded size{window} to read each row group once per epoch",
            getattr(source, "_path", "the reader"),
            format_bytes(int(decoded)),
            format_bytes(source.cache_bytes),
        )


class PlannedBatchMapDataset(DirectBatchMapDataset):
    """tinax's direct batch, reading batches from a :class:`ReadPlanner`'s windows where it holds them."""

    def __init__(
        self,
        parent: Any,
        batch_size: int,
        *,
        drop_remainder: bool,
        batch_fn: Any,
        planner: ReadPlanner,
        positions: VectorPositions | None,
        source: Any,
    ) -> None:
        super().__init__(
            parent, batch_size, drop_remainder=drop_remainder, batch_fn=batch_fn, positions=positions, source=source
        )
        self._planner = planner

    def _get_parent_items_fn(self, items: range) -> Any:
        check_reads_go_on("a batch")
        found = self._planner.read(items, stacked=self._stacked)
        if found is not None:
            return found
        return self.read_rows(items)


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

    Only where ``dataset`` is what ``read_parquet_record`` returned; ``row_slices`` cut ``ordered`` into ``rows``.
    """
    from tinax._data._records._parquet_source import ParquetRecordSource
    from tinax._data._records._reader_datasets import record_source_of

    source = record_source_of(dataset)
    if not isinstance(source, ParquetRecordSource):
        return None
    twin = position_dataset(len(source)).seed(seed).shuffle()
    # Same grain classes, depth and seed give the same shuffle; should grain's seeding differ, no plan.
    if getattr(twin, "_seed", None) != getattr(ordered, "_seed", None) or type(twin) is not type(ordered):
        return None
    shuffled = twin
    slices: list[Any] = []
    for cut in row_slices:
        twin = twin.slice(cut)
        slices.insert(0, twin)
    if len(twin) != len(rows):
        return None
    if all(type(node) is SLICE_MAP_DATASET for node in slices):
        twin = _vector_positions(twin, shuffled, slices)
    planner = ReadPlanner(twin, source, limit=planned_limit(len(rows), num_epochs), stacked=stacks_columns(batch_fn))
    vector = twin if isinstance(twin, VectorPositions) else None
    return PlannedBatchMapDataset(
        rows, batch_size, drop_remainder=True, batch_fn=batch_fn, planner=planner, positions=vector, source=source
    )


def planned_window_batches(
    dataset: Any,
    rows: Any,
    positions: VectorPositions,
    *,
    batch_size: int,
    batch_fn: Any,
    num_epochs: int | None,
) -> PlannedBatchMapDataset | None:
    """The planned batches of a window-shuffled pipeline over a Parquet reader past its cache, or None.

    The batches ahead read a few row groups' blocks, so each window decodes only those, once, in threads,
    while the batches before it are served; within the cache, the held columns or row groups serve them.
    """
    from tinax._data._records._parquet_source import ParquetRecordSource
    from tinax._data._records._reader_datasets import record_source_of

    source = record_source_of(dataset)
    if not isinstance(source, ParquetRecordSource) or not past_cache(source):
        return None
    limit = planned_limit(len(rows), num_epochs)
    planner = ReadPlanner(positions, source, limit=limit, stacked=stacks_columns(batch_fn), scattered=False)
    return PlannedBatchMapDataset(
        rows, batch_size, drop_remainder=True, batch_fn=batch_fn, planner=planner, positions=positions, source=source
    )


def batch_positions(
    dataset: Any,
    ordered: Any,
    rows: Any,
    *,
    seed: int | None,
    row_slices: Sequence[slice],
    order: str,
) -> VectorPositions | None:
    """A :class:`VectorPositions` mapping ``rows``' indices to source positions as grain does, or None.

    None where ``dataset`` is not a reader's own, or the map disagrees with grain's.
    """
    from tinax._data._records._reader_datasets import record_source_of

    source = record_source_of(dataset)
    if source is None:
        return None
    twin: Any = position_dataset(len(source))
    if seed is not None:
        twin = twin.seed(seed)
    if order == "shuffle":
        twin = twin.shuffle()
    elif order == "window":
        from tinax._data._pipelines._checked_datasets import WindowShuffleMapDataset

        twin = WindowShuffleMapDataset(twin, seed=ordered._seed, block_ends=ordered._block_ends, window=ordered._window)
    # Same grain classes, depth and seed give the same order; should grain's seeding differ, none.
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
