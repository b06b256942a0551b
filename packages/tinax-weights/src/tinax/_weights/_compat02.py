"""tinax 0.2's exception types, kept where 0.3 says more: every accommodation of 0.2 in this member.

tinax 0.2 let the operating system's, safetensors' and msgpack's own errors
reach the caller. Code written against 0.2 catches those types, so each
error here is also of the type 0.2 raised, next to the ValueError that 0.3
raises for every bad value; each class and builder says which 0.2
behaviour it keeps. The errors that subclass safetensors' or msgpack's own
classes are declared in :mod:`tinax._weights._compat02_upstream`, which the
builders import only when there is such an error to raise: importing
either library is what ``import tinax.weights`` must not do.
"""

from __future__ import annotations

__all__ = [
    "DirectoryPathError",
    "IntegerRangeError",
    "MissingFilePathError",
    "NotADirectoryPathError",
    "UnreachablePathError",
    "malformed_msgpack",
    "malformed_safetensors",
    "trailing_msgpack_data",
]


class DirectoryPathError(IsADirectoryError, ValueError):
    """A directory was given where a file path is needed (0.2 raised the operating system's IsADirectoryError)."""


class MissingFilePathError(FileNotFoundError, ValueError):
    """A directory was given where an existing file is needed, reported as no such file, as 0.2's msgpack load did."""


class UnreachablePathError(FileNotFoundError, ValueError):
    """A path that cannot lead to a file, whatever exists on disk.

    0.2 raised FileNotFoundError for those it met when loading msgpack
    files. Its ``errno`` is the operating system's: ENOTDIR (a component is
    a regular file, then the error is a :class:`NotADirectoryPathError`),
    ELOOP (a symbolic-link loop) or ENAMETOOLONG.
    """


class NotADirectoryPathError(UnreachablePathError, NotADirectoryError):
    """A path that runs through a regular file (or another non-directory) where a folder is needed.

    It is a FileNotFoundError and a ValueError, as every path that cannot
    lead to a file, and also a NotADirectoryError, which tinax 0.2 raised
    when a save's folder was a file.
    """


class IntegerRangeError(ValueError, OverflowError):
    """An int leaf outside the range that msgpack stores.

    It is an OverflowError too: msgpack raised that for such a leaf in
    tinax 0.2.
    """


def malformed_safetensors(message: str) -> ValueError:
    """Returns the error for a malformed safetensors file, with ``message``.

    It is a ValueError and also the upstream ``safetensors.SafetensorError``,
    which 0.2 let through for such files.
    """
    from tinax._weights._compat02_upstream import MalformedSafetensorsError

    return MalformedSafetensorsError(message)


def malformed_msgpack(message: str, cause: BaseException) -> ValueError:
    """Returns the ValueError for a decoding failure, also of msgpack's own type where it has one, as 0.2 raised."""
    from tinax._weights import _compat02_upstream

    return _compat02_upstream.malformed_msgpack(message, cause)


def trailing_msgpack_data(message: str) -> ValueError:
    """Returns the ValueError for bytes after a file's msgpack value, also the ``msgpack.ExtraData`` of 0.2."""
    from tinax._weights._compat02_upstream import TrailingDataError

    return TrailingDataError(message)
