"""Object storage locations (``gs://`` and ``s3://``) for the path arguments of the tinax distributions.

One filesystem layer serves every member: fsspec, with gcsfs for ``gs://``
and s3fs for ``s3://``, installed by each member's ``gcs`` and ``s3`` extras.
Object stores have no rename, so "complete or absent" rests on what a store
does guarantee: a single PUT, a finished multipart upload and a finalised
resumable upload each appear whole or not at all, and ``If-None-Match: *``
(S3) or ``ifGenerationMatch=0`` (GCS) make a write create-if-absent. The
guide's "Object storage" page describes the promises per store.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import posixpath
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO

from tinax._core import validation
from tinax._core.files import exists_error
from tinax._core.optional import import_optional

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

__all__ = [
    "RemotePath",
    "as_remote",
    "filesystem",
    "local_copy_to_publish",
    "object_size",
    "open_to_read",
    "publish_file",
    "read_range",
    "remote_write",
    "require_location",
]


@dataclasses.dataclass(frozen=True)
class _Store:
    client: str
    extra: str


_STORES = {"gs": _Store(client="gcsfs", extra="gcs"), "s3": _Store(client="s3fs", extra="s3")}


@dataclasses.dataclass(frozen=True)
class RemotePath:
    """A location in a bucket: ``scheme://bucket/key`` (``key`` may be empty for the bucket's root)."""

    scheme: str
    bucket: str
    key: str

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key}" if self.key else f"{self.scheme}://{self.bucket}"

    @property
    def fs_path(self) -> str:
        """The path as fsspec names it: ``bucket/key``, without the scheme."""
        return f"{self.bucket}/{self.key}" if self.key else self.bucket

    @property
    def name(self) -> str:
        return posixpath.basename(self.key)

    @property
    def parent(self) -> RemotePath:
        return RemotePath(self.scheme, self.bucket, posixpath.dirname(self.key))

    def joinpath(self, *parts: str) -> RemotePath:
        key = posixpath.join(self.key, *parts) if self.key else posixpath.join(*parts)
        return RemotePath(self.scheme, self.bucket, posixpath.normpath(key))

    def __truediv__(self, part: str) -> RemotePath:
        return self.joinpath(part)

    def __str__(self) -> str:
        return self.url


def as_remote(value: object, name: str, *, needs_key: bool = True) -> RemotePath | None:
    """Returns the bucket location ``value`` names, or None for anything else (a local path).

    Strings and ``os.PathLike`` objects (``etils.epath.Path`` among them)
    whose text starts with ``gs://`` or ``s3://`` are locations in a bucket.

    Args:
      value: A path argument.
      name: The argument's name, for messages.
      needs_key: Whether the location must name an object or prefix inside
        the bucket (a file does); a folder argument may name a bucket's root.

    Returns:
      The location, or None if ``value`` is not a ``gs://`` or ``s3://`` URL.

    Raises:
      ValueError: If the URL names no bucket, or no key where one is needed.
    """
    if not isinstance(value, (str, os.PathLike)):
        return None
    text = os.fspath(value)
    if not isinstance(text, str):
        return None
    scheme, separator, rest = text.partition("://")
    if not separator or scheme not in _STORES:
        return None
    bucket, _, key = rest.partition("/")
    key = key.strip("/")
    if not bucket:
        raise ValueError(f"{name} must name a bucket after {scheme}://, got {text!r}")
    if needs_key and not key:
        raise ValueError(f"{name} must name an object inside the bucket, got {text!r}")
    if key:
        key = posixpath.normpath(key)
        if key.startswith("..") or "/../" in f"/{key}/":
            raise ValueError(f"{name} must not climb out of its bucket with '..', got {text!r}")
    return RemotePath(scheme, bucket, key)


def require_location(value: object, name: str, *, needs_key: bool = True) -> pathlib.Path | RemotePath:
    """Checks a path argument that may also be a ``gs://`` or ``s3://`` URL.

    Returns:
      The bucket location for a URL, else the local path as :func:`validation.require_path` gives it.

    Raises:
      TypeError: If ``value`` is not a ``str`` or ``os.PathLike[str]``.
      ValueError: If the path is empty, or the URL names no bucket (or no key where one is needed).
    """
    remote = as_remote(value, name, needs_key=needs_key)
    return remote if remote is not None else validation.require_path(value, name)


def filesystem(
    location: RemotePath, *, distribution: str, needed_by: str, install_hint: str | None = None
) -> AbstractFileSystem:
    """The fsspec filesystem of ``location``'s store.

    Args:
      location: The bucket location.
      distribution: The tinax distribution whose extra installs the client,
        such as ``"tinax-weights"``.
      needed_by: The public function, for the message of a missing client.
      install_hint: The install command to name instead of the distribution's extra.

    Returns:
      The (cached) filesystem instance.

    Raises:
      ImportError: If the store's client is not installed; the message names
        the extra that installs it.
    """
    store = _STORES[location.scheme]
    hint = install_hint or f'pip install "{distribution}[{store.extra}]"'
    import_optional(store.client, needed_by=needed_by, install_hint=hint)
    fsspec = import_optional("fsspec", needed_by=needed_by, install_hint=hint)
    return fsspec.filesystem(location.scheme)


def object_size(fs: AbstractFileSystem, location: RemotePath, *, kind: str) -> int:
    """The size of the object at ``location``, refusing a missing object or a prefix.

    Raises:
      FileNotFoundError: If no object has this name (a prefix with objects
        under it included: it is a folder, not a file).
    """
    try:
        info = fs.info(location.fs_path)
    except FileNotFoundError:
        info = None
    if info is None or info.get("type") != "file":
        what = "which is a prefix (a folder), not an object" if info is not None else "which does not exist"
        raise FileNotFoundError(f"path must name an existing {kind}, got {location.url!r}, {what}")
    return int(info["size"])


@contextlib.contextmanager
def open_to_read(fs: AbstractFileSystem, location: RemotePath, *, kind: str) -> Iterator[tuple[BinaryIO, int]]:
    """Opens an object to read with ranged GETs, with its size.

    The file has no read-ahead cache: each read asks the store for exactly
    the bytes requested, so reading one tensor of a large file fetches that
    tensor and no more.

    Yields:
      The open file and the object's size in bytes.

    Raises:
      FileNotFoundError: If no object has this name.
    """
    size = object_size(fs, location, kind=kind)
    with fs.open(location.fs_path, "rb", cache_type="none", size=size) as handle:
        yield handle, size


def publish_file(fs: AbstractFileSystem, source: pathlib.Path, location: RemotePath, *, overwrite: bool) -> None:
    """Uploads a complete local file to ``location`` as one object that appears whole or not at all.

    Without ``overwrite``, the upload is conditional on the object being
    absent, so of two racing writers exactly one succeeds.

    Raises:
      FileExistsError: If the object exists (or another writer created it
        during the upload) and ``overwrite`` is False.
    """
    if not overwrite and fs.exists(location.fs_path):
        raise exists_error(location.url, "this write does not replace existing objects")
    try:
        fs.put_file(os.fspath(source), location.fs_path, mode="overwrite" if overwrite else "create")
    except FileExistsError:
        raise exists_error(
            location.url,
            "another writer created it meanwhile, and this write does not replace existing objects",
        ) from None
    fs.invalidate_cache(location.parent.fs_path)


@contextlib.contextmanager
def local_copy_to_publish(
    fs: AbstractFileSystem, location: RemotePath, *, overwrite: bool, suffix: str = ""
) -> Iterator[pathlib.Path]:
    """Gives a local temporary path whose complete file is uploaded to ``location`` when the block ends.

    For writers that open a path themselves (array-record, Parquet). If the
    block raises, nothing is uploaded. An existing object is refused before
    the block runs when ``overwrite`` is False.

    Raises:
      FileExistsError: As :func:`publish_file`.
    """
    if not overwrite and fs.exists(location.fs_path):
        raise exists_error(location.url, "this write does not replace existing objects")
    with tempfile.TemporaryDirectory(prefix="tinax-upload-") as folder:
        temporary = pathlib.Path(folder) / f"{location.name or 'object'}{suffix}"
        temporary.touch()
        yield temporary
        publish_file(fs, temporary, location, overwrite=overwrite)


@contextlib.contextmanager
def remote_write(fs: AbstractFileSystem, location: RemotePath, *, overwrite: bool) -> Iterator[BinaryIO]:
    """Gives a binary file whose complete content becomes the object at ``location`` when the block ends.

    Raises:
      FileExistsError: As :func:`publish_file`.
    """
    with local_copy_to_publish(fs, location, overwrite=overwrite) as temporary, open(temporary, "wb") as handle:
        yield handle
        handle.flush()


def read_range(fs: AbstractFileSystem, location: RemotePath, start: int, end: int) -> bytes:
    """The bytes ``[start, end)`` of the object, in one ranged GET."""
    data: Any = fs.cat_file(location.fs_path, start=start, end=end)
    return bytes(data)
