"""save_checkpointables, load_checkpointables and abstract_restore_target against real Orbax V1 checkpoints."""

from __future__ import annotations

import asyncio
import errno
import gc
import json
import os
import shutil
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from tinax.checkpointing import (
    abstract_restore_target,
    load_checkpointables,
    save_checkpointables,
    validate_checkpointable_name,
)
from tinax_testing import import_side_effects, parameter_summary

SAFETY_SECONDS = 120  # Only bounds a wait that a broken implementation would make endless.


def _mesh(shape: tuple[int, int]) -> jax.sharding.Mesh:
    return jax.make_mesh(shape, ("rows", "cols"), axis_types=(AxisType.Explicit,) * 2, devices=jax.devices())


def _state(mesh: jax.sharding.Mesh) -> dict[str, Any]:
    weights = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    bias = np.linspace(-1.0, 1.0, 16, dtype=np.float32)
    return {
        "weights": jax.device_put(weights, NamedSharding(mesh, PartitionSpec("rows", "cols"))),
        "bias": jax.device_put(bias, NamedSharding(mesh, PartitionSpec("rows"))),
        "key": jax.device_put(jax.random.key(7), NamedSharding(mesh, PartitionSpec())),
        "step": 12,
        "rate": 0.5,
        "host": np.arange(6, dtype=np.int64).reshape(2, 3),
        "tag": "run-a",
    }


def _host_values(state: dict[str, Any]) -> dict[str, Any]:
    values = dict(state)
    values["key"] = np.asarray(jax.random.key_data(state["key"]))
    for name in ("weights", "bias"):
        values[name] = np.asarray(state[name])
    return values


def _assert_restored(restored: dict[str, Any], expected: dict[str, Any]) -> None:
    assert sorted(restored) == sorted(expected)
    for name in ("weights", "bias", "host"):
        np.testing.assert_array_equal(np.asarray(restored[name]), expected[name])
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(restored["key"])), expected["key"])
    assert restored["step"] == expected["step"]
    assert restored["rate"] == expected["rate"]
    assert restored["tag"] == expected["tag"]


class _GatedCheckpointable:
    """An Orbax stateful checkpointable whose background write waits for the test."""

    def __init__(self) -> None:
        self.writing = threading.Event()
        self.proceed = threading.Event()

    async def save(self, directory: Any) -> Any:
        async def write() -> None:
            folder = await directory.await_creation()
            self.writing.set()
            await asyncio.to_thread(self.proceed.wait, SAFETY_SECONDS)
            (folder / "gate.json").write_text("{}")

        return write()

    async def load(self, directory: Any) -> Any:
        async def read() -> None:
            json.loads((directory / "gate.json").read_text())

        return read()


class _DiskFullCheckpointable:
    """An Orbax stateful checkpointable whose background write fails like a full disk."""

    async def save(self, directory: Any) -> Any:
        async def write() -> None:
            folder = await directory.await_creation()
            (folder / "partial.bin").write_bytes(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")

        return write()

    async def load(self, directory: Any) -> Any:  # pragma: no cover - never loaded
        raise AssertionError("not loadable")


# When a load fails inside Orbax, Orbax abandons the reads it had started for
# other arrays. tinax retires them before it raises, so collecting the garbage
# right after such a failure must report nothing: no "coroutine was never
# awaited" warning (warnings are errors here) and no "Exception ignored" or
# "Task exception was never retrieved" report.
def _collect_abandoned_reads() -> None:
    gc.collect()


def _causes(error: BaseException) -> list[BaseException]:
    chain = []
    while error.__cause__ is not None:
        error = error.__cause__
        chain.append(error)
    return chain


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any]]:
    """One committed checkpoint of a state sharded on a 4x2 mesh, plus an extra checkpointable."""
    state = _state(_mesh((4, 2)))
    path = tmp_path_factory.mktemp("saved") / "checkpoint"
    save_checkpointables(path, {"model": state, "extra": {"counts": jnp.arange(4)}}).result()
    return path, _host_values(state)


# ---------------------------------------------------------------------------
# Saving


def test_signatures_match_the_02_api():
    assert parameter_summary(save_checkpointables) == [
        ("path", "POSITIONAL_OR_KEYWORD", None),
        ("checkpointables", "POSITIONAL_OR_KEYWORD", None),
    ]
    assert parameter_summary(load_checkpointables) == [
        ("path", "POSITIONAL_OR_KEYWORD", None),
        ("targets", "POSITIONAL_OR_KEYWORD", None),
    ]
    assert parameter_summary(abstract_restore_target) == [("state", "POSITIONAL_OR_KEYWORD", None)]
    assert parameter_summary(validate_checkpointable_name) == [("name", "POSITIONAL_OR_KEYWORD", None)]


def test_importing_starts_no_backend_and_imports_neither_orbax_nor_grain():
    assert import_side_effects("tinax.checkpointing") == {"backends_initialized": False, "integrations": []}


def test_save_returns_an_orbax_async_response_and_commits_a_checkpoint(tmp_path):
    import orbax.checkpoint.experimental.v1 as ocp

    path = tmp_path / "checkpoint"
    response = save_checkpointables(str(path), {"model": {"w": jnp.arange(8.0)}, "meta": {"step": 3}})
    assert ocp.AsyncResponse in type(response).__mro__
    assert response.result(timeout=None) is None
    assert response.result() is None  # Waiting again is harmless.
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["checkpoint"]
    # Orbax 0.12.8 and later also write commit_success.txt; 0.12.1 does not.
    assert {"_CHECKPOINT_METADATA", "orbax.checkpoint", "model", "meta"} <= {entry.name for entry in path.iterdir()}
    loaded = load_checkpointables(path, {"model": {"w": np.ndarray}, "meta": {"step": 0}})
    np.testing.assert_array_equal(loaded["model"]["w"], np.arange(8.0))
    assert loaded["meta"] == {"step": 3}


def test_on_complete_is_called_after_success(tmp_path):
    path = tmp_path / "checkpoint"
    called = threading.Event()
    seen: list[object] = []
    response = save_checkpointables(path, {"model": {"w": jnp.ones(4)}})
    response.on_complete(lambda value: (seen.append(value), called.set()))
    assert called.wait(SAFETY_SECONDS)
    response.result()
    late: list[object] = []
    response.on_complete(late.append)  # Already finished: called at once.
    assert seen == [None]
    assert late == [None]


@pytest.mark.parametrize("kind", ["folder", "file", "dangling-link"])
def test_an_existing_destination_is_refused_before_anything_is_written(tmp_path, kind):
    path = tmp_path / "checkpoint"
    if kind == "folder":
        path.mkdir()
        (path / "keep.txt").write_text("old")
    elif kind == "file":
        path.write_text("old")
    else:
        path.symlink_to(tmp_path / "nowhere")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(FileExistsError, match="already exists; checkpoints are immutable") as caught:
        save_checkpointables(path, {"model": {"w": jnp.ones(2)}})
    assert isinstance(caught.value, ValueError)  # What tinax 0.2 (Orbax) raised.
    assert sorted(os.listdir(tmp_path)) == before
    if kind == "folder":
        assert (path / "keep.txt").read_text() == "old"


def test_a_second_save_to_a_destination_in_flight_is_refused_under_any_spelling(tmp_path):
    path = tmp_path / "checkpoint"
    (tmp_path / "sub").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path)
    gate = _GatedCheckpointable()
    response = save_checkpointables(path, {"model": {"w": jnp.ones(4)}, "gate": gate})
    try:
        assert gate.writing.wait(SAFETY_SECONDS)
        for spelling in (path, str(path), tmp_path / "sub" / ".." / "checkpoint", tmp_path / "alias" / "checkpoint"):
            with pytest.raises(FileExistsError, match="still in flight in this process"):
                save_checkpointables(spelling, {"model": {"w": jnp.zeros(4)}})
        with pytest.raises(TimeoutError, match="did not finish within 0 s"):
            response.result(timeout=0)
        # The unfinished save is not a checkpoint yet, under either name.
        with pytest.raises(FileNotFoundError, match="holds a save that has not finished"):
            load_checkpointables(path, {"model": {"w": np.ndarray}})
        with pytest.raises(ValueError, match="incomplete checkpoint"):
            load_checkpointables(tmp_path / "checkpoint.orbax-checkpoint-tmp", {"model": {"w": np.ndarray}})
    finally:
        gate.proceed.set()
    response.result()
    # Finished: the claim is gone, and the destination itself now refuses.
    with pytest.raises(FileExistsError, match="already exists"):
        save_checkpointables(path, {"model": {"w": jnp.zeros(4)}})
    loaded = load_checkpointables(path, {"model": {"w": np.ndarray}, "gate": _GatedCheckpointable()})
    np.testing.assert_array_equal(loaded["model"]["w"], np.ones(4))


def test_saves_to_different_destinations_run_side_by_side(tmp_path):
    gate = _GatedCheckpointable()
    first = save_checkpointables(tmp_path / "first", {"gate": gate})
    try:
        assert gate.writing.wait(SAFETY_SECONDS)
        save_checkpointables(tmp_path / "second", {"model": {"w": jnp.ones(2)}}).result()
    finally:
        gate.proceed.set()
    first.result()
    assert load_checkpointables(tmp_path / "first", {"gate": _GatedCheckpointable()})
    assert load_checkpointables(tmp_path / "second", {"model": {"w": np.ndarray}})


def test_a_background_failure_is_raised_by_result_with_its_cause(tmp_path):
    path = tmp_path / "checkpoint"
    response = save_checkpointables(path, {"model": {"w": jnp.ones(4)}, "disk": _DiskFullCheckpointable()})
    completed: list[object] = []
    response.on_complete(completed.append)
    for _ in range(2):  # Every call reports it, not only the first.
        with pytest.raises(RuntimeError, match="failed in the background") as caught:
            response.result()
        assert "nothing was committed" in str(caught.value)
        assert "No space left on device" in str(caught.value)
        causes = _causes(caught.value)
        assert any(isinstance(cause, OSError) and cause.errno == errno.ENOSPC for cause in causes)
        # tinax 0.2 re-raised Orbax's error itself, so its class is kept as well.
        assert isinstance(caught.value, OSError)
    assert not path.exists()
    response.on_complete(completed.append)
    assert completed == []  # Success callbacks never run for a failed save.
    # The failed save's temporary folder does not stop the next save.
    save_checkpointables(path, {"model": {"w": jnp.full(4, 2.0)}}).result()
    loaded = load_checkpointables(path, {"model": {"w": np.ndarray}})
    np.testing.assert_array_equal(loaded["model"]["w"], np.full(4, 2.0))


@pytest.mark.parametrize(
    ("error", "kept"),
    [
        (KeyError("missing"), KeyError),
        (ValueError("bad value"), ValueError),
        (OSError(errno.ENOSPC, "No space left on device"), OSError),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), None),
        (KeyboardInterrupt(), None),
    ],
    ids=["key", "value", "os", "unbuildable", "base-exception"],
)
def test_a_background_failure_keeps_the_class_of_its_cause_where_python_allows(error, kept):
    from tinax._checkpointing._compat02 import background_failure

    failure = background_failure("saving failed", error)
    assert isinstance(failure, RuntimeError)
    assert failure.__cause__ is error
    assert str(failure) == "saving failed"
    if kept is not None:
        assert isinstance(failure, kept)
    assert type(background_failure("again", error)) is type(failure)


def test_a_failed_save_frees_its_destination_without_result_being_called(tmp_path):
    path = tmp_path / "checkpoint"
    failing = save_checkpointables(path, {"disk": _DiskFullCheckpointable()})
    # Poll until the background failure has ended the claim; result() is
    # deliberately never called on the failed save.
    done = threading.Event()
    outcome: list[BaseException | None] = []

    def retry() -> None:
        while not done.is_set():
            try:
                save_checkpointables(path, {"model": {"w": jnp.ones(2)}}).result()
            except FileExistsError as error:
                if "in flight" not in str(error):
                    outcome.append(error)
                    return
                done.wait(0.01)
                continue
            outcome.append(None)
            return

    worker = threading.Thread(target=retry)
    worker.start()
    worker.join(SAFETY_SECONDS)
    done.set()
    worker.join()
    assert outcome == [None]
    assert load_checkpointables(path, {"model": {"w": np.ndarray}})
    del failing


@pytest.mark.parametrize(
    ("checkpointables", "error", "match"),
    [
        ([("model", 1)], TypeError, "checkpointables must be a mapping with str keys"),
        ({}, ValueError, "at least one checkpointable"),
        ({"model": None}, ValueError, r"checkpointables\['model'\] must be a value that is neither None nor an empty"),
        ({"model": {}}, ValueError, r"checkpointables\['model'\] must be a value that is neither None nor an empty"),
        ({"model": ()}, ValueError, r"checkpointables\['model'\] must be a value that is neither None nor an empty"),
        ({"model": object()}, TypeError, r"checkpointables\['model'\] must be a pytree of jax.Array"),
        ({"model": {"w": np.int32(3)}}, TypeError, r"checkpointables\['model'\] must be a pytree of jax.Array"),
        ({"model": {"f": print}}, TypeError, r"checkpointables\['model'\] must be a pytree of jax.Array"),
    ],
)
def test_bad_checkpointables_are_refused_before_anything_is_written(tmp_path, checkpointables, error, match):
    with pytest.raises(error, match=match) as caught:
        save_checkpointables(tmp_path / "checkpoint", checkpointables)
    if "pytree of jax.Array" in match:
        # tinax 0.2 let Orbax's error through: a KeyError, as no handler matched.
        assert isinstance(caught.value, KeyError)
    gc.collect()  # Orbax work left dangling would warn here, and warnings are errors.
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", [b"/tmp/checkpoint", 3, None])
def test_a_path_of_the_wrong_kind_is_a_type_error(path):
    with pytest.raises(TypeError, match="path must be a str or os.PathLike"):
        save_checkpointables(path, {"model": {"w": jnp.ones(2)}})
    with pytest.raises(TypeError, match="path must be a str or os.PathLike"):
        load_checkpointables(path, {"model": {"w": np.ndarray}})


def test_missing_parent_folders_are_created(tmp_path):
    path = tmp_path / "runs" / "a" / "checkpoint"
    save_checkpointables(path, {"model": {"w": jnp.ones(2)}}).result()
    assert (path / "_CHECKPOINT_METADATA").is_file()


@pytest.mark.parametrize(
    "name",
    [
        "checkpoint.orbax-checkpoint-tmp",
        "checkpoint.orbax-checkpoint-tmp-1712345678",
        "checkpoint.ORBAX-Checkpoint-TMP",
        "checkpoint.orbax-checkpoint-tmp-7/.",
        "checkpoint.orbax-checkpoint-tmp-7/inner/..",
    ],
)
def test_a_destination_named_like_an_orbax_temporary_folder_is_refused(tmp_path, name):
    # Orbax would take such a checkpoint for a crashed save, and the next save
    # to "checkpoint" would delete it. tinax 0.2 refused these names too.
    with pytest.raises(ValueError, match="reserved temporary suffix '.orbax-checkpoint-tmp'"):
        save_checkpointables(f"{tmp_path}/{name}", {"model": {"w": jnp.ones(2)}})
    assert list(tmp_path.iterdir()) == []
    save_checkpointables(tmp_path / "checkpoint", {"model": {"w": jnp.ones(2)}}).result()
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["checkpoint"]


def test_a_destination_inside_a_folder_named_like_a_temporary_one_is_accepted(tmp_path):
    path = tmp_path / "runs.orbax-checkpoint-tmp-1" / "checkpoint"
    save_checkpointables(path, {"model": {"w": jnp.ones(2)}}).result()
    assert load_checkpointables(path, {"model": {"w": np.ndarray}})["model"]["w"].tolist() == [1.0, 1.0]


def test_relative_paths_mean_the_current_folder(tmp_path, monkeypatch):
    # Orbax itself refuses relative paths, in the background, after the save started.
    monkeypatch.chdir(tmp_path)
    save_checkpointables("runs/checkpoint", {"model": {"w": jnp.arange(3.0)}}).result()
    assert (tmp_path / "runs" / "checkpoint" / "_CHECKPOINT_METADATA").is_file()
    loaded = load_checkpointables("runs/checkpoint", {"model": {"w": np.ndarray}})
    np.testing.assert_array_equal(loaded["model"]["w"], np.arange(3.0))
    with pytest.raises(FileExistsError):
        save_checkpointables(tmp_path / "runs" / "checkpoint", {"model": {"w": jnp.arange(3.0)}})


# ---------------------------------------------------------------------------
# Loading


def _targets(mesh: jax.sharding.Mesh) -> dict[str, Any]:
    key = jax.random.key(0)
    return {
        "weights": jax.ShapeDtypeStruct(
            (16, 8), jnp.float32, sharding=NamedSharding(mesh, PartitionSpec("rows", "cols"))
        ),
        "bias": jax.ShapeDtypeStruct((16,), jnp.float32, sharding=NamedSharding(mesh, PartitionSpec("rows"))),
        "key": jax.ShapeDtypeStruct(key.shape, key.dtype, sharding=NamedSharding(mesh, PartitionSpec())),
        "step": 0,
        "rate": 0.0,
        "host": np.ndarray,
        "tag": "",
    }


@pytest.mark.parametrize("shape", [(4, 2), (2, 4), (8, 1)], ids=["4x2-as-saved", "2x4", "8x1"])
def test_loads_onto_the_target_sharding(saved, shape):
    path, expected = saved
    targets = _targets(_mesh(shape))
    restored = load_checkpointables(path, {"model": targets})["model"]
    _assert_restored(restored, expected)
    for name in ("weights", "bias", "key"):
        assert isinstance(restored[name], jax.Array)
        assert restored[name].sharding == targets[name].sharding
    assert isinstance(restored["host"], np.ndarray)


def test_loads_as_host_numpy(saved):
    path, expected = saved
    host_target = {"weights": np.ndarray, "bias": np.zeros(16, np.float32), "host": np.ndarray}
    targets = {**_targets(_mesh((4, 2))), **host_target}
    restored = load_checkpointables(path, {"model": targets})["model"]
    _assert_restored(restored, expected)
    for name in host_target:
        assert type(restored[name]) is np.ndarray


def test_loads_into_targets_built_from_live_state_on_another_mesh(saved):
    path, expected = saved
    live = _state(_mesh((2, 4)))
    restored = load_checkpointables(path, {"model": abstract_restore_target(live)})["model"]
    _assert_restored(restored, expected)
    for name in ("weights", "bias", "key"):
        assert restored[name].sharding == live[name].sharding


def test_loads_a_subset_of_the_names(saved):
    path, _ = saved
    loaded = load_checkpointables(path, {"extra": {"counts": np.ndarray}})
    assert list(loaded) == ["extra"]
    np.testing.assert_array_equal(loaded["extra"]["counts"], np.arange(4))


def test_an_unknown_name_lists_the_saved_ones(saved):
    path, _ = saved
    with pytest.raises(
        ValueError, match=r"\['optimizer'\] that .* does not hold; it holds \['extra', 'model'\]"
    ) as caught:
        load_checkpointables(path, {"optimizer": {"mu": np.ndarray}})
    # tinax 0.2 let Orbax's KeyError through; the message is not quoted the way KeyError quotes.
    assert isinstance(caught.value, KeyError)
    assert str(caught.value).startswith("targets names checkpointables")


def test_a_missing_path_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist") as caught:
        load_checkpointables(tmp_path / "absent", {"model": {"w": np.ndarray}})
    assert isinstance(caught.value, ValueError)  # What tinax 0.2 (Orbax) raised.


def test_a_checkpoint_committed_without_a_commit_marker_loads(saved, tmp_path):
    # Orbax 0.12.1 (tinax 0.2's pin) commits by renaming the folder and writes
    # no commit_success.txt; later releases add the marker before the rename.
    path = shutil.copytree(saved[0], tmp_path / "copy")
    (path / "commit_success.txt").unlink(missing_ok=True)
    restored = load_checkpointables(path, {"model": _targets(_mesh((4, 2)))})["model"]
    _assert_restored(restored, saved[1])


@pytest.mark.parametrize(
    "suffix", [".orbax-checkpoint-tmp", ".orbax-checkpoint-tmp-1712345678", ".Orbax-Checkpoint-Tmp"]
)
def test_a_complete_folder_under_a_temporary_name_is_refused(saved, tmp_path, suffix):
    # Only the name tells an unfinished save from a committed one when there is no marker.
    path = shutil.copytree(saved[0], tmp_path / f"copy{suffix}")
    with pytest.raises(ValueError, match="temporary folder of a save that has not finished"):
        load_checkpointables(path, {"model": _targets(_mesh((4, 2)))})


def test_a_file_is_not_a_checkpoint(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a folder"):
        load_checkpointables(tmp_path / "file", {"model": {"w": np.ndarray}})


def _damage(path: Any, how: str) -> Any:
    if how == "renamed-to-temporary":
        target = path.with_name(path.name + ".orbax-checkpoint-tmp")
        path.rename(target)
        return target
    if how == "no-metadata":
        (path / "_CHECKPOINT_METADATA").unlink()
    elif how == "no-indicator":
        (path / "orbax.checkpoint").unlink()
    elif how == "corrupt-metadata":
        (path / "_CHECKPOINT_METADATA").write_text("{not json")
    elif how == "metadata-without-names":
        (path / "_CHECKPOINT_METADATA").write_text("{}")
    elif how == "checkpointable-removed":
        shutil.rmtree(path / "extra")
    elif how == "pytree-metadata-removed":
        (path / "extra" / "_METADATA").unlink()
    return path


@pytest.mark.parametrize(
    "how",
    [
        "renamed-to-temporary",
        "no-metadata",
        "no-indicator",
        "corrupt-metadata",
        "metadata-without-names",
        "checkpointable-removed",
        "pytree-metadata-removed",
    ],
)
def test_an_incomplete_checkpoint_is_a_value_error(saved, tmp_path, how):
    source, _ = saved
    path = _damage(shutil.copytree(source, tmp_path / "copy"), how)
    # Loading only the untouched checkpointable is refused as well: the folder
    # as a whole is not a checkpoint that committed.
    with pytest.raises(ValueError, match="incomplete checkpoint") as caught:
        load_checkpointables(path, {"model": _targets(_mesh((4, 2)))})
    # tinax 0.2 let Orbax's KeyError through for a folder it could not load; a
    # temporary folder's name it refused up front, with a plain ValueError.
    assert isinstance(caught.value, KeyError) == (how != "renamed-to-temporary")


def test_damaged_array_data_is_a_value_error_with_the_cause(saved, tmp_path):
    path = shutil.copytree(saved[0], tmp_path / "copy")
    for entry in (path / "extra").iterdir():
        if entry.name.startswith("ocdbt") or entry.name in {"manifest.ocdbt", "d"}:
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    with pytest.raises(ValueError, match="could not load checkpointables") as caught:
        load_checkpointables(path, {"extra": {"counts": np.ndarray}})
    assert caught.value.__cause__ is not None
    del caught
    _collect_abandoned_reads()


@pytest.mark.parametrize(
    ("targets", "error", "match"),
    [
        ([("model", None)], TypeError, "targets must be a mapping with str keys"),
        ({}, ValueError, "at least one checkpointable"),
        ({"model": None}, ValueError, r"targets\['model'\] must be an explicit restore target"),
    ],
)
def test_targets_must_be_explicit(saved, targets, error, match):
    with pytest.raises(error, match=match):
        load_checkpointables(saved[0], targets)


def test_a_target_that_does_not_fit_is_a_value_error_with_the_cause(saved):
    path, _ = saved
    mesh = _mesh((4, 2))
    wrong_shape = {
        **_targets(mesh),
        "bias": jax.ShapeDtypeStruct((8,), jnp.float32, sharding=NamedSharding(mesh, PartitionSpec())),
    }
    # Shapes are checked against the stored metadata before Orbax is asked.
    with pytest.raises(
        ValueError, match=r"targets\['model'\]\['bias'\] is incompatible .* stored shape \(16,\)"
    ) as caught:
        load_checkpointables(path, {"model": wrong_shape})
    assert isinstance(caught.value, KeyError)  # What tinax 0.2 (Orbax) raised.
    missing_leaf = {name: value for name, value in _targets(mesh).items() if name != "tag"}
    with pytest.raises(ValueError, match="tree structures do not match") as caught:
        load_checkpointables(path, {"model": missing_leaf})
    assert caught.value.__cause__ is not None
    assert isinstance(caught.value, KeyError)
    del caught
    _collect_abandoned_reads()


# ---------------------------------------------------------------------------
# Restore targets


def test_abstract_restore_target_keeps_structure_and_placement():
    mesh = _mesh((4, 2))
    state = {**_state(mesh), "nothing": None, "pair": (1, jnp.zeros(3))}
    target = abstract_restore_target(state)
    assert jax.tree_util.tree_structure(target) == jax.tree_util.tree_structure(state)
    for name in ("weights", "bias", "key"):
        leaf = target[name]
        assert isinstance(leaf, jax.ShapeDtypeStruct)
        assert (leaf.shape, leaf.dtype, leaf.sharding) == (state[name].shape, state[name].dtype, state[name].sharding)
    assert jnp.issubdtype(target["key"].dtype, jax.dtypes.prng_key)
    host = target["host"]
    assert isinstance(host, np.ndarray)
    assert (host.shape, host.dtype, host.strides, host.flags.writeable) == ((2, 3), np.int64, (0, 0), False)
    assert (target["step"], target["rate"], target["tag"], target["nothing"]) == (12, 0.5, "run-a", None)
    assert target["pair"][0] == 1
    assert target["pair"][1].sharding == state["pair"][1].sharding


def test_abstract_restore_target_keeps_abstract_arrays_with_or_without_a_sharding():
    sharded = jax.ShapeDtypeStruct((8,), jnp.float32, sharding=NamedSharding(_mesh((8, 1)), PartitionSpec("rows")))
    unsharded = jax.eval_shape(lambda: {"key": jax.random.key(0), "w": jnp.zeros(3)})
    target = abstract_restore_target({"sharded": sharded, "unsharded": unsharded})
    assert target["sharded"] is sharded
    # As in tinax 0.2: such a target loads where the checkpoint recorded the array.
    assert target["unsharded"]["key"] is unsharded["key"]
    assert target["unsharded"]["w"] is unsharded["w"]


@pytest.mark.parametrize(
    ("leaf", "match"),
    [
        (object(), r"state\['bad'\] must be a jax.Array, numpy.ndarray"),
        (np.array([object()]), r"state\['bad'\] must be a numpy.ndarray with a numeric or bool dtype"),
    ],
)
def test_abstract_restore_target_refuses_leaves_orbax_cannot_restore(leaf, match):
    with pytest.raises(TypeError, match=match):
        abstract_restore_target({"bad": leaf})


def test_abstract_restore_target_refuses_traced_values():
    def trace(value: jax.Array) -> jax.Array:
        abstract_restore_target({"w": value})
        return value

    with pytest.raises(TypeError, match=r"state\['w'\] must be a concrete value") as caught:
        jax.jit(trace)(jnp.ones(2))
    assert isinstance(caught.value, AttributeError)  # What tinax 0.2 (JAX) raised.


def test_a_grain_iterator_is_its_own_target_and_resumes_exactly(tmp_path):
    import grain

    def pipeline() -> Any:
        return iter(grain.MapDataset.range(20).shuffle(seed=3).to_iter_dataset())

    iterator = pipeline()
    for _ in range(5):
        next(iterator)
    path = tmp_path / "checkpoint"
    save_checkpointables(path, {"data": iterator, "model": {"w": jnp.ones(2)}}).result()
    expected = [next(iterator) for _ in range(5)]
    fresh = pipeline()
    assert abstract_restore_target(fresh) is fresh
    loaded = load_checkpointables(path, {"data": abstract_restore_target(fresh)})
    assert loaded["data"] is fresh
    assert [next(fresh) for _ in range(5)] == expected


def test_flax_nnx_state_round_trips_with_its_rng_keys(tmp_path):
    nnx = pytest.importorskip(
        "flax.nnx", reason="flax is not installed (it is not a dependency of tinax-checkpointing)"
    )
    mesh = _mesh((4, 2))

    class Model(nnx.Module):
        def __init__(self, seed: int) -> None:
            self.linear = nnx.Linear(8, 4, rngs=nnx.Rngs(seed))
            self.dropout = nnx.Dropout(0.5, rngs=nnx.Rngs(seed + 1))

    model = Model(0)
    state = nnx.state(model)
    shardings = jax.tree.map(lambda _: NamedSharding(mesh, PartitionSpec()), state)
    state = jax.device_put(state, shardings)
    path = tmp_path / "checkpoint"
    save_checkpointables(path, {"model": state}).result()

    other = Model(1)
    target = abstract_restore_target(nnx.state(other))
    assert type(target) is type(state)
    restored = load_checkpointables(path, {"model": target})["model"]
    nnx.update(other, restored)
    for saved_leaf, restored_leaf in zip(jax.tree.leaves(state), jax.tree.leaves(nnx.state(other)), strict=True):
        if jnp.issubdtype(saved_leaf.dtype, jax.dtypes.prng_key):
            saved_leaf, restored_leaf = jax.random.key_data(saved_leaf), jax.random.key_data(restored_leaf)
        np.testing.assert_array_equal(np.asarray(restored_leaf), np.asarray(saved_leaf))
