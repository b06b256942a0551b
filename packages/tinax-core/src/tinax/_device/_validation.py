"""Checks shared by the device helpers: the pre-JAX guard and device indices.

This module imports neither JAX nor anything that does: the environment
policy functions call these checks precisely so that JAX has not started yet.
"""

from __future__ import annotations

import sys

from tinax._core import validation

__all__ = ["require_jax_unimported", "validate_device_index"]


def require_jax_unimported(operation: str) -> None:
    """Refuses to go on once ``jax`` has been imported in this interpreter.

    JAX and the accelerator runtimes read variables such as
    ``CUDA_VISIBLE_DEVICES`` or ``TPU_VISIBLE_CHIPS`` once, early, and later
    changes are silently ignored. Failing loudly is the only way to make an
    environment policy either take effect or visibly not.

    Args:
      operation: How the caller is named in the message, for example
        ``"set_visible_cuda()"``.

    Raises:
      RuntimeError: If ``jax`` is already in ``sys.modules``.
    """
    if sys.modules.get("jax") is not None:
        raise RuntimeError(
            f"{operation} must run before importing JAX: jax is already imported, so the "
            "runtime may already have read the environment it sets; call it at the start of "
            "the program, before anything imports jax"
        )


def validate_device_index(value: object, name: str) -> int:
    """Checks one accelerator index: an integer (never a bool) that is at least 0.

    Args:
      value: The received index.
      name: The argument name for the message, for example ``"chip"`` or
        ``"indices[2]"``.

    Returns:
      The index as a Python ``int``.

    Raises:
      TypeError: If the value is a bool or not an integer.
      ValueError: If the value is negative.
    """
    return validation.require_non_negative_int(value, name)
