"""Tests for tinax.checkpointing.legacy.v0: Orbax V0 pytrees and grain iterator checkpoints."""

from __future__ import annotations

import importlib
import json
import pathlib
import shutil
import subprocess
import sys
from importlib import metadata
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import tinax.checkpointing
import tinax.checkpointing.legacy
import tinax.checkpointing.legacy.v0
from tinax.checkpointing.legacy.v0 import (
    load_legacy_v0_grain_iterator,
    load_legacy_v0_pytree,
    save_legacy_v0_grain_iterator,
    save_legacy_v0_pytree,
)
from tinax_testing import import_side_effects, parameter_summary

LEGACY_NAMES = [
    "load_legacy_v0_grain_iterator",
    "load_legacy_v0_pytree",
    "save_legacy_v0_grain_iterator",
    "save_legacy_v0_pytree",
]


def mesh() -> Mesh:
    return Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))


def sample_state() -> dict[str, Any]:
    sharded = jax.device_put(
        jnp.arange(32, dtype=jnp.float32).reshape(4, 8), NamedSharding(mesh(), PartitionSpec("data", "model"))
    )
    return {
        "params": {"kernel": sharded, "bias": np.arange(3, dtype=np.int32)},
        "step": 7,
        "scale": 0.5,
        "key": jax.random.key(3),
    }


def abstract_target(state: dict[str, Any]) -> dict[str, Any]:
    replicated = NamedSharding(mesh(), PartitionSpec())

    def leaf(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            return np.zeros_like(value)
        if isinstance(value, jax.Array):
            return jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=replicated)
        return type(value)(0)

    return jax.tree.map(leaf, state)


def assert_same_state(restored: dict[str, Any], expected: dict[str, Any]) -> None:
    np.testing.assert_array_equal(np.asarray(restored["params"]["kernel"]), np.asarray(expected["params"]["kernel"]))
    np.testing.assert_array_equal(restored["params"]["bias"], expected["params"]["bias"])
    assert int(restored["step"]) == expected["step"]
    assert float(restored["scale"]) == expected["scale"]
    np.testing.assert_array_equal(jax.random.key_data(restored["key"]), jax.random.key_data(expected["key"]))


def staging_leftovers(folder: pathlib.Path) -> list[str]:
    return sorted(entry.name for entry in folder.iterdir() if ".orbax-checkpoint-tmp" in entry.name)


def batches_dataset() -> grain.MapDataset:
    return grain.MapDataset.source(list(range(40))).shuffle(seed=11).batch(4)


def take(iterator: Any, count: int) -> list[list[int]]:
    return [np.asarray(next(iterator)).tolist() for _ in range(count)]


class StatelessIterator(grain.DatasetIterator):
    """A user-written iterator whose position cannot be taken."""

    def __init__(self) -> None:
        super().__init__()
        self._next = 0

    def __next__(self) -> int:
        self._next += 1
        return self._next

    def get_state(self) -> dict[str, Any]:
        raise ValueError("this iterator keeps no position")

    def set_state(self, state: dict[str, Any]) -> None:
        raise ValueError("this iterator keeps no position")


# --- namespace and surface ----------------------------------------------------------------------------------------


def test_the_subpackage_exports_exactly_the_legacy_functions() -> None:
    assert tinax.checkpointing.legacy.v0.__all__ == LEGACY_NAMES


@pytest.mark.parametrize("name", LEGACY_NAMES)
def test_legacy_names_are_not_reexported_by_the_parent_packages(name: str) -> None:
    assert not hasattr(tinax.checkpointing, name)
    assert name not in tinax.checkpointing.__all__
    assert not hasattr(tinax.checkpointing.legacy, name)
    assert tinax.checkpointing.legacy.__all__ == []


@pytest.mark.parametrize("name", LEGACY_NAMES)
def test_every_docstring_says_legacy_only(name: str) -> None:
    docstring = getattr(tinax.checkpointing.legacy.v0, name).__doc__
    assert docstring.startswith("Legacy only:")
    assert "Do not use this for new checkpoints" in docstring


def test_module_docstring_says_legacy_only() -> None:
    docstring = tinax.checkpointing.legacy.v0.__doc__
    assert docstring.startswith("Legacy only:")
    assert "Do not use this module for new checkpoints" in docstring


@pytest.mark.parametrize(
    ("name", "parameters"),
    [
        ("save_legacy_v0_pytree", [("path", "POSITIONAL_OR_KEYWORD", None), ("state", "POSITIONAL_OR_KEYWORD", None)]),
        ("load_legacy_v0_pytree", [("path", "POSITIONAL_OR_KEYWORD", None), ("target", "POSITIONAL_OR_KEYWORD", None)]),
        ("save_legacy_v0_grain_iterator", [("path", "POSITIONAL_OR_KEYWORD", None),
                                           ("iterator", "POSITIONAL_OR_KEYWORD", None)]),
        ("load_legacy_v0_grain_iterator", [("path", "POSITIONAL_OR_KEYWORD", None),
                                           ("iterator", "POSITIONAL_OR_KEYWORD", None)]),
    ],
)  # fmt: skip
def test_signatures_match_the_compatible_surface(name: str, parameters: list[tuple[str, str, object]]) -> None:
    assert parameter_summary(getattr(tinax.checkpointing.legacy.v0, name)) == parameters


@pytest.mark.parametrize("module", ["tinax.checkpointing.legacy", "tinax.checkpointing.legacy.v0"])
def test_importing_the_legacy_modules_is_inert(module: str) -> None:
    assert import_side_effects(module) == {"backends_initialized": False, "integrations": []}


@pytest.mark.parametrize("module", ["tinax.checkpointing.legacy", "tinax.checkpointing.legacy.v0"])
def test_the_legacy_modules_have_the_version_of_tinax_checkpointing(module: str) -> None:
    imported = importlib.import_module(module)
    assert imported.__version__ == metadata.version("tinax-checkpointing") == tinax.checkpointing.__version__
    # Not a public name, as in every public module.
    assert "__version__" not in imported.__all__
    # Also when the legacy module is the first thing a fresh interpreter imports.
    code = f"import {module} as m; print(m.__version__)"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == imported.__version__


# --- pytrees: round trips and interoperability with Orbax's own V0 API -------------------------------------------


def test_pytree_round_trip_restores_values_onto_the_target_shardings(tmp_path: pathlib.Path) -> None:
    state = sample_state()
    target = abstract_target(state)
    save_legacy_v0_pytree(tmp_path / "checkpoint", state)

    restored = load_legacy_v0_pytree(tmp_path / "checkpoint", target)

    assert_same_state(restored, state)
    assert restored["params"]["kernel"].sharding == target["params"]["kernel"].sharding
    assert isinstance(restored["params"]["bias"], np.ndarray)


# Orbax warns that it reads the shardings from the checkpoint when no target
# gives them; tinax 0.2's loads without a target warned the same way.
@pytest.mark.filterwarnings("ignore:Sharding info not provided when restoring:UserWarning")
def test_pytree_without_target_restores_the_saved_layout(tmp_path: pathlib.Path) -> None:
    state = sample_state()
    save_legacy_v0_pytree(str(tmp_path / "checkpoint"), state)

    restored = load_legacy_v0_pytree(str(tmp_path / "checkpoint"))

    assert_same_state(restored, state)
    assert restored["params"]["kernel"].sharding == state["params"]["kernel"].sharding


def test_pytree_save_is_committed_when_it_returns(tmp_path: pathlib.Path) -> None:
    save_legacy_v0_pytree(tmp_path / "checkpoint", {"weights": np.ones(4, np.float32)})

    # Committed by renaming the staging folder (and, from Orbax 0.12.8 on, with commit_success.txt).
    assert (tmp_path / "checkpoint" / "_METADATA").is_file()
    assert staging_leftovers(tmp_path) == []


def test_strings_none_numpy_scalars_and_bare_leaves_round_trip_as_in_tinax_02(tmp_path: pathlib.Path) -> None:
    # tinax 0.2 saved through Orbax's pytree handler: strings and None are
    # kept, and NumPy number scalars come back as Python scalars.
    state = {"name": "mlp", "nothing": None, "scale": np.float32(0.5), "count": np.int64(3), "flag": True}
    save_legacy_v0_pytree(tmp_path / "state", state)

    for target in (None, {"name": "", "nothing": None, "scale": 0.0, "count": 0, "flag": False}):
        restored = load_legacy_v0_pytree(tmp_path / "state", target)
        assert restored == {"name": "mlp", "nothing": None, "scale": 0.5, "count": 3, "flag": True}
        assert [type(restored[key]) for key in ("name", "scale", "count", "flag")] == [str, float, int, bool]

    for index, leaf in enumerate([5, "only", np.arange(3)]):
        save_legacy_v0_pytree(tmp_path / f"bare-{index}", leaf)
        np.testing.assert_array_equal(load_legacy_v0_pytree(tmp_path / f"bare-{index}"), leaf)


def test_missing_parent_folders_are_created(tmp_path: pathlib.Path) -> None:
    save_legacy_v0_pytree(tmp_path / "runs" / "a" / "checkpoint", {"weights": np.ones(2)})
    save_legacy_v0_grain_iterator(tmp_path / "runs" / "b" / "iterator", iter(batches_dataset()))

    np.testing.assert_array_equal(load_legacy_v0_pytree(tmp_path / "runs" / "a" / "checkpoint")["weights"], np.ones(2))
    assert load_legacy_v0_grain_iterator(tmp_path / "runs" / "b" / "iterator", iter(batches_dataset()))


@pytest.mark.parametrize(
    "name", ["state.orbax-checkpoint-tmp", "state.orbax-checkpoint-tmp-1", "state.ORBAX-CHECKPOINT-TMP-2/."]
)
def test_a_destination_named_like_an_orbax_temporary_folder_is_refused(tmp_path: pathlib.Path, name: str) -> None:
    # Orbax would take it for a crashed save and delete it on the next save to "state".
    with pytest.raises(ValueError, match="reserved temporary suffix"):
        save_legacy_v0_pytree(f"{tmp_path}/{name}", {"value": 1})
    with pytest.raises(ValueError, match="reserved temporary suffix"):
        save_legacy_v0_grain_iterator(f"{tmp_path}/{name}", iter(batches_dataset()))
    assert list(tmp_path.iterdir()) == []


def test_a_folder_named_like_an_orbax_temporary_folder_is_not_loaded(tmp_path: pathlib.Path) -> None:
    save_legacy_v0_pytree(tmp_path / "state", {"value": 1})
    staged = (tmp_path / "state").rename(tmp_path / "state.orbax-checkpoint-tmp-5")
    with pytest.raises(ValueError, match="save that has not finished"):
        load_legacy_v0_pytree(staged)


def test_a_relative_path_is_accepted(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    save_legacy_v0_pytree("relative", {"weights": np.arange(3)})

    restored = load_legacy_v0_pytree("relative", {"weights": np.zeros(3, np.int64)})

    np.testing.assert_array_equal(restored["weights"], np.arange(3))


def test_a_checkpoint_we_write_loads_with_orbax_standard_checkpointer(tmp_path: pathlib.Path) -> None:
    state = sample_state()
    save_legacy_v0_pytree(tmp_path / "checkpoint", state)

    with ocp.StandardCheckpointer() as checkpointer:
        restored = checkpointer.restore(tmp_path / "checkpoint", abstract_target(state))

    assert_same_state(restored, state)


def test_a_checkpoint_orbax_standard_checkpointer_wrote_loads(tmp_path: pathlib.Path) -> None:
    state = sample_state()
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "checkpoint", state)
        checkpointer.wait_until_finished()

    restored = load_legacy_v0_pytree(tmp_path / "checkpoint", abstract_target(state))

    assert_same_state(restored, state)


def test_a_checkpoint_orbax_pytree_checkpointer_wrote_loads(tmp_path: pathlib.Path) -> None:
    state = sample_state()
    with ocp.PyTreeCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "checkpoint", args=ocp.args.PyTreeSave(state))

    assert_same_state(load_legacy_v0_pytree(tmp_path / "checkpoint", abstract_target(state)), state)


def test_items_of_an_orbax_checkpoint_manager_step_load(tmp_path: pathlib.Path) -> None:
    # The layout of an older training pipeline: <root>/<step>/<item>.
    state = sample_state()
    iterator = iter(batches_dataset())
    take(iterator, 3)
    options = ocp.CheckpointManagerOptions(enable_async_checkpointing=False)
    with ocp.CheckpointManager(tmp_path / "run", options=options) as manager:
        manager.save(
            12,
            args=ocp.args.Composite(state=ocp.args.StandardSave(state), data=grain.checkpoint.CheckpointSave(iterator)),
        )
    expected_batches = take(iterator, 2)
    fresh = iter(batches_dataset())

    restored_state = load_legacy_v0_pytree(tmp_path / "run" / "12" / "state", abstract_target(state))
    restored_iterator = load_legacy_v0_grain_iterator(tmp_path / "run" / "12" / "data", fresh)

    assert_same_state(restored_state, state)
    assert restored_iterator is fresh
    assert take(fresh, 2) == expected_batches


# --- pytrees: errors ----------------------------------------------------------------------------------------------


def test_an_existing_destination_is_refused_and_kept(tmp_path: pathlib.Path) -> None:
    save_legacy_v0_pytree(tmp_path / "checkpoint", {"weights": np.ones(2, np.float32)})

    with pytest.raises(FileExistsError, match="path must not exist yet") as raised:
        save_legacy_v0_pytree(tmp_path / "checkpoint", {"weights": np.zeros(2, np.float32)})
    assert isinstance(raised.value, ValueError)  # What tinax 0.2 (Orbax) raised.

    np.testing.assert_array_equal(load_legacy_v0_pytree(tmp_path / "checkpoint")["weights"], np.ones(2))


def test_an_existing_file_destination_is_refused(tmp_path: pathlib.Path) -> None:
    (tmp_path / "taken").write_text("keep me")

    with pytest.raises(FileExistsError, match="already exists"):
        save_legacy_v0_pytree(tmp_path / "taken", {"weights": np.ones(2)})
    assert (tmp_path / "taken").read_text() == "keep me"


@pytest.mark.parametrize("path", [b"/tmp/bytes", 3, None])
def test_a_path_of_the_wrong_kind_is_a_type_error(path: object) -> None:
    with pytest.raises(TypeError, match="path must be a str or os.PathLike"):
        save_legacy_v0_pytree(path, {"weights": np.ones(2)})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="path must be a str or os.PathLike"):
        load_legacy_v0_pytree(path)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("state", "location"),
    [
        ({"weights": np.ones(2), "raw": b"bytes"}, r"state\['raw'\]"),
        ({"weights": [np.ones(2), 1 + 2j]}, r"state\['weights'\]\[1\]"),
        ({"weights": np.ones(2), "callback": print}, r"state\['callback'\]"),
        ({"weights": np.ones(2), "flag": np.bool_(True)}, r"state\['flag'\]"),
        ({"weights": np.array([object()])}, r"state\['weights'\]"),
    ],
)
def test_a_leaf_orbax_cannot_save_is_a_type_error_naming_it(
    tmp_path: pathlib.Path, state: dict[str, Any], location: str
) -> None:
    with pytest.raises(TypeError, match=f"{location} must be a jax.Array, a numpy array, a NumPy number") as raised:
        save_legacy_v0_pytree(tmp_path / "checkpoint", state)
    assert isinstance(raised.value, ValueError)  # What tinax 0.2 (Orbax) raised.
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("state", [{}, [], None])
def test_a_state_that_is_none_or_an_empty_container_is_a_value_error(tmp_path: pathlib.Path, state: object) -> None:
    with pytest.raises(ValueError, match="state must be a pytree that is neither None nor an empty container"):
        save_legacy_v0_pytree(tmp_path / "checkpoint", state)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("state", [{"nothing": None}, {"a": {}, "b": None}], ids=["none-entry", "empty-entries"])
def test_a_state_without_leaves_that_is_no_empty_container_round_trips(tmp_path: pathlib.Path, state: object) -> None:
    # tinax 0.2 (Orbax) saved these; only an empty or None state was refused.
    save_legacy_v0_pytree(tmp_path / "checkpoint", state)
    assert load_legacy_v0_pytree(tmp_path / "checkpoint", state) == state


def test_loading_a_missing_path_is_file_not_found(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_legacy_v0_pytree(tmp_path / "absent")


def test_loading_a_file_is_a_value_error(tmp_path: pathlib.Path) -> None:
    (tmp_path / "file").write_text("not a checkpoint")
    with pytest.raises(ValueError, match="not a directory"):
        load_legacy_v0_pytree(tmp_path / "file")


def test_loading_a_folder_that_is_no_checkpoint_is_a_value_error_and_file_not_found(tmp_path: pathlib.Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="could not be loaded as a legacy V0 pytree checkpoint") as raised:
        load_legacy_v0_pytree(tmp_path / "empty")
    assert raised.value.__cause__ is not None
    assert isinstance(raised.value, FileNotFoundError)  # What tinax 0.2 (Orbax) raised.
    with pytest.raises(ValueError, match="not a complete legacy V0 pytree checkpoint") as raised:
        load_legacy_v0_pytree(tmp_path / "empty", {"weights": np.zeros(2)})
    assert isinstance(raised.value, FileNotFoundError)


def test_loading_an_iterator_checkpoint_as_a_pytree_is_a_value_error(tmp_path: pathlib.Path) -> None:
    save_legacy_v0_grain_iterator(tmp_path / "iterator", iter(batches_dataset()))
    with pytest.raises(ValueError, match="legacy V0 pytree checkpoint"):
        load_legacy_v0_pytree(tmp_path / "iterator")


@pytest.mark.parametrize(
    "target",
    [
        {"weights": np.zeros(4, np.float32)},
        {"weights": np.zeros(4, np.float32), "bias": np.zeros(2, np.float32), "extra": np.zeros(1, np.float32)},
        {"weights": np.zeros(4, np.float32), "bias": {"nested": np.zeros(2, np.float32)}},
    ],
    ids=["missing-leaf", "unknown-leaf", "other-structure"],
)
def test_a_target_of_another_structure_is_a_value_error(tmp_path: pathlib.Path, target: dict[str, Any]) -> None:
    save_legacy_v0_pytree(tmp_path / "checkpoint", {"weights": np.ones(4, np.float32), "bias": np.ones(2, np.float32)})

    with pytest.raises(ValueError, match="could not be loaded into target") as raised:
        load_legacy_v0_pytree(tmp_path / "checkpoint", target)
    assert isinstance(raised.value.__cause__, ValueError)


@pytest.mark.parametrize(
    "target_leaf",
    [np.zeros(5, np.float32), jax.ShapeDtypeStruct((2, 2), jnp.float32), jnp.zeros(3, jnp.bfloat16)],
    ids=["numpy-longer", "struct-reshaped", "array-shorter-and-bfloat16"],
)
def test_a_target_leaf_of_another_shape_is_refused(tmp_path: pathlib.Path, target_leaf: object) -> None:
    save_legacy_v0_pytree(tmp_path / "checkpoint", {"weights": np.linspace(0, 1, 4, dtype=np.float32)})

    with pytest.raises(ValueError, match=r"target\['weights'\] must have the stored shape, that of float32\[4\]"):
        load_legacy_v0_pytree(tmp_path / "checkpoint", {"weights": target_leaf})


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, jnp.int32])
@pytest.mark.parametrize("kind", ["struct", "array", "numpy"])
def test_a_target_leaf_of_another_dtype_loads_the_values_cast_to_it(
    tmp_path: pathlib.Path, dtype: Any, kind: str
) -> None:
    # tinax 0.2 (Orbax) cast the stored values to the target's dtype, as the V1 loader does.
    stored = np.linspace(0, 3, 4, dtype=np.float32)
    save_legacy_v0_pytree(tmp_path / "checkpoint", {"weights": stored})
    device = jax.sharding.SingleDeviceSharding(jax.devices()[1])
    leaf: Any = {
        "struct": jax.ShapeDtypeStruct((4,), dtype, sharding=device),
        "array": jax.device_put(jnp.zeros(4, dtype), device),
        "numpy": np.zeros(4, dtype),
    }[kind]
    restored = load_legacy_v0_pytree(tmp_path / "checkpoint", {"weights": leaf})["weights"]
    assert restored.dtype == np.dtype(dtype)
    assert isinstance(restored, np.ndarray) == (kind == "numpy")
    if kind != "numpy":
        assert restored.sharding == device
    np.testing.assert_array_equal(np.asarray(restored), stored.astype(dtype))


@pytest.mark.parametrize("leaf", [object(), np.float32(0), np.bool_(False)])
def test_a_target_leaf_orbax_cannot_restore_into_is_a_type_error(tmp_path: pathlib.Path, leaf: object) -> None:
    save_legacy_v0_pytree(tmp_path / "checkpoint", {"weights": np.ones(2)})
    with pytest.raises(TypeError, match=r"target\['weights'\] must be a jax.Array") as raised:
        load_legacy_v0_pytree(tmp_path / "checkpoint", {"weights": leaf})
    assert isinstance(raised.value, ValueError)  # What tinax 0.2 (Orbax) raised.


# --- grain iterators ----------------------------------------------------------------------------------------------


def test_iterator_round_trip_resumes_at_the_saved_position(tmp_path: pathlib.Path) -> None:
    iterator = iter(batches_dataset())
    take(iterator, 3)
    save_legacy_v0_grain_iterator(tmp_path / "iterator", iterator)
    expected = take(iterator, 4)
    fresh = iter(batches_dataset())

    restored = load_legacy_v0_grain_iterator(tmp_path / "iterator", fresh)

    assert restored is fresh
    assert take(restored, 4) == expected


def test_saving_does_not_move_the_iterator(tmp_path: pathlib.Path) -> None:
    iterator = iter(batches_dataset())
    take(iterator, 2)
    untouched = iter(batches_dataset())
    take(untouched, 2)

    save_legacy_v0_grain_iterator(tmp_path / "iterator", iterator)

    assert take(iterator, 3) == take(untouched, 3)


def test_an_iterator_checkpoint_we_write_loads_with_grains_v0_handler(tmp_path: pathlib.Path) -> None:
    iterator = iter(batches_dataset())
    take(iterator, 5)
    save_legacy_v0_grain_iterator(tmp_path / "iterator", iterator)
    fresh = iter(batches_dataset())

    with ocp.Checkpointer(grain.checkpoint.CheckpointHandler()) as checkpointer:
        checkpointer.restore(tmp_path / "iterator", args=grain.checkpoint.CheckpointRestore(fresh))

    assert take(fresh, 3) == take(iterator, 3)
    assert json.loads((tmp_path / "iterator" / "process_0-of-1.json").read_text()) == {"next_index": 5}


def test_an_iterator_checkpoint_grains_v0_handler_wrote_loads(tmp_path: pathlib.Path) -> None:
    iterator = iter(batches_dataset())
    take(iterator, 6)
    with ocp.Checkpointer(grain.checkpoint.CheckpointHandler()) as checkpointer:
        checkpointer.save(tmp_path / "iterator", args=grain.checkpoint.CheckpointSave(iterator))
    fresh = iter(batches_dataset())

    load_legacy_v0_grain_iterator(tmp_path / "iterator", fresh)

    assert take(fresh, 3) == take(iterator, 3)


@pytest.mark.parametrize("iterator", [iter([1, 2, 3]), [1, 2], batches_dataset()], ids=["python", "list", "dataset"])
def test_something_other_than_a_dataset_iterator_is_a_type_error(tmp_path: pathlib.Path, iterator: object) -> None:
    with pytest.raises(TypeError, match="iterator must be a grain.DatasetIterator"):
        save_legacy_v0_grain_iterator(tmp_path / "iterator", iterator)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
    save_legacy_v0_grain_iterator(tmp_path / "iterator", iter(batches_dataset()))
    with pytest.raises(TypeError, match="iterator must be a grain.DatasetIterator"):
        load_legacy_v0_grain_iterator(tmp_path / "iterator", iterator)  # type: ignore[arg-type]


def test_an_existing_iterator_destination_is_refused_and_kept(tmp_path: pathlib.Path) -> None:
    iterator = iter(batches_dataset())
    save_legacy_v0_grain_iterator(tmp_path / "iterator", iterator)
    take(iterator, 4)

    with pytest.raises(FileExistsError, match="path must not exist yet") as raised:
        save_legacy_v0_grain_iterator(tmp_path / "iterator", iterator)
    assert isinstance(raised.value, ValueError)  # What tinax 0.2 (Orbax) raised.

    assert json.loads((tmp_path / "iterator" / "process_0-of-1.json").read_text()) == {"next_index": 0}


def test_a_failed_iterator_save_leaves_nothing_behind(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="could not be saved as a legacy V0 checkpoint") as raised:
        save_legacy_v0_grain_iterator(tmp_path / "iterator", StatelessIterator())

    assert "keeps no position" in str(raised.value.__cause__)
    assert list(tmp_path.iterdir()) == []


def test_loading_a_missing_iterator_checkpoint_is_file_not_found(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_legacy_v0_grain_iterator(tmp_path / "absent", iter(batches_dataset()))


def test_loading_a_pytree_checkpoint_as_an_iterator_is_a_value_error(tmp_path: pathlib.Path) -> None:
    save_legacy_v0_pytree(tmp_path / "checkpoint", {"weights": np.ones(2)})
    with pytest.raises(ValueError, match="could not be loaded into iterator") as raised:
        load_legacy_v0_grain_iterator(tmp_path / "checkpoint", iter(batches_dataset()))
    assert raised.value.__cause__ is not None


def test_a_state_written_by_another_process_count_is_a_value_error(tmp_path: pathlib.Path) -> None:
    save_legacy_v0_grain_iterator(tmp_path / "iterator", iter(batches_dataset()))
    (tmp_path / "iterator" / "process_0-of-1.json").rename(tmp_path / "iterator" / "process_0-of-2.json")

    with pytest.raises(ValueError, match="process_0-of-1.json"):
        load_legacy_v0_grain_iterator(tmp_path / "iterator", iter(batches_dataset()))


@pytest.mark.parametrize("content", ['{"unexpected": 1}', "not json"], ids=["foreign-state", "not-json"])
def test_a_state_that_does_not_fit_the_pipeline_is_a_value_error(tmp_path: pathlib.Path, content: str) -> None:
    save_legacy_v0_grain_iterator(tmp_path / "iterator", iter(batches_dataset()))
    (tmp_path / "iterator" / "process_0-of-1.json").write_text(content)

    with pytest.raises(ValueError, match="could not be loaded into iterator") as raised:
        load_legacy_v0_grain_iterator(tmp_path / "iterator", iter(batches_dataset()))
    assert raised.value.__cause__ is not None


def test_loading_an_iterator_from_a_file_is_a_value_error(tmp_path: pathlib.Path) -> None:
    (tmp_path / "file.json").write_text("{}")
    with pytest.raises(ValueError, match="not a directory"):
        load_legacy_v0_grain_iterator(tmp_path / "file.json", iter(batches_dataset()))


def test_staging_folders_of_other_saves_are_left_alone(tmp_path: pathlib.Path) -> None:
    # A crashed save of an unrelated pipeline stays where it is for its owner.
    unrelated = tmp_path / "other.orbax-checkpoint-tmp"
    unrelated.mkdir()
    with pytest.raises(ValueError, match="could not be saved"):
        save_legacy_v0_grain_iterator(tmp_path / "iterator", StatelessIterator())
    assert staging_leftovers(tmp_path) == ["other.orbax-checkpoint-tmp"]
    shutil.rmtree(unrelated)
