"""``read_array_record``: the opener of ArrayRecord record files, one file or many.

It checks its arguments and finds the files, then builds the reader of one
file (``tinax._data._array_record``) or of many
(``tinax._data._array_record_files``, which builds on the first); living
here, above both, it keeps both importing only downward.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tinax._core import validation
from tinax._data._array_record import ArrayRecordSource, _array_record_module
from tinax._data._file_sets import FileSet, resolve_record_paths
from tinax._data._locations import RemotePath
from tinax._data._parquet import DEFAULT_CACHE_BYTES
from tinax._data._record_codec import require_record_file

if TYPE_CHECKING:
    import grain

__all__ = ["UnsupportedStoreError", "read_array_record", "require_readable_store"]


def read_array_record(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    decode: Callable[[bytes], Any] | None = None,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> grain.MapDataset:
    """Opens an ArrayRecord file of records, or many as one dataset, as a random-access dataset.

    A file :func:`write_array_record` wrote in the tinax record format reads
    back exactly as written. Any other file's records are given by
    ``decode`` when it is given; without it they are read as JSON records
    (what :func:`write_array_record` writes for records JSON can hold, as
    tinax 0.2 wrote every file) through ``json.loads``, as tinax 0.2 read
    them, and a record that is not JSON raises a ValueError naming the path
    and suggesting ``decode``. Only the last record is read on open. Records are read
    and decoded when they are indexed, so the dataset supports ``len``,
    indexing, ``shuffle`` and every other ``MapDataset`` transformation, and
    it can be sent to Grain's multiprocessing workers (each reopens the file
    on first use).

    A folder, a glob pattern or a list of paths opens many files (the
    shards an Apache Beam pipeline writes, say) as one dataset: their
    records one file after the other, the files sorted by their paths
    relative to the folder (of the pattern before its first wildcard, or
    the folders the listed paths share), a folder's files being all those
    whose names, and whose folders' names, do not start with ``.`` or
    ``_``. Only each file's last record is read on open.

    Args:
      path: The file; or a folder, a glob pattern or a sequence of paths of
        many files. A ``gs://`` URL (a str or an ``etils.epath.Path``) names
        an object, and a prefix or pattern the objects under it, read by
        array-record's own file layer (needs ``tinax-data[gcs]`` for the
        listing); ``s3://`` is refused.
      decode: For files without the tinax header: a function that turns one
        record's bytes into the record (a protocol buffer parser, say). It
        must be picklable (a module-level function) to reach Grain's worker
        processes. Ignored for files in the tinax format.
      cache_bytes: The memory budget, in bytes per process, of the fields
        a pipeline with ``batch_fn=stack_records`` keeps decoded: where the
        stacked fields of every record fit it (and stack alike: numbers,
        arrays of one dtype and shape), they are held whole after their
        first read and later batches are gathered from them. Other reads
        keep nothing.

    Returns:
      A ``grain.MapDataset`` of records over an :class:`ArrayRecordSource`. A
      record that turns out to be corrupt when it is read raises
      ``ValueError`` naming the path and index (for JSON records, the
      ``json.JSONDecodeError`` tinax 0.2 raised, with the path and index in
      a note).

    Raises:
      TypeError: If ``path`` is not a path or a sequence of paths,
        ``decode`` is neither None nor callable, or ``cache_bytes`` is not
        an int.
      ValueError: If ``cache_bytes`` is below 1; for many files, if they
        mix the tinax format with other records, hold tinax records of
        different schemas (naming two files), or a list names a file twice.
      FileNotFoundError: If no file exists at ``path``, a folder or pattern
        holds no file, a listed path is no file, or a path is empty (also a
        ValueError).
      UnreadableArrayRecordError: If ``path`` is not an ArrayRecord file, or
        holds a tinax header that is malformed or from a newer format
        version (a ValueError, and the RuntimeError tinax 0.2 raised); the
        cause is chained.
      UnsupportedStoreError: If ``path`` is an ``s3://`` URL, which
        array-record cannot read (a ValueError).
      ImportError: If array-record is not installed, or ``path`` is a URL
        whose store's client is not.

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
    from tinax._data._reader_datasets import source_dataset

    if isinstance(found, FileSet):
        if isinstance(found.root, RemotePath):
            require_readable_store(found.root)
        from tinax._data._array_record_files import ArrayRecordFilesSource

        return source_dataset(ArrayRecordFilesSource(found, decode=decode, cache_bytes=cache_bytes))
    if isinstance(found, RemotePath):
        require_readable_store(found)  # An object, found by resolve_record_paths.
        return source_dataset(ArrayRecordSource(found, decode=decode, cache_bytes=cache_bytes))
    require_record_file(found, "ArrayRecord")
    return source_dataset(ArrayRecordSource(found.absolute(), decode=decode, cache_bytes=cache_bytes))


class UnsupportedStoreError(ValueError):
    """array-record's reader cannot read files in this object store (a ValueError: the URL is one it cannot serve)."""


def require_readable_store(location: RemotePath) -> None:
    """Refuses a store array-record's own file layer cannot read (it reads ``gs://``, and no ``s3://``).

    Raises:
      UnsupportedStoreError: For an ``s3://`` location.
    """
    if location.scheme == "gs":
        return
    raise UnsupportedStoreError(
        f"path must be a local path or a gs:// URL for ArrayRecord files, got {location.url!r}: array-record "
        f"cannot read files from {location.scheme}:// storage. Write the records with write_parquet_record and "
        "read them with read_parquet_record (which reads any store), or copy the files to a local folder first"
    )
