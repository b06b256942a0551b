"""Resuming a training pipeline on another number of processes: the rest of the epoch, dealt out again.

The arithmetic of the re-deal lives in ``_epoch_layout``; this module reads
the saved states, checks that they describe one position of one pipeline,
and writes the state a new process restores.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tinax._core.validation import fail_type, fail_value, require_non_negative_int, require_positive_int
from tinax._data._pipelines._batches import shard_options_fields
from tinax._data._pipelines._epoch_layout import (
    REDEAL_KEY,
    Intervals,
    RedealtEpoch,
    epoch_progress,
    exact_int,
    resume_point,
)
from tinax._data._pipelines._pipeline_states import (
    STATE_DESCRIPTION_KEY,
    STATE_FORMAT,
    STATE_GRAIN_KEY,
    check_state_and_record,
    in_process_description,
)

if TYPE_CHECKING:
    from grain.sharding import ShardOptions

__all__ = ["redeal_state"]


def redeal_state(
    states: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    *,
    shard_options: ShardOptions,
    batch_size: int | None = None,
    num_workers: int = 0,
) -> dict[str, Any]:
    """Deals the rest of an interrupted epoch out to a new number of processes.

    Pass the states every old process saved at the same step (or one of
    them) and this process's new shard; restore the result with
    ``set_state``. Every row of the interrupted epoch no old process had read
    is read exactly once across the new processes, in whole global batches;
    later epochs match a fresh run on the new processes. See the data guide,
    section "Resuming on another number of processes".

    Args:
      states: The ``training_batches`` iterator states of all old processes,
        saved at the same step, in any order; or one of them alone.
      shard_options: This process's new shard; ``drop_remainder`` must be True.
      batch_size: The new per-process batch size; None keeps the global batch,
        which the new shard count must then divide.
      num_workers: 0 to restore into the pipeline iterated in this process, or
        the ``num_workers`` of :func:`open_multiprocessing_iterator`.

    Returns:
      A JSON-serializable state for ``set_state`` of this process's new
      iterator, describing the old pipeline with the new shard, batch size
      and worker count.

    Raises:
      TypeError: If ``states``, a part of a state or an argument has the wrong type.
      ValueError: If a state is not a described ``training_batches`` state, or the states or arguments do not fit.

    Examples:
      >>> import grain
      >>> from tinax.data import InMemorySource, redeal_state, training_batches
      >>> dataset = grain.MapDataset.source(InMemorySource([{"x": i} for i in range(12)], source_id="demo-v1"))
      >>> def collate(rows):
      ...     return [row["x"] for row in rows]
      >>> def pipeline(shard_index, shard_count, batch_size):
      ...     shard = grain.sharding.ShardOptions(shard_index, shard_count, drop_remainder=True)
      ...     return training_batches(
      ...         dataset, shard_options=shard, seed=0, shuffle=False, num_epochs=1, batch_size=batch_size,
      ...         batch_fn=collate,
      ...     )
      >>> old = [iter(pipeline(index, 2, 2)) for index in range(2)]
      >>> [next(iterator) for iterator in old]  # one step on two processes
      [[0, 1], [6, 7]]
      >>> saved = [iterator.get_state() for iterator in old]
      >>> new = iter(pipeline(0, 1, 4))  # one process now, the same global batch of 4
      >>> new.set_state(redeal_state(saved, shard_options=grain.sharding.ShardOptions(0, 1, drop_remainder=True)))
      >>> list(new)
      [[2, 3, 4, 5], [8, 9, 10, 11]]
    """
    checked = _checked_states(states)
    description, (epoch, consumed) = checked[0][1], checked[0][2]
    new_shard = shard_options_fields(shard_options, drop_remainder=True)
    num_workers = require_non_negative_int(num_workers, "num_workers")
    num_rows, new_count = description["num_rows"], new_shard["shard_count"]
    batch_size = _new_batch_size(batch_size, description, new_count)
    next_index, record = resume_point(num_rows, new_count, batch_size, epoch, consumed)
    layout = {"shard_index": new_shard["shard_index"], "shard_count": new_count, "batch_size": batch_size}
    worker_description = in_process_description({**description, **layout})
    if num_workers == 0:
        return _iterator_state(worker_description, next_index, record, next_index, num_rows, new_count, batch_size)
    # grain's interleave of one iterator per worker: worker w reads batches w, w + n, w + 2n...
    reads = [_read_by_worker(next_index, worker, num_workers) for worker in range(num_workers)]
    worker_states = [
        _iterator_state(worker_description, read, record, worker + read * num_workers, num_rows, new_count, batch_size)
        for worker, read in enumerate(reads)
    ]
    return {
        STATE_DESCRIPTION_KEY: {**worker_description, "num_workers": num_workers, "sequential_slice": False},
        STATE_GRAIN_KEY: {
            "next_index_in_cycle": next_index % num_workers,
            "next_index_in_datasets": num_workers,
            "iterators_in_use_indices": list(range(num_workers)),
            "iterators_in_use_states": worker_states,
            "exhausted": [0] * num_workers,
            "future_states": {},
        },
    }


def _new_batch_size(batch_size: int | None, description: Mapping[str, Any], new_count: int) -> int:
    """Checks ``batch_size`` for ``new_count`` processes, or keeps the states' global batch where it is None."""
    num_rows, old_count, old_batch = description["num_rows"], description["shard_count"], description["batch_size"]
    global_batch = old_count * old_batch
    if batch_size is None:
        if global_batch % new_count:
            counts = [count for count in range(1, global_batch + 1) if global_batch % count == 0]
            nearest = [size for size in (global_batch // new_count, global_batch // new_count + 1) if size > 0]
            examples = " or ".join(f"batch_size={size} (a global batch of {size * new_count})" for size in nearest)
            raise ValueError(
                f"batch_size must be given to re-deal onto {new_count} processes: the states' global batch of "
                f"{global_batch} rows ({old_count} processes of {old_batch}) does not split evenly over "
                f"{new_count}. Pass the new per-process batch size, for example {examples}, or re-deal onto a "
                f"shard count that divides {global_batch}: {counts}"
            )
        batch_size = global_batch // new_count
    else:
        batch_size = require_positive_int(batch_size, "batch_size")
    if new_count * batch_size > num_rows:
        fail_value(
            "batch_size",
            f"at most {num_rows // new_count} for {new_count} processes, so that the {num_rows} rows of the states' "
            "dataset fill at least one global batch",
            batch_size,
        )
    return batch_size


def _read_by_worker(next_index: int, worker: int, num_workers: int) -> int:
    """How many of the batches before ``next_index`` worker ``worker`` of ``num_workers`` reads."""
    return max(0, -(-(next_index - worker) // num_workers))


def _iterator_state(
    description: Mapping[str, Any],
    next_index: int,
    record: RedealtEpoch | None,
    position: int,
    num_rows: int,
    shard_count: int,
    batch_size: int,
) -> dict[str, Any]:
    """One iterator's state; it carries the record while its next batch is a re-dealt one."""
    state: dict[str, Any] = {STATE_DESCRIPTION_KEY: dict(description), STATE_GRAIN_KEY: {"next_index": next_index}}
    if record is not None and position < record.region(num_rows, shard_count, batch_size)[1]:
        state[REDEAL_KEY] = record.to_state()
    return state


_Position = tuple[int, Intervals]


def _checked_states(states: object) -> list[tuple[int, dict[str, Any], _Position]]:
    """Checks the old states and returns (shard index, description, (epoch, rows read)) for each."""
    if isinstance(states, Mapping):
        listed: list[object] = [states]
        names = ["states"]
    elif isinstance(states, Sequence) and not isinstance(states, (str, bytes, bytearray)):
        listed = list(states)
        names = [f"states[{index}]" for index in range(len(listed))]
        if not listed:
            fail_value("states", "the states of all old processes, or one of them, not an empty sequence", states)
    else:
        fail_type("states", "an iterator state (a dict from get_state()) or a sequence of them", states)
    checked = [_checked_position(state, name) for state, name in zip(listed, names, strict=True)]
    first_name, (first_index, first_description, first_position) = names[0], checked[0]
    for name, (index, description, position) in zip(names[1:], checked[1:], strict=True):
        fields = sorted((set(description) | set(first_description)) - {"shard_index"})
        differing = [field for field in fields if description.get(field) != first_description.get(field)]
        if differing:
            field = differing[0]
            raise ValueError(
                f"states must all come from one pipeline, got {name} with {field} {description.get(field)!r} "
                f"but {first_name} with {first_description.get(field)!r}"
            )
        if position != first_position:
            raise ValueError(
                f"states must all be saved at the same step, as synchronous training saves them, got {name} "
                f"(shard {index}) and {first_name} (shard {first_index}) at different points of the epoch"
            )
    if len(checked) > 1:
        count = first_description["shard_count"]
        indices = sorted(index for index, _, _ in checked)
        if indices != list(range(count)):
            missing = sorted(set(range(count)) - set(indices))
            repeated = sorted({index for index in indices if indices.count(index) > 1})
            raise ValueError(
                f"states must hold the state of each of the {count} old processes exactly once (or one state "
                f"alone), got shard indices {indices}"
                + (f", missing {missing}" if missing else "")
                + (f", repeating {repeated}" if repeated else "")
            )
    return checked


def _checked_position(state: object, where: str) -> tuple[int, dict[str, Any], _Position]:
    if not isinstance(state, Mapping):
        fail_type(where, "an iterator state, the dict get_state() of a training_batches iterator returns", state)
    description = state.get(STATE_DESCRIPTION_KEY)
    if description is None:
        raise ValueError(
            f"{where} must describe its pipeline, as states of a training_batches iterator do, got a state without "
            f"a {STATE_DESCRIPTION_KEY!r} entry (a state saved by tinax 0.2, or by a dataset built on a pipeline): "
            "which rows its processes read is unknown, so it cannot be re-dealt"
        )
    if not isinstance(description, Mapping):
        fail_type(f"{where}[{STATE_DESCRIPTION_KEY!r}]", "a mapping describing the pipeline", description)
    name = f"{where}[{STATE_DESCRIPTION_KEY!r}]"
    if description.get("kind") != "training_batches":
        fail_value(f"{name}['kind']", "'training_batches': only training states are re-dealt", description.get("kind"))
    if description.get("state_format") != STATE_FORMAT:
        fail_value(
            f"{name}['state_format']", f"{STATE_FORMAT}, the format this tinax writes", description.get("state_format")
        )
    num_rows = exact_int(description.get("num_rows"), f"{name}['num_rows']", 1)
    shard_count = exact_int(description.get("shard_count"), f"{name}['shard_count']", 1)
    shard_index = exact_int(description.get("shard_index"), f"{name}['shard_index']", 0, shard_count - 1)
    batch_size = exact_int(description.get("batch_size"), f"{name}['batch_size']", 1, num_rows // shard_count)
    num_workers = exact_int(description.get("num_workers"), f"{name}['num_workers']", 0)
    if description.get("sequential_slice") is not False:
        fail_value(
            f"{name}['sequential_slice']",
            "False, as tinax pipelines' worker states hold",
            description.get("sequential_slice"),
        )
    # The state's own description is the one to compare with: this checks its form alone.
    grain_state, record = check_state_and_record(state, description)
    if num_workers == 0:
        next_index = grain_state["next_index"]
    else:
        next_index, record = _workers_position(
            grain_state, name.replace(STATE_DESCRIPTION_KEY, STATE_GRAIN_KEY), description, num_workers
        )
    if record is not None:
        first, stop = record.region(num_rows, shard_count, batch_size)
        if not first <= next_index < stop:
            raise ValueError(
                f"{where}[{REDEAL_KEY!r}] re-deals the batches [{first}, {stop}), so the state's next batch must be "
                f"one of them, got batch {next_index}"
            )
    plain = in_process_description(dict(description))
    return shard_index, plain, epoch_progress(num_rows, shard_count, batch_size, next_index, record)


def _workers_position(
    grain_state: Mapping[str, Any], where: str, description: Mapping[str, Any], num_workers: int
) -> tuple[int, RedealtEpoch | None]:
    """The pipeline's next batch and re-deal record in the state of open_multiprocessing_iterator's iterator."""
    by_worker = dict(zip(grain_state["iterators_in_use_indices"], grain_state["iterators_in_use_states"], strict=True))
    future = {int(key): value for key, value in grain_state["future_states"].items() if str(key).isdigit()}
    expected = in_process_description(dict(description))
    read: list[int] = []
    records: list[RedealtEpoch] = []
    for worker in range(num_workers):
        worker_state = by_worker.get(worker, future.get(worker))
        if not worker_state:
            # A worker whose iterator was never made has read nothing.
            read.append(0)
            continue
        if STATE_DESCRIPTION_KEY not in worker_state:
            raise ValueError(
                f"{where} must hold the states of training_batches iterators in its workers, got a worker state "
                "without a pipeline description (workers that iterate a dataset built on the pipeline): which "
                "rows they read is unknown, so it cannot be re-dealt"
            )
        worker_grain, worker_record = check_state_and_record(worker_state, expected)
        read.append(worker_grain["next_index"])
        if worker_record is not None:
            records.append(worker_record)
    next_index = sum(read)
    in_order = [_read_by_worker(next_index, worker, num_workers) for worker in range(num_workers)]
    if num_workers > 1 and read != in_order:
        raise ValueError(
            f"{where} must have handed out the pipeline's batches in order, as grain's interleave of its "
            f"{num_workers} workers does, got workers that have read {read} batches"
        )
    if any(record != records[0] for record in records):
        raise ValueError(f"{where} must hold one re-deal record, got workers with different ones")
    return next_index, records[0] if records else None
