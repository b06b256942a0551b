"""Deterministic, process-aware training and evaluation batches whose iterator states check themselves.

Both pipelines are plain grain ``MapDataset`` chains (shard, shuffle, repeat,
batch) under one thin dataset that describes them. Iterating that dataset
yields a real ``grain.DatasetIterator`` whose state is the grain state plus
the description (source identity, seed, shards, batch size, worker count), so
restoring the state of another pipeline fails with a ValueError naming the
field that differs instead of silently resuming somewhere else.

grain may only be imported when a function runs, so the three grain subclasses
are defined on first use by :func:`pipeline_classes`. The dataset instances
pickle as a call to a module-level function that defines the classes in the
unpickling process first, which is how they reach grain's worker processes.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias, TypeVar

from tinax._core.validation import (
    fail_type,
    require_bool,
    require_callable,
    require_instance,
    require_int,
    require_optional_positive_int,
    require_positive_int,
)
from tinax.data._sources import find_source_id

if TYPE_CHECKING:
    from grain import DatasetIterator, IterDataset, MapDataset
    from grain.sharding import ShardOptions

__all__ = [
    "BatchTransform",
    "STATE_DESCRIPTION_KEY",
    "STATE_GRAIN_KEY",
    "evaluation_batches",
    "find_pipeline_description",
    "pipeline_classes",
    "training_batches",
]

T = TypeVar("T")
BatchT = TypeVar("BatchT")

#: Turns the records of one batch (a sequence of up to ``batch_size`` records)
#: into the batch the pipeline yields, for example by stacking arrays.
BatchTransform: TypeAlias = Callable[[Sequence[T]], BatchT]

#: Key of the pipeline description in an iterator state.
STATE_DESCRIPTION_KEY = "tinax_pipeline"
#: Key of grain's own iterator state in an iterator state.
STATE_GRAIN_KEY = "grain"
_STATE_FORMAT = 1
_MAX_SEED = 2**32 - 1
# Fields are reported in this order when a restore is refused; the rest follow
# alphabetically.
_FIELD_ORDER = (
    "kind",
    "source_id",
    "num_rows",
    "seed",
    "shuffle",
    "shard_index",
    "shard_count",
    "drop_remainder",
    "batch_size",
    "num_workers",
    "sequential_slice",
)


class PipelineClasses(NamedTuple):
    """The grain subclasses behind the pipelines, defined on first use."""

    map_dataset: type[Any]
    iter_dataset: type[Any]
    iterator: type[Any]


def training_batches(
    dataset: MapDataset[T],
    *,
    shard_options: ShardOptions,
    seed: int,
    shuffle: bool,
    num_epochs: int | None,
    batch_size: int,
    batch_fn: BatchTransform[T, BatchT],
) -> MapDataset[BatchT]:
    """Builds the deterministic, per-process training batches of a dataset.

    The steps, in order:

    1. **Shard.** This process keeps the rows at positions ``shard_index``,
       ``shard_index + shard_count``, ... of ``dataset`` (a strided shard, so
       a dataset sorted by label still gives every process every label). The
       shards of all ``shard_count`` indices are disjoint and cover the
       dataset. When the row count ``n`` is not a multiple of ``shard_count``,
       the first ``n % shard_count`` shards hold one more row, unless
       ``shard_options.drop_remainder`` is True: then every shard holds
       ``n // shard_count`` rows and the last ``n % shard_count`` rows of
       ``dataset`` (positions ``n - n % shard_count`` to ``n - 1``) are used
       by no shard.
    2. **Shuffle** (if ``shuffle``) the shard's rows with grain's index
       shuffle, seeded by ``seed``; each epoch is shuffled with a different
       seed derived from it, so every epoch has its own order.
    3. **Repeat** for ``num_epochs`` epochs, or forever for None.
    4. **Batch** ``batch_size`` consecutive rows with ``batch_fn``. Batches
       run across epoch boundaries, and with a finite ``num_epochs`` the last
       batch holds what is left: no row is dropped.

    The same arguments give bit-identical batches in every run and process.

    Iterate the returned dataset directly (``iter(batches)``) or through
    ``batches.to_iter_dataset()`` (for example to hand it to
    :func:`open_multiprocessing_iterator`). The iterator is a
    ``grain.DatasetIterator``: its ``get_state()`` is a JSON-serializable dict
    holding grain's state and a description of this pipeline, and Orbax saves
    it as a checkpointable. ``set_state`` on the iterator of a freshly built
    pipeline resumes exactly at the next batch, and refuses, with a ValueError
    naming each differing field, a state from a pipeline with another source
    identity, row count, seed, shuffle flag, shard index, shard count,
    ``drop_remainder``, batch size or worker count. ``num_epochs`` is not
    checked: resuming with more epochs is a legitimate way to train longer.
    Transformations applied to the returned dataset (``.map``, ``.slice``,
    ...) build a plain grain pipeline whose states carry no description.

    Args:
      dataset: A ``grain.MapDataset`` over an identified source: an
        :class:`InMemorySource`, a tinax record reader, a split of one, or any
        data source with a ``source_id`` attribute.
      shard_options: This process's shard, for example
        ``grain.sharding.ShardByJaxProcess(drop_remainder=True)`` (built after
        ``jax.distributed.initialize``) or
        ``grain.sharding.ShardOptions(shard_index, shard_count)``.
      seed: The shuffle seed, an int in [0, 2**32 - 1]. Required, and part of
        the state check, even when ``shuffle`` is False.
      shuffle: Whether to shuffle each epoch. False keeps the shard's rows in
        dataset order, the same in every epoch.
      num_epochs: A positive number of passes over the shard, or None to
        repeat forever.
      batch_size: The number of rows per batch, at least 1.
      batch_fn: Called with the list of a batch's rows; its return value is
        the batch. It must be picklable (a module-level function, for
        example) to be used with worker processes.

    Returns:
      A random-access ``grain.MapDataset`` of batches. Its length is the
      number of batches; with ``num_epochs=None`` it is effectively infinite
      (grain reports about ``sys.maxsize / batch_size``).

    Raises:
      TypeError: If ``dataset`` is not a ``grain.MapDataset`` or its source
        has no identity, ``shard_options`` is not a
        ``grain.sharding.ShardOptions`` (or holds non-int or non-bool fields),
        ``seed``, ``num_epochs`` or ``batch_size`` is not an int (bools
        included), ``shuffle`` is not a bool, or ``batch_fn`` is not
        callable.
      ValueError: If ``seed`` is out of range, ``num_epochs`` or
        ``batch_size`` is below 1, or this process's shard holds no rows.
    """
    grain = _require_dataset(dataset)
    shard = _shard_options_fields(shard_options, grain)
    seed = require_int(seed, "seed", minimum=0, maximum=_MAX_SEED)
    require_bool(shuffle, "shuffle")
    num_epochs = require_optional_positive_int(num_epochs, "num_epochs")
    batch_size = require_positive_int(batch_size, "batch_size")
    require_callable(batch_fn, "batch_fn")
    source_id = _require_source_id(dataset, "training_batches")

    rows = _shard(dataset, shard)
    if shuffle:
        rows = rows.shuffle(seed)
    batched = rows.repeat(num_epochs).batch(batch_size, drop_remainder=False, batch_fn=batch_fn)
    description = {
        "kind": "training_batches",
        "source_id": source_id,
        "num_rows": len(dataset),
        "seed": seed,
        "shuffle": shuffle,
        **shard,
        "batch_size": batch_size,
    }
    return pipeline_classes().map_dataset(batched, _with_workers(description, 0, sequential_slice=False))


def evaluation_batches(
    dataset: MapDataset[T],
    *,
    shard_options: ShardOptions,
    batch_size: int,
    batch_fn: BatchTransform[T, BatchT],
) -> MapDataset[BatchT]:
    """Builds this process's evaluation batches: every row once, in order.

    The process keeps the strided shard of ``dataset`` that
    :func:`training_batches` would (positions ``shard_index``,
    ``shard_index + shard_count``, ...), so local row ``j`` is row
    ``shard_index + j * shard_count`` of the dataset, and batches it in that
    order with ``batch_fn``. It never shuffles, repeats, pads or drops: the
    last batch holds the remaining rows, possibly fewer than ``batch_size``.

    Rows never go missing without an error: with
    ``shard_options.drop_remainder`` True, the shards are accepted only when
    ``len(dataset)`` is a multiple of ``shard_count`` (nothing to drop);
    otherwise the call fails and says how many rows would be lost. Pass
    ``drop_remainder=False`` shard options for evaluation (and pad on the
    caller's side when every process must run the same number of steps).

    Iteration, iterator state, Orbax saving and the restore checks work as for
    :func:`training_batches` (the checked fields are the source identity, row
    count, shard index and count, ``drop_remainder``, batch size and worker
    count).

    Args:
      dataset: A ``grain.MapDataset`` over an identified source (see
        :func:`training_batches`).
      shard_options: This process's shard.
      batch_size: The number of rows per batch, at least 1.
      batch_fn: Called with the list of a batch's rows; its return value is
        the batch.

    Returns:
      A random-access ``grain.MapDataset`` of ``ceil(shard rows /
      batch_size)`` batches.

    Raises:
      TypeError: If ``dataset`` is not a ``grain.MapDataset`` or its source
        has no identity, ``shard_options`` is not a
        ``grain.sharding.ShardOptions`` (or holds non-int or non-bool fields),
        ``batch_size`` is not an int (bools included), or ``batch_fn`` is not
        callable.
      ValueError: If ``batch_size`` is below 1, ``drop_remainder`` would drop
        rows, or this process's shard holds no rows.
    """
    grain = _require_dataset(dataset)
    shard = _shard_options_fields(shard_options, grain)
    batch_size = require_positive_int(batch_size, "batch_size")
    require_callable(batch_fn, "batch_fn")
    source_id = _require_source_id(dataset, "evaluation_batches")

    total = len(dataset)
    left_over = total % shard["shard_count"]
    if shard["drop_remainder"] and left_over:
        raise ValueError(
            f"shard_options.drop_remainder must be False for evaluation of {total} rows over "
            f"{shard['shard_count']} shards, got True, which would drop the last {left_over} rows; "
            "evaluation_batches never drops rows"
        )
    batched = _shard(dataset, shard).batch(batch_size, drop_remainder=False, batch_fn=batch_fn)
    description = {
        "kind": "evaluation_batches",
        "source_id": source_id,
        "num_rows": total,
        **shard,
        "batch_size": batch_size,
    }
    return pipeline_classes().map_dataset(batched, _with_workers(description, 0, sequential_slice=False))


def _require_dataset(dataset: object) -> Any:
    import grain

    require_instance(dataset, "dataset", grain.MapDataset, "a grain.MapDataset")
    return grain


def _shard_options_fields(shard_options: object, grain: Any) -> dict[str, Any]:
    options = require_instance(
        shard_options, "shard_options", grain.sharding.ShardOptions, "a grain.sharding.ShardOptions"
    )
    # ShardOptions checks the range of its fields but not their types.
    count = require_positive_int(options.shard_count, "shard_options.shard_count")
    index = require_int(options.shard_index, "shard_options.shard_index", minimum=0, maximum=count - 1)
    drop_remainder = require_bool(options.drop_remainder, "shard_options.drop_remainder")
    return {"shard_index": index, "shard_count": count, "drop_remainder": drop_remainder}


def _require_source_id(dataset: Any, function: str) -> str:
    source_id = find_source_id(dataset)
    if source_id is None:
        fail_type(
            "dataset",
            "a grain.MapDataset over an identified source, so that iterator states can be checked "
            f"(for {function}, wrap in-memory records as grain.MapDataset.source(tinax.data.InMemorySource(records, "
            "source_id=...)), or give your data source a source_id attribute)",
            dataset,
        )
    return source_id


def _shard(dataset: Any, shard: Mapping[str, Any]) -> Any:
    total = len(dataset)
    index, count = shard["shard_index"], shard["shard_count"]
    stop = (total // count) * count if shard["drop_remainder"] else total
    rows = dataset.slice(slice(index, stop, count))
    if len(rows) == 0:
        raise ValueError(
            f"shard_options must give this process at least one row, got shard {index} of {count} "
            f"(drop_remainder={shard['drop_remainder']}) of a dataset of {total} rows, which holds none"
        )
    return rows


def _with_workers(description: Mapping[str, Any], num_workers: int, *, sequential_slice: bool) -> dict[str, Any]:
    return {
        **description,
        "num_workers": num_workers,
        "sequential_slice": sequential_slice,
        "state_format": _STATE_FORMAT,
    }


def find_pipeline_description(dataset: Any) -> dict[str, Any] | None:
    """Returns the description of the tinax pipeline under a grain dataset, if any.

    Args:
      dataset: A grain ``MapDataset`` or ``IterDataset``.

    Returns:
      A copy of the description of the nearest pipeline dataset made by
      :func:`training_batches` or :func:`evaluation_batches` on the way down
      ``dataset``'s parents, or None if there is none.
    """
    classes = pipeline_classes()
    pending: list[Any] = [dataset]
    while pending:
        node = pending.pop(0)
        if isinstance(node, (classes.map_dataset, classes.iter_dataset)):
            return dict(node.pipeline_description)
        pending.extend(getattr(node, "parents", ()))
    return None


def check_state(state: object, expected: Mapping[str, Any]) -> Any:
    """Checks that an iterator state belongs to the described pipeline.

    Args:
      state: What ``set_state`` received.
      expected: The description of the pipeline being restored.

    Returns:
      grain's part of the state, to hand to the grain iterator.

    Raises:
      TypeError: If ``state`` is not a mapping.
      ValueError: If it holds no pipeline description, or the description
        differs from ``expected``; the message names every differing field.
    """
    if not isinstance(state, Mapping):
        fail_type("state", "a dict returned by get_state() of a tinax pipeline iterator", state)
    saved = state.get(STATE_DESCRIPTION_KEY)
    if not isinstance(saved, Mapping) or STATE_GRAIN_KEY not in state:
        keys = ", ".join(repr(key) for key in state)
        raise ValueError(
            f"state must hold {STATE_DESCRIPTION_KEY!r} and {STATE_GRAIN_KEY!r} entries, as states from "
            f"get_state() of a tinax pipeline iterator do, got a state with keys [{keys}]"
        )
    fields = set(saved) | set(expected)
    ordered = [name for name in _FIELD_ORDER if name in fields] + sorted(fields.difference(_FIELD_ORDER))
    missing = "<absent>"
    differences = [
        f"{name} is {saved.get(name, missing)!r} in the state but {expected.get(name, missing)!r} here"
        for name in ordered
        if saved.get(name, missing) != expected.get(name, missing)
    ]
    if differences:
        raise ValueError(
            "state must come from a pipeline built with the same arguments, got one that differs: "
            + "; ".join(differences)
        )
    return state[STATE_GRAIN_KEY]


def _new_instance(name: str) -> Any:
    """Unpickles a pipeline dataset: an empty instance, whose attributes pickle then sets."""
    cls = getattr(pipeline_classes(), name)
    return cls.__new__(cls)


@functools.cache
def pipeline_classes() -> PipelineClasses:
    """Defines the grain subclasses behind the pipelines (once, importing grain).

    Returns:
      The dataset, iterable dataset and iterator classes.
    """
    import grain

    class CheckedMapDataset(grain.MapDataset):  # type: ignore[misc]
        """A grain MapDataset whose iterators carry and check a pipeline description."""

        def __init__(self, parent: MapDataset[Any], description: Mapping[str, Any]) -> None:
            super().__init__(parent)
            self._description = dict(description)

        @property
        def pipeline_description(self) -> dict[str, Any]:
            return self._description

        def __len__(self) -> int:
            return len(self._parent)

        def __getitem__(self, index: Any) -> Any:
            if isinstance(index, slice):
                return self.slice(index)
            return self._parent[index]

        def _getitems(self, indices: Sequence[int]) -> Any:
            return self._parent._getitems(indices)

        def to_iter_dataset(self, read_options: Any = None, *, allow_nones: bool = False) -> IterDataset[Any]:
            inner = self._parent.to_iter_dataset(read_options, allow_nones=allow_nones)
            return CheckedIterDataset(inner, self._description)

        def __str__(self) -> str:
            return f"CheckedMapDataset(kind={self._description.get('kind')!r})"

        def __reduce__(self) -> tuple[Any, ...]:
            return (_new_instance, ("map_dataset",), self.__dict__.copy())

    class CheckedIterDataset(grain.IterDataset):  # type: ignore[misc]
        """A grain IterDataset whose iterators carry and check a pipeline description."""

        def __init__(self, parent: IterDataset[Any], description: Mapping[str, Any]) -> None:
            super().__init__(parent)
            self._description = dict(description)

        @property
        def pipeline_description(self) -> dict[str, Any]:
            return self._description

        def __iter__(self) -> DatasetIterator[Any]:
            return CheckedIterator(self._parent.__iter__(), self._description)

        def __str__(self) -> str:
            return f"CheckedIterDataset(kind={self._description.get('kind')!r})"

        def __reduce__(self) -> tuple[Any, ...]:
            return (_new_instance, ("iter_dataset",), self.__dict__.copy())

    class CheckedIterator(grain.DatasetIterator):  # type: ignore[misc]
        """A grain DatasetIterator whose state is grain's plus the pipeline description."""

        def __init__(self, parent: DatasetIterator[Any], description: Mapping[str, Any]) -> None:
            super().__init__(parent)
            self._description = dict(description)

        def __next__(self) -> Any:
            return self._parent.__next__()

        def get_state(self) -> dict[str, Any]:
            # A deep copy, so that a saved state never changes as iteration goes on.
            return {
                STATE_DESCRIPTION_KEY: copy.deepcopy(self._description),
                STATE_GRAIN_KEY: copy.deepcopy(self._parent.get_state()),
            }

        def set_state(self, state: dict[str, Any]) -> None:
            self._parent.set_state(copy.deepcopy(check_state(state, self._description)))

        def _get_next_index(self) -> int:
            return self._parent._get_next_index()  # type: ignore[no-any-return]

        def _set_next_index(self, index: int) -> None:
            self._parent._set_next_index(index)

        def __str__(self) -> str:
            return f"CheckedIterator(kind={self._description.get('kind')!r})"

    return PipelineClasses(CheckedMapDataset, CheckedIterDataset, CheckedIterator)
