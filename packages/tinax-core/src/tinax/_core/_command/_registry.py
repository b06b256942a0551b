"""Which kind of file or folder a path holds, and which installed distribution inspects it.

The kind is told from the content (magic bytes, the shape of a JSON or
msgpack document, the files a folder holds), never from the name, reading
:data:`SNIFF_BYTES` from the start of a file and 4 bytes from its end. A JSON
object whose ``"weight_map"`` key is not in those first bytes (a Hugging
Face index whose ``metadata`` block comes first) is read on until the key
is found, up to :data:`INDEX_MAX_BYTES`, the largest index the loader reads.
Each distribution
registers one callable per kind it reads in the ``tinax.inspectors``
entry-point group::

    [project.entry-points."tinax.inspectors"]
    safetensors = "tinax._weights._inspect:inspect_safetensors"

The callable takes ``(path: pathlib.Path, options: InspectOptions)`` and
returns a :class:`~tinax._core._command._report.Report`. Only the inspector of
the detected kind is imported, so one kind's dependencies never load for
another, and a kind whose distribution is absent gets a message naming it.
"""

from __future__ import annotations

import io
import os
import pathlib
import stat
from collections.abc import Callable
from importlib import metadata
from typing import Any

__all__ = ["GROUP", "INDEX_MAX_BYTES", "KINDS", "SNIFF_BYTES", "Detected", "detect_kind", "find_inspector"]

#: The entry-point group every distribution registers its inspectors in.
GROUP = "tinax.inspectors"
#: The bytes detection reads from the start of a file (and 4 from its end) for every kind.
SNIFF_BYTES = 4096
#: The most bytes detection reads of a JSON object to find ``"weight_map"``: tinax-weights' bound on an index.
INDEX_MAX_BYTES = 100_000_000
_SCAN_CHUNK = 1 << 20

#: Every kind the command knows, with its description and the distribution that inspects it.
KINDS: dict[str, tuple[str, str]] = {
    "safetensors": ("safetensors file", "tinax-weights"),
    "safetensors-index": ("safetensors multi-file index", "tinax-weights"),
    "msgpack": ("msgpack weights file (a flax state dict)", "tinax-weights"),
    "parquet": ("Parquet record file", "tinax-data"),
    "array-record": ("ArrayRecord record file", "tinax-data"),
    "orbax-checkpoint": ("Orbax checkpoint folder", "tinax-checkpointing"),
    "checkpoint-root": ("root of step checkpoint folders", "tinax-checkpointing"),
}

_PARQUET_MAGIC = b"PAR1"
# The first 8 bytes of every Riegeli file, the container ArrayRecord writes.
_RIEGELI_SIGNATURE = b"\x83\xafp\xd1\r\x88J?"
_ORBAX_TEMPORARY = ".orbax-checkpoint-tmp"
_ORBAX_MARKERS = ("_CHECKPOINT_METADATA", "orbax.checkpoint")
_WEIGHT_MAP = b'"weight_map"'


class Detected:
    """A detected kind and the bytes detection read to tell it."""

    def __init__(self, kind: str | None, bytes_read: int) -> None:
        self.kind = kind
        self.bytes_read = bytes_read


def detect_kind(path: pathlib.Path) -> Detected:
    """Tells the kind of ``path`` from its content.

    Args:
      path: An existing file or folder.

    Returns:
      The kind (a key of :data:`KINDS`), or None if it is none of them.
    """
    mode = path.stat().st_mode
    if stat.S_ISDIR(mode):
        return Detected(_folder_kind(path), 0)
    if not stat.S_ISREG(mode):
        return Detected(None, 0)
    size = path.stat().st_size
    with open(path, "rb", buffering=0) as handle:
        start = handle.read(min(size, SNIFF_BYTES))
        read = len(start)
        end = b""
        if size >= len(_PARQUET_MAGIC) * 2:
            handle.seek(size - len(_PARQUET_MAGIC))
            end = handle.read(len(_PARQUET_MAGIC))
            read += len(end)
        kind = _file_kind(start, end, size)
        if kind is None and start.lstrip().startswith(b"{") and size > len(start):
            found, scanned = _weight_map_further_on(handle, start, size)
            read += scanned
            kind = "safetensors-index" if found else None
    return Detected(kind, read)


def _weight_map_further_on(handle: io.RawIOBase, start: bytes, size: int) -> tuple[bool, int]:
    """Reads a JSON object on from ``start`` until ``"weight_map"`` shows, or the file or the index bound ends.

    Returns:
      Whether the key was found, and how many bytes were read.
    """
    handle.seek(len(start))
    # The key may straddle two reads.
    carried = start[-(len(_WEIGHT_MAP) - 1) :]
    read = 0
    limit = min(size, INDEX_MAX_BYTES) - len(start)
    while read < limit:
        chunk = handle.read(min(_SCAN_CHUNK, limit - read))
        if not chunk:
            break
        read += len(chunk)
        if _WEIGHT_MAP in carried + chunk:
            return True, read
        carried = chunk[-(len(_WEIGHT_MAP) - 1) :]
    return False, read


def _folder_kind(path: pathlib.Path) -> str | None:
    if _ORBAX_TEMPORARY in path.name or any((path / marker).is_file() for marker in _ORBAX_MARKERS):
        return "orbax-checkpoint"
    try:
        names = os.listdir(path)
    except OSError:
        return None
    if any(_is_step_name(name) or _ORBAX_TEMPORARY in name for name in names):
        return "checkpoint-root"
    return None


def _is_step_name(name: str) -> bool:
    return name.isascii() and name.isdigit()


def _file_kind(start: bytes, end: bytes, size: int) -> str | None:
    if start.startswith(_PARQUET_MAGIC):
        return "parquet"
    if start.startswith(_RIEGELI_SIGNATURE):
        return "array-record"
    if len(start) >= 10:
        length = int.from_bytes(start[:8], "little")
        if 2 <= length <= size - 8 and start[8:9] == b"{":
            return "safetensors"
    stripped = start.lstrip()
    if stripped.startswith(b"{") and b'"weight_map"' in start:
        return "safetensors-index"
    if start and (0x80 <= start[0] <= 0x8F or start[0] in (0xDE, 0xDF)):
        return "msgpack"
    if end == _PARQUET_MAGIC:
        return "parquet"
    return None


def find_inspector(kind: str) -> Callable[..., Any] | None:
    """Loads the inspector an installed distribution registered for ``kind``, or returns None."""
    for entry_point in metadata.entry_points(group=GROUP, name=kind):
        loaded: Callable[..., Any] = entry_point.load()
        return loaded
    return None
