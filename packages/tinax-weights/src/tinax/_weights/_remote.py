"""Weight files in a bucket (``gs://`` and ``s3://``), over tinax-core's storage layer.

Local paths go to :mod:`tinax._weights._paths` untouched. Objects are read with
large concurrent ranged GETs, each byte copied once into its array, and every
read pins the version opened (GCS generation, S3 ETag); writes upload a complete
local temporary file as one object. See docs/guide/weights.md, section "Files in a bucket".
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import os
import pathlib
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO

from tinax._core import storage
from tinax._core.storage import RemotePath
from tinax._weights._compat02 import DirectoryPathError, malformed_safetensors
from tinax._weights._paths import open_file_to_read, require_destination_path, write_file_atomically
from tinax._weights._safetensors._header import ParsedHeader, ReadableFile, read_header

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

__all__ = [
    "Location",
    "ObjectChangedError",
    "ObjectFile",
    "RemotePath",
    "display",
    "fetch_into",
    "filesystem",
    "location_to_read",
    "location_to_write",
    "object_exists",
    "open_to_read",
    "read_location_header",
    "read_object",
    "read_whole",
    "remove_object",
    "write_atomically",
]

#: A local file, or an object in a bucket.
Location = pathlib.Path | RemotePath

DISTRIBUTION = "tinax-weights"
# Pieces large enough that each GET runs at link speed; at most two batches (256 MiB) held at once.
PIECE_BYTES = 32 * 1024 * 1024
PIECES_IN_FLIGHT = 4
# Small pieces (the rows of a column shard) go many at a time, up to this many requests.
_MOST_REQUESTS_IN_FLIGHT = 256
_OBJECT_FIRST_READ_BYTES = 16 * 1024
# s3fs's concurrent reads go through threads that each wait on one request.
_S3_THREADS = 16


def read_location_header(
    handle: ReadableFile, file_size: int, location: Location, max_metadata_bytes: int
) -> ParsedHeader:
    """``read_header`` of an open file or object; an object's first read is 16 KiB (about 200 tensors)."""
    first_read = _OBJECT_FIRST_READ_BYTES if isinstance(location, RemotePath) else None
    return read_header(
        handle,
        file_size=file_size,
        source=str(location),
        max_metadata_bytes=max_metadata_bytes,
        first_read_bytes=first_read,
    )


def location_to_read(value: object, name: str) -> Location:
    """Checks a path argument to read: a bucket URL, or a local path as ``validation.require_path`` checks it."""
    return storage.require_location(value, name)


def location_to_write(value: object, name: str) -> Location:
    """Checks a destination argument: a bucket URL, or a local path as ``require_destination_path`` checks it."""
    remote = storage.as_remote(value, name)
    return remote if remote is not None else require_destination_path(value, name)


def filesystem(location: RemotePath, needed_by: str) -> AbstractFileSystem:
    """The filesystem of ``location``'s store; an ImportError naming the extra if its client is missing."""
    return storage.filesystem(location, distribution=DISTRIBUTION, needed_by=needed_by)


@contextlib.contextmanager
def open_to_read(
    location: Location, *, kind: str, needed_by: str, directory_error: type[OSError] = DirectoryPathError
) -> Iterator[tuple[ReadableFile, int]]:
    """Opens a local file (as ``open_file_to_read``) or an object (ranged GETs, no read-ahead), with its size."""
    if isinstance(location, RemotePath):
        with _open_object(filesystem(location, needed_by), location, kind) as opened:
            yield opened, opened.size
        return
    with open_file_to_read(location, kind=kind, directory_error=directory_error) as (handle, size):
        yield handle, size


@contextlib.contextmanager
def _open_object(fs: AbstractFileSystem, location: RemotePath, kind: str) -> Iterator[ObjectFile]:
    """Opens an object with one metadata request, pinning the version every read will ask for."""
    handle: Any = None
    pinned: object = None
    try:
        if location.scheme == "s3":
            # Opened without a size, s3fs reads the object's ETag and makes every read of the file require it.
            handle = fs.open(location.fs_path, "rb", cache_type="none")
            details = handle.details
        else:
            details = fs.info(location.fs_path)
            pinned = details.get("generation")
    except FileNotFoundError:
        details = {}
    if details.get("type") != "file":
        if handle is not None:
            handle.close()
        storage.object_size(fs, location, kind=kind)  # Raises, in the layer's words.
        raise FileNotFoundError(f"path must name an existing {kind}, got {location.url!r}, which appeared only now")
    if handle is None:
        handle = fs.open(location.fs_path, "rb", cache_type="none", size=int(details["size"]))
    with handle:
        yield ObjectFile(handle, location, pinned=pinned)


class ObjectChangedError(ValueError):
    """The object was replaced (or removed) after it was opened, so its bytes would mix two files."""


class ObjectFile:
    """An object read as a local file reads, by exact ranged GETs of the version opened; :meth:`fetch` does many."""

    def __init__(self, handle: Any, location: RemotePath, *, pinned: object) -> None:
        self._handle = handle
        self._location = location
        # GCS: the generation every ranged GET asks for. S3: None, the file itself requires its ETag.
        self._generation = pinned
        self._position = 0
        self.size = int(handle.size)

    def seek(self, offset: int, whence: int = os.SEEK_SET, /) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self.size}[whence]
        self._position = base + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def read(self, size: int = -1, /) -> bytes:
        end = self.size if size < 0 else min(self.size, self._position + size)
        data = self.fetch([(self._position, end)])[0] if end > self._position else b""
        self._position += len(data)
        return data

    def readinto(self, buffer: memoryview, /) -> int:
        data = self.read(buffer.nbytes)
        buffer[: len(data)] = data
        return len(data)

    def fetch(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The bytes of each ``[start, end)`` range, fetched concurrently; ObjectChangedError if the object changed."""
        expired = getattr(sys.modules.get("s3fs.utils"), "FileExpired", None)
        errors = (FileNotFoundError, expired) if expired is not None else (FileNotFoundError,)
        try:
            if self._location.scheme == "s3" and len(ranges) == 1:
                return [bytes(self._handle._fetch_range(*ranges[0]))]
            if self._location.scheme == "s3":
                # The file's own ranged reads carry its If-Match; threads make them concurrent.
                workers = max(1, min(len(ranges), _S3_THREADS))
                with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="tinax-weights-get") as pool:
                    return [bytes(data) for data in pool.map(lambda span: self._handle._fetch_range(*span), ranges)]
            fs, path = self._handle.fs, self._handle.path
            pinned = {"generation": self._generation} if self._generation is not None else {}
            starts, ends = [start for start, _ in ranges], [end for _, end in ranges]
            results = fs.cat_ranges([path] * len(ranges), starts, ends, **pinned)
            for result in results:
                if isinstance(result, BaseException):
                    raise result
            return [bytes(result) for result in results]
        except errors as error:
            raise ObjectChangedError(
                f"{self._location.url} was replaced or removed while it was being read, so its bytes would mix two "
                f"versions; read it again ({type(error).__name__}: {error})"
            ) from error


@contextlib.contextmanager
def write_atomically(location: Location, *, overwrite: bool, needed_by: str) -> Iterator[BinaryIO]:
    """Writes a local file atomically (as ``write_file_atomically``) or publishes one complete object."""
    if isinstance(location, RemotePath):
        fs = filesystem(location, needed_by)
        with storage.remote_write(fs, location, overwrite=overwrite) as handle:
            yield handle
        return
    with write_file_atomically(location, overwrite=overwrite) as handle:
        yield handle


def fetch_into(handle: ReadableFile, targets: Sequence[tuple[int, memoryview]], *, source: str, what: str) -> None:
    """Fills each ``(object offset, buffer)`` target (sorted, disjoint) in few large concurrent GETs.

    Adjacent targets are fetched as one run; an object that got shorter raises ValueError (a SafetensorError).
    """
    if not isinstance(handle, ObjectFile):
        raise TypeError(f"fetch_into reads objects opened by open_to_read, got {type(handle).__name__}")
    pieces: list[tuple[int, int]] = []
    run_start = run_end = -1
    for offset, buffer in targets:
        if not buffer.nbytes:
            continue
        if offset != run_end:
            pieces.extend(_cut(run_start, run_end))
            run_start = offset
        run_end = offset + buffer.nbytes
    pieces.extend(_cut(run_start, run_end))

    cursor = 0  # The first target that the pieces still to come may fill.
    live = [(offset, buffer) for offset, buffer in targets if buffer.nbytes]

    batches = list(_batches(pieces))
    # The next batch downloads while this one is copied into place.
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tinax-weights-fetch") as pool:
        pending = [pool.submit(handle.fetch, batch) for batch in batches[:1]]
        for number, batch in enumerate(batches):
            results = pending.pop().result()
            pending.extend(pool.submit(handle.fetch, following) for following in batches[number + 1 : number + 2])
            cursor = _place(batch, results, live, cursor, source=source, what=what)
            del results


def _place(
    batch: list[tuple[int, int]],
    results: list[bytes],
    live: list[tuple[int, memoryview]],
    cursor: int,
    *,
    source: str,
    what: str,
) -> int:
    """Copies fetched pieces into the targets they overlap; returns the first target still to fill."""
    for (start, end), data in zip(batch, results, strict=True):
        if len(data) != end - start:
            raise malformed_safetensors(
                f"{source} ended after {start + len(data)} bytes while {what} were read up to byte {end} "
                "(was it replaced while being read?)"
            )
        view = memoryview(data)
        index = cursor
        while index < len(live) and live[index][0] < end:
            offset, buffer = live[index]
            low, high = max(start, offset), min(end, offset + buffer.nbytes)
            buffer[low - offset : high - offset] = view[low - start : high - start]
            if offset + buffer.nbytes <= end:
                cursor = index + 1
            index += 1
        del view
    return cursor


def _batches(pieces: list[tuple[int, int]]) -> Iterator[list[tuple[int, int]]]:
    """Groups pieces into concurrent batches of at most ``PIECES_IN_FLIGHT`` full pieces' bytes."""
    budget = PIECES_IN_FLIGHT * PIECE_BYTES
    batch: list[tuple[int, int]] = []
    filled = 0
    for start, end in pieces:
        if batch and (filled + end - start > budget or len(batch) >= _MOST_REQUESTS_IN_FLIGHT):
            yield batch
            batch, filled = [], 0
        batch.append((start, end))
        filled += end - start
    if batch:
        yield batch


def _cut(start: int, end: int) -> list[tuple[int, int]]:
    """``[start, end)`` in pieces of at most ``PIECE_BYTES``; nothing for the empty run."""
    if start < 0 or end <= start:
        return []
    return [(low, min(end, low + PIECE_BYTES)) for low in range(start, end, PIECE_BYTES)]


def read_whole(handle: ReadableFile, size: int, *, source: str, what: str) -> io.BytesIO:
    """The whole object as an in-memory file, fetched as :func:`fetch_into` fetches."""
    content = bytearray(size)
    fetch_into(handle, [(0, memoryview(content))], source=source, what=what)
    return io.BytesIO(content)


def object_exists(location: RemotePath, needed_by: str) -> bool:
    """Whether an object has this name."""
    return bool(filesystem(location, needed_by).isfile(location.fs_path))


def read_object(location: Location, needed_by: str) -> bytes | None:
    """The bytes of a small file or object, or None if there is none."""
    try:
        if isinstance(location, pathlib.Path):
            return location.read_bytes()
        return bytes(filesystem(location, needed_by).cat_file(location.fs_path))
    except FileNotFoundError:
        return None


def remove_object(location: Location, needed_by: str) -> None:
    """Removes a file or object; one already gone (or that cannot be removed) is left as it is."""
    with contextlib.suppress(OSError):
        if isinstance(location, pathlib.Path):
            location.unlink()
        else:
            filesystem(location, needed_by).rm_file(location.fs_path)


def display(location: Location) -> str:
    """The location as messages and log lines name it."""
    return os.fspath(location) if isinstance(location, pathlib.Path) else location.url
