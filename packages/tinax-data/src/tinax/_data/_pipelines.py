"""Deterministic, process-aware training and evaluation batches whose iterator states check themselves.

Both pipelines are plain grain ``MapDataset`` chains (seed, shuffle, slice,
batch, repeat) under one thin dataset that describes them. The chains are the
ones tinax 0.2 built, call for call, so the same arguments give the same
batches, in the same order, as 0.2 gave. Iterating the describing dataset
yields a real ``grain.DatasetIterator`` whose state is the grain state plus
the description (source identity, row count, seed, shards, batch size, worker
count), so restoring the state of another pipeline fails with a ValueError
naming the field that differs instead of silently resuming somewhere else. A
bare grain state, as tinax 0.2's iterators saved it, carries no description:
it is handed to grain as it is.

grain may only be imported when a function runs, so the three grain subclasses
are defined on first use by :func:`pipeline_classes`. The dataset instances
pickle as a call to a module-level function that defines the classes in the
unpickling process first, which is how they reach grain's worker processes.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias, TypeVar

import numpy as np

from tinax._core.validation import (
    fail_type,
    fail_value,
    require_bool,
    require_callable,
    require_instance,
    require_int,
    require_optional_positive_int,
    require_positive_int,
)
from tinax._data._sources import find_source_id

if TYPE_CHECKING:
    from grain import DatasetIterator, IterDataset, MapDataset
    from grain.sharding import ShardOptions

__all__ = [
    "STATE_DESCRIPTION_KEY",
    "STATE_FORMAT",
    "STATE_GRAIN_KEY",
    "BatchTransform",
    "evaluation_batches",
    "find_pipeline_description",
    "pipeline_classes",
    "training_batches",
]

T = TypeVar("T")
BatchT = TypeVar("BatchT")

BatchTransform: TypeAlias = Callable[[Sequence[T]], BatchT]
"""Turns the records of one batch (a sequence of up to ``batch_size`` records)
into the batch the pipeline yields, for example by stacking arrays."""

#: Key of the pipeline description in an iterator state.
STATE_DESCRIPTION_KEY = "tinax_pipeline"
#: Key of grain's own iterator state in an iterator state.
STATE_GRAIN_KEY = "grain"
#: Version of the description. 2: the chains of tinax 0.2 (contiguous
#: per-process blocks of whole global batches, one shuffle per epoch).
STATE_FORMAT = 2
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
    bulk_batch: type[Any]
    window_shuffle: type[Any]


def training_batches(
    dataset: MapDataset[T],
    *,
    shard_options: ShardOptions,
    seed: int,
    shuffle: bool,
    num_epochs: int | None,
    batch_size: int,
    batch_fn: BatchTransform[T, BatchT],
    shuffle_window: int | None = None,
) -> MapDataset[BatchT]:
    """Builds the deterministic, per-process training batches of a dataset.

    Every process builds the same global order and takes its own contiguous
    block of it, so all processes run the same number of steps. With ``n``
    rows, ``shard_count`` processes and a global batch of ``shard_count *
    batch_size`` rows, the steps are:

    1. **Shuffle** (if ``shuffle``) all ``n`` rows with grain's index shuffle,
       as ``dataset.seed(seed).shuffle()`` does. Each epoch is shuffled again
       with its own seed derived from ``seed``, so every epoch has its own
       order.
    2. **Truncate** the epoch to whole global batches: its first
       ``n // (shard_count * batch_size) * shard_count * batch_size`` rows.
       The rows past that point (fewer than one global batch) are not used in
       that epoch; when shuffling, they are other rows in every epoch.
    3. **Shard.** Process ``shard_index`` takes the ``shard_index``-th of
       ``shard_count`` equal contiguous blocks of the truncated epoch. The
       blocks are disjoint, and each holds whole batches.
    4. **Batch** ``batch_size`` consecutive rows with ``batch_fn``. A batch
       never spans two epochs, and every batch is full.
    5. **Repeat** for ``num_epochs`` epochs, or forever for None.

    The same arguments give bit-identical batches in every run and process,
    and the same batches as tinax 0.2's ``training_batches``.

    **Window shuffle.** A global shuffle reads rows in an order unrelated to
    where they are stored, which is fast only when the data fits in memory
    (or in the Parquet reader's cache). For a larger Parquet file, pass
    ``shuffle_window=k`` (with ``shuffle=True``) to replace step 1 by a block
    shuffle: each epoch, the file's row groups are put in a new random order,
    consecutive runs of ``k`` of them form windows, and the rows of each
    window are shuffled among themselves. Each row group is then read once
    per epoch, and at most ``k`` of them are needed at a time, so the pass
    runs at about sequential speed when ``k`` row groups fit the reader's
    ``cache_bytes``. Steps 2 to 5, determinism, resume and process sharding
    are the same as for the global shuffle (every process takes its block of
    the same window-shuffled order). The trade-off: a batch draws its rows
    from at most a few windows, and rows of one row group stay near each
    other within an epoch, so data sorted or clustered on disk (by label,
    source or date) gives batches that are less mixed than a global shuffle
    gives. Write such data in a shuffled order, or use more rows per window.

    Iterate the returned dataset directly (``iter(batches)``) or through
    ``batches.to_iter_dataset()`` (for example to hand it to
    :func:`open_multiprocessing_iterator`). The iterator is a
    ``grain.DatasetIterator``: its ``get_state()`` is a JSON-serializable dict
    holding grain's state and a description of this pipeline, and Orbax saves
    it as a checkpointable. ``set_state`` on the iterator of a freshly built
    pipeline resumes exactly at the next batch, and refuses, with a ValueError
    naming each differing field, a state from a pipeline with another source
    identity, row count, seed, shuffle flag, shard index, shard count, batch
    size or worker count. ``num_epochs`` is not checked: resuming with more
    epochs is a legitimate way to train longer. A state saved by tinax 0.2
    (grain's state alone) has no description to check and is restored as it
    is. Transformations applied to the returned dataset (``.map``,
    ``.slice``, ...) build a plain grain pipeline whose states carry no
    description.

    Args:
      dataset: A finite ``grain.MapDataset`` holding one epoch of rows. When
        its data source has a ``source_id`` (an :class:`InMemorySource`, a
        tinax record reader, a split of one, or any data source with that
        attribute), iterator states record it and restores check it.
      shard_options: This process's shard, for example
        ``grain.sharding.ShardByJaxProcess(drop_remainder=True)`` (built after
        ``jax.distributed.initialize``) or
        ``grain.sharding.ShardOptions(shard_index, shard_count,
        drop_remainder=True)``. ``drop_remainder`` must be True: every
        process must run the same number of steps.
      seed: The shuffle seed, an int. Required even when ``shuffle`` is False;
        when shuffling, grain requires it to be non-negative.
      shuffle: Whether to shuffle each epoch. False keeps dataset order, the
        same in every epoch.
      num_epochs: A positive number of passes over the dataset, or None to
        repeat forever.
      batch_size: The number of rows per batch on this process, at least 1.
      batch_fn: Called with the list of a batch's rows; its return value is
        the batch. It must be picklable (a module-level function, for
        example) to be used with worker processes.
      shuffle_window: None (the default) for the global shuffle, or the
        number of row groups per window of the window shuffle described
        above. It needs ``shuffle=True`` and a ``dataset`` that
        :func:`read_parquet_record` returned (its row groups are the blocks).

    Returns:
      A random-access ``grain.MapDataset`` of batches. Its length is the
      number of batches; with ``num_epochs=None`` it is effectively infinite
      (grain reports ``sys.maxsize``).

    Raises:
      TypeError: If ``dataset`` is not a ``grain.MapDataset``,
        ``shard_options`` is not a ``grain.sharding.ShardOptions`` (or holds
        non-int or non-bool fields), ``seed``, ``num_epochs`` or
        ``batch_size`` is not an int (bools included), ``shuffle`` is not a
        bool, or ``batch_fn`` is not callable.
      ValueError: If ``shard_options.drop_remainder`` is not True,
        ``num_epochs`` or ``batch_size`` is below 1, ``num_epochs`` times the
        batches of one epoch reaches ``sys.maxsize`` (more batches than grain
        can count; the message gives the largest ``num_epochs``), ``dataset`` is infinite
        (not one finite epoch), it holds fewer rows than one global batch,
        ``shuffle`` is True and ``seed`` is negative, or ``dataset`` cannot be
        batched (grain refuses to batch after a ``filter``); or
        ``shuffle_window`` is below 1, given with ``shuffle=False``, or given
        for a dataset that is not a Parquet reader's.

    Examples:
      >>> import grain
      >>> from tinax.data import InMemorySource, training_batches
      >>> dataset = grain.MapDataset.source(InMemorySource([{"x": i} for i in range(10)], source_id="demo-v1"))
      >>> def collate(rows):
      ...     return [row["x"] for row in rows]
      >>> one_process = grain.sharding.ShardOptions(0, 1, drop_remainder=True)
      >>> batches = training_batches(
      ...     dataset, shard_options=one_process, seed=0, shuffle=False, num_epochs=1, batch_size=4, batch_fn=collate
      ... )
      >>> list(batches)  # rows 8 and 9 do not fill a batch
      [[0, 1, 2, 3], [4, 5, 6, 7]]
    """
    grain = _require_dataset(dataset)
    # The checks run in tinax 0.2's order, so that a call with several bad
    # arguments fails with the same exception type.
    shard = _shard_options_fields(shard_options, grain)
    if not shard["drop_remainder"]:
        fail_value(
            "shard_options.drop_remainder",
            "True for training, so that every process runs the same number of steps",
            shard["drop_remainder"],
        )
    batch_size = require_positive_int(batch_size, "batch_size")
    seed = require_int(seed, "seed")
    require_bool(shuffle, "shuffle")
    num_epochs = require_optional_positive_int(num_epochs, "num_epochs")
    require_callable(batch_fn, "batch_fn")
    total = _require_finite(dataset)
    global_batch = shard["shard_count"] * batch_size
    usable = total // global_batch * global_batch
    if usable == 0:
        raise ValueError(
            f"dataset must hold at least one complete global batch of {global_batch} rows "
            f"({shard['shard_count']} shards of batch_size {batch_size}), got {total} rows"
        )

    per_shard = usable // shard["shard_count"]
    start = shard["shard_index"] * per_shard
    # grain's lengths are index-sized ints, and it reserves sys.maxsize for an
    # endless repeat: more batches than that overflow inside grain.
    epoch_batches = per_shard // batch_size
    if num_epochs is not None and num_epochs * epoch_batches >= sys.maxsize:
        limit = (sys.maxsize - 1) // epoch_batches
        raise ValueError(
            f"num_epochs must be at most {limit} for {epoch_batches} batches per epoch (grain counts batches "
            f"in fewer than sys.maxsize = {sys.maxsize}), got {num_epochs}; pass None to repeat forever"
        )
    blocks = None
    if shuffle_window is not None:
        shuffle_window = require_positive_int(shuffle_window, "shuffle_window")
        if not shuffle:
            fail_value("shuffle_window", "None when shuffle is False", shuffle_window)
        blocks = _row_group_ends(dataset)
        if seed < 0:
            fail_value("seed", "a non-negative int when shuffling", seed)
    classes = pipeline_classes()
    rows = dataset.seed(seed)
    if blocks is not None:
        assert shuffle_window is not None
        rows = classes.window_shuffle(rows, seed=seed, block_ends=blocks, window=shuffle_window)
    elif shuffle:
        rows = rows.shuffle()
    rows = rows.slice(slice(0, usable)).slice(slice(start, start + per_shard))
    # grain's own batch, reading each batch's rows with one call down the chain.
    batched = classes.bulk_batch(rows, batch_size, drop_remainder=True, batch_fn=batch_fn).repeat(
        num_epochs, reseed_each_epoch=True
    )
    description = {
        "kind": "training_batches",
        "source_id": find_source_id(dataset),
        "num_rows": total,
        "seed": seed,
        "shuffle": shuffle,
        **shard,
        "batch_size": batch_size,
    }
    if shuffle_window is not None:
        # Only then: the states of the default pipeline stay 0.2's and 0.3's.
        description["shuffle_window"] = shuffle_window
    return pipeline_classes().map_dataset(batched, _with_workers(description, 0, sequential_slice=False))


def evaluation_batches(
    dataset: MapDataset[T],
    *,
    shard_options: ShardOptions,
    batch_size: int,
    batch_fn: BatchTransform[T, BatchT],
) -> MapDataset[BatchT]:
    """Builds this process's evaluation batches: every row once, in order.

    The dataset is cut into ``shard_count`` contiguous blocks whose sizes
    differ by at most one row (the first ``n % shard_count`` blocks hold one
    more), and this process batches block ``shard_index`` in order with
    ``batch_fn``. It never shuffles, repeats, pads or drops: the last batch
    holds the remaining rows, possibly fewer than ``batch_size``, and a block
    without rows gives no batches. Processes may therefore run different
    numbers of steps; read in process order, the blocks are the dataset.

    Iteration, iterator state, Orbax saving and the restore checks work as for
    :func:`training_batches` (the checked fields are the source identity, row
    count, shard index and count, batch size and worker count).

    Args:
      dataset: A finite ``grain.MapDataset`` of the rows to evaluate; see
        :func:`training_batches` for source identities.
      shard_options: This process's shard. ``drop_remainder`` must be False:
        evaluation sees every row.
      batch_size: The number of rows per batch, at least 1.
      batch_fn: Called with the list of a batch's rows; its return value is
        the batch.

    Returns:
      A random-access ``grain.MapDataset`` of ``ceil(block rows /
      batch_size)`` batches.

    Raises:
      TypeError: If ``dataset`` is not a ``grain.MapDataset``,
        ``shard_options`` is not a ``grain.sharding.ShardOptions`` (or holds
        non-int or non-bool fields), ``batch_size`` is not an int (bools
        included), or ``batch_fn`` is not callable.
      ValueError: If ``shard_options.drop_remainder`` is not False,
        ``batch_size`` is below 1, ``dataset`` is infinite, or it cannot be
        batched (grain refuses to batch after a ``filter``).

    Examples:
      >>> import grain
      >>> from tinax.data import InMemorySource, evaluation_batches
      >>> dataset = grain.MapDataset.source(InMemorySource([{"x": i} for i in range(10)], source_id="demo-v1"))
      >>> def collate(rows):
      ...     return [row["x"] for row in rows]
      >>> one_process = grain.sharding.ShardOptions(0, 1)
      >>> list(evaluation_batches(dataset, shard_options=one_process, batch_size=4, batch_fn=collate))
      [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    """
    grain = _require_dataset(dataset)
    shard = _shard_options_fields(shard_options, grain)
    if shard["drop_remainder"]:
        fail_value(
            "shard_options.drop_remainder",
            "False for evaluation, which never drops rows",
            shard["drop_remainder"],
        )
    batch_size = require_positive_int(batch_size, "batch_size")
    require_callable(batch_fn, "batch_fn")
    total = _require_finite(dataset)

    index, count = shard["shard_index"], shard["shard_count"]
    base, extra = divmod(total, count)
    start = index * base + min(index, extra)
    stop = start + base + (1 if index < extra else 0)
    batched = dataset.slice(slice(start, stop)).batch(batch_size, drop_remainder=False, batch_fn=batch_fn)
    description = {
        "kind": "evaluation_batches",
        "source_id": find_source_id(dataset),
        "num_rows": total,
        **shard,
        "batch_size": batch_size,
    }
    return pipeline_classes().map_dataset(batched, _with_workers(description, 0, sequential_slice=False))


def _row_group_ends(dataset: Any) -> tuple[int, ...]:
    from tinax._data._datasets import RecordSourceMapDataset
    from tinax._data._parquet import ParquetRecordSource

    source = getattr(dataset, "_source", None) if type(dataset) is RecordSourceMapDataset else None
    if type(source) is not ParquetRecordSource:
        fail_value(
            "dataset",
            "the dataset read_parquet_record returned (its row groups are the blocks of the window shuffle) "
            "when shuffle_window is given",
            dataset,
        )
    return source.row_group_ends


def _require_dataset(dataset: object) -> Any:
    import grain

    require_instance(dataset, "dataset", grain.MapDataset, "a grain.MapDataset")
    return grain


def _require_finite(dataset: Any) -> int:
    total = len(dataset)
    # grain gives infinite datasets (an unbounded repeat) the length sys.maxsize.
    if total >= sys.maxsize:
        raise ValueError(
            "dataset must be one finite epoch of rows, got an infinite dataset (an unbounded repeat?); "
            "pass num_epochs to training_batches instead of repeating the dataset"
        )
    return total


def _shard_options_fields(shard_options: object, grain: Any) -> dict[str, Any]:
    options = require_instance(
        shard_options, "shard_options", grain.sharding.ShardOptions, "a grain.sharding.ShardOptions"
    )
    # ShardOptions checks the range of its fields but not their types.
    count = require_positive_int(options.shard_count, "shard_options.shard_count")
    index = require_int(options.shard_index, "shard_options.shard_index", minimum=0, maximum=count - 1)
    drop_remainder = require_bool(options.drop_remainder, "shard_options.drop_remainder")
    return {"shard_index": index, "shard_count": count, "drop_remainder": drop_remainder}


def _with_workers(description: Mapping[str, Any], num_workers: int, *, sequential_slice: bool) -> dict[str, Any]:
    return {
        **description,
        "num_workers": num_workers,
        "sequential_slice": sequential_slice,
        "state_format": STATE_FORMAT,
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


def check_state(state: object, expected: Mapping[str, Any], *, length: int | None = None) -> Any:
    """Checks that an iterator state belongs to the described pipeline and is well formed.

    The check is as strict as the checkpoint loaders': every key is known,
    every count is an int (never a bool or a float), and every index is in
    range, so a tampered state is refused before grain sees any of it.

    Args:
      state: What ``set_state`` received.
      expected: The description of the pipeline being restored.
      length: The number of elements of the iterator being restored, when
        known: the largest ``next_index`` a single-process state may hold.

    Returns:
      grain's part of the state, to hand to the grain iterator (a checked
      copy). A state without a description (grain's own state, as tinax 0.2
      saved it) is grain's part as a whole: there is no description to
      compare, but its form is checked all the same.

    Raises:
      TypeError: If ``state`` or a part of it is not a mapping, or a count or
        index in it is not an int (bools and floats included).
      ValueError: If its description differs from ``expected`` (the message
        names every differing field), it has keys a state never has or lacks
        one it always has, or an index is out of range; the message names
        the field.
    """
    if not isinstance(state, Mapping):
        fail_type("state", "a dict returned by get_state() of a grain or tinax pipeline iterator", state)
    num_workers = expected.get("num_workers", 0)
    if STATE_DESCRIPTION_KEY not in state:
        return _checked_grain_state(state, "state", num_workers, length)
    saved = state[STATE_DESCRIPTION_KEY]
    if not isinstance(saved, Mapping) or STATE_GRAIN_KEY not in state:
        keys = ", ".join(repr(key) for key in state)
        raise ValueError(
            f"state must hold a {STATE_DESCRIPTION_KEY!r} mapping and a {STATE_GRAIN_KEY!r} entry, as states from "
            f"get_state() of a tinax pipeline iterator do, got a state with keys [{keys}]"
        )
    _refuse_unknown_keys(state, "state", (STATE_DESCRIPTION_KEY, STATE_GRAIN_KEY))
    fields = set(saved) | set(expected)
    ordered = [name for name in _FIELD_ORDER if name in fields] + sorted(fields.difference(_FIELD_ORDER), key=str)
    missing = "<absent>"
    differences = [
        f"{name} is {saved.get(name, missing)!r} in the state but {expected.get(name, missing)!r} here"
        for name in ordered
        if not _same_value(saved.get(name, missing), expected.get(name, missing))
    ]
    if differences:
        raise ValueError(
            "state must come from a pipeline built with the same arguments, got one that differs: "
            + "; ".join(differences)
        )
    return _checked_grain_state(state[STATE_GRAIN_KEY], f"state[{STATE_GRAIN_KEY!r}]", num_workers, length)


def _same_value(saved: object, expected: object) -> bool:
    # 7.0 == 7 and True == 1 in Python; a state holding either was tampered with.
    return type(saved) is type(expected) and saved == expected


# The keys of the state of grain's multiprocess prefetch (an interleave over one
# dataset per worker).
_WORKER_STATE_KEYS = (
    "next_index_in_cycle",
    "next_index_in_datasets",
    "iterators_in_use_indices",
    "iterators_in_use_states",
    "exhausted",
    "future_states",
)


def _refuse_unknown_keys(part: Mapping[Any, Any], where: str, known: Sequence[str]) -> None:
    unknown = [key for key in part if key not in known]
    if unknown:
        raise ValueError(
            f"{where} must hold only the keys {list(known)} of a saved iterator state, "
            f"got the unknown key {unknown[0]!r}"
        )
    absent = [key for key in known if key not in part]
    if absent:
        raise ValueError(
            f"{where} must hold the keys {list(known)} of a saved iterator state, but has no key {absent[0]!r}"
        )


def _checked_index(value: object, where: str, minimum: int, maximum: int | None) -> int:
    # Exact ints only: NumPy integers never occur in a saved state, and a float
    # or bool that happens to equal an int is a tampered state.
    if type(value) is not int:
        fail_type(where, "an int", value)
    return require_int(value, where, minimum=minimum, maximum=maximum)


def _checked_grain_state(part: object, where: str, num_workers: object, length: int | None) -> dict[str, Any]:
    """Checks grain's part of an iterator state and returns a copy for grain."""
    if not isinstance(part, Mapping):
        fail_type(where, "a mapping, as grain's iterator states are", part)
    if type(num_workers) is not int or num_workers <= 0:
        _refuse_unknown_keys(part, where, ("next_index",))
        maximum = length if length is not None and length < sys.maxsize else None
        return {"next_index": _checked_index(part["next_index"], f"{where}['next_index']", 0, maximum)}
    _refuse_unknown_keys(part, where, _WORKER_STATE_KEYS)
    checked: dict[str, Any] = {
        "next_index_in_cycle": _checked_index(
            part["next_index_in_cycle"], f"{where}['next_index_in_cycle']", 0, num_workers - 1
        ),
        "next_index_in_datasets": _checked_index(
            part["next_index_in_datasets"], f"{where}['next_index_in_datasets']", 0, num_workers
        ),
    }
    lists: dict[str, list[Any]] = {}
    for key in ("iterators_in_use_indices", "iterators_in_use_states", "exhausted"):
        value = part[key]
        if not isinstance(value, (list, tuple)):
            fail_type(f"{where}[{key!r}]", f"a list of {num_workers} entries, one per worker", value)
        if len(value) != num_workers:
            fail_value(f"{where}[{key!r}]", f"a list of {num_workers} entries, one per worker", value)
        lists[key] = list(value)
    checked["iterators_in_use_indices"] = [
        _checked_index(value, f"{where}['iterators_in_use_indices'][{position}]", 0, num_workers - 1)
        for position, value in enumerate(lists["iterators_in_use_indices"])
    ]
    checked["iterators_in_use_states"] = [
        _checked_worker_state(value, f"{where}['iterators_in_use_states'][{position}]")
        for position, value in enumerate(lists["iterators_in_use_states"])
    ]
    checked["exhausted"] = [
        _checked_index(value, f"{where}['exhausted'][{position}]", 0, 1)
        for position, value in enumerate(lists["exhausted"])
    ]
    future = part["future_states"]
    if not isinstance(future, Mapping):
        fail_type(f"{where}['future_states']", "a mapping of worker states", future)
    checked["future_states"] = {
        key: _checked_worker_state(value, f"{where}['future_states'][{key!r}]") for key, value in future.items()
    }
    return checked


def _checked_worker_state(part: object, where: str) -> Any:
    """Checks the state of one worker's iterator (None or {} when it has none)."""
    if part is None:
        return None
    if not isinstance(part, Mapping):
        fail_type(where, "a mapping, as grain's iterator states are, or None", part)
    if not part:
        return {}
    if STATE_DESCRIPTION_KEY not in part:
        # The state of whatever grain iterator the worker runs (a dataset
        # built on a tinax pipeline need not be one): its keys depend on that
        # iterator, so only the index every such state shares is checked.
        checked = dict(part)
        if "next_index" in checked:
            checked["next_index"] = _checked_index(checked["next_index"], f"{where}['next_index']", 0, None)
        return checked
    _refuse_unknown_keys(part, where, (STATE_DESCRIPTION_KEY, STATE_GRAIN_KEY))
    description = part[STATE_DESCRIPTION_KEY]
    if not isinstance(description, Mapping):
        fail_type(f"{where}[{STATE_DESCRIPTION_KEY!r}]", "a mapping describing the pipeline", description)
    # The worker's own iterator compares the description when it restores.
    return {
        STATE_DESCRIPTION_KEY: dict(description),
        STATE_GRAIN_KEY: _checked_grain_state(part[STATE_GRAIN_KEY], f"{where}[{STATE_GRAIN_KEY!r}]", 0, None),
    }


def _new_instance(name: str) -> Any:
    """Unpickles a pipeline dataset: an empty instance, whose attributes pickle then sets."""
    cls = getattr(pipeline_classes(), name)
    return cls.__new__(cls)


@functools.cache
def pipeline_classes() -> PipelineClasses:
    """Defines the grain subclasses behind the pipelines (once, importing grain).

    The two datasets *stand in* for a grain dataset rather than wrap it: each
    holds the dataset it replaces, takes over that dataset's parents and
    hands every read to it. So the dataset graph keeps its depth, and grain's
    default seeds, which depend on how far a random transformation sits above
    a ``seed()``, come out as they do for the bare grain chain (and as they
    did in tinax 0.2, which returned that chain).

    Returns:
      The dataset, iterable dataset and iterator classes.
    """
    import grain

    class CheckedMapDataset(grain.MapDataset):  # type: ignore[misc]
        """Stands in for a grain MapDataset; its iterators carry and check a pipeline description."""

        def __init__(self, replaced: MapDataset[Any], description: Mapping[str, Any]) -> None:
            super().__init__(list(replaced.parents))
            self._replaced = replaced
            self._description = dict(description)

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
            return self._replaced._getitems(indices)

        def to_iter_dataset(self, read_options: Any = None, *, allow_nones: bool = False) -> IterDataset[Any]:
            replaced = self._replaced.to_iter_dataset(read_options, allow_nones=allow_nones)
            return CheckedIterDataset(replaced, self._description)

        def __str__(self) -> str:
            return f"CheckedMapDataset(kind={self._description.get('kind')!r}, replacing {self._replaced})"

        def __reduce__(self) -> tuple[Any, ...]:
            return (_new_instance, ("map_dataset",), self.__dict__.copy())

    class CheckedIterDataset(grain.IterDataset):  # type: ignore[misc]
        """Stands in for a grain IterDataset; its iterators carry and check a pipeline description."""

        def __init__(self, replaced: IterDataset[Any], description: Mapping[str, Any]) -> None:
            super().__init__(list(replaced.parents))
            self._replaced = replaced
            self._description = dict(description)

        @property
        def pipeline_description(self) -> dict[str, Any]:
            return self._description

        def __iter__(self) -> DatasetIterator[Any]:
            return CheckedIterator(self._replaced.__iter__(), self._description)

        def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
            # grain's worker processes each read a slice; the replaced dataset
            # (grain's prefetch over the MapDataset) knows how to take it.
            self._replaced.set_slice(sl, sequential_slice)

        def __str__(self) -> str:
            return f"CheckedIterDataset(kind={self._description.get('kind')!r}, replacing {self._replaced})"

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
            # grain's single-process iterator knows its length; it checks the
            # upper bound only after taking the index, so tinax checks first.
            length = getattr(self._parent, "_dataset_length", None)
            checked = check_state(state, self._description, length=length if type(length) is int else None)
            self._parent.set_state(copy.deepcopy(checked))

        def _get_next_index(self) -> int:
            return self._parent._get_next_index()  # type: ignore[no-any-return]

        def _set_next_index(self, index: int) -> None:
            self._parent._set_next_index(index)

        def __str__(self) -> str:
            return f"CheckedIterator(kind={self._description.get('kind')!r})"

    batch_class: type[Any] = type(grain.MapDataset.range(1).batch(1))

    class BulkBatchMapDataset(batch_class):  # type: ignore[misc]
        """grain's batch, reading the rows of a batch with one ``_getitems`` call.

        Every grain dataset's ``_getitems`` gives what indexing each position
        gives, so the batches are the same; a record source that reads many
        records at once (the Parquet reader) skips grain's per-row overhead.
        """

        @functools.cached_property
        def _get_parent_items_fn(self) -> Callable[[range], Any]:
            parent = self._parent
            return lambda items: parent._getitems(list(items))

        def __reduce__(self) -> tuple[Any, ...]:
            state = self.__dict__.copy()
            state.pop("_get_parent_items_fn", None)  # A closure, made again on first use.
            return (_new_instance, ("bulk_batch",), state)

    class WindowShuffleMapDataset(grain.MapDataset):  # type: ignore[misc]
        """The window shuffle of :func:`training_batches`, one new order per epoch.

        Positions past the first epoch are later epochs, as for grain's
        shuffle, so ``repeat`` gives each epoch its own order.
        """

        def __init__(self, parent: MapDataset[Any], *, seed: int, block_ends: Sequence[int], window: int) -> None:
            super().__init__(parent)
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
            return self._parent[self._position(index)]

        def _getitems(self, indices: Sequence[int]) -> Any:
            wanted = np.asarray(indices, dtype=np.int64)
            epochs, positions = np.divmod(wanted, self._length)
            found = np.empty(len(wanted), dtype=np.int64)
            for epoch in dict.fromkeys(epochs.tolist()):
                chosen = epochs == epoch
                found[chosen] = self._plan(epoch).rows(positions[chosen]) + epoch * self._length
            return self._parent._getitems(found.tolist())

        def __reduce__(self) -> tuple[Any, ...]:
            state = self.__dict__.copy()
            state["_plans"] = {}
            return (_new_instance, ("window_shuffle",), state)

    return PipelineClasses(
        CheckedMapDataset, CheckedIterDataset, CheckedIterator, BulkBatchMapDataset, WindowShuffleMapDataset
    )


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
        self._window = window
        self._seed = seed
        self._epoch = epoch
        # Grain's prefetch threads read several batches at once: windows are
        # computed under a lock, and each is an immutable (start, stop, rows).
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
        for window in dict.fromkeys(windows.tolist()):
            chosen = windows == window
            start, _, rows = self._window_rows(window)
            found[chosen] = rows[positions[chosen] - start]
        return found

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


def _permutation(size: int, seed: int) -> np.ndarray[Any, Any]:
    """A permutation of ``range(size)`` from a 32-bit seed, the same with every NumPy version.

    The positions are sorted by a SplitMix64 hash of (seed, position): plain
    integer arithmetic, so the order never depends on a library's generator.
    """
    with np.errstate(over="ignore"):
        keys = np.arange(size, dtype=np.uint64) + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
        keys = (keys ^ (keys >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        keys = (keys ^ (keys >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        keys ^= keys >> np.uint64(31)
    return np.argsort(keys, kind="stable")


def _derived_seed(seed: int, epoch: int, stream: int) -> int:
    """A 32-bit seed for one shuffle of one epoch, the same on every platform."""
    digest = hashlib.sha256(f"tinax.window_shuffle:{seed}:{epoch}:{stream}".encode()).digest()
    return int.from_bytes(digest[:4], "little")
