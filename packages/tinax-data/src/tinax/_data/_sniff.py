"""How ``tinax inspect`` tells record files (see tinax-core's ``_command._registry``): the standard library only."""

from __future__ import annotations

from tinax._core._command._registry import Inspector, Probe

__all__ = ["ARRAY_RECORD", "PARQUET"]

_PARQUET_MAGIC = b"PAR1"
# The first 8 bytes of every Riegeli file, the container ArrayRecord writes.
_RIEGELI_SIGNATURE = b"\x83\xafp\xd1\r\x88J?"


def _parquet(probe: Probe) -> bool:
    """``PAR1`` at the start, or at the end alone (a damaged start: the footer is still readable)."""
    tail = probe.read(probe.size - 4, 4) if probe.size >= 8 else b""
    return probe.head.startswith(_PARQUET_MAGIC) or tail == _PARQUET_MAGIC


ARRAY_RECORD = Inspector(
    "ArrayRecord record file",
    lambda probe: probe.head.startswith(_RIEGELI_SIGNATURE),
    "tinax._data._inspect:inspect_array_record",
)
# A footer alone is weaker than another kind's signature at the start (a msgpack file may end in PAR1).
PARQUET = Inspector("Parquet record file", _parquet, "tinax._data._inspect:inspect_parquet", order=2)
