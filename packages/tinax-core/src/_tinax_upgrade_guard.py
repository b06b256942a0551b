"""Makes a half-upgraded tinax environment fail loudly at import.

tinax 0.2's package folders shadow the 0.3 members' modules when both are installed. A ``.pth``
file calls :func:`install` at interpreter start (one ``stat``); only if 0.2's marker is present
does a finder refuse every ``tinax`` import, naming the repairs. It never imports tinax, JAX or
anything else. See docs/guide/command-line.md, "A mixed tinax 0.2 and 0.3 install".
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ["MixedInstallError", "install", "leftover_marker"]

_MEMBERS = "tinax-core tinax-parallel tinax-data tinax-checkpointing tinax-weights"


class MixedInstallError(ImportError):
    """Raised for every ``tinax`` import while tinax 0.2 and 0.3 are both installed."""


def leftover_marker() -> str:
    """Returns the path of the file that only the single-distribution tinax 0.2 installs."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "tinax", "__init__.py")


def _message(module: str) -> str:
    return (
        f"cannot import {module!r}: this environment mixes the single-distribution tinax 0.2 "
        f"(it installed {leftover_marker()}) with the split tinax 0.3 distributions ({_MEMBERS}), "
        "so Python would run some modules of each. Repair it with one of:\n"
        "  python -m pip install -U tinax        (move everything to 0.3)\n"
        f"  python -m pip uninstall -y {_MEMBERS}   (keep 0.2 only)"
    )


class _MixedInstallFinder:
    """A meta path finder that refuses the ``tinax`` namespace in a mixed environment."""

    @classmethod
    def find_spec(
        cls, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        in_namespace = fullname == "tinax" or fullname.startswith("tinax.")
        if in_namespace and os.path.exists(leftover_marker()):
            raise MixedInstallError(_message(fullname), name=fullname)
        return None


def install() -> None:
    """Puts the refusing finder first on ``sys.meta_path`` if tinax 0.2's files are present."""
    if os.path.exists(leftover_marker()) and _MixedInstallFinder not in sys.meta_path:
        sys.meta_path.insert(0, _MixedInstallFinder)
