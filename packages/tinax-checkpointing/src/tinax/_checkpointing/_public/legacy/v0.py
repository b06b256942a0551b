"""Legacy only: Orbax V0 pytree and grain iterator checkpoints, for older pipelines.

Do not use this module for new checkpoints; write those with ``tinax.checkpointing``
(Orbax V1). These functions read what pipelines on Orbax's V0 API wrote (``StandardCheckpointer``,
``PyTreeCheckpointer``, ``CheckpointManager`` items, grain's ``CheckpointHandler``) and let them
keep writing it while they migrate. The tinax rules still apply: saves are complete on return,
destinations are never replaced, a missing checkpoint raises ``FileNotFoundError``, upstream
failures surface as ``TypeError`` or ``ValueError`` naming the argument, and Orbax and grain are
imported only when a function runs.
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
