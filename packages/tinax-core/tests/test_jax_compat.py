"""The JAX compatibility layer still reaches what it needs in the installed JAX.

Each name in ``tinax._core.jax_compat`` stands in for a private JAX API or an
API that differs between releases. These tests fail loudly, with the name of
what moved, when a JAX release changes one of them, instead of letting the
rest of the suite fail in a roundabout way.
"""

from __future__ import annotations

import inspect
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

from tinax._core import jax_compat


def test_backends_are_initialized_turns_true_once_a_backend_starts() -> None:
    probe = (
        "from tinax._core.jax_compat import backends_are_initialized\n"
        "before = backends_are_initialized()\n"
        "import jax\n"
        "jax.devices()\n"
        "print(before, backends_are_initialized())\n"
    )
    completed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert completed.stdout.split() == ["False", "True"]


def test_tracing_in_progress_is_true_only_inside_a_trace() -> None:
    seen: list[bool] = []

    def traced(x: jax.Array) -> jax.Array:
        seen.append(jax_compat.tracing_in_progress())
        return x + 1

    assert not jax_compat.tracing_in_progress()
    jax.jit(traced)(jnp.zeros(2))
    assert seen == [True]


def test_ambient_concrete_mesh_answers_outside_and_inside_a_trace() -> None:
    mesh = Mesh(np.array(jax.devices()[:2]), ("data",))
    seen: list[Mesh | None] = []

    def traced(x: jax.Array) -> jax.Array:
        seen.append(jax_compat.ambient_concrete_mesh())
        return x * 2

    assert jax_compat.ambient_concrete_mesh() is None
    with jax.set_mesh(mesh):
        assert jax_compat.ambient_concrete_mesh() == mesh
        jax.jit(traced)(jnp.zeros(2))
    assert seen == [mesh]


def test_is_tracer_tells_traced_values_from_concrete_ones() -> None:
    seen: list[bool] = []

    def traced(x: jax.Array) -> jax.Array:
        seen.append(jax_compat.is_tracer(x))
        return x

    jax.jit(traced)(jnp.zeros(2))
    assert seen == [True]
    assert not jax_compat.is_tracer(jnp.zeros(2))
    assert not jax_compat.is_tracer(np.zeros(2))


def test_require_concrete_raises_jaxs_concretization_error_as_a_type_error() -> None:
    raised: list[BaseException] = []

    def traced(x: jax.Array) -> jax.Array:
        try:
            jax_compat.require_concrete(x, "array", "a concrete array")
        except BaseException as error:
            raised.append(error)
        return x

    jax.jit(traced)(jnp.zeros(2))
    (error,) = raised
    assert isinstance(error, jax.errors.ConcretizationTypeError)
    assert isinstance(error, TypeError)
    assert "array" in str(error)
    jax_compat.require_concrete(jnp.zeros(2), "array", "a concrete array")


def test_runtime_value_error_is_both_value_error_and_jax_runtime_error() -> None:
    error = jax_compat.RuntimeValueError("array must be alive, got a deleted array")
    assert isinstance(error, ValueError)
    assert isinstance(error, jax.errors.JaxRuntimeError)
    assert str(error) == "array must be alive, got a deleted array"
    with pytest.raises(jax.errors.JaxRuntimeError, match="deleted"):
        raise error


def test_jax_distributed_initialize_still_accepts_every_timeout_tinax_passes() -> None:
    # initialize_distributed leaves out what this JAX does not accept; a
    # release that drops one would silently fall back to JAX's default, so
    # the supported range is pinned down here.
    accepted = inspect.signature(jax.distributed.initialize).parameters
    for name in (
        "initialization_timeout",
        "heartbeat_timeout_seconds",
        "shutdown_timeout_seconds",
        "coordinator_bind_address",
    ):
        assert name in accepted, f"jax.distributed.initialize no longer accepts {name!r}"
