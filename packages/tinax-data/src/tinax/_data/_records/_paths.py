"""The paths record readers and writers are given, checked so that failures keep tinax 0.2's exception types.

0.2 raised whatever the file system, pyarrow or array-record raised; each error here names the path and
is also an instance of that type.
"""

from __future__ import annotations

import os
import pathlib

from tinax._core import validation
from tinax._core._compat02 import MissingPathError
from tinax._core.files import DestinationErrors, require_file_destination

__all__ = ["DestinationErrors", "require_record_path", "writable_destination"]


def require_record_path(value: object, name: str, *, empty_error: type[Exception] = MissingPathError) -> pathlib.Path:
    """Checks a reader's or writer's path argument; an empty one raises ``empty_error`` (0.2's type for its caller)."""
    try:
        return validation.require_path(value, name)
    except TypeError:
        raise
    except ValueError as error:
        raise empty_error(str(error)) from error


def writable_destination(destination: pathlib.Path, errors: DestinationErrors) -> pathlib.Path:
    """Checks a file can be created at ``destination``; returns it, or the file a symbolic link there points to.

    0.2 wrote through a link (the link stayed), so the atomic replacement happens at the linked file too.
    """
    if destination.is_symlink():
        destination = pathlib.Path(os.path.realpath(destination))
    require_file_destination(destination, errors)
    return destination
