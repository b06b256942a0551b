"""A training state saved on one topology restores bit for bit onto others, across process counts.

Jobs rarely resume on the machines they started on. One training state (a
Flax NNX MLP on an Explicit ``(data, model)`` mesh, its ``nnx.Optimizer`` with
optax Adam after two updates, a sharded PRNG key array, auxiliary state and a
Grain iterator per process) is saved by real JAX runtimes and restored by
others:

* 1 process of 8 devices (this pytest process, which never starts the
  distributed runtime) saves a training checkpoint mid-epoch that 2 processes
  of 4 devices restore, through ``load_checkpointables`` and, the rest of the
  epoch re-dealt between them, through ``load_training_checkpoint`` and
  ``TrainingCheckpointManager.restore``;
* 2 processes of 4 devices save through ``TrainingCheckpointManager``, then
  restore their own checkpoint onto an Explicit 4x2 mesh with transposed
  partition specs through ``TrainingCheckpointManager.restore``,
  ``load_training_checkpoint`` and ``load_checkpointables``, and into host
  NumPy through all three;
* that checkpoint is restored by 1 process of 8 devices, 4 processes of 2
  devices and 1 process of 1 device, the iterator re-dealt onto each through
  ``load_training_checkpoint`` and ``TrainingCheckpointManager.restore``.

Every restored leaf must hold the saved bits, every restored array must have
the target's sharding, and an Explicit mesh must stay Explicit. The data
iterator (a ``training_batches`` iterator per process) is restored as it is
where the process count stays the same; its state is one file per process, so
on another process count the load refuses it unless asked to re-deal the rest
of the epoch (``redeal=True``), after which every row of the epoch is read
exactly once across the old and the new processes.

The ``_body_*`` functions run in the child processes (the harness loads this
file there by path); the tests compare the JSON they return.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import pytest

from tinax_testing import array_digest, run_processes, sharded_mlp_class

pytest.importorskip("flax", reason="the state holds a Flax NNX model")
pytest.importorskip("optax", reason="the state holds an optax optimizer")

# Each test here starts several JAX processes: longer than the suite's default limit.
pytestmark = pytest.mark.timeout(600)

FEATURES, HIDDEN, TARGETS = 16, 32, 8
SAVED_STEP = 2
RUN_TIMEOUT = 240
AXES = ("data", "model")
# Where the reference state lives: which process count saved it, and its mesh.
SAVE_MESH = (2, 4)
TRANSPOSED_MESH = (4, 2)
# The data pipeline each saving process iterates: ROWS rows, batches of BATCH rows per process.
ROWS, BATCH, SAVED_BATCHES = 64, 4, 3
# Rows per step across all processes: every save and every re-deal here keeps it.
GLOBAL_BATCH = SAVE_MESH[0] * BATCH


# ---------------------------------------------------------------------------
# Helpers run in the children and in this process.


def _mesh(shape: tuple[int, ...], devices: list[Any] | None = None) -> Any:
    import jax
    from jax.sharding import AxisType

    chosen = devices if devices is not None else sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    return jax.make_mesh(shape, AXES, axis_types=(AxisType.Explicit,) * len(shape), devices=chosen)


def _build(seed: int) -> Any:
    import jax
    from flax import nnx

    return sharded_mlp_class(FEATURES, HIDDEN, TARGETS, activation=jax.nn.gelu, output_spec=("data", None))(
        nnx.Rngs(seed)
    )


def _training_state(mesh: Any, seed: int) -> dict[str, Any]:
    """The model, its optimizer after two Adam updates, a sharded key array and auxiliary state, on ``mesh``."""
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx
    from jax.sharding import NamedSharding, PartitionSpec

    from tinax.parallel import eager_sharded_init

    model = eager_sharded_init(lambda: _build(seed), mesh)
    optimizer = eager_sharded_init(lambda: nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param), mesh)
    graphdef, state = nnx.split((model, optimizer))

    @jax.jit
    def update(state: Any, scale: jax.Array) -> Any:
        step_model, step_optimizer = nnx.merge(graphdef, state)
        grads = jax.tree.map(lambda value: jnp.cos(value * scale), nnx.state(step_model, nnx.Param))
        step_optimizer.update(step_model, grads)
        return nnx.state((step_model, step_optimizer))

    with jax.set_mesh(mesh):
        for scale in (1.0, 0.5):
            state = update(state, jnp.float32(scale))
    nnx.update((model, optimizer), state)
    keys = jax.jit(
        lambda: jax.random.split(jax.random.key(seed), 8),
        out_shardings=NamedSharding(mesh, PartitionSpec(AXES)),
    )()
    ema = jax.jit(
        lambda kernel: kernel * 0.5,
        out_shardings=NamedSharding(mesh, PartitionSpec(None, "model")),
    )(model.hidden.kernel[...])
    auxiliary = {"ema": ema, "loss_scale": np.asarray([2.0**15], np.float32), "seen": 40 + seed, "tag": "run-a"}
    return {"model": nnx.state(model), "optimizer": nnx.state(optimizer), "rng": keys, "auxiliary": auxiliary}


def _leaf_name(part: str, path: tuple[Any, ...]) -> str:
    return f"{part}/{_names(path)}" if path else part


def _names(path: tuple[Any, ...]) -> str:
    """A leaf's key path by names alone, as Orbax stores it (NNX's ``value`` attribute and a dict key alike)."""
    import jax

    parts = []
    for entry in path:
        if isinstance(entry, jax.tree_util.DictKey):
            parts.append(str(entry.key))
        elif isinstance(entry, jax.tree_util.SequenceKey):
            parts.append(str(entry.idx))
        elif isinstance(entry, jax.tree_util.GetAttrKey):
            parts.append(entry.name)
        else:
            parts.append(str(getattr(entry, "key", entry)))
    return "/".join(parts)


def _digests(parts: dict[str, Any]) -> dict[str, str]:
    """Every leaf's bits, gathered from all processes (a collective: every process calls it alike)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    digests = {}
    for part, tree in sorted(parts.items()):
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
            if isinstance(leaf, jax.Array):
                if jnp.issubdtype(leaf.dtype, jax.dtypes.extended):
                    leaf = jax.random.key_data(leaf)
                value = np.asarray(multihost_utils.process_allgather(leaf, tiled=True))
            elif isinstance(leaf, (str, int, float)):
                value = np.asarray(repr(leaf))
            else:
                value = np.asarray(leaf)
            digests[_leaf_name(part, path)] = array_digest(value)
    return digests


def _layouts(parts: dict[str, Any]) -> dict[str, Any]:
    """Where each restored array lives: mesh shape, axis types and spec, or ``numpy`` for a host array."""
    import jax

    layouts: dict[str, Any] = {}
    for part, tree in sorted(parts.items()):
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
            name = _leaf_name(part, path)
            if isinstance(leaf, np.ndarray):
                layouts[name] = "numpy"
            elif isinstance(leaf, jax.Array):
                sharding = leaf.sharding
                mesh = sharding.mesh
                layouts[name] = {
                    "mesh": [int(size) for size in mesh.devices.shape],
                    "types": [str(kind).rsplit(".", 1)[-1] for kind in mesh.axis_types],
                    "spec": [list(entry) if isinstance(entry, tuple) else entry for entry in sharding.spec],
                }
    return layouts


def _targets_on(state: dict[str, Any], mesh: Any, swap: bool) -> dict[str, Any]:
    """Restore targets for every array of ``state`` on ``mesh``: the same specs, or with the two axes swapped."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    from tinax.checkpointing import abstract_restore_target

    exchange = {"data": "model", "model": "data"} if swap else {}

    def entry(value: Any) -> Any:
        if isinstance(value, tuple):
            return tuple(exchange.get(axis, axis) for axis in value)
        return exchange.get(value, value)

    def place(leaf: Any) -> Any:
        if not isinstance(leaf, jax.ShapeDtypeStruct):
            return leaf
        spec = PartitionSpec(*(entry(value) for value in leaf.sharding.spec))
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, spec))

    return {part: jax.tree.map(place, abstract_restore_target(tree)) for part, tree in state.items()}


def _on_host(target: Any) -> Any:
    """The same target with every non-key array loaded as host NumPy."""
    import jax
    import jax.numpy as jnp

    def host(leaf: Any) -> Any:
        if isinstance(leaf, jax.ShapeDtypeStruct) and not jnp.issubdtype(leaf.dtype, jax.dtypes.extended):
            return np.ndarray
        return leaf

    return jax.tree.map(host, target)


def _iterator(advanced: int) -> Any:
    import grain

    iterator = iter(grain.MapDataset.range(1000).to_iter_dataset())
    for _ in range(advanced):
        next(iterator)
    return iterator


def _row_ids(rows: list[dict[str, int]]) -> list[int]:
    return [int(row["row"]) for row in rows]


def _batches(shard_index: int, shard_count: int, batch_size: int) -> Any:
    """A ``training_batches`` iterator over ROWS numbered rows, one epoch, for one shard."""
    import grain

    from tinax.data import InMemorySource, training_batches

    rows = InMemorySource([{"row": row} for row in range(ROWS)], source_id="resume-topologies-rows-v1")
    return iter(
        training_batches(
            grain.MapDataset.source(rows),
            shard_options=grain.sharding.ShardOptions(shard_index, shard_count, drop_remainder=True),
            seed=11,
            shuffle=True,
            num_epochs=1,
            batch_size=batch_size,
            batch_fn=_row_ids,
        )
    )


def _manager(root: str, create: bool) -> Any:
    from tinax.checkpointing import TrainingCheckpointManager

    return TrainingCheckpointManager(
        root,
        save_interval_steps=1,
        keep_last=2,
        keep_every=None,
        keep_best=None,
        best_mode=None,
        save_in_flight="wait",
        create=create,
    )


def _as_stored(targets: dict[str, Any]) -> dict[str, Any]:
    """Targets for ``load_checkpointables``: a training checkpoint keeps the step beside the auxiliary state."""
    return {**targets, "auxiliary": {"state": targets["auxiliary"], "step": 0}}


def _training_parts(restored: Any) -> dict[str, Any]:
    return {
        "model": restored.model,
        "optimizer": restored.optimizer,
        "rng": restored.rng,
        "auxiliary": restored.auxiliary,
    }


def _resumed_report(restored: Any, iterator: Any) -> dict[str, Any]:
    """What a re-dealt resume gives this process: the step, every part's bits, and the batches of the rest."""
    return {
        "step": restored.step,
        "digests": _digests(_training_parts(restored)),
        "batches": [list(batch) for batch in iterator],
    }


def _refusal(call: Any) -> dict[str, Any]:
    """Runs a load that must be refused; says how, and whether Orbax was asked to read anything meanwhile."""
    import orbax.checkpoint.experimental.v1 as ocp

    reads: list[str] = []
    original = ocp.load_checkpointables

    def spy(*arguments: Any, **keywords: Any) -> Any:
        reads.append("load")
        return original(*arguments, **keywords)

    ocp.load_checkpointables = spy
    try:
        call()
    except Exception as error:
        return {"classes": [cls.__name__ for cls in type(error).__mro__], "message": str(error), "reads": reads}
    finally:
        ocp.load_checkpointables = original
    return {"classes": [], "message": "", "reads": reads}


# ---------------------------------------------------------------------------
# Bodies run in the children.


def _body_two_processes(one_process_checkpoint: str, root: str) -> dict[str, Any]:
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    from tinax.checkpointing import load_checkpointables, load_training_checkpoint

    process = jax.process_index()
    mesh = _mesh(SAVE_MESH)
    report: dict[str, Any] = {"process": process}

    # 1 -> 2 processes: the one-process checkpoint onto this runtime's mesh, from a fresh state's targets.
    fresh = _training_state(mesh, seed=5)
    targets = _targets_on(fresh, mesh, swap=False)
    loaded = load_checkpointables(one_process_checkpoint, _as_stored(targets))
    loaded["auxiliary"] = loaded["auxiliary"]["state"]
    report["from_one_process"] = {"digests": _digests(loaded), "layouts": _layouts(loaded)}
    # The same checkpoint as a training checkpoint: its iterator, saved by one process, re-dealt onto these two
    # (the global batch kept), through both functions.
    one_root = str(pathlib.Path(one_process_checkpoint).parent)
    resumed: dict[str, Any] = {}
    for function in ("load_training_checkpoint", "manager.restore"):
        iterator = _batches(process, jax.process_count(), GLOBAL_BATCH // jax.process_count())
        if function == "load_training_checkpoint":
            restored = load_training_checkpoint(
                one_process_checkpoint,
                targets["model"],
                targets["optimizer"],
                targets["rng"],
                targets["auxiliary"],
                iterator,
                redeal=True,
            )
        else:
            restored = _manager(one_root, create=False).restore(
                SAVED_STEP,
                targets["model"],
                targets["optimizer"],
                targets["rng"],
                targets["auxiliary"],
                iterator,
                redeal=True,
            )
        resumed[function] = _resumed_report(restored, iterator)
    report["from_one_process_redealt"] = resumed

    # The saved state: this runtime's own, through the manager.
    state = _training_state(mesh, seed=1)
    manager = _manager(root, create=True)
    batches = _batches(process, jax.process_count(), BATCH)
    report["read"] = [row for _ in range(SAVED_BATCHES) for row in next(batches)]
    manager.save(SAVED_STEP, **state, iterator=batches)
    manager.wait()
    report["expected_next"] = next(batches)
    report["saved"] = _digests(state)
    report["adam_count"] = [
        int(np.asarray(leaf.addressable_shards[0].data))
        for path, leaf in jax.tree_util.tree_flatten_with_path(state["optimizer"])[0]
        if "count" in _names(path).split("/")
    ]
    path = str(pathlib.Path(root) / str(SAVED_STEP))

    # Explicit 2x4 -> Explicit 4x2 with the partition specs transposed, through all three functions.
    transposed_mesh = _mesh(TRANSPOSED_MESH)
    transposed = _targets_on(_training_state(transposed_mesh, seed=7), transposed_mesh, swap=True)
    host = {part: _on_host(target) for part, target in transposed.items()}
    restores: dict[str, Any] = {}
    for kind, chosen in (("transposed", transposed), ("numpy", host)):
        iterator = _batches(process, jax.process_count(), BATCH)
        restored = manager.restore(
            SAVED_STEP, chosen["model"], chosen["optimizer"], chosen["rng"], chosen["auxiliary"], iterator
        )
        parts = _training_parts(restored)
        restores[f"manager.restore/{kind}"] = {
            "digests": _digests(parts),
            "layouts": _layouts(parts),
            "step": restored.step,
            "next": next(iterator),
        }
        iterator = _batches(process, jax.process_count(), BATCH)
        restored = load_training_checkpoint(
            path, chosen["model"], chosen["optimizer"], chosen["rng"], chosen["auxiliary"], iterator
        )
        parts = _training_parts(restored)
        restores[f"load_training_checkpoint/{kind}"] = {
            "digests": _digests(parts),
            "layouts": _layouts(parts),
            "step": restored.step,
            "next": next(iterator),
        }
        parts = load_checkpointables(path, _as_stored(chosen))
        parts["auxiliary"] = parts["auxiliary"]["state"]
        restores[f"load_checkpointables/{kind}"] = {"digests": _digests(parts), "layouts": _layouts(parts)}
    report["restores"] = restores

    # Topologies that cannot hold the arrays: refused before anything is read, by every process alike.
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    mine = [device for device in devices if device.process_index == process]
    theirs = [device for device in devices if device.process_index != process]
    uneven = jax.make_mesh((6,), ("x",), devices=mine[:3] + theirs[:3])
    uneven_aux = {
        **transposed["auxiliary"],
        "ema": jax.ShapeDtypeStruct((FEATURES, HIDDEN), np.float32, sharding=NamedSharding(uneven, PartitionSpec("x"))),
    }
    remote = jax.make_mesh((len(theirs),), ("x",), devices=theirs)
    remote_model = jax.tree.map(
        lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(remote, PartitionSpec())),
        transposed["model"],
    )
    report["refusals"] = {
        "uneven/load_checkpointables": _refusal(
            lambda: load_checkpointables(path, {"auxiliary": {"state": uneven_aux, "step": 0}})
        ),
        "uneven/load_training_checkpoint": _refusal(
            lambda: load_training_checkpoint(
                path, transposed["model"], transposed["optimizer"], transposed["rng"], uneven_aux, _iterator(0)
            )
        ),
        "remote/load_checkpointables": _refusal(lambda: load_checkpointables(path, {"model": remote_model})),
        "remote/manager.restore": _refusal(
            lambda: manager.restore(
                SAVED_STEP,
                remote_model,
                transposed["optimizer"],
                transposed["rng"],
                transposed["auxiliary"],
                _iterator(0),
            )
        ),
    }
    return report


def _body_restore_elsewhere(path: str) -> dict[str, Any]:
    """Restores the two-process checkpoint onto this runtime's devices, in a mesh of as many rows as processes."""
    import jax

    from tinax.checkpointing import abstract_checkpointables, load_checkpointables, load_training_checkpoint

    rows = jax.process_count()
    mesh = _mesh((rows, jax.device_count() // rows))
    # Planned from the checkpoint's own metadata: the saved specs, on this mesh.
    abstract = abstract_checkpointables(path, ["model", "optimizer", "rng", "auxiliary"])
    targets = _abstract_onto(abstract, mesh)
    loaded = load_checkpointables(path, targets)
    loaded["auxiliary"] = loaded["auxiliary"]["state"]
    host = load_checkpointables(path, {name: _on_host(target) for name, target in targets.items()})
    host["auxiliary"] = host["auxiliary"]["state"]
    # The whole training checkpoint, its iterator re-dealt onto this process count (the global batch kept), through
    # both functions.
    training = _training_targets(targets)
    redealt: dict[str, Any] = {}
    for function in ("load_training_checkpoint", "manager.restore"):
        iterator = _batches(jax.process_index(), rows, GLOBAL_BATCH // rows)
        if function == "load_training_checkpoint":
            restored = load_training_checkpoint(
                path, **{f"{part}_target": target for part, target in training.items()}, iterator=iterator, redeal=True
            )
        else:
            restored = _manager(str(pathlib.Path(path).parent), create=False).restore(
                SAVED_STEP,
                training["model"],
                training["optimizer"],
                training["rng"],
                training["auxiliary"],
                iterator,
                redeal=True,
            )
        redealt[function] = _resumed_report(restored, iterator)
    return {
        "process": jax.process_index(),
        "digests": _digests(loaded),
        "layouts": _layouts(loaded),
        "numpy": {"digests": _digests(host), "layouts": _layouts(host)},
        "redealt": redealt,
    }


def _training_targets(targets: dict[str, Any]) -> dict[str, Any]:
    """Targets for ``load_training_checkpoint`` from those of the stored parts: the auxiliary state without the step."""
    return {**targets, "auxiliary": targets["auxiliary"]["state"]}


def _abstract_onto(abstract: dict[str, Any], mesh: Any) -> dict[str, Any]:
    import jax
    from jax.sharding import NamedSharding

    def place(leaf: Any) -> Any:
        if not isinstance(leaf, jax.ShapeDtypeStruct):
            return leaf
        spec = leaf.sharding.spec if leaf.sharding is not None else jax.sharding.PartitionSpec()
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, spec))

    return jax.tree.map(place, abstract)


# ---------------------------------------------------------------------------
# The tests.


@pytest.fixture(scope="module")
def one_process_save(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, dict[str, str], list[int]]:
    """A training checkpoint saved mid-epoch by this process (1 process, 8 devices) through a manager.

    Returns:
      The step's folder, its leaves' digests and the rows read before the save.
    """
    root = tmp_path_factory.mktemp("one-process") / "root"
    state = _training_state(_mesh(SAVE_MESH), seed=3)
    manager = _manager(str(root), create=True)
    batches = _batches(0, 1, GLOBAL_BATCH)
    read = [row for _ in range(SAVED_BATCHES) for row in next(batches)]
    manager.save(SAVED_STEP, **state, iterator=batches)
    manager.wait()
    return root / str(SAVED_STEP), _digests(state), read


@pytest.fixture(scope="module")
def two_processes(
    one_process_save: tuple[pathlib.Path, dict[str, str]], tmp_path_factory: pytest.TempPathFactory
) -> tuple[pathlib.Path, list[dict[str, Any]]]:
    """The two-process run: it restores the one-process checkpoint, saves its own and restores that.

    Every run of processes is slow to start, so this one run does all the work that needs two processes.
    """
    root = tmp_path_factory.mktemp("two-processes") / "root"
    reports = run_processes(
        _body_two_processes,
        num_processes=2,
        devices_per_process=4,
        args=[str(one_process_save[0]), str(root)],
        timeout=RUN_TIMEOUT,
    )
    assert [report["process"] for report in reports] == [0, 1]
    assert reports[0]["saved"] == reports[1]["saved"]
    return root / str(SAVED_STEP), reports


def _parts_of(digests: dict[str, str], parts: tuple[str, ...] = ("model", "optimizer", "rng", "auxiliary")) -> dict:
    return {name: digest for name, digest in digests.items() if name.split("/")[0] in parts}


def _all_explicit(layouts: dict[str, Any]) -> bool:
    return all(layout == "numpy" or set(layout["types"]) == {"Explicit"} for layout in layouts.values())


def _assert_resumed_once(before: list[int], resumed: list[dict[str, Any]], saved: dict[str, str]) -> None:
    """Checks a re-dealt resume on ``len(resumed)`` processes against what was saved and read before the save.

    Every process restores the saved bits at the saved step and reads the same number of batches of its share of
    the global batch; the rows read before the save and those read by all new processes together are the epoch's
    rows, each exactly once.
    """
    assert len(before) == SAVED_BATCHES * GLOBAL_BATCH  # saved mid-epoch: rows are left to re-deal
    for report in resumed:
        assert report["step"] == SAVED_STEP
        assert report["digests"] == saved
    assert len({len(report["batches"]) for report in resumed}) == 1, "every new process runs as many steps"
    assert {len(batch) for report in resumed for batch in report["batches"]} == {GLOBAL_BATCH // len(resumed)}
    rows = before + [row for report in resumed for batch in report["batches"] for row in batch]
    assert len(rows) == ROWS
    assert sorted(rows) == list(range(ROWS))


def test_one_process_checkpoint_restores_bit_exact_in_two_processes(one_process_save, two_processes):
    _, saved, _ = one_process_save
    for report in two_processes[1]:
        restored = report["from_one_process"]
        assert restored["digests"] == saved
        assert _all_explicit(restored["layouts"])
        kernel = restored["layouts"]["model/hidden/kernel/value"]
        assert kernel == {"mesh": list(SAVE_MESH), "types": ["Explicit", "Explicit"], "spec": [None, "model"]}


@pytest.mark.parametrize("function", ["load_training_checkpoint", "manager.restore"])
def test_one_process_training_checkpoint_resumes_in_two_processes_reading_the_rest_of_the_epoch_once(
    one_process_save, two_processes, function
):
    _, saved, before = one_process_save
    assert "optimizer/opt_state/0/count/value" in saved
    _assert_resumed_once(before, [report["from_one_process_redealt"][function] for report in two_processes[1]], saved)


def test_two_process_checkpoint_holds_adam_count_and_every_part(two_processes):
    _, reports = two_processes
    saved = reports[0]["saved"]
    assert reports[0]["adam_count"] == [2]
    assert {name.split("/")[0] for name in saved} == {"model", "optimizer", "rng", "auxiliary"}
    assert "optimizer/opt_state/0/count/value" in saved


@pytest.mark.parametrize("function", ["manager.restore", "load_training_checkpoint", "load_checkpointables"])
def test_explicit_two_by_four_restores_onto_explicit_four_by_two_with_transposed_specs(two_processes, function):
    _, reports = two_processes
    for report in reports:
        restored = report["restores"][f"{function}/transposed"]
        assert restored["digests"] == report["saved"]
        assert _all_explicit(restored["layouts"])
        assert restored["layouts"]["model/hidden/kernel/value"] == {
            "mesh": list(TRANSPOSED_MESH),
            "types": ["Explicit", "Explicit"],
            "spec": [None, "data"],
        }
        assert restored["layouts"]["auxiliary/ema"]["spec"] == [None, "data"]
        assert restored["layouts"]["rng"]["spec"] == [["model", "data"]]
        if function != "load_checkpointables":
            # Same process count: each process's iterator continues where its saved one stopped.
            assert restored["step"] == SAVED_STEP
            assert restored["next"] == report["expected_next"]


@pytest.mark.parametrize("function", ["manager.restore", "load_training_checkpoint", "load_checkpointables"])
def test_two_process_checkpoint_restores_into_host_numpy(two_processes, function):
    _, reports = two_processes
    for report in reports:
        restored = report["restores"][f"{function}/numpy"]
        assert restored["digests"] == report["saved"]
        layouts = restored["layouts"]
        assert layouts["model/hidden/kernel/value"] == "numpy"
        assert layouts["optimizer/opt_state/0/mu/hidden/kernel/value"] == "numpy"
        assert layouts["auxiliary/ema"] == "numpy"
        assert layouts["rng"]["types"] == ["Explicit", "Explicit"]  # key arrays stay JAX arrays


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("uneven/load_checkpointables", "mesh axis 'x' (size 6) splits dimension 0 of size 16 into 6 parts"),
        ("uneven/load_training_checkpoint", "mesh axis 'x' (size 6) splits dimension 0 of size 16 into 6 parts"),
        ("remote/load_checkpointables", "none of its devices belongs to this process"),
        ("remote/manager.restore", "none of its devices belongs to this process"),
    ],
)
def test_a_topology_that_cannot_hold_the_arrays_is_refused_before_any_read(two_processes, case, expected):
    _, reports = two_processes
    for report in reports:
        refusal = report["refusals"][case]
        assert "ValueError" in refusal["classes"], refusal
        assert refusal["reads"] == [], refusal
        message = refusal["message"]
        assert expected in message
        if case.startswith("uneven"):
            assert "['ema']" in message
            assert f"({FEATURES}, {HIDDEN})" in message
            assert "Mesh('x': 6" in message
        else:
            assert "['model']['hidden']" in message, message
            assert f"process {report['process']}" in message


def test_two_process_checkpoint_restores_bit_exact_in_one_process_of_eight_devices(two_processes):
    from jax.sharding import AxisType, PartitionSpec

    from tinax.checkpointing import abstract_checkpointables, load_checkpointables

    path, reports = two_processes
    mesh = _mesh((1, 8))
    abstract = abstract_checkpointables(path, ["model", "optimizer", "rng", "auxiliary"])
    # What the two processes saved, read from the metadata alone: their mesh, its axis types and each spec.
    kernel = abstract["model"]["hidden"]["kernel"]["value"]
    assert (kernel.shape, kernel.sharding.spec) == ((FEATURES, HIDDEN), PartitionSpec(None, "model"))
    assert kernel.sharding.mesh.axis_sizes == SAVE_MESH
    assert kernel.sharding.mesh.axis_types == (AxisType.Explicit, AxisType.Explicit)
    assert abstract["rng"].shape == (8,)
    assert abstract["rng"].sharding.spec == PartitionSpec(AXES)
    targets = _abstract_onto(abstract, mesh)
    loaded = load_checkpointables(path, targets)
    loaded["auxiliary"] = loaded["auxiliary"]["state"]
    assert _digests(loaded) == reports[0]["saved"]
    layouts = _layouts(loaded)
    assert _all_explicit(layouts)
    assert layouts["model/hidden/kernel/value"] == {
        "mesh": [1, 8],
        "types": ["Explicit", "Explicit"],
        "spec": [None, "model"],
    }


@pytest.mark.parametrize(("num_processes", "devices_per_process"), [(4, 2), (1, 1)])
def test_two_process_checkpoint_restores_bit_exact_on_other_process_counts(
    two_processes, num_processes, devices_per_process
):
    path, reports = two_processes
    restored = run_processes(
        _body_restore_elsewhere,
        num_processes=num_processes,
        devices_per_process=devices_per_process,
        args=[str(path)],
        timeout=RUN_TIMEOUT,
    )
    saved = reports[0]["saved"]
    rows = num_processes
    columns = devices_per_process
    for report in restored:
        assert report["digests"] == saved
        assert report["numpy"]["digests"] == saved
        assert _all_explicit(report["layouts"])
        assert report["layouts"]["model/hidden/kernel/value"] == {
            "mesh": [rows, columns],
            "types": ["Explicit", "Explicit"],
            "spec": [None, "model"],
        }
        assert report["numpy"]["layouts"]["model/hidden/kernel/value"] == "numpy"
    # Re-dealt onto this process count: the rows read before the save and those read after, each exactly once.
    before = [row for report in reports for row in report["read"]]
    for function in ("load_training_checkpoint", "manager.restore"):
        _assert_resumed_once(before, [report["redealt"][function] for report in restored], saved)


def _one_process_targets(path: pathlib.Path) -> dict[str, Any]:
    from tinax.checkpointing import abstract_checkpointables

    targets = _abstract_onto(abstract_checkpointables(path, ["model", "optimizer", "rng", "auxiliary"]), _mesh((1, 8)))
    targets["auxiliary"] = targets["auxiliary"]["state"]
    return targets


def _resumed_rows(reports: list[dict[str, Any]], iterator: Any) -> list[int]:
    """The rows of the epoch: those the two processes read before saving, then those the resumed iterator reads."""
    return [row for report in reports for row in report["read"]] + [row for batch in iterator for row in batch]


def test_load_training_checkpoint_resumes_a_two_process_checkpoint_in_one_process(two_processes):
    from tinax.checkpointing import load_training_checkpoint

    path, reports = two_processes
    targets = _one_process_targets(path)
    iterator = _batches(0, 1, 2 * BATCH)
    restored = load_training_checkpoint(
        path, **{f"{part}_target": target for part, target in targets.items()}, iterator=iterator, redeal=True
    )
    assert restored.step == SAVED_STEP
    assert _digests(_training_parts(restored)) == reports[0]["saved"]
    rows = _resumed_rows(reports, iterator)
    assert len(rows) == ROWS
    assert sorted(rows) == list(range(ROWS))


def test_manager_restore_resumes_a_two_process_checkpoint_in_one_process(two_processes):
    path, reports = two_processes
    targets = _one_process_targets(path)
    iterator = _batches(0, 1, 2 * BATCH)
    restored = _manager(str(path.parent), create=False).restore(
        SAVED_STEP, targets["model"], targets["optimizer"], targets["rng"], targets["auxiliary"], iterator, redeal=True
    )
    assert restored.step == SAVED_STEP
    assert _digests(_training_parts(restored)) == reports[0]["saved"]
    rows = _resumed_rows(reports, iterator)
    assert len(rows) == ROWS
    assert sorted(rows) == list(range(ROWS))


def test_a_two_process_checkpoint_is_refused_in_one_process_without_redeal_before_any_read(two_processes):
    from tinax.checkpointing import load_training_checkpoint

    path, _ = two_processes
    targets = _one_process_targets(path)
    iterator = _batches(0, 1, 2 * BATCH)
    for call in (
        lambda: load_training_checkpoint(
            path, **{f"{part}_target": target for part, target in targets.items()}, iterator=iterator
        ),
        lambda: _manager(str(path.parent), create=False).restore(
            SAVED_STEP, targets["model"], targets["optimizer"], targets["rng"], targets["auxiliary"], iterator
        ),
    ):
        refusal = _refusal(call)
        assert {"ValueError", "KeyError"} <= set(refusal["classes"])
        assert "saved by 2 processes and this run has 1" in refusal["message"]
        assert "redeal=True" in refusal["message"]
        assert refusal["reads"] == []
    # The iterator was never moved: it reads the whole epoch from the start.
    assert sorted(row for batch in iterator for row in batch) == list(range(ROWS))
