"""tinax 0.2's checkpointing artifacts: Orbax V1 checkpoints, training checkpoints and legacy V0 folders.

Runs under the real tinax 0.2 (with Orbax 0.12.1, which commits a save by
renaming its folder and writes no ``commit_success.txt``). Its only argument
is the output folder, where it writes:

- ``v1_mixed/``: ``save_checkpointables`` of arrays sharded over the 8 CPU
  devices, a PRNG key, host NumPy arrays, Python scalars, a string, None and
  nested containers.
- ``training_plain/``: ``save_training_checkpoint`` of a plain-pytree model,
  an optax Adam state after a few updates, a PRNG key, auxiliary state and a
  grain iterator advanced a few steps (a pipeline without tinax.data).
- ``training_data/``: the same states with an iterator of 0.2's
  ``tinax.data.training_batches``. Only the iterator part depends on the
  data pipeline matching 0.2's.
- ``training_no_auxiliary/``: a training checkpoint whose auxiliary state is
  None, and ``training_names/``: one saved with custom names (the model under
  ``"step"``, which 0.2 allowed).
- ``v0_pytree/``, ``v0_bare/`` and ``v0_iterator/``: ``tinax.checkpointing.legacy.v0``
  checkpoints of a pytree (with strings, None and NumPy scalars), of a bare
  leaf, and of a grain iterator.
- ``temporary/``: complete copies of ``v1_mixed`` and ``v0_pytree`` under
  names Orbax reserves for unfinished saves.
- ``results.json``: what 0.2 loaded back from each checkpoint (with the
  targets built by :func:`v1_targets` and friends), the batches each saved
  iterator went on to give, and the exception classes 0.2 raised for bad
  calls.

Values are written with :func:`tag`, a JSON encoding that keeps each leaf's
exact type and bytes and each tree's structure, so
``test_checkpointing_artifacts.py`` compares 0.2's results with ours by
comparing tags. That test imports this file for :func:`tag`, the state
builders and the targets, so everything that needs tinax 0.2 runs inside
:func:`main`.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

MESH_SHAPE = (4, 2)
MESH_AXES = ("rows", "cols")
TRAINING_STEP = 3
ITERATOR_STEPS_BEFORE_SAVE = 3
BATCHES_AFTER_SAVE = 5
TEMPORARY_SUFFIX = ".orbax-checkpoint-tmp-1700000000"

# ---------------------------------------------------------------------------
# Shared with the test


def mesh() -> Any:
    """The 4 x 2 mesh over the 8 CPU devices (Auto axes, as ``jax.sharding.Mesh`` makes them)."""
    import jax

    return jax.sharding.Mesh(np.array(jax.devices()).reshape(MESH_SHAPE), MESH_AXES)


def placed(value: Any, *spec: str | None) -> Any:
    """``value`` as a jax.Array laid out over :func:`mesh` by ``spec``."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    return jax.device_put(value, NamedSharding(mesh(), PartitionSpec(*spec)))


def tag(value: Any) -> Any:
    """Encodes a leaf as JSON that names its exact type and holds its exact bytes."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding

    kind = type(value)
    if value is None:
        return ["None"]
    if kind is bool:
        return ["bool", value]
    if kind is int:
        return ["int", str(value)]
    if kind is float:
        return ["float", repr(value)]
    if kind is str:
        return ["str", value]
    if isinstance(value, jax.Array):
        spec = str(value.sharding.spec) if isinstance(value.sharding, NamedSharding) else type(value.sharding).__name__
        if jnp.issubdtype(value.dtype, jax.dtypes.extended):
            data = np.asarray(jax.random.key_data(value))
            return ["jax.key", str(value.dtype), list(value.shape), spec, data.tobytes().hex()]
        host = np.asarray(value)
        return ["jax.Array", str(host.dtype), list(host.shape), spec, host.tobytes().hex()]
    if isinstance(value, np.ndarray):
        return ["numpy.ndarray", str(value.dtype), list(value.shape), np.ascontiguousarray(value).tobytes().hex()]
    if isinstance(value, np.generic):
        return [f"numpy.{kind.__name__}", str(value.dtype), value.tobytes().hex()]
    return [f"{kind.__module__}.{kind.__qualname__}", repr(value)]


def tag_tree(tree: Any) -> dict[str, Any]:
    """Encodes a pytree: its structure and every leaf's :func:`tag`."""
    import jax

    return {"structure": str(jax.tree.structure(tree)), "leaves": [tag(leaf) for leaf in jax.tree.leaves(tree)]}


def error_tag(error: BaseException) -> list[str]:
    """Names an exception's class and every class it derives from."""
    return [f"{cls.__module__}.{cls.__qualname__}" for cls in type(error).__mro__]


def outcome(function: Callable[[], Any]) -> dict[str, Any]:
    """Runs a call and records the exception it raised, or that it raised none."""
    try:
        function()
    except Exception as error:
        return {"error": error_tag(error)}
    return {"error": None}


def v1_state() -> dict[str, Any]:
    """The checkpointables of ``v1_mixed``."""
    import jax

    return {
        "sharded": {
            "weights": placed(np.arange(128, dtype=np.float32).reshape(16, 8) / 8, "rows", "cols"),
            "bias": placed(np.linspace(-1.0, 1.0, 16, dtype=np.float32), "rows"),
            "counts": placed(np.arange(8, dtype=np.int32), None),
            "key": placed(jax.random.key(7)),
        },
        "host": {
            "table": np.arange(6, dtype=np.int64).reshape(2, 3),
            "mask": np.array([True, False, True]),
            "half": np.arange(4, dtype=np.float16) / 3,
        },
        "scalars": {
            "step": 12,
            "rate": 0.1,
            "flag": True,
            "label": "run-a",
            "none": None,
            "big": 2**63,
            "negative": -3,
        },
        "nested": {"outer": {"items": [1, 2.5, "x"], "deep": {"codes": np.arange(3, dtype=np.int16)}}},
    }


def v1_targets() -> dict[str, Any]:
    """Restore targets for ``v1_mixed``: sharded arrays onto other layouts, host arrays as NumPy."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    def on(shape: tuple[int, ...], dtype: Any, *spec: str | None) -> Any:
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh(), PartitionSpec(*spec)))

    key = jax.random.key(0)
    return {
        "sharded": {
            "weights": on((16, 8), np.float32, "cols", None),
            "bias": on((16,), np.float32),
            "counts": np.ndarray,
            "key": on(key.shape, key.dtype),
        },
        "host": {"table": np.ndarray, "mask": np.ndarray, "half": np.ndarray},
        "scalars": {"step": 0, "rate": 0.0, "flag": False, "label": "", "none": None, "big": 0, "negative": 0},
        "nested": {"outer": {"items": [0, 0.0, ""], "deep": {"codes": np.ndarray}}},
    }


def training_states() -> dict[str, Any]:
    """Model, optimizer (optax Adam after two updates), key and auxiliary state of the training checkpoints."""
    import jax
    import optax

    model = {
        "dense": {
            "kernel": placed(np.arange(24, dtype=np.float32).reshape(6, 4) / 10, None, "cols"),
            "bias": placed(np.zeros(4, np.float32), None),
        },
        "scale": placed(np.float32(1.5)),
    }
    transformation = optax.adam(0.01)
    optimizer = transformation.init(model)
    for index in range(2):
        gradients = jax.tree.map(lambda leaf, index=index: leaf * 0 + 0.25 * (index + 1), model)
        updates, optimizer = transformation.update(gradients, optimizer, model)
        model = optax.apply_updates(model, updates)
    rng = jax.random.split(jax.random.key(2718))[1]
    auxiliary = {"schedule": np.array([3, 5, 8], dtype=np.int16), "seen": 12, "name": "run-7", "ema": np.array(0.25)}
    return {"model": model, "optimizer": optimizer, "rng": rng, "auxiliary": auxiliary}


def plain_iterator() -> Any:
    """A fresh grain iterator of a pipeline that does not use tinax.data."""
    import grain

    return iter(grain.MapDataset.range(128).seed(314159).shuffle().batch(4, drop_remainder=True))


def stack_records(records: Any) -> Any:
    """The ``batch_fn`` of :func:`data_pipeline_arguments`."""
    return np.stack([np.asarray(record) for record in records])


def data_pipeline_arguments() -> dict[str, Any]:
    """Arguments for ``tinax.data.training_batches`` (0.2's and ours) beside the dataset."""
    import grain

    return {
        "shard_options": grain.sharding.ShardOptions(shard_index=0, shard_count=1, drop_remainder=True),
        "seed": 5,
        "shuffle": True,
        "num_epochs": 3,
        "batch_size": 4,
        "batch_fn": stack_records,
    }


def data_pipeline_dataset() -> Any:
    """The records of the ``training_batches`` pipeline: 22 int64 vectors."""
    import grain

    return grain.MapDataset.source([np.arange(index, index + 3, dtype=np.int64) for index in range(22)])


def v0_state() -> dict[str, Any]:
    """The pytree of ``v0_pytree``: arrays, a key, Python and NumPy scalars, a string and None."""
    import jax

    return {
        "params": {
            "kernel": placed(np.arange(32, dtype=np.float32).reshape(4, 8), "rows", "cols"),
            "bias": np.arange(3, dtype=np.int32),
        },
        "key": placed(jax.random.key(3)),
        "step": 7,
        "scale": 0.5,
        "flag": True,
        "name": "mlp",
        "none": None,
        "half": np.float32(1.5),
        "count": np.int64(9),
    }


def v0_target() -> dict[str, Any]:
    """A restore target for ``v0_pytree``; its arrays go onto other layouts."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    key = jax.random.key(0)
    replicated = NamedSharding(mesh(), PartitionSpec())
    return {
        "params": {
            "kernel": jax.ShapeDtypeStruct((4, 8), np.float32, sharding=NamedSharding(mesh(), PartitionSpec("cols"))),
            "bias": np.zeros(3, np.int32),
        },
        "key": jax.ShapeDtypeStruct(key.shape, key.dtype, sharding=replicated),
        "step": 0,
        "scale": 0.0,
        "flag": False,
        "name": "",
        "none": None,
        "half": 0.0,
        "count": 0,
    }


def abstract(state: Any) -> Any:
    """A restore target for a live state, built without tinax (both versions use it)."""
    import jax

    def leaf(value: Any) -> Any:
        if isinstance(value, jax.Array):
            return jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=value.sharding)
        if isinstance(value, np.ndarray):
            return np.ndarray
        return value

    return jax.tree.map(leaf, state)


def take(iterator: Any, count: int) -> list[Any]:
    """The next ``count`` batches, tagged."""
    return [tag(np.asarray(next(iterator))) for _ in range(count)]


# ---------------------------------------------------------------------------
# Runs under tinax 0.2 only


def main(out: pathlib.Path) -> None:
    import warnings

    import jax

    from tinax import data
    from tinax.checkpointing import (
        TrainingCheckpointNames,
        load_checkpointables,
        load_training_checkpoint,
        save_checkpointables,
        save_training_checkpoint,
    )
    from tinax.checkpointing.legacy.v0 import (
        load_legacy_v0_grain_iterator,
        load_legacy_v0_pytree,
        save_legacy_v0_grain_iterator,
        save_legacy_v0_pytree,
    )

    assert jax.device_count() == 8, jax.devices()
    results: dict[str, Any] = {}

    # Orbax V1 checkpointables.
    state = v1_state()
    save_checkpointables(out / "v1_mixed", state).result()
    results["v1_mixed"] = {
        "saved": {name: tag_tree(value) for name, value in state.items()},
        "loaded": {
            name: tag_tree(value) for name, value in load_checkpointables(out / "v1_mixed", v1_targets()).items()
        },
        "files": sorted(entry.name for entry in (out / "v1_mixed").iterdir()),
    }

    # Training checkpoints.
    states = training_states()
    training: dict[str, Any] = {"saved": {part: tag_tree(value) for part, value in states.items()}}

    def save_training(name: str, iterator: Any, auxiliary: Any, **kwargs: Any) -> list[Any]:
        for _ in range(ITERATOR_STEPS_BEFORE_SAVE):
            next(iterator)
        save_training_checkpoint(
            out / name,
            TRAINING_STEP,
            states["model"],
            states["optimizer"],
            states["rng"],
            auxiliary,
            iterator,
            **kwargs,
        ).result()
        return take(iterator, BATCHES_AFTER_SAVE)

    def reload(name: str, iterator: Any, auxiliary_target: Any, **kwargs: Any) -> dict[str, Any]:
        restored = load_training_checkpoint(
            out / name,
            abstract(states["model"]),
            abstract(states["optimizer"]),
            abstract(states["rng"]),
            auxiliary_target,
            iterator,
            **kwargs,
        )
        return {
            "step": tag(restored.step),
            "parts": {part: tag_tree(getattr(restored, part)) for part in ("model", "optimizer", "rng", "auxiliary")},
            "batches": take(restored.iterator, BATCHES_AFTER_SAVE),
        }

    def data_iterator() -> Any:
        return iter(data.training_batches(data_pipeline_dataset(), **data_pipeline_arguments()))

    auxiliary_target = abstract(states["auxiliary"])
    training["plain"] = {"batches_after_save": save_training("training_plain", plain_iterator(), states["auxiliary"])}
    training["plain"]["reloaded"] = reload("training_plain", plain_iterator(), auxiliary_target)
    training["data"] = {"batches_after_save": save_training("training_data", data_iterator(), states["auxiliary"])}
    training["data"]["reloaded"] = reload("training_data", data_iterator(), auxiliary_target)
    training["no_auxiliary"] = {"batches_after_save": save_training("training_no_auxiliary", plain_iterator(), None)}
    training["no_auxiliary"]["reloaded"] = reload("training_no_auxiliary", plain_iterator(), None)
    names = TrainingCheckpointNames(model="step", optimizer="adam", rng="keys", auxiliary="extra", iterator="data")
    training["names"] = {
        "batches_after_save": save_training("training_names", plain_iterator(), states["auxiliary"], names=names)
    }
    training["names"]["reloaded"] = reload("training_names", plain_iterator(), auxiliary_target, names=names)
    training["layout"] = {
        name: sorted(entry.name for entry in (out / name).iterdir() if entry.is_dir())
        for name in ("training_plain", "training_names")
    }
    results["training"] = training

    # Legacy V0 checkpoints.
    save_legacy_v0_pytree(out / "v0_pytree", v0_state())
    save_legacy_v0_pytree(out / "v0_bare", np.arange(5, dtype=np.int32))
    iterator = plain_iterator()
    for _ in range(ITERATOR_STEPS_BEFORE_SAVE):
        next(iterator)
    save_legacy_v0_grain_iterator(out / "v0_iterator", iterator)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Orbax warns that it reads shardings from the checkpoint.
        untargeted = load_legacy_v0_pytree(out / "v0_pytree")
    results["v0"] = {
        "saved": tag_tree(v0_state()),
        "loaded_into_target": tag_tree(load_legacy_v0_pytree(out / "v0_pytree", v0_target())),
        "loaded_without_target": tag_tree(untargeted),
        "bare": tag_tree(load_legacy_v0_pytree(out / "v0_bare", np.zeros(5, np.int32))),
        "iterator_batches_after_save": take(iterator, BATCHES_AFTER_SAVE),
        "iterator_reloaded": take(
            load_legacy_v0_grain_iterator(out / "v0_iterator", plain_iterator()), BATCHES_AFTER_SAVE
        ),
    }

    # Folders named like Orbax's unfinished saves, and calls 0.2 refused.
    temporary = out / "temporary"
    temporary.mkdir()
    shutil.copytree(out / "v1_mixed", temporary / f"v1_mixed{TEMPORARY_SUFFIX}")
    shutil.copytree(out / "v0_pytree", temporary / f"v0_pytree{TEMPORARY_SUFFIX}")
    scratch = out / "scratch"
    scratch.mkdir()
    value = {"value": np.arange(2)}
    results["errors"] = {
        "v1_load_temporary": outcome(
            lambda: load_checkpointables(temporary / f"v1_mixed{TEMPORARY_SUFFIX}", {"host": {"table": np.ndarray}})
        ),
        "v0_load_temporary": outcome(lambda: load_legacy_v0_pytree(temporary / f"v0_pytree{TEMPORARY_SUFFIX}")),
        "v1_save_temporary": outcome(lambda: save_checkpointables(scratch / f"a{TEMPORARY_SUFFIX}", {"s": value})),
        "training_save_temporary": outcome(
            lambda: save_training_checkpoint(
                scratch / f"b{TEMPORARY_SUFFIX}", 1, {"w": 1}, {"w": 1}, {"w": 1}, {}, plain_iterator()
            )
        ),
        "v0_save_temporary": outcome(lambda: save_legacy_v0_pytree(scratch / f"c{TEMPORARY_SUFFIX}", value)),
        "v0_iterator_save_temporary": outcome(
            lambda: save_legacy_v0_grain_iterator(scratch / f"d{TEMPORARY_SUFFIX}", plain_iterator())
        ),
        "v1_save_existing": outcome(lambda: save_checkpointables(out / "v1_mixed", {"s": value})),
        "v0_save_existing": outcome(lambda: save_legacy_v0_pytree(out / "v0_pytree", value)),
        "v1_load_unknown_name": outcome(lambda: load_checkpointables(out / "v1_mixed", {"absent": {"value": 0}})),
        "v1_load_incompatible": outcome(lambda: load_checkpointables(out / "v1_mixed", {"scalars": {"step": 0}})),
        "v1_load_missing_path": outcome(lambda: load_checkpointables(out / "absent", {"s": {"value": 0}})),
        "training_load_other_names": outcome(
            lambda: load_training_checkpoint(out / "training_names", {}, {}, {}, {}, plain_iterator())
        ),
    }
    results["scratch_left"] = sorted(entry.name for entry in scratch.iterdir())
    shutil.rmtree(scratch)
    (out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
