"""Pre-JAX environment policy, a runtime summary and accelerator detection.

The environment functions (:func:`set_visible_cuda`,
:func:`configure_single_chip`, :func:`configure_jax`) write variables that
the JAX runtime reads when it starts, so they must run before ``jax`` is
imported and refuse afterwards. Importing this module never imports JAX.
Detection (:func:`gpus`, :func:`tpus`) needs the ``gpu`` or ``tpu`` extra and
does not start JAX either. Choosing hardware and reacting to memory pressure
stay with the application.
"""

from tinax.device._detect import GpuInfo as GpuInfo
from tinax.device._detect import TpuInfo as TpuInfo
from tinax.device._detect import gpus as gpus
from tinax.device._detect import tpus as tpus
from tinax.device._env import configure_jax as configure_jax
from tinax.device._env import configure_single_chip as configure_single_chip
from tinax.device._env import set_visible_cuda as set_visible_cuda
from tinax.device._info import DeviceInfo as DeviceInfo
from tinax.device._info import device_info as device_info

__all__ = [
    "configure_jax",
    "configure_single_chip",
    "set_visible_cuda",
    "DeviceInfo",
    "device_info",
    "GpuInfo",
    "TpuInfo",
    "gpus",
    "tpus",
]
