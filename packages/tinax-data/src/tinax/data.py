"""Records, splits and deterministic, process-aware Grain pipelines.

ArrayRecord and Parquet files read back as random-access ``grain.MapDataset``
objects. Records tinax 0.2 could write are written and read as 0.2 did; others
use a versioned, pickle-free format that reads back exactly. Splits and
pipelines give 0.2's parts and batches for the same arguments, and iterator
states refuse to restore into another pipeline. grain, pyarrow and
array-record are imported only when a function runs. See docs/guide/data.md.
"""

from tinax._core._command._versions import distribution_version as _distribution_version
from tinax._data._pipelines._batches import BatchTransform, evaluation_batches, training_batches
from tinax._data._pipelines._redeal import redeal_state
from tinax._data._pipelines._workers import open_multiprocessing_iterator
from tinax._data._records._array_record_open import read_array_record
from tinax._data._records._array_record_write import write_array_record
from tinax._data._records._parquet_open import read_parquet_record
from tinax._data._records._parquet_write import write_parquet_record
from tinax._data._records._source_identity import InMemorySource
from tinax._data._splits import split_by_column, split_random
from tinax._data._stacking import stack_records

__all__ = [
    "BatchTransform",
    "InMemorySource",
    "evaluation_batches",
    "open_multiprocessing_iterator",
    "read_array_record",
    "read_parquet_record",
    "redeal_state",
    "split_by_column",
    "split_random",
    "stack_records",
    "training_batches",
    "write_array_record",
    "write_parquet_record",
]

#: The version of the installed tinax-data distribution, which ships this module.
__version__: str = _distribution_version("tinax-data", __file__)
