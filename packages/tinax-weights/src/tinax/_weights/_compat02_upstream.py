"""tinax 0.2's errors for malformed files that are also safetensors' and msgpack's own error types.

0.2 let ``safetensors.SafetensorError``, ``msgpack.ExtraData`` and ``msgpack.FormatError`` through,
so handlers may catch them. Importing this imports both libraries, so :mod:`._compat02` does so
only when there is such an error to raise.
"""

from __future__ import annotations

import msgpack
from safetensors import SafetensorError

__all__ = [
    "MalformedFormatError",
    "MalformedSafetensorsError",
    "MalformedStackError",
    "TrailingDataError",
    "malformed_msgpack",
]


class MalformedSafetensorsError(ValueError, SafetensorError):
    """A safetensors file whose header or size breaks the format."""


class TrailingDataError(msgpack.ExtraData):  # type: ignore[misc]  # msgpack ships no type hints.
    """A msgpack file with bytes after its single top-level value."""

    def __init__(self, message: str) -> None:
        # msgpack.ExtraData takes the value and extra bytes; this takes a message but keeps the attributes.
        ValueError.__init__(self, message)
        self.unpacked = None
        self.extra = b""

    def __str__(self) -> str:
        return ValueError.__str__(self)


class MalformedFormatError(msgpack.FormatError):  # type: ignore[misc]
    """A msgpack file with a byte that starts no msgpack value."""


class MalformedStackError(msgpack.StackError):  # type: ignore[misc]
    """A msgpack file nested deeper than the decoder allows."""


def malformed_msgpack(message: str, cause: BaseException) -> ValueError:
    """Returns the ValueError for a decoding failure, of msgpack's own type where it has one."""
    if isinstance(cause, msgpack.FormatError):
        return MalformedFormatError(message)
    if isinstance(cause, msgpack.StackError):
        return MalformedStackError(message)
    return ValueError(message)
