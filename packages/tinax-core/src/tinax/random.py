"""Deterministic key derivation with explicit coordinates and key ownership.

JAX keys are plain values. These helpers derive keys from named coordinates
(always folded in the same order) and split a key into the key that carries on
and the keys that operations consume. Coordinates are limited to what
``jax.random.fold_in`` takes without wrapping or truncating, so two different
coordinates never silently give the same key.
"""

from tinax._core._command._versions import distribution_version as _distribution_version
from tinax._random._derive import derive_key as derive_key
from tinax._random._derive import derive_process_step_key as derive_process_step_key
from tinax._random._derive import split_key as split_key

__all__ = [
    "derive_key",
    "derive_process_step_key",
    "split_key",
]

#: The version of the installed tinax-core distribution, which ships this module.
__version__: str = _distribution_version("tinax-core", __file__)
