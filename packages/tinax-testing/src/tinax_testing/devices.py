"""Starts JAX on a fixed number of CPU devices for a test session.

Every tinax suite runs on the same simulated CPU devices, so that sharding
and mesh tests mean the same thing on any machine.
"""

from __future__ import annotations

import os

__all__ = ["TEST_DEVICE_COUNT", "force_cpu_devices"]

#: Devices that every tinax test session runs on.
TEST_DEVICE_COUNT = 8


def force_cpu_devices(count: int = TEST_DEVICE_COUNT) -> None:
    """Makes JAX start with ``count`` CPU devices, or fails loudly.

    Must run before any JAX backend starts, which is why conftest files call
    it at import time.

    Raises:
      RuntimeError: If a backend already started with another device count.
    """
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["JAX_NUM_CPU_DEVICES"] = str(count)
    import jax

    from tinax._core.jax_compat import backends_are_initialized

    if backends_are_initialized():
        actual = jax.device_count()
        if actual != count:
            raise RuntimeError(
                f"the tests need {count} CPU devices but JAX already started with {actual}; "
                "something initialised JAX before conftest.py ran"
            )
        return
    jax.config.update("jax_num_cpu_devices", count)  # type: ignore[no-untyped-call]
    actual = jax.device_count()
    if actual != count:
        raise RuntimeError(f"asked JAX for {count} CPU devices, got {actual}")
