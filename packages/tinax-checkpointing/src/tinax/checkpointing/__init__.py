"""Complete, atomic Orbax V1 checkpoints with explicit restore targets.

A checkpoint is a folder of named checkpointables. Saving is asynchronous,
refuses existing destinations and concurrent saves to one destination, and
never loses a background failure. Loading needs an explicit restore target per
name and checks that the folder is a complete checkpoint first. Orbax and
Grain are imported only when a function runs.
"""

from tinax.checkpointing._checkpointables import load_checkpointables, save_checkpointables
from tinax.checkpointing._names import validate_checkpointable_name
from tinax.checkpointing._targets import abstract_restore_target

__all__ = [
    "abstract_restore_target",
    "load_checkpointables",
    "save_checkpointables",
    "validate_checkpointable_name",
]
