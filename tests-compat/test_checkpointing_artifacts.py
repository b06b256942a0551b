"""tinax 0.3's ``tinax.checkpointing`` against the checkpoints tinax 0.2 wrote.

The checkpoints come from ``generators/gen_checkpointing.py``.

0.2 pinned Orbax 0.12.1, which commits a save by renaming its folder and
writes no ``commit_success.txt``; every checkpoint here is such a folder. For
each one, 0.3 must load what 0.2 loaded from it with the same targets (same
structure, leaf types, dtypes, layouts and bytes), and a restored iterator
must give the batches 0.2's gave. Folders named like Orbax's unfinished saves
must be refused, and for every call 0.2 refused, 0.3's exception must be an
instance of each built-in class 0.2's derived from. Checkpoints 0.3 writes
must in turn load under 0.2.

Only ``test_a_training_checkpoint_with_a_training_batches_iterator_resumes``
depends on ``tinax.data.training_batches`` giving 0.2's pipeline; the states
of that same checkpoint are checked without its iterator by
``test_the_states_of_every_training_checkpoint_load_without_the_iterator``.
"""

from __future__ import annotations

import builtins
import importlib.util
import json
import os
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

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

GENERATOR = Path(__file__).resolve().parent / "generators" / "gen_checkpointing.py"


def _load_generator() -> Any:
    spec = importlib.util.spec_from_file_location("gen_checkpointing", GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()
NAMES = TrainingCheckpointNames(model="step", optimizer="adam", rng="keys", auxiliary="extra", iterator="data")


@pytest.fixture(scope="module")
def checkpoints02(artifacts02: Path) -> Path:
    """The folder gen_checkpointing.py wrote under tinax 0.2."""
    return artifacts02 / "checkpointing"


@pytest.fixture(scope="module")
def results(checkpoints02: Path) -> dict[str, Any]:
    """What 0.2 saved, loaded and raised."""
    return json.loads((checkpoints02 / "results.json").read_text())


@pytest.fixture(scope="module")
def states() -> dict[str, Any]:
    """The live training states the generator saved, rebuilt here for their targets."""
    return gen.training_states()


def assert_is_instance_of_02_error(error: BaseException | None, classes02: list[str] | None) -> None:
    """Checks that our error is an instance of every built-in class 0.2's error derived from."""
    if classes02 is None:
        assert error is None, f"0.2 accepted this call, 0.3 raised {error!r}"
        return
    assert error is not None, f"0.2 raised {classes02[0]}, 0.3 raised nothing"
    for name in classes02:
        module, _, qualname = name.rpartition(".")
        if module == "builtins":
            assert isinstance(error, getattr(builtins, qualname)), (type(error).__mro__, classes02)


def raised(function: Callable[[], Any]) -> BaseException | None:
    try:
        function()
    except Exception as error:
        return error
    return None


# ---------------------------------------------------------------------------
# Orbax V1 checkpointables


def test_a_v1_checkpoint_of_02_loads_without_a_commit_marker(checkpoints02: Path, results: dict[str, Any]) -> None:
    assert "commit_success.txt" not in results["v1_mixed"]["files"]  # Orbax 0.12.1 writes none.
    loaded = load_checkpointables(checkpoints02 / "v1_mixed", gen.v1_targets())
    assert {name: gen.tag_tree(value) for name, value in loaded.items()} == results["v1_mixed"]["loaded"]


def test_a_v1_checkpoint_of_02_loads_its_values_as_saved(checkpoints02: Path, results: dict[str, Any]) -> None:
    # With targets that keep each saved layout, every leaf comes back exactly as 0.2 saved it.
    state = gen.v1_state()
    loaded = load_checkpointables(checkpoints02 / "v1_mixed", gen.abstract(state))
    assert {name: gen.tag_tree(value) for name, value in loaded.items()} == results["v1_mixed"]["saved"]


def test_a_subset_of_a_v1_checkpoint_of_02_loads(checkpoints02: Path, results: dict[str, Any]) -> None:
    targets = gen.v1_targets()
    loaded = load_checkpointables(checkpoints02 / "v1_mixed", {"scalars": targets["scalars"]})
    assert gen.tag_tree(loaded["scalars"]) == results["v1_mixed"]["loaded"]["scalars"]


# ---------------------------------------------------------------------------
# Training checkpoints


def _targets(states: dict[str, Any], auxiliary: Any) -> list[Any]:
    return [gen.abstract(states["model"]), gen.abstract(states["optimizer"]), gen.abstract(states["rng"]), auxiliary]


def _reloaded(restored: Any) -> dict[str, Any]:
    return {
        "step": gen.tag(restored.step),
        "parts": {part: gen.tag_tree(getattr(restored, part)) for part in ("model", "optimizer", "rng", "auxiliary")},
        "batches": gen.take(restored.iterator, gen.BATCHES_AFTER_SAVE),
    }


@pytest.mark.parametrize(
    ("case", "folder", "names"),
    [
        ("plain", "training_plain", None),
        ("data", "training_data", None),
        ("no_auxiliary", "training_no_auxiliary", None),
        ("names", "training_names", NAMES),
    ],
)
def test_the_states_of_every_training_checkpoint_load_without_the_iterator(
    checkpoints02: Path,
    results: dict[str, Any],
    states: dict[str, Any],
    case: str,
    folder: str,
    names: TrainingCheckpointNames | None,
) -> None:
    # 0.2's layout: the step sits next to the auxiliary state in the auxiliary part.
    chosen = names or TrainingCheckpointNames()
    auxiliary = None if case == "no_auxiliary" else gen.abstract(states["auxiliary"])
    model, optimizer, rng, _ = _targets(states, auxiliary)
    loaded = load_checkpointables(
        checkpoints02 / folder,
        {
            chosen.model: model,
            chosen.optimizer: optimizer,
            chosen.rng: rng,
            chosen.auxiliary: {"state": auxiliary, "step": 0},
        },
    )
    expected = results["training"][case]["reloaded"]
    assert gen.tag(loaded[chosen.auxiliary]["step"]) == expected["step"] == ["int", str(gen.TRAINING_STEP)]
    assert gen.tag_tree(loaded[chosen.model]) == expected["parts"]["model"]
    assert gen.tag_tree(loaded[chosen.optimizer]) == expected["parts"]["optimizer"]
    assert gen.tag_tree(loaded[chosen.rng]) == expected["parts"]["rng"]
    assert gen.tag_tree(loaded[chosen.auxiliary]["state"]) == expected["parts"]["auxiliary"]
    if case != "no_auxiliary":
        assert expected["parts"]["model"] == results["training"]["saved"]["model"]
        assert expected["parts"]["auxiliary"] == results["training"]["saved"]["auxiliary"]


@pytest.mark.parametrize(
    ("case", "folder", "names"),
    [
        ("plain", "training_plain", None),
        ("no_auxiliary", "training_no_auxiliary", None),
        ("names", "training_names", NAMES),
    ],
)
def test_a_training_checkpoint_with_a_grain_iterator_resumes(
    checkpoints02: Path,
    results: dict[str, Any],
    states: dict[str, Any],
    case: str,
    folder: str,
    names: TrainingCheckpointNames | None,
) -> None:
    auxiliary = None if case == "no_auxiliary" else gen.abstract(states["auxiliary"])
    restored = load_training_checkpoint(
        checkpoints02 / folder, *_targets(states, auxiliary), gen.plain_iterator(), names=names
    )
    expected = results["training"][case]
    assert _reloaded(restored) == expected["reloaded"]
    assert expected["reloaded"]["batches"] == expected["batches_after_save"]


def test_a_training_checkpoint_with_a_training_batches_iterator_resumes(
    checkpoints02: Path, results: dict[str, Any], states: dict[str, Any]
) -> None:
    # Depends on tinax.data.training_batches building 0.2's pipeline, whose
    # iterator state this checkpoint holds.
    from tinax.data import training_batches

    iterator = iter(training_batches(gen.data_pipeline_dataset(), **gen.data_pipeline_arguments()))
    restored = load_training_checkpoint(
        checkpoints02 / "training_data", *_targets(states, gen.abstract(states["auxiliary"])), iterator
    )
    expected = results["training"]["data"]
    assert _reloaded(restored) == expected["reloaded"]
    assert expected["reloaded"]["batches"] == expected["batches_after_save"]


def test_training_checkpoints_are_written_in_the_layout_of_02(
    tmp_path: Path, results: dict[str, Any], states: dict[str, Any]
) -> None:
    for folder, names in (("training_plain", None), ("training_names", NAMES)):
        save_training_checkpoint(
            tmp_path / folder,
            gen.TRAINING_STEP,
            states["model"],
            states["optimizer"],
            states["rng"],
            states["auxiliary"],
            gen.plain_iterator(),
            names=names,
        ).result()
        parts = sorted(entry.name for entry in (tmp_path / folder).iterdir() if entry.is_dir())
        assert parts == results["training"]["layout"][folder]


# ---------------------------------------------------------------------------
# Legacy V0


def test_a_v0_pytree_of_02_loads_into_a_target(checkpoints02: Path, results: dict[str, Any]) -> None:
    loaded = load_legacy_v0_pytree(checkpoints02 / "v0_pytree", gen.v0_target())
    assert gen.tag_tree(loaded) == results["v0"]["loaded_into_target"]


def test_a_v0_pytree_of_02_loads_without_a_target(checkpoints02: Path, results: dict[str, Any]) -> None:
    with warnings.catch_warnings():
        # Orbax warns that it reads the shardings from the checkpoint, under 0.2 as well.
        warnings.filterwarnings("ignore", "Sharding info not provided when restoring", UserWarning)
        loaded = load_legacy_v0_pytree(checkpoints02 / "v0_pytree")
    assert gen.tag_tree(loaded) == results["v0"]["loaded_without_target"]


def test_a_bare_v0_leaf_of_02_loads(checkpoints02: Path, results: dict[str, Any]) -> None:
    loaded = load_legacy_v0_pytree(checkpoints02 / "v0_bare", np.zeros(5, np.int32))
    assert gen.tag_tree(loaded) == results["v0"]["bare"]


def test_a_v0_iterator_of_02_resumes(checkpoints02: Path, results: dict[str, Any]) -> None:
    restored = load_legacy_v0_grain_iterator(checkpoints02 / "v0_iterator", gen.plain_iterator())
    assert gen.take(restored, gen.BATCHES_AFTER_SAVE) == results["v0"]["iterator_batches_after_save"]


# ---------------------------------------------------------------------------
# What 0.2 refused


def test_folders_named_like_unfinished_orbax_saves_are_refused(checkpoints02: Path, results: dict[str, Any]) -> None:
    temporary = checkpoints02 / "temporary"
    v1 = temporary / f"v1_mixed{gen.TEMPORARY_SUFFIX}"
    v0 = temporary / f"v0_pytree{gen.TEMPORARY_SUFFIX}"
    error = raised(lambda: load_checkpointables(v1, {"host": {"table": np.ndarray}}))
    assert isinstance(error, ValueError)
    assert "has not finished" in str(error)
    assert_is_instance_of_02_error(error, results["errors"]["v1_load_temporary"]["error"])
    error = raised(lambda: load_legacy_v0_pytree(v0))
    assert isinstance(error, ValueError)
    assert "has not finished" in str(error)
    assert_is_instance_of_02_error(error, results["errors"]["v0_load_temporary"]["error"])


def test_every_call_02_refused_is_refused_with_an_instance_of_its_exception(
    checkpoints02: Path, results: dict[str, Any], tmp_path: Path
) -> None:
    value = {"value": np.arange(2)}
    suffix = gen.TEMPORARY_SUFFIX
    calls: dict[str, Callable[[], Any]] = {
        "v1_save_temporary": lambda: save_checkpointables(tmp_path / f"a{suffix}", {"s": value}),
        "training_save_temporary": lambda: save_training_checkpoint(
            tmp_path / f"b{suffix}", 1, {"w": 1}, {"w": 1}, {"w": 1}, {}, gen.plain_iterator()
        ),
        "v0_save_temporary": lambda: save_legacy_v0_pytree(tmp_path / f"c{suffix}", value),
        "v0_iterator_save_temporary": lambda: save_legacy_v0_grain_iterator(
            tmp_path / f"d{suffix}", gen.plain_iterator()
        ),
        "v1_save_existing": lambda: save_checkpointables(checkpoints02 / "v1_mixed", {"s": value}),
        "v0_save_existing": lambda: save_legacy_v0_pytree(checkpoints02 / "v0_pytree", value),
        "v1_load_unknown_name": lambda: load_checkpointables(checkpoints02 / "v1_mixed", {"absent": {"value": 0}}),
        "v1_load_incompatible": lambda: load_checkpointables(checkpoints02 / "v1_mixed", {"scalars": {"step": 0}}),
        "v1_load_missing_path": lambda: load_checkpointables(checkpoints02 / "absent", {"s": {"value": 0}}),
        "training_load_other_names": lambda: load_training_checkpoint(
            checkpoints02 / "training_names", {}, {}, {}, {}, gen.plain_iterator()
        ),
    }
    assert set(calls) | {"v1_load_temporary", "v0_load_temporary"} == set(results["errors"])
    for name, call in calls.items():
        assert_is_instance_of_02_error(raised(call), results["errors"][name]["error"])
    assert sorted(entry.name for entry in tmp_path.iterdir()) == results["scratch_left"] == []


# ---------------------------------------------------------------------------
# What 0.3 writes, read back by 0.2

_READ_UNDER_02 = """
import importlib.util, json, sys, warnings
from pathlib import Path
spec = importlib.util.spec_from_file_location("gen_checkpointing", sys.argv[1])
gen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen)
from tinax.checkpointing import load_training_checkpoint
from tinax.checkpointing.legacy.v0 import load_legacy_v0_grain_iterator, load_legacy_v0_pytree
root = Path(sys.argv[2])
states = gen.training_states()
restored = load_training_checkpoint(
    root / "training", gen.abstract(states["model"]), gen.abstract(states["optimizer"]), gen.abstract(states["rng"]),
    gen.abstract(states["auxiliary"]), gen.plain_iterator(),
)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    untargeted = load_legacy_v0_pytree(root / "v0_pytree")
print(json.dumps({
    "training": {
        "step": gen.tag(restored.step),
        "parts": {part: gen.tag_tree(getattr(restored, part)) for part in ("model", "optimizer", "rng", "auxiliary")},
        "batches": gen.take(restored.iterator, gen.BATCHES_AFTER_SAVE),
    },
    "v0_into_target": gen.tag_tree(load_legacy_v0_pytree(root / "v0_pytree", gen.v0_target())),
    "v0_without_target": gen.tag_tree(untargeted),
    "v0_iterator": gen.take(
        load_legacy_v0_grain_iterator(root / "v0_iterator", gen.plain_iterator()), gen.BATCHES_AFTER_SAVE
    ),
}))
"""


def test_checkpoints_03_writes_load_under_02(
    tinax02_python: Path, tmp_path: Path, results: dict[str, Any], states: dict[str, Any]
) -> None:
    iterator = gen.plain_iterator()
    for _ in range(gen.ITERATOR_STEPS_BEFORE_SAVE):
        next(iterator)
    save_training_checkpoint(
        tmp_path / "training",
        gen.TRAINING_STEP,
        states["model"],
        states["optimizer"],
        states["rng"],
        states["auxiliary"],
        iterator,
    ).result()
    save_legacy_v0_pytree(tmp_path / "v0_pytree", gen.v0_state())
    iterator = gen.plain_iterator()
    for _ in range(gen.ITERATOR_STEPS_BEFORE_SAVE):
        next(iterator)
    save_legacy_v0_grain_iterator(tmp_path / "v0_iterator", iterator)

    environment = {
        key: value for key, value in os.environ.items() if not key.startswith(("PYTHONPATH", "XLA_", "JAX_"))
    }
    environment.update({"JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "8"})
    completed = subprocess.run(
        [str(tinax02_python), "-c", _READ_UNDER_02, str(GENERATOR), str(tmp_path)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-6000:]
    read02 = json.loads(completed.stdout.strip().splitlines()[-1])

    assert read02["training"] == results["training"]["plain"]["reloaded"]
    assert read02["v0_into_target"] == results["v0"]["loaded_into_target"]
    assert read02["v0_without_target"] == results["v0"]["loaded_without_target"]
    assert read02["v0_iterator"] == results["v0"]["iterator_batches_after_save"]
