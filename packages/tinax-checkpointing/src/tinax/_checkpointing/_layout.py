"""The layout check: is a folder a complete Orbax V1 checkpoint whose metadata Orbax can use?

Orbax V1 writes a checkpoint into ``<path>.orbax-checkpoint-tmp`` and renames
it to ``<path>`` only after every value and its metadata are on disk. (Orbax
0.12.8 and later also write a ``commit_success.txt`` marker before the
rename; 0.12.1, which tinax 0.2 pinned, does not, so the marker is not
required locally.) On a ``gs://`` bucket there is no rename: Orbax writes
into ``<path>`` itself and writes ``commit_success.txt`` last, so there a
prefix without that marker is refused as a missing checkpoint is. The
loader, the manager's scan and ``tinax inspect`` all ask
:func:`require_complete_checkpoint` before anything is read.

This check is ours because Orbax has none to call: it reads its metadata
files unchecked, so damage surfaces as an error inside reads it has already
started (and abandoned), often not even naming the file.
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

# Files every committed Orbax V1 checkpoint holds at its top level. Orbax
# publishes the folder by renaming it only once they and every checkpointable
# are written; Orbax's commit marker (commit_success.txt) is not among them,
# because Orbax 0.12.1 writes none.
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
    """Checks that ``source`` is a committed checkpoint whose metadata Orbax can use, and returns its names.

    Args:
      source: The checkpoint folder, as an absolute path.
      parsed: Where to keep every JSON file the check parsed, by its path
        relative to ``source``, so that a load reads each only once; None
        keeps nothing.

    Returns:
      The names of the checkpointables its metadata lists.

    Raises:
      FileNotFoundError: If nothing exists at ``source`` (also a
        ``ValueError``).
      ValueError: If ``source`` is no folder, an Orbax temporary folder, or
        lacks a metadata file or checkpointable, or a metadata or state file
        is damaged. The last two are also a ``KeyError``: tinax 0.2 let
        Orbax's ``KeyError`` through for an empty folder and for every
        checkpointable that failed to load.
    """
    if is_remote(source):
        _require_committed_prefix(source)
    elif not os.path.lexists(source):
        leftover = source.with_name(source.name + ORBAX_TMP_SUFFIX)
        hint = (
            f"; {str(leftover)!r} holds a save that has not finished (still running, or interrupted)"
            if leftover.exists()
            else ""
        )
        raise CheckpointNotFoundError(
            f"path must name an existing checkpoint, got {str(source)!r} which does not exist{hint}"
        )
    elif not source.is_dir():
        raise ValueError(f"path must name a checkpoint folder, got {str(source)!r} which is not a folder")
    if is_orbax_temporary_name(source.name):
        raise ValueError(
            f"path {str(source)!r} is an incomplete checkpoint: it is the temporary folder of a save that has not "
            "finished (still running, or interrupted)"
        )
    missing = [name for name in (CHECKPOINT_METADATA, _ORBAX_INDICATOR) if not (source / name).is_file()]
    if missing:
        raise CheckpointKeyError(
            f"path {str(source)!r} is an incomplete checkpoint: it lacks {missing}, so it is no Orbax checkpoint "
            "or the folder was damaged"
        )
    metadata = read_json_object(source, pathlib.PurePath(CHECKPOINT_METADATA), parsed)
    handlers = metadata.get("item_handlers") if isinstance(metadata, dict) else None
    if not isinstance(handlers, dict) or not all(isinstance(name, str) for name in handlers):
        raise CheckpointKeyError(
            f"path {str(source)!r} is an incomplete checkpoint: its {CHECKPOINT_METADATA} does not list the "
            "checkpointables it holds"
        )
    for name, handler in handlers.items():
        folder = source / name
        if name in ("", ".", "..") or "/" in name or os.sep in name or "\0" in name:
            raise CheckpointKeyError(
                f"path {str(source)!r} is an incomplete checkpoint: its {CHECKPOINT_METADATA} lists {name!r}, "
                "which cannot name a checkpointable folder, so the file was damaged"
            )
        try:
            present = folder.is_dir()
        except OSError as error:  # a name the file system refuses (too long, for one)
            raise CheckpointKeyError(
                f"path {str(source)!r} is an incomplete checkpoint: its {CHECKPOINT_METADATA} lists {name!r}, "
                f"which this file system cannot look up ({error.strerror}), so the file was damaged"
            ) from error
        if not present:
            # Orbax reports a checkpointable it cannot find with a KeyError, which 0.2 let through.
            raise CheckpointKeyError(
                f"path {str(source)!r} is an incomplete checkpoint: checkpointable {name!r}, listed in its metadata, "
                "is missing"
            )
        is_pytree = isinstance(handler, str) and handler.endswith(_PYTREE_HANDLER_SUFFIX)
        if is_pytree and not (folder / PYTREE_METADATA).is_file():
            raise CheckpointKeyError(
                f"path {str(source)!r} is an incomplete checkpoint: checkpointable {name!r} lacks its "
                f"{PYTREE_METADATA} file"
            )
        for relative in _json_files_of(source, name):
            content = read_json_object(source, relative, parsed)
            if relative.parent.name == _ARRAY_METADATAS:
                _require_array_metadatas(source, relative, content)
            elif is_pytree and relative.name == PYTREE_METADATA:
                _require_tree_metadata(source, relative, content)
    return set(handlers)


def _require_committed_prefix(source: pathlib.Path) -> None:
    """Refuses a ``gs://`` checkpoint prefix without Orbax's commit marker, as a missing local folder is refused.

    On a bucket Orbax writes into the final prefix, so objects there without
    the marker are a save that has not finished (still running, or killed).
    """
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
    """Checks a per-process array metadata file the way Orbax will use it, since Orbax reads it unchecked.

    Orbax turns every entry into its array metadata record by indexing
    ``param_name``, ``write_shape`` and ``chunk_shape``; a missing or mistyped
    field fails inside a read it has already started, so it is refused here.
    """
    entries = content.get("array_metadatas", [])
    valid = isinstance(entries, list) and all(
        _is_array_metadata(entry.get("array_metadata")) for entry in entries if isinstance(entry, dict)
    )
    if not valid or not all(isinstance(entry, dict) for entry in entries):
        raise CheckpointKeyError(
            f"path {str(source)!r} is an incomplete checkpoint: its metadata file {relative.as_posix()!r} cannot be "
            "used: it does not hold a list of array metadata objects, each with a string param_name, integer "
            "write_shape and chunk_shape lists, and string key implementations"
        )


def _require_tree_metadata(source: pathlib.Path, relative: pathlib.PurePath, content: dict[str, Any]) -> None:
    """Checks a pytree's ``_METADATA`` entries the way Orbax will use them, since Orbax reads them unchecked.

    Each entry's key path must spell its nested keys, and its value type must
    be one Orbax can restore. Orbax discovers either kind of damage only
    after it has started reading the other arrays, and abandons those reads.
    """
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
        raise CheckpointKeyError(
            f"path {str(source)!r} is an incomplete checkpoint: its metadata file {relative.as_posix()!r} cannot be "
            f"used: {problem}"
        )


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
    """The JSON files Orbax and Grain read from one checkpointable, relative to ``source``.

    These are the pytree metadata, the sharding and per-process array
    metadata files, and the ``.json`` state files of stateful checkpointables
    (a Grain iterator's ``process_<i>-of-<n>.json``). Array data is not JSON
    and is left to Orbax.
    """
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
    """Reads one JSON metadata file of the checkpoint at ``source``, refusing anything but a JSON object.

    Every way such a file can be damaged (unreadable, not UTF-8, not JSON,
    nested deeper than the parser recurses, not an object at the top) gives
    the same ``ValueError``, naming the file, with the parser's error as its
    cause; nothing else escapes. It is also a ``KeyError``, as the failed
    load was in tinax 0.2 (Orbax wrapped every checkpointable's failure in
    one).

    Args:
      source: The checkpoint folder.
      relative: The file, relative to ``source``.
      parsed: Files parsed before, by relative path: the file is taken from
        there if it is listed, and kept there once parsed. None reads it.

    Returns:
      The file's top-level JSON object.

    Raises:
      ValueError: If the file cannot be read or holds no JSON object. It is
        also a ``KeyError``.
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
    raise CheckpointKeyError(
        f"path {str(source)!r} is an incomplete checkpoint: its metadata file {relative.as_posix()!r} cannot be used: "
        f"{reason}"
    ) from cause
