"""Drawing how an array is laid out over its devices."""

from __future__ import annotations

import jax

from tinax._core import validation
from tinax._core.optional import import_optional

__all__ = ["visualize_array_sharding"]


def visualize_array_sharding(array: jax.Array) -> None:
    """Prints a table of which device holds which block of ``array``.

    Delegates to ``jax.debug.visualize_array_sharding`` (drawn with ``rich``, the ``debug`` extra);
    inside ``jax.jit`` it prints at compile time. JAX draws 1-D and 2-D arrays only.

    Args:
      array: A ``jax.Array``, concrete or traced.

    Raises:
      TypeError: If ``array`` is not a ``jax.Array`` (NumPy arrays included).
      ImportError: If ``rich`` is not installed.
      ValueError: If JAX cannot draw the array (more than two dimensions, say).

    Examples:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> from jax.sharding import NamedSharding, PartitionSpec
      >>> from tinax.debug import visualize_array_sharding
      >>> mesh = jax.make_mesh((jax.device_count(),), ("data",))
      >>> rows = jax.device_put(jnp.zeros(16), NamedSharding(mesh, PartitionSpec("data")))
      >>> visualize_array_sharding(rows)  # one block per device, here the 8 CPU devices of the tests
      ┌───...┐
      │ CPU 0 │ CPU 1 │ ... │ CPU 7 │
      └───...┘
    """
    validation.require_instance(array, "array", jax.Array, "a jax.Array")
    import_optional(
        "rich", needed_by="tinax.debug.visualize_array_sharding", install_hint='pip install "tinax-core[debug]"'
    )
    jax.debug.visualize_array_sharding(array)  # type: ignore[no-untyped-call]
