"""The tinax main job: a complete, resumable training run on an 8-device CPU mesh.

Run it with `hatch run demo` (add `--help` for the flags). Everything is
generated locally; nothing is downloaded. In order, it:

1. generates a synthetic 4-class classification dataset and writes it both as
   Parquet and as ArrayRecord (`tinax.data`), then checks that the two files
   read back identical;
2. splits it into train and test with `split_by_column`, which refuses rows
   whose split value is neither;
3. builds deterministic, process-aware `training_batches`;
4. builds a Flax NNX MLP with `eager_sharded_init` on a `make_mesh` mesh with
   a data and a model axis, so each parameter is laid out as it is created;
5. trains it with optax's adam under `bounded_jit(max_traces=1)`, with batches
   placed by `place_host_array` and per-step noise keys from
   `derive_process_step_key`;
6. saves `TrainingCheckpoint`s (model, optimizer, key, losses and the data
   iterator's position) on a schedule with a `TrainingCheckpointManager`,
   which keeps the last two steps and the resume step and deletes the rest;
7. simulates an interruption: a new process rebuilds everything from scratch,
   restores the resume step's checkpoint and trains to the end, and the demo checks that
   its losses and final parameters equal the uninterrupted run bit for bit;
8. exports the final weights and optimizer moments with `save_safetensors`,
   reloads only the model weights under a byte budget with `load_safetensors`,
   and evaluates them on the test split with `evaluation_batches`.

It prints progress, a summary table, and writes a loss curve (`loss.png`),
the data, the checkpoints and the weights into the output folder. It refuses
an existing output folder unless `--overwrite` is given.

This file is a runnable example, not a stable API.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

FEATURES = 16
CLASSES = 4
HIDDEN = 64
ROWS = 6000
TEST_FRACTION = 0.2
LEARNING_RATE = 3e-3
INPUT_NOISE = 0.05
#: Hidden flag: run only the resumed half of the training, in a new process.
RESUME_FLAG = "--resume-from-checkpoint"
DEFAULT_BATCH_SIZE = 64
#: File that marks an output folder as this demo's, so --overwrite never deletes anything else.
MARKER = "tinax-demo.txt"


def parse_mesh(text: str) -> tuple[int, int]:
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(part.isdigit() and int(part) > 0 for part in parts):
        raise argparse.ArgumentTypeError(f"expected DATAxMODEL with positive sizes, such as 2x4, got {text!r}")
    return int(parts[0]), int(parts[1])


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=300, help="training steps (default: 300)")
    parser.add_argument(
        "--checkpoint-step",
        type=int,
        default=None,
        help="step the resumed process restores (default: steps // 2); checkpoints are saved every "
        "checkpoint-step / (its smallest prime factor) steps",
    )
    parser.add_argument("--output", type=pathlib.Path, default=pathlib.Path("demo-output"), help="output folder")
    parser.add_argument("--overwrite", action="store_true", help="replace the output folder if it exists")
    parser.add_argument(
        "--mesh", type=parse_mesh, default=(2, 4), help="mesh shape DATAxMODEL over CPU devices (default: 2x4)"
    )
    parser.add_argument(
        "--batch-size", type=int, default=None, help=f"global batch size (default: {DEFAULT_BATCH_SIZE})"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the data, the model and the keys (default: 0)")
    parser.add_argument(RESUME_FLAG, type=pathlib.Path, default=None, help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    data_size, model_size = arguments.mesh
    if arguments.steps < 2:
        parser.error(f"--steps must be at least 2, got {arguments.steps}")
    if arguments.checkpoint_step is None:
        arguments.checkpoint_step = arguments.steps // 2
    if not 1 <= arguments.checkpoint_step < arguments.steps:
        parser.error(f"--checkpoint-step must be in [1, {arguments.steps - 1}], got {arguments.checkpoint_step}")
    mesh = f"{data_size}x{model_size}"
    if HIDDEN % model_size:
        parser.error(
            f"--mesh {mesh}: the model axis ({model_size}) must divide the hidden width {HIDDEN}; "
            "for example 2x4, 4x2 or 8x1"
        )
    if arguments.batch_size is None:
        # The mesh is what the user chose here, so the mesh is what is wrong.
        if DEFAULT_BATCH_SIZE % data_size:
            parser.error(
                f"--mesh {mesh}: the data axis ({data_size}) must divide the batch size ({DEFAULT_BATCH_SIZE}); "
                f"choose another mesh, or a --batch-size that is a multiple of {data_size}"
            )
        arguments.batch_size = DEFAULT_BATCH_SIZE
    elif arguments.batch_size < 1 or arguments.batch_size % data_size:
        parser.error(
            f"--batch-size must be a positive multiple of the mesh's data axis ({data_size}), "
            f"got {arguments.batch_size}"
        )
    if not 0 <= arguments.seed < 2**32:
        parser.error(f"--seed must be in [0, 2**32 - 1], got {arguments.seed}")
    if arguments.resume_from_checkpoint is None:
        for folder in [arguments.output, *arguments.output.absolute().parents]:
            if folder.exists() and not folder.is_dir():
                # One line: the usage text would hide that this is about a path, not the flags.
                print(f"demo: error: --output {arguments.output}: {folder} is a file, not a folder", file=sys.stderr)
                raise SystemExit(2)
    if arguments.resume_from_checkpoint is None and arguments.output.exists():
        if not arguments.overwrite:
            parser.error(f"the output folder {arguments.output} exists; choose another or pass --overwrite")
        if any(arguments.output.iterdir()) and not (arguments.output / MARKER).is_file():
            parser.error(f"--overwrite replaces only folders this demo wrote, and {arguments.output} is not one")
    return arguments


# Everything below runs after the device count is fixed, inside main().


def synthetic_records(seed: int) -> list[dict[str, Any]]:
    """Rows of a learnable 4-class problem, each tagged 'train' or 'test'."""
    import numpy as np

    rng = np.random.default_rng(seed)
    features = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
    projection = rng.normal(size=(FEATURES, CLASSES)).astype(np.float32)
    labels = np.argmax(features @ projection + 0.3 * rng.normal(size=(ROWS, CLASSES)), axis=1)
    splits = np.where(rng.random(ROWS) < TEST_FRACTION, "test", "train")
    return [{"features": features[row], "label": int(labels[row]), "split": str(splits[row])} for row in range(ROWS)]


def stack_examples(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The batch function: stacks a batch's rows into host arrays."""
    import numpy as np

    return {
        "features": np.stack([row["features"] for row in rows]),
        "label": np.asarray([row["label"] for row in rows], dtype=np.int32),
    }


class Setup:
    """What both the uninterrupted run and the resumed process build from scratch."""

    def __init__(self, arguments: argparse.Namespace, data_folder: pathlib.Path) -> None:
        import jax
        import optax
        from flax import nnx
        from grain.sharding import ShardOptions
        from jax.sharding import AxisType

        from tinax.data import read_parquet_record, split_by_column, training_batches
        from tinax.jit import bounded_jit
        from tinax.parallel import eager_sharded_init, layout, make_mesh

        data_size, model_size = arguments.mesh
        self.mesh = make_mesh(
            jax.devices(), (data_size, model_size), ("data", "model"), axis_types=(AxisType.Explicit,) * 2
        )
        self.features_layout = layout(self.mesh, ("data", None))
        self.labels_layout = layout(self.mesh, ("data",))

        rows = read_parquet_record(data_folder / "rows.parquet")
        self.train_rows, self.test_rows = split_by_column(rows, "split")
        self.shard_options = ShardOptions(
            shard_index=jax.process_index(), shard_count=jax.process_count(), drop_remainder=True
        )
        self.batches = training_batches(
            self.train_rows,
            shard_options=self.shard_options,
            seed=arguments.seed,
            shuffle=True,
            num_epochs=None,
            batch_size=arguments.batch_size // jax.process_count(),
            batch_fn=stack_examples,
        )
        self.iterator = iter(self.batches)

        class MLP(nnx.Module):
            def __init__(self, rngs: nnx.Rngs) -> None:
                kernel = nnx.initializers.lecun_normal()
                zeros = nnx.initializers.zeros_init()
                self.hidden = nnx.Linear(
                    FEATURES,
                    HIDDEN,
                    kernel_init=nnx.with_partitioning(kernel, (None, "model")),
                    bias_init=nnx.with_partitioning(zeros, ("model",)),
                    rngs=rngs,
                )
                self.out = nnx.Linear(
                    HIDDEN,
                    CLASSES,
                    kernel_init=nnx.with_partitioning(kernel, ("model", None)),
                    bias_init=nnx.with_partitioning(zeros, (None,)),
                    rngs=rngs,
                )

            def __call__(self, inputs: jax.Array) -> jax.Array:
                hidden = jax.nn.relu(self.hidden(inputs))
                # The contraction runs over the sharded model axis: say that
                # the logits come out sharded by batch only.
                return self.out(hidden, out_sharding=jax.sharding.PartitionSpec("data", None))

        def build() -> tuple[MLP, nnx.Optimizer]:
            model = MLP(nnx.Rngs(arguments.seed))
            return model, nnx.Optimizer(model, optax.adam(LEARNING_RATE), wrt=nnx.Param)

        self.model, self.optimizer = eager_sharded_init(build, self.mesh)
        self.graphdef, self.state = nnx.split((self.model, self.optimizer))
        # Replicated on the mesh, like every other input of the step.
        self.root_key = jax.device_put(jax.random.key(arguments.seed), layout(self.mesh, ()))

        graphdef = self.graphdef

        def train_step(state: Any, features: jax.Array, labels: jax.Array, key: jax.Array) -> tuple[Any, jax.Array]:
            model, optimizer = nnx.merge(graphdef, state)

            def loss_of(model: MLP) -> jax.Array:
                noisy = features + INPUT_NOISE * jax.random.normal(key, features.shape)
                return optax.softmax_cross_entropy_with_integer_labels(model(noisy), labels).mean()

            loss, gradients = nnx.value_and_grad(loss_of)(model)
            optimizer.update(model, gradients)
            return nnx.state((model, optimizer)), loss

        self.step_fn = bounded_jit(train_step, max_traces=1)

    def train(self, first_step: int, last_step: int, *, report: bool, checkpoint: Any = None) -> list[float]:
        """Runs steps first_step..last_step-1; calls checkpoint(step) after the step it names."""
        import jax

        from tinax.parallel import place_host_array
        from tinax.random import derive_process_step_key

        losses = []
        started = time.perf_counter()
        examples = 0
        every = max(1, (last_step - first_step) // 10)
        with jax.set_mesh(self.mesh):
            for step in range(first_step, last_step):
                batch = next(self.iterator)
                features = place_host_array(batch["features"], self.features_layout, copy=False)
                labels = place_host_array(batch["label"], self.labels_layout, copy=False)
                key = derive_process_step_key(self.root_key, process_index=jax.process_index(), step=step)
                self.state, loss = self.step_fn(self.state, features, labels, key)
                losses.append(float(loss))
                examples += len(batch["label"])
                if checkpoint is not None:
                    checkpoint(step + 1, losses)
                if report and ((step + 1 - first_step) % every == 0 or step + 1 == last_step):
                    rate = examples / (time.perf_counter() - started)
                    print(
                        f"  step {step + 1:5d}/{last_step}  loss {losses[-1]:.6f}  {rate:9.0f} examples/s", flush=True
                    )
        return losses

    def model_and_optimizer_state(self) -> tuple[Any, Any]:
        from flax import nnx

        model, optimizer = nnx.merge(self.graphdef, self.state)
        return nnx.state(model), nnx.state(optimizer)

    def load_checkpoint(self, manager: Any, step: int) -> int:
        """Restores model, optimizer and iterator from the manager's checkpoint of ``step``; returns its step."""
        import numpy as np
        from flax import nnx

        from tinax.checkpointing import abstract_restore_target

        model_state, optimizer_state = self.model_and_optimizer_state()
        restored = manager.restore(
            step,
            abstract_restore_target(model_state),
            abstract_restore_target(optimizer_state),
            abstract_restore_target(self.root_key),
            # Every target states what it expects: one loss per step trained so far.
            {"losses": np.zeros(step, np.float32)},
            self.iterator,
        )
        model, optimizer = nnx.merge(self.graphdef, self.state)
        nnx.update(model, restored.model)
        nnx.update(optimizer, restored.optimizer)
        _, self.state = nnx.split((model, optimizer))
        self.root_key = restored.rng
        return int(restored.step)


def parameter_tensors(state: Any, prefix: str) -> dict[str, Any]:
    """Host copies of every array in an NNX state, keyed by dotted path.

    Each array leaves JAX through `to_numpy(writable=True)`, one array at a
    time, so nothing is gathered silently: every host copy is asked for.
    """
    import jax

    from tinax.array import to_numpy

    tensors = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        if isinstance(leaf, jax.Array) and not jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.extended):
            parts = [str(getattr(part, "key", getattr(part, "idx", getattr(part, "name", part)))) for part in path]
            if parts[-1] == "value":  # the array inside an NNX Variable
                parts.pop()
            tensors[prefix + ".".join(parts)] = to_numpy(leaf, writable=True)
    return tensors


def checkpoint_manager(root: pathlib.Path, checkpoint_step: int, *, create: bool) -> Any:
    """The demo's save schedule and retention policy over ``root``, the same in both processes.

    Checkpoints are saved every ``checkpoint_step / p`` steps, with ``p`` the
    smallest prime factor of ``checkpoint_step``, so the resume step is one of
    them. The last two are kept, and so is every multiple of the resume step;
    the manager deletes the others once a newer save has committed.
    """
    from tinax.checkpointing import TrainingCheckpointManager

    factor = next((p for p in range(2, checkpoint_step + 1) if checkpoint_step % p == 0), 1)
    return TrainingCheckpointManager(
        root,
        save_interval_steps=checkpoint_step // factor,
        keep_last=2,
        keep_every=checkpoint_step,
        keep_best=None,
        best_mode=None,
        save_in_flight="wait",
        create=create,
    )


def bits(values: Sequence[float]) -> list[str]:
    """Exact float32 bit patterns, so 'equal' means bit for bit."""
    import numpy as np

    return [format(value, "08x") for value in np.asarray(values, dtype=np.float32).view(np.uint32).tolist()]


def resumed_process(arguments: argparse.Namespace) -> int:
    """The simulated restart: a new process that restores the resume step's checkpoint and trains on."""
    root = arguments.resume_from_checkpoint
    output = root.parent
    setup = Setup(arguments, output / "data")
    manager = checkpoint_manager(root, arguments.checkpoint_step, create=False)
    step = setup.load_checkpoint(manager, arguments.checkpoint_step)
    losses = setup.train(step, arguments.steps, report=False)
    model_state, _ = setup.model_and_optimizer_state()
    report = {
        "step": step,
        "losses": bits(losses),
        "parameters": {name: value.tobytes().hex() for name, value in parameter_tensors(model_state, "").items()},
        "trace_count": setup.step_fn.trace_count,
    }
    (output / "resumed.json").write_text(json.dumps(report))
    return 0


def matplotlib_missing() -> bool:
    """Whether matplotlib, which only draws the loss curve, is absent (found without importing it)."""
    try:
        return importlib.util.find_spec("matplotlib") is None
    except (ImportError, ValueError):
        return True


def plot_losses(path: pathlib.Path, full: Sequence[float], resumed: Sequence[float], resumed_from: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(7, 4), dpi=100)
    axes.plot(range(1, len(full) + 1), full, label="uninterrupted run", linewidth=1.5)
    axes.plot(
        range(resumed_from + 1, resumed_from + len(resumed) + 1),
        resumed,
        label=f"resumed from step {resumed_from} in a new process",
        linestyle="--",
        linewidth=1.5,
    )
    axes.axvline(resumed_from, color="grey", linewidth=0.8)
    axes.set_xlabel("step")
    axes.set_ylabel("training loss (cross-entropy)")
    axes.set_title("tinax demo: 4-class MLP on an 8-device CPU mesh")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)


def main(argv: Sequence[str]) -> int:
    arguments = parse_arguments(argv)
    data_size, model_size = arguments.mesh
    # The device count must be fixed before JAX starts.
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["JAX_NUM_CPU_DEVICES"] = str(data_size * model_size)
    if arguments.resume_from_checkpoint is not None:
        return resumed_process(arguments)
    # Said before any work starts, not discovered at the end.
    plot = not matplotlib_missing()
    if not plot:
        print(
            "demo: matplotlib is not installed, so the loss curve (loss.png) will be skipped; "
            "everything else runs. Install it with `pip install matplotlib` to get the plot.",
            file=sys.stderr,
            flush=True,
        )

    import jax
    import numpy as np
    from grain.sharding import ShardOptions

    from tinax.data import (
        evaluation_batches,
        read_array_record,
        read_parquet_record,
        write_array_record,
        write_parquet_record,
    )
    from tinax.parallel import layout, place_host_array
    from tinax.weights import load_safetensors, save_safetensors

    started = time.perf_counter()
    output: pathlib.Path = arguments.output
    if output.exists():
        shutil.rmtree(output)  # --overwrite was given; parse_arguments refused otherwise
    output.mkdir(parents=True)
    (output / MARKER).write_text("Written by the tinax demo; `--overwrite` may replace this folder.\n")
    data_folder = output / "data"
    data_folder.mkdir()
    (output / "weights").mkdir()

    print(f"1. data: {ROWS} synthetic rows, {FEATURES} features, {CLASSES} classes")
    records = synthetic_records(arguments.seed)
    write_parquet_record(data_folder / "rows.parquet", records)
    write_array_record(data_folder / "rows.arrayrecord", records)
    parquet_rows = read_parquet_record(data_folder / "rows.parquet")
    array_record_rows = read_array_record(data_folder / "rows.arrayrecord")
    identical = len(parquet_rows) == len(array_record_rows) == ROWS and all(
        np.array_equal(parquet_rows[index]["features"], array_record_rows[index]["features"])
        and parquet_rows[index]["label"] == array_record_rows[index]["label"]
        for index in range(0, ROWS, 97)
    )
    print(f"   wrote {data_folder}/rows.parquet and rows.arrayrecord; read back identical: {identical}")
    if not identical:
        print("demo: the Parquet and ArrayRecord files disagree", file=sys.stderr)
        return 1

    setup = Setup(arguments, data_folder)
    print(f"2. split: {len(setup.train_rows)} train rows, {len(setup.test_rows)} test rows")
    print(
        f"3. pipeline: shuffled batches of {arguments.batch_size}, shard {setup.shard_options.shard_index + 1}/"
        f"{setup.shard_options.shard_count}, seed {arguments.seed}"
    )
    print(
        f"4. model: mesh: {data_size * model_size} CPU devices as data {data_size} x model {model_size}; "
        f"hidden kernel laid out as {setup.model.hidden.kernel.get_value().sharding.spec}"
    )

    checkpoints = output / "checkpoints"
    manager = checkpoint_manager(checkpoints, arguments.checkpoint_step, create=True)

    def save_on_schedule(step: int, losses: list[float]) -> None:
        if not manager.should_save(step):
            return
        model_state, optimizer_state = setup.model_and_optimizer_state()
        manager.save(
            step,
            model_state,
            optimizer_state,
            setup.root_key,
            {"losses": np.asarray(losses, dtype=np.float32)},
            setup.iterator,
        )
        print(f"   6. checkpoint of step {step} started: {checkpoints / str(step)}", flush=True)

    print(f"5. training {arguments.steps} steps (adam, bounded_jit with a budget of 1 trace)")
    training_started = time.perf_counter()
    losses = setup.train(0, arguments.steps, report=True, checkpoint=save_on_schedule)
    training_seconds = time.perf_counter() - training_started
    retained = manager.retained_steps()
    print(f"   checkpoints committed; retained steps: {', '.join(map(str, retained))} in {checkpoints}")

    print(f"7. interruption: a new process restores step {arguments.checkpoint_step} and trains to the end")
    resume_flags = [
        "--steps", str(arguments.steps),
        "--checkpoint-step", str(arguments.checkpoint_step),
        "--mesh", f"{data_size}x{model_size}",
        "--batch-size", str(arguments.batch_size),
        "--seed", str(arguments.seed),
        RESUME_FLAG, str(checkpoints),
    ]  # fmt: skip
    completed = subprocess.run([sys.executable, os.path.abspath(__file__), *resume_flags], check=False)
    if completed.returncode != 0:
        print(f"demo: the resumed process failed with exit code {completed.returncode}", file=sys.stderr)
        return 1
    resumed = json.loads((output / "resumed.json").read_text())
    final_model_state, final_optimizer_state = setup.model_and_optimizer_state()
    final_parameters = parameter_tensors(final_model_state, "")
    losses_match = resumed["losses"] == bits(losses[arguments.checkpoint_step :])
    parameters_match = resumed["parameters"] == {
        name: value.tobytes().hex() for name, value in final_parameters.items()
    }
    print(
        f"   resumed losses of steps {arguments.checkpoint_step + 1}..{arguments.steps} equal the uninterrupted run "
        f"bit for bit: {losses_match}; final parameters equal: {parameters_match}"
    )
    resumed_losses = np.asarray([int(value, 16) for value in resumed["losses"]], dtype=np.uint32).view(np.float32)

    print("8. export: model weights and adam moments to safetensors; reload only the model under a byte budget")
    weights_path = output / "weights" / "model.safetensors"
    exported = parameter_tensors(final_model_state, "model.") | parameter_tensors(final_optimizer_state, "optimizer.")
    save_safetensors(
        weights_path,
        exported,
        overwrite=False,
        metadata={"producer": "tinax demo", "step": str(arguments.steps)},
        max_metadata_bytes=1024,
    )
    model_names = sorted(name for name in exported if name.startswith("model."))
    budget = sum(exported[name].nbytes for name in model_names)
    loaded = load_safetensors(weights_path, max_bytes=budget, names=model_names, max_metadata_bytes=1024)
    print(
        f"   {weights_path.name}: {len(exported)} tensors; loaded {len(loaded.tensors)} of them "
        f"({budget} bytes, the whole budget)"
    )

    # Evaluation sees every test row once, so its shards keep the remainder.
    evaluation_shard = ShardOptions(
        shard_index=setup.shard_options.shard_index, shard_count=setup.shard_options.shard_count, drop_remainder=False
    )
    evaluation = evaluation_batches(
        setup.test_rows, shard_options=evaluation_shard, batch_size=arguments.batch_size, batch_fn=stack_examples
    )
    weights = {name.removeprefix("model."): value for name, value in loaded.tensors.items()}
    replicated = layout(setup.mesh, (None, None))
    replicated_vector = layout(setup.mesh, (None,))
    placed = {
        name: place_host_array(value, replicated if value.ndim == 2 else replicated_vector, copy=False)
        for name, value in weights.items()
    }

    @jax.jit
    def predict(parameters: dict[str, jax.Array], features: jax.Array) -> jax.Array:
        hidden = jax.nn.relu(features @ parameters["hidden.kernel"] + parameters["hidden.bias"])
        return jax.numpy.argmax(hidden @ parameters["out.kernel"] + parameters["out.bias"], axis=-1)

    correct = total = 0
    for batch in evaluation:
        predictions = np.asarray(predict(placed, jax.numpy.asarray(batch["features"])))
        correct += int(np.sum(predictions == batch["label"]))
        total += len(batch["label"])
    accuracy = correct / total
    print(f"   test accuracy on {total} held-out rows: {accuracy:.3f}")

    plot_path = output / "loss.png"
    if plot:
        plot_losses(plot_path, losses, resumed_losses.tolist(), arguments.checkpoint_step)

    ok = (
        losses_match
        and parameters_match
        and resumed["trace_count"] == 1
        and losses[-1] < losses[0]
        and arguments.checkpoint_step in retained
    )
    rows = [
        ("steps", f"{arguments.steps} (checkpoint after {arguments.checkpoint_step})"),
        ("retained steps", ", ".join(map(str, retained))),
        ("mesh", f"{data_size} x {model_size} ('data', 'model'), {data_size * model_size} CPU devices"),
        ("traces used", f"{setup.step_fn.trace_count} of {setup.step_fn.max_traces}"),
        ("first / last loss", f"{losses[0]:.6f} / {losses[-1]:.6f}"),
        ("training throughput", f"{arguments.steps * arguments.batch_size / training_seconds:.0f} examples/s"),
        ("resume bit-identical", "yes" if losses_match and parameters_match else "NO"),
        ("test accuracy", f"{accuracy:.3f} on {total} rows"),
        ("loss curve", str(plot_path) if plot else "skipped (matplotlib is not installed)"),
        ("wall time", f"{time.perf_counter() - started:.1f} s"),
    ]
    print()
    for label, value in rows:
        print(f"{label:<24}{value}")
    if not ok:
        print("demo: FAILED (see the table above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
