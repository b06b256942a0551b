"""Accelerator detection without starting JAX.

GPU detection asks NVIDIA's management library (``nvidia-ml-py``, the ``gpu``
extra) and TPU detection reads the PCI devices through ``tpu-info`` (the
``tpu`` extra). Both are imported only when a detection function runs, and
neither imports JAX, so detection can decide an environment policy before
JAX starts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tinax._core.optional import import_optional

__all__ = ["GpuInfo", "TpuInfo", "gpus", "tpus"]

# NVML's codes for "no NVIDIA driver on this host": the library or the kernel
# module is missing, which means there is no NVIDIA GPU to report.
_NVML_ERROR_DRIVER_NOT_LOADED = 9
_NVML_ERROR_LIBRARY_NOT_FOUND = 12


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    """One NVIDIA GPU as NVML reports it.

    Attributes:
      index: NVML's device index (PCI bus order), which matches CUDA's
        numbering only under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
      name: The product name, for example ``"NVIDIA H100 80GB HBM3"``.
      total_bytes: Device memory in bytes.
      free_bytes: Device memory not allocated at the time of the query.
      compute_capability: ``"major.minor"``, for example ``"9.0"``, so that
        ``float(compute_capability)`` compares generations.
    """

    index: int
    name: str
    total_bytes: float
    free_bytes: float
    compute_capability: str


@dataclasses.dataclass(frozen=True)
class TpuInfo:
    """The TPU chips attached to this host: their generation and how many.

    Attributes:
      generation: The lowercase chip name that ``tpu-info`` uses, for
        example ``"v5e"``, ``"v6e"`` or ``"7x"``.
      count: Chips of that generation on this host.
      devices_per_chip: JAX devices (TensorCores exposed as devices) per chip.
      hbm_gib: High-bandwidth memory per chip, in GiB.
    """

    generation: str
    count: int
    devices_per_chip: int
    hbm_gib: int


def gpus() -> list[GpuInfo]:
    """Lists the NVIDIA GPUs on this host, in NVML index order.

    NVML sees every GPU of the host: ``CUDA_VISIBLE_DEVICES`` does not filter
    the list.

    Returns:
      One :class:`GpuInfo` per GPU; an empty list when the host has no NVIDIA
      driver (NVML's library or kernel module is missing) or no GPU.

    Raises:
      ImportError: If ``nvidia-ml-py`` is not installed (the ``gpu`` extra).
      pynvml.NVMLError: If the driver is present but a query fails.

    Examples:
      >>> from tinax.device import GpuInfo, gpus
      >>> all(isinstance(gpu, GpuInfo) for gpu in gpus())  # an empty list without an NVIDIA driver
      True
    """
    nvml: Any = import_optional("pynvml", needed_by="tinax.device.gpus", install_hint='pip install "tinax-core[gpu]"')
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:
        if getattr(error, "value", None) in {_NVML_ERROR_DRIVER_NOT_LOADED, _NVML_ERROR_LIBRARY_NOT_FOUND}:
            return []
        raise
    try:
        found = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(handle)
            if isinstance(name, bytes):  # Older bindings return the raw C string.
                name = name.decode("utf-8", errors="replace")
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            found.append(
                GpuInfo(
                    index=index,
                    name=str(name),
                    total_bytes=float(memory.total),
                    free_bytes=float(memory.free),
                    compute_capability=f"{int(major)}.{int(minor)}",
                )
            )
        return found
    finally:
        nvml.nvmlShutdown()


def tpus() -> list[TpuInfo]:
    """Lists the TPU chips attached to this host, read from its PCI devices.

    Returns:
      An empty list on a host without TPU chips, otherwise one
      :class:`TpuInfo` for the host's chip generation.

    Raises:
      ImportError: If ``tpu-info`` is not installed (the ``tpu`` extra).

    Examples:
      >>> from tinax.device import TpuInfo, tpus
      >>> all(isinstance(chip, TpuInfo) for chip in tpus())  # an empty list without TPU chips
      True
    """
    tpu_device: Any = import_optional(
        "tpu_info.device", needed_by="tinax.device.tpus", install_hint='pip install "tinax-core[tpu]"'
    )
    chip_type, count = tpu_device.get_local_chips()
    if chip_type is None or not count:
        return []
    specs = chip_type.value
    return [
        TpuInfo(
            generation=str(specs.name),
            count=int(count),
            devices_per_chip=int(specs.devices_per_chip),
            hbm_gib=int(specs.hbm_gib),
        )
    ]
