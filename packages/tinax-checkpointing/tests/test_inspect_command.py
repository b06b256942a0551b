"""``tinax inspect`` on checkpoint folders and on roots of step folders, run as a user runs it."""

from __future__ import annotations

import pathlib
import shutil

import grain
import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from tinax.checkpointing import TrainingCheckpointManager, save_checkpointables
from tinax_testing import run_tinax

MIB = 1 << 20
GIB = 1 << 30
# Rows of the training checkpoints' kernel (4 float32 columns).
KERNEL_ROWS = 4096


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    folder = tmp_path_factory.mktemp("inspect") / "run"
    mesh = Mesh(np.array(jax.devices()).reshape(8), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    values = np.random.default_rng(0).standard_normal((KERNEL_ROWS, 4), dtype=np.float32)
    model = {"dense": {"kernel": jax.device_put(values, sharding), "bias": jax.numpy.zeros(4)}}
    iterator = iter(grain.MapDataset.range(10).to_iter_dataset())
    manager = TrainingCheckpointManager(
        folder,
        save_interval_steps=1,
        keep_last=3,
        keep_every=None,
        keep_best=None,
        best_mode=None,
        save_in_flight="wait",
        create=True,
    )
    for step in (3, 5):
        manager.save(
            step,
            model=model,
            optimizer={"mu": np.zeros(4, np.float32)},
            rng=jax.random.key_data(jax.random.key(step)),
            auxiliary={"loss": 0.5},
            iterator=iterator,
        )
        manager.wait()
    return folder


def test_a_training_checkpoint_shows_its_step_parts_and_arrays(root):
    result = run_tinax("inspect", str(root / "5"), "--json")
    assert result.code == 0, result.stderr
    document = result.json()
    assert document["kind"] == "orbax-checkpoint"
    summary = document["summary"]
    assert summary["complete"] is True
    assert summary["training_checkpoint"] is True
    assert summary["step"] == 5
    assert summary["parts"] == ["auxiliary", "iterator", "model", "optimizer", "rng"]
    arrays = {(row["part"], row["name"]): row for row in document["tables"]["arrays"]["rows"]}
    kernel = arrays[("model", "dense/kernel")]
    assert kernel["dtype"] == "float32"
    assert kernel["shape"] == [KERNEL_ROWS, 4]
    assert "NamedSharding" in kernel["sharding"]
    assert "data" in kernel["sharding"]
    assert arrays[("optimizer", "mu")]["shape"] == [4]
    text = run_tinax("inspect", str(root / "3")).stdout
    assert "step:                3" in text.splitlines()
    assert ["iterator", "StatefulCheckpointableHandler", "-"] in [line.split() for line in text.splitlines()]


def test_a_one_gib_checkpoint_is_described_from_metadata_alone(tmp_path):
    # Random bytes, so that no compression shrinks what lies on disk.
    mesh = Mesh(np.array(jax.devices()).reshape(8), ("data",))
    payload = np.frombuffer(np.random.default_rng(1).bytes(GIB), np.uint8).reshape(8, GIB // 8)
    weights = jax.device_put(payload, NamedSharding(mesh, PartitionSpec("data")))
    del payload
    save_checkpointables(tmp_path / "large", {"model": {"weights": weights}}).result()
    del weights
    size = sum(path.stat().st_size for path in (tmp_path / "large").rglob("*") if path.is_file())
    assert size >= GIB
    document = run_tinax("inspect", str(tmp_path / "large"), "--json").json()
    assert document["ok"] is True
    assert [row["shape"] for row in document["tables"]["arrays"]["rows"]] == [[8, GIB // 8]]
    # Orbax and TensorStore keep no count of their own reads, so this is every
    # byte the inspecting process read meanwhile, by the kernel's count: an
    # upper bound on what the checkpoint readers read.
    assert document["bytes_read"] is not None
    assert document["bytes_read"] < MIB, document["bytes_read"]


def test_names_filters_arrays(root):
    document = run_tinax("inspect", str(root / "5"), "--names", "model/*", "--json").json()
    assert [(row["part"], row["name"]) for row in document["tables"]["arrays"]["rows"]] == [
        ("model", "dense/bias"),
        ("model", "dense/kernel"),
    ]


def test_an_incomplete_checkpoint_exits_1_and_says_why(root, tmp_path):
    copy = tmp_path / "5"
    shutil.copytree(root / "5", copy)
    shutil.rmtree(copy / "optimizer")
    result = run_tinax("inspect", str(copy), "--json")
    assert result.code == 1
    document = result.json()
    assert document["summary"]["complete"] is False
    assert document["ok"] is False
    # The check ran and found the problem: no error, the same keys as any document.
    assert document["error"] is None
    (problem,) = document["problems"]
    assert "checkpointable 'optimizer', listed in its metadata, is missing" in problem
    text = run_tinax("inspect", str(copy))
    assert text.code == 1
    assert text.stdout.splitlines()[2].split() == ["complete:", "no"]


def test_an_unfinished_save_is_incomplete(root, tmp_path):
    unfinished = tmp_path / "7.orbax-checkpoint-tmp"
    shutil.copytree(root / "3", unfinished)
    result = run_tinax("inspect", str(unfinished), "--json")
    assert result.code == 1
    assert "temporary folder of a save that has not finished" in result.json()["problems"][0]


def test_a_checkpoint_that_is_not_a_training_checkpoint_has_no_step(tmp_path):
    path = tmp_path / "plain"
    save_checkpointables(path, {"weights": {"w": np.ones((2, 3), np.int32)}}).result()
    document = run_tinax("inspect", str(path), "--json").json()
    assert document["summary"]["training_checkpoint"] is False
    assert "step" not in document["summary"]
    assert document["tables"]["arrays"]["rows"] == [
        {"part": "weights", "name": "w", "type": "numpy", "dtype": "int32", "shape": [2, 3], "sharding": None}
    ]


def test_a_root_lists_committed_steps_and_the_latest(root):
    result = run_tinax("inspect", str(root), "--json")
    assert result.code == 0, result.stderr
    document = result.json()
    assert document["kind"] == "checkpoint-root"
    assert document["summary"]["committed_steps"] == [3, 5]
    assert document["summary"]["latest_committed_step"] == 5
    assert "latest committed step: 5" in run_tinax("inspect", str(root)).stdout


def test_a_root_with_torn_and_temporary_folders_exits_1(root, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(root, copy)
    (copy / "5" / "_CHECKPOINT_METADATA").unlink()
    (copy / "8.orbax-checkpoint-tmp").mkdir()
    (copy / "notes.txt").write_text("mine")
    result = run_tinax("inspect", str(copy), "--json")
    assert result.code == 1
    document = result.json()
    assert document["summary"]["committed_steps"] == [3]
    assert document["summary"]["latest_committed_step"] == 3
    states = {row["name"]: row["state"] for row in document["tables"]["entries"]["rows"]}
    assert states == {"3": "committed", "5": "torn", "8.orbax-checkpoint-tmp": "temporary", "notes.txt": "unrelated"}
    assert document["problems"] == [
        "5: a torn step folder (not a complete checkpoint)",
        "8.orbax-checkpoint-tmp: an unfinished save (still running, or interrupted)",
    ]
    # Nothing was removed.
    assert (copy / "8.orbax-checkpoint-tmp").is_dir()


def test_a_step_that_lost_its_iterator_state_is_torn_in_the_root_and_incomplete_alone(root, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(root, copy)
    (copy / "5" / "iterator" / "process_0-of-1.json").unlink()
    result = run_tinax("inspect", str(copy), "--json")
    assert result.code == 1
    document = result.json()
    assert document["summary"]["committed_steps"] == [3]
    assert document["summary"]["latest_committed_step"] == 3
    states = {row["name"]: row["state"] for row in document["tables"]["entries"]["rows"]}
    assert states == {"3": "committed", "5": "torn"}
    assert document["problems"] == ["5: a torn step folder (not a complete checkpoint)"]
    alone = run_tinax("inspect", str(copy / "5"), "--json")
    assert alone.code == 1
    assert alone.json()["summary"]["complete"] is False
    (problem,) = alone.json()["problems"]
    assert "its iterator part 'iterator' holds no iterator state file" in problem
