"""Profiling one call with every result and effect inside the trace."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import jax

from tinax._core import validation

__all__ = ["profile_call"]

P = ParamSpec("P")
R = TypeVar("R")


def profile_call(
    log_dir: str | os.PathLike[str],
    function: Callable[P, R],
    /,
    *args: P.args,
    **kwargs: P.kwargs,
) -> R:
    """Runs ``function(*args, **kwargs)`` under a JAX profiler trace.

    JAX dispatches asynchronously, so the trace stays open until every result array is ready
    (``jax.block_until_ready``) and every staged effect, such as a ``jax.debug.callback``, has
    run (``jax.effects_barrier``). If ``function`` raises, the trace is closed and the exception
    propagates. One trace at a time per process.

    Args:
      log_dir: Folder for the trace (TensorBoard / XProf layout, ``plugins/profile/``); created if missing.
      function: The callable to profile.
      *args: Positional arguments for ``function``.
      **kwargs: Keyword arguments for ``function`` (``log_dir`` and ``function`` included).

    Returns:
      What ``function`` returned, with its arrays ready.

    Raises:
      TypeError: If ``function`` is not callable or ``log_dir`` not a ``str`` or ``os.PathLike[str]``.
      ValueError: If ``log_dir`` is empty.
      RuntimeError: If a profiler trace is already running.

    Examples:
      >>> import pathlib
      >>> import jax.numpy as jnp
      >>> from tinax.debug import profile_call
      >>> total = profile_call("profiles/sum", jnp.sum, jnp.arange(4))
      >>> int(total), pathlib.Path("profiles/sum/plugins/profile").is_dir()
      (6, True)
    """
    validation.require_callable(function, "function")
    folder = validation.require_path(log_dir, "log_dir")
    with jax.profiler.trace(os.fspath(folder)):
        result = function(*args, **kwargs)
        jax.block_until_ready(result)  # type: ignore[no-untyped-call]
        jax.effects_barrier()  # type: ignore[no-untyped-call]
    return result
