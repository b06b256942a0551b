"""``tinax inspect`` for Orbax checkpoint folders and for roots of step folders (registered by ``_sniff``).

A checkpoint is judged by the loaders' own completeness checks and described from metadata alone
(no array data, no JAX backend; only a training checkpoint's step scalar is read). A root is scanned
by the manager's ``scan_root`` without cleanup. Orbax and TensorStore are imported with this module,
before the command starts counting the bytes the process reads.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import pathlib
from typing import Any

# Imported before the command counts the reads: the completeness check uses Orbax's registry and the step is read
# through TensorStore; neither starts a backend.
import orbax.checkpoint.experimental.v1  # noqa: F401
import tensorstore  # noqa: F401

from tinax._checkpointing._locations import CLAIM_SUFFIX, absolute_location
from tinax._checkpointing._manager._step_manager import TrainingCheckpointManager, scan_root
from tinax._checkpointing._metadata._abstract import StoredLeaf, read_scalar, stored_leaves
from tinax._checkpointing._metadata._layout import CHECKPOINT_METADATA, PYTREE_METADATA, require_complete_checkpoint
from tinax._checkpointing._names import is_orbax_temporary_name
from tinax._checkpointing._training import STEP_KEY, TrainingCheckpointNames, require_iterator_states
from tinax._core._command._report import InspectOptions, Report

__all__ = ["inspect_checkpoint", "inspect_checkpoint_root"]

_PARTS = dataclasses.astuple(TrainingCheckpointNames())
# The type column of the arrays table, by Orbax's value type.
_TYPE_NAMES = {"jax.Array": "array", "np.ndarray": "numpy", "scalar": "scalar", "string": "string"}


def inspect_checkpoint(path: pathlib.Path | str, options: InspectOptions) -> Report:
    """Describes a checkpoint folder (or ``gs://`` prefix): complete or not (and why), its parts, arrays and step.

    Problems are reported, not raised, so ``--json`` still describes them; the command then exits 1.
    """
    report = Report("inspect", "orbax-checkpoint", str(path))
    path = absolute_location(path, "path", needed_by="tinax inspect")
    try:
        held = require_complete_checkpoint(path)
        training = all(part in held for part in _PARTS)
        if training:
            require_iterator_states(path, TrainingCheckpointNames().iterator)
    except (OSError, ValueError) as error:
        report.summary["complete"] = False
        report.problems.append(" ".join(str(error).split()))
        present = sorted(entry.name for entry in path.iterdir() if entry.is_dir()) if path.is_dir() else []
        report.summary["folders"] = present
        return report
    report.summary["complete"] = True
    names = sorted(held)
    handlers = _handlers(path)
    report.summary["training checkpoint"] = training
    if training:
        report.summary["step"] = _step(path)
    part_rows = []
    array_rows: list[dict[str, Any]] = []
    for name in names:
        leaves = None
        if (path / name / PYTREE_METADATA).is_file():
            try:
                leaves = _leaf_rows(name, stored_leaves(path, name), options)
            except ValueError as error:
                report.problems.append(" ".join(str(error).split()))
        part_rows.append(
            {"name": name, "handler": handlers.get(name), "leaves": None if leaves is None else len(leaves)}
        )
        array_rows.extend(leaves or [])
    report.summary["parts"] = names
    report.add_table("parts", ("name", "handler", "leaves"), part_rows)
    report.add_table("arrays", ("part", "name", "type", "dtype", "shape", "sharding"), array_rows)
    return report


def _handlers(path: pathlib.Path) -> dict[str, str]:
    metadata = json.loads((path / CHECKPOINT_METADATA).read_text(encoding="utf-8"))
    handlers = metadata.get("item_handlers", {})
    return {name: str(handler).rsplit(".", 1)[-1] for name, handler in handlers.items()}


def _step(path: pathlib.Path) -> int | None:
    """Reads only the step scalar, from the auxiliary part ``{"state": auxiliary, "step": step}``."""
    value = read_scalar(path, TrainingCheckpointNames().auxiliary, (STEP_KEY,))
    try:
        step = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return step if step >= 0 and step == value else None


def _leaf_rows(part: str, leaves: list[StoredLeaf], options: InspectOptions) -> list[dict[str, Any]]:
    rows = []
    for leaf in leaves:
        if leaf.empty:
            continue
        if options.names is not None and not fnmatch.fnmatchcase(f"{part}/{leaf.name}".rstrip("/"), options.names):
            continue
        rows.append(
            {
                "part": part,
                "name": leaf.name,
                "type": _TYPE_NAMES.get(leaf.value_type, leaf.value_type),
                "dtype": None if leaf.dtype is None else str(leaf.dtype),
                "shape": None if leaf.shape is None else list(leaf.shape),
                "sharding": None if leaf.sharding is None else leaf.sharding.text(),
            }
        )
    return rows


def inspect_checkpoint_root(path: pathlib.Path | str, options: InspectOptions) -> Report:
    """Describes a root of step folders as the manager sees it; torn or temporary entries are problems (exit 1)."""
    del options
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
    scan = scan_root(manager.root, TrainingCheckpointNames().iterator)
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
        assert is_orbax_temporary_name(entry.name) or entry.name.endswith(CLAIM_SUFFIX)
        report.problems.append(f"{entry.name}: an unfinished save (still running, or interrupted)")
    return report
