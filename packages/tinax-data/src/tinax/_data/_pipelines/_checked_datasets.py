"""The grain datasets and iterator behind ``training_batches`` and ``evaluation_batches``.

The checked datasets stand in for the grain dataset they replace (taking over its
parents) rather than wrap it, so the graph depth, and thus grain's default seeds,
match the bare chain tinax 0.2 returned. Iterator states are grain's plus the
pipeline description, checked on restore; a re-dealt state reads through
:class:`RedealtMapDataset`. Imports grain; workers import this module to unpickle.
"""

from __future__ import annotations

import bisect
import copy
import hashlib
import itertools
import operator
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import grain
import numpy as np

from tinax._core.validation import fail_type
from tinax._data._grain_compat import (
    get_next_index,
    iterator_length,
    read_many,
    replace_parent_iterator,
    set_next_index,
)
from tinax._data._pipelines._epoch_layout import REDEAL_KEY, RedealtEpoch
from tinax._data._pipelines._pipeline_states import STATE_DESCRIPTION_KEY, STATE_GRAIN_KEY, check_state_and_record

if TYPE_CHECKING:
    from grain import DatasetIterator, IterDataset, MapDataset

__all__ = [
    "IN_TURN_READ_OPTIONS",
    "STACKED_READ_OPTIONS",
    "CheckedIterDataset",
    "CheckedIterator",
    "CheckedMapDataset",
    "EpochRows",
    "RedealtMapDataset",
    "WindowShuffleMapDataset",
]


#: Default read options over a record source whose reads take turns (the Parquet reader's lock): more
#: threads only queue; one prepares batches during the step. A few batches ahead, not grain's 500: a thread
#: that never waits starves the consumer's dispatch (halved feeding, ``bench:data --only-feeding``).
IN_TURN_READ_OPTIONS = grain.ReadOptions(num_threads=1, prefetch_buffer_size=8)
#: With ``batch_fn=stack_records``: read in the consumer's thread, cheaper than a hand-over while JAX
#: dispatch overlaps the step (1.4 times the rows of one thread on a TPU host, ``bench:data --only-feeding``).
STACKED_READ_OPTIONS = grain.ReadOptions(num_threads=0)


class CheckedMapDataset(grain.MapDataset):  # type: ignore[misc]
    """Stands in for a grain MapDataset; its iterators carry and check a pipeline description."""

    def __init__(
        self,
        replaced: MapDataset[Any],
        description: Mapping[str, Any],
        *,
        default_read_options: grain.ReadOptions | None = None,
        epoch_rows: EpochRows | None = None,
    ) -> None:
        super().__init__(list(replaced.parents))
        self._replaced = replaced
        self._description = dict(description)
        self._default_read_options = default_read_options
        self._epoch_rows = epoch_rows

    @property
    def pipeline_description(self) -> dict[str, Any]:
        return self._description

    def __len__(self) -> int:
        return len(self._replaced)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self.slice(index)
        # grain's chain would read a bool as batch 0 or 1.
        if isinstance(index, (bool, np.bool_)):
            fail_type("index", "an int", index)
        return self._replaced[index]

    def _getitems(self, indices: Sequence[int]) -> Any:
        return read_many(self._replaced, indices)

    def to_iter_dataset(self, read_options: Any = None, *, allow_nones: bool = False) -> IterDataset[Any]:
        # Read options the caller passes always win; without them, the
        # pipeline's own default where it has one, else grain's.
        if read_options is None:
            read_options = self._default_read_options
        replaced = self._replaced.to_iter_dataset(read_options, allow_nones=allow_nones)
        recipe = None
        if self._epoch_rows is not None:
            recipe = _RedealRecipe(self._replaced, self._epoch_rows, self._description, read_options, allow_nones)
        return CheckedIterDataset(replaced, self._description, recipe=recipe)

    def __str__(self) -> str:
        return f"CheckedMapDataset(kind={self._description.get('kind')!r}, replacing {self._replaced})"


class CheckedIterDataset(grain.IterDataset):  # type: ignore[misc]
    """Stands in for a grain IterDataset; its iterators carry and check a pipeline description."""

    def __init__(
        self, replaced: IterDataset[Any], description: Mapping[str, Any], *, recipe: _RedealRecipe | None = None
    ) -> None:
        super().__init__(list(replaced.parents))
        self._replaced = replaced
        self._description = dict(description)
        self._recipe = recipe
        self._slices: list[tuple[slice, bool]] = []

    @property
    def pipeline_description(self) -> dict[str, Any]:
        return self._description

    def __iter__(self) -> DatasetIterator[Any]:
        redealer = None if self._recipe is None else _Redealer(self._recipe, tuple(self._slices))
        return CheckedIterator(self._replaced.__iter__(), self._description, redealer=redealer)

    def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
        # grain's workers each read a slice, which the replaced dataset takes (a re-dealt iterator: of its own).
        self._replaced.set_slice(sl, sequential_slice)
        self._slices.append((sl, sequential_slice))

    def __str__(self) -> str:
        return f"CheckedIterDataset(kind={self._description.get('kind')!r}, replacing {self._replaced})"


class CheckedIterator(grain.DatasetIterator):  # type: ignore[misc]
    """A grain DatasetIterator whose state is grain's plus the pipeline description."""

    def __init__(
        self, parent: DatasetIterator[Any], description: Mapping[str, Any], *, redealer: _Redealer | None = None
    ) -> None:
        super().__init__(parent)
        self._iterator = parent
        self._description = dict(description)
        self._redealer = redealer
        # The re-deal the iterator reads, and the batch index where its re-dealt batches end.
        self._record: RedealtEpoch | None = None
        self._record_stop = 0

    def __next__(self) -> Any:
        return self._iterator.__next__()

    def get_state(self) -> dict[str, Any]:
        # A deep copy, so that a saved state never changes as iteration goes on.
        state = {
            STATE_DESCRIPTION_KEY: copy.deepcopy(self._description),
            STATE_GRAIN_KEY: copy.deepcopy(self._iterator.get_state()),
        }
        # The re-deal goes with the state only until its batches are read; then the state is a plain run's.
        record = self._record
        if record is not None and self._redealer is not None:
            next_batch = self._redealer.position(state[STATE_GRAIN_KEY]["next_index"])
            if next_batch < self._record_stop:
                state[REDEAL_KEY] = record.to_state()
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        # grain checks the upper bound only after taking the index, so tinax checks first.
        checked, record = check_state_and_record(state, self._description, length=iterator_length(self._iterator))
        if record is None and self._record is None:
            self._iterator.set_state(copy.deepcopy(checked))
            return
        if self._redealer is None:
            raise ValueError(
                f"state[{REDEAL_KEY!r}] is a re-deal record, which only the iterator of a training_batches pipeline "
                "can restore"
            )
        stop = 0
        if record is not None:
            first, stop = self._redealer.region(record)
            position = self._redealer.position(checked["next_index"])
            if not first <= position < stop:
                raise ValueError(
                    f"state[{REDEAL_KEY!r}] re-deals the batches [{first}, {stop}) of this pipeline, so the state's "
                    f"next batch must be one of them (a state holds the record only until they are read), got "
                    f"batch {position}"
                )
        replacement = self._redealer.iterator(record)
        replacement.set_state(copy.deepcopy(checked))
        self._replace_iterator(replacement)
        self._record, self._record_stop = record, stop

    def _replace_iterator(self, replacement: DatasetIterator[Any]) -> None:
        previous, self._iterator = self._iterator, replacement
        replace_parent_iterator(self, replacement)
        previous.close()

    # grain's private iterator protocol, which its worker processes use.
    def _get_next_index(self) -> int:
        return get_next_index(self._iterator)

    def _set_next_index(self, index: int) -> None:
        set_next_index(self._iterator, index)

    def __str__(self) -> str:
        return f"CheckedIterator(kind={self._description.get('kind')!r})"


class EpochRows:
    """What a re-deal reads: ``rows[epoch * num_rows + position]`` is that position of the epoch's order."""

    def __init__(self, rows: MapDataset[Any], batch_fn: Any) -> None:
        self.rows = rows
        self.batch_fn = batch_fn


class RedealtMapDataset(grain.MapDataset):  # type: ignore[misc]
    """A training pipeline's batches with the rest of one interrupted epoch dealt out again.

    Re-dealt batch indices read this process's block of the epoch's unread rows; others the plain batches.
    """

    def __init__(
        self, plain: MapDataset[Any], epoch_rows: EpochRows, record: RedealtEpoch, layout: tuple[int, int, int, int]
    ) -> None:
        super().__init__(plain)
        self._plain = plain
        self._rows = epoch_rows.rows
        self._batch_fn = epoch_rows.batch_fn
        self._record = record
        self._layout = layout
        num_rows, _, shard_count, batch_size = layout
        self._first, self._stop = record.region(num_rows, shard_count, batch_size)

    def __len__(self) -> int:
        return len(self._plain)

    def __str__(self) -> str:
        return f"RedealtMapDataset(epoch={self._record.epoch}, batches=[{self._first}, {self._stop}))"

    def _redealt_batch(self, index: int) -> Any:
        num_rows, shard_index, shard_count, batch_size = self._layout
        positions = self._record.batch_positions(num_rows, shard_index, shard_count, batch_size, index - self._first)
        # Index e * num_rows + position is that position of epoch e's order.
        return self._batch_fn(read_many(self._rows, (positions + self._record.epoch * num_rows).tolist()))

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self.slice(index)
        if self._first <= index < self._stop:
            return self._redealt_batch(index)
        return self._plain[index]

    def _getitems(self, indices: Sequence[int]) -> Any:
        found: list[Any] = [None] * len(indices)
        plain = [(position, index) for position, index in enumerate(indices) if not self._first <= index < self._stop]
        for (position, _), batch in zip(plain, read_many(self._plain, [index for _, index in plain]), strict=True):
            found[position] = batch
        for position, index in enumerate(indices):
            if self._first <= index < self._stop:
                found[position] = self._redealt_batch(index)
        return found


class _RedealRecipe:
    """What an iterator of a training pipeline needs to read a re-dealt state."""

    def __init__(
        self,
        plain: MapDataset[Any],
        epoch_rows: EpochRows,
        description: Mapping[str, Any],
        read_options: Any,
        allow_nones: bool,
    ) -> None:
        self.plain = plain
        self.epoch_rows = epoch_rows
        self.layout = operator.itemgetter("num_rows", "shard_index", "shard_count", "batch_size")(description)
        self.read_options = read_options
        self.allow_nones = allow_nones


class _Redealer:
    """Builds the grain iterators of one checked iterator: plain, or re-dealt, over the slice it reads."""

    def __init__(self, recipe: _RedealRecipe, slices: tuple[tuple[slice, bool], ...]) -> None:
        self._recipe = recipe
        self._slices = slices

    def region(self, record: RedealtEpoch) -> tuple[int, int]:
        num_rows, _, shard_count, batch_size = self._recipe.layout
        return record.region(num_rows, shard_count, batch_size)

    def position(self, next_index: int) -> int:
        """The pipeline's batch index of the element at ``next_index`` of this iterator's slice."""
        lengths = [len(self._recipe.plain)]
        for sl, _ in self._slices:
            lengths.append(len(range(lengths[-1])[sl]))
        for (sl, _), parent_length in zip(reversed(self._slices), reversed(lengths[:-1]), strict=True):
            taken = range(parent_length)[sl]
            next_index = taken[next_index] if next_index < len(taken) else parent_length
        return next_index

    def iterator(self, record: RedealtEpoch | None) -> DatasetIterator[Any]:
        if any(sequential for _, sequential in self._slices):
            # grain cuts the source itself in place for a sequential slice, under every dataset built on it.
            raise ValueError(
                "state can only be re-dealt into worker processes that read interleaved elements, got workers "
                "opened with sequential_slice=True"
            )
        recipe = self._recipe
        dataset = recipe.plain
        if record is not None:
            dataset = RedealtMapDataset(dataset, recipe.epoch_rows, record, recipe.layout)
        iter_dataset = dataset.to_iter_dataset(recipe.read_options, allow_nones=recipe.allow_nones)
        for sl, sequential in self._slices:
            iter_dataset.set_slice(sl, sequential)
        return iter_dataset.__iter__()


class WindowShuffleMapDataset(grain.MapDataset):  # type: ignore[misc]
    """The window shuffle of :func:`training_batches`, one new order per epoch (as ``repeat`` expects)."""

    def __init__(self, parent: MapDataset[Any], *, seed: int, block_ends: Sequence[int], window: int) -> None:
        super().__init__(parent)
        self._unshuffled = parent
        self._seed = seed
        self._block_ends = tuple(block_ends)
        self._window = window
        self._length = len(parent)
        self._plans: dict[int, _WindowPlan] = {}

    def __len__(self) -> int:
        return self._length

    def __str__(self) -> str:
        return f"WindowShuffleMapDataset(window={self._window})"

    def _plan(self, epoch: int) -> _WindowPlan:
        plan = self._plans.get(epoch)
        if plan is None:
            with _PLAN_LOCK:
                plan = self._plans.get(epoch)
                if plan is None:
                    plan = _WindowPlan(self._block_ends, self._window, self._seed, epoch)
                    # This epoch and the one before: grain's threads may still read its last batches.
                    plans = {done: kept for done, kept in self._plans.items() if done == epoch - 1}
                    plans[epoch] = plan
                    self._plans = plans
        return plan

    def _position(self, index: int) -> int:
        epoch, position = divmod(index, self._length)
        return self._plan(epoch).row(position) + epoch * self._length

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self.slice(index)
        return self._unshuffled[self._position(index)]

    def positions(self, indices: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The indices of the unshuffled dataset that several indices of this one read."""
        wanted = np.asarray(indices, dtype=np.int64)
        epochs, positions = np.divmod(wanted, self._length)
        found = np.empty(len(wanted), dtype=np.int64)
        for epoch, chosen in _runs(epochs):
            found[chosen] = self._plan(epoch).rows(positions[chosen]) + epoch * self._length
        return found

    def range_positions(self, epoch: int, start: int, stop: int) -> np.ndarray[Any, Any]:
        """The unshuffled dataset's rows at the consecutive positions ``start`` to ``stop`` of an epoch."""
        return self._plan(epoch).range_rows(start, stop)

    def block_starts(self, epoch: int, position: int, count: int) -> np.ndarray[Any, Any]:
        """The unshuffled dataset's rows where ``count`` blocks an epoch reads from ``position`` on start."""
        return self._plan(epoch).block_starts(position, count)

    def _getitems(self, indices: Sequence[int]) -> Any:
        return read_many(self._unshuffled, self.positions(np.asarray(indices, dtype=np.int64)).tolist())

    def __getstate__(self) -> dict[str, Any]:
        # The plans hold locks, and are computed again from the seed.
        return {**self.__dict__, "_plans": {}}


class _WindowPlan:
    """The window shuffle's order of one epoch: a block order, windows of it, and a seed per window."""

    def __init__(self, block_ends: Sequence[int], window: int, seed: int, epoch: int) -> None:
        ends = np.asarray(block_ends, dtype=np.int64)
        starts = np.concatenate([np.zeros(1, dtype=np.int64), ends[:-1]])
        count = len(ends)
        order = _permutation(count, _derived_seed(seed, epoch, -1))
        self._block_starts = starts[order]
        self._block_sizes = (ends - starts)[order]
        # Where every window starts in the epoch, and where the last one ends.
        window_sizes = np.add.reduceat(self._block_sizes, np.arange(0, count, window)) if count else np.zeros(0)
        self._window_bounds = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(window_sizes)])
        self._bounds = self._window_bounds.tolist()
        self._window = window
        self._seed = seed
        self._epoch = epoch
        # Grain's prefetch threads read concurrently: windows are computed under a lock, each immutable.
        self._lock = threading.Lock()
        self._windows: dict[int, tuple[int, int, np.ndarray[Any, Any]]] = {}
        self._last: tuple[int, int, np.ndarray[Any, Any]] = (0, 0, np.zeros(0, dtype=np.int64))

    def _compute(self, window: int) -> tuple[int, int, np.ndarray[Any, Any]]:
        """The shuffled rows of one window, with its bounds in the epoch."""
        first = window * self._window
        blocks = range(first, min(first + self._window, len(self._block_sizes)))
        rows = np.concatenate(
            [np.arange(self._block_sizes[block], dtype=np.int64) + self._block_starts[block] for block in blocks]
        )
        size = len(rows)
        if size > 1:
            rows = rows[_permutation(size, _derived_seed(self._seed, self._epoch, window))]
        return int(self._window_bounds[window]), int(self._window_bounds[window + 1]), rows

    def rows(self, positions: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The dataset rows at several positions of the epoch."""
        found = np.empty(len(positions), dtype=np.int64)
        windows = np.searchsorted(self._window_bounds, positions, side="right") - 1
        for window, chosen in _runs(windows):
            start, _, rows = self._window_rows(window)
            found[chosen] = rows[positions[chosen] - start]
        return found

    def range_rows(self, start: int, stop: int) -> np.ndarray[Any, Any]:
        """:meth:`rows` of the consecutive positions ``start`` to ``stop`` of the epoch (a new array)."""
        parts = []
        window = bisect.bisect_right(self._bounds, start) - 1
        while start < stop:
            window_start, window_stop, rows = self._window_rows(window)
            end = min(stop, window_stop)
            parts.append(rows[start - window_start : end - window_start])
            start, window = end, window + 1
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def block_starts(self, position: int, count: int) -> np.ndarray[Any, Any]:
        """Where ``count`` blocks from the window holding ``position`` on start, in the order the epoch reads them."""
        first = max(bisect.bisect_right(self._bounds, position) - 1, 0) * self._window
        starts: np.ndarray[Any, Any] = self._block_starts[first : first + count]
        return starts

    def _window_rows(self, window: int) -> tuple[int, int, np.ndarray[Any, Any]]:
        with self._lock:
            found = self._windows.get(window)
            if found is None:
                found = self._compute(window)
                if len(self._windows) >= _WINDOWS_KEPT:
                    del self._windows[min(self._windows)]
                self._windows[window] = found
        return found

    def row(self, position: int) -> int:
        """The dataset row at a position of the epoch."""
        start, stop, rows = self._last
        if not start <= position < stop:
            found = self._window_rows(int(np.searchsorted(self._window_bounds, position, side="right")) - 1)
            self._last = found
            start, stop, rows = found
        return int(rows[position - start])


_PLAN_LOCK = threading.Lock()
#: Windows kept per epoch: enough for the batches grain's threads read at once near a window's end.
_WINDOWS_KEPT = 4


def _runs(values: np.ndarray[Any, Any]) -> Iterator[tuple[int, slice | np.ndarray[Any, Any]]]:
    """Each distinct value of an int array with its slots: a slice where sorted (the common case), else a mask."""
    if not len(values):
        return
    if len(values) == 1 or bool(np.all(values[1:] >= values[:-1])):
        cuts = [0, *(np.flatnonzero(np.diff(values)) + 1).tolist(), len(values)]
        for start, stop in itertools.pairwise(cuts):
            yield int(values[start]), slice(start, stop)
        return
    for value in np.unique(values).tolist():
        yield value, values == value


def _permutation(size: int, seed: int) -> np.ndarray[Any, Any]:
    """A permutation of ``range(size)`` from a 32-bit seed, the same with every NumPy version.

    Sorted by a SplitMix64 hash of (seed, position): a bijection, so keys are distinct and any sort agrees.
    """
    with np.errstate(over="ignore"):
        keys = np.arange(size, dtype=np.uint64) + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
        keys = (keys ^ (keys >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        keys = (keys ^ (keys >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        keys ^= keys >> np.uint64(31)
    return np.argsort(keys)


def _derived_seed(seed: int, epoch: int, stream: int) -> int:
    """A 32-bit seed for one shuffle of one epoch, the same on every platform."""
    digest = hashlib.sha256(f"tinax.window_shuffle:{seed}:{epoch}:{stream}".encode()).digest()
    return int.from_bytes(digest[:4], "little")
