"""The one place where tinax touches JAX APIs that are private or move between versions.

Supported JAX: 0.10.2 up to ``tinax-core``'s upper bound. Everything here reaches into ``jax._src``,
builds JAX's exception types, or adapts to changing signatures; ``tests/test_jax_compat.py``
fails loudly when an installed JAX moves one of them.
"""

from __future__ import annotations

import inspect
from typing import Any

import jax
from jax._src import core as _jax_core  # Private, but stable across 0.10-0.12.
from jax.sharding import Mesh

from tinax._core.validation import TypeAndValueError, expectation_message

__all__ = [
    "RuntimeTypeAndValueError",
    "RuntimeValueError",
    "ambient_concrete_mesh",
    "backends_are_initialized",
    "initialize_distributed",
    "is_tracer",
    "require_concrete",
    "tracing_in_progress",
]


def is_tracer(value: object) -> bool:
    """Whether ``value`` is a tracer; ``jax.core`` keeps shrinking, so ``Tracer`` is read only here."""
    return isinstance(value, jax.core.Tracer)


def require_concrete(value: object, name: str, expected: str) -> None:
    """Raises ``ConcretizationTypeError`` (a TypeError, JAX's own type, let through by 0.2) for a tracer."""
    if is_tracer(value):
        raise jax.errors.ConcretizationTypeError(value, expectation_message(name, expected, value))  # type: ignore[arg-type]


class RuntimeValueError(ValueError, jax.errors.JaxRuntimeError):  # type: ignore[misc]  # jaxlib ships no stub for it
    """A ValueError that is also ``JaxRuntimeError``, where JAX (and so tinax 0.2) raised the latter."""

    def __init__(self, message: str) -> None:
        # Only JaxRuntimeError's own __init__ sets up its message; without it str() breaks.
        jax.errors.JaxRuntimeError.__init__(self, message)


class RuntimeTypeAndValueError(RuntimeValueError, TypeAndValueError):
    """A :class:`RuntimeValueError` where tinax 0.2 raised TypeError, so it is a TypeError too.

    Raised for a deleted ``jax.Array`` given to ``from_dlpack`` (the TypeError its ``__dlpack_device__``
    raises) and for a too-large size 0.2 refused as a type: a NumPy-integer size, or an extent beyond int64.
    """


def backends_are_initialized() -> bool:
    """Whether any JAX backend (CPU, GPU, TPU) has been started."""
    from jax._src import xla_bridge  # Private, but stable across 0.10-0.12.

    return bool(xla_bridge.backends_are_initialized())


def tracing_in_progress() -> bool:
    """Whether the caller runs inside a JAX trace; ``jax.set_mesh`` can be entered only outside one."""
    return not _jax_core.trace_state_clean()


def ambient_concrete_mesh() -> Mesh | None:
    """The concrete mesh entered with ``jax.set_mesh``, or None; unlike ``get_mesh``, also inside a trace."""
    from jax._src import mesh as _jax_mesh  # Private, but stable across 0.10-0.12.

    mesh = _jax_mesh.get_concrete_mesh()
    if not isinstance(mesh, Mesh) or mesh.empty:
        return None
    return mesh


def initialize_distributed(
    coordinator_address: str,
    num_processes: int,
    process_id: int,
    *,
    initialization_timeout: int,
    heartbeat_timeout: int,
    shutdown_timeout: int,
    coordinator_bind_address: str | None = None,
) -> None:
    """``jax.distributed.initialize`` with the timeouts this JAX accepts (all do from 0.10.2 to 0.12).

    A release dropping one gets JAX's default, so callers must bound the whole run with their own timeout.
    """
    optional: dict[str, Any] = {
        "initialization_timeout": initialization_timeout,
        "heartbeat_timeout_seconds": heartbeat_timeout,
        "shutdown_timeout_seconds": shutdown_timeout,
    }
    if coordinator_bind_address is not None:
        optional["coordinator_bind_address"] = coordinator_bind_address
    accepted = inspect.signature(jax.distributed.initialize).parameters
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        **{name: value for name, value in optional.items() if name in accepted},
    )
