"""Reading a planned window: the rows of many batches, each row group decoded once, in file order.

Past the cache, a window takes the emptied cache's place, and stacked fields are
decoded by several threads that copy rows straight into the window's arrays.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from tinax._data._shutdown import WINDOW_THREAD_PREFIX, check_reads_go_on
from tinax._data._stacking import join_stacked, stack_values

#: The rows of a window's piece: joined piece by piece, so taken rows and their copy are never both whole.
_PIECE_ROWS = 1 << 15
#: What a planned row costs besides its decoded bytes while its window is
#: read and held: its position, its place in file order, its row in the window.
_INDEX_BYTES_PER_ROW = 32


def window_rows(source: Any) -> int:
    """The most rows a planned window over ``source`` takes.

    Small where the file fits the cache; past it, two windows share what the budget leaves beside decode threads.
    """
    if not past_cache(source):
        return _PIECE_ROWS
    row_bytes = max(source.decoded_row_bytes(), 1.0) + _INDEX_BYTES_PER_ROW
    held = source.window_threads() * source.groups_per_read(past_cache=True) - 1
    room = source.cache_bytes - held * source.largest_group_bytes()
    return max(1, int(max(room, 0) // 2 // row_bytes))


def past_cache(source: Any) -> bool:
    """Whether the decoded rows of ``source`` exceed its cache (with more than one row group)."""
    return len(source.row_group_ends) > 1 and source.decoded_file_bytes() > source.cache_bytes


class _Pieces:
    """A window's rows in file order, in pieces of about :data:`_PIECE_ROWS` rows (a decoded table's ``records``)."""

    def __init__(self, pieces: Sequence[Any], ends: Sequence[int]) -> None:
        self._pieces = list(pieces)
        self._ends = np.asarray(ends, dtype=np.int64)
        self.nbytes = sum(int(piece.nbytes) for piece in self._pieces)

    def records(self, rows: np.ndarray[Any, Any]) -> list[Any]:
        """The records of ``rows`` of the window, in their order."""
        which = np.searchsorted(self._ends, rows, side="right")
        order = np.argsort(which, kind="stable")
        cuts = np.flatnonzero(np.diff(which[order])) + 1
        records: list[Any] = [None] * len(rows)
        for chosen in np.split(order, cuts) if len(order) else []:
            piece = int(which[chosen[0]])
            first = int(self._ends[piece - 1]) if piece else 0
            for slot, record in zip(chosen.tolist(), self._pieces[piece].records(rows[chosen] - first), strict=True):
                records[slot] = record
        return records

    def stacked(self, rows: np.ndarray[Any, Any]) -> dict[str, Any]:
        """The fields of ``rows`` stacked as ``stack_records`` would; ValueError where one cannot stack by column."""
        which = np.searchsorted(self._ends, rows, side="right")
        order = np.argsort(which, kind="stable")
        cuts = np.flatnonzero(np.diff(which[order])) + 1
        parts = []
        for chosen in np.split(order, cuts) if len(order) else []:
            piece = int(which[chosen[0]])
            first = int(self._ends[piece - 1]) if piece else 0
            parts.append((chosen, self._pieces[piece].stacked(rows[chosen] - first)))
        return join_stacked(parts)


def _make_room(source: Any) -> bool:
    """Empties the cache for a window that takes its place, and says whether it did (the file is past it)."""
    past = past_cache(source)
    if past:
        source.empty_cache()
        _return_freed_memory()
    return past


def _row_group_runs(
    ends: np.ndarray[Any, Any], positions: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], list[tuple[int, int, int]]]:
    """A stable order sorting ``positions`` by row group, and ``(group, first, last)`` runs of it in file order."""
    groups = np.searchsorted(ends, positions, side="right")
    if len(ends) <= np.iinfo(np.uint16).max:
        # NumPy sorts 16-bit keys stably by radix, several times faster than 64-bit ones: the same order.
        groups = groups.astype(np.uint16)
    order = np.argsort(groups, kind="stable")
    if not len(order):
        return order, []
    sorted_groups = groups[order]
    cuts = np.flatnonzero(np.diff(sorted_groups)) + 1
    firsts = np.concatenate([[0], cuts])
    lasts = np.concatenate([cuts, [len(order)]])
    return order, list(zip(sorted_groups[firsts].tolist(), firsts.tolist(), lasts.tolist(), strict=True))


def _by_row_group(
    source: Any, positions: np.ndarray[Any, Any], *, past: bool
) -> tuple[np.ndarray[Any, Any], Iterator[tuple[Any, np.ndarray[Any, Any]]]]:
    """The sorting order of ``positions``, and an iterator of (row group, its rows) in file order.

    Each is read under the reader's lock when its turn comes (afresh if ``past``); shutdown stops it.
    """
    ends = np.asarray(source.row_group_ends, dtype=np.int64)
    order, runs = _row_group_runs(ends, positions)

    def read() -> Iterator[tuple[Any, np.ndarray[Any, Any]]]:
        for group_index, first, last in runs:
            chosen = positions[order[first:last]]
            check_reads_go_on("a window of planned batches")
            with source._lock:
                if past:
                    group = source._decode(group_index, int(chosen[0]), own_memory=False)
                else:
                    group = source._group(group_index, int(chosen[0]))
            yield group, chosen - (int(ends[group_index - 1]) if group_index else 0)
            # Let go before the next one is decoded: past the cache, one decoded row group at a time.
            del group

    return order, read()


def read_window(source: Any, positions: np.ndarray[Any, Any]) -> tuple[Any, np.ndarray[Any, Any]]:
    """Reads the records at many positions, each row group once, in file order; returns a table and its rows.

    Past the cache, the window replaces the emptied cache; an error makes the caller read the usual way.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from tinax._data._records._row_groups import _in_system_memory, _RowGroup

    past = _make_room(source)
    order, row_groups = _by_row_group(source, positions, past=past)
    pool = pa.system_memory_pool()
    pieces: list[Any] = []
    piece_ends: list[int] = []
    taken: list[Any] = []
    taken_rows = 0

    def join() -> None:
        nonlocal taken_rows
        # The rows taken from each row group, joined into one table in the system allocator.
        table = _in_system_memory(pa.concat_tables(taken))
        taken.clear()
        pieces.append(_RowGroup(source._getters(table), int(table.nbytes), table))
        piece_ends.append((piece_ends[-1] if piece_ends else 0) + table.num_rows)
        taken_rows = 0

    try:
        for group, chosen in row_groups:
            taken.append(pc.take(group.table, pa.array(chosen, type=pa.int64()), memory_pool=pool))
            taken_rows += len(chosen)
            del group
            if taken_rows >= _PIECE_ROWS:
                join()
        if taken:
            join()
        if not pieces:
            raise ValueError("no rows to read")
        rows = np.empty(len(positions), dtype=np.int64)
        rows[order] = np.arange(len(positions), dtype=np.int64)
        return _Pieces(pieces, piece_ends), rows
    finally:
        if past:
            _return_freed_memory()


class _StackedWindow:
    """A window's rows as stacked fields (or value lists where batch dtypes depend on rows), in batch order."""

    def __init__(self, columns: dict[str, np.ndarray[Any, Any] | list[Any]]) -> None:
        self._columns = columns

    def stacked(self, rows: np.ndarray[Any, Any]) -> dict[str, np.ndarray[Any, Any]]:
        """The fields of ``rows`` of the window, each a new array."""
        stacked = {}
        for name, column in self._columns.items():
            if isinstance(column, np.ndarray):
                stacked[name] = column[rows]
            else:
                stacked[name] = stack_values(name, [column[row] for row in rows.tolist()])
        return stacked

    def records(self, rows: np.ndarray[Any, Any]) -> list[Any]:
        raise ValueError("a window of stacked fields holds no records")


def _stacked_in_threads(source: Any, positions: np.ndarray[Any, Any]) -> dict[str, np.ndarray[Any, Any]] | None:
    """The stacked fields at ``positions``, past the cache, decoded by ``window_threads`` threads.

    Rows are copied into arrays sized by the first row group; None sends the caller to join parts whose
    dtypes or shapes differ, or whose values do not stack.
    """
    ends = np.asarray(source.row_group_ends, dtype=np.int64)
    order, runs = _row_group_runs(ends, positions)
    most = source.groups_per_read(past_cache=True)
    taken = [0]
    lock = threading.Lock()
    columns: dict[str, np.ndarray[Any, Any]] = {}
    failures: list[BaseException] = []
    unlike: list[bool] = []

    def next_task() -> tuple[int, int, int, int] | None:
        # The next row groups in file order: up to ``most`` that follow each other, with their slots in ``order``.
        with lock:
            start = taken[0]
            if start >= len(runs):
                return None
            stop = start + 1
            while stop < len(runs) and stop - start < most and runs[stop][0] == runs[stop - 1][0] + 1:
                stop += 1
            taken[0] = stop
        return runs[start][0], runs[stop - 1][0], runs[start][1], runs[stop - 1][2]

    def decode() -> None:
        ahead = None
        try:
            ahead, header = source._open_ahead()
            if header != source._header:
                raise ValueError("the file changed since the reader opened it")
            while not failures and not unlike:
                task = next_task()
                if task is None:
                    return
                group_index, last_group, first, last = task
                check_reads_go_on("a window of planned batches")
                slots = order[first:last]
                chosen = positions[slots]
                run = range(group_index, last_group + 1)
                group = source._decode(group_index, int(chosen[0]), own_memory=False, ahead=ahead, run=run)
                fields = group.window_fields(chosen - (int(ends[group_index - 1]) if group_index else 0))
                # Let go before the next ones are decoded: one read's row groups per thread.
                del group
                if not _place_fields(columns, lock, fields, slots, len(positions)):
                    unlike.append(True)
                del fields
        except BaseException as error:  # Raised again by the window's thread, which the pipeline's catches.
            failures.append(error)
        finally:
            if ahead is not None:
                ahead.close()

    _run_in_threads(decode, source.window_threads())
    if unlike:
        return None
    if failures:
        raise failures[0]
    if not columns:
        raise ValueError("no rows to read")
    return columns


def _place_fields(
    columns: dict[str, np.ndarray[Any, Any]],
    lock: threading.Lock,
    fields: dict[str, Any],
    slots: np.ndarray[Any, Any],
    rows: int,
) -> bool:
    """Copies a row group's fields into the window's ``rows``-long columns, which the first call makes.

    False when a field is not an array, or not of the dtype and shape of the columns made.
    """
    with lock:
        if not columns:
            if not all(isinstance(values, np.ndarray) for values in fields.values()):
                return False
            for name, values in fields.items():
                columns[name] = np.empty((rows, *values.shape[1:]), dtype=values.dtype)
    if list(fields) != list(columns):
        return False
    for name, values in fields.items():
        column = columns[name]
        if not isinstance(values, np.ndarray) or values.dtype != column.dtype or values.shape[1:] != column.shape[1:]:
            return False
    for name, values in fields.items():
        columns[name][slots] = values
    return True


def _run_in_threads(work: Callable[[], None], count: int) -> None:
    """Runs ``work`` in ``count - 1`` decode threads and in this one, and waits for them all."""
    threads = [
        threading.Thread(target=work, name=f"{WINDOW_THREAD_PREFIX}-decode-{index}") for index in range(count - 1)
    ]
    for thread in threads:
        thread.start()
    work()
    for thread in threads:
        thread.join()


def _return_freed_memory() -> None:
    """Hands memory freed by the reads back to the system (pyarrow's pool, and glibc via ``malloc_trim``)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    trim = getattr(_C_LIBRARY, "malloc_trim", None)
    if trim is not None:
        trim(0)


_C_LIBRARY = ctypes.CDLL(None) if sys.platform.startswith("linux") else None
