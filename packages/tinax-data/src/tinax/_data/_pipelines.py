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

The grain classes behind the pipelines live in ``_pipeline_datasets``, which
imports grain at its top: the functions here import it when they run, so
importing ``tinax.data`` starts neither grain nor what grain imports (JAX,
Orbax, array-record).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from tinax._core.validation import (
    fail_type,
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
from tinax._data._epoch_layout import REDEAL_KEY, RedealtEpoch, checked_redeal_record
from tinax._data._sources import find_source_id

if TYPE_CHECKING:
    from grain import MapDataset
    from grain.sharding import ShardOptions

__all__ = [
    "STATE_DESCRIPTION_KEY",
    "STATE_FORMAT",
    "STATE_GRAIN_KEY",
    "BatchTransform",
    "TooManyBatchesError",
    "evaluation_batches",
    "check_state",
    "check_state_and_record",
    "find_pipeline_description",
    "in_process_description",
    "shard_options_fields",
    "training_batches",
]

T = TypeVar("T")
BatchT = TypeVar("BatchT")

BatchTransform: TypeAlias = Callable[[Sequence[T]], BatchT]
"""Turns the records of one batch (a sequence of up to ``batch_size`` records)
into the batch the pipeline yields, for example by stacking arrays."""


class TooManyBatchesError(ValueError, OverflowError):
    """``num_epochs`` asks for more batches than grain can count.

    A ValueError, as tinax reports a bad argument value, and an
    OverflowError, which is what ``len()`` of the dataset raised in tinax 0.2,
    where grain's index-sized length overflowed.
    """


class _TooManyBatchesAfterWideningError(TooManyBatchesError, TypeError):
    """:class:`TooManyBatchesError` for a NumPy integer argument, which tinax 0.2 refused with TypeError."""


def _widened(shard_options: object, *values: object) -> bool:
    """Whether an argument (or a shard field) is a NumPy integer, which 0.3 accepts and tinax 0.2 refused."""
    fields = (getattr(shard_options, "shard_index", None), getattr(shard_options, "shard_count", None))
    return any(is_non_python_int(value) for value in (*fields, *values))


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
    from tinax._data._grain_compat import BulkBatchMapDataset
    from tinax._data._pipeline_datasets import CheckedMapDataset, EpochRows, WindowShuffleMapDataset

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
        batches = BulkBatchMapDataset(rows, batch_size, drop_remainder=True, batch_fn=batch_fn)
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
    return CheckedMapDataset(
        batched,
        in_process_description(description),
        default_read_options=_default_read_options(dataset),
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
    from tinax._data._grain_compat import BulkBatchMapDataset

    # grain's own batch, reading each batch's rows with one call down the chain.
    shard_rows = dataset.slice(slice(start, stop))
    batched = BulkBatchMapDataset(shard_rows, batch_size, drop_remainder=False, batch_fn=batch_fn)
    description = {
        "kind": "evaluation_batches",
        "source_id": find_source_id(dataset),
        "num_rows": total,
        **shard,
        "batch_size": batch_size,
    }
    from tinax._data._pipeline_datasets import CheckedMapDataset

    return CheckedMapDataset(
        batched, in_process_description(description), default_read_options=_default_read_options(dataset)
    )


def _default_read_options(dataset: Any) -> Any:
    """The read options a pipeline over ``dataset`` iterates with when given none, or None for Grain's."""
    from tinax._data._datasets import record_source_of
    from tinax._data._pipeline_datasets import IN_TURN_READ_OPTIONS

    # Only the reader's own dataset: a transformation in front may wait on anything.
    if getattr(record_source_of(dataset), "reads_in_turn", False):
        return IN_TURN_READ_OPTIONS
    return None


def _row_group_ends(dataset: Any) -> tuple[int, ...]:
    from tinax._data._datasets import record_source_of
    from tinax._data._parquet_source import ParquetRecordSource

    source = record_source_of(dataset)
    if type(source) is not ParquetRecordSource:
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


def in_process_description(pipeline: Mapping[str, Any]) -> dict[str, Any]:
    """The description an iterator state carries: the pipeline's arguments, iterated without workers.

    :func:`open_multiprocessing_iterator` sets the worker count and slicing
    it iterates with.
    """
    return {**pipeline, "num_workers": 0, "sequential_slice": False, "state_format": STATE_FORMAT}


def find_pipeline_description(dataset: Any) -> dict[str, Any] | None:
    """Returns the description of the tinax pipeline under a grain dataset, if any.

    Args:
      dataset: A grain ``MapDataset`` or ``IterDataset``.

    Returns:
      A copy of the description of the nearest pipeline dataset made by
      :func:`training_batches` or :func:`evaluation_batches` on the way down
      ``dataset``'s parents, or None if there is none.
    """
    from tinax._data._pipeline_datasets import CheckedIterDataset, CheckedMapDataset

    pending: list[Any] = [dataset]
    while pending:
        node = pending.pop(0)
        if isinstance(node, (CheckedMapDataset, CheckedIterDataset)):
            return dict(node.pipeline_description)
        pending.extend(getattr(node, "parents", ()))
    return None


def check_state(state: object, expected: Mapping[str, Any], *, length: int | None = None) -> Any:
    """Checks that an iterator state belongs to the described pipeline and is well formed.

    The same as :func:`check_state_and_record`, returning grain's part only.
    """
    return check_state_and_record(state, expected, length=length)[0]


def check_state_and_record(
    state: object, expected: Mapping[str, Any], *, length: int | None = None
) -> tuple[Any, RedealtEpoch | None]:
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
      copy), and the state's re-deal record (see :func:`redeal_state`), or
      None where it has none. A state without a description (grain's own
      state, as tinax 0.2 saved it) is grain's part as a whole: there is no
      description to compare, but its form is checked all the same.

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
        return _checked_grain_state(state, "state", num_workers, length), None
    saved = state[STATE_DESCRIPTION_KEY]
    if not isinstance(saved, Mapping) or STATE_GRAIN_KEY not in state:
        keys = ", ".join(repr(key) for key in state)
        raise ValueError(
            f"state must hold a {STATE_DESCRIPTION_KEY!r} mapping and a {STATE_GRAIN_KEY!r} entry, as states from "
            f"get_state() of a tinax pipeline iterator do, got a state with keys [{keys}]"
        )
    _refuse_unknown_keys(state, "state", _state_keys(state))
    fields = set(saved) | set(expected)
    ordered = [name for name in _FIELD_ORDER if name in fields] + sorted(fields.difference(_FIELD_ORDER), key=str)
    missing = "<absent>"
    differing = [name for name in ordered if not _same_value(saved.get(name, missing), expected.get(name, missing))]
    if differing:
        differences = [
            f"{name} is {saved.get(name, missing)!r} in the state but {expected.get(name, missing)!r} here"
            for name in differing
        ]
        hint = ""
        if expected.get("kind") == "training_batches" and set(differing) <= _LAYOUT_FIELDS:
            hint = (
                ". A state restores on another number of processes, or with another batch size, only once "
                "tinax.data.redeal_state has dealt the rest of its epoch out again for this pipeline"
            )
        raise ValueError(
            "state must come from a pipeline built with the same arguments, got one that differs: "
            + "; ".join(differences)
            + hint
        )
    record = None
    if REDEAL_KEY in state:
        record = _checked_record(state[REDEAL_KEY], f"state[{REDEAL_KEY!r}]", expected, top_level=True)
    grain_state = _checked_grain_state(state[STATE_GRAIN_KEY], f"state[{STATE_GRAIN_KEY!r}]", num_workers, length)
    return grain_state, record


# The description fields a re-deal may change.
_LAYOUT_FIELDS = {"shard_index", "shard_count", "batch_size"}


def _state_keys(state: Mapping[Any, Any]) -> tuple[str, ...]:
    """The keys a state with a description must hold: a re-dealt one also holds its record."""
    if REDEAL_KEY in state:
        return (STATE_DESCRIPTION_KEY, STATE_GRAIN_KEY, REDEAL_KEY)
    return (STATE_DESCRIPTION_KEY, STATE_GRAIN_KEY)


def _checked_record(record: object, where: str, description: Mapping[str, Any], *, top_level: bool) -> RedealtEpoch:
    """Checks a state's re-deal record against the pipeline it restores into."""
    if description.get("kind") != "training_batches":
        raise ValueError(
            f"{where} is the re-deal record of a training_batches state, but this pipeline is "
            f"{description.get('kind')!r}: only training states are re-dealt"
        )
    if top_level and description.get("num_workers", 0) != 0:
        raise ValueError(
            f"{where} must not be there: with worker processes, the re-deal record of a state sits in the "
            "state of each worker, as redeal_state(..., num_workers=...) writes it"
        )
    return checked_redeal_record(record, where, description.get("num_rows"))


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


def _refuse_unknown_keys(state: Mapping[Any, Any], where: str, known: Sequence[str]) -> None:
    unknown = [key for key in state if key not in known]
    if unknown:
        raise ValueError(
            f"{where} must hold only the keys {list(known)} of a saved iterator state, "
            f"got the unknown key {unknown[0]!r}"
        )
    absent = [key for key in known if key not in state]
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


def _checked_grain_state(grain_state: object, where: str, num_workers: object, length: int | None) -> dict[str, Any]:
    """Checks grain's part of an iterator state and returns a copy for grain."""
    if not isinstance(grain_state, Mapping):
        fail_type(where, "a mapping, as grain's iterator states are", grain_state)
    if type(num_workers) is not int or num_workers <= 0:
        _refuse_unknown_keys(grain_state, where, ("next_index",))
        maximum = length if length is not None and length < sys.maxsize else None
        return {"next_index": _checked_index(grain_state["next_index"], f"{where}['next_index']", 0, maximum)}
    _refuse_unknown_keys(grain_state, where, _WORKER_STATE_KEYS)
    checked: dict[str, Any] = {
        "next_index_in_cycle": _checked_index(
            grain_state["next_index_in_cycle"], f"{where}['next_index_in_cycle']", 0, num_workers - 1
        ),
        "next_index_in_datasets": _checked_index(
            grain_state["next_index_in_datasets"], f"{where}['next_index_in_datasets']", 0, num_workers
        ),
    }
    lists: dict[str, list[Any]] = {}
    for key in ("iterators_in_use_indices", "iterators_in_use_states", "exhausted"):
        value = grain_state[key]
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
    future = grain_state["future_states"]
    if not isinstance(future, Mapping):
        fail_type(f"{where}['future_states']", "a mapping of worker states", future)
    checked["future_states"] = {
        key: _checked_worker_state(value, f"{where}['future_states'][{key!r}]") for key, value in future.items()
    }
    return checked


def _checked_worker_state(worker_state: object, where: str) -> Any:
    """Checks the state of one worker's iterator (None or {} when it has none)."""
    if worker_state is None:
        return None
    if not isinstance(worker_state, Mapping):
        fail_type(where, "a mapping, as grain's iterator states are, or None", worker_state)
    if not worker_state:
        return {}
    if STATE_DESCRIPTION_KEY not in worker_state:
        # The state of whatever grain iterator the worker runs (a dataset
        # built on a tinax pipeline need not be one): its keys depend on that
        # iterator, so only the index every such state shares is checked.
        checked = dict(worker_state)
        if "next_index" in checked:
            checked["next_index"] = _checked_index(checked["next_index"], f"{where}['next_index']", 0, None)
        return checked
    _refuse_unknown_keys(worker_state, where, _state_keys(worker_state))
    description = worker_state[STATE_DESCRIPTION_KEY]
    if not isinstance(description, Mapping):
        fail_type(f"{where}[{STATE_DESCRIPTION_KEY!r}]", "a mapping describing the pipeline", description)
    # The worker's own iterator compares the description when it restores.
    checked = {
        STATE_DESCRIPTION_KEY: dict(description),
        STATE_GRAIN_KEY: _checked_grain_state(worker_state[STATE_GRAIN_KEY], f"{where}[{STATE_GRAIN_KEY!r}]", 0, None),
    }
    if REDEAL_KEY in worker_state:
        where = f"{where}[{REDEAL_KEY!r}]"
        checked[REDEAL_KEY] = _checked_record(worker_state[REDEAL_KEY], where, description, top_level=False).to_state()
    return checked
