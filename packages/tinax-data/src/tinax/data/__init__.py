"""tinax.data (being built: public names are added here as they land)."""

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
