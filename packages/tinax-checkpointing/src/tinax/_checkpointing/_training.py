"""Training checkpoints: everything a run needs to resume, in one atomic checkpoint.

One :func:`save_checkpointables` call commits step, states and iterator position together. The layout
is tinax 0.2's (five parts named by :class:`TrainingCheckpointNames`, the auxiliary one holding
``{"state": auxiliary, "step": step}``), so checkpoints move freely between the versions.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any

import jax

from tinax._checkpointing._compat02 import CheckpointKeyError
from tinax._checkpointing._loading._load import loaded_nbytes, restore_complete
from tinax._checkpointing._loading._targets import require_restore_target
from tinax._checkpointing._locations import absolute_location, checkpoint_location
from tinax._checkpointing._metadata._layout import ParsedFiles, require_complete_checkpoint
from tinax._checkpointing._names import require_distinct_on_case_insensitive_systems, validate_checkpointable_name
from tinax._checkpointing._saving._checks import is_empty_container
from tinax._checkpointing._saving._save import start_save
from tinax._core import validation
from tinax._core.logs import Operation, get_logger

if TYPE_CHECKING:
    import orbax.checkpoint.experimental.v1 as ocp
    from grain import DatasetIterator

__all__ = [
    "MAX_STEP",
    "STEP_KEY",
    "TrainingCheckpoint",
    "TrainingCheckpointNames",
    "load_training_checkpoint",
    "require_iterator_states",
    "require_names",
    "require_step",
    "require_training_parts",
    "save_training_checkpoint",
]

# The auxiliary checkpointable holds {_AUXILIARY_STATE_KEY: auxiliary, STEP_KEY: step},
# as in tinax 0.2. Orbax saves the step as a Python int scalar, which holds any
# unsigned 64-bit value.
_AUXILIARY_STATE_KEY = "state"
STEP_KEY = "step"
MAX_STEP = 2**64 - 1
_ITERATOR_EXPECTATION = "a grain.DatasetIterator"
_logger = get_logger("checkpointing")
# Grain's checkpoint handler writes one iterator state per process under this name.
_ITERATOR_FILE = re.compile(r"process_(\d+)-of-(\d+)\.json")


@dataclasses.dataclass(frozen=True, slots=True)
class TrainingCheckpointNames:
    """The checkpointable name of each part of a training checkpoint.

    Rename parts to match an existing layout or to keep two models apart;
    loading needs the names the checkpoint was saved with.

    Attributes:
      model: Name of the model state.
      optimizer: Name of the optimizer state.
      rng: Name of the random state.
      auxiliary: Name of the auxiliary state (metrics, EMA weights, ...).
      iterator: Name of the data iterator's position.

    Raises:
      TypeError: If a name is not a ``str``.
      ValueError: If a name is not a valid checkpointable name, or two names are equal or differ only in case.
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
                raise type(error)(f"TrainingCheckpointNames.{field.name}: {error}") from error
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

    Raises:
      TypeError: If ``step`` is not an int or ``iterator`` is not a ``grain.DatasetIterator``.
      ValueError: If ``step`` is negative.
    """

    step: int
    model: Any
    optimizer: Any
    rng: Any
    auxiliary: Any
    iterator: DatasetIterator[Any]

    def __post_init__(self) -> None:
        # tinax 0.2 checked both fields when a TrainingCheckpoint was built.
        validation.require_int(self.step, "step", minimum=0)
        _require_iterator(self.iterator)


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

    The step, the four states and the iterator's position go into one
    :func:`save_checkpointables` call, so the checkpoint appears at ``path``
    complete or not at all. The step is stored beside the auxiliary state as
    ``{"state": auxiliary, "step": step}`` (tinax 0.2's layout). Device data and
    the iterator's state are captured before this returns. Once committed, the
    save logs one INFO line to the ``tinax.checkpointing`` logger.

    Args:
      path: Folder to create; it must not exist yet nor contain
        ``.orbax-checkpoint-tmp`` in its name. A ``gs://`` URL (``str`` or
        ``etils.epath.Path``) names a bucket prefix, committed by ``commit_success.txt``.
      step: The training step, an int in [0, 2**64 - 1] (NumPy integers accepted, bools refused).
      model: The model state, a pytree such as ``nnx.state(model)``.
      optimizer: The optimizer state, a pytree such as ``nnx.state(optimizer)``;
        leafless state (``optax.sgd(0.1).init(params)``) saves as in tinax 0.2.
      rng: The random state, for example a PRNG key array or an NNX ``RngState``.
      auxiliary: Any other state resume needs (metrics, EMA weights, ...), a pytree; may be empty or None.
      iterator: The live data iterator; its position is saved, it is not advanced.
      names: The checkpointable name of each part; the defaults of
        :class:`TrainingCheckpointNames` when None.

    Returns:
      The Orbax ``AsyncResponse`` of :func:`save_checkpointables`; its ``result()``
      waits and raises ``RuntimeError`` (cause chained) if the save failed.

    Raises:
      TypeError: If ``path``, ``step``, ``iterator`` or ``names`` is of the wrong kind, or a value cannot be saved.
      ValueError: If ``step`` is out of range, a state is None or empty, a value is unstorable, or Orbax refuses.
      OSError: If ``path`` cannot be created (see :func:`save_checkpointables`); also a ``ValueError``.
      FileExistsError: If ``path`` exists, or a save to it is in flight; also a ``ValueError``.
      ImportError: If ``path`` is a ``gs://`` URL and gcsfs is not installed.

    Examples:
      >>> import grain
      >>> import jax
      >>> import jax.numpy as jnp
      >>> from tinax.checkpointing import save_training_checkpoint
      >>> iterator = iter(grain.MapDataset.range(10).to_iter_dataset())
      >>> next(iterator)
      0
      >>> response = save_training_checkpoint(
      ...     "run/1", 1, {"w": jnp.ones(2)}, {"count": jnp.asarray(1)}, jax.random.key(0), None, iterator
      ... )
      >>> response.result()
    """
    checkpoint_location(path, "path", needed_by="tinax.checkpointing.save_training_checkpoint")
    checked_step = require_step(step)
    parts = {"model": model, "optimizer": optimizer, "rng": rng}
    for argument, value in parts.items():
        if not jax.tree_util.tree_leaves(value) and is_empty_container(value):
            validation.fail_value(argument, "state that is neither None nor an empty container", value)
    _require_iterator(iterator)
    chosen = require_names(names)
    checkpointables = {
        chosen.model: model,
        chosen.optimizer: optimizer,
        chosen.rng: rng,
        # The step gives this part a leaf even when the auxiliary state has none.
        chosen.auxiliary: {_AUXILIARY_STATE_KEY: auxiliary, STEP_KEY: int(checked_step)},
        chosen.iterator: iterator,
    }
    return start_save(path, checkpointables, description=f"training checkpoint of step {checked_step} to")


def load_training_checkpoint(
    path: str | os.PathLike[str],
    model_target: Any,
    optimizer_target: Any,
    rng_target: Any,
    auxiliary_target: Any,
    iterator: DatasetIterator[Any],
    *,
    names: TrainingCheckpointNames | None = None,
    redeal: bool = False,
) -> TrainingCheckpoint:
    """Restores a training checkpoint written by :func:`save_training_checkpoint` (or by tinax 0.2).

    Each state loads into an explicit restore target (from
    ``abstract_restore_target`` or ``tinax.parallel.abstract_sharded_state``), so a
    run can resume on another mesh. ``iterator`` must be a fresh iterator of the
    same pipeline; its state is replaced in place. A checkpoint saved by another
    number of processes is refused unless ``redeal`` is True, which deals the rest
    of the interrupted epoch out to this run's processes with
    ``tinax.data.redeal_state``. The folder's completeness, parts and iterator
    state files are checked before anything loads; a failed load leaves the
    iterator where it was. A successful load logs one INFO line to the
    ``tinax.checkpointing`` logger.

    Args:
      path: The checkpoint folder, or a ``gs://`` URL (``str`` or ``etils.epath.Path``)
        of a prefix holding Orbax's ``commit_success.txt``.
      model_target: Restore target of the model state.
      optimizer_target: Restore target of the optimizer state.
      rng_target: Restore target of the random state.
      auxiliary_target: Restore target of the auxiliary state; None or an empty
        container for auxiliary state saved so.
      iterator: A live iterator of the pipeline that was saved.
      names: The names the checkpoint was saved with; the defaults of
        :class:`TrainingCheckpointNames` when None.
      redeal: Whether a checkpoint saved by another number of processes may restore
        the iterator by re-dealing; with the same count it changes nothing.

    Returns:
      A :class:`TrainingCheckpoint` with the saved step, the four restored states
      and ``iterator`` itself at the saved position (or its re-dealt share).

    Raises:
      TypeError: If ``path``, ``iterator`` or ``names`` is of the wrong kind, or a target holds an unusable leaf.
      ValueError: If a target is unusable, or the checkpoint is incomplete or does not fit (some also ``KeyError``).
      FileNotFoundError: If nothing exists at ``path``; also a ``ValueError``.
      ImportError: If ``path`` is a ``gs://`` URL and gcsfs is not installed.

    Examples:
      >>> import grain
      >>> import jax
      >>> import jax.numpy as jnp
      >>> from tinax.checkpointing import abstract_restore_target, load_training_checkpoint, save_training_checkpoint
      >>> model, optimizer, key = {"w": jnp.ones(2)}, {"count": jnp.asarray(1)}, jax.random.key(0)
      >>> iterator = iter(grain.MapDataset.range(10).to_iter_dataset())
      >>> next(iterator)
      0
      >>> save_training_checkpoint("run/1", 1, model, optimizer, key, None, iterator).result()
      >>> fresh = iter(grain.MapDataset.range(10).to_iter_dataset())
      >>> targets = [abstract_restore_target(state) for state in (model, optimizer, key)]
      >>> restored = load_training_checkpoint("run/1", *targets, None, fresh)
      >>> restored.step, next(fresh)  # the iterator continues after the saved position
      (1, 1)
    """
    operation = Operation(_logger, "loaded", "", "")
    source = absolute_location(path, "path", needed_by="tinax.checkpointing.load_training_checkpoint")
    targets = {"model_target": model_target, "optimizer_target": optimizer_target, "rng_target": rng_target}
    for argument, target in targets.items():
        require_restore_target(target, argument)
    if auxiliary_target is not None:
        require_restore_target(auxiliary_target, "auxiliary_target")
    _require_iterator(iterator)
    chosen = require_names(names)
    redeal = validation.require_bool(redeal, "redeal")
    # The one completeness check of this load; the load below relies on it and on the files it parsed.
    parsed: ParsedFiles = {}
    held = require_complete_checkpoint(source, parsed)
    saved_states = _saved_iterator_states(source, chosen, require_training_parts(source, held, chosen), redeal)
    targets = {
        chosen.model: model_target,
        chosen.optimizer: optimizer_target,
        chosen.rng: rng_target,
        chosen.auxiliary: {_AUXILIARY_STATE_KEY: auxiliary_target, STEP_KEY: 0},
    }
    restored = None
    if saved_states is None:
        # In the same Orbax call as the states. Orbax loads the parts one after another, in the order of their
        # names, so the iterator may move before a later part fails: such a load puts it back where it was.
        restored = _RestoredWhenAwaited(iterator)
        targets[chosen.iterator] = restored
    try:
        loaded = _load(source, held, parsed, chosen, targets)
        step = _stored_step(loaded[chosen.auxiliary], source)
    except Exception:
        if restored is not None:
            restored.put_back()
        raise
    if saved_states is not None:
        _redeal_iterator(source, chosen, saved_states, iterator)
    operation.what = f"training checkpoint of step {step} from"
    operation.target = str(source)
    operation.done(nbytes=loaded_nbytes(operation, source, dataclasses.astuple(chosen)))
    return TrainingCheckpoint(
        step=step,
        model=loaded[chosen.model],
        optimizer=loaded[chosen.optimizer],
        rng=loaded[chosen.rng],
        auxiliary=loaded[chosen.auxiliary][_AUXILIARY_STATE_KEY],
        iterator=iterator,
    )


def require_step(step: object) -> int:
    """Checks a training step: an int in [0, 2**64 - 1] (NumPy integers accepted, bools refused)."""
    return validation.require_int(step, "step", minimum=0, maximum=MAX_STEP, bounds_text="in [0, 2**64 - 1]")


def _require_iterator(iterator: object) -> None:
    # grain imports orbax and array_record, so it is imported only here.
    import grain

    validation.require_instance(iterator, "iterator", grain.DatasetIterator, _ITERATOR_EXPECTATION)


def require_names(names: object) -> TrainingCheckpointNames:
    """Checks a ``names`` argument: a :class:`TrainingCheckpointNames`, or None for the default names."""
    if names is None:
        return TrainingCheckpointNames()
    return validation.require_instance(names, "names", TrainingCheckpointNames, "a TrainingCheckpointNames or None")


def require_training_parts(source: pathlib.Path, held: set[str], names: TrainingCheckpointNames) -> int:
    """Checks that a complete checkpoint holds every training part and iterator state; returns the saving process count.

    Raises ``CheckpointKeyError`` (a ``ValueError`` and ``KeyError``) otherwise.
    """
    expected = dataclasses.asdict(names)
    missing = [f"{part} ({name!r})" for part, name in expected.items() if name not in held]
    if missing:
        raise CheckpointKeyError(
            f"the training checkpoint at {str(source)!r} has no part {', '.join(missing)} under {names}; "
            f"it holds {sorted(held)}. Load it with the names it was saved with"
        )
    return require_iterator_states(source, names.iterator)


def require_iterator_states(source: pathlib.Path, part: str) -> int:
    """Checks that the iterator part holds Grain's ``process_<i>-of-<n>.json`` of every saving process; returns ``n``.

    Each process reads only its own file, so a missing one would fail late, on one process only.
    """
    folder = source / part
    found: dict[int, set[int]] = {}
    for entry in folder.iterdir():
        match = _ITERATOR_FILE.fullmatch(entry.name)
        # Only what Grain writes counts: a file, and an index below its count.
        if match and int(match[1]) < int(match[2]) and entry.is_file():
            found.setdefault(int(match[2]), set()).add(int(match[1]))
    prefix = f"the training checkpoint at {str(source)!r} is incomplete: its iterator part {part!r}"
    if not found:
        raise CheckpointKeyError(
            f"{prefix} holds no iterator state file (process_<i>-of-<n>.json, one per saving process); "
            "it was deleted or the part was not written by a grain iterator"
        )
    if len(found) > 1:
        raise CheckpointKeyError(
            f"{prefix} holds iterator states of several process counts ({sorted(found)}); a save writes the "
            "states of one run"
        )
    ((count, indices),) = found.items()
    missing = sorted(set(range(count)) - indices)
    if missing:
        files = ", ".join(f"process_{index}-of-{count}.json" for index in missing)
        raise CheckpointKeyError(
            f"{prefix} lacks the iterator states of processes {missing} of {count} ({files}); every saving "
            "process writes one, and a resume needs each"
        )
    return count


def _saved_iterator_states(
    source: pathlib.Path, names: TrainingCheckpointNames, saved_count: int, redeal: bool
) -> list[Any] | None:
    """Checks the saved iterator states against this run's process count, before anything loads.

    Returns None when the iterator restores its own state, else (with ``redeal``) every saving process's parsed state.
    """
    count = jax.process_count()
    if saved_count == count:
        return None
    if not redeal:
        raise CheckpointKeyError(
            f"the training checkpoint at {str(source)!r} was saved by {saved_count} processes and this run has "
            f"{count}: its iterator states are one per saving process, and restoring one as it is would skip or "
            "repeat rows. Pass redeal=True to deal the rest of the epoch out to this run's processes "
            "(a tinax.data.training_batches iterator)"
        )
    states = []
    for index in range(saved_count):
        path = source / names.iterator / f"process_{index}-of-{saved_count}.json"
        try:
            states.append(json.loads(path.read_text()))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise CheckpointKeyError(
                f"the training checkpoint at {str(source)!r} holds an unreadable iterator state {path.name!r}: {error}"
            ) from error
    return states


def _redeal_iterator(
    source: pathlib.Path, names: TrainingCheckpointNames, states: list[Any], iterator: DatasetIterator[Any]
) -> None:
    """Moves ``iterator`` to its share of the rest of the epoch the saved states stopped in."""
    live = iterator.get_state()
    description = live.get("tinax_pipeline") if isinstance(live, dict) else None
    if not isinstance(description, dict):
        raise ValueError(
            f"iterator must be a tinax.data.training_batches iterator to re-deal the training checkpoint at "
            f"{str(source)!r} (saved by {len(states)} processes) onto {jax.process_count()}; got an iterator "
            "whose state has no pipeline description"
        )
    # tinax-data is there: it built the iterator.
    from grain.sharding import ShardOptions

    from tinax.data import redeal_state

    try:
        shard = ShardOptions(
            description["shard_index"], description["shard_count"], drop_remainder=description["drop_remainder"]
        )
        state = redeal_state(
            states,
            shard_options=shard,
            batch_size=description["batch_size"],
            num_workers=description.get("num_workers", 0),
        )
        iterator.set_state(state)
    except (TypeError, ValueError, KeyError) as error:
        kind = TypeError if isinstance(error, TypeError) else ValueError
        raise kind(
            f"could not re-deal the iterator states of the training checkpoint at {str(source)!r} with {names}: {error}"
        ) from error
    start = getattr(iterator, "start_prefetch", None)
    if callable(start):
        start()


def _load(
    source: pathlib.Path, held: set[str], parsed: ParsedFiles, names: TrainingCheckpointNames, targets: dict[str, Any]
) -> dict[str, Any]:
    try:
        return restore_complete(source, held, targets, parsed)
    except (TypeError, ValueError) as error:
        raise type(error)(f"could not load the training checkpoint at {str(source)!r} with {names}: {error}") from error


class _RestoredWhenAwaited:
    """An iterator as a load target: moved only when Orbax awaits its turn, put back if the load fails.

    Orbax creates every part's load coroutine first; one never awaited after an earlier failure makes Python warn.
    """

    def __init__(self, iterator: DatasetIterator[Any]) -> None:
        self._iterator = iterator
        # Its state before the load; taken when its turn comes, so a load that fails earlier never touches it.
        self._before: Any = None
        self._moved = False

    async def save(self, directory: Any) -> Any:
        # Part of the protocol Orbax recognises; only loads see this wrapper.
        raise NotImplementedError("a load target is never saved")

    async def load(self, directory: Any) -> Any:
        return _Awaited(self._read_state(directory))

    def put_back(self) -> None:
        """Returns the iterator to where it was before the load, if the load moved it."""
        if self._moved:
            self._iterator.set_state(self._before)

    def _read_state(self, directory: Any) -> Callable[[], Coroutine[Any, Any, None]]:
        async def read() -> None:
            self._before = self._iterator.get_state()
            self._moved = True
            await (await self._iterator.load(directory))

        return read


class _Awaited:
    """An awaitable that calls ``start`` only when awaited, so one never awaited leaves nothing behind."""

    def __init__(self, start: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._start = start

    def __await__(self) -> Generator[Any, None, None]:
        return self._start().__await__()


def _stored_step(stored: Any, source: pathlib.Path) -> int:
    """Reads the step out of the loaded auxiliary part, refusing anything but an int in [0, 2**64 - 1]."""
    value: Any = stored.get(STEP_KEY) if isinstance(stored, dict) else None
    if not (type(value) is int and 0 <= value <= MAX_STEP):
        raise ValueError(
            f"the training checkpoint at {str(source)!r} holds a damaged step: expected a non-negative "
            f"int, got {validation.describe(value)}"
        )
    return value
