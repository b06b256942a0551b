"""Where the bytes of one shard (a box: ``[start, stop)`` per axis) of a C-ordered tensor lie.

A shard is a sequence of equal runs, each contiguous in the tensor's data: the last axis the
shard does not cover completely, with every axis after it, forms one run, repeated over the
axes before it. A shard along the first axis is one run; along a later one, a run per row.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence

import numpy as np

__all__ = ["Box", "ShardRuns", "box_of_index", "box_shape", "shard_runs"]

#: ``(start, stop)`` per axis.
Box = tuple[tuple[int, int], ...]


@dataclasses.dataclass(frozen=True)
class ShardRuns:
    """The contiguous runs of one shard: each run's byte offset in the tensor's data, in the shard's C order.

    Run ``i`` fills bytes ``[i * run_nbytes, (i + 1) * run_nbytes)`` of the shard's C-ordered buffer.
    """

    offsets: np.ndarray
    run_nbytes: int

    @property
    def nbytes(self) -> int:
        """The shard's size in bytes."""
        return len(self.offsets) * self.run_nbytes

    def pieces(self, most: int) -> Iterator[tuple[int, int, int]]:
        """Yields ``(buffer offset, tensor offset, length)`` per run, in pieces of at most ``most`` bytes."""
        size = self.run_nbytes
        for position, offset in enumerate(self.offsets.tolist()):
            for piece in range(0, size, most):
                yield position * size + piece, offset + piece, min(most, size - piece)


def box_shape(box: Box) -> tuple[int, ...]:
    """The extents of ``box``."""
    return tuple(stop - start for start, stop in box)


def box_of_index(index: Sequence[slice | int] | None, shape: Sequence[int]) -> Box:
    """The box a JAX shard index (a unit-step slice or int per axis; None for all) selects."""
    index = () if index is None else index
    box = []
    for axis, extent in enumerate(shape):
        part = index[axis] if axis < len(index) else slice(None)
        if isinstance(part, slice):
            start, stop, step = part.indices(extent)
            if step != 1:
                raise ValueError(f"shard index {tuple(index)} steps by {step} along axis {axis}; only 1 is supported")
        else:  # An integer index keeps one element of that axis.
            start, stop = int(part), int(part) + 1
        box.append((start, max(start, stop)))
    return tuple(box)


def shard_runs(shape: Sequence[int], itemsize: int, box: Box) -> ShardRuns:
    """Lists the runs (none for an empty shard) of the shard ``box`` of a tensor of ``shape``."""
    if any(stop <= start for start, stop in box):
        return ShardRuns(np.zeros(0, dtype=np.int64), 0)
    axis = len(shape) - 1
    while axis >= 0 and box[axis] == (0, shape[axis]):
        axis -= 1
    if axis < 0:
        return ShardRuns(np.zeros(1, dtype=np.int64), math.prod(shape) * itemsize)
    strides = [math.prod(shape[later + 1 :]) * itemsize for later in range(len(shape))]
    start, stop = box[axis]
    run_nbytes = (stop - start) * strides[axis]
    offsets = np.full(1, start * strides[axis], dtype=np.int64)
    # Outer axes first, so the runs come in the shard's C order.
    for outer in range(axis - 1, -1, -1):
        first, last = box[outer]
        rows = np.arange(first, last, dtype=np.int64) * strides[outer]
        offsets = (rows[:, None] + offsets[None, :]).reshape(-1)
    return ShardRuns(offsets, run_nbytes)
