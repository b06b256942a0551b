"""Where a checkpoint lives: a local folder, or a ``gs://`` prefix that Orbax writes through TensorStore.

On a bucket Orbax writes straight into the final prefix and writes ``commit_success.txt`` last; ``s3://``
is refused up front (google/orbax#359). Local paths never take the URL branches served here.
See docs/guide/storage.md, section "Checkpoints".
"""

from __future__ import annotations

import os
import pathlib
from typing import Any, cast

from tinax._core import storage
from tinax._core.logs import tree_nbytes
from tinax._core.storage import UnsupportedStoreError

__all__ = [
    "CLAIM_SUFFIX",
    "COMMIT_MARKER",
    "UnsupportedStoreError",
    "absolute_location",
    "checkpoint_location",
    "folder_nbytes",
    "has_commit_marker",
    "is_remote",
    "remote_filesystem",
    "remove_remote_folder",
    "remote_of",
    "tensorstore_base",
]

#: The object Orbax writes last into a checkpoint on a bucket (Orbax's own name for it).
COMMIT_MARKER = "commit_success.txt"
#: Beside a ``gs://`` destination while tinax saves to it (see ``_save``): the create-if-absent claim of one writer.
CLAIM_SUFFIX = ".tinax-save-claim"
_DISTRIBUTION = "tinax-checkpointing"


def checkpoint_location(path: object, name: str, *, needed_by: str) -> pathlib.Path:
    """Checks a checkpoint path: a local path (not made absolute), or a ``gs://`` URL as an ``etils.epath.Path``.

    An ``s3://`` URL raises ``UnsupportedStoreError`` (a ``ValueError``); a ``gs://`` one needs gcsfs.
    """
    location = storage.require_location(path, name)
    if isinstance(location, pathlib.Path):
        return location
    if location.scheme != "gs":
        raise UnsupportedStoreError(
            f"{name} must be a local path or a gs:// URL, got {location.url!r}: Orbax cannot write checkpoints to "
            f"{location.scheme}:// (google/orbax#359), so {needed_by} does not serve {location.scheme}:// URLs"
        )
    storage.filesystem(location, distribution=_DISTRIBUTION, needed_by=needed_by)
    from etils import epath  # type: ignore[import-untyped]  # Imported only for a URL; etils has no types.

    # An epath.Path offers the pathlib.Path methods the checks and readers use (is_file, iterdir, read_bytes,
    # joining, name), so it travels the same code; only the branches on is_remote() tell them apart.
    return cast(pathlib.Path, epath.Path(location.url))


def absolute_location(path: object, name: str, *, needed_by: str) -> pathlib.Path:
    """:func:`checkpoint_location`, with a local path made absolute (Orbax takes only absolute paths)."""
    location = checkpoint_location(path, name, needed_by=needed_by)
    return location if is_remote(location) else location.absolute()


def is_remote(path: object) -> bool:
    """Whether a checked checkpoint path is a bucket location rather than a local folder."""
    return str(os.fspath(path)).startswith("gs://")  # type: ignore[call-overload]


def remote_of(path: object) -> storage.RemotePath:
    """The bucket location of a checked ``gs://`` checkpoint path."""
    remote = storage.as_remote(path, "path")
    if remote is None:
        raise ValueError(f"path must be a gs:// URL, got {path!r}")
    return remote


def remote_filesystem(path: object, *, needed_by: str) -> Any:
    """The filesystem of a ``gs://`` checkpoint path, cached listings dropped (Orbax writes behind fsspec)."""
    remote = remote_of(path)
    fs = storage.filesystem(remote, distribution=_DISTRIBUTION, needed_by=needed_by)
    fs.invalidate_cache(remote.fs_path)
    return fs


def has_commit_marker(fs: Any, folder: object) -> bool:
    """Whether the checkpoint prefix ``folder`` carries Orbax's commit marker object."""
    return bool(fs.isfile((remote_of(folder) / COMMIT_MARKER).fs_path))


def remove_remote_folder(fs: Any, folder: object) -> None:
    """Deletes every object under a checkpoint prefix, its commit marker first so it stops counting at once."""
    remote = remote_of(folder)
    fs.invalidate_cache(remote.fs_path)
    marker = (remote / COMMIT_MARKER).fs_path
    if fs.isfile(marker):
        fs.rm_file(marker)
    objects = fs.find(remote.fs_path)
    if objects:
        fs.rm(objects)
    fs.invalidate_cache(remote.fs_path)


def folder_nbytes(path: object) -> int:
    """The bytes of the files (objects) under a checkpoint folder or prefix; 0 where they cannot be counted."""
    if not is_remote(path):
        return tree_nbytes(os.fspath(path))  # type: ignore[call-overload]
    try:
        fs = remote_filesystem(path, needed_by="tinax.checkpointing")
        return int(fs.du(remote_of(path).fs_path))
    except Exception:  # A log line's count must never fail the operation it describes.
        return 0


def tensorstore_base(folder: object) -> dict[str, Any]:
    """The TensorStore key-value store spec of a folder of arrays (trailing slash included)."""
    if is_remote(folder):
        remote = remote_of(folder)
        return {"driver": "gcs", "bucket": remote.bucket, "path": f"{remote.key}/"}
    return {"driver": "file", "path": f"{folder}/"}
