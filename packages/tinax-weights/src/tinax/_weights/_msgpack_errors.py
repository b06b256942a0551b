"""Errors for malformed msgpack files that are also msgpack's own error types.

tinax 0.2 decoded with msgpack and let its errors through, so a handler may
catch ``msgpack.ExtraData`` or ``msgpack.FormatError``; the errors raised
here are those types as well as ValueErrors with tinax's messages. Importing
this module imports msgpack, so it is imported only while decoding a file.
"""

from __future__ import annotations

import msgpack

__all__ = ["MalformedFormatError", "MalformedStackError", "TrailingDataError", "malformed"]


class TrailingDataError(msgpack.ExtraData):  # type: ignore[misc]  # msgpack ships no type hints.
    """A msgpack file with bytes after its single top-level value."""

    def __init__(self, message: str) -> None:
        # msgpack.ExtraData takes the decoded value and the extra bytes; this
        # error carries a message instead, and keeps the attributes defined.
        ValueError.__init__(self, message)
        self.unpacked = None
        self.extra = b""

    def __str__(self) -> str:
        return ValueError.__str__(self)


class MalformedFormatError(msgpack.FormatError):  # type: ignore[misc]
    """A msgpack file with a byte that starts no msgpack value."""


class MalformedStackError(msgpack.StackError):  # type: ignore[misc]
    """A msgpack file nested deeper than the decoder allows."""


def malformed(message: str, cause: BaseException) -> ValueError:
    """Returns the ValueError for a decoding failure, of msgpack's own type where it has one."""
    if isinstance(cause, msgpack.FormatError):
        return MalformedFormatError(message)
    if isinstance(cause, msgpack.StackError):
        return MalformedStackError(message)
    return ValueError(message)
