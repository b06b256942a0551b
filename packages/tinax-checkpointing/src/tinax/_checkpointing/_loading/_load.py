"""Loading named checkpointables through Orbax V1, into explicit targets, from complete checkpoints only.

Completeness, saved names and array shapes are checked before any byte loads; Orbax's failures go
through ``upstream_failure``, and a failed load's abandoned reads are settled by ``_orbax_workarounds``.
Orbax is imported when a load runs, never when this module is imported.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import pathlib
import warnings
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any

from tinax._checkpointing._compat02 import CheckpointKeyError, upstream_failure
from tinax._checkpointing._loading._targets import (
    lacks_placement,
    require_restore_target,
    require_target_fits,
    with_stored_placements,
)
from tinax._checkpointing._locations import absolute_location, folder_nbytes, is_remote
from tinax._checkpointing._metadata._abstract import stored_leaves_of
from tinax._checkpointing._metadata._layout import PYTREE_METADATA, ParsedFiles, require_complete_checkpoint
from tinax._checkpointing._orbax_workarounds import (
    ENSURE_FUTURE_WRAPPER_NEVER_AWAITED,
    collect_abandoned_reads,
    finish_abandoned_reads,
    retire_abandoned_work,
    take_abandoned_orbax_task_reports,
)
from tinax._core import validation
from tinax._core.logs import Operation, get_logger, tree_nbytes

__all__ = ["load_checkpointables", "loaded_nbytes", "restore_checkpointables", "restore_complete", "stored_tree"]

_logger = get_logger("checkpointing")
_LOAD = "tinax.checkpointing.load_checkpointables"


def load_checkpointables(path: str | os.PathLike[str], targets: Mapping[str, Any]) -> dict[str, Any]:
    """Loads named values from a complete checkpoint into explicit targets.

    Every name to load needs a restore target (:func:`abstract_restore_target`
    builds one from live state): arrays load with the target's sharding and dtype
    and must have the saved shape; an abstract array without a sharding loads
    where the checkpoint recorded it. Names left out of ``targets`` are not
    loaded. The folder is checked to be complete before anything loads. In a
    multi-process run every process makes the same call, in the same order. A
    successful load logs one INFO line to the ``tinax.checkpointing`` logger. The
    checkpointing user guide's "Restore targets" section gives the rules.

    Args:
      path: The checkpoint folder written by :func:`save_checkpointables`, or a
        ``gs://`` URL (``str`` or ``etils.epath.Path``) of a prefix holding Orbax's
        ``commit_success.txt``.
      targets: A restore target per name to load. At least one.

    Returns:
      A dict of the loaded values, by name.

    Raises:
      TypeError: If an argument is of the wrong kind, or a leaf is refused (some also ``KeyError``/``ValueError``).
      ValueError: If ``targets`` is empty, a target is None, or the checkpoint does not fit (most also ``KeyError``).
      FileNotFoundError: If nothing exists at ``path``; also a ``ValueError``.
      ImportError: If ``path`` is a ``gs://`` URL and gcsfs is not installed.

    Examples:
      >>> import jax.numpy as jnp
      >>> from tinax.checkpointing import abstract_restore_target, load_checkpointables, save_checkpointables
      >>> params = {"w": jnp.arange(3.0)}
      >>> save_checkpointables("run/step-1", {"params": params}).result()
      >>> restored = load_checkpointables("run/step-1", {"params": abstract_restore_target(params)})
      >>> restored["params"]["w"].tolist()
      [0.0, 1.0, 2.0]
    """
    operation = Operation(_logger, "loaded", "", "")
    loaded = restore_checkpointables(path, targets)
    operation.what = f"checkpointables {sorted(loaded)} from"
    operation.target = str(absolute_location(path, "path", needed_by=_LOAD))
    operation.done(nbytes=loaded_nbytes(operation, operation.target, loaded))
    return loaded


def loaded_nbytes(operation: Operation, source: str | os.PathLike[str], names: Iterable[str]) -> int | None:
    """The bytes of the folders of the checkpointables loaded, counted only if ``operation`` logs."""
    if not operation.enabled:
        return None
    if is_remote(source):
        return sum(folder_nbytes(f"{os.fspath(source)}/{name}") for name in names)
    return sum(tree_nbytes(pathlib.Path(source) / name) for name in names)


def restore_checkpointables(path: str | os.PathLike[str], targets: Mapping[str, Any]) -> dict[str, Any]:
    """Does what :func:`load_checkpointables` documents, without its log line."""
    source = absolute_location(path, "path", needed_by=_LOAD)
    named = validation.require_str_mapping(targets, "targets")
    if not named:
        validation.fail_value("targets", "a mapping with a restore target for at least one checkpointable", named)
    for name, target in named.items():
        require_restore_target(target, f"targets[{name!r}]")
    parsed: ParsedFiles = {}
    return restore_complete(source, require_complete_checkpoint(source, parsed), named, parsed)


def restore_complete(
    source: pathlib.Path, saved: set[str], targets: Mapping[str, Any], parsed: ParsedFiles | None = None
) -> dict[str, Any]:
    """Loads checked targets from a folder that passed the completeness check (``saved``), in one Orbax call.

    Orbax loads names in sorted order and stops at the first failure, so an earlier iterator may be restored.
    """
    unknown = sorted(name for name in targets if name not in saved)
    if unknown:
        raise CheckpointKeyError(
            f"targets names checkpointables {unknown} that {str(source)!r} does not hold; it holds {sorted(saved)}"
        )
    import orbax.checkpoint.experimental.v1 as orbax  # Imported only when a load runs: it is slow to import.

    take_abandoned_orbax_task_reports()
    pytrees = [name for name in targets if (source / name / PYTREE_METADATA).is_file()]
    shapes = _stored_shapes(source, pytrees, parsed)
    placed = {}
    for name, target in targets.items():
        where = f"targets[{name!r}]"
        if name in shapes:
            require_target_fits(target, shapes[name], where, str(source))
        placed[name] = target
        if lacks_placement(target):
            placed[name] = with_stored_placements(target, stored_tree(orbax, source, name), where, str(source))
    try:
        with finish_abandoned_reads():
            loaded = orbax.load_checkpointables(source, placed)
    except Exception as error:
        retire_abandoned_work(error)
        raise upstream_failure(
            f"could not load checkpointables {sorted(targets)} from {str(source)!r} into the given targets", error
        ) from error
    return dict(loaded)


def _stored_shapes(
    source: pathlib.Path, names: list[str], parsed: ParsedFiles | None
) -> dict[str, dict[tuple[str, ...], tuple[int, ...]]]:
    """The saved shape of every array of the named pytrees; {} where unreadable, left for the load to report."""
    try:
        read = stored_leaves_of(source, names, parsed)
    except Exception:  # Damage the completeness check cannot see (an array's Zarr metadata, for one).
        return {}
    return {name: {leaf.keys: leaf.shape for leaf in leaves if leaf.shape is not None} for name, leaves in read.items()}


def stored_tree(orbax: Any, source: pathlib.Path, name: str) -> Any:
    """Orbax's metadata tree of one saved pytree, or None (no pytree, or unreadable: the load then reports it).

    Read by the pytree handler alone: Orbax's ``metadata(path, ...)`` reads every part and warns for non-pytrees.
    """
    folder = source / name
    if not (folder / PYTREE_METADATA).is_file():
        return None
    with warnings.catch_warnings():
        # A read Orbax gives up may be collected while it runs (see collect_abandoned_reads).
        warnings.filterwarnings("ignore", ENSURE_FUTURE_WRAPPER_NEVER_AWAITED, RuntimeWarning)
        try:
            stored = _run(orbax.handlers.PyTreeHandler().metadata(folder))
        except Exception as error:
            retire_abandoned_work(error)
            return None
    if stored is None:
        # Orbax gave up reading (it logged why): collect the reads it abandoned now.
        collect_abandoned_reads()
    return stored


def _run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Runs a coroutine to its end from synchronous code, also where this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        with finish_abandoned_reads():
            return asyncio.run(coroutine)
    # A pool's thread does not inherit this thread's context variables: the call there enters the load's own.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="tinax-metadata") as pool:
        return pool.submit(_run, coroutine).result()
