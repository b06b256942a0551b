"""A summary of the running JAX runtime."""

from __future__ import annotations

import dataclasses

__all__ = ["DeviceInfo", "device_info"]


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """What the active JAX backend sees.

    Attributes:
      backend: The default backend's platform name: ``"cpu"``, ``"gpu"``, ``"tpu"``...
      device_count: Devices over all processes.
      local_device_count: Devices attached to this process.
      process_index: This process's index in the runtime.
      process_count: Processes in the runtime.
      device_kinds: ``device_kind`` of every device over all processes, in ``jax.devices()`` order.
    """

    backend: str
    device_count: int
    local_device_count: int
    process_index: int
    process_count: int
    device_kinds: tuple[str, ...]


def device_info() -> DeviceInfo:
    """Summarizes the default JAX backend, importing and starting JAX if needed.

    Afterwards the environment policy functions of :mod:`tinax.device` can no longer run.

    Returns:
      A :class:`DeviceInfo` for the default backend.

    Examples:
      >>> import jax
      >>> from tinax.device import device_info
      >>> info = device_info()
      >>> info.backend == jax.default_backend(), info.device_count == jax.device_count()
      (True, True)
    """
    import jax

    return DeviceInfo(
        backend=jax.default_backend(),
        device_count=jax.device_count(),
        local_device_count=jax.local_device_count(),
        process_index=jax.process_index(),
        process_count=jax.process_count(),
        device_kinds=tuple(device.device_kind for device in jax.devices()),
    )
