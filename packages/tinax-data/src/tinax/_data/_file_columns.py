"""A file's stacked fields held whole: one NumPy array per field, for batches of ``stack_records``.

Batches that ``stack_records`` stacks are arrays per field. Taken out of
decoded row groups, a shuffled batch costs a take per row group it touches
and a join in the batch's order; the same rows in one NumPy array per field
cost one gather each, which is what a user who loaded the file into memory
pays. :class:`FileColumns` is that array per field for a reader whose
stacked rows fit its cache budget: filled row group by row group as batches
first reach them (each decoded once, copied in, and let go), then read by
gathers (a shuffle) or slices (in order).

Only fields whose stacked dtype and trailing shape do not depend on which
rows a batch holds are kept: numbers without missing values, and arrays of
one shape and a numeric dtype throughout the file. A file with any other
field (text, missing values, arrays whose shapes vary) is read from its row
groups as before, and so is one whose stacked rows exceed the budget.
"""

from __future__ import annotations

import collections
import math
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["FileColumns", "WholeColumns", "gather_rows", "kept_whole", "slice_rows", "stacked_alike"]

#: The dtype kinds kept whole: bool, signed and unsigned ints, floats, complex numbers.
_KEPT_KINDS = frozenset("biufc")


def kept_whole(dtype: np.dtype[Any]) -> bool:
    """Whether a stacked field of ``dtype`` is kept whole: a number's, built in or registered (ml_dtypes)."""
    # A registered scalar type (bfloat16, the float8s, int4) says kind "V", as raw bytes do; unlike them,
    # its width never depends on the values.
    return dtype.kind in _KEPT_KINDS or (dtype.isbuiltin == 2 and dtype.names is None)


class FileColumns:
    """The stacked fields of every row of a file, one array per field, filled row group by row group.

    Not thread-safe on its own: the reader fills it under its lock. Rows of
    filled row groups never change, so gathers from them need no lock.

    Args:
      group_ends: The position after each row group's last row, in file order.
      budget: The most bytes the arrays may take.
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
        if self.arrays is None:
            return 0
        return sum(int(array.nbytes) for array in self.arrays.values())

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
        """The first row group not filled yet at or after ``start``, else the first one before it.

        Row groups in ``skip`` (taken by other threads) are passed over;
        None where every row group left is among them.
        """
        missing = ~self._filled
        for group_index in skip:
            missing[group_index] = False
        after = np.flatnonzero(missing[start:])
        if len(after):
            return start + int(after[0])
        before = np.flatnonzero(missing)
        return int(before[0]) if len(before) else None

    def fill(self, group_index: int, fields: Mapping[str, np.ndarray[Any, Any]] | None) -> bool:
        """Copies one row group's stacked fields into the arrays.

        Args:
          group_index: The row group.
          fields: Its rows' stacked fields, in row order, or None where a
            field does not stack to one dtype and shape.

        Returns:
          Whether the arrays hold the row group now. Where they cannot (the
          fields are not kept whole, differ from the earlier row groups', or
          the arrays would exceed the budget), they are dropped and
          :attr:`usable` is False from then on.
        """
        if not self.usable:
            return False
        first = int(self._ends[group_index - 1]) if group_index else 0
        stop = int(self._ends[group_index])
        rows = stop - first
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
        for name, array in arrays.items():
            array[first:stop] = fields[name]
        self._filled[group_index] = True
        self.complete = bool(self._filled.all())
        return True

    def _give_up(self) -> bool:
        self.arrays = None
        self.usable = False
        self.complete = False
        return False


def gather_rows(arrays: Mapping[str, np.ndarray[Any, Any]], positions: np.ndarray[Any, Any]) -> dict[str, Any]:
    """The rows at ``positions`` of each array, as new arrays in that order."""
    # np.take along the first axis copies whole rows of a many-dimensional array, which indexing
    # with an array does element by element; for one dimension, indexing is the quicker.
    return {
        name: np.take(array, positions, axis=0) if array.ndim > 1 else array[positions]
        for name, array in arrays.items()
    }


def slice_rows(arrays: Mapping[str, np.ndarray[Any, Any]], first: int, stop: int) -> dict[str, Any]:
    """Consecutive rows of each array, as new arrays (a copy each, never a view of the arrays)."""
    return {name: array[first:stop].copy() for name, array in arrays.items()}


def stacked_alike(records: Sequence[Any]) -> dict[str, np.ndarray[Any, Any]] | None:
    """``stack_records`` of some records, where any of their subsets stacks each field alike, else None.

    Every record must be a dict with the fields of the first, in its order
    (a batch's fields come in its first record's order), and every value of
    a field must be, as ``np.asarray`` gives it, of one dtype and shape (an
    int beyond int64 among smaller ones, a float among ints, a list longer
    than another would make a batch's array depend on its rows).

    Args:
      records: Decoded records, in file order.
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
    """A record source's :class:`FileColumns` in one process: filled as batches need them, or refused for good.

    Args:
      group_ends: The position after each block of rows the columns are
        filled by (a Parquet file's row groups), in file order.
      budget: The most bytes the arrays may take.
      lock: The source's lock, held while row groups are filled.
    """

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

    def expect(self, blocks: Sequence[int]) -> None:
        """Says which blocks the next batches read, in that order, for the threads filling ahead to take first.

        Called with the lock held. Replaces what was said before.
        """
        self._wanted = collections.deque(blocks)

    def next_to_fill(self) -> int | None:
        """The block a thread filling ahead takes next, or None where every block left is being filled.

        Called with the lock held: the first block the next batches read
        that is neither filled nor taken, else the first missing one from
        :attr:`cursor` on, as :meth:`FileColumns.next_missing` finds it.
        """
        columns = self.columns
        if columns is None:
            return None
        while self._wanted:
            block = self._wanted.popleft()
            if not columns.filled(block) and block not in self.in_flight:
                return block
        return columns.next_missing(self.cursor, skip=self.in_flight)

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
        """The arrays of the fields, holding at least the rows at ``positions``, or None where they cannot.

        Args:
          positions: Valid row positions.
          fields_of: Gives a block's stacked fields (None where they do not
            stack alike); called with the lock held, for each block of
            ``positions`` not filled yet, in file order. A ValueError it
            raises (a block that cannot be read) refuses the columns too:
            the caller reads its batches as before, raising where it always did.
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
                if not self.fill(columns, group_index, fields):
                    return None
                self.cursor = group_index + 1
            return columns.arrays

    def _awaited(self, group_index: int) -> bool:
        """Waits, without the lock, for a block a thread ahead is decoding; False where none is (lock held).

        A batch that reaches a block the threads filling ahead took waits for
        it rather than decode it a second time under the lock, which would
        hold back every thread's next fill too.
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

    def fill(self, columns: FileColumns, group_index: int, fields: Mapping[str, np.ndarray[Any, Any]] | None) -> bool:
        """Fills one block (called with the lock held); where it does not fit, refuses the columns for good."""
        if columns.fill(group_index, fields):
            return True
        self.columns = None
        self.refused = True
        return False
