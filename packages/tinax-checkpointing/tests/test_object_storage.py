"""Checkpoints on object storage: gs:// through Orbax against the GCS emulator, s3:// refused (google/orbax#359).

Every test runs against the real loopback servers of tinax_testing; the
checkpoints are a few KiB.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from etils import epath

from tinax.checkpointing import (
    SaveInFlightError,
    TrainingCheckpointManager,
    abstract_checkpointables,
    abstract_restore_target,
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

MARKER = "commit_success.txt"


def params() -> dict[str, Any]:
    return {"w": jnp.arange(12.0).reshape(3, 4), "b": np.arange(5, dtype=np.int32), "scale": 0.5}


def batches() -> grain.MapDataset:
    return grain.MapDataset.source(list(range(24))).batch(4)


def take(iterator: Any, count: int) -> list[list[int]]:
    return [np.asarray(next(iterator)).tolist() for _ in range(count)]


def assert_tree_equal(actual: Any, expected: Any) -> None:
    def host(value: Any) -> np.ndarray:
        if isinstance(value, jax.Array) and jnp.issubdtype(value.dtype, jax.dtypes.extended):
            return np.asarray(jax.random.key_data(value))
        return np.asarray(value)

    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for got, want in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        np.testing.assert_array_equal(host(got), host(want))
        assert host(got).dtype == host(want).dtype


def gcs() -> Any:
    import gcsfs

    fs = gcsfs.GCSFileSystem()
    fs.invalidate_cache()
    return fs


def objects_under(url: str) -> list[str]:
    fs = gcs()
    return [name.removeprefix(url.removeprefix("gs://") + "/") for name in fs.find(url.removeprefix("gs://"))]


def as_given(url: str, kind: str) -> Any:
    return url if kind == "str" else epath.Path(url)


# --- gs:// round trips ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["str", "epath"])
def test_checkpointables_round_trip_exactly_on_gs(gcs_store: str, kind: str) -> None:
    path = f"{gcs_store}/ckpt"
    state = params()
    assert save_checkpointables(as_given(path, kind), {"params": state, "extra": {"n": jnp.int32(7)}}).result() is None
    assert MARKER in objects_under(path)
    # The claim that kept other writers out is gone once the save ended.
    assert not [name for name in objects_under(gcs_store) if "claim" in name]

    loaded = load_checkpointables(as_given(path, kind), {"params": abstract_restore_target(state)})
    assert list(loaded) == ["params"]
    assert_tree_equal(loaded["params"], state)


@pytest.mark.parametrize("kind", ["str", "epath"])
def test_abstract_checkpointables_reads_gs_metadata(gcs_store: str, kind: str) -> None:
    path = f"{gcs_store}/ckpt"
    save_checkpointables(path, {"params": params()}).result()

    abstract = abstract_checkpointables(as_given(path, kind))

    w = abstract["params"]["w"]
    assert (w.shape, w.dtype) == ((3, 4), jnp.float32)
    assert abstract["params"]["b"].shape == (5,)
    assert abstract["params"]["scale"] == 0.0


@pytest.mark.parametrize("kind", ["str", "epath"])
def test_training_checkpoint_round_trips_exactly_on_gs(gcs_store: str, kind: str) -> None:
    path = f"{gcs_store}/7"
    model, optimizer, rng = params(), {"count": jnp.asarray(3)}, jax.random.key(11)
    iterator = iter(batches())
    take(iterator, 2)
    save_training_checkpoint(as_given(path, kind), 7, model, optimizer, rng, {"loss": 0.25}, iterator).result()
    expected_next = take(iterator, 2)
    assert any(name.startswith("iterator/process_0-of-1") for name in objects_under(path))

    fresh = iter(batches())
    restored = load_training_checkpoint(
        as_given(path, kind),
        abstract_restore_target(model),
        abstract_restore_target(optimizer),
        abstract_restore_target(rng),
        abstract_restore_target({"loss": 0.25}),
        fresh,
    )

    assert restored.step == 7
    assert_tree_equal(restored.model, model)
    assert_tree_equal(restored.optimizer, optimizer)
    assert_tree_equal(restored.rng, rng)
    assert restored.auxiliary == {"loss": 0.25}
    assert take(fresh, 2) == expected_next


@pytest.mark.parametrize("kind", ["str", "epath"])
def test_legacy_v0_pytree_and_iterator_round_trip_on_gs(gcs_store: str, kind: str) -> None:
    state = {"w": np.arange(6, dtype=np.float32), "step": np.arange(2, dtype=np.int64)}
    save_legacy_v0_pytree(as_given(f"{gcs_store}/state", kind), state)
    assert_tree_equal(load_legacy_v0_pytree(as_given(f"{gcs_store}/state", kind), state), state)

    iterator = iter(batches())
    take(iterator, 3)
    save_legacy_v0_grain_iterator(as_given(f"{gcs_store}/data", kind), iterator)
    restored = load_legacy_v0_grain_iterator(as_given(f"{gcs_store}/data", kind), iter(batches()))
    assert take(restored, 2) == take(iterator, 2)


# --- immutability and racing writers --------------------------------------------------------------------------


def test_a_committed_gs_checkpoint_is_never_overwritten(gcs_store: str) -> None:
    path = f"{gcs_store}/ckpt"
    first = params()
    save_checkpointables(path, {"params": first}).result()
    before = objects_under(path)

    with pytest.raises(FileExistsError, match="already exists") as caught:
        save_checkpointables(path, {"params": {"w": jnp.zeros(2)}})
    assert isinstance(caught.value, ValueError)
    with pytest.raises(FileExistsError):
        save_training_checkpoint(path, 1, params(), {"count": jnp.asarray(1)}, jax.random.key(0), None, iter(batches()))
    with pytest.raises(FileExistsError):
        save_legacy_v0_pytree(path, {"w": np.zeros(2)})

    assert objects_under(path) == before
    assert_tree_equal(load_checkpointables(path, {"params": abstract_restore_target(first)})["params"], first)


def test_a_second_writer_racing_to_one_gs_path_is_refused(gcs_store: str) -> None:
    path = f"{gcs_store}/ckpt"
    outcomes: list[BaseException | None] = []
    start = threading.Barrier(2)

    def write(value: float) -> None:
        start.wait()
        try:
            save_checkpointables(path, {"params": {"w": jnp.full(4, value)}}).result()
        except (FileExistsError, ValueError) as error:
            outcomes.append(error)
        else:
            outcomes.append(None)

    threads = [threading.Thread(target=write, args=(value,)) for value in (1.0, 2.0)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Exactly one save committed, whole; the other was refused before it wrote anything.
    assert outcomes.count(None) == 1
    [refused] = [outcome for outcome in outcomes if outcome is not None]
    assert isinstance(refused, FileExistsError)
    loaded = load_checkpointables(path, {"params": {"w": abstract_restore_target(jnp.zeros(4))}})["params"]["w"]
    assert np.unique(np.asarray(loaded)).size == 1


def test_a_claim_held_by_another_writer_refuses_the_save(gcs_store: str) -> None:
    path = f"{gcs_store}/ckpt"
    gcs().pipe_file(f"{path.removeprefix('gs://')}.tinax-save-claim", b"another writer")

    with pytest.raises(FileExistsError, match="another writer"):
        save_checkpointables(path, {"params": params()})

    assert objects_under(path) == []


# --- uncommitted prefixes -------------------------------------------------------------------------------------


def remove_marker(path: str) -> None:
    gcs().rm_file(f"{path.removeprefix('gs://')}/{MARKER}")


def test_a_gs_checkpoint_without_its_commit_marker_is_never_loaded(gcs_store: str) -> None:
    path = f"{gcs_store}/ckpt"
    state = params()
    save_checkpointables(path, {"params": state}).result()
    remove_marker(path)

    for attempt in (
        lambda: load_checkpointables(path, {"params": abstract_restore_target(state)}),
        lambda: abstract_checkpointables(path),
    ):
        with pytest.raises(FileNotFoundError, match="not finished") as caught:
            attempt()
        assert isinstance(caught.value, ValueError)
    # Its objects block the path: a new save there is refused, not mixed in.
    with pytest.raises(FileExistsError, match="not finished"):
        save_checkpointables(path, {"params": state})


def test_a_training_checkpoint_without_its_commit_marker_is_never_loaded(gcs_store: str) -> None:
    path = f"{gcs_store}/3"
    save_training_checkpoint(
        path, 3, params(), {"count": jnp.asarray(1)}, jax.random.key(0), None, iter(batches())
    ).result()
    remove_marker(path)

    with pytest.raises(FileNotFoundError, match="not finished"):
        load_training_checkpoint(
            path,
            abstract_restore_target(params()),
            abstract_restore_target({"count": jnp.asarray(1)}),
            abstract_restore_target(jax.random.key(0)),
            None,
            iter(batches()),
        )


def test_a_legacy_checkpoint_without_a_commit_marker_is_never_loaded(gcs_store: str) -> None:
    state = {"w": np.arange(3, dtype=np.float32)}
    save_legacy_v0_pytree(f"{gcs_store}/state", state)
    remove_marker(f"{gcs_store}/state")

    with pytest.raises(ValueError, match="incomplete checkpoint"):
        load_legacy_v0_pytree(f"{gcs_store}/state", state)
    with pytest.raises(FileNotFoundError):
        load_legacy_v0_pytree(f"{gcs_store}/missing", state)


def test_a_missing_gs_checkpoint_is_not_found(gcs_store: str) -> None:
    with pytest.raises(FileNotFoundError, match="no committed checkpoint"):
        load_checkpointables(f"{gcs_store}/nothing", {"params": abstract_restore_target(params())})


_KILLED_SAVE = textwrap.dedent(
    """
    import sys
    import numpy as np
    from tinax.checkpointing import save_checkpointables

    values = {f"w{index}": np.full((8,), index, np.float32) for index in range(200)}
    save_checkpointables(sys.argv[1], {"params": values})
    print("started", flush=True)
    sys.stdin.read()
    """
)


def test_a_save_killed_mid_write_is_never_loaded_and_blocks_no_reader(gcs_store: str) -> None:
    path = f"{gcs_store}/ckpt"
    with subprocess.Popen(
        [sys.executable, "-W", "ignore", "-c", _KILLED_SAVE, path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=os.environ.copy(),
    ) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"started"
        # The save writes in the background: the kill lands before or while it writes (or after its commit).
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)

    target = {"params": {f"w{index}": abstract_restore_target(np.zeros(8, np.float32)) for index in range(200)}}
    if MARKER in objects_under(path):
        loaded = load_checkpointables(path, target)["params"]
        assert all(np.all(np.asarray(loaded[f"w{index}"]) == index) for index in range(200))
    else:
        with pytest.raises(FileNotFoundError, match="not finished"):
            load_checkpointables(path, target)
        with pytest.raises(FileNotFoundError, match="not finished"):
            abstract_checkpointables(path)
    # What the killed writer left (its claim, its objects) keeps the path from a second writer.
    with pytest.raises(FileExistsError):
        save_checkpointables(path, {"params": {"w": np.zeros(2, np.float32)}})


# --- the step manager on gs:// -------------------------------------------------------------------------------


def manager(root: Any, keep_last: int = 2) -> TrainingCheckpointManager:
    return TrainingCheckpointManager(
        root,
        save_interval_steps=1,
        keep_last=keep_last,
        keep_every=None,
        keep_best=None,
        best_mode=None,
        save_in_flight="wait",
        create=True,
    )


def save_step(steps: TrainingCheckpointManager, step: int, iterator: Any = None) -> None:
    model = {"w": jnp.full(4, float(step))}
    steps.save(step, model, {"count": jnp.asarray(step)}, jax.random.key(step), None, iterator or iter(batches()))


def restore_step(steps: TrainingCheckpointManager, step: int, iterator: Any = None) -> Any:
    return steps.restore(
        step,
        abstract_restore_target({"w": jnp.zeros(4)}),
        abstract_restore_target({"count": jnp.asarray(0)}),
        abstract_restore_target(jax.random.key(0)),
        None,
        iterator or iter(batches()),
    )


def step_names(root: str) -> set[str]:
    return {name.split("/", 1)[0] for name in objects_under(root)}


@pytest.mark.parametrize("kind", ["str", "epath"])
def test_the_manager_saves_keeps_and_restores_steps_on_gs(gcs_store: str, kind: str) -> None:
    root = f"{gcs_store}/run"
    steps = manager(as_given(root, kind))
    iterator = iter(batches())
    for step in (1, 2, 3):
        take(iterator, 1)
        save_step(steps, step, iterator)
    steps.wait()
    expected_next = take(iterator, 1)

    assert steps.committed_steps() == (2, 3)
    # Retention removed every object of step 1; the lock is gone once the writer is done.
    assert step_names(root) == {"2", "3"}

    fresh = iter(batches())
    restored = restore_step(manager(as_given(root, kind)), 3, fresh)
    assert restored.step == 3
    assert_tree_equal(restored.model, {"w": jnp.full(4, 3.0)})
    assert take(fresh, 1) == expected_next


def test_an_uncommitted_step_on_gs_is_never_counted_and_cleanup_removes_it(gcs_store: str) -> None:
    root = f"{gcs_store}/run"
    steps = manager(root, keep_last=3)
    for step in (1, 2):
        save_step(steps, step)
    steps.wait()
    remove_marker(f"{root}/2")
    gcs().pipe_file(f"{root.removeprefix('gs://')}/5.tinax-save-claim", b"left by a killed save")

    fresh = manager(root)
    assert fresh.committed_steps() == (1,)
    assert fresh.latest_committed_step() == 1
    with pytest.raises(FileNotFoundError):
        restore_step(fresh, 2)
    found = fresh.scan(cleanup=True)
    assert [entry.name for entry in found.torn] == ["2"]
    assert [entry.name for entry in found.temporary] == ["5.tinax-save-claim"]
    assert step_names(root) == {"1"}
    assert fresh.committed_steps() == (1,)


def test_retention_on_gs_removes_the_commit_marker_with_the_step(gcs_store: str) -> None:
    root = f"{gcs_store}/run"
    steps = manager(root, keep_last=1)
    save_step(steps, 1)
    save_step(steps, 2)
    steps.wait()

    assert steps.committed_steps() == (2,)
    assert not [name for name in objects_under(root) if name.startswith("1/")]


def test_the_manager_keeps_the_best_steps_by_metric_on_gs(gcs_store: str) -> None:
    root = f"{gcs_store}/run"
    steps = TrainingCheckpointManager(
        root,
        save_interval_steps=1,
        keep_last=1,
        keep_every=None,
        keep_best=1,
        best_mode="min",
        save_in_flight="wait",
        create=True,
    )
    for step, loss in ((1, 0.1), (2, 0.5), (3, 0.9)):
        model = {"w": jnp.full(4, float(step))}
        steps.save(step, model, {"count": jnp.asarray(step)}, jax.random.key(step), None, iter(batches()), metric=loss)
    steps.wait()

    assert steps.committed_steps() == (1, 3)
    assert step_names(root) == {"1", "3", "tinax-step-metrics.json"}
    assert json.loads(gcs().cat_file(f"{root.removeprefix('gs://')}/tinax-step-metrics.json")) == {"1": 0.1, "3": 0.9}


def test_a_second_manager_on_a_gs_root_is_refused_while_the_first_writes(gcs_store: str) -> None:
    root = f"{gcs_store}/run"
    first, second = manager(root), manager(root)
    save_step(first, 1)

    # The first holds the root's lock object from its save's start until its retention has run.
    with pytest.raises(SaveInFlightError, match="another TrainingCheckpointManager"):
        save_step(second, 2)
    with pytest.raises(SaveInFlightError):
        second.scan(cleanup=True)
    first.wait()

    save_step(second, 2)
    second.wait()
    assert second.committed_steps() == (1, 2)


def test_a_lock_object_left_on_a_gs_root_refuses_writers_until_deleted(gcs_store: str) -> None:
    root = f"{gcs_store}/run"
    lock = f"{root.removeprefix('gs://')}/tinax-manager.lock"
    gcs().pipe_file(lock, b"left by a killed job")
    steps = manager(root)

    with pytest.raises(SaveInFlightError, match="left by a killed job.*delete the object"):
        save_step(steps, 1)
    assert step_names(root) == {"tinax-manager.lock"}

    gcs().rm_file(lock)
    save_step(steps, 1)
    steps.wait()
    assert steps.committed_steps() == (1,)


_KILLED_MANAGER = textwrap.dedent(
    """
    import sys
    import grain
    import jax
    import numpy as np
    from tinax.checkpointing import TrainingCheckpointManager

    steps = TrainingCheckpointManager(
        sys.argv[1], save_interval_steps=1, keep_last=2, keep_every=None, keep_best=None, best_mode=None,
        save_in_flight="wait", create=True,
    )
    model = {f"w{index}": np.full((8,), index, np.float32) for index in range(100)}
    iterator = iter(grain.MapDataset.source(list(range(24))).batch(4))
    steps.save(2, model, {"count": np.arange(2)}, jax.random.key(2), None, iterator)
    print("started", flush=True)
    sys.stdin.read()
    """
)


def test_a_manager_killed_mid_save_on_gs_leaves_no_counted_step(gcs_store: str) -> None:
    root = f"{gcs_store}/run"
    steps = manager(root)
    save_step(steps, 1)
    steps.wait()
    with subprocess.Popen(
        [sys.executable, "-W", "ignore", "-c", _KILLED_MANAGER, root],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=os.environ.copy(),
    ) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"started"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)

    fresh = manager(root)
    committed = fresh.committed_steps()
    # Step 2 counts only if its commit landed before the kill; its leftovers otherwise are never a step.
    assert committed in ((1,), (1, 2))
    # The killed job never released the root's lock: writers are refused until it is deleted by hand.
    with pytest.raises(SaveInFlightError, match="delete the object"):
        save_step(fresh, 3)
    gcs().rm_file(f"{root.removeprefix('gs://')}/tinax-manager.lock")
    fresh.scan(cleanup=True)
    assert step_names(root) == {str(step) for step in committed}
    save_step(fresh, 3)
    fresh.wait()
    assert fresh.committed_steps() == (*committed[-1:], 3)


def test_the_manager_needs_an_existing_gs_root_when_create_is_false(gcs_store: str) -> None:
    with pytest.raises(FileNotFoundError, match="create=False"):
        TrainingCheckpointManager(
            f"{gcs_store}/none",
            save_interval_steps=1,
            keep_last=1,
            keep_every=None,
            keep_best=None,
            best_mode=None,
            save_in_flight="wait",
            create=False,
        )


# --- tinax inspect's checkpoint inspectors on gs:// -----------------------------------------------------------


def test_the_checkpoint_inspectors_describe_gs_prefixes(gcs_store: str) -> None:
    from tinax._checkpointing._inspect import inspect_checkpoint, inspect_checkpoint_root
    from tinax._checkpointing._sniff import CHECKPOINT, CHECKPOINT_ROOT
    from tinax._core._command._registry import Probe
    from tinax._core._command._report import InspectOptions

    root = f"{gcs_store}/run"
    steps = manager(root, keep_last=3)
    save_step(steps, 4)
    save_step(steps, 5)
    steps.wait()
    remove_marker(f"{root}/5")

    assert CHECKPOINT.sniff(Probe(epath.Path(f"{root}/4"), None))
    assert CHECKPOINT_ROOT.sniff(Probe(epath.Path(root), None))
    report = inspect_checkpoint(f"{root}/4", InspectOptions())
    assert report.summary["complete"] is True
    assert report.summary["step"] == 4
    rows = {(row["part"], row["name"]): row for table in report.tables if table.name == "arrays" for row in table.rows}
    assert (rows["model", "w"]["dtype"], rows["model", "w"]["shape"]) == ("float32", [4])
    torn = inspect_checkpoint(f"{root}/5", InspectOptions())
    assert torn.summary["complete"] is False
    assert "not finished" in torn.problems[0]
    described = inspect_checkpoint_root(root, InspectOptions())
    assert described.summary["committed steps"] == [4]
    assert described.problems == ["5: a torn step folder (not a complete checkpoint)"]


# --- s3:// and the manager ------------------------------------------------------------------------------------


def s3_calls(url: str) -> dict[str, Callable[[Any], Any]]:
    state = params()
    target = {"params": abstract_restore_target(state)}

    def manager(root: Any) -> Any:
        return TrainingCheckpointManager(
            root,
            save_interval_steps=1,
            keep_last=1,
            keep_every=None,
            keep_best=None,
            best_mode=None,
            save_in_flight="wait",
            create=True,
        )

    rng = jax.random.key(0)
    return {
        "save_checkpointables": lambda path: save_checkpointables(path, {"params": state}),
        "load_checkpointables": lambda path: load_checkpointables(path, target),
        "abstract_checkpointables": lambda path: abstract_checkpointables(path),
        "save_training_checkpoint": lambda path: save_training_checkpoint(
            path, 1, state, {}, rng, None, iter(batches())
        ),
        "load_training_checkpoint": lambda path: load_training_checkpoint(
            path, target["params"], {}, abstract_restore_target(rng), None, iter(batches())
        ),
        "save_legacy_v0_pytree": lambda path: save_legacy_v0_pytree(path, {"w": np.zeros(2)}),
        "load_legacy_v0_pytree": lambda path: load_legacy_v0_pytree(path),
        "save_legacy_v0_grain_iterator": lambda path: save_legacy_v0_grain_iterator(path, iter(batches())),
        "load_legacy_v0_grain_iterator": lambda path: load_legacy_v0_grain_iterator(path, iter(batches())),
        "TrainingCheckpointManager": manager,
    }


FUNCTIONS = list(s3_calls("s3://unused/x"))


@pytest.mark.parametrize("kind", ["str", "epath"])
@pytest.mark.parametrize("function", FUNCTIONS)
def test_every_function_refuses_s3_citing_the_orbax_issue_and_writes_nothing(
    s3_store: str, function: str, kind: str
) -> None:
    path = f"{s3_store}/ckpt"

    with pytest.raises(ValueError, match=r"google/orbax#359") as caught:
        s3_calls(path)[function](as_given(path, kind))

    assert "s3://" in str(caught.value)
    import s3fs

    fs = s3fs.S3FileSystem()
    fs.invalidate_cache()
    assert fs.find(s3_store.removeprefix("s3://")) == []


def test_a_gs_url_without_gcsfs_names_the_extra(gcs_store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gcsfs", None)

    for function in ("save_checkpointables", "load_checkpointables", "save_legacy_v0_pytree"):
        with pytest.raises(ImportError, match=r"tinax-checkpointing\[gcs\]"):
            s3_calls(gcs_store)[function](f"{gcs_store}/ckpt")
