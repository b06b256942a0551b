"""The bytes this process has read, for readers that keep no count of their own.

Orbax and TensorStore read checkpoint metadata through their own file
handles, so ``tinax inspect`` counts their reads as the kernel does: the
``rchar`` field of ``/proc/self/io`` (every ``read`` and ``pread`` of every
thread, page cache hits included). Only differences taken around a call
mean anything, and only once that call's imports are done.
"""

from __future__ import annotations

__all__ = ["process_bytes_read"]

_PROC_IO = "/proc/self/io"


def process_bytes_read() -> int | None:
    """Returns how many bytes this process has read so far, or None where the system does not say."""
    try:
        with open(_PROC_IO, "rb") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, value = line.partition(b":")
        if name == b"rchar":
            return int(value)
    return None
