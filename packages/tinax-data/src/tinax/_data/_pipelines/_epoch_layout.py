"""Which positions of an epoch each process reads, before and after a re-deal (NumPy arithmetic, no grain).

A *position* indexes one epoch's (shuffled) order; process ``p`` reads the ``p``-th contiguous block of
the first ``steps * global_batch`` positions. A re-deal record is the epoch and the positions already read
as merged ``[start, stop)`` intervals, independent of the new layout; the re-dealt batches take the batch
indices that end where the epoch ends, so later epochs keep their usual indices.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinax._core.validation import fail_type, fail_value, require_int

__all__ = [
    "REDEAL_KEY",
    "Intervals",
    "RedealtEpoch",
    "checked_redeal_record",
    "epoch_progress",
    "epoch_steps",
    "exact_int",
    "plain_consumed",
    "resume_point",
]

#: Key of the re-deal record in an iterator state (absent outside a re-dealt epoch).
REDEAL_KEY = "tinax_redeal"

Intervals = tuple[tuple[int, int], ...]


def epoch_steps(num_rows: int, shard_count: int, batch_size: int) -> int:
    """The number of batches every process reads per epoch in the usual layout."""
    return num_rows // (shard_count * batch_size)


def plain_consumed(num_rows: int, shard_count: int, batch_size: int, step: int) -> Intervals:
    """The positions all processes have read once each has read ``step`` batches of an epoch."""
    if step == 0:
        return ()
    block = epoch_steps(num_rows, shard_count, batch_size) * batch_size
    read = step * batch_size
    return _merged((shard * block, shard * block + read) for shard in range(shard_count))


def _merged(intervals: Iterable[tuple[int, int]]) -> Intervals:
    merged: list[tuple[int, int]] = []
    for start, stop in sorted(interval for interval in intervals if interval[0] < interval[1]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((start, stop))
    return tuple(merged)


@dataclass(frozen=True)
class RedealtEpoch:
    """An interrupted epoch whose unread positions are dealt over a new layout; ``consumed`` is merged intervals."""

    epoch: int
    consumed: Intervals

    def _gaps(self, num_rows: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """The unread intervals' starts, and where each begins among the unread positions (plus their count)."""
        bounds = [0, *(bound for interval in self.consumed for bound in interval), num_rows]
        gaps = [(start, stop) for start, stop in zip(bounds[::2], bounds[1::2], strict=True) if start < stop]
        starts = np.asarray([start for start, _ in gaps], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum([stop - start for start, stop in gaps], dtype=np.int64)])
        return starts, offsets

    def _unread_intervals(self, num_rows: int, first: int, stop: int) -> Intervals:
        """The positions of the unread ones numbered ``[first, stop)`` (in epoch order), as intervals."""
        starts, offsets = self._gaps(num_rows)
        pieces = []
        for start, begin, end in zip(starts.tolist(), offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
            low, high = max(first, begin), min(stop, end)
            if low < high:
                pieces.append((start + low - begin, start + high - begin))
        return tuple(pieces)

    def rest_steps(self, num_rows: int, shard_count: int, batch_size: int) -> int:
        """The number of whole global batches the unread positions fill."""
        read = sum(stop - start for start, stop in self.consumed)
        return (num_rows - read) // (shard_count * batch_size)

    def region(self, num_rows: int, shard_count: int, batch_size: int) -> tuple[int, int]:
        """The batch indices ``[first, stop)`` of the re-dealt batches; ``stop`` is the epoch's usual end."""
        stop = (self.epoch + 1) * epoch_steps(num_rows, shard_count, batch_size)
        return stop - self.rest_steps(num_rows, shard_count, batch_size), stop

    def batch_positions(
        self, num_rows: int, shard_index: int, shard_count: int, batch_size: int, step: int
    ) -> np.ndarray[Any, Any]:
        """The positions of one process's re-dealt batch ``step`` (counted from 0), in the order it reads them."""
        block = self.rest_steps(num_rows, shard_count, batch_size) * batch_size
        unread = np.arange(batch_size, dtype=np.int64) + (shard_index * block + step * batch_size)
        starts, offsets = self._gaps(num_rows)
        gap = np.searchsorted(offsets, unread, side="right") - 1
        return starts[gap] + (unread - offsets[gap])  # type: ignore[no-any-return]

    def consumed_after(self, num_rows: int, shard_count: int, batch_size: int, steps: int) -> Intervals:
        """The positions read once every process has read ``steps`` of its re-dealt batches."""
        if steps == 0:
            return self.consumed
        block = self.rest_steps(num_rows, shard_count, batch_size) * batch_size
        read = [
            interval
            for shard in range(shard_count)
            for interval in self._unread_intervals(num_rows, shard * block, shard * block + steps * batch_size)
        ]
        return _merged([*self.consumed, *read])

    def to_state(self) -> dict[str, Any]:
        """The record as an iterator state holds it (JSON-serializable)."""
        return {"epoch": self.epoch, "consumed": [[start, stop] for start, stop in self.consumed]}


def epoch_progress(
    num_rows: int, shard_count: int, batch_size: int, next_index: int, record: RedealtEpoch | None
) -> tuple[int, Intervals]:
    """The epoch a layout's processes are in at batch ``next_index``, and the positions they have read of it."""
    if record is not None:
        first, stop = record.region(num_rows, shard_count, batch_size)
        if first <= next_index < stop:
            return record.epoch, record.consumed_after(num_rows, shard_count, batch_size, next_index - first)
    epoch, step = divmod(next_index, epoch_steps(num_rows, shard_count, batch_size))
    return epoch, plain_consumed(num_rows, shard_count, batch_size, step)


def resume_point(
    num_rows: int, shard_count: int, batch_size: int, epoch: int, consumed: Intervals
) -> tuple[int, RedealtEpoch | None]:
    """The next batch index where a layout resumes an epoch, and the re-deal record (None where none is needed)."""
    steps = epoch_steps(num_rows, shard_count, batch_size)
    read = sum(stop - start for start, stop in consumed)
    global_batch = shard_count * batch_size
    if read % global_batch == 0 and read // global_batch <= steps:
        step = read // global_batch
        if plain_consumed(num_rows, shard_count, batch_size, step) == consumed:
            return epoch * steps + step, None
    record = RedealtEpoch(epoch, consumed)
    first, stop = record.region(num_rows, shard_count, batch_size)
    return (stop, None) if first == stop else (first, record)


def checked_redeal_record(record: object, where: str, num_rows: object) -> RedealtEpoch:
    """Checks a re-deal record read from a state (any tampering is refused) and returns it."""
    if not isinstance(record, Mapping):
        fail_type(where, "a mapping with the keys 'epoch' and 'consumed', as re-dealt states hold", record)
    if set(record) != {"epoch", "consumed"}:
        fail_value(where, "a mapping with exactly the keys 'epoch' and 'consumed'", dict(record))
    epoch = exact_int(record["epoch"], f"{where}['epoch']", 0)
    intervals = record["consumed"]
    if not isinstance(intervals, Sequence) or isinstance(intervals, (str, bytes)):
        fail_type(f"{where}['consumed']", "a list of [start, stop] pairs", intervals)
    total = num_rows if type(num_rows) is int else None
    consumed: list[tuple[int, int]] = []
    for position, pair in enumerate(intervals):
        name = f"{where}['consumed'][{position}]"
        if not isinstance(pair, Sequence) or isinstance(pair, (str, bytes)) or len(pair) != 2:
            fail_type(name, "a [start, stop] pair of ints", pair)
        floor = consumed[-1][1] + 1 if consumed else 0
        start = exact_int(pair[0], f"{name}[0]", floor)
        stop = exact_int(pair[1], f"{name}[1]", start + 1, total)
        consumed.append((start, stop))
    return RedealtEpoch(epoch, tuple(consumed))


def exact_int(value: object, where: str, minimum: int, maximum: int | None = None) -> int:
    """Checks an int read from a saved state: exact ints only (a float or bool equal to one was tampered with)."""
    if type(value) is not int:
        fail_type(where, "an int", value)
    return require_int(value, where, minimum=minimum, maximum=maximum)
