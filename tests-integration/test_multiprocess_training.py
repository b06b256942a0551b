"""Distributed training in two processes, a SIGKILL in the middle of a save, a restart and an exact resume.

Two local processes of four CPU devices each form one JAX runtime and train a
small Flax NNX MLP, sharded over a (data, model) mesh of all eight devices,
with Adam. Each process reads its own shard of the records through
``training_batches`` (sharded by JAX process), adds noise drawn from the key
``derive_process_step_key`` gives it for the step, and hands its rows to
``from_process_local_data``; one ``bounded_jit`` step trains on the global
batch. Every process saves a training checkpoint into ``<dir>/step-<n>`` at
the same steps, in the same order.

Three runs, each a fresh pair of processes:

1. The reference trains all steps without interruption.
2. The crash run trains the same way, but process 1 kills itself with
   SIGKILL while the save of the last checkpoint step is being written: the
   harness stops the peer and raises ``DistributedRunError``.
3. The restart builds everything again from other initial weights and
   another root key, looks for the newest complete ``step-<n>`` (the torn
   save must be refused, never mistaken for a checkpoint), restores it and
   trains to the end.

The restart must then match the reference bit for bit: the loss of every
resumed step, each process's batches and the final parameters and optimizer
state.

The ``_body_*`` function runs in the child processes (the harness loads this
file there by path); the test only compares the JSON the children return and
the folders they leave.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import time
from typing import Any

import numpy as np
import pytest

from tinax_testing import (
    DistributedRunError,
    array_digest,
    float32_bits,
    regression_records,
    run_processes,
    sharded_mlp_class,
    stack_rows,
)

# Each test here starts, kills and resumes multi-process training runs: longer than the suite's default limit.
pytestmark = pytest.mark.timeout(900)

pytest.importorskip("flax", reason="the training run uses a Flax NNX model")
pytest.importorskip("optax", reason="the training run uses an optax optimizer")

NUM_PROCESSES = 2
DEVICES_PER_PROCESS = 4
TOTAL_STEPS = 8
SAVE_STEPS = (3, 6)
KILLED_SAVE_STEP = 6
KILLED_PROCESS = 1
LAST_COMMITTED_STEP = 3
LOCAL_BATCH = 4
GLOBAL_BATCH = LOCAL_BATCH * NUM_PROCESSES
FEATURES = 6
HIDDEN = 16
TARGETS = 2
RECORDS = 36  # 18 rows a process: batches run across epoch boundaries.
SOURCE_ID = "multiprocess-training-proof/v1"
DATA_SEED = 4321
RECORDS_SEED = 11
NOISE_SCALE = 0.1

REFERENCE_INIT_SEED = 0
REFERENCE_ROOT_KEY = 2026
# The restart starts from other weights and another key: only the checkpoint
# can make it match the reference.
RESTART_INIT_SEED = 99
RESTART_ROOT_KEY = 7

ORBAX_TMP_SUFFIX = ".orbax-checkpoint-tmp"
# Orbax 0.12.1 commits a local save by renaming its temporary folder and writes
# no commit_success.txt (0.12.8 does), so a committed step is a folder under
# its final name that holds the checkpoint metadata.
CHECKPOINT_METADATA = "_CHECKPOINT_METADATA"
TEMPORARY_SUFFIX = ".orbax-checkpoint-tmp"
STEP_FOLDER = re.compile(r"step-(\d+)")
KILL_WAIT_SECONDS = 60.0
RUN_TIMEOUT_SECONDS = 300.0


# ---------------------------------------------------------------------------
# Bodies and helpers run in the children.


def _newest_first(directory: pathlib.Path) -> list[tuple[int, str]]:
    """Every folder whose name starts with ``step-<n>``, newest step first: torn saves included on purpose."""
    found = []
    for entry in directory.iterdir():
        match = STEP_FOLDER.match(entry.name)
        if match and entry.is_dir():
            found.append((int(match.group(1)), entry.name))
    return sorted(found, reverse=True)


def _kill_this_process_during_save(checkpoints: pathlib.Path, step: int, markers: pathlib.Path) -> None:
    """Waits until the save's temporary folder exists, records what is on disk, then dies by SIGKILL."""
    final = checkpoints / f"step-{step}"
    temporary = checkpoints / f"step-{step}{ORBAX_TMP_SUFFIX}"
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    while not temporary.exists() and not final.exists() and time.monotonic() < deadline:
        time.sleep(0.0005)
    seen = {"temporary_existed": temporary.exists(), "committed": final.exists()}
    (markers / f"killed-process-{os.getpid()}.json").write_text(json.dumps(seen), encoding="utf-8")
    os.kill(os.getpid(), signal.SIGKILL)


def _body_train(checkpoint_dir: str, marker_dir: str, role: str) -> dict[str, Any]:
    import grain
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx
    from grain.sharding import ShardByJaxProcess
    from jax.experimental import multihost_utils
    from jax.sharding import AxisType

    from tinax.checkpointing import abstract_restore_target, load_training_checkpoint, save_training_checkpoint
    from tinax.data import InMemorySource, training_batches
    from tinax.jit import bounded_jit
    from tinax.parallel import abstract_sharded_state, eager_sharded_init, from_process_local_data, layout, make_mesh
    from tinax.random import derive_process_step_key

    checkpoints = pathlib.Path(checkpoint_dir)
    process = jax.process_index()

    mlp_class = sharded_mlp_class(FEATURES, HIDDEN, TARGETS, activation=jax.nn.gelu, output_spec=("data", None))

    # Process-major order: the 'model' pairs stay inside a process, 'data' spans both.
    devices = sorted(jax.devices(), key=lambda device: (device.process_index, device.id))
    mesh = make_mesh(devices, (4, 2), ("data", "model"), axis_types=(AxisType.Explicit, AxisType.Explicit))
    batch_layout = layout(mesh, ("data", None))
    replicated = layout(mesh, ())
    init_seed = REFERENCE_INIT_SEED if role != "restart" else RESTART_INIT_SEED

    def build() -> Any:
        return mlp_class(nnx.Rngs(init_seed))

    model = eager_sharded_init(build, mesh)
    optimizer = eager_sharded_init(lambda: nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param), mesh)
    root_seed = REFERENCE_ROOT_KEY if role != "restart" else RESTART_ROOT_KEY
    # device_put cannot reach other processes' devices: the replicated values are built by one global program.
    root_key, loss_sum = jax.jit(
        lambda: (jax.random.key(root_seed), jnp.zeros((), jnp.float32)), out_shardings=(replicated, replicated)
    )()

    dataset = grain.MapDataset.source(
        InMemorySource(regression_records(RECORDS, FEATURES, TARGETS, seed=RECORDS_SEED), source_id=SOURCE_ID)
    )
    batches = training_batches(
        dataset,
        # Built after jax.distributed.initialize, which the harness ran.
        shard_options=ShardByJaxProcess(drop_remainder=True),
        seed=DATA_SEED,
        shuffle=True,
        num_epochs=None,
        batch_size=LOCAL_BATCH,
        batch_fn=stack_rows,
    )
    iterator = iter(batches)
    graphdef = nnx.graphdef((model, optimizer))

    def train_step(state: Any, inputs: jax.Array, targets: jax.Array, total: jax.Array) -> Any:
        step_model, step_optimizer = nnx.merge(graphdef, state)

        def loss_fn(module: Any) -> jax.Array:
            return jnp.mean((module(inputs) - targets) ** 2)

        loss, grads = nnx.value_and_grad(loss_fn)(step_model)
        step_optimizer.update(step_model, grads)
        return nnx.state((step_model, step_optimizer)), loss, total + loss

    step_fn = bounded_jit(train_step, max_traces=1, mesh=mesh)

    def gathered_digests(tree: Any) -> dict[str, str]:
        # Gathered only to hash them: every process sees the whole value.
        return {
            jax.tree_util.keystr(path): array_digest(np.asarray(multihost_utils.process_allgather(leaf, tiled=True)))
            for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
        }

    def shard_digests(tree: Any) -> dict[str, list[str]]:
        return {
            jax.tree_util.keystr(path): [
                f"{shard.index}:{array_digest(np.asarray(shard.data))}"
                for shard in sorted(leaf.addressable_shards, key=lambda shard: shard.device.id)
            ]
            for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
        }

    report: dict[str, Any] = {"process": process, "initial": gathered_digests(nnx.state(model))}
    first_step = 1
    if role == "restart":
        refused = []
        for step_found, name in _newest_first(checkpoints):
            try:
                restored = load_training_checkpoint(
                    checkpoints / name,
                    abstract_sharded_state(build, mesh),
                    abstract_restore_target(nnx.state(optimizer)),
                    abstract_restore_target(root_key),
                    abstract_restore_target({"loss_sum": loss_sum}),
                    iterator,
                )
            except ValueError as error:
                refused.append({"name": name, "step": step_found, "error": type(error).__name__, "message": str(error)})
                continue
            report["restored_from"] = name
            break
        else:
            raise AssertionError(f"no complete checkpoint in {checkpoints}; refused {refused}")
        nnx.update(model, restored.model)
        nnx.update(optimizer, restored.optimizer)
        root_key = restored.rng
        loss_sum = restored.auxiliary["loss_sum"]
        first_step = restored.step + 1
        report["refused"] = refused
        report["restored_step"] = restored.step
        report["restored_kernel_spec"] = list(model.hidden.kernel[...].sharding.spec)

    # Keys are derived on this process's own copy of the replicated root key.
    local_root_key = root_key.addressable_shards[0].data
    steps: dict[str, dict[str, Any]] = {}
    pending_save = None
    state = nnx.state((model, optimizer))
    for step in range(first_step, TOTAL_STEPS + 1):
        batch = next(iterator)
        key = derive_process_step_key(local_root_key, process_index=process, step=step)
        noise = np.asarray(jax.random.normal(key, (LOCAL_BATCH, FEATURES), jnp.float32))
        noisy = (batch["x"] + np.float32(NOISE_SCALE) * noise).astype(np.float32)
        inputs = from_process_local_data(
            noisy, batch_layout, (GLOBAL_BATCH, FEATURES), copy=True, replica_policy="disallow"
        )
        targets = from_process_local_data(
            batch["y"], batch_layout, (GLOBAL_BATCH, TARGETS), copy=True, replica_policy="disallow"
        )
        state, loss, loss_sum = step_fn(state, inputs, targets, loss_sum)
        steps[str(step)] = {
            "loss_bits": float32_bits(np.asarray(loss.addressable_shards[0].data)),
            "batch": [array_digest(batch["x"]), array_digest(batch["y"])],
            "key": array_digest(np.asarray(jax.random.key_data(key))),
        }
        if step in SAVE_STEPS:
            if pending_save is not None:
                # The previous checkpoint is committed before the next save starts.
                pending_save.result()
            nnx.update((model, optimizer), state)
            pending_save = save_training_checkpoint(
                checkpoints / f"step-{step}",
                step,
                nnx.state(model),
                nnx.state(optimizer),
                root_key,
                {"loss_sum": loss_sum},
                iterator,
            )
            if role == "crash" and step == KILLED_SAVE_STEP and process == KILLED_PROCESS:
                _kill_this_process_during_save(checkpoints, step, pathlib.Path(marker_dir))
    if pending_save is not None:
        pending_save.result()
    nnx.update((model, optimizer), state)

    return {
        **report,
        "steps": steps,
        "final": gathered_digests(nnx.state((model, optimizer))),
        "final_shards": shard_digests(nnx.state(model)),
        "loss_sum_bits": float32_bits(np.asarray(loss_sum.addressable_shards[0].data)),
        "optimizer_step": int(np.asarray(optimizer.step[...].addressable_shards[0].data)),
        "traces": step_fn.trace_count,
    }


# ---------------------------------------------------------------------------
# The proof.


def _run(checkpoints: pathlib.Path, markers: pathlib.Path, role: str) -> list[dict[str, Any]]:
    checkpoints.mkdir(exist_ok=True)
    markers.mkdir(exist_ok=True)
    return run_processes(
        _body_train,
        num_processes=NUM_PROCESSES,
        devices_per_process=DEVICES_PER_PROCESS,
        args=(str(checkpoints), str(markers), role),
        timeout=RUN_TIMEOUT_SECONDS,
    )


def _is_committed(folder: pathlib.Path) -> bool:
    return folder.is_dir() and TEMPORARY_SUFFIX not in folder.name and (folder / CHECKPOINT_METADATA).is_file()


def test_a_run_killed_mid_save_resumes_from_the_last_committed_checkpoint(tmp_path: pathlib.Path) -> None:
    reference = _run(tmp_path / "reference", tmp_path / "reference-markers", "reference")

    crashed = tmp_path / "crashed"
    markers = tmp_path / "crash-markers"
    with pytest.raises(DistributedRunError) as caught:
        _run(crashed, markers, "crash")
    after_crash = sorted(entry.name for entry in crashed.iterdir())
    restarted = _run(crashed, markers, "restart")
    after_restart = sorted(entry.name for entry in crashed.iterdir())

    # The crash: process 1 died of its own SIGKILL; the harness stopped its peer, which never finished.
    reports = {report.process_id: report for report in caught.value.reports}
    assert reports[KILLED_PROCESS].returncode == -signal.SIGKILL
    assert not reports[KILLED_PROCESS].killed
    survivor = reports[1 - KILLED_PROCESS]
    assert survivor.returncode != 0
    [kill_marker] = list(markers.iterdir())
    # The kill landed during the save: its temporary folder existed and nothing was committed.
    assert json.loads(kill_marker.read_text(encoding="utf-8")) == {"temporary_existed": True, "committed": False}

    # The save at the last step never committed; the earlier one did.
    assert f"step-{KILLED_SAVE_STEP}" not in after_crash
    assert _is_committed(crashed / f"step-{LAST_COMMITTED_STEP}")
    torn = [name for name in after_crash if name.startswith(f"step-{KILLED_SAVE_STEP}")]
    assert torn
    assert all(ORBAX_TMP_SUFFIX in name for name in torn)
    assert set(after_crash) == {f"step-{LAST_COMMITTED_STEP}", *torn}

    # The restart refused every torn folder, newest first, and resumed from the last committed step.
    for result in restarted:
        assert [entry["name"] for entry in result["refused"]] == torn
        assert all(entry["error"] == "ValueError" for entry in result["refused"])
        assert all("incomplete checkpoint" in entry["message"] for entry in result["refused"])
        assert result["restored_from"] == f"step-{LAST_COMMITTED_STEP}"
        assert result["restored_step"] == LAST_COMMITTED_STEP
        assert result["restored_kernel_spec"] == [None, "model"]
    # The restart's own save of the torn step committed, and Orbax cleared the torn folder on the way.
    assert after_restart == [f"step-{step}" for step in SAVE_STEPS]
    assert all(_is_committed(crashed / name) for name in after_restart)

    resumed_steps = [str(step) for step in range(LAST_COMMITTED_STEP + 1, TOTAL_STEPS + 1)]
    for process, (expected, actual) in enumerate(zip(reference, restarted, strict=True)):
        assert expected["process"] == actual["process"] == process
        # The restart started from other weights: only the checkpoint can make it match.
        kernels = [leaf for leaf in expected["initial"] if "kernel" in leaf]
        assert len(kernels) == 2
        assert all(actual["initial"][leaf] != expected["initial"][leaf] for leaf in kernels)
        assert list(actual["steps"]) == resumed_steps
        for step in resumed_steps:
            # Loss bits, this process's batch bytes and its key, step by step.
            assert actual["steps"][step] == expected["steps"][step], f"process {process}, step {step} differs"
        assert actual["final"] == expected["final"]
        assert actual["final_shards"] == expected["final_shards"]
        assert actual["loss_sum_bits"] == expected["loss_sum_bits"]
        assert actual["optimizer_step"] == expected["optimizer_step"] == TOTAL_STEPS
        # Each process compiled its step once: the restored state has the same types and layouts.
        assert actual["traces"] == expected["traces"] == 1

    # Both processes agree on every global value, and they really fed different data.
    first, second = reference
    assert first["final"] == second["final"]
    assert all(first["steps"][step]["loss_bits"] == second["steps"][step]["loss_bits"] for step in first["steps"])
    assert all(first["steps"][step]["batch"] != second["steps"][step]["batch"] for step in first["steps"])
    assert all(first["steps"][step]["key"] != second["steps"][step]["key"] for step in first["steps"])
    # The proof is not vacuous: every step saw other batches and gave another loss.
    assert len({str(first["steps"][step]["batch"]) for step in first["steps"]}) == TOTAL_STEPS
    assert len({first["steps"][step]["loss_bits"] for step in first["steps"]}) == TOTAL_STEPS

    # Each checkpoint is distributed: every process saved its own iterator position, and the restart's
    # checkpoint of the torn step holds the same positions as the reference's.
    positions = [f"process_{index}-of-{NUM_PROCESSES}.json" for index in range(NUM_PROCESSES)]
    for save_step in SAVE_STEPS:
        saved = tmp_path / "reference" / f"step-{save_step}"
        assert _is_committed(saved)
        assert sorted(entry.name for entry in (saved / "iterator").iterdir()) == positions
    for name in positions:
        restarted_position = crashed / f"step-{KILLED_SAVE_STEP}" / "iterator" / name
        reference_position = tmp_path / "reference" / f"step-{KILLED_SAVE_STEP}" / "iterator" / name
        assert restarted_position.read_bytes() == reference_position.read_bytes()
