"""Complete, atomic Orbax V1 checkpoints with explicit restore targets.

A checkpoint is a folder of named checkpointables. Saving is asynchronous,
refuses existing destinations and concurrent saves to one destination, and
never loses a background failure. Loading needs an explicit restore target per
name and checks that the folder is a complete checkpoint first. Orbax and
Grain are imported only when a function runs.

Training checkpoints put the step, model, optimizer, random state, auxiliary
state and data iterator of a run into one such checkpoint, so a run resumes
exactly where it stopped. Checkpoints of Orbax's older V0 API are read and
written by ``tinax.checkpointing.legacy.v0`` only, never from here.
"""

from tinax.checkpointing._checkpointables import load_checkpointables, save_checkpointables
from tinax.checkpointing._names import validate_checkpointable_name
from tinax.checkpointing._targets import abstract_restore_target
from tinax.checkpointing._training import (
    TrainingCheckpoint,
    TrainingCheckpointNames,
    load_training_checkpoint,
    save_training_checkpoint,
)

__all__ = [
    "TrainingCheckpoint",
    "TrainingCheckpointNames",
    "abstract_restore_target",
    "load_checkpointables",
    "load_training_checkpoint",
    "save_checkpointables",
    "save_training_checkpoint",
    "validate_checkpointable_name",
]
