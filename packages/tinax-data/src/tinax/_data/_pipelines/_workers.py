"""Grain worker processes with an owner: a context manager that always joins them."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from tinax._core._compat02 import also_raised_as
from tinax._core.validation import (
    fail_type_and_value,
    fail_value,
    is_non_python_int,
    reported_as_both,
    require_bool,
    require_callable,
    require_instance,
    require_non_negative_int,
    require_positive_int,
)
from tinax._data._pipelines._batches import find_pipeline_description
from tinax._data._pipelines._pipeline_states import STATE_FORMAT

if TYPE_CHECKING:
    from grain import DatasetIterator, IterDataset

__all__ = ["open_multiprocessing_iterator"]

T = TypeVar("T")


@contextlib.contextmanager
def open_multiprocessing_iterator(
    dataset: IterDataset[T],
    *,
    num_workers: int,
    per_worker_buffer_size: int = 1,
    worker_init_fn: Callable[[int, int], None] | None = None,
    sequential_slice: bool = False,
) -> Iterator[DatasetIterator[T]]:
    """Iterates a dataset in grain worker processes that live only inside a ``with`` block.

    Worker ``w`` produces every ``num_workers``-th element, so a tinax
    pipeline yields the same batches in the same order as without workers.
    Workers start (``spawn``) at the first ``next()`` and are joined when the
    block is left. What they run must pickle, and absl flags must already be
    parsed (never parsed here). ``num_workers=0`` starts no process. See the
    data guide, section "How worker processes run".

    Args:
      dataset: A ``grain.IterDataset``, e.g. ``training_batches(...).to_iter_dataset()``.
      num_workers: The number of worker processes, 0 for none.
      per_worker_buffer_size: How many elements each worker may hold ready, at least 1.
      worker_init_fn: Called in each worker before it reads, with the worker's
        index and the worker count, or None.
      sequential_slice: grain's experimental option: each worker reads one
        contiguous block. Repeats rows under slice, repeat or batch steps, so
        refused for tinax pipelines with two or more workers.

    Yields:
      The iterator, open for the duration of the block.

    Raises:
      TypeError: If an argument has the wrong type (a ``MapDataset`` needs ``.to_iter_dataset()``).
      ValueError: If ``num_workers`` is negative, ``per_worker_buffer_size`` below 1, or ``sequential_slice`` misused.
      RuntimeError: If ``num_workers`` is 1 or more and absl flags are not parsed.

    Examples:
      >>> import grain
      >>> from tinax.data import InMemorySource, evaluation_batches, open_multiprocessing_iterator
      >>> dataset = grain.MapDataset.source(InMemorySource([{"x": i} for i in range(6)], source_id="demo-v1"))
      >>> def collate(rows):
      ...     return [row["x"] for row in rows]
      >>> batches = evaluation_batches(
      ...     dataset, shard_options=grain.sharding.ShardOptions(0, 1), batch_size=4, batch_fn=collate
      ... )
      >>> with open_multiprocessing_iterator(batches.to_iter_dataset(), num_workers=0) as iterator:  # no processes
      ...     list(iterator)
      [[0, 1, 2, 3], [4, 5]]
    """
    import grain
    from absl import flags

    from tinax._data._pipelines._checked_datasets import CheckedIterator

    # After a NumPy integer (0.2 refused it with TypeError), a later refusal is also a TypeError.
    widened = is_non_python_int(num_workers) or is_non_python_int(per_worker_buffer_size)
    with reported_as_both(widened):
        require_instance(
            dataset, "dataset", grain.IterDataset, "a grain.IterDataset (call .to_iter_dataset() on a MapDataset)"
        )
        num_workers = require_non_negative_int(num_workers, "num_workers")
        per_worker_buffer_size = require_positive_int(per_worker_buffer_size, "per_worker_buffer_size")
        if worker_init_fn is not None:
            require_callable(worker_init_fn, "worker_init_fn")
        require_bool(sequential_slice, "sequential_slice")
    # Only worker processes read the flags; an in-process iterator never needs them.
    if num_workers > 0 and not flags.FLAGS.is_parsed():
        # A NumPy integer num_workers, which 0.2 refused with TypeError, keeps that type too.
        raise (also_raised_as(RuntimeError, TypeError) if widened else RuntimeError)(
            "open_multiprocessing_iterator needs absl flags to be parsed before grain starts worker processes, "
            "and tinax never parses or changes global flags: run the program with absl.app.run(main), or call "
            "absl.flags.FLAGS(sys.argv) (or absl.flags.FLAGS.mark_as_parsed()) before opening the iterator"
        )

    options = grain.MultiprocessingOptions(num_workers=num_workers, per_worker_buffer_size=per_worker_buffer_size)
    iterator: Any
    if num_workers == 0:
        # grain returns the dataset itself here; called anyway so the options always reach mp_prefetch.
        in_process = dataset.mp_prefetch(options, worker_init_fn=worker_init_fn, sequential_slice=sequential_slice)
        iterator = in_process.__iter__()
    else:
        description = find_pipeline_description(dataset)
        if description is not None and sequential_slice and num_workers > 1:
            (fail_type_and_value if widened else fail_value)(
                "sequential_slice",
                "False for a tinax pipeline: grain's sequential slicing cuts the source under the pipeline's "
                "shard, repeat and batch steps, which keep the uncut length, so workers would repeat rows",
                sequential_slice,
            )
        description = description or {"state_format": STATE_FORMAT}
        description.update(num_workers=num_workers, sequential_slice=sequential_slice)
        # Finalize semaphores of iterators the program already dropped before
        # grain registers new ones (see the collection on exit for why).
        gc.collect()
        prefetched = dataset.mp_prefetch(options, worker_init_fn=worker_init_fn, sequential_slice=sequential_slice)
        iterator = CheckedIterator(prefetched.__iter__(), description)
    try:
        yield iterator
    finally:
        iterator.close()
        if num_workers > 0:
            # grain's semaphores sit in reference cycles; finalized later, they can fire mid-call in
            # multiprocessing's resource tracker (a reentrant call and a leaked semaphore). Collect now.
            gc.collect()
