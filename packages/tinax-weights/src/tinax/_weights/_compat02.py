"""tinax 0.2's exception types, kept where 0.3 says more: every accommodation of 0.2 in this member.

0.2 let the system's, safetensors' and msgpack's errors through, and code catches those types,
so each error here is also the type 0.2 raised, besides 0.3's ValueError. Subclasses of the
upstream libraries' errors live in :mod:`._compat02_upstream`, imported only to raise one,
since ``import tinax.weights`` must not import safetensors or msgpack. An int leaf outside msgpack's
range raises tinax-core's shared ``ValueOverflowError`` (also the OverflowError msgpack raised in 0.2).
"""

from __future__ import annotations

from tinax._core._compat02 import MissingPathError, also_raised_as

__all__ = [
    "DirectoryPathError",
    "NotADirectoryPathError",
    "malformed_msgpack",
    "malformed_safetensors",
    "trailing_msgpack_data",
]


class DirectoryPathError(IsADirectoryError, ValueError):
    """A directory was given where a file path is needed (0.2 raised the operating system's IsADirectoryError)."""


# No file can be read at a path: tinax-core's ``MissingPathError``, no such file, as 0.2's msgpack load
# reported. Raised for a directory where an existing file is needed (errno ENOENT), and for a path that
# cannot lead to a file, whatever exists on disk, with the system's errno: ENOTDIR (then a
# :class:`NotADirectoryPathError`), ELOOP or ENAMETOOLONG.


#: A path that runs through a non-directory where a folder is needed; also the NotADirectoryError of 0.2's saves.
NotADirectoryPathError = also_raised_as(MissingPathError, NotADirectoryError)


def malformed_safetensors(message: str) -> ValueError:
    """The error for a malformed safetensors file: a ValueError and the ``SafetensorError`` 0.2 let through."""
    from tinax._weights._compat02_upstream import MalformedSafetensorsError

    return MalformedSafetensorsError(message)


def malformed_msgpack(message: str, cause: BaseException) -> ValueError:
    """The ValueError for a decoding failure, also of msgpack's own type where it has one, as 0.2 raised."""
    from tinax._weights import _compat02_upstream

    return _compat02_upstream.malformed_msgpack(message, cause)


def trailing_msgpack_data(message: str) -> ValueError:
    """The ValueError for bytes after a file's msgpack value, also the ``msgpack.ExtraData`` of 0.2."""
    from tinax._weights._compat02_upstream import trailing_data

    return trailing_data(message)
