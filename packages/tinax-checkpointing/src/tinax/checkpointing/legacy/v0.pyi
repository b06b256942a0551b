# Type information for `tinax.checkpointing.legacy.v0` (see ../__init__.pyi).

from tinax._checkpointing._legacy_v0._iterator import load_legacy_v0_grain_iterator as load_legacy_v0_grain_iterator
from tinax._checkpointing._legacy_v0._iterator import save_legacy_v0_grain_iterator as save_legacy_v0_grain_iterator
from tinax._checkpointing._legacy_v0._pytree import load_legacy_v0_pytree as load_legacy_v0_pytree
from tinax._checkpointing._legacy_v0._pytree import save_legacy_v0_pytree as save_legacy_v0_pytree

__all__ = [
    "load_legacy_v0_grain_iterator",
    "load_legacy_v0_pytree",
    "save_legacy_v0_grain_iterator",
    "save_legacy_v0_pytree",
]

__version__: str
