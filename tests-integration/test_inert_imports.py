"""Importing any public tinax module, from any member, has no side effects.

The module list is derived from the members' src/ folders, so a new
distribution is covered as soon as its folder exists.
"""

from __future__ import annotations

import pathlib

import pytest

from tinax_testing import import_side_effects

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Single-file public modules, plus the one public submodule tree.
PUBLIC_MODULES = [
    *sorted(f"tinax.{module.stem}" for module in ROOT.glob("packages/*/src/tinax/*.py") if module.name[0] != "_"),
    "tinax.checkpointing.legacy",
    "tinax.checkpointing.legacy.v0",
]


def test_modules_were_found():
    assert {"tinax.array", "tinax.jit", "tinax.grad", "tinax.random", "tinax.device", "tinax.nn"} <= set(PUBLIC_MODULES)


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_import_starts_no_backend_and_no_integration(module):
    assert import_side_effects(module) == {"backends_initialized": False, "integrations": []}
