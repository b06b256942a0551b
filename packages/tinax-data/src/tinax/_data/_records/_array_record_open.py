"""``read_array_record``: the opener of ArrayRecord record files, one file or many.

It lives above the one-file and many-file readers so that both import only downward.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tinax._core import validation
from tinax._core.storage import UnsupportedStoreError
from tinax._data._records._array_record import ArrayRecordSource, _array_record_module
from tinax._data._records._file_sets import FileSet, resolve_record_paths
from tinax._data._records._locations import RemotePath
from tinax._data._records._record_codec import require_record_file
from tinax._data._records._record_file_source import DEFAULT_CACHE_BYTES

if TYPE_CHECKING:
    import grain

__all__ = ["read_array_record", "require_readable_store"]


def read_array_record(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    decode: Callable[[bytes], Any] | None = None,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> grain.MapDataset:
    """Opens an ArrayRecord file of records, or many as one dataset, as a random-access dataset.

    A file in the tinax record format reads back exactly as written. Other
    files' records go through ``decode``, or else ``json.loads`` as tinax 0.2
    read them (a non-JSON record raises a ValueError suggesting ``decode``).
    Only the last record is read on open; records are decoded when indexed,
    and the dataset can go to grain's worker processes. A folder, glob
    pattern or list opens many files as one dataset, sorted by path (see
    the data guide, section "Datasets of many files").

    Args:
      path: The file; or a folder, a glob pattern or a sequence of paths. A
        ``gs://`` URL names an object, prefix or pattern (listing needs
        ``tinax-data[gcs]``); ``s3://`` is refused.
      decode: For files without the tinax header: a picklable function turning
        one record's bytes into the record. Ignored for tinax-format files.
      cache_bytes: Per-process budget for holding the stacked fields whole for
        pipelines with ``batch_fn=stack_records``, where they fit and stack alike.

    Returns:
      A ``grain.MapDataset`` of records over an :class:`ArrayRecordSource`; a
      record found corrupt when read raises ``ValueError`` naming path and
      index (for JSON, 0.2's ``json.JSONDecodeError``).

    Raises:
      TypeError: If an argument has the wrong type.
      ValueError: If ``cache_bytes`` is below 1, or many files mix kinds or schemas or a list names a file twice.
      FileNotFoundError: If a path, folder or pattern holds no file, or a path is empty (also a ValueError).
      UnreadableArrayRecordError: If a file is no ArrayRecord or has a bad tinax header (a ValueError and RuntimeError).
      UnsupportedStoreError: If ``path`` is an ``s3://`` URL (a ValueError).
      ImportError: If array-record, or a URL's store client, is not installed.

    Examples:
      >>> import numpy as np
      >>> from tinax.data import read_array_record, write_array_record
      >>> write_array_record("rows.array_record", [{"x": np.arange(2.0) + i, "label": i} for i in range(3)])
      >>> dataset = read_array_record("rows.array_record")
      >>> dataset[2]["x"].tolist(), dataset[2]["label"]
      ([2.0, 3.0], 2)
    """
    found = resolve_record_paths(path, "path", "ArrayRecord")
    if decode is not None:
        validation.require_callable(decode, "decode")
    cache_bytes = validation.require_positive_int(cache_bytes, "cache_bytes")
    _array_record_module("read_array_record")
    # grain's source dataset, refusing bool indices that it would read as 0 or 1.
    from tinax._data._records._reader_datasets import source_dataset

    if isinstance(found, FileSet):
        if isinstance(found.root, RemotePath):
            require_readable_store(found.root)
        from tinax._data._records._array_record_files import ArrayRecordFilesSource

        return source_dataset(ArrayRecordFilesSource(found, decode=decode, cache_bytes=cache_bytes))
    if isinstance(found, RemotePath):
        require_readable_store(found)  # An object, found by resolve_record_paths.
        return source_dataset(ArrayRecordSource(found, decode=decode, cache_bytes=cache_bytes))
    require_record_file(found, "ArrayRecord")
    return source_dataset(ArrayRecordSource(found.absolute(), decode=decode, cache_bytes=cache_bytes))


def require_readable_store(location: RemotePath) -> None:
    """Refuses a store array-record's own file layer cannot read (it reads ``gs://``, and no ``s3://``)."""
    if location.scheme == "gs":
        return
    raise UnsupportedStoreError(
        f"path must be a local path or a gs:// URL for ArrayRecord files, got {location.url!r}: array-record "
        f"cannot read files from {location.scheme}:// storage. Write the records with write_parquet_record and "
        "read them with read_parquet_record (which reads any store), or copy the files to a local folder first"
    )
