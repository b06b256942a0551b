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

The grain classes behind the pipelines live in ``_checked_datasets``, which
imports grain at its top: the functions here import it when they run, so
importing ``tinax.data`` starts neither grain nor what grain imports (JAX,
Orbax, array-record).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from tinax._core.validation import (
    fail_value,
    is_non_python_int,
    reported_as_both,
    require_bool,
    require_callable,
    require_instance,
    require_int,
    require_optional_positive_int,
    require_positive_int,
)
from tinax._data._compat02 import TooManyBatchesError, _TooManyBatchesAfterWideningError
from tinax._data._pipeline_states import in_process_description
from tinax._data._source_identity import find_file_set, find_source_id

if TYPE_CHECKING:
    from grain import MapDataset
    from grain.sharding import ShardOptions

__all__ = [
    "BatchTransform",
    "TooManyBatchesError",
    "evaluation_batches",
    "find_pipeline_description",
    "shard_options_fields",
    "training_batches",
]

T = TypeVar("T")
BatchT = TypeVar("BatchT")

BatchTransform: TypeAlias = Callable[[Sequence[T]], BatchT]
"""Turns the records of one batch (a sequence of up to ``batch_size`` records)
into the batch the pipeline yields, for example by stacking arrays."""


def _widened(shard_options: object, *values: object) -> bool:
    """Whether an argument (or a shard field) is a NumPy integer, which 0.3 accepts and tinax 0.2 refused."""
    fields = (getattr(shard_options, "shard_index", None), getattr(shard_options, "shard_count", None))
    return any(is_non_python_int(value) for value in (*fields, *values))


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

    Every process builds the same seeded order of each epoch, truncates it to
    whole global batches of ``shard_count * batch_size`` rows, takes its own
    contiguous block and batches it with ``batch_fn``, so all processes run the
    same number of full steps. The same arguments give bit-identical batches in
    every run and process, the same as tinax 0.2's. ``shuffle_window`` replaces
    the global shuffle by a row-group window shuffle for large Parquet files.
    The iterator's state describes the pipeline, and restoring it into another
    pipeline is a ValueError; :func:`redeal_state` converts the states of a
    run for another number of processes. The data user guide's sections "How
    training batches are built", "Window shuffle for large Parquet files" and
    "What a restored state must match" give the details.

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
        number of row groups per window of the window shuffle (each epoch
        shuffles the order of the row groups, then the rows within each
        window of that many row groups). It needs ``shuffle=True`` and a ``dataset`` that
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
        can count, a :class:`TooManyBatchesError`, also the OverflowError
        tinax 0.2 raised on ``len()``; the message gives the largest
        ``num_epochs``), ``dataset`` is infinite
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
    # The checks run in tinax 0.2's order, so that a call with several bad
    # arguments fails with the same exception type; after an argument 0.2
    # refused and 0.3 accepts (a NumPy integer), a later refusal is both types.
    widened = _widened(shard_options, batch_size, seed, num_epochs)
    with reported_as_both(widened):
        _require_dataset(dataset)
        shard = shard_options_fields(shard_options)
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
            error_type = _TooManyBatchesAfterWideningError if widened else TooManyBatchesError
            raise error_type(
                f"num_epochs must be at most {limit} for {epoch_batches} batches per epoch (grain counts batches "
                f"in fewer than sys.maxsize = {sys.maxsize}), got {num_epochs}; pass None to repeat forever"
            )
        # grain's shuffle refuses a negative seed; 0.2 met that refusal here,
        # after every other check.
        if shuffle and seed < 0:
            fail_value("seed", "a non-negative int when shuffling", seed)
    blocks = None
    if shuffle_window is not None:
        shuffle_window = require_positive_int(shuffle_window, "shuffle_window")
        if not shuffle:
            fail_value("shuffle_window", "None when shuffle is False", shuffle_window)
        blocks = _row_group_ends(dataset)
    from tinax._data._checked_datasets import CheckedMapDataset, EpochRows, WindowShuffleMapDataset
    from tinax._data._direct_reads import DirectBatchMapDataset
    from tinax._data._planned_reads import batch_positions
    from tinax._data._reader_datasets import record_source_of

    ordered = dataset.seed(seed)
    if blocks is not None:
        assert shuffle_window is not None
        ordered = WindowShuffleMapDataset(ordered, seed=seed, block_ends=blocks, window=shuffle_window)
    elif shuffle:
        ordered = ordered.shuffle()
    row_slices = (slice(0, usable), slice(start, start + per_shard))
    rows = ordered.slice(row_slices[0]).slice(row_slices[1])
    # grain's own batch, reading each batch's rows with one call down the chain;
    # under the global shuffle of a Parquet reader, from reads planned ahead.
    batches = None
    if shuffle and blocks is None:
        from tinax._data._planned_reads import shuffled_batches

        batches = shuffled_batches(
            dataset,
            ordered,
            rows,
            seed=seed,
            row_slices=row_slices,
            batch_size=batch_size,
            batch_fn=batch_fn,
            num_epochs=num_epochs,
        )
    if batches is None:
        # grain's own batch, each batch's rows read from the source at positions computed at once.
        order = "none" if not shuffle else "window" if blocks is not None else "shuffle"
        positions = batch_positions(dataset, ordered, rows, seed=seed, row_slices=row_slices, order=order)
        batches = DirectBatchMapDataset(
            rows,
            batch_size,
            drop_remainder=True,
            batch_fn=batch_fn,
            positions=positions,
            source=record_source_of(dataset),
        )
    batched = batches.repeat(num_epochs, reseed_each_epoch=True)
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
    _describe_files(description, dataset)
    return CheckedMapDataset(
        batched,
        in_process_description(description),
        default_read_options=_default_read_options(dataset, batch_fn),
        epoch_rows=EpochRows(ordered, batch_fn),
    )


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
    with reported_as_both(_widened(shard_options, batch_size)):
        _require_dataset(dataset)
        shard = shard_options_fields(shard_options)
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
    from tinax._data._direct_reads import DirectBatchMapDataset
    from tinax._data._planned_reads import batch_positions
    from tinax._data._reader_datasets import record_source_of

    # grain's own batch, each batch's rows read from the source at positions computed at once.
    row_slice = slice(start, stop)
    shard_rows = dataset.slice(row_slice)
    positions = batch_positions(dataset, dataset, shard_rows, seed=None, row_slices=(row_slice,), order="none")
    batched = DirectBatchMapDataset(
        shard_rows,
        batch_size,
        drop_remainder=False,
        batch_fn=batch_fn,
        positions=positions,
        source=record_source_of(dataset),
    )
    description = {
        "kind": "evaluation_batches",
        "source_id": find_source_id(dataset),
        "num_rows": total,
        **shard,
        "batch_size": batch_size,
    }
    _describe_files(description, dataset)
    from tinax._data._checked_datasets import CheckedMapDataset

    return CheckedMapDataset(
        batched, in_process_description(description), default_read_options=_default_read_options(dataset, batch_fn)
    )


def _describe_files(description: dict[str, Any], dataset: Any) -> None:
    """Adds the files of a dataset of many files to a pipeline's description, so a state names what it read."""
    files = find_file_set(dataset)
    if files is not None:
        # Only then: the states of pipelines over one file stay as they were.
        description["files"] = files


def _default_read_options(dataset: Any, batch_fn: Any) -> Any:
    """The read options a pipeline over ``dataset`` iterates with when given none, or None for Grain's."""
    from tinax._data._checked_datasets import IN_TURN_READ_OPTIONS, STACKED_READ_OPTIONS
    from tinax._data._reader_datasets import record_source_of
    from tinax._data._stacking import stacks_columns

    # Only the reader's own dataset: a transformation in front may wait on anything.
    source = record_source_of(dataset)
    if getattr(source, "reads_in_turn", False):
        return STACKED_READ_OPTIONS if stacks_columns(batch_fn) else IN_TURN_READ_OPTIONS
    if stacks_columns(batch_fn) and hasattr(source, "stacked_at"):
        # An ArrayRecord reader's batches of stack_records come from its fields held whole, or are decoded
        # a block of records at a time: handing them over from grain's threads costs more than they do.
        return STACKED_READ_OPTIONS
    return None


def _row_group_ends(dataset: Any) -> tuple[int, ...]:
    from tinax._data._parquet_source import ParquetRecordSource
    from tinax._data._reader_datasets import record_source_of

    source = record_source_of(dataset)
    if not isinstance(source, ParquetRecordSource):
        fail_value(
            "dataset",
            "the dataset read_parquet_record returned (its row groups are the blocks of the window shuffle) "
            "when shuffle_window is given",
            dataset,
        )
    return source.row_group_ends


def _require_dataset(dataset: object) -> None:
    import grain

    require_instance(dataset, "dataset", grain.MapDataset, "a grain.MapDataset")


def _require_finite(dataset: Any) -> int:
    total = len(dataset)
    # grain gives infinite datasets (an unbounded repeat) the length sys.maxsize.
    if total >= sys.maxsize:
        raise ValueError(
            "dataset must be one finite epoch of rows, got an infinite dataset (an unbounded repeat?); "
            "pass num_epochs to training_batches instead of repeating the dataset"
        )
    return total


def shard_options_fields(shard_options: object) -> dict[str, Any]:
    """Checks a ``grain.sharding.ShardOptions`` and returns its index, count and ``drop_remainder``."""
    from grain.sharding import ShardOptions

    options = require_instance(shard_options, "shard_options", ShardOptions, "a grain.sharding.ShardOptions")
    # ShardOptions checks the range of its fields but not their types.
    count = require_positive_int(options.shard_count, "shard_options.shard_count")
    index = require_int(options.shard_index, "shard_options.shard_index", minimum=0, maximum=count - 1)
    drop_remainder = require_bool(options.drop_remainder, "shard_options.drop_remainder")
    return {"shard_index": index, "shard_count": count, "drop_remainder": drop_remainder}


def find_pipeline_description(dataset: Any) -> dict[str, Any] | None:
    """Returns the description of the tinax pipeline under a grain dataset, if any.

    Args:
      dataset: A grain ``MapDataset`` or ``IterDataset``.

    Returns:
      A copy of the description of the nearest pipeline dataset made by
      :func:`training_batches` or :func:`evaluation_batches` on the way down
      ``dataset``'s parents, or None if there is none.
    """
    from tinax._data._checked_datasets import CheckedIterDataset, CheckedMapDataset

    pending: list[Any] = [dataset]
    while pending:
        node = pending.pop(0)
        if isinstance(node, (CheckedMapDataset, CheckedIterDataset)):
            return dict(node.pipeline_description)
        pending.extend(getattr(node, "parents", ()))
    return None
