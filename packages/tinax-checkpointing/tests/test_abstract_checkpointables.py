"""abstract_checkpointables: a checkpoint's structure, shapes, dtypes and saved shardings, read without devices."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import grain
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint.experimental.v1 as ocp
import pytest
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec

from tinax._checkpointing._loading._load import stored_tree
from tinax.checkpointing import (
    TrainingCheckpointManager,
    abstract_checkpointables,
    load_checkpointables,
    save_checkpointables,
)

EXPLICIT = (AxisType.Explicit, AxisType.Explicit)


def _explicit_mesh(shape: tuple[int, int]) -> Mesh:
    return jax.make_mesh(shape, ("data", "model"), axis_types=EXPLICIT)


def _state() -> dict:
    explicit = _explicit_mesh((2, 4))
    auto = Mesh(np.array(jax.devices()).reshape(4, 2), ("rows", "cols"))
    values = np.arange(64, dtype=np.float32).reshape(8, 8)
    return {
        "explicit": jax.device_put(values, NamedSharding(explicit, PartitionSpec("data", "model"))),
        "auto": jax.device_put(values.astype(jnp.bfloat16), NamedSharding(auto, PartitionSpec(None, "rows"))),
        "single": jax.device_put(np.arange(3, dtype=np.int32), jax.devices()[5]),
        "keys": jax.device_put(
            jax.random.split(jax.random.key(1), 8), NamedSharding(explicit, PartitionSpec(("data", "model")))
        ),
        "host": np.ones((2, 3), np.float64),
        "count": 7,
        "rate": 0.5,
        "flag": True,
        "name": "run",
        "nothing": None,
        "empty": {},
        "layers": [{"w": jnp.zeros((2,), jnp.float16)}, ()],
    }


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, dict]:
    path = tmp_path_factory.mktemp("abstract") / "checkpoint"
    state = _state()
    iterator = iter(grain.MapDataset.range(5).to_iter_dataset())
    save_checkpointables(path, {"state": state, "params": {"w": jnp.ones(4)}, "iterator": iterator}).result()
    return path, state


def test_each_leaf_has_its_saved_shape_dtype_and_sharding(saved):
    path, _ = saved
    abstract = abstract_checkpointables(path)
    assert sorted(abstract) == ["params", "state"]  # the iterator has no abstract form
    state = abstract["state"]
    explicit = state["explicit"]
    assert (explicit.shape, explicit.dtype) == ((8, 8), jnp.float32)
    assert explicit.sharding.spec == PartitionSpec("data", "model")
    assert isinstance(explicit.sharding.mesh, AbstractMesh)
    assert explicit.sharding.mesh.axis_names == ("data", "model")
    assert explicit.sharding.mesh.axis_sizes == (2, 4)
    assert explicit.sharding.mesh.axis_types == EXPLICIT
    auto = state["auto"]
    assert (auto.shape, auto.dtype, auto.sharding.spec) == ((8, 8), jnp.bfloat16, PartitionSpec(None, "rows"))
    assert auto.sharding.mesh.axis_types == (AxisType.Auto, AxisType.Auto)
    assert auto.sharding.mesh.axis_sizes == (4, 2)
    # A single device has no abstract form: the array loads where it was saved, as without a sharding.
    assert state["single"] == jax.ShapeDtypeStruct((3,), jnp.int32)
    keys = state["keys"]
    assert keys.shape == (8,)
    assert keys.dtype == jax.random.split(jax.random.key(0), 2).dtype
    assert keys.sharding.spec == PartitionSpec(("data", "model"))
    host = state["host"]
    assert isinstance(host, np.ndarray)
    assert (host.shape, host.dtype, host.strides) == ((2, 3), np.float64, (0, 0))
    assert (state["count"], state["rate"], state["flag"], state["name"]) == (0, 0.0, False, "")
    assert [type(state[name]) for name in ("count", "rate", "flag")] == [int, float, bool]
    assert state["nothing"] is None
    assert state["empty"] == {}
    assert state["layers"][0]["w"] == jax.ShapeDtypeStruct((2,), jnp.float16)
    assert state["layers"][1] == ()
    assert abstract["params"]["w"].shape == (4,)


def test_it_agrees_with_orbax_on_every_array_of_an_nnx_model_and_its_optimizer(tmp_path):
    nnx = pytest.importorskip("flax.nnx")
    optax = pytest.importorskip("optax")
    model = nnx.Linear(4, 8, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    save_checkpointables(tmp_path / "c", {"model": nnx.state(model), "optimizer": nnx.state(optimizer)}).result()
    abstract = abstract_checkpointables(tmp_path / "c")
    for name in ("model", "optimizer"):
        ours = jax.tree_util.tree_flatten_with_path(abstract[name])[0]
        orbax_tree = stored_tree(ocp, (tmp_path / "c").absolute(), name)
        theirs = jax.tree_util.tree_flatten_with_path(orbax_tree)[0]
        assert [jax.tree_util.keystr(path) for path, _ in ours] == [jax.tree_util.keystr(path) for path, _ in theirs]
        for (_, mine), (_, metadata) in zip(ours, theirs, strict=True):
            assert (mine.shape, mine.dtype) == (metadata.shape, metadata.dtype)


@pytest.mark.parametrize("use_ocdbt", [True, False], ids=["ocdbt", "folder-per-array"])
@pytest.mark.parametrize("use_zarr3", [True, False], ids=["zarr3", "zarr2"])
def test_every_orbax_array_layout_is_read(tmp_path, use_ocdbt, use_zarr3):
    saving = ocp.options.ArrayOptions.Saving(use_ocdbt=use_ocdbt, use_zarr3=use_zarr3)
    state = {"w": jnp.ones((4, 2), jnp.bfloat16), "key": jax.random.key(1), "host": np.arange(3), "step": 5}
    with ocp.Context(array_options=ocp.options.ArrayOptions(saving=saving)):
        save_checkpointables(tmp_path / "c", {"state": state}).result()
    abstract = abstract_checkpointables(tmp_path / "c")["state"]
    assert abstract["w"] == jax.ShapeDtypeStruct((4, 2), jnp.bfloat16)
    assert abstract["key"].shape == ()
    assert jnp.issubdtype(abstract["key"].dtype, jax.dtypes.prng_key)
    assert abstract["host"].shape == (3,)
    assert abstract["step"] == 0


def test_the_abstract_state_restores_inside_set_mesh_and_after_resharding(tmp_path):
    mesh = _explicit_mesh((2, 4))
    state = {
        "w": jax.device_put(
            np.arange(64.0, dtype=np.float32).reshape(8, 8), NamedSharding(mesh, PartitionSpec("data", "model"))
        ),
        "keys": jax.device_put(jax.random.split(jax.random.key(3), 8), NamedSharding(mesh, PartitionSpec("model"))),
        "host": np.arange(4, dtype=np.int16),
        "step": 12,
    }
    save_checkpointables(tmp_path / "c", {"state": state}).result()
    abstract = abstract_checkpointables(tmp_path / "c")

    def same(restored: dict) -> bool:
        return (
            np.array_equal(np.asarray(restored["w"]), np.asarray(state["w"]))
            and np.array_equal(jax.random.key_data(restored["keys"]), jax.random.key_data(state["keys"]))
            and np.array_equal(restored["host"], state["host"])
            and restored["step"] == 12
        )

    with jax.set_mesh(mesh):
        restored = load_checkpointables(tmp_path / "c", abstract)["state"]
    assert same(restored)
    assert restored["w"].sharding.mesh.axis_types == EXPLICIT
    # Onto another mesh, planned from the saved specs, transposed: no mesh needs to be set.
    other = _explicit_mesh((4, 2))
    swap = {"data": "model", "model": "data"}

    def onto_other(leaf: object) -> object:
        if not isinstance(leaf, jax.ShapeDtypeStruct):
            return leaf
        spec = PartitionSpec(*(swap.get(entry, entry) for entry in leaf.sharding.spec))
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(other, spec))

    resharded = load_checkpointables(tmp_path / "c", jax.tree.map(onto_other, abstract))["state"]
    assert same(resharded)
    assert resharded["w"].sharding == NamedSharding(other, PartitionSpec("model", "data"))
    assert resharded["keys"].sharding == NamedSharding(other, PartitionSpec("data"))


def test_names_chooses_the_checkpointables_and_is_checked(saved):
    path, _ = saved
    assert list(abstract_checkpointables(path, ["params"])) == ["params"]
    assert list(abstract_checkpointables(path, ("state", "params"))) == ["state", "params"]
    with pytest.raises(ValueError, match=r"does not hold; it holds \['iterator', 'params', 'state'\]") as missing:
        abstract_checkpointables(path, ["model"])
    assert isinstance(missing.value, KeyError)
    with pytest.raises(ValueError, match="no pytrees") as opaque:
        abstract_checkpointables(path, ["iterator"])
    assert isinstance(opaque.value, KeyError)
    with pytest.raises(TypeError, match="names"):
        abstract_checkpointables(path, "params")
    with pytest.raises(TypeError, match=r"names\[0\]"):
        abstract_checkpointables(path, [1])
    with pytest.raises(TypeError, match="path"):
        abstract_checkpointables(None)
    with pytest.raises(FileNotFoundError):
        abstract_checkpointables(path.parent / "absent")


_NO_BACKEND_PROBE = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from tinax._core._command._main import main
    from tinax.checkpointing import abstract_checkpointables, abstract_restore_target

    abstract = abstract_checkpointables(sys.argv[1])
    target = abstract_restore_target(abstract)
    codes, documents = [], []
    for inspected in sys.argv[1:]:
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            codes.append(main(["inspect", inspected, "--json"]))
        documents.append(json.loads(printed.getvalue()))
    from jax._src import xla_bridge
    print(json.dumps({
        "codes": codes,
        "kernel": list(target["model"]["dense"]["kernel"].shape),
        "arrays": documents[0]["tables"]["arrays"]["rows"],
        "step": documents[0]["summary"]["step"],
        "backends_initialized": bool(xla_bridge.backends_are_initialized()),
        "backends": sorted(xla_bridge._backends),
    }))
    """
)


def test_reading_the_abstract_state_and_inspecting_start_no_jax_backend(tmp_path):
    explicit = _explicit_mesh((2, 4))
    kernel = jax.device_put(np.ones((16, 4), np.float32), NamedSharding(explicit, PartitionSpec("model", None)))
    manager = TrainingCheckpointManager(
        tmp_path / "root",
        save_interval_steps=1,
        keep_last=1,
        keep_every=None,
        keep_best=None,
        best_mode=None,
        save_in_flight="wait",
        create=True,
    )
    manager.save(
        12,
        model={"dense": {"kernel": kernel}},
        optimizer={"count": jnp.asarray(3)},
        rng=jax.device_put(jax.random.key(0), NamedSharding(explicit, PartitionSpec())),
        auxiliary={"loss": 0.25},
        iterator=iter(grain.MapDataset.range(4).to_iter_dataset()),
    )
    manager.wait()
    completed = subprocess.run(
        [sys.executable, "-c", _NO_BACKEND_PROBE, str(tmp_path / "root" / "12"), str(tmp_path / "root")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={key: value for key, value in os.environ.items() if not key.startswith("PYTEST")},
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["backends_initialized"] is False
    assert report["backends"] == []
    assert report["codes"] == [0, 0]
    assert report["kernel"] == [16, 4]
    assert report["step"] == 12
    rows = {(row["part"], row["name"]): row for row in report["arrays"]}
    assert rows[("model", "dense/kernel")] == {
        "part": "model",
        "name": "dense/kernel",
        "type": "array",
        "dtype": "float32",
        "shape": [16, 4],
        "sharding": "NamedSharding(mesh=(data=2, model=4), spec=('model', None))",
    }
    assert rows[("rng", "")]["dtype"] == "key<fry>"
    assert rows[("rng", "")]["shape"] == []
    assert rows[("auxiliary", "state/loss")]["type"] == "scalar"
