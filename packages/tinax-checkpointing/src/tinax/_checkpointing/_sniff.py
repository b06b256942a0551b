"""How ``tinax inspect`` tells checkpoints (see tinax-core's ``_command._registry``): the standard library only."""

from __future__ import annotations

import os

from tinax._checkpointing._locations import is_remote
from tinax._checkpointing._metadata._layout import _ORBAX_INDICATOR, CHECKPOINT_METADATA
from tinax._checkpointing._names import is_orbax_temporary_name
from tinax._core._command._registry import Inspector, Probe

__all__ = ["CHECKPOINT", "CHECKPOINT_ROOT"]


def _checkpoint(probe: Probe) -> bool:
    """A folder holding Orbax's marker files, or named as Orbax names a save in progress."""
    path = probe.path
    markers = (CHECKPOINT_METADATA, _ORBAX_INDICATOR)
    return probe.is_folder and (is_orbax_temporary_name(path.name) or any((path / name).is_file() for name in markers))


def _root(probe: Probe) -> bool:
    """A folder holding step-named (digits) or temporary folders."""
    try:
        if not probe.is_folder:
            names = []
        elif is_remote(probe.path):
            names = [entry.name for entry in probe.path.iterdir()]
        else:
            names = os.listdir(probe.path)
    except OSError:
        return False
    return any((name.isascii() and name.isdigit()) or is_orbax_temporary_name(name) for name in names)


CHECKPOINT = Inspector("Orbax checkpoint folder", _checkpoint, "tinax._checkpointing._inspect:inspect_checkpoint")
# A checkpoint folder may hold step-named entries too.
CHECKPOINT_ROOT = Inspector(
    "root of step checkpoint folders", _root, "tinax._checkpointing._inspect:inspect_checkpoint_root", order=1
)
