"""tinax 0.2's errors for malformed files that are also safetensors' and msgpack's own error types.

0.2 let ``safetensors.SafetensorError``, ``msgpack.ExtraData`` and ``msgpack.FormatError`` through,
so handlers may catch them. Importing this imports both libraries, so :mod:`._compat02` does so
only when there is such an error to raise.
"""

from __future__ import annotations

import msgpack
from safetensors import SafetensorError

from tinax._core._compat02 import also_raised_as

__all__ = ["MalformedMsgpackError", "MalformedSafetensorsError", "malformed_msgpack", "trailing_data"]


class MalformedSafetensorsError(ValueError, SafetensorError):
    """A safetensors file whose header or size breaks the format."""


class MalformedMsgpackError(ValueError):
    """A msgpack file that breaks the format; paired with msgpack's own error type where it has one."""

    def __init__(self, message: str) -> None:
        # Before msgpack.ExtraData's own, which takes the decoded value and the extra bytes.
        ValueError.__init__(self, message)
        self.unpacked = None
        self.extra = b""

    def __str__(self) -> str:
        return ValueError.__str__(self)


def malformed_msgpack(message: str, cause: BaseException) -> ValueError:
    """Returns the ValueError for a decoding failure, also of msgpack's own type where it has one."""
    for upstream in (msgpack.FormatError, msgpack.StackError):
        if isinstance(cause, upstream):
            return also_raised_as(MalformedMsgpackError, upstream)(message)
    return MalformedMsgpackError(message)


def trailing_data(message: str) -> ValueError:
    """Returns the error for bytes after a msgpack file's single top-level value, also a ``msgpack.ExtraData``."""
    return also_raised_as(MalformedMsgpackError, msgpack.ExtraData)(message)
