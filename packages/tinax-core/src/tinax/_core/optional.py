"""Deferred imports of optional integrations, shared by the tinax distributions.

Importing a tinax module must not import flax, array-record, grain or any
other heavy integration. Functions that need one call :func:`import_optional`
when they run, so a missing package surfaces as an ImportError that names the
function that needed it and the install command that provides it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["import_optional"]


def import_optional(module: str, *, needed_by: str, install_hint: str) -> ModuleType:
    """Imports ``module`` on first use, naming the install command when it is missing.

    Args:
      module: Dotted name of the module to import, for example ``"flax.nnx"``.
      needed_by: Public name of the caller, for example
        ``"tinax.data.read_array_record"``; it leads the error message.
      install_hint: Command that installs the missing package, for example
        ``'pip install "tinax-data[arrayrecord]"'``.

    Returns:
      The imported module.

    Raises:
      ImportError: If ``module`` (or a package it needs) cannot be imported.
        The original error is chained as the cause.
    """
    try:
        return importlib.import_module(module)
    except ImportError as error:
        top_level = module.partition(".")[0]
        raise ImportError(
            f"{needed_by} needs {top_level}, which could not be imported ({error}); install it with: {install_hint}"
        ) from error
