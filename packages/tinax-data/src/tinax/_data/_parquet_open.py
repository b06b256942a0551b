"""``read_parquet_record``: the opener of Parquet record files, above both the writer and the reader.

It checks its arguments and the file, then builds the reader
(``tinax._data._parquet_source``, which imports pyarrow) only when it runs, so
importing ``tinax.data`` imports no pyarrow. The reader builds on the layout
the writer (``tinax._data._parquet``) defines; living here, the opener keeps
both of them importing only downward.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tinax._core import validation
from tinax._data._arrow_values import MAPPINGS
from tinax._data._file_sets import FileSet, resolve_record_paths
from tinax._data._locations import RemotePath
from tinax._data._parquet import DEFAULT_CACHE_BYTES
from tinax._data._record_codec import require_record_file

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

    A file :func:`write_parquet_record` wrote in the tinax record format reads
    back exactly as written, whatever ``mapping`` says; any other Parquet file
    reads as ``mapping`` says (``"python"``: pyarrow's ``to_pylist`` rows, as
    tinax 0.2 read them; ``"numpy"``: lists of numbers and tensors become NumPy
    arrays). Only the footer is read on open; indexing decodes whole row groups
    into a per-process cache of at most ``cache_bytes``. The data user guide's
    "Reading Parquet files" section describes both mappings and the cache.

    A folder, a glob pattern or a list of paths opens many files as one
    dataset: their rows one file after the other, the files sorted by their
    paths relative to the folder (of the pattern before its first wildcard,
    or the folders the listed paths share). Only their footers are read on
    open. A folder's files are all files under it whose names, and whose
    folders' names, do not start with ``.`` or ``_`` (as pyarrow's dataset
    discovery takes them). Plain tables are read in the schema
    ``pyarrow.unify_schemas`` makes of theirs, a column a file lacks giving
    missing values there, and hive partition folders (``lang=en/``) add
    their values as fields, typed as pyarrow's discovery types them. The
    data guide's "Datasets of many files" section says more.

    Args:
      path: The file; or a folder, a glob pattern or a sequence of paths of
        many files. A ``gs://`` or ``s3://`` URL (a str or an
        ``etils.epath.Path``) names an object, and a prefix or pattern the
        objects under it (as a folder's files); objects are read with
        ranged requests, the footer on open and a row group when it is
        read (needs ``tinax-data[gcs]`` or ``tinax-data[s3]``).
      mapping: ``"python"`` or ``"numpy"``, how the values of a file outside
        the tinax format become Python values.
      cache_bytes: The memory budget of the cache of decoded row groups, in
        bytes (the Arrow-decoded size). One row group is always kept, even
        if it alone is larger.

    Returns:
      A ``grain.MapDataset`` of ``dict`` rows over a
      :class:`ParquetRecordSource`. For the tinax format it equals what
      :func:`read_array_record` gives for the same records. A row group that
      turns out to be corrupt when it is read raises ``ValueError`` naming
      the path and index, and so does, with ``mapping="numpy"``, a row
      where an array would need a missing value (naming the column and
      the row).

    Raises:
      TypeError: If ``path`` is not a path or a sequence of paths,
        ``mapping`` is not a str or ``cache_bytes`` not an int.
      FileNotFoundError: If no file exists at ``path``, a folder or pattern
        holds no file, a listed path is no file, or a path is empty (also a
        ValueError).
      ValueError: If ``path`` is not a Parquet file (a
        ``pyarrow.ArrowInvalid``, as tinax 0.2 raised), or carries the tinax
        metadata but contradicts it (truncated, columns that do not match,
        a newer format version), the cause chained; if ``mapping`` is not
        one of the two, ``cache_bytes`` is below 1, or, with
        ``mapping="numpy"``, a column has a type without a mapping. For
        many files also: if they mix the tinax format with plain tables,
        hold tinax records of different schemas or columns pyarrow cannot
        unify (naming two files and the column), or a list names a file
        twice, or mixes URLs with local paths or buckets.
      ImportError: If ``path`` is a URL whose store's client is not
        installed.

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
    # grain's source dataset, refusing bool indices that it would read as 0 or 1, and the
    # readers, which import pyarrow.
    from tinax._data._reader_datasets import source_dataset

    if isinstance(found, FileSet):
        from tinax._data._parquet_files import ParquetFilesSource

        return source_dataset(ParquetFilesSource(found, mapping=mapping, cache_bytes=cache_bytes))
    from tinax._data._parquet_source import ParquetRecordSource

    if isinstance(found, RemotePath):  # An object, found by resolve_record_paths.
        return source_dataset(ParquetRecordSource(found, mapping=mapping, cache_bytes=cache_bytes))
    require_record_file(found, "Parquet")
    return source_dataset(ParquetRecordSource(found.absolute(), mapping=mapping, cache_bytes=cache_bytes))
