"""How ``tinax inspect`` tells record files (standard library only); a folder by the first file the readers read."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable

from tinax._core._command._registry import Inspector, Probe

__all__ = ["ARRAY_RECORD", "PARQUET"]

_PARQUET_MAGIC = b"PAR1"
# The first 8 bytes of every Riegeli file, the container ArrayRecord writes.
_RIEGELI_SIGNATURE = b"\x83\xafp\xd1\r\x88J?"


def _parquet_file(head: bytes, tail: bytes) -> bool:
    """``PAR1`` at the start, or at the end alone (a damaged start: the footer is still readable)."""
    return head.startswith(_PARQUET_MAGIC) or tail == _PARQUET_MAGIC


def _array_record_file(head: bytes, tail: bytes) -> bool:
    del tail
    return head.startswith(_RIEGELI_SIGNATURE)


def _sniffer(is_kind: Callable[[bytes, bytes], bool]) -> Callable[[Probe], bool]:
    def sniff(probe: Probe) -> bool:
        if probe.is_folder:
            first = _first_file(probe.path)
            if first is None:
                return False
            with open(first, "rb") as handle:
                head = handle.read(len(_RIEGELI_SIGNATURE))
                size = os.fstat(handle.fileno()).st_size
                handle.seek(max(size - 4, 0))
                tail = handle.read(4) if size >= 8 else b""
            return is_kind(head, tail)
        return is_kind(probe.head, probe.read(probe.size - 4, 4) if probe.size >= 8 else b"")

    return sniff


def _first_file(folder: pathlib.Path) -> pathlib.Path | None:
    """The file of a folder that the readers read first (see ``_file_sets``), or None where it holds none."""
    names: list[str] = []
    for current, folders, files in os.walk(folder):
        folders[:] = [entry for entry in folders if not entry.startswith((".", "_"))]
        relative = pathlib.Path(current).relative_to(folder)
        names.extend(
            (relative / entry).as_posix()
            for entry in files
            if not entry.startswith((".", "_")) and os.path.isfile(os.path.join(current, entry))
        )
    return folder / min(names) if names else None


ARRAY_RECORD = Inspector(
    "ArrayRecord record file",
    _sniffer(_array_record_file),
    "tinax._data._records._inspect:inspect_array_record",
    patterns=True,
)
# A footer alone is weaker than another kind's signature at the start (a msgpack file may end in PAR1).
PARQUET = Inspector(
    "Parquet record file",
    _sniffer(_parquet_file),
    "tinax._data._records._inspect:inspect_parquet",
    order=2,
    patterns=True,
)
