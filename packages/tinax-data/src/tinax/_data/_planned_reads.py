"""Planned reads: the rows of the batches ahead, read row group by row group in file order.

A global shuffle's order is known in advance (seed and epoch), so
:class:`ReadPlanner` computes a window of batches' source positions through a
position twin of the pipeline (same grain classes and seeds) and decodes each
row group once per window. Batches, states and errors are unchanged: reads the
window does not hold go the usual way. Windows grow fourfold up to the cache budget.
"""

from __future__ import annotations

import collections
import ctypes
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from tinax._core.logs import format_bytes, get_logger
from tinax._data._direct_reads import DirectBatchMapDataset
from tinax._data._grain_compat import SLICE_MAP_DATASET, read_many
from tinax._data._reader_datasets import RecordSourceMapDataset
from tinax._data._shutdown import WINDOW_THREAD_PREFIX, check_reads_go_on
from tinax._data._stacking import StackedColumns, join_stacked, stack_values, stacks_columns

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


_MASK32 = 0xFFFFFFFF


# Domains of at most this many bits are permuted whole (see shuffled_indices): 2**16 int64 values take 512 KiB.
_TABLE_BITS = 16


def _seed_sequence_words(seed: int, count: int) -> list[int]:
    """The ``count`` 32-bit words C++'s ``std::seed_seq{seed}.generate`` gives (the standard's algorithm)."""
    words = [0x8B8B8B8B] * count
    tangle = 11 if count >= 623 else 7 if count >= 68 else 5 if count >= 39 else 3 if count >= 7 else (count - 1) // 2
    half = (count - tangle) // 2
    far = half + tangle
    steps = max(2, count)  # one seed word, so max(s + 1, n)

    def mix(value: int) -> int:
        return value ^ (value >> 27)

    for k in range(steps):
        first = 1664525 * mix(words[k % count] ^ words[(k + half) % count] ^ words[(k - 1) % count]) & _MASK32
        second = (first + (1 if k == 0 else k % count + seed if k == 1 else k % count)) & _MASK32
        words[(k + half) % count] = (words[(k + half) % count] + first) & _MASK32
        words[(k + far) % count] = (words[(k + far) % count] + second) & _MASK32
        words[k % count] = second
    for k in range(steps, steps + count):
        third = 1566083941 * mix((words[k % count] + words[(k + half) % count] + words[(k - 1) % count]) & _MASK32)
        third &= _MASK32
        fourth = (third - k % count) & _MASK32
        words[(k + half) % count] ^= third
        words[(k + far) % count] ^= fourth
        words[k % count] = fourth
    return words


def shuffled_indices(
    indices: np.ndarray[Any, Any], *, max_index: int, seed: int, rounds: int = 4
) -> np.ndarray[Any, Any]:
    """Computes grain's ``index_shuffle`` of many indices at once with NumPy, bit for bit (as int64).

    Feistel cipher over at least 16 even bits, cycle-walked into range; samples are checked against grain's.
    """
    if max_index == 0:
        return np.zeros(len(indices), dtype=np.int64)
    bits = int(np.ceil(np.log2(max_index)))
    bits = max(bits + bits % 2, 16)
    width = bits // 2
    # A domain of up to 2**32 values fits 32-bit words (a half shifted left stays below 2**32): half the
    # memory traffic of 64-bit ones, for the same bits.
    word: type[np.unsignedinteger[Any]] = np.uint32 if max_index < 2**32 else np.uint64
    mask = word((1 << width) - 1)
    shift = word(width)
    keys = [word(value & ((1 << width) - 1)) for value in _seed_sequence_words(seed, rounds)]
    shifts = {by: (word(by), word(width - by)) for by in (1, 2, 8)}

    def rotate(value: np.ndarray[Any, Any], by: int) -> np.ndarray[Any, Any]:
        left_by, right_by = shifts[by]
        rotated: np.ndarray[Any, Any] = ((value << left_by) | (value >> right_by)) & mask
        return rotated

    def feistel(value: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        mixed: np.ndarray[Any, Any] = (rotate(value, 1) & rotate(value, 8)) ^ rotate(value, 2)
        return mixed

    def encrypt(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        left = (values >> shift) & mask
        right = values & mask
        for step in range(0, rounds, 2):
            left = left ^ feistel(right) ^ keys[step]
            right = right ^ feistel(left) ^ keys[step + 1]
        encrypted: np.ndarray[Any, Any] = (left << shift) | right
        return encrypted

    values = np.asarray(indices).astype(word)
    limit = word(max_index)
    if bits <= _TABLE_BITS:
        # A small range in a 2**16 domain would walk long: pointer doubling finds the next in-range value instead.
        cipher = encrypt(np.arange(1 << bits, dtype=word)).astype(np.int64)
        reach = np.where(np.arange(1 << bits) <= max_index, np.arange(1 << bits), cipher)
        for _ in range(bits + 1):
            reach = reach[reach]
        # The cipher reads only the domain's bits of an index (2**bits itself, where max_index is that, as 0).
        domain = np.bitwise_and(values, word((1 << bits) - 1))
        return reach[cipher[domain.astype(np.int64)]].astype(np.int64)
    result = np.empty(len(values), dtype=word)
    pending = np.arange(len(values))
    while len(pending):
        values = encrypt(values)
        done = values <= limit
        result[pending[done]] = values[done]
        pending, values = pending[~done], values[~done]
    return result.astype(np.int64)


class VectorPositions:
    """The source positions a position twin (slices over an order over a source) gives, on arrays.

    grain maps one Python int at a time, which would cost more than reading the rows.
    """

    def __init__(self, slices: Sequence[Any], ordered: Any, order: str = "shuffle") -> None:
        # Outermost first: (start, step, length, parent_length) of each slice.
        self._slices = [(node._start, node._step, len(node), node._parent_length) for node in slices]
        if any(step < 1 for _, step, _, _ in self._slices):
            raise ValueError("only slices that step forward map with NumPy here")
        self._length = len(slices[0]) if slices else len(ordered)
        self._ordered_length = len(ordered)
        self._order = order
        self._seed = int(ordered._seed) if order == "shuffle" else 0
        self._window = ordered if order == "window" else None
        self._count = len(ordered.parents[0]) if order == "shuffle" else len(ordered)

    def __len__(self) -> int:
        return self._length

    @property
    def shuffled(self) -> bool:
        """Whether the order is a shuffle (grain's or the window shuffle), not dataset order."""
        return self._order != "none"

    def _sliced(self, values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The indices of the ordered dataset that indices of the outermost slice read."""
        for start, step, length, parent_length in self._slices:
            epochs, offsets = np.divmod(values, length)
            values = start + offsets * step + epochs * parent_length
        return values

    def range_positions(self, start: int, stop: int) -> np.ndarray[Any, Any] | range:
        """Source positions of outer indices ``range(start, stop)``: a ``range`` where consecutive, else an array."""
        if self._order == "none" and stop - start > 0:
            # Consecutive indices map to consecutive positions unless they cross an epoch of a
            # slice (the ends are then further apart than the rows) or of the source.
            first, last = self._sliced_index(start), self._sliced_index(stop - 1)
            if last - first == stop - start - 1 and first // self._count == last // self._count:
                offset = first // self._count * self._count
                return range(first - offset, last + 1 - offset)
        return self.positions(np.arange(start, stop, dtype=np.int64))

    def _sliced_index(self, value: int) -> int:
        """:meth:`_sliced` of one index, in Python ints."""
        for start, step, length, parent_length in self._slices:
            epoch, offset = divmod(value, length)
            value = start + offset * step + epoch * parent_length
        return value

    def positions(self, indices: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The source positions of ``indices`` of the outermost dataset."""
        values = self._sliced(np.asarray(indices, dtype=np.int64))
        if self._window is not None:
            return self._window.positions(values) % self._count  # type: ignore[no-any-return]
        if self._order != "shuffle":
            return values % self._count
        epochs, within = np.divmod(values, self._ordered_length)
        shuffled = np.empty(len(within), dtype=np.int64)
        order = np.argsort(epochs, kind="stable")
        for chosen in np.split(order, np.flatnonzero(np.diff(epochs[order])) + 1) if len(order) else []:
            epoch = int(epochs[chosen[0]])
            seed = (self._seed + epoch) % 2**32
            permuted = shuffled_indices(within[chosen], max_index=self._ordered_length - 1, seed=seed)
            shuffled[chosen] = permuted + epoch * self._ordered_length
        return shuffled % self._count


def _vector_positions(twin: Any, ordered: Any, slices: Sequence[Any], order: str = "shuffle") -> Any:
    """:class:`VectorPositions` of ``twin`` where it matches grain's own map on a two-epoch sample, else ``twin``."""
    try:
        vector = VectorPositions(slices, ordered, order)
    except ValueError:
        return twin
    length = len(twin)
    sample = sorted({int(index) for index in np.linspace(0, 2 * length - 1, num=min(2 * length, 257))})
    if vector.positions(np.asarray(sample, dtype=np.int64)).tolist() != list(read_many(twin, sample)):
        return twin
    return vector


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
    room = source.cache_bytes - (source.decode_threads() - 1) * source.largest_group_bytes()
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

    from tinax._data._parquet_source import _in_system_memory, _RowGroup

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


def read_stacked_window(source: Any, positions: np.ndarray[Any, Any]) -> tuple[Any, np.ndarray[Any, Any]]:
    """:func:`read_window` for batches of ``stack_records``: one array per field, in the order of ``positions``.

    Past the cache, ``decode_threads`` threads copy rows straight in; a ValueError means read the usual way.
    """
    past = _make_room(source)
    try:
        if past:
            try:
                columns: dict[str, np.ndarray[Any, Any] | list[Any]] = dict(_stacked_in_threads(source, positions))
                return _StackedWindow(columns), np.arange(len(positions), dtype=np.int64)
            except _UnlikePartsError:
                pass  # Joined part by part below, where the dtypes of the parts may differ.
        return _stacked_in_parts(source, positions, past=past)
    finally:
        if past:
            _return_freed_memory()


class _UnlikePartsError(ValueError):
    """A field whose row groups give parts of different dtypes or shapes, or values that do not stack."""


def _stacked_in_threads(source: Any, positions: np.ndarray[Any, Any]) -> dict[str, np.ndarray[Any, Any]]:
    """The stacked fields at ``positions``, past the cache, decoded by ``decode_threads`` threads.

    Rows are copied into arrays sized by the first row group; ``_UnlikePartsError`` sends the caller to join parts.
    """
    ends = np.asarray(source.row_group_ends, dtype=np.int64)
    order, runs = _row_group_runs(ends, positions)
    tasks = iter(runs)
    lock = threading.Lock()
    columns: dict[str, np.ndarray[Any, Any]] = {}
    failures: list[BaseException] = []

    def decode() -> None:
        parquet_file = None
        try:
            parquet_file, header = source._open()
            if header != source._header:
                raise ValueError("the file changed since the reader opened it")
            while not failures:
                with lock:
                    task = next(tasks, None)
                if task is None:
                    return
                group_index, first, last = task
                check_reads_go_on("a window of planned batches")
                slots = order[first:last]
                chosen = positions[slots]
                group = source._decode(group_index, int(chosen[0]), own_memory=False, parquet_file=parquet_file)
                fields = group.window_fields(chosen - (int(ends[group_index - 1]) if group_index else 0))
                # Let go before the next one is decoded: one decoded row group per thread.
                del group
                _place_fields(columns, lock, fields, slots, len(positions))
                del fields
        except BaseException as error:  # Raised again by the window's thread, which the pipeline's catches.
            failures.append(error)
        finally:
            if parquet_file is not None:
                parquet_file.close()

    _run_in_threads(decode, source.decode_threads())
    if failures:
        unlike = [failure for failure in failures if isinstance(failure, _UnlikePartsError)]
        raise unlike[0] if unlike else failures[0]
    if not columns:
        raise ValueError("no rows to read")
    return columns


def _place_fields(
    columns: dict[str, np.ndarray[Any, Any]],
    lock: threading.Lock,
    fields: dict[str, Any],
    slots: np.ndarray[Any, Any],
    rows: int,
) -> None:
    """Copies a row group's fields into the window's ``rows``-long columns, which the first call makes."""
    with lock:
        if not columns:
            for name, values in fields.items():
                if not isinstance(values, np.ndarray):
                    raise _UnlikePartsError(name)
                columns[name] = np.empty((rows, *values.shape[1:]), dtype=values.dtype)
    if list(fields) != list(columns):
        raise _UnlikePartsError("fields")
    for name, values in fields.items():
        column = columns[name]
        if not isinstance(values, np.ndarray) or values.dtype != column.dtype or values.shape[1:] != column.shape[1:]:
            raise _UnlikePartsError(name)
        column[slots] = values


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


def _return_freed_memory() -> None:
    """Hands memory freed by the reads back to the system (pyarrow's pool, and glibc via ``malloc_trim``)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    trim = getattr(_C_LIBRARY, "malloc_trim", None)
    if trim is not None:
        trim(0)


_C_LIBRARY = ctypes.CDLL(None) if sys.platform.startswith("linux") else None


class ReadPlanner:
    """Plans the reads of a pipeline's batches ahead, in one process.

    ``positions`` is the rows' position twin; ``limit`` bounds row indices (``sys.maxsize`` when endless).
    """

    def __init__(self, positions: Any, source: Any, *, limit: int, stacked: bool = False) -> None:
        self._positions = positions
        self._source = source
        self._limit = limit
        self._stacked = stacked
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
        return {"positions": self._positions, "source": self._source, "limit": self._limit, "stacked": self._stacked}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._positions = state["positions"]
        self._source = state["source"]
        self._limit = state["limit"]
        self._stacked = state["stacked"]
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
        indices = np.concatenate([np.arange(first, first + length, dtype=np.int64) for first in starts])
        try:
            if isinstance(self._positions, VectorPositions):
                # Piece by piece: the shuffle's arrays take many times the positions' bytes.
                positions = np.empty(len(indices), dtype=np.int64)
                for begin in range(0, len(indices), _PIECE_ROWS):
                    positions[begin : begin + _PIECE_ROWS] = self._positions.positions(
                        indices[begin : begin + _PIECE_ROWS]
                    )
            else:
                positions = np.asarray(read_many(self._positions, indices.tolist()), dtype=np.int64)
            del indices
            table, rows = self._read_window(positions)
            del positions
        except Exception:  # Read the usual way, which raises at the batch it always raised at.
            return None
        return _Window(starts, stride, length, table, rows)

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
        # The reader's own warning about rows read out of order would say the same: one of the two is logged.
        source.warn_out_of_order_once(
            "batches of a pipeline over %s are read out of order (random access, or several threads), so they "
            "cannot be planned: its decoded rows (about %s) exceed its cache_bytes (%s), and every batch of a "
            "shuffled order decodes row groups again for a few rows each. Pass read_parquet_record a cache_bytes "
            "above the decoded size, or training_batches a shuffle_window, to read each row group once per epoch",
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
    from tinax._data._parquet_source import ParquetRecordSource
    from tinax._data._reader_datasets import record_source_of

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
    from tinax._data._reader_datasets import record_source_of

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
