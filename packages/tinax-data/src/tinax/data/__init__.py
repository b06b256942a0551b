"""Records, splits and deterministic, process-aware Grain pipelines.

ArrayRecord and Parquet files hold records in one versioned, pickle-free
format and read back as random-access ``grain.MapDataset`` objects. Splits
refuse rows they cannot place instead of dropping them. Training and
evaluation pipelines are fixed by their arguments, shard per process, and
yield iterators whose saved state refuses to restore into another pipeline.
Worker processes live exactly as long as an ``open_multiprocessing_iterator``
block. grain, pyarrow and array-record are imported only when a function runs.
"""

from tinax.data._array_record import read_array_record, write_array_record
from tinax.data._parquet import read_parquet_record, write_parquet_record
from tinax.data._pipelines import BatchTransform, evaluation_batches, training_batches
from tinax.data._sources import InMemorySource
from tinax.data._splits import split_by_column, split_random
from tinax.data._workers import open_multiprocessing_iterator

__all__ = [
    "BatchTransform",
    "InMemorySource",
    "evaluation_batches",
    "open_multiprocessing_iterator",
    "read_array_record",
    "read_parquet_record",
    "split_by_column",
    "split_random",
    "training_batches",
    "write_array_record",
    "write_parquet_record",
]
