"""Deferred imports of optional integrations (flax, array-record, grain...), shared by the distributions."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["import_optional"]


def import_optional(module: str, *, needed_by: str, install_hint: str) -> ModuleType:
    """Imports ``module`` on use; ImportError naming ``needed_by`` and ``install_hint`` (cause chained) if missing."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        top_level = module.partition(".")[0]
        raise ImportError(
            f"{needed_by} needs {top_level}, which could not be imported ({error}); install it with: {install_hint}"
        ) from error
