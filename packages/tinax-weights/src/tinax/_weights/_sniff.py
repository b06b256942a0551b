"""How ``tinax inspect`` tells weight files (see tinax-core's ``_command._registry``): the standard library only."""

from __future__ import annotations

from tinax._core._command._registry import Inspector, Probe

__all__ = ["INDEX", "INDEX_MAX_BYTES", "MSGPACK", "SAFETENSORS"]

#: The most bytes of a JSON object read to find ``"weight_map"``: the loader's bound on an index (``MAX_HEADER_BYTES``).
INDEX_MAX_BYTES = 100_000_000
_WEIGHT_MAP = b'"weight_map"'
_CHUNK = 1 << 20


def _safetensors(probe: Probe) -> bool:
    """An 8-byte little-endian header length the file can hold, then ``{``."""
    length = int.from_bytes(probe.head[:8], "little")
    return len(probe.head) >= 10 and 2 <= length <= probe.size - 8 and probe.head[8:9] == b"{"


def _index(probe: Probe) -> bool:
    """A JSON object with a ``"weight_map"`` key, read on past the head (a large ``metadata`` block may come first)."""
    if not probe.head.lstrip().startswith(b"{"):
        return False
    limit = min(probe.size, INDEX_MAX_BYTES)
    offset, carried, chunk = len(probe.head), b"", probe.head
    while _WEIGHT_MAP not in carried + chunk:
        # The key may straddle two reads.
        carried = chunk[-(len(_WEIGHT_MAP) - 1) :]
        chunk = probe.read(offset, min(_CHUNK, limit - offset)) if offset < limit else b""
        if not chunk:
            return False
        offset += len(chunk)
    return True


def _msgpack(probe: Probe) -> bool:
    """A map: a fixmap, map 16 or map 32 first byte."""
    return probe.head[:1] != b"" and (0x80 <= probe.head[0] <= 0x8F or probe.head[0] in (0xDE, 0xDF))


SAFETENSORS = Inspector("safetensors file", _safetensors, "tinax._weights._inspect:safetensors_report")
INDEX = Inspector("safetensors multi-file index", _index, "tinax._weights._inspect:safetensors_index_report")
# One byte of signature, which a safetensors header length or a Riegeli file can also start with.
MSGPACK = Inspector(
    "msgpack weights file (a flax state dict)", _msgpack, "tinax._weights._inspect:msgpack_report", order=1
)
