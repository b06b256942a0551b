"""Checks made before a save starts: what may be saved, and where.

Orbax judges values and destinations only in the background, after scheduling the folder's creation,
so a refusal leaves work dangling far from its cause. These run first and name the argument at fault;
other values are put to Orbax's own handler lookup.
"""

from __future__ import annotations

import errno
import os
import pathlib
import stat
from typing import Any, NoReturn

import jax
import numpy as np

from tinax._checkpointing._compat02 import (
    CheckpointExistsError,
    NoHandlerError,
    uncreatable_destination,
)
from tinax._checkpointing._names import ORBAX_TMP_SUFFIX
from tinax._checkpointing._orbax_workarounds import handler_lookup
from tinax._core import files, validation
from tinax._core.jax_compat import is_tracer

__all__ = ["exists_error", "is_empty_container", "require_absent", "require_creatable", "require_saveable_leaves"]

# Python ints Orbax saves: it stores them as int64, or as uint64 above 2**63 - 1.
_MIN_INT = -(2**63)
_MAX_INT = 2**64 - 1
# NumPy dtype kinds Orbax (TensorStore) saves. ml_dtypes' types (bfloat16, ...) have kind "V"
# but a scalar type of their own, unlike raw and structured void data.
_SAVEABLE_KINDS = frozenset("biufc")
_SAVEABLE_LEAVES = "bool, int, float, str, or a numpy.ndarray or jax.Array of bool or numbers"


def exists_error(destination: pathlib.Path) -> FileExistsError:
    return files.exists_error(
        destination,
        "checkpoints are immutable, so save to a new path (or delete the old checkpoint first)",
        CheckpointExistsError,
    )


def require_absent(destination: pathlib.Path) -> None:
    if os.path.lexists(destination):
        raise exists_error(destination)


def require_creatable(destination: pathlib.Path) -> None:
    """Refuses, before anything starts, a destination whose folder cannot be created.

    The nearest existing ancestor must be a writable folder, and each folder to create a name the system takes.
    """
    missing: list[str] = [destination.name + ORBAX_TMP_SUFFIX]
    ancestor = destination.parent
    while True:
        try:
            status = os.stat(ancestor)
        except FileNotFoundError as error:
            if os.path.islink(ancestor):
                _fail_uncreatable(destination, f"{str(ancestor)!r} is a broken symbolic link", error)
            if ancestor.parent == ancestor:  # pragma: no cover - the root always exists
                _fail_uncreatable(destination, "no folder on it exists", error)
            missing.append(ancestor.name)
            ancestor = ancestor.parent
            continue
        except OSError as error:
            _fail_uncreatable(destination, f"{str(ancestor)!r} cannot be reached ({error.strerror})", error)
        except ValueError as error:  # An embedded NUL, for one.
            raise ValueError(f"path {str(destination)!r} cannot be created: {error}") from error
        break
    if not stat.S_ISDIR(status.st_mode):
        _fail_uncreatable(
            destination,
            f"{str(ancestor)!r} is not a folder",
            NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(ancestor)),
        )
    if not os.access(ancestor, os.W_OK | os.X_OK):
        _fail_uncreatable(
            destination,
            f"folder {str(ancestor)!r} is not writable",
            PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(ancestor)),
        )
    try:
        longest = os.pathconf(ancestor, "PC_NAME_MAX")
    except (OSError, ValueError):  # pragma: no cover - every POSIX file system answers
        longest = 255
    for name in missing:
        if len(os.fsencode(name)) > longest:
            _fail_uncreatable(
                destination,
                f"the folder name {name!r} is longer than the {longest} bytes the file system allows",
                OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), name),
            )


def _fail_uncreatable(destination: pathlib.Path, reason: str, error: OSError) -> NoReturn:
    raise uncreatable_destination(
        f"path {str(destination)!r} cannot be created as a checkpoint folder: {reason}", error
    ) from error


def is_empty_container(value: object) -> bool:
    """Whether a leafless pytree is one Orbax refuses to save: None or an empty (false) container.

    True leafless values such as optax's ``(EmptyState(), EmptyState())`` save, as in tinax 0.2.
    """
    try:
        return not value
    except Exception:
        return False


def require_saveable_leaves(name: str, value: object) -> None:
    """Checks every leaf and key of one checkpointable before anything is written.

    Scalars, strings and arrays are judged here; other leaves are put to Orbax's handler lookup.
    """
    argument = f"checkpointables[{name!r}]"
    flat = jax.tree_util.tree_flatten_with_path(value)[0]
    if not flat and is_empty_container(value):
        validation.fail_value(argument, "a value that is neither None nor an empty container", value)
    ask_orbax = False
    for path, leaf in flat:
        where = argument + jax.tree_util.keystr(path)
        for entry in path:
            key = entry.key if isinstance(entry, jax.tree_util.DictKey) else getattr(entry, "name", None)
            if isinstance(key, str) and validation.utf8_problem(key) is not None:
                validation.fail_value(f"the keys of {argument}", "encodable as UTF-8 (no lone surrogates)", key)
        kind = type(leaf)
        if kind is bool or kind is float:
            continue
        if kind is int:
            if not _MIN_INT <= leaf <= _MAX_INT:
                validation.fail_value(where, "an int in [-2**63, 2**64 - 1], the range Orbax stores", leaf)
        elif kind is str:
            if validation.utf8_problem(leaf) is not None:
                validation.fail_value(where, "a str encodable as UTF-8 (no lone surrogates)", leaf)
        elif isinstance(leaf, (bytes, bytearray, memoryview)):
            raise validation.TypeAndValueError(validation.expectation_message(where, _SAVEABLE_LEAVES, leaf))
        elif isinstance(leaf, np.ndarray) or (isinstance(leaf, jax.Array) and not is_tracer(leaf)):
            _require_saveable_array(where, leaf)
        else:
            ask_orbax = True
    if ask_orbax:
        _require_saveable(name, value)


def _require_saveable_array(where: str, array: Any) -> None:
    dtype = array.dtype
    if isinstance(array, np.ndarray) and not (
        dtype.kind in _SAVEABLE_KINDS or (dtype.kind == "V" and dtype.type is not np.void)
    ):
        raise validation.TypeAndValueError(
            validation.expectation_message(where, f"{_SAVEABLE_LEAVES} (not dtype {dtype})", array)
        )
    if array.size == 0:
        validation.fail_value(where, "an array with at least one element (Orbax saves no empty arrays)", array)


def _require_saveable(name: str, value: object) -> None:
    """Asks Orbax's handler lookup for ``value`` before anything is written (its own runs after scheduling).

    The lookup builds every handler (milliseconds), so it runs only for non-array, non-scalar leaves.
    """
    lookup = handler_lookup()
    if lookup is None:
        return
    try:
        lookup(value, name)
    except (LookupError, ValueError) as error:
        # Keep the class of Orbax's error (0.2 let it through): a KeyError when no handler matched.
        kind = NoHandlerError if isinstance(error, LookupError) else validation.TypeAndValueError
        raise kind(
            validation.expectation_message(
                f"checkpointables[{name!r}]",
                "a pytree of jax.Array, numpy.ndarray, Python scalars and str, or an Orbax stateful checkpointable",
                value,
            )
        ) from error
