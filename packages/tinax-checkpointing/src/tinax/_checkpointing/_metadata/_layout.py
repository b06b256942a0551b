"""The layout check: is a folder a complete Orbax V1 checkpoint whose metadata Orbax can use?

Locally Orbax commits by renaming the temporary folder; ``commit_success.txt`` is not required since
Orbax 0.12.1 (tinax 0.2's) writes none. On ``gs://`` there is no rename, so the marker is required.
The check is ours because Orbax reads its metadata unchecked and fails inside reads it already started.
See docs/guide/checkpointing.md, section "Restore targets".
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
from typing import Any

from tinax._checkpointing._compat02 import CheckpointKeyError, CheckpointNotFoundError
from tinax._checkpointing._locations import CLAIM_SUFFIX, COMMIT_MARKER, has_commit_marker, is_remote, remote_filesystem
from tinax._checkpointing._names import ORBAX_TMP_SUFFIX, is_orbax_temporary_name

__all__ = ["CHECKPOINT_METADATA", "PYTREE_METADATA", "ParsedFiles", "read_json_object", "require_complete_checkpoint"]

#: JSON files of one checkpoint already parsed, by path relative to the checkpoint folder.
ParsedFiles = dict[pathlib.PurePath, dict[str, Any]]

# Files every committed Orbax V1 checkpoint holds at its top level (not commit_success.txt: 0.12.1 writes none).
CHECKPOINT_METADATA = "_CHECKPOINT_METADATA"
_ORBAX_INDICATOR = "orbax.checkpoint"
#: The metadata file of a pytree checkpointable, inside its folder.
PYTREE_METADATA = "_METADATA"
_PYTREE_HANDLER_SUFFIX = ".PyTreeHandler"
# Further JSON files Orbax writes into a pytree checkpointable's folder.
_PYTREE_SHARDING = "_sharding"
_ARRAY_METADATAS = "array_metadatas"
_RANDOM_KEY_IMPL = "random_key_impl"
# Orbax's key kinds in a pytree's metadata, and the value types it gives to
# empty containers and None (checked against Orbax's own constants by a test).
_SEQUENCE_KEY = 1
_DICT_KEY = 2
_EMPTY_VALUE_TYPES = frozenset({"None", "Dict", "List", "Tuple", "NamedTuple"})


def require_complete_checkpoint(source: pathlib.Path, parsed: ParsedFiles | None = None) -> set[str]:
    """Checks that ``source`` is a committed checkpoint with usable metadata; returns the checkpointable names.

    ``parsed`` collects each JSON file parsed so a load reads it once; damage is a ``CheckpointKeyError``.
    """
    if is_remote(source):
        _require_committed_prefix(source)
    else:
        _require_local_folder(source)
    if is_orbax_temporary_name(source.name):
        raise ValueError(
            f"path {str(source)!r} is an incomplete checkpoint: it is the temporary folder of a save that has not "
            "finished (still running, or interrupted)"
        )
    missing = [name for name in (CHECKPOINT_METADATA, _ORBAX_INDICATOR) if not (source / name).is_file()]
    if missing:
        raise _incomplete(source, f"it lacks {missing}, so it is no Orbax checkpoint or the folder was damaged")
    # JSON object keys are always strings, so only the kind of the listing needs checking.
    handlers = read_json_object(source, pathlib.PurePath(CHECKPOINT_METADATA), parsed).get("item_handlers")
    if not isinstance(handlers, dict):
        raise _incomplete(source, f"its {CHECKPOINT_METADATA} does not list the checkpointables it holds")
    for name, handler in handlers.items():
        _require_checkpointable(source, name, handler, parsed)
    return set(handlers)


def _incomplete(source: pathlib.Path, problem: str) -> CheckpointKeyError:
    """The error for damage found in checkpoint ``source``."""
    return CheckpointKeyError(f"path {str(source)!r} is an incomplete checkpoint: {problem}")


def _require_local_folder(source: pathlib.Path) -> None:
    """Refuses a local path that is no folder, naming an unfinished save where one is left beside it."""
    if not os.path.lexists(source):
        leftover = source.with_name(source.name + ORBAX_TMP_SUFFIX)
        hint = (
            f"; {str(leftover)!r} holds a save that has not finished (still running, or interrupted)"
            if leftover.exists()
            else ""
        )
        raise CheckpointNotFoundError(
            f"path must name an existing checkpoint, got {str(source)!r} which does not exist{hint}"
        )
    if not source.is_dir():
        raise ValueError(f"path must name a checkpoint folder, got {str(source)!r} which is not a folder")


def _require_checkpointable(source: pathlib.Path, name: str, handler: object, parsed: ParsedFiles | None) -> None:
    """Checks one checkpointable the checkpoint's metadata lists: its folder and the JSON files Orbax reads."""
    listed = f"its {CHECKPOINT_METADATA} lists {name!r}, which"
    if name in ("", ".", "..") or "/" in name or os.sep in name or "\0" in name:
        raise _incomplete(source, f"{listed} cannot name a checkpointable folder, so the file was damaged")
    folder = source / name
    try:
        present = folder.is_dir()
    except OSError as error:  # a name the file system refuses (too long, for one)
        raise _incomplete(
            source, f"{listed} this file system cannot look up ({error.strerror}), so the file was damaged"
        ) from error
    if not present:
        # Orbax reports a checkpointable it cannot find with a KeyError, which 0.2 let through.
        raise _incomplete(source, f"checkpointable {name!r}, listed in its metadata, is missing")
    is_pytree = isinstance(handler, str) and handler.endswith(_PYTREE_HANDLER_SUFFIX)
    if is_pytree and not (folder / PYTREE_METADATA).is_file():
        raise _incomplete(source, f"checkpointable {name!r} lacks its {PYTREE_METADATA} file")
    for relative in _json_files_of(source, name):
        content = read_json_object(source, relative, parsed)
        if relative.parent.name == _ARRAY_METADATAS:
            _require_array_metadatas(source, relative, content)
        elif is_pytree and relative.name == PYTREE_METADATA:
            _require_tree_metadata(source, relative, content)


def _require_committed_prefix(source: pathlib.Path) -> None:
    """Refuses a ``gs://`` prefix without Orbax's commit marker (an unfinished save there), as a missing folder is."""
    fs = remote_filesystem(source, needed_by="tinax.checkpointing")
    if has_commit_marker(fs, source):
        return
    prefix = os.fspath(source).removeprefix("gs://")
    hint = ""
    if fs.exists(prefix):
        hint = f"; it holds objects without {COMMIT_MARKER!r}: a save that has not finished (running, or interrupted)"
    elif fs.isfile(prefix + CLAIM_SUFFIX):
        hint = f"; a save to it has not finished (running, or interrupted): {CLAIM_SUFFIX!r} claims it"
    raise CheckpointNotFoundError(
        f"path must name an existing checkpoint, got {str(source)!r} which is no committed checkpoint{hint}"
    )


def _require_array_metadatas(source: pathlib.Path, relative: pathlib.PurePath, content: dict[str, Any]) -> None:
    """Checks the fields of a per-process array metadata file that Orbax indexes unchecked, mid-read."""
    entries = content.get("array_metadatas", [])
    valid = isinstance(entries, list) and all(
        _is_array_metadata(entry.get("array_metadata")) for entry in entries if isinstance(entry, dict)
    )
    if not valid or not all(isinstance(entry, dict) for entry in entries):
        raise _incomplete(
            source,
            f"its metadata file {relative.as_posix()!r} cannot be used: it does not hold a list of array metadata "
            "objects, each with a string param_name, integer write_shape and chunk_shape lists, and string key "
            "implementations",
        )


def _require_tree_metadata(source: pathlib.Path, relative: pathlib.PurePath, content: dict[str, Any]) -> None:
    """Checks that a pytree's ``_METADATA`` entries spell their key paths and have restorable value types."""
    import orbax.checkpoint as ocp

    tree = content.get("tree_metadata")
    problem = None if isinstance(tree, dict) else "it has no tree_metadata object"
    for flag in ("use_ocdbt", "use_zarr3", "store_array_data_equal_to_fill_value"):
        if content.get(flag) is not None and not isinstance(content[flag], bool):
            problem = f"its {flag} is {content[flag]!r:.50}, not a bool"
    for keypath, entry in tree.items() if isinstance(tree, dict) else ():
        keys = _nested_keys(entry.get("key_metadata") if isinstance(entry, dict) else None)
        if keys is None or str(tuple(keys)) != keypath:
            problem = f"the key metadata of entry {keypath!r} does not spell its key path"
            break
        value = entry.get("value_metadata")
        value = value if isinstance(value, dict) else {}
        value_type = value.get("value_type")
        known = isinstance(value_type, str) and (
            value_type in _EMPTY_VALUE_TYPES or ocp.type_handlers.has_type_handler(value_type)
        )
        if not known or not isinstance(value.get("skip_deserialize", False), bool):
            problem = f"entry {keypath!r} has value metadata Orbax cannot restore ({value!r:.200})"
            break
    if problem is not None:
        raise _incomplete(source, f"its metadata file {relative.as_posix()!r} cannot be used: {problem}")


def _nested_keys(key_metadata: object) -> list[str] | None:
    """The keys a pytree metadata entry lists, or None where they are malformed."""
    if not isinstance(key_metadata, list):
        return None
    keys = []
    for level in key_metadata:
        if not isinstance(level, dict) or not isinstance(level.get("key"), str):
            return None
        kind = level.get("key_type")
        if type(kind) is not int or kind not in (_SEQUENCE_KEY, _DICT_KEY):
            return None
        if kind == _SEQUENCE_KEY and not (level["key"].isascii() and level["key"].isdigit()):
            return None
        keys.append(level["key"])
    return keys


def _is_array_metadata(array: object) -> bool:
    if not isinstance(array, dict) or not isinstance(array.get("param_name"), str):
        return False
    for key in ("write_shape", "chunk_shape"):
        shape = array.get(key)
        if not isinstance(shape, list) or not all(type(size) is int and 0 <= size < 2**63 for size in shape):
            return False
    extra = array.get("ext_metadata")
    return extra is None or (isinstance(extra, dict) and isinstance(extra.get(_RANDOM_KEY_IMPL, ""), str))


def _json_files_of(source: pathlib.Path, name: str) -> list[pathlib.PurePath]:
    """The JSON files Orbax and Grain read from one checkpointable, relative to ``source`` (array data is not JSON)."""
    folder = source / name
    found = [folder / PYTREE_METADATA, folder / _PYTREE_SHARDING]
    with contextlib.suppress(OSError):
        found.extend(entry for entry in folder.iterdir() if entry.name.endswith(".json"))
    with contextlib.suppress(OSError):
        found.extend((folder / _ARRAY_METADATAS).iterdir())
    # As PurePath, whichever the folder's kind, so the keys match those of ``parsed``.
    return [pathlib.PurePath(os.fspath(entry.relative_to(source))) for entry in found if entry.is_file()]


def read_json_object(
    source: pathlib.Path, relative: pathlib.PurePath, parsed: ParsedFiles | None = None
) -> dict[str, Any]:
    """Reads one JSON metadata file of the checkpoint, refusing anything but a JSON object.

    Every kind of damage raises one ``CheckpointKeyError`` naming the file (also a ``KeyError``, as in tinax 0.2).
    """
    if parsed is not None and relative in parsed:
        return parsed[relative]
    file = source / relative
    reason: str
    cause: BaseException | None = None
    try:
        decoded = json.loads(file.read_bytes().decode("utf-8"))
    except RecursionError as error:
        reason, cause = "its JSON is nested deeper than can be parsed", error
    except UnicodeDecodeError as error:
        reason, cause = f"it is not UTF-8 text ({error.reason} at byte {error.start})", error
    except (OSError, ValueError) as error:
        reason, cause = f"it is not readable JSON ({type(error).__name__}: {error})", error
    else:
        if isinstance(decoded, dict):
            if parsed is not None:
                parsed[relative] = decoded
            return decoded
        reason = f"it holds a JSON {type(decoded).__name__}, not an object"
    raise _incomplete(source, f"its metadata file {relative.as_posix()!r} cannot be used: {reason}") from cause
