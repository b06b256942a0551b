"""The resume proof: a run stopped at step k and resumed in a new process is bit-identical to one never stopped.

A small Flax NNX MLP, sharded over a (data, model) mesh of the 8 CPU devices,
trains with Adam on batches of a deterministic tinax.data pipeline. Each step
draws its noise key with ``derive_process_step_key`` and runs one
``bounded_jit`` step. The reference run trains N steps and saves a training
checkpoint at step k, carrying on while the checkpoint is written. A second,
fresh process builds everything again (other initial weights, another root
key, a fresh iterator), restores step k from abstract targets and trains
steps k+1..N. Both runs report the exact bytes of every loss, batch and key
and of the final parameters.

The ``_body_*`` function runs in the child processes (the harness loads this
file there by path); the tests only compare the JSON the children return.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from tinax_testing import array_digest, regression_records, run_processes, sharded_mlp_class, stack_rows

# Each test here trains, stops and resumes in child processes: longer than the suite's default limit.
pytestmark = pytest.mark.timeout(900)

pytest.importorskip("flax", reason="the resume proof trains a Flax NNX model")
pytest.importorskip("optax", reason="the resume proof trains with an optax optimizer")

TOTAL_STEPS = 8
SAVE_STEP = 4
BATCH_SIZE = 8
FEATURES = 6
HIDDEN = 16
TARGETS = 2
# Not a multiple of the batch size: each epoch is cut to its first 32 shuffled
# rows (4 batches), and the save at step 4 falls on the epoch boundary, so the
# first batch after it comes from the second, reshuffled epoch.
RECORDS = 36
SOURCE_ID = "training-resume-proof/v1"
DATA_SEED = 1234
RECORDS_SEED = 5
NOISE_SCALE = 0.1

REFERENCE_INIT_SEED = 0
REFERENCE_ROOT_KEY = 2026
# The resumed run starts from other weights and another key: only the
# checkpoint can make it match the reference.
RESUMED_INIT_SEED = 99
RESUMED_ROOT_KEY = 7


# ---------------------------------------------------------------------------
# Bodies and helpers run in the children.


def _body_train(checkpoint: str, role: str) -> dict[str, Any]:
    import grain
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx
    from jax.sharding import AxisType

    from tinax.checkpointing import abstract_restore_target, load_training_checkpoint, save_training_checkpoint
    from tinax.data import InMemorySource, training_batches
    from tinax.jit import bounded_jit
    from tinax.parallel import (
        abstract_sharded_state,
        eager_sharded_init,
        layout,
        make_mesh,
        place_host_array,
    )
    from tinax.random import derive_process_step_key

    mlp_class = sharded_mlp_class(FEATURES, HIDDEN, TARGETS, activation=jax.nn.gelu, output_spec=("data", None))

    mesh = make_mesh(jax.devices(), (4, 2), ("data", "model"), axis_types=(AxisType.Explicit, AxisType.Explicit))
    batch_layout = layout(mesh, ("data", None))
    replicated = layout(mesh, ())
    optimizer_transform = optax.adam(1e-2)
    init_seed = REFERENCE_INIT_SEED if role == "reference" else RESUMED_INIT_SEED

    def build() -> nnx.Module:
        return mlp_class(nnx.Rngs(init_seed))

    model = eager_sharded_init(build, mesh)
    optimizer = eager_sharded_init(lambda: nnx.Optimizer(model, optimizer_transform, wrt=nnx.Param), mesh)
    root_key = jax.device_put(
        jax.random.key(REFERENCE_ROOT_KEY if role == "reference" else RESUMED_ROOT_KEY), replicated
    )
    loss_sum = jax.device_put(jnp.zeros((), jnp.float32), replicated)

    dataset = grain.MapDataset.source(
        InMemorySource(regression_records(RECORDS, FEATURES, TARGETS, seed=RECORDS_SEED), source_id=SOURCE_ID)
    )
    batches = training_batches(
        dataset,
        shard_options=grain.sharding.ShardOptions(shard_index=0, shard_count=1, drop_remainder=True),
        seed=DATA_SEED,
        shuffle=True,
        num_epochs=None,
        batch_size=BATCH_SIZE,
        batch_fn=stack_rows,
    )
    iterator = iter(batches)

    graphdef = nnx.graphdef((model, optimizer))

    def train_step(state: Any, inputs: jax.Array, targets: jax.Array, key: jax.Array, total: jax.Array) -> Any:
        step_model, step_optimizer = nnx.merge(graphdef, state)

        def loss_fn(module: Any) -> jax.Array:
            noisy = inputs + NOISE_SCALE * jax.random.normal(key, inputs.shape, inputs.dtype)
            return jnp.mean((module(noisy) - targets) ** 2)

        loss, grads = nnx.value_and_grad(loss_fn)(step_model)
        step_optimizer.update(step_model, grads)
        return nnx.state((step_model, step_optimizer)), loss, total + loss

    step_fn = bounded_jit(train_step, max_traces=1, mesh=mesh)

    def digests(tree: Any) -> dict[str, str]:
        return {
            jax.tree_util.keystr(path): array_digest(leaf)
            for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
        }

    report: dict[str, Any] = {"initial": digests(nnx.state((model, optimizer))), "restored_step": None}
    first_step = 1
    if role == "resume":
        # The model's target is its abstract state (nothing allocated); the
        # others come from the freshly initialized values they will replace.
        restored = load_training_checkpoint(
            checkpoint,
            abstract_sharded_state(build, mesh),
            abstract_restore_target(nnx.state(optimizer)),
            abstract_restore_target(root_key),
            abstract_restore_target({"loss_sum": loss_sum}),
            iterator,
        )
        nnx.update(model, restored.model)
        nnx.update(optimizer, restored.optimizer)
        root_key = restored.rng
        loss_sum = restored.auxiliary["loss_sum"]
        first_step = restored.step + 1
        report["restored_step"] = restored.step
        report["restored_iterator_is_ours"] = restored.iterator is iterator
        report["restored_kernel_spec"] = list(model.hidden.kernel[...].sharding.spec)

    steps: dict[str, dict[str, object]] = {}
    pending_save = None
    state = nnx.state((model, optimizer))
    for step in range(first_step, TOTAL_STEPS + 1):
        batch = next(iterator)
        inputs = place_host_array(batch["x"], batch_layout, copy=True)
        targets = place_host_array(batch["y"], batch_layout, copy=True)
        key = derive_process_step_key(root_key, process_index=jax.process_index(), step=step)
        state, loss, loss_sum = step_fn(state, inputs, targets, key, loss_sum)
        steps[str(step)] = {
            "loss": float(loss),
            "loss_bits": array_digest(loss),
            "batch": [array_digest(batch["x"]), array_digest(batch["y"])],
            "key": array_digest(jax.random.key_data(key)),
        }
        if role == "reference" and step == SAVE_STEP:
            nnx.update((model, optimizer), state)
            # Training carries on while the checkpoint is written.
            pending_save = save_training_checkpoint(
                checkpoint, step, nnx.state(model), nnx.state(optimizer), root_key, {"loss_sum": loss_sum}, iterator
            )
    if pending_save is not None:
        pending_save.result()
    nnx.update((model, optimizer), state)

    return {
        **report,
        "steps": steps,
        "final": digests(nnx.state((model, optimizer))),
        "loss_sum": array_digest(loss_sum),
        "optimizer_step": int(optimizer.step[...]),
        "traces": step_fn.trace_count,
    }


# ---------------------------------------------------------------------------
# The proof.


def _run(checkpoint: pathlib.Path, role: str) -> dict[str, Any]:
    [report] = run_processes(
        _body_train, num_processes=1, devices_per_process=8, args=(str(checkpoint), role), timeout=600
    )
    return report  # type: ignore[no-any-return]


def test_a_resumed_run_is_bit_identical_to_the_uninterrupted_one(tmp_path: pathlib.Path) -> None:
    checkpoint = tmp_path / f"step-{SAVE_STEP}"
    reference = _run(checkpoint, "reference")
    parts = sorted(entry.name for entry in checkpoint.iterdir() if entry.is_dir())
    resumed = _run(checkpoint, "resume")

    assert parts == ["auxiliary", "iterator", "model", "optimizer", "rng"]  # The step is inside "auxiliary".
    # The fresh process started from other weights: only the checkpoint can make it match.
    assert resumed["initial"].keys() == reference["initial"].keys()
    model_kernels = [leaf for leaf in reference["initial"] if leaf.startswith("[0]") and "kernel" in leaf]
    assert len(model_kernels) == 2
    assert all(resumed["initial"][leaf] != reference["initial"][leaf] for leaf in model_kernels)
    assert resumed["restored_step"] == SAVE_STEP
    assert resumed["restored_iterator_is_ours"] is True
    assert resumed["restored_kernel_spec"] == [None, "model"]

    resumed_steps = [str(step) for step in range(SAVE_STEP + 1, TOTAL_STEPS + 1)]
    assert list(resumed["steps"]) == resumed_steps
    for step in resumed_steps:
        # Loss bits, batch bytes and the step's key, step by step.
        assert resumed["steps"][step] == reference["steps"][step], f"step {step} differs"
    assert resumed["final"] == reference["final"]
    assert resumed["loss_sum"] == reference["loss_sum"]
    assert resumed["optimizer_step"] == reference["optimizer_step"] == TOTAL_STEPS
    # Each process compiled its step once: the restored state has the same types and layouts.
    assert resumed["traces"] == reference["traces"] == 1
    # The proof is not vacuous: the steps see different batches and losses.
    assert len({str(reference["steps"][step]["batch"]) for step in reference["steps"]}) == TOTAL_STEPS
    assert len({reference["steps"][step]["loss_bits"] for step in reference["steps"]}) == TOTAL_STEPS
