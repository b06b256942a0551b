"""Checkpoints of one safetensors file, or of several files listed by a Hugging Face style index.

docs/guide/weights.md, section "Multi-file checkpoints", describes the index; every file it
names is validated by :mod:`tinax._weights._safetensors._header` and must agree with it. The safetensors
package has no index reader or writer, so both are here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import pathlib
import re
from collections.abc import Mapping
from typing import Any

from tinax._core._compat02 import MissingPathError
from tinax._weights._paths import open_file_to_read, unreachable_path_error
from tinax._weights._remote import Location, RemotePath, open_to_read, read_location_header
from tinax._weights._safetensors._header import (
    MAX_HEADER_BYTES,
    ReadableFile,
    TensorInfo,
    distinct_keys,
    read_exactly,
)

__all__ = [
    "INDEX_SUFFIX",
    "LOAD_SHARDED",
    "OpenTensor",
    "encode_index",
    "is_index_path",
    "open_checkpoint",
    "part_file_names",
]

#: The name ending of the index files that the multi-file export writes.
INDEX_SUFFIX = ".safetensors.index.json"
_PART_NAME = "{prefix}-{number:05d}-of-{count:05d}.safetensors"
_SAFE_PART = re.compile(r"[^/\\]+")
#: The public function that reads checkpoints, for the message of a missing storage client.
LOAD_SHARDED = "tinax.weights.load_sharded_safetensors"


@dataclasses.dataclass(frozen=True)
class OpenTensor:
    """A tensor of a checkpoint (``info``, offsets relative to the payload) with the open file that holds it."""

    info: TensorInfo
    handle: ReadableFile
    payload_start: int
    source: str
    remote: bool = False


def is_index_path(path: Location) -> bool:
    """Whether ``path`` names an index (a name ending ``.json``) rather than a safetensors file."""
    return path.name.endswith(".json")


def part_file_names(index_path: Location, count: int, *, tag: str | None = None) -> list[str]:
    """The names of the ``count`` files of a multi-file export; the index must end ``.safetensors.index.json``.

    A ``tag`` after the prefix keeps a replacement's files from sharing names with those they replace.
    """
    if not index_path.name.endswith(INDEX_SUFFIX) or index_path.name == INDEX_SUFFIX:
        raise ValueError(
            f"path must name the index of a multi-file checkpoint, ending with {INDEX_SUFFIX!r} after a non-empty "
            f"prefix (as in 'model{INDEX_SUFFIX}'), got {str(index_path)!r}"
        )
    prefix = index_path.name[: -len(INDEX_SUFFIX)]
    if tag is not None:
        prefix = f"{prefix}-{tag}"
    return [_PART_NAME.format(prefix=prefix, number=number, count=count) for number in range(1, count + 1)]


def indexed_file_names(index: bytes) -> set[str] | None:
    """The file names an index's ``weight_map`` refers to, or None if it cannot be read as an index."""
    try:
        document = json.loads(index)
    except ValueError:
        return None
    weight_map = document.get("weight_map") if isinstance(document, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(name, str) for name in weight_map.values()):
        return None
    # Only plain names next to the index: anything else is not ours to remove.
    return {name for name in weight_map.values() if name and pathlib.PurePath(name).name == name}


def encode_index(weight_map: Mapping[str, str], total_size: int) -> bytes:
    """Encodes an index as the Hugging Face writers do: ``metadata.total_size`` and a name-sorted ``weight_map``."""
    document = {"metadata": {"total_size": total_size}, "weight_map": dict(sorted(weight_map.items()))}
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def open_checkpoint(
    stack: contextlib.ExitStack, path: Location, *, max_metadata_bytes: int, needed_by: str = LOAD_SHARDED
) -> tuple[dict[str, OpenTensor], str]:
    """Opens a safetensors file, or every file of an index, validates the headers and keeps the files open in ``stack``.

    Returns every tensor by name and the checkpoint's name for messages; ValueError where index and files disagree.
    """
    source = str(path)
    if not is_index_path(path):
        handle, file_size = stack.enter_context(open_to_read(path, kind="safetensors file", needed_by=needed_by))
        return _open_tensors(handle, file_size, path, max_metadata_bytes), source

    weight_map = _read_weight_map(path, needed_by)
    files: dict[str, list[str]] = {}
    for name, file_name in weight_map.items():
        files.setdefault(file_name, []).append(name)
    tensors: dict[str, OpenTensor] = {}
    for file_name, names in files.items():
        file_path = path.parent / file_name
        file_source = str(file_path)
        mapping = f"the index {source} maps {len(names)} tensors (first {names[0]!r}) to {file_name!r}"
        handle, file_size = _open_part(stack, file_path, mapping, needed_by)
        held = _open_tensors(handle, file_size, file_path, max_metadata_bytes)
        absent = [name for name in names if name not in held]
        if absent:
            raise ValueError(
                f"the index {source} maps tensor {absent[0]!r} to {file_source}, which does not hold it "
                f"({len(absent)} such tensors)"
            )
        for name, tensor in held.items():
            mapped = weight_map.get(name)
            if mapped is not None and mapped != file_name:
                raise ValueError(
                    f"tensor {name!r} is in two files: the index {source} maps it to {str(path.parent / mapped)!r}, "
                    f"and {file_source} holds it too"
                )
            if mapped is not None:
                tensors[name] = tensor
    return tensors, source


def _open_tensors(
    handle: ReadableFile, file_size: int, path: Location, max_metadata_bytes: int
) -> dict[str, OpenTensor]:
    """Every tensor of an open safetensors file, its header validated."""
    header = read_location_header(handle, file_size, path, max_metadata_bytes)
    remote = isinstance(path, RemotePath)
    return {
        name: OpenTensor(info, handle, header.payload_start, str(path), remote)
        for name, info in header.info.tensors.items()
    }


def _open_part(
    stack: contextlib.ExitStack, file_path: Location, mapping: str, needed_by: str
) -> tuple[ReadableFile, int]:
    """Opens a file or object an index names; a missing one is a ``MissingPathError``."""
    file_source = str(file_path)
    if isinstance(file_path, RemotePath):
        try:
            return stack.enter_context(open_to_read(file_path, kind="safetensors file", needed_by=needed_by))
        except FileNotFoundError as error:
            raise MissingPathError(errno.ENOENT, f"{mapping}, which is not an object", file_source) from error
    try:
        is_file = file_path.is_file()
    except OSError as error:  # A name too long: pathlib reports only some errors as False.
        translated = unreachable_path_error(error, f"{mapping}, which cannot be a file", file_path)
        if translated is None:
            raise
        raise translated from error
    if not is_file:
        raise MissingPathError(errno.ENOENT, f"{mapping}, which is not a file", file_source)
    return stack.enter_context(open_file_to_read(file_path, kind="safetensors file"))


def _read_weight_map(path: Location, needed_by: str) -> dict[str, str]:
    source = str(path)
    with open_to_read(path, kind="safetensors index", needed_by=needed_by) as (handle, file_size):
        if file_size > MAX_HEADER_BYTES:
            raise ValueError(f"the index {source} has {file_size} bytes, more than the {MAX_HEADER_BYTES} accepted")
        content = bytearray(file_size)
        if read_exactly(handle, memoryview(content), 0) != file_size:
            raise ValueError(f"the index {source} ended early (it changed while being read)")

    def fail(problem: str) -> ValueError:
        return ValueError(f"{source} is not a valid safetensors index: {problem}")

    repeats: list[tuple[str, list[Any]]] = []
    try:
        document = json.loads(content.decode("utf-8"), object_pairs_hook=distinct_keys(repeats))
    except (UnicodeDecodeError, RecursionError, ValueError) as error:
        raise fail(f"it is not UTF-8 JSON ({error})") from error
    if repeats:
        key, values = repeats[0]
        if all(isinstance(value, str) for value in values):
            files = " and ".join(repr(value) for value in values)
            raise fail(f"tensor {key!r} is in two files: the weight_map maps it to {files}")
        raise fail(f"it repeats the key {key!r} with different values")
    if not isinstance(document, dict) or not isinstance(document.get("weight_map"), dict):
        raise fail('it must be a JSON object with a "weight_map" object of tensor names to file names')
    weight_map: dict[str, str] = document["weight_map"]
    for name, file_name in weight_map.items():
        if not isinstance(file_name, str) or not file_name:
            raise fail(f"weight_map[{name!r}] must be a file name (a non-empty str), got {file_name!r}")
        parts = pathlib.PurePosixPath(file_name).parts
        if pathlib.PurePath(file_name).is_absolute() or ".." in parts or not all(map(_SAFE_PART.fullmatch, parts)):
            raise fail(f"weight_map[{name!r}] must be a path relative to the index's folder, got {file_name!r}")
    return weight_map
