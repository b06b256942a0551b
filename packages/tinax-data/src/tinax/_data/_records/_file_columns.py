"""A file's stacked fields held whole: one NumPy array per field, for batches of ``stack_records``.

One gather per field beats a take per row group plus a join for a shuffled
batch. The arrays fill row group by row group as batches reach them, only
when the stacked rows fit the cache budget and every field has one numeric
dtype and shape whatever the rows; otherwise row groups are read as before.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import threading
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from tinax._data._shutdown import WINDOW_THREAD_PREFIX

__all__ = [
    "FileColumns",
    "WholeColumns",
    "fill_threads",
    "gather_rows",
    "kept_whole",
    "slice_rows",
    "stacked_alike",
    "start_filling",
    "stretches",
    "usable_cores",
]

#: The dtype kinds kept whole: bool, signed and unsigned ints, floats, complex numbers.
_KEPT_KINDS = frozenset("biufc")
#: The most threads that fill one source's whole columns at once: past a few, their work under the
#: interpreter lock only slows down the pipeline's thread.
_MOST_FILL_THREADS = 3


def kept_whole(dtype: np.dtype[Any]) -> bool:
    """Whether a stacked field of ``dtype`` is kept whole: a number's, built in or registered (ml_dtypes)."""
    # A registered scalar type (bfloat16, the float8s, int4) says kind "V", as raw bytes do; unlike them,
    # its width never depends on the values.
    return dtype.kind in _KEPT_KINDS or (dtype.isbuiltin == 2 and dtype.names is None)


class FileColumns:
    """The stacked fields of every row of a file, filled row group by row group.

    Filled under the reader's lock; filled rows never change, so gathers need no lock.
    """

    def __init__(self, group_ends: Sequence[int], budget: int) -> None:
        self._ends = np.asarray(group_ends, dtype=np.int64)
        self._count = int(self._ends[-1]) if len(self._ends) else 0
        self._budget = budget
        self._filled = np.zeros(len(self._ends), dtype=bool)
        self.arrays: dict[str, np.ndarray[Any, Any]] | None = None
        #: Whether every row group is in the arrays.
        self.complete = len(self._ends) == 0
        #: False once a row group's fields did not fit the arrays (then they are dropped).
        self.usable = True

    @property
    def nbytes(self) -> int:
        """The bytes the arrays take (reserved at the first fill, whatever is filled yet)."""
        return 0 if self.arrays is None else sum(int(array.nbytes) for array in self.arrays.values())

    def missing_groups(self, positions: np.ndarray[Any, Any] | range) -> list[int]:
        """The row groups, in file order, holding some of ``positions`` that are not filled yet."""
        if self.complete:
            return []
        if isinstance(positions, range):
            first = int(np.searchsorted(self._ends, positions.start, side="right"))
            last = int(np.searchsorted(self._ends, positions.stop - 1, side="right"))
            needed = np.arange(first, last + 1)
        else:
            needed = np.unique(np.searchsorted(self._ends, positions, side="right"))
        return [int(group) for group in needed[~self._filled[needed]]]

    def filled(self, group_index: int) -> bool:
        """Whether the arrays hold the row group."""
        return bool(self._filled[group_index])

    def next_missing(self, start: int, *, skip: Collection[int] = ()) -> int | None:
        """The first unfilled row group not in ``skip`` at or after ``start``, else before it, else None."""
        missing = ~self._filled
        for group_index in skip:
            missing[group_index] = False
        after = np.flatnonzero(missing[start:])
        if len(after):
            return start + int(after[0])
        before = np.flatnonzero(missing)
        return int(before[0]) if len(before) else None

    def fill(self, run: Sequence[int], fields: Mapping[str, np.ndarray[Any, Any]] | None) -> bool:
        """Copies in the stacked fields of the row groups of ``run``, whose rows they hold one group after another.

        Row groups filled already are left as they are. Where the fields do not fit, drops the arrays for good (False).
        """
        if not self.usable:
            return False
        starts = [int(self._ends[group - 1]) if group else 0 for group in run]
        stops = [int(self._ends[group]) for group in run]
        rows = sum(stops) - sum(starts)
        if fields is None or any(not kept_whole(array.dtype) or len(array) != rows for array in fields.values()):
            return self._give_up()
        if self.arrays is None:
            row_bytes = sum(array.dtype.itemsize * math.prod(array.shape[1:]) for array in fields.values())
            if row_bytes * self._count > self._budget:
                return self._give_up()
            self.arrays = {
                name: np.empty((self._count, *array.shape[1:]), dtype=array.dtype) for name, array in fields.items()
            }
        arrays = self.arrays
        if list(fields) != list(arrays) or any(
            fields[name].dtype != array.dtype or fields[name].shape[1:] != array.shape[1:]
            for name, array in arrays.items()
        ):
            return self._give_up()
        if len(stretches(run)) == 1 and not self._filled[run].any():
            # Row groups that follow each other in the file, none filled: one copy per field.
            for name, array in arrays.items():
                array[starts[0] : stops[-1]] = fields[name]
        else:
            offset = 0
            for group, start, stop in zip(run, starts, stops, strict=True):
                if not self._filled[group]:
                    for name, array in arrays.items():
                        array[start:stop] = fields[name][offset : offset + stop - start]
                offset += stop - start
        self._filled[run] = True
        self.complete = bool(self._filled.all())
        return True

    def _give_up(self) -> bool:
        self.arrays = None
        self.usable = False
        self.complete = False
        return False


def stretches(run: Sequence[int]) -> list[tuple[int, int]]:
    """The first and last block of each stretch of ``run`` whose blocks follow each other in the file, in order."""
    found: list[tuple[int, int]] = []
    for block in run:
        if found and block == found[-1][1] + 1:
            found[-1] = (found[-1][0], block)
        else:
            found.append((block, block))
    return found


def gather_rows(arrays: Mapping[str, np.ndarray[Any, Any]], positions: np.ndarray[Any, Any]) -> dict[str, Any]:
    """The rows at ``positions`` of each array, as new arrays in that order."""
    # np.take copies whole rows of a many-dimensional array; for one dimension, indexing is quicker.
    return {
        name: np.take(array, positions, axis=0) if array.ndim > 1 else array[positions]
        for name, array in arrays.items()
    }


def slice_rows(arrays: Mapping[str, np.ndarray[Any, Any]], first: int, stop: int) -> dict[str, Any]:
    """Consecutive rows of each array, as new arrays (a copy each, never a view of the arrays)."""
    return {name: array[first:stop].copy() for name, array in arrays.items()}


def stacked_alike(records: Sequence[Any]) -> dict[str, np.ndarray[Any, Any]] | None:
    """``stack_records`` of some records where any subset stacks each field alike, else None.

    Needs dicts with the first record's fields in order, each field of one dtype and shape under ``np.asarray``.
    """
    if not records or type(records[0]) is not dict:
        return None
    names = list(records[0])
    if any(type(record) is not dict or list(record) != names for record in records):
        return None
    fields = {}
    for name in names:
        arrays = [np.asarray(record[name]) for record in records]
        dtype, shape = arrays[0].dtype, arrays[0].shape
        if not kept_whole(dtype) or any(array.dtype != dtype or array.shape != shape for array in arrays):
            return None
        # What stack_records gives: np.stack of each value's np.asarray.
        fields[name] = np.stack(arrays)
    return fields


class WholeColumns:
    """A record source's :class:`FileColumns` in one process: filled as batches need them, or refused for good."""

    def __init__(self, group_ends: Sequence[int], budget: int, lock: threading.Lock) -> None:
        self._group_ends = tuple(group_ends)
        self._budget = budget
        self._lock = lock
        self.columns: FileColumns | None = None
        #: True once the fields showed they cannot be held whole.
        self.refused = False
        #: The block after the last one a batch filled: where filling ahead goes on from.
        self.cursor = 0
        #: The blocks threads ahead are decoding now, each with the event set once it is filled (or failed).
        self.in_flight: dict[int, threading.Event] = {}
        #: The blocks the next batches read, in the order they first read them (see :meth:`expect`).
        self._wanted: collections.deque[int] = collections.deque()
        #: True once a shuffled pipeline said which blocks its next batches read.
        self._told = False

    @property
    def told(self) -> bool:
        """Whether a shuffled pipeline said which blocks its next batches read (see :meth:`expect`)."""
        return self._told

    def expect(self, blocks: Sequence[int]) -> None:
        """Says which blocks the next batches read, for threads filling ahead to take first (lock held)."""
        self._wanted = collections.deque(blocks)
        self._told = True

    def next_to_fill(self) -> int | None:
        """The block a thread filling ahead takes next (expected ones first), or None (lock held)."""
        columns = self.columns
        if columns is None:
            return None
        while self._wanted:
            block = self._wanted.popleft()
            if not columns.filled(block) and block not in self.in_flight:
                return block
        return columns.next_missing(self.cursor, skip=self.in_flight)

    def next_run(self, most: int, *, alone: bool) -> list[int]:
        """The blocks a thread filling ahead takes next, up to ``most`` (lock held).

        After :meth:`next_to_fill`'s block, the blocks the batches said they read next, in their order; once none
        is left, those that follow in the file. A thread ``alone`` takes only blocks that follow each other, and
        none of the latter once the batches say what they read, to be free for what they say next.
        """
        first = self.next_to_fill()
        if first is None:
            return []
        run = [first]
        columns = self.columns
        assert columns is not None
        wanted = self._wanted
        while len(run) < most:
            while wanted and (columns.filled(wanted[0]) or wanted[0] in self.in_flight or wanted[0] in run):
                wanted.popleft()
            following = run[-1] + 1
            if wanted:
                # Measured on 2 cores: a lone thread's scattered reads kept the batches waiting for whole runs.
                if alone and wanted[0] != following:
                    break
                run.append(wanted.popleft())
                continue
            taken = following >= len(self._group_ends) or columns.filled(following) or following in self.in_flight
            if taken or following in run or (self._told and alone):
                break
            run.append(following)
        return run

    @contextlib.contextmanager
    def reserving(self, most: int = 1, *, alone: bool = False) -> Iterator[tuple[FileColumns, list[int]] | None]:
        """The columns and the blocks a thread filling ahead decodes next (see :meth:`next_run`), or None.

        Takes the lock only to reserve them and, at the end, to free them: batches go on while the thread decodes.
        """
        with self._lock:
            columns = self.columns
            run = [] if columns is None or columns.complete or self.refused else self.next_run(most, alone=alone)
            done = threading.Event()
            for block in run:
                self.in_flight[block] = done
        if columns is None or not run:
            yield None
            return
        try:
            yield columns, run
        finally:
            with self._lock:
                for block in run:
                    self.in_flight.pop(block, None)
            done.set()

    @property
    def nbytes(self) -> int:
        """The bytes the arrays take."""
        columns = self.columns
        return 0 if columns is None else columns.nbytes

    def arrays(
        self,
        positions: np.ndarray[Any, Any] | range,
        fields_of: Callable[[int], Mapping[str, np.ndarray[Any, Any]] | None],
    ) -> dict[str, np.ndarray[Any, Any]] | None:
        """The arrays holding at least the rows at ``positions``, or None where they cannot.

        A ValueError from ``fields_of`` refuses the columns, so the caller's usual read raises it instead.
        """
        columns = self.columns
        if columns is not None:
            # Filled blocks never change: they are read without the lock.
            arrays = columns.arrays
            if arrays is not None and not columns.missing_groups(positions):
                return arrays
        with self._lock:
            if self.refused:
                return None
            if self.columns is None:
                self.columns = FileColumns(self._group_ends, self._budget)
            columns = self.columns
            for group_index in columns.missing_groups(positions):
                if self._awaited(group_index):
                    if columns is not self.columns:
                        return None
                    if columns.filled(group_index):
                        continue
                try:
                    fields = fields_of(group_index)
                except ValueError:
                    fields = None
                if not self.fill(columns, [group_index], fields):
                    return None
                self.cursor = group_index + 1
            return columns.arrays

    def _awaited(self, group_index: int) -> bool:
        """Waits, without the lock, for a block a thread ahead is decoding; False where none is.

        Decoding it again under the lock would hold back every thread's next fill.
        """
        pending = self.in_flight.get(group_index)
        if pending is None:
            return False
        self._lock.release()
        try:
            pending.wait()
        finally:
            self._lock.acquire()
        return True

    def fill(self, columns: FileColumns, run: Sequence[int], fields: Mapping[str, np.ndarray[Any, Any]] | None) -> bool:
        """Fills the blocks of ``run`` (lock held); where they do not fit, refuses the columns."""
        if columns.fill(run, fields):
            return True
        self.columns = None
        self.refused = True
        return False


def fill_threads(cache_bytes: int, block_bytes: float, *, leave_a_core: bool = True) -> int:
    """How many threads decode ahead: a quarter of the cache in flight, and one core left to the pipeline.

    The decoding itself may run without the interpreter lock, but the work around it holds it, so more
    threads only take turns. Without ``leave_a_core``, for reads the pipeline waits for, its core decodes too.
    """
    cores = usable_cores() - (1 if leave_a_core else 0)
    fitting = int(cache_bytes // 4 // max(block_bytes, 1.0))
    return max(1, min(_MOST_FILL_THREADS, cores, fitting))


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, where the system has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def start_filling(source: Any, threads: int) -> list[threading.Thread]:
    """Starts ``threads`` threads running :func:`fill_ahead` over ``source`` (its lock held); returns them."""
    reference, name = weakref.ref(source), f"{WINDOW_THREAD_PREFIX}-columns"
    started = [
        threading.Thread(target=fill_ahead, args=(reference,), name=f"{name}-{index}") for index in range(threads)
    ]
    for thread in started:
        thread.start()
    return started


def fill_ahead(reference: weakref.ref[Any]) -> None:
    """Thread body: fills the blocks a source's whole columns lack, through a handle of its own, until none is left.

    Holds the source only per read, so it ends once pipelines are gone; a read error just ends the thread.
    """
    source = reference()
    if source is None:
        return
    handle = None
    try:
        handle, header = source._open_ahead()
        if header != source._header:
            return
        while source is not None and source._fill_next(handle):
            del source
            source = reference()
    except Exception:
        return
    finally:
        if handle is not None:
            handle.close()
        source = reference()
        if source is not None:
            with source._lock:
                # Once the last one is out, a later batch may start them again (after the columns were dropped).
                if threading.current_thread() in source._filling:
                    source._filling.remove(threading.current_thread())
