"""Position twins: a pipeline's order over source positions, to plan its reads.

A twin is the same grain classes and seeds over :class:`PositionSource`, whose
record ``i`` is ``i``; :class:`VectorPositions` computes what it gives on arrays
(grain's ``index_shuffle`` included, bit for bit) instead of one int at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tinax._data._grain_compat import read_many
from tinax._data._records._reader_datasets import RecordSourceMapDataset


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
        if self._order != "shuffle" and stop - start > 0:
            # Consecutive indices map to consecutive indices of the ordered dataset unless they cross an
            # epoch of a slice (the ends are then further apart than the rows) or of the ordered dataset.
            first, last = self._sliced_index(start), self._sliced_index(stop - 1)
            epoch = first // self._ordered_length
            if last - first == stop - start - 1 and last // self._ordered_length == epoch:
                within = first - epoch * self._ordered_length
                if self._window is not None:
                    # Slices of the windows' rows: a few NumPy calls where a gather would take a dozen.
                    return self._window.range_positions(epoch, within, within + stop - start)  # type: ignore[no-any-return]
                return range(within, within + stop - start)
        return self.positions(np.arange(start, stop, dtype=np.int64))

    def block_starts_ahead(self, index: int, count: int) -> np.ndarray[Any, Any] | None:
        """Source positions where the next ``count`` blocks a window shuffle reads from outer ``index`` on start.

        None for other orders, whose batches do not read whole blocks in turn.
        """
        if self._window is None:
            return None
        epoch, within = divmod(self._sliced_index(index), self._ordered_length)
        return self._window.block_starts(epoch, within, count)  # type: ignore[no-any-return]

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
