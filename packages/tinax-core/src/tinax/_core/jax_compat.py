"""The one place where tinax touches JAX APIs that are private or move between versions.

tinax supports JAX from 0.10.2 (what Python 3.11 resolves) to the newest
release below the upper bound in ``tinax-core``'s requirements. Everything here
either reaches into ``jax._src`` (no public API answers the question), builds
JAX's own exception types (their constructors are not a stable API), or adapts
to signatures that differ between those releases. The rest of the code base
imports these stable names instead; ``tests/test_jax_compat.py`` fails loudly
when an installed JAX moves one of them.
"""

from __future__ import annotations

import inspect
from typing import Any

import jax
from jax._src import core as _jax_core  # Private, but stable across 0.10-0.12.
from jax.sharding import Mesh

from tinax._core.validation import expectation_message

__all__ = [
    "RuntimeValueError",
    "ambient_concrete_mesh",
    "backends_are_initialized",
    "initialize_distributed",
    "is_tracer",
    "require_concrete",
    "tracing_in_progress",
]


def is_tracer(value: object) -> bool:
    """Returns whether ``value`` is an abstract value being traced.

    ``jax.core`` has been shrinking release by release; ``Tracer`` is read from
    it in this one place.
    """
    return isinstance(value, jax.core.Tracer)


def require_concrete(value: object, name: str, expected: str) -> None:
    """Refuses a traced value where a concrete array is needed.

    Raises:
      jax.errors.ConcretizationTypeError: If ``value`` is a tracer. It is a
        ``TypeError``, as the tinax error contract asks, and the type JAX
        itself raises when a traced value is used as a concrete one (and
        that tinax 0.2 let through).
    """
    if is_tracer(value):
        raise jax.errors.ConcretizationTypeError(value, expectation_message(name, expected, value))  # type: ignore[arg-type]


class RuntimeValueError(ValueError, jax.errors.JaxRuntimeError):  # type: ignore[misc]  # jaxlib ships no stub for it
    """A bad value that JAX itself reports as ``jax.errors.JaxRuntimeError``.

    tinax raises ValueError for a bad value (a deleted array, a tensor JAX
    cannot import). Where JAX would raise ``JaxRuntimeError`` for the same
    input, and tinax 0.2 let that through, this error is both, so code that
    catches either keeps working.
    """

    def __init__(self, message: str) -> None:
        # JaxRuntimeError keeps its message in state that only its own
        # __init__ sets up; ValueError's alone would leave str() broken.
        jax.errors.JaxRuntimeError.__init__(self, message)


def backends_are_initialized() -> bool:
    """Returns whether any JAX backend (CPU, GPU, TPU) has been started."""
    from jax._src import xla_bridge  # Private, but stable across 0.10-0.12.

    return bool(xla_bridge.backends_are_initialized())


def tracing_in_progress() -> bool:
    """Returns whether the caller runs inside a JAX trace or transformation.

    ``jax.set_mesh`` can only be entered when this is False.
    """
    return not _jax_core.trace_state_clean()


def ambient_concrete_mesh() -> Mesh | None:
    """Returns the concrete mesh entered with ``jax.set_mesh``, or None.

    Unlike ``jax.sharding.get_mesh``, this also answers inside a trace, where
    only the abstract mesh is public; the devices are what it adds.
    """
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
    """Calls ``jax.distributed.initialize`` with the timeouts this JAX accepts.

    JAX 0.10.2 to 0.12 all accept ``initialization_timeout``,
    ``heartbeat_timeout_seconds``, ``shutdown_timeout_seconds`` and
    ``coordinator_bind_address``. A release that drops one of them still
    works: that argument is left out and JAX's default applies, so callers
    must bound the whole run with their own timeout as well.

    Args:
      coordinator_address: ``"host:port"`` of process 0's coordinator.
      num_processes: Number of processes in the runtime.
      process_id: This process's index, in ``[0, num_processes)``.
      initialization_timeout: Seconds to wait for every peer to connect.
      heartbeat_timeout: Seconds without a heartbeat after which a peer
        counts as dead.
      shutdown_timeout: Seconds that a finishing process waits for the
        others at shutdown.
      coordinator_bind_address: Where process 0's coordinator listens; None
        keeps JAX's default.
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
