"""``tinax inspect`` for Orbax checkpoint folders and for roots of step folders.

Registered in the ``tinax.inspectors`` entry-point group (see tinax-core's
``tinax._core._command._registry``). A checkpoint is checked by the loader's
own completeness check, :func:`~tinax._checkpointing._layout.require_complete_checkpoint`,
and its arrays are described from Orbax's metadata
(:func:`~tinax._checkpointing._load.stored_tree`), never from array data;
the one value read is a training checkpoint's step (a single scalar, through
Orbax's partial load). A root is scanned by the manager's own scan,
:func:`~tinax._checkpointing._manager.scan_root`, without cleanup.
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import pathlib
import warnings
from collections.abc import Iterator
from typing import Any

from tinax._checkpointing._layout import CHECKPOINT_METADATA, require_complete_checkpoint
from tinax._checkpointing._load import stored_tree
from tinax._checkpointing._manager import TrainingCheckpointManager, scan_root
from tinax._checkpointing._names import is_orbax_temporary_name
from tinax._checkpointing._quiet import retire_abandoned_work
from tinax._checkpointing._training import SEPARATE_STEP_CHECKPOINTABLE, STEP_KEY, TrainingCheckpointNames
from tinax._checkpointing._upstream_compat import orbax_v1
from tinax._core._command._counting import process_bytes_read
from tinax._core._command._report import InspectOptions, Report

__all__ = ["inspect_checkpoint", "inspect_checkpoint_root"]

_PARTS = tuple(TrainingCheckpointNames().__dict__.values())


@contextlib.contextmanager
def _orbax_quiet() -> Iterator[None]:
    """Keeps Orbax's informational logging (absl) off the command's output while metadata is read."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def inspect_checkpoint(path: pathlib.Path, options: InspectOptions) -> Report:
    """Describes a checkpoint folder: complete or not (and why), its parts, their arrays, and its step.

    A problem with the folder is reported, not raised, so that ``--json``
    still describes it; the command then exits 1.
    """
    orbax = orbax_v1()  # imported before counting starts
    import jax  # noqa: F401  (likewise)

    start = process_bytes_read()
    report = Report("inspect", "orbax-checkpoint", str(path))
    # Orbax takes absolute paths only.
    path = path.absolute()
    try:
        names = sorted(require_complete_checkpoint(path))
    except (OSError, ValueError) as error:
        report.summary["complete"] = False
        report.problems.append(" ".join(str(error).split()))
        present = sorted(entry.name for entry in path.iterdir() if entry.is_dir()) if path.is_dir() else []
        report.summary["folders"] = present
        _finish(report, start)
        return report
    report.summary["complete"] = True
    handlers = _handlers(path)
    training = all(part in names for part in _PARTS)
    report.summary["training checkpoint"] = training
    with _orbax_quiet():
        if training:
            report.summary["step"] = _step(orbax, path, names)
        part_rows = []
        array_rows: list[dict[str, Any]] = []
        for name in names:
            tree = stored_tree(orbax, path, name)
            leaves = _leaf_rows(name, tree, options) if tree is not None else []
            part_rows.append(
                {"name": name, "handler": handlers.get(name), "leaves": None if tree is None else len(leaves)}
            )
            array_rows.extend(leaves)
    report.summary["parts"] = names
    report.add_table("parts", ("name", "handler", "leaves"), part_rows)
    report.add_table("arrays", ("part", "name", "type", "dtype", "shape", "sharding"), array_rows)
    _finish(report, start)
    return report


def _finish(report: Report, start: int | None) -> None:
    end = process_bytes_read()
    report.bytes_read = None if start is None or end is None else end - start


def _handlers(path: pathlib.Path) -> dict[str, str]:
    import json

    metadata = json.loads((path / CHECKPOINT_METADATA).read_text(encoding="utf-8"))
    handlers = metadata.get("item_handlers", {})
    return {name: str(handler).rsplit(".", 1)[-1] for name, handler in handlers.items()}


def _step(orbax: Any, path: pathlib.Path, names: list[str]) -> int | None:
    """Reads only the step scalar, from its own part (an early 0.3 layout) or from the auxiliary part."""
    import numpy as np

    target: dict[str, Any]
    if SEPARATE_STEP_CHECKPOINTABLE in names and SEPARATE_STEP_CHECKPOINTABLE not in _PARTS:
        part, target = SEPARATE_STEP_CHECKPOINTABLE, {STEP_KEY: np.zeros((), np.int64)}
    else:
        # tinax 0.2's layout: the auxiliary part is {"state": auxiliary, "step": step}.
        part, target = TrainingCheckpointNames().auxiliary, {STEP_KEY: 0}
    options = orbax.options.PyTreeOptions(loading=orbax.options.PyTreeOptions.Loading(partial_load=True))
    try:
        with orbax.Context(pytree_options=options):
            loaded = orbax.load_checkpointables(path, {part: target})
    except Exception as error:  # Orbax raises many kinds; the step is then reported unknown.
        retire_abandoned_work(error)
        return None
    value = loaded.get(part, {}).get(STEP_KEY) if isinstance(loaded.get(part), dict) else None
    return int(value) if value is not None and int(value) >= 0 else None


def _leaf_rows(part: str, tree: Any, options: InspectOptions) -> list[dict[str, Any]]:
    import jax

    rows = []
    for key_path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        name = jax.tree_util.keystr(key_path, simple=True, separator="/") if key_path else ""
        if options.names is not None and not fnmatch.fnmatchcase(f"{part}/{name}".rstrip("/"), options.names):
            continue
        shape = getattr(leaf, "shape", None)
        dtype = getattr(leaf, "dtype", None)
        sharding = getattr(leaf, "sharding_metadata", None)
        rows.append(
            {
                "part": part,
                "name": name,
                "type": type(leaf).__name__.removesuffix("Metadata").lower() or type(leaf).__name__,
                "dtype": None if dtype is None else str(dtype),
                "shape": None if shape is None else list(shape),
                "sharding": None if sharding is None else _sharding_text(sharding),
            }
        )
    return rows


def _sharding_text(sharding: Any) -> str:
    """Orbax's saved sharding in one short line (its own repr lists every device of a mesh)."""
    names = getattr(sharding, "axis_names", None)
    shape = getattr(sharding, "shape", None)
    spec = getattr(sharding, "partition_spec", None)
    if names is not None and shape is not None and spec is not None:
        mesh = ", ".join(f"{name}={int(size)}" for name, size in zip(names, list(shape), strict=False))
        return f"NamedSharding(mesh=({mesh}), spec={tuple(spec)})"
    device = getattr(sharding, "device_str", None)
    if device is not None:
        return f"SingleDeviceSharding({device})"
    return " ".join(str(sharding).split())


def inspect_checkpoint_root(path: pathlib.Path, options: InspectOptions) -> Report:
    """Describes a root of step folders as the manager sees it: committed steps, torn and temporary folders.

    Torn or temporary folders are reported as problems (the command exits 1);
    nothing is removed.
    """
    del options
    orbax_v1()  # the scan's completeness check may import Orbax; done before counting starts
    start = process_bytes_read()
    # Built only for the manager's own checks of the root; it saves, cleans and retains nothing here.
    manager = TrainingCheckpointManager(
        path,
        save_interval_steps=1,
        keep_last=1,
        keep_every=None,
        keep_best=None,
        best_mode=None,
        save_in_flight="wait",
        create=False,
    )
    # The local scan: one process's view, which needs no JAX backend.
    scan = scan_root(manager.root)
    report = Report("inspect", "checkpoint-root", str(path))
    report.summary["committed steps"] = list(scan.committed)
    report.summary["latest committed step"] = scan.committed[-1] if scan.committed else None
    rows = [{"name": str(step), "state": "committed"} for step in scan.committed]
    rows += [{"name": entry.name, "state": "torn"} for entry in scan.torn]
    rows += [{"name": entry.name, "state": "temporary"} for entry in scan.temporary]
    rows += [{"name": entry.name, "state": "unrelated"} for entry in scan.unrelated]
    report.add_table("entries", ("name", "state"), rows)
    for entry in scan.torn:
        report.problems.append(f"{entry.name}: a torn step folder (not a complete checkpoint)")
    for entry in scan.temporary:
        assert is_orbax_temporary_name(entry.name)
        report.problems.append(f"{entry.name}: an unfinished save (still running, or interrupted)")
    _finish(report, start)
    return report
