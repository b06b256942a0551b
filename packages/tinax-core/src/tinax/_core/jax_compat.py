"""The one place where tinax touches JAX APIs that move between versions.

tinax supports JAX from 0.10.2 (what Python 3.11 resolves) to the newest
release below the upper bound in ``tinax-core``'s requirements. When an API
differs between those versions, the difference is handled here and nowhere
else, so the rest of the code base can import a stable name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax
from jax._src import core as _jax_core  # Private, but stable across 0.10-0.12.
from jax.sharding import AxisType, Mesh

__all__ = [
    "JAX_VERSION",
    "Tracer",
    "backends_are_initialized",
    "is_tracer",
    "mesh_axis_types",
    "mesh_scope",
    "tracing_in_progress",
    "using_mesh",
]

JAX_VERSION: tuple[int, ...] = tuple(int(part) for part in jax.__version__.split(".")[:3] if part.isdigit())

# ``jax.core.Tracer`` is the documented way to recognise a traced value in every
# supported release.
Tracer = jax.core.Tracer


def is_tracer(value: object) -> bool:
    """Returns whether ``value`` is an abstract value being traced."""
    return isinstance(value, Tracer)


def backends_are_initialized() -> bool:
    """Returns whether any JAX backend (CPU, GPU, TPU) has been started."""
    from jax._src import xla_bridge  # Private, but stable across 0.10-0.12.

    return bool(xla_bridge.backends_are_initialized())


def tracing_in_progress() -> bool:
    """Returns whether the caller runs inside a JAX trace or transformation.

    ``jax.set_mesh`` can only be entered when this is False.
    """
    return not _jax_core.trace_state_clean()


def mesh_axis_types(mesh: Mesh) -> tuple[AxisType, ...]:
    """Returns one ``AxisType`` per mesh axis."""
    return tuple(mesh.axis_types)


def mesh_scope(mesh: Mesh) -> contextlib.AbstractContextManager[Any]:
    """Returns a context manager that makes ``mesh`` the ambient mesh.

    The same as ``using_mesh(mesh)`` for a mesh, minus the generator-based
    context manager around ``jax.set_mesh``, for per-call use on hot paths.
    Use the result directly in a ``with`` statement: ``jax.set_mesh`` already
    switches the mesh when it is called, not when the block is entered.
    """
    scope: contextlib.AbstractContextManager[Any] = jax.set_mesh(mesh)
    return scope


@contextlib.contextmanager
def using_mesh(mesh: Mesh | None) -> Iterator[Any]:
    """Makes ``mesh`` the ambient mesh for the duration of the block.

    With ``None`` the block runs under whatever mesh is already set.
    """
    if mesh is None:
        yield None
        return
    with jax.set_mesh(mesh) as entered:
        yield entered
