"""Deterministic, process-aware training and evaluation batches whose iterator states check themselves.

Both are grain ``MapDataset`` chains built call for call as tinax 0.2 built them
(same batches, same order), under one thin dataset that describes the pipeline;
its iterator's state carries that description, so restoring another pipeline's
state is a ValueError. A bare 0.2 state is handed to grain as it is. The grain
classes live in ``_checked_datasets``, imported only when a function runs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from tinax._core._compat02 import ValueOverflowError, also_raised_as
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
from tinax._data._pipelines._pipeline_states import in_process_description
from tinax._data._records._source_identity import find_file_set, find_source_id

if TYPE_CHECKING:
    from grain import MapDataset
    from grain.sharding import ShardOptions

__all__ = [
    "BatchTransform",
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

    Every process builds the same seeded order of each epoch, truncates it to whole
    global batches of ``shard_count * batch_size`` rows, takes its own contiguous
    block and batches it with ``batch_fn``: all processes run the same number of
    steps, with batches identical to tinax 0.2's. The iterator state describes the
    pipeline; :func:`redeal_state` converts states for another number of processes.
    See the data guide, "How training batches are built", "Window shuffle for large
    Parquet files" and "What a restored state must match".

    Args:
      dataset: A finite ``grain.MapDataset`` of one epoch of rows; a ``source_id``
        on its data source is recorded in states and checked on restore.
      shard_options: This process's shard, such as
        ``grain.sharding.ShardByJaxProcess(drop_remainder=True)``;
        ``drop_remainder`` must be True.
      seed: The shuffle seed, an int (required even without shuffling;
        non-negative when shuffling).
      shuffle: Whether to shuffle each epoch; False keeps dataset order.
      num_epochs: A positive number of passes, or None to repeat forever.
      batch_size: The rows per batch on this process, at least 1.
      batch_fn: Turns the list of a batch's rows into the batch; picklable for
        worker processes.
      shuffle_window: None for the global shuffle, or the row groups per window of
        the window shuffle (needs ``shuffle=True`` and a dataset
        :func:`read_parquet_record` returned).

    Returns:
      A random-access ``grain.MapDataset`` of batches (length ``sys.maxsize`` with
      ``num_epochs=None``).

    Raises:
      TypeError: If an argument has the wrong type (bools are not ints) or ``batch_fn`` is not callable.
      ValueError: If ``drop_remainder`` is not True or an input is unusable (too many batches: also OverflowError).

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
    shard, seed, batch_size, num_epochs, total, row_slices = _checked_training_arguments(
        dataset, shard_options, seed, shuffle, num_epochs, batch_size, batch_fn
    )
    ordered, order, shuffle_window = _epoch_order(dataset, seed, shuffle, shuffle_window)
    batched = _epoch_batches(dataset, ordered, row_slices, seed, order, batch_size, batch_fn, num_epochs).repeat(
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
    _describe_files(description, dataset)
    from tinax._data._pipelines._checked_datasets import CheckedMapDataset, EpochRows

    return CheckedMapDataset(
        batched,
        in_process_description(description),
        default_read_options=_default_read_options(dataset, batch_fn),
        epoch_rows=EpochRows(ordered, batch_fn),
    )


def _checked_training_arguments(
    dataset: Any, shard_options: Any, seed: int, shuffle: bool, num_epochs: int | None, batch_size: int, batch_fn: Any
) -> tuple[dict[str, Any], int, int, int | None, int, tuple[slice, slice]]:
    """Checks training_batches's arguments; returns them checked, the row count and this shard's row slices."""
    # Checks in 0.2's order, so several bad arguments fail with 0.2's type; after a NumPy integer
    # (0.2 refused it, 0.3 accepts it), a later refusal is both types.
    widened = _widened(shard_options, batch_size, seed, num_epochs)
    with reported_as_both(widened):
        _require_dataset(dataset)
        shard = shard_options_fields(shard_options, drop_remainder=True)
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
        # grain reserves sys.maxsize for an endless repeat: more batches overflow inside grain.
        epoch_batches = per_shard // batch_size
        if num_epochs is not None and num_epochs * epoch_batches >= sys.maxsize:
            limit = (sys.maxsize - 1) // epoch_batches
            # A NumPy integer argument, which 0.2 refused with TypeError, keeps that type too.
            error_type = also_raised_as(ValueOverflowError, TypeError) if widened else ValueOverflowError
            raise error_type(
                f"num_epochs must be at most {limit} for {epoch_batches} batches per epoch (grain counts batches "
                f"in fewer than sys.maxsize = {sys.maxsize}), got {num_epochs}; pass None to repeat forever"
            )
        # grain's shuffle refuses a negative seed; 0.2 met that refusal after every other check.
        if shuffle and seed < 0:
            fail_value("seed", "a non-negative int when shuffling", seed)
        return shard, seed, batch_size, num_epochs, total, (slice(0, usable), slice(start, start + per_shard))


def _epoch_order(dataset: Any, seed: int, shuffle: bool, window: int | None) -> tuple[Any, str, int | None]:
    """Checks ``shuffle_window``; returns the seeded epoch's rows in order, the order's kind and the window."""
    blocks: tuple[int, ...] = ()
    if window is not None:
        window = require_positive_int(window, "shuffle_window")
        if not shuffle:
            fail_value("shuffle_window", "None when shuffle is False", window)
        blocks = _row_group_ends(dataset)
    from tinax._data._pipelines._checked_datasets import WindowShuffleMapDataset

    ordered = dataset.seed(seed)
    if window is not None:
        return WindowShuffleMapDataset(ordered, seed=seed, block_ends=blocks, window=window), "window", window
    if shuffle:
        return ordered.shuffle(), "shuffle", window
    return ordered, "none", window


def _epoch_batches(
    dataset: Any,
    ordered: Any,
    row_slices: tuple[slice, slice],
    seed: int,
    order: str,
    batch_size: int,
    batch_fn: Any,
    num_epochs: int | None,
) -> Any:
    """One epoch's batches of this shard's rows: grain's own batch, one read call per batch."""
    from tinax._data._pipelines._direct_reads import DirectBatchMapDataset
    from tinax._data._pipelines._planned_reads import batch_positions, planned_window_batches, shuffled_batches
    from tinax._data._records._reader_datasets import record_source_of

    rows = ordered.slice(row_slices[0]).slice(row_slices[1])
    if order == "shuffle":
        # Planned reads under a Parquet reader's global shuffle.
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
        if batches is not None:
            return batches
    # Each batch's rows read from the source at positions computed at once.
    positions = batch_positions(dataset, ordered, rows, seed=seed, row_slices=row_slices, order=order)
    if order == "window" and positions is not None:
        # Past a Parquet reader's cache, read a window of batches ahead at a time, as for the global shuffle.
        planned = planned_window_batches(
            dataset, rows, positions, batch_size=batch_size, batch_fn=batch_fn, num_epochs=num_epochs
        )
        if planned is not None:
            return planned
    return DirectBatchMapDataset(
        rows, batch_size, drop_remainder=True, batch_fn=batch_fn, positions=positions, source=record_source_of(dataset)
    )


def evaluation_batches(
    dataset: MapDataset[T],
    *,
    shard_options: ShardOptions,
    batch_size: int,
    batch_fn: BatchTransform[T, BatchT],
) -> MapDataset[BatchT]:
    """Builds this process's evaluation batches: every row once, in order.

    The dataset is cut into ``shard_count`` contiguous blocks differing by at most
    one row (the first ``n % shard_count`` hold one more), and this process batches
    its block in order. Nothing is shuffled, repeated, padded or dropped: the last
    batch may be short and an empty block gives no batches, so processes may run
    different numbers of steps. States and restore checks work as for
    :func:`training_batches`.

    Args:
      dataset: A finite ``grain.MapDataset`` of the rows to evaluate.
      shard_options: This process's shard; ``drop_remainder`` must be False.
      batch_size: The rows per batch, at least 1.
      batch_fn: Turns the list of a batch's rows into the batch.

    Returns:
      A random-access ``grain.MapDataset`` of ``ceil(block rows / batch_size)`` batches.

    Raises:
      TypeError: If an argument has the wrong type (bools are not ints) or ``batch_fn`` is not callable.
      ValueError: If ``drop_remainder`` is not False, ``batch_size`` is below 1, or the dataset cannot be batched.

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
        shard = shard_options_fields(shard_options, drop_remainder=False)
        batch_size = require_positive_int(batch_size, "batch_size")
        require_callable(batch_fn, "batch_fn")
        total = _require_finite(dataset)

    index, count = shard["shard_index"], shard["shard_count"]
    base, extra = divmod(total, count)
    start = index * base + min(index, extra)
    stop = start + base + (1 if index < extra else 0)
    from tinax._data._pipelines._direct_reads import DirectBatchMapDataset
    from tinax._data._pipelines._planned_reads import batch_positions
    from tinax._data._records._reader_datasets import record_source_of

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
    from tinax._data._pipelines._checked_datasets import CheckedMapDataset

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
    from tinax._data._pipelines._checked_datasets import IN_TURN_READ_OPTIONS, STACKED_READ_OPTIONS
    from tinax._data._records._reader_datasets import record_source_of
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
    from tinax._data._records._parquet_source import ParquetRecordSource
    from tinax._data._records._reader_datasets import record_source_of

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


def shard_options_fields(shard_options: object, *, drop_remainder: bool) -> dict[str, Any]:
    """Checks a ``grain.sharding.ShardOptions`` of training (``drop_remainder``) or evaluation; returns its fields."""
    from grain.sharding import ShardOptions

    options = require_instance(shard_options, "shard_options", ShardOptions, "a grain.sharding.ShardOptions")
    # ShardOptions checks the range of its fields but not their types.
    count = require_positive_int(options.shard_count, "shard_options.shard_count")
    index = require_int(options.shard_index, "shard_options.shard_index", minimum=0, maximum=count - 1)
    given = require_bool(options.drop_remainder, "shard_options.drop_remainder")
    if given != drop_remainder:
        expected = "True for training, so that every process runs the same number of steps"
        if not drop_remainder:
            expected = "False for evaluation, which never drops rows"
        fail_value("shard_options.drop_remainder", expected, given)
    return {"shard_index": index, "shard_count": count, "drop_remainder": given}


def find_pipeline_description(dataset: Any) -> dict[str, Any] | None:
    """A copy of the description of the nearest tinax pipeline among a dataset's parents, or None."""
    from tinax._data._pipelines._checked_datasets import CheckedIterDataset, CheckedMapDataset

    pending: list[Any] = [dataset]
    while pending:
        node = pending.pop(0)
        if isinstance(node, (CheckedMapDataset, CheckedIterDataset)):
            return dict(node.pipeline_description)
        pending.extend(getattr(node, "parents", ()))
    return None
