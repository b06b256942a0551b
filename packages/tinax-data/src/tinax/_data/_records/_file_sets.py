"""The files a record reader is given: one file, or many in a fixed order (a folder, a glob pattern, a sequence).

Files are ordered by their path relative to a root, so every process numbers
rows alike; see docs/guide/data.md, section "Datasets of many files". A
``gs://`` or ``s3://`` prefix stands for a folder (keys split at ``/``); a
sequence of URLs must name objects of one bucket. Imports no pyarrow or array-record.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import os
import pathlib
import stat
from collections.abc import Iterable, Sequence
from typing import Any

from tinax._core import validation
from tinax._core.storage import as_remote
from tinax._data._records._locations import Location, RemotePath, remote_filesystem, require_remote_file
from tinax._data._records._paths import require_record_path
from tinax._data._records._record_codec import RecordHeader, require_record_file

__all__ = [
    "DatasetFile",
    "FileSet",
    "combined_header",
    "describe_file_difference",
    "require_one_kind",
    "resolve_record_paths",
]

# What pyarrow's dataset discovery skips in a folder: names of hidden files, and of files that engines
# write beside their parts (Spark's ``_SUCCESS``, a ``_metadata`` summary, ``.crc`` checksums).
_SKIPPED_PREFIXES = (".", "_")
_GLOB_MAGIC = frozenset("*?[")


@dataclasses.dataclass(frozen=True)
class DatasetFile:
    """One file of a dataset; ``name`` (relative to the root, ``/``-joined) orders it and names it in states."""

    path: Location
    name: str


@dataclasses.dataclass(frozen=True)
class FileSet:
    """The files of a dataset sorted by name; ``given`` says what the caller passed, for messages."""

    root: Location
    files: tuple[DatasetFile, ...]
    given: str


def resolve_record_paths(value: object, name: str, container: str) -> Location | FileSet:
    """Checks a reader's path argument and finds its files; a single (or missing) local file is returned as is.

    A missing local file is left for the reader to refuse as 0.2 did; a URL naming nothing is refused here.
    """
    if isinstance(value, (str, os.PathLike)):
        remote = as_remote(value, name, needs_key=False)
        if remote is not None:
            return _remote_files(remote, container)
        path = require_record_path(value, name)
        kind = _kind_of(path)
        if kind == "folder":
            return _folder_files(path, container)
        if kind is None and _GLOB_MAGIC.intersection(os.fspath(path)):
            return _pattern_files(os.fspath(path), container)
        return path
    if not isinstance(value, Sequence) or isinstance(value, (bytes, bytearray)):
        validation.fail_type(
            name, "a str or os.PathLike path (a file, a folder or a glob pattern), or a list of paths", value
        )
    return _listed_files(value, name, container)


def _kind_of(path: pathlib.Path) -> str | None:
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return "folder" if stat.S_ISDIR(mode) else "other"


def _folder_files(folder: pathlib.Path, container: str) -> FileSet:
    root = folder.absolute()
    found: list[tuple[str, str]] = []
    _collect(os.fspath(root), "", found)
    if not found:
        raise FileNotFoundError(
            f"No {container} file in the folder {str(folder)!r}: it holds no file whose name (or folder) does not "
            "start with '.' or '_'"
        )
    found.sort()
    files = tuple(DatasetFile(pathlib.Path(path), name) for name, path in found)
    return FileSet(root, files, f"the folder {str(folder)!r}")


def _collect(folder: str, prefix: str, found: list[tuple[str, str]]) -> None:
    """Adds ``(name below the root, path)`` of every file under ``folder`` that the readers read."""
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith(_SKIPPED_PREFIXES):
                continue
            # Links to folders are not followed (as os.walk does not), links to files are read.
            if entry.is_dir(follow_symlinks=False):
                _collect(entry.path, f"{prefix}{entry.name}/", found)
            elif entry.is_file():
                found.append((prefix + entry.name, entry.path))


def _pattern_files(pattern: str, container: str) -> FileSet:
    matches = [pathlib.Path(match) for match in glob.glob(pattern, recursive=True)]
    files = [match.absolute() for match in matches if os.path.isfile(match)]
    if not files:
        raise FileNotFoundError(f"No {container} file matches the glob pattern {pattern!r}")
    parts = pathlib.Path(pattern).parts
    fixed = next((index for index, part in enumerate(parts) if _GLOB_MAGIC.intersection(part)), len(parts))
    root = pathlib.Path(*parts[:fixed]).absolute() if fixed else pathlib.Path.cwd()
    return FileSet(root, _named(files, root), f"the glob pattern {pattern!r}")


def _remote_files(location: RemotePath, container: str) -> RemotePath | FileSet:
    """The object ``location`` names, or the objects under it (a prefix) or matching it (a glob pattern)."""
    fs = remote_filesystem(location, _reader_of(container))
    # Another process may have written objects here since this one last listed them.
    fs.invalidate_cache(location.fs_path)
    if _GLOB_MAGIC.intersection(location.key):
        parts = location.key.split("/")
        fixed = next(index for index, part in enumerate(parts) if _GLOB_MAGIC.intersection(part))
        root = RemotePath(location.scheme, location.bucket, "/".join(parts[:fixed]))
        fs.invalidate_cache(root.fs_path)
        found = fs.glob(location.fs_path, detail=True)
        paths = sorted(path for path, info in found.items() if info.get("type") == "file")
        if not paths:
            raise FileNotFoundError(f"No {container} file matches the glob pattern {location.url!r}")
        files = [_object_at(location, path) for path in paths]
        return FileSet(root, _remote_named(files, root), f"the glob pattern {location.url!r}")
    if location.key:
        try:
            info = fs.info(location.fs_path)
        except FileNotFoundError:
            raise FileNotFoundError(f"No {container} file at {location.url!r}: nothing is there") from None
        if info.get("type") == "file":
            return location
    # A prefix (or a bucket's root): every object under it, as a folder's files.
    listed = fs.find(location.fs_path, detail=True) if location.key else fs.find(location.bucket, detail=True)
    found_files: list[DatasetFile] = []
    for path, info in listed.items():
        if info.get("type") != "file":
            continue
        file = _object_at(location, path)
        below = _below(file, location)
        if below and not any(part.startswith(_SKIPPED_PREFIXES) for part in below.split("/")):
            found_files.append(DatasetFile(file, below))
    if not found_files:
        raise FileNotFoundError(
            f"No {container} file under the prefix {location.url!r}: it holds no object whose name (or folder) "
            "does not start with '.' or '_'"
        )
    return FileSet(location, _by_name(found_files), f"the prefix {location.url!r}")


def _reader_of(container: str) -> str:
    return "tinax.data.read_parquet_record" if container == "Parquet" else "tinax.data.read_array_record"


def _object_at(location: RemotePath, fs_path: str) -> RemotePath:
    """The location of an object a listing of ``location``'s bucket named (``bucket/key``)."""
    bucket, _, key = fs_path.partition("/")
    return RemotePath(location.scheme, bucket, key)


def _below(file: RemotePath, root: RemotePath) -> str:
    """The key of ``file`` relative to the prefix ``root`` ('' where it is not under it)."""
    if not root.key:
        return file.key
    return file.key[len(root.key) + 1 :] if file.key.startswith(root.key + "/") else ""


def _listed_remote_files(values: Sequence[Any], name: str, container: str) -> FileSet:
    """The objects a sequence of URLs names, all in one bucket, each checked to be an object."""
    files: list[RemotePath] = []
    for index, value in enumerate(values):
        # Every value is a str or PathLike: _listed_files found each one a URL.
        location = as_remote(value, f"{name}[{index}]", needs_key=True)
        if location is None:
            validation.fail_value(
                name, "paths all in one bucket or all local (a dataset's files are in one place)", values
            )
        if files and (location.scheme, location.bucket) != (files[0].scheme, files[0].bucket):
            validation.fail_value(name, "URLs of objects in one bucket", values)
        require_remote_file(location, container)
        files.append(location)
    _require_distinct(name, ((file.key, f"the object {file.url!r}") for file in files))
    parents = [file.parent.key.split("/") if file.parent.key else [] for file in files]
    common: list[str] = []
    for parts in zip(*parents, strict=False):
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    root = RemotePath(files[0].scheme, files[0].bucket, "/".join(common))
    return FileSet(root, _remote_named(files, root), f"a list of {len(files)} paths")


def _listed_files(values: Sequence[Any], name: str, container: str) -> FileSet:
    if not values:
        validation.fail_value(name, "at least one file in a sequence of paths", values)
    remote = [
        isinstance(value, (str, os.PathLike)) and as_remote(value, f"{name}[{index}]") is not None
        for index, value in enumerate(values)
    ]
    if any(remote):
        if not all(remote):
            validation.fail_value(name, "paths all in one bucket or all local (not both)", values)
        return _listed_remote_files(values, name, container)
    files = []
    for index, value in enumerate(values):
        if not isinstance(value, (str, os.PathLike)):
            validation.fail_type(f"{name}[{index}]", "a str or os.PathLike path", value)
        path = require_record_path(value, f"{name}[{index}]")
        require_record_file(path, container)
        files.append(path.absolute())
    _require_distinct(name, ((os.path.realpath(path), f"the file {str(path)!r}") for path in files))
    root = pathlib.Path(os.path.commonpath([path.parent for path in files]))
    return FileSet(root, _named(files, root), f"a list of {len(files)} paths")


def _require_distinct(name: str, keyed: Iterable[tuple[str, str]]) -> None:
    """Refuses a list naming one file twice; ``keyed`` gives each file's identity and description."""
    seen: set[str] = set()
    for key, described in keyed:
        if key in seen:
            validation.fail_value(name, "paths of distinct files", f"{described} more than once")
        seen.add(key)


def _by_name(files: Iterable[DatasetFile]) -> tuple[DatasetFile, ...]:
    return tuple(sorted(files, key=lambda file: file.name))


def _named(files: list[pathlib.Path], root: pathlib.Path) -> tuple[DatasetFile, ...]:
    return _by_name(DatasetFile(path, path.relative_to(root).as_posix()) for path in files)


def _remote_named(files: list[RemotePath], root: RemotePath) -> tuple[DatasetFile, ...]:
    return _by_name(DatasetFile(file, _below(file, root)) for file in files)


def describe_file_difference(saved: object, current: object) -> str | None:
    """Says how a saved and a current ``[name, size, rows]`` file list differ, or None."""
    if not isinstance(saved, list) or not isinstance(current, list):
        return None
    try:
        before = {entry[0]: tuple(entry[1:]) for entry in saved}
        after = {entry[0]: tuple(entry[1:]) for entry in current}
    except (TypeError, IndexError, KeyError):
        return None
    notes = []
    removed = [name for name in before if name not in after]
    added = [name for name in after if name not in before]
    changed = [name for name in before if name in after and before[name] != after[name]]
    if removed:
        notes.append(f"{len(removed)} file(s) of the state are gone (first: {removed[0]!r})")
    if added:
        notes.append(f"{len(added)} file(s) are new here (first: {added[0]!r})")
    for file_name in changed[:3]:
        notes.append(
            f"{file_name!r} is [size, rows] {list(before[file_name])} in the state but {list(after[file_name])} here"
        )
    if not notes:
        return "the same files in another order" if before != after or saved != current else None
    return "; ".join(notes)


def require_one_kind(given: str, names: Sequence[str], headers: Sequence[bytes | None]) -> RecordHeader | None:
    """Checks the files are all tinax files of one schema (giving their combined header) or all plain (None)."""
    formatted = [header is not None for header in headers]
    if any(formatted) and not all(formatted):
        raise ValueError(
            f"{given} mixes files in the tinax record format ({names[formatted.index(True)]!r}) with files outside "
            f"it ({names[formatted.index(False)]!r}): a dataset of many files holds files of one kind"
        )
    if not all(formatted):
        return None
    parsed = [RecordHeader.from_json_bytes(header or b"") for header in headers]
    first = parsed[0].schema
    for name, header in zip(names[1:], parsed[1:], strict=True):
        if header.schema.fields == first.fields:
            continue
        described = {field.name: field.describe() for field in header.schema.fields}
        differing = next(
            (field.name for field in first.fields if described.get(field.name) != field.describe()),
            next(iter(set(described) - set(first.names)), "?"),
        )
        raise ValueError(
            f"the tinax record files {names[0]!r} and {name!r} hold records of different schemas: their field "
            f"{differing!r} differs"
        )
    return combined_header(parsed)


def combined_header(headers: Sequence[RecordHeader]) -> RecordHeader:
    """The header of several tinax files' records in order; its digest hashes theirs, so ``source_id`` names them."""
    digest = hashlib.sha256("".join(header.content_sha256 for header in headers).encode("ascii")).hexdigest()
    return RecordHeader(headers[0].schema, sum(header.count for header in headers), digest)
