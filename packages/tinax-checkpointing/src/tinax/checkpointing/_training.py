"""Training checkpoints: everything a run needs to resume, in one atomic checkpoint.

A training checkpoint is one Orbax V1 checkpoint written by one
:func:`save_checkpointables` call, so the step, the model, the optimizer, the
random state, any auxiliary state and the data iterator's position are
committed together or not at all: a crash can never leave a model from one
step next to an iterator from another.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from tinax._core import validation
from tinax.checkpointing._checkpointables import _require_complete_checkpoint as require_complete_checkpoint
from tinax.checkpointing._checkpointables import load_checkpointables, save_checkpointables
from tinax.checkpointing._names import require_distinct_on_case_insensitive_systems, validate_checkpointable_name
from tinax.checkpointing._targets import require_restore_target

if TYPE_CHECKING:
    import orbax.checkpoint.experimental.v1 as ocp
    from grain import DatasetIterator

__all__ = [
    "STEP_CHECKPOINTABLE",
    "TrainingCheckpoint",
    "TrainingCheckpointNames",
    "load_training_checkpoint",
    "save_training_checkpoint",
]

#: Name of the checkpointable that holds the training step. No part may use it.
STEP_CHECKPOINTABLE = "step"
_STEP_KEY = "step"
_STEP_DTYPE = np.int64
_MAX_STEP = int(np.iinfo(_STEP_DTYPE).max)
_ITERATOR_EXPECTATION = "a grain.DatasetIterator"


@dataclasses.dataclass(frozen=True)
class TrainingCheckpointNames:
    """The checkpointable name of each part of a training checkpoint.

    Rename parts to match an existing checkpoint layout, or to keep two
    models apart. Loading needs the names the checkpoint was saved with.

    Attributes:
      model: Name of the model state.
      optimizer: Name of the optimizer state.
      rng: Name of the random state.
      auxiliary: Name of the auxiliary state (metrics, EMA weights, ...).
      iterator: Name of the data iterator's position.

    Raises:
      TypeError: If a name is not a ``str``.
      ValueError: If a name is not a valid checkpointable name (see
        ``validate_checkpointable_name``), two names are equal or differ only
        in case, or a name is ``"step"``, which holds the training step.
    """

    model: str = "model"
    optimizer: str = "optimizer"
    rng: str = "rng"
    auxiliary: str = "auxiliary"
    iterator: str = "iterator"

    def __post_init__(self) -> None:
        names = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            try:
                validate_checkpointable_name(value)
            except (TypeError, ValueError) as error:
                raise type(error)(f"TrainingCheckpointNames.{field.name}: {error}") from None
            if value.casefold() == STEP_CHECKPOINTABLE.casefold():
                validation.fail_value(
                    f"TrainingCheckpointNames.{field.name}",
                    f"a name other than {STEP_CHECKPOINTABLE!r} (it holds the training step), in any case",
                    value,
                )
            names.append(value)
        validation.require_unique(names, "TrainingCheckpointNames")
        require_distinct_on_case_insensitive_systems(names, "TrainingCheckpointNames")


@dataclasses.dataclass(frozen=True)
class TrainingCheckpoint:
    """What :func:`load_training_checkpoint` restores.

    Attributes:
      step: The training step the checkpoint was saved at.
      model: The model state, laid out as its restore target asked.
      optimizer: The optimizer state, laid out as its restore target asked.
      rng: The random state, laid out as its restore target asked.
      auxiliary: The auxiliary state, laid out as its restore target asked.
      iterator: The iterator passed to the load, now at the saved position.
    """

    step: int
    model: Any
    optimizer: Any
    rng: Any
    auxiliary: Any
    iterator: DatasetIterator[Any]


def save_training_checkpoint(
    path: str | os.PathLike[str],
    step: int,
    model: Any,
    optimizer: Any,
    rng: Any,
    auxiliary: Any,
    iterator: DatasetIterator[Any],
    *,
    names: TrainingCheckpointNames | None = None,
) -> ocp.AsyncResponse[None]:
    """Starts saving everything a training run needs to resume, as one checkpoint.

    The step, the four states and the iterator's position go into a single
    :func:`save_checkpointables` call, so they are committed together: the
    checkpoint appears at ``path`` complete or not at all. Each part is a
    checkpointable named by ``names``; the step is the checkpointable
    ``"step"``. Device data and the iterator's state are captured before this
    returns, so training may go on at once while the files are written.

    Args:
      path: Folder to create for the checkpoint. It must not exist yet.
      step: The training step, an int in [0, 2**63 - 1] (bools are refused).
      model: The model state, a pytree such as ``nnx.state(model)``.
      optimizer: The optimizer state, a pytree such as
        ``nnx.state(optimizer)``.
      rng: The random state, for example a PRNG key array or an NNX
        ``RngState``.
      auxiliary: Any other state resume needs (metrics, EMA weights, loss
        scale, ...), a pytree with at least one leaf.
      iterator: The live data iterator. Its position is saved; it is not
        advanced.
      names: The checkpointable name of each part; the defaults of
        :class:`TrainingCheckpointNames` when None.

    Returns:
      The Orbax ``AsyncResponse`` of :func:`save_checkpointables`. Its
      ``result()`` waits for the save and raises ``RuntimeError`` (with the
      cause chained) if it failed.

    Raises:
      TypeError: If ``path`` is not a path, ``step`` is not an int,
        ``iterator`` is not a ``grain.DatasetIterator``, ``names`` is not a
        :class:`TrainingCheckpointNames`, or a part holds a value Orbax
        cannot save.
      ValueError: If ``step`` is negative or too large, a part is None or
        holds no leaf, or Orbax refuses to start the save.
      FileExistsError: If ``path`` exists, or a save to it is in flight.
    """
    validation.require_path(path, "path")
    checked_step = validation.require_int(step, "step", minimum=0, maximum=_MAX_STEP, bounds_text="in [0, 2**63 - 1]")
    parts = {"model": model, "optimizer": optimizer, "rng": rng, "auxiliary": auxiliary}
    for argument, value in parts.items():
        if value is None or not jax.tree_util.tree_leaves(value):
            validation.fail_value(argument, "state holding at least one array or scalar", value)
    _require_iterator(iterator)
    chosen = _require_names(names)
    checkpointables = {
        STEP_CHECKPOINTABLE: {_STEP_KEY: np.asarray(checked_step, dtype=_STEP_DTYPE)},
        chosen.model: model,
        chosen.optimizer: optimizer,
        chosen.rng: rng,
        chosen.auxiliary: auxiliary,
        chosen.iterator: iterator,
    }
    return save_checkpointables(path, checkpointables)


def load_training_checkpoint(
    path: str | os.PathLike[str],
    model_target: Any,
    optimizer_target: Any,
    rng_target: Any,
    auxiliary_target: Any,
    iterator: DatasetIterator[Any],
    *,
    names: TrainingCheckpointNames | None = None,
) -> TrainingCheckpoint:
    """Restores a training checkpoint written by :func:`save_training_checkpoint`.

    Each state loads into an explicit restore target that says where every
    array goes, so a run can resume on another mesh. Build targets with
    ``abstract_restore_target`` from freshly initialized state, or from the
    abstract state of a model that was never allocated (for example
    ``tinax.parallel.abstract_sharded_state``). The iterator must be a fresh
    iterator of the same pipeline: its state is replaced in place, and it
    continues exactly where the saved one stopped.

    Before anything loads, the folder is checked to be a complete checkpoint
    that holds every part under ``names``. The states load first and the
    iterator last, so a load that fails on a state leaves the iterator where
    it was.

    Args:
      path: The checkpoint folder.
      model_target: Restore target of the model state.
      optimizer_target: Restore target of the optimizer state.
      rng_target: Restore target of the random state.
      auxiliary_target: Restore target of the auxiliary state.
      iterator: A live iterator of the pipeline that was saved.
      names: The names the checkpoint was saved with; the defaults of
        :class:`TrainingCheckpointNames` when None.

    Returns:
      A :class:`TrainingCheckpoint` with the saved step, the four restored
      states and ``iterator`` itself, moved to the saved position.

    Raises:
      TypeError: If ``path`` is not a path, ``iterator`` is not a
        ``grain.DatasetIterator``, ``names`` is not a
        :class:`TrainingCheckpointNames`, a target holds a traced value, or
        Orbax rejects a target's kind.
      ValueError: If a target is None or holds an abstract array without a
        sharding, the folder is not a complete checkpoint, it lacks a part
        under the given ``names`` (a checkpoint saved with other names, or not
        by :func:`save_training_checkpoint`), its step is damaged, or the
        values do not fit the targets or the iterator's pipeline.
      FileNotFoundError: If nothing exists at ``path``.
    """
    source = validation.require_path(path, "path")
    targets = {
        "model_target": model_target,
        "optimizer_target": optimizer_target,
        "rng_target": rng_target,
        "auxiliary_target": auxiliary_target,
    }
    for argument, target in targets.items():
        require_restore_target(target, argument)
    _require_iterator(iterator)
    chosen = _require_names(names)
    _require_parts(source, chosen)
    states = _load(
        source,
        chosen,
        {
            STEP_CHECKPOINTABLE: {_STEP_KEY: np.zeros((), dtype=_STEP_DTYPE)},
            chosen.model: model_target,
            chosen.optimizer: optimizer_target,
            chosen.rng: rng_target,
            chosen.auxiliary: auxiliary_target,
        },
    )
    step = _stored_step(states[STEP_CHECKPOINTABLE], source)
    # The iterator is moved only once every state has loaded, so a failed load
    # leaves it where it was.
    _load(source, chosen, {chosen.iterator: iterator})
    return TrainingCheckpoint(
        step=step,
        model=states[chosen.model],
        optimizer=states[chosen.optimizer],
        rng=states[chosen.rng],
        auxiliary=states[chosen.auxiliary],
        iterator=iterator,
    )


def _require_iterator(iterator: object) -> None:
    # grain imports orbax and array_record, so it is imported only here.
    import grain

    validation.require_instance(iterator, "iterator", grain.DatasetIterator, _ITERATOR_EXPECTATION)


def _require_names(names: object) -> TrainingCheckpointNames:
    if names is None:
        return TrainingCheckpointNames()
    return validation.require_instance(names, "names", TrainingCheckpointNames, "a TrainingCheckpointNames or None")


def _require_parts(source: pathlib.Path, names: TrainingCheckpointNames) -> None:
    """Checks, before anything loads, that the checkpoint is complete and holds every part under ``names``."""
    held = sorted(require_complete_checkpoint(source))
    expected = {STEP_CHECKPOINTABLE: STEP_CHECKPOINTABLE, **dataclasses.asdict(names)}
    missing = [f"{part} ({name!r})" for part, name in expected.items() if name not in held]
    if missing:
        raise ValueError(
            f"the training checkpoint at {str(source)!r} has no part {', '.join(missing)} under {names}; "
            f"it holds {held}. Load it with the names it was saved with"
        )


def _load(source: pathlib.Path, names: TrainingCheckpointNames, targets: dict[str, Any]) -> dict[str, Any]:
    try:
        return load_checkpointables(source, targets)
    except (TypeError, ValueError) as error:
        raise type(error)(f"could not load the training checkpoint at {str(source)!r} with {names}: {error}") from error


def _stored_step(stored: Any, source: pathlib.Path) -> int:
    value = stored.get(_STEP_KEY) if isinstance(stored, dict) else None
    if not isinstance(value, np.ndarray) or value.shape != () or value.dtype != _STEP_DTYPE or int(value) < 0:
        raise ValueError(
            f"the training checkpoint at {str(source)!r} holds a damaged step: expected a non-negative "
            f"int64 scalar, got {validation.describe(value)}"
        )
    return int(value)
