# Type information for `tinax.checkpointing`, whose code is the single-file
# module `tinax/checkpointing.py`. Static type checkers cannot follow that
# module's `__path__` to its `legacy` submodule, so this stub package states
# the same public names (tests-integration/test_layout.py keeps them equal).
# Python never imports this folder: it holds no `__init__.py`, and a module
# file wins over a folder without one.

from tinax._checkpointing._loading._load import load_checkpointables as load_checkpointables
from tinax._checkpointing._loading._targets import abstract_restore_target as abstract_restore_target
from tinax._checkpointing._manager._step_manager import CheckpointScan as CheckpointScan
from tinax._checkpointing._manager._step_manager import SaveInFlightError as SaveInFlightError
from tinax._checkpointing._manager._step_manager import StepDisagreementError as StepDisagreementError
from tinax._checkpointing._manager._step_manager import TrainingCheckpointManager as TrainingCheckpointManager
from tinax._checkpointing._metadata._abstract import abstract_checkpointables as abstract_checkpointables
from tinax._checkpointing._names import validate_checkpointable_name as validate_checkpointable_name
from tinax._checkpointing._saving._save import save_checkpointables as save_checkpointables
from tinax._checkpointing._training import TrainingCheckpoint as TrainingCheckpoint
from tinax._checkpointing._training import TrainingCheckpointNames as TrainingCheckpointNames
from tinax._checkpointing._training import load_training_checkpoint as load_training_checkpoint
from tinax._checkpointing._training import save_training_checkpoint as save_training_checkpoint

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

__version__: str
