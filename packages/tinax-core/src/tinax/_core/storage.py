"""Object storage locations (``gs://``, ``s3://``) for the path arguments of the tinax distributions.

One layer serves every member: fsspec with gcsfs or s3fs (each member's ``gcs``/``s3`` extras).
Stores have no rename, so "complete or absent" rests on whole-object uploads and
create-if-absent writes. See docs/guide/storage.md for the promises per store.
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
    "UnsupportedStoreError",
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
_NOT_REPLACED = "this write does not replace existing objects"


class UnsupportedStoreError(ValueError):
    """A valid bucket URL of a store a member's upstream library cannot serve (``s3://`` for array-record, Orbax)."""


@dataclasses.dataclass(frozen=True)
class RemotePath:
    """A location in a bucket: ``scheme://bucket/key`` (``key`` may be empty for the bucket's root)."""

    scheme: str
    bucket: str
    key: str

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.fs_path}"

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
    """The bucket location a ``gs://``/``s3://`` str or PathLike names, or None for anything else.

    Raises ValueError for no bucket, a ``..`` escape, or no key when ``needs_key`` (folders may name a root).
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
    """A :class:`RemotePath` for a bucket URL, else the local path from :func:`validation.require_path`."""
    remote = as_remote(value, name, needs_key=needs_key)
    return remote if remote is not None else validation.require_path(value, name)


def filesystem(
    location: RemotePath, *, distribution: str, needed_by: str, install_hint: str | None = None
) -> AbstractFileSystem:
    """The cached fsspec filesystem of ``location``'s store; ImportError naming the extra without its client."""
    store = _STORES[location.scheme]
    hint = install_hint or f'pip install "{distribution}[{store.extra}]"'
    import_optional(store.client, needed_by=needed_by, install_hint=hint)
    fsspec = import_optional("fsspec", needed_by=needed_by, install_hint=hint)
    return fsspec.filesystem(location.scheme)


def object_size(fs: AbstractFileSystem, location: RemotePath, *, kind: str) -> int:
    """The size of the object; FileNotFoundError if missing or only a prefix (a folder)."""
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
    """Yields the object opened without read-ahead (each read is one ranged GET) and its size."""
    size = object_size(fs, location, kind=kind)
    with fs.open(location.fs_path, "rb", cache_type="none", size=size) as handle:
        yield handle, size


def publish_file(fs: AbstractFileSystem, source: pathlib.Path, location: RemotePath, *, overwrite: bool) -> None:
    """Uploads a complete local file as one object; without ``overwrite`` the upload is create-if-absent.

    So of two racing writers exactly one succeeds; the other gets FileExistsError.
    """
    if not overwrite and fs.exists(location.fs_path):
        raise exists_error(location.url, _NOT_REPLACED)
    try:
        fs.put_file(os.fspath(source), location.fs_path, mode="overwrite" if overwrite else "create")
    except FileExistsError:
        raise exists_error(location.url, f"another writer created it meanwhile, and {_NOT_REPLACED}") from None
    fs.invalidate_cache(location.parent.fs_path)


@contextlib.contextmanager
def local_copy_to_publish(
    fs: AbstractFileSystem, location: RemotePath, *, overwrite: bool, suffix: str = ""
) -> Iterator[pathlib.Path]:
    """Yields a local temporary path uploaded to ``location`` when the block ends without error.

    For writers that open a path themselves; existing objects are refused up front without ``overwrite``.
    """
    if not overwrite and fs.exists(location.fs_path):
        raise exists_error(location.url, _NOT_REPLACED)
    with tempfile.TemporaryDirectory(prefix="tinax-upload-") as folder:
        temporary = pathlib.Path(folder) / f"{location.name or 'object'}{suffix}"
        temporary.touch()
        yield temporary
        publish_file(fs, temporary, location, overwrite=overwrite)


@contextlib.contextmanager
def remote_write(fs: AbstractFileSystem, location: RemotePath, *, overwrite: bool) -> Iterator[BinaryIO]:
    """Yields a binary file whose complete content becomes the object at ``location``."""
    with local_copy_to_publish(fs, location, overwrite=overwrite) as temporary, open(temporary, "wb") as handle:
        yield handle


def read_range(fs: AbstractFileSystem, location: RemotePath, start: int, end: int) -> bytes:
    """The bytes ``[start, end)`` of the object, in one ranged GET."""
    data: Any = fs.cat_file(location.fs_path, start=start, end=end)
    return bytes(data)
