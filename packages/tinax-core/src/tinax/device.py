"""Pre-JAX environment policy, a runtime summary and accelerator detection.

The environment functions (:func:`set_visible_cuda`,
:func:`configure_single_chip`, :func:`configure_jax`) write variables that
the JAX runtime reads when it starts, so they must run before ``jax`` is
imported and refuse afterwards. Importing this module never imports JAX.
Detection (:func:`gpus`, :func:`tpus`) needs the ``gpu`` or ``tpu`` extra and
does not start JAX either. Choosing hardware and reacting to memory pressure
stay with the application.
"""

import sys as _sys

from tinax._core._command._versions import distribution_version as _distribution_version
from tinax._device import _validation
from tinax._device._detect import GpuInfo as GpuInfo
from tinax._device._detect import TpuInfo as TpuInfo
from tinax._device._detect import gpus as gpus
from tinax._device._detect import tpus as tpus
from tinax._device._env import configure_jax as configure_jax
from tinax._device._env import configure_single_chip as configure_single_chip
from tinax._device._env import set_visible_cuda as set_visible_cuda
from tinax._device._info import DeviceInfo as DeviceInfo
from tinax._device._info import device_info as device_info

# tinax 0.2's own tests import its two device-index checks from
# ``tinax.device._validation``; that path keeps naming the same module object.
_sys.modules.setdefault(f"{__name__}._validation", _validation)

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

#: The version of the installed tinax-core distribution, which ships this module.
__version__: str = _distribution_version("tinax-core", __file__)
