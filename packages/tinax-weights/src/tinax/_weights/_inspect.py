"""``tinax inspect`` for safetensors files, multi-file indexes and msgpack weights.

Registered as a ``tinax.inspectors`` entry point by :mod:`._sniff`. Files are read by the
loaders' own readers, with their validation and messages; safetensors payloads never are.
The readers read each file from its start without gaps, so a file's position is its bytes read.
Objects in a bucket come as their ``gs://`` or ``s3://`` URL, a ``str``.
"""

from __future__ import annotations

import contextlib
import fnmatch
import pathlib
from typing import Any

import numpy as np

from tinax._core import storage
from tinax._core._command._report import InspectOptions, Report
from tinax._core._compat02 import MissingPathError
from tinax._weights._msgpack_read import CHUNKED_ARRAY_MARKER, read_state_tree
from tinax._weights._remote import (
    RemotePath,
    filesystem,
    location_to_read,
    open_to_read,
    read_location_header,
    read_whole,
)
from tinax._weights._safetensors._header import MAX_HEADER_BYTES, TensorInfo
from tinax._weights._safetensors._index import open_checkpoint

__all__ = ["msgpack_report", "safetensors_index_report", "safetensors_report"]


def _tensor_report(
    report: Report, tensors: dict[str, TensorInfo], options: InspectOptions, files: dict[str, str] | None
) -> Report:
    """Adds the table of ``tensors`` (with each one's file, where given) that match ``options.names``."""
    rows = []
    for name in sorted(tensors):
        if options.names is not None and not fnmatch.fnmatchcase(name, options.names):
            continue
        info = tensors[name]
        row: dict[str, Any] = {"name": name, "dtype": str(info.dtype), "shape": list(info.shape), "bytes": info.nbytes}
        if files is not None:
            row["file"] = files[name]
        rows.append(row)
    if options.names is not None:
        report.summary["matching tensors"] = len(rows)
    report.add_table("tensors", ("name", "dtype", "shape", "bytes", *(("file",) if files is not None else ())), rows)
    return report


_NEEDED_BY = "tinax inspect"


def safetensors_report(path: pathlib.Path | str, options: InspectOptions) -> Report:
    """Describes a safetensors file from its header: tensors, dtypes, shapes, sizes and metadata."""
    location = location_to_read(path, "path")
    opened = open_to_read(location, kind="safetensors file", needed_by=_NEEDED_BY, directory_error=MissingPathError)
    with opened as (handle, size):
        header = read_location_header(handle, size, location, MAX_HEADER_BYTES)
        bytes_read = handle.tell()
    info = header.info
    report = Report("inspect", "safetensors", str(location), bytes_read=bytes_read)
    report.summary["file size"] = size
    report.summary["header bytes"] = header.payload_start
    report.summary["tensors"] = len(info.tensors)
    report.summary["total tensor bytes"] = info.nbytes
    report.summary["metadata"] = dict(info.metadata)
    return _tensor_report(report, dict(info.tensors), options, None)


def safetensors_index_report(path: pathlib.Path | str, options: InspectOptions) -> Report:
    """Describes a multi-file checkpoint from its index and each file's header, validated as a load does."""
    location = location_to_read(path, "path")
    with contextlib.ExitStack() as stack:
        tensors, _ = open_checkpoint(stack, location, max_metadata_bytes=MAX_HEADER_BYTES, needed_by=_NEEDED_BY)
        handles = {id(tensor.handle): tensor for tensor in tensors.values()}
        if isinstance(location, RemotePath):
            index_size = storage.object_size(filesystem(location, _NEEDED_BY), location, kind="safetensors index")
        else:
            index_size = location.stat().st_size
        bytes_read = index_size + sum(tensor.handle.tell() for tensor in handles.values())
    files = {name: pathlib.Path(tensor.source).name for name, tensor in tensors.items()}
    infos = {name: tensor.info for name, tensor in tensors.items()}
    report = Report("inspect", "safetensors-index", str(location), bytes_read=bytes_read)
    report.summary["files"] = len(handles)
    report.summary["tensors"] = len(infos)
    report.summary["total tensor bytes"] = sum(info.nbytes for info in infos.values())
    return _tensor_report(report, infos, options, files)


def msgpack_report(path: pathlib.Path | str, options: InspectOptions) -> Report:
    """Describes the leaves of a msgpack state dict, decoded whole (no index) if within ``options.max_bytes``."""
    location = location_to_read(path, "path")
    opened = open_to_read(location, kind="msgpack file", needed_by=_NEEDED_BY, directory_error=MissingPathError)
    with opened as (handle, size):
        if size > options.max_bytes:
            raise ValueError(
                f"{str(location)!r} holds {size} bytes, more than --max-bytes={options.max_bytes}; "
                "raise --max-bytes to inspect it"
            )
        if isinstance(location, RemotePath):
            handle = read_whole(handle, size, source=location.url, what="the state dict's bytes")
        tree = read_state_tree(handle, size, location)
        bytes_read = handle.tell()
    rows: list[dict[str, Any]] = []
    _leaves(tree, "", rows, options)
    report = Report("inspect", "msgpack", str(location), bytes_read=bytes_read)
    report.summary["file size"] = size
    report.summary["leaves"] = len(rows)
    report.summary["total array bytes"] = sum(row["bytes"] or 0 for row in rows)
    report.add_table("leaves", ("name", "type", "dtype", "shape", "bytes"), rows)
    return report


def _leaves(tree: dict[Any, Any], prefix: str, rows: list[dict[str, Any]], options: InspectOptions) -> None:
    for key in tree:
        value = tree[key]
        name = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, dict) and CHUNKED_ARRAY_MARKER not in value:
            _leaves(value, name, rows, options)
            continue
        if options.names is not None and not fnmatch.fnmatchcase(name, options.names):
            continue
        rows.append({"name": name, **_describe(value)})


def _describe(value: object) -> dict[str, Any]:
    if isinstance(value, dict):
        # flax's chunked form of a large array: its declared shape and its chunks' dtype.
        shape = value.get("shape")
        extents = [shape[key] for key in sorted(shape, key=int)] if isinstance(shape, dict) else None
        chunks = value.get("chunks")
        first = next(iter(chunks.values()), None) if isinstance(chunks, dict) and chunks else None
        if not isinstance(first, np.ndarray):
            return {"type": "chunked array", "dtype": None, "shape": extents, "bytes": None}
        size = int(np.prod(extents)) * first.dtype.itemsize if extents is not None else None
        return {"type": "chunked array", "dtype": str(first.dtype), "shape": extents, "bytes": size}
    if isinstance(value, np.ndarray):
        return {"type": "array", "dtype": str(value.dtype), "shape": list(value.shape), "bytes": value.nbytes}
    if isinstance(value, np.generic):
        return {"type": "scalar", "dtype": str(value.dtype), "shape": [], "bytes": value.nbytes}
    return {"type": type(value).__name__, "dtype": None, "shape": None, "bytes": None}
