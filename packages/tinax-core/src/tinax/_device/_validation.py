"""Checks shared by the device helpers: the pre-JAX guard and device indices (imports no JAX)."""

from __future__ import annotations

import sys

from tinax._core import validation

__all__ = ["require_jax_unimported", "validate_device_index"]


def require_jax_unimported(operation: str) -> None:
    """Raises RuntimeError once ``jax`` is imported: runtimes read these variables once and ignore later changes."""
    if sys.modules.get("jax") is not None:
        raise RuntimeError(
            f"{operation} must run before importing JAX: jax is already imported, so the "
            "runtime may already have read the environment it sets; call it at the start of "
            "the program, before anything imports jax"
        )


def validate_device_index(value: object, name: str) -> int:
    """Checks one accelerator index: an int (never bool) of at least 0."""
    return validation.require_non_negative_int(value, name)
