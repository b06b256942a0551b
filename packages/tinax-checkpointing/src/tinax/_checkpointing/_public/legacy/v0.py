"""Legacy only: Orbax V0 pytree and grain iterator checkpoints, for older pipelines.

Do not use this module for new checkpoints; write those with
``tinax.checkpointing`` (Orbax V1, one atomic checkpoint per step). These
functions exist so that checkpoints written by pipelines built on Orbax's V0
API (``StandardCheckpointer``, ``PyTreeCheckpointer``, ``CheckpointManager``
items and grain's ``CheckpointHandler``) can still be read, and so that such
pipelines can keep writing them while they are migrated.

The tinax rules still apply: every save is complete when it returns, an
existing destination is never replaced, a missing checkpoint raises
``FileNotFoundError``, and Orbax or grain failures surface as ``TypeError``
or ``ValueError`` that name the argument. Orbax and grain are imported only
when a function runs.
"""

import tinax.checkpointing as _parent
from tinax._checkpointing._legacy_v0._iterator import load_legacy_v0_grain_iterator, save_legacy_v0_grain_iterator
from tinax._checkpointing._legacy_v0._pytree import load_legacy_v0_pytree, save_legacy_v0_pytree

__all__ = [
    "load_legacy_v0_grain_iterator",
    "load_legacy_v0_pytree",
    "save_legacy_v0_grain_iterator",
    "save_legacy_v0_pytree",
]

#: The version of the installed tinax-checkpointing distribution, which ships this module (the parent module's; see
#: ``tinax.checkpointing.legacy``).
__version__: str = _parent.__version__
