"""Where the record readers' files are: a local path, or an object in a bucket (``gs://``, ``s3://``).

Only a :class:`~tinax._core.storage.RemotePath` takes the ranged-request branch (fsspec, imported then).
"""

from __future__ import annotations

import os
import pathlib
from typing import Any, BinaryIO

from tinax._core import storage
from tinax._core.storage import RemotePath

__all__ = [
    "Location",
    "RemotePath",
    "file_size",
    "open_object",
    "pickled_location",
    "read_object_range",
    "remote_filesystem",
    "require_remote_file",
    "restored_location",
]

#: A file of a record reader: a local path or a bucket location.
Location = pathlib.Path | RemotePath

_DISTRIBUTION = "tinax-data"
# The reader a missing client's message names; a worker reopening files knows only their kind.
_READERS = {"Parquet": "tinax.data.read_parquet_record", "ArrayRecord": "tinax.data.read_array_record"}


def remote_filesystem(location: RemotePath, needed_by: str) -> Any:
    """The fsspec filesystem of ``location``'s store (ImportError naming ``tinax-data[gcs]``/``[s3]`` without it)."""
    return storage.filesystem(location, distribution=_DISTRIBUTION, needed_by=needed_by)


def open_object(location: RemotePath, *, container: str = "Parquet") -> BinaryIO:
    """Opens an object for ranged reads without read-ahead: every read fetches exactly the bytes asked for.

    On S3 the ETag read on open is required by later reads, so a replaced object fails rather than mixing bytes.
    """
    fs = remote_filesystem(location, _READERS.get(container, _READERS["Parquet"]))
    handle: BinaryIO = fs.open(location.fs_path, "rb", cache_type="none")
    return handle


def read_object_range(location: RemotePath, start: int, end: int) -> bytes:
    """The bytes ``[start, end)`` of an object, in one ranged request."""
    return storage.read_range(remote_filesystem(location, _READERS["Parquet"]), location, start, end)


def require_remote_file(location: RemotePath, container: str) -> int:
    """Checks that an object (not a prefix) is at ``location`` before a reader opens it; returns its size."""
    fs = remote_filesystem(location, _READERS[container])
    # Another process may have written the object since this one last listed its prefix.
    fs.invalidate_cache(location.fs_path)
    try:
        return storage.object_size(fs, location, kind=f"{container} file")
    except FileNotFoundError as error:
        what = "a prefix (a folder)" if "prefix" in str(error) else "nothing"
        raise FileNotFoundError(f"No {container} file at {location.url!r}: {what} is there") from None


def file_size(path: Location, container: str = "Parquet") -> int:
    """The size of a local file (``os.stat``) or of an object, in bytes."""
    if isinstance(path, RemotePath):
        return storage.object_size(remote_filesystem(path, _READERS[container]), path, kind=f"{container} file")
    return os.stat(path).st_size


def pickled_location(path: Location) -> Any:
    """What a reader pickles for its path: the text of a local path (as before), the location of an object."""
    return path if isinstance(path, RemotePath) else os.fspath(path)


def restored_location(value: Any) -> Location:
    """The path a pickled reader was made with, from :func:`pickled_location`."""
    return value if isinstance(value, RemotePath) else pathlib.Path(value)
