"""``read_parquet_record``: the opener of Parquet record files, above both the writer and the reader.

It imports the reader (and pyarrow) only when it runs, and keeps writer and reader importing only downward.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tinax._core import validation
from tinax._data._records._arrow_values import MAPPINGS
from tinax._data._records._file_sets import FileSet, resolve_record_paths
from tinax._data._records._locations import RemotePath
from tinax._data._records._record_codec import require_record_file
from tinax._data._records._record_file_source import DEFAULT_CACHE_BYTES

if TYPE_CHECKING:
    import grain

__all__ = ["read_parquet_record"]


def read_parquet_record(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    mapping: str = "python",
    cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> grain.MapDataset:
    """Opens a Parquet file, or many as one dataset, as a random-access dataset of dict rows.

    A tinax-format file reads back exactly as written, whatever ``mapping``
    says; other files read as ``mapping`` says. Only the footer is read on
    open; indexing decodes whole row groups into a per-process cache. A
    folder, glob pattern or list opens many files as one dataset, sorted by
    path. See the data guide, sections "Reading Parquet files" and
    "Datasets of many files".

    Args:
      path: The file; or a folder, a glob pattern or a sequence of paths. A
        ``gs://`` or ``s3://`` URL names an object, prefix or pattern, read
        with ranged requests (needs ``tinax-data[gcs]`` or ``tinax-data[s3]``).
      mapping: ``"python"`` (pyarrow's ``to_pylist`` rows, as tinax 0.2) or
        ``"numpy"`` (lists of numbers and tensors become NumPy arrays).
      cache_bytes: The budget of the decoded row-group cache, in Arrow-decoded
        bytes; one row group is always kept.

    Returns:
      A ``grain.MapDataset`` of ``dict`` rows over a :class:`ParquetRecordSource`;
      a corrupt row group, or with ``mapping="numpy"`` an array needing a
      missing value, raises ``ValueError`` when read.

    Raises:
      TypeError: If an argument has the wrong type.
      FileNotFoundError: If a path, folder or pattern holds no file, or a path is empty (also a ValueError).
      ValueError: If a file is not Parquet (also ``pyarrow.ArrowInvalid``), or the files or an argument are unusable.
      ImportError: If ``path`` is a URL whose store's client is not installed.

    Examples:
      >>> from tinax.data import read_parquet_record, write_parquet_record
      >>> write_parquet_record("rows.parquet", [{"text": "a", "label": 0}, {"text": "b", "label": 1}])
      >>> dataset = read_parquet_record("rows.parquet")
      >>> len(dataset), dataset[1]
      (2, {'text': 'b', 'label': 1})
    """
    found = resolve_record_paths(path, "path", "Parquet")
    mapping = validation.require_str(mapping, "mapping")
    if mapping not in MAPPINGS:
        validation.fail_value("mapping", f"one of {list(MAPPINGS)}", mapping)
    cache_bytes = validation.require_positive_int(cache_bytes, "cache_bytes")
    # Imported here: grain's source dataset and the readers import grain and pyarrow.
    from tinax._data._records._reader_datasets import source_dataset

    if isinstance(found, FileSet):
        from tinax._data._records._parquet_files import ParquetFilesSource

        return source_dataset(ParquetFilesSource(found, mapping=mapping, cache_bytes=cache_bytes))
    from tinax._data._records._parquet_source import ParquetRecordSource

    if isinstance(found, RemotePath):  # An object, found by resolve_record_paths.
        return source_dataset(ParquetRecordSource(found, mapping=mapping, cache_bytes=cache_bytes))
    require_record_file(found, "Parquet")
    return source_dataset(ParquetRecordSource(found.absolute(), mapping=mapping, cache_bytes=cache_bytes))
