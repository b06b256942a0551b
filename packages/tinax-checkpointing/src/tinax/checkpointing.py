"""Complete, atomic Orbax V1 checkpoints with explicit restore targets.

A checkpoint is a folder of named checkpointables. Saving is asynchronous, refuses existing
destinations and concurrent saves to one destination, and never loses a background failure.
Loading needs an explicit restore target per name and checks first that the folder is complete.
Training checkpoints hold everything a run needs to resume, and ``TrainingCheckpointManager`` runs
a job's save schedule, retention and preemption over a root of per-step checkpoints. Orbax V0
checkpoints are handled by ``tinax.checkpointing.legacy.v0`` only. Orbax and Grain are imported
only when a function runs.
"""

import pathlib as _pathlib

from tinax._checkpointing._loading._load import load_checkpointables
from tinax._checkpointing._loading._targets import abstract_restore_target
from tinax._checkpointing._manager._step_manager import (
    CheckpointScan,
    SaveInFlightError,
    StepDisagreementError,
    TrainingCheckpointManager,
)
from tinax._checkpointing._metadata._abstract import abstract_checkpointables
from tinax._checkpointing._names import validate_checkpointable_name
from tinax._checkpointing._saving._save import save_checkpointables
from tinax._checkpointing._training import (
    TrainingCheckpoint,
    TrainingCheckpointNames,
    load_training_checkpoint,
    save_training_checkpoint,
)
from tinax._core._command._versions import distribution_version as _distribution_version

# tinax 0.2's import path tinax.checkpointing.legacy.v0: a single-file module has no submodules, and pip
# deletes the paths 0.2 installed after an upgrade, so they live under the private package (stubs in
# tinax/checkpointing/ state them for type checkers).
__path__ = [str(_pathlib.Path(__file__).with_name("_checkpointing") / "_public")]

__all__ = [
    "CheckpointScan",
    "SaveInFlightError",
    "StepDisagreementError",
    "TrainingCheckpoint",
    "TrainingCheckpointManager",
    "TrainingCheckpointNames",
    "abstract_checkpointables",
    "abstract_restore_target",
    "load_checkpointables",
    "load_training_checkpoint",
    "save_checkpointables",
    "save_training_checkpoint",
    "validate_checkpointable_name",
]

#: The version of the installed tinax-checkpointing distribution, which ships this module.
__version__: str = _distribution_version("tinax-checkpointing", __file__)
