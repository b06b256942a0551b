"""Tests for make_mesh and layout."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from tinax.parallel import layout, make_mesh
from tinax_testing import import_side_effects

EXPLICIT = AxisType.Explicit
AUTO = AxisType.Auto


def explicit_mesh() -> Mesh:
    return make_mesh(jax.devices(), (2, 4), ("data", "model"), axis_types=(EXPLICIT, EXPLICIT))


# make_mesh ------------------------------------------------------------------


def test_make_mesh_uses_the_given_devices_in_order():
    devices = jax.devices()[::-1]
    mesh = make_mesh(devices, [2, 4], ["data", "model"], axis_types=[EXPLICIT, AUTO])
    assert isinstance(mesh, Mesh)
    assert mesh.axis_names == ("data", "model")
    assert dict(mesh.shape) == {"data": 2, "model": 4}
    assert tuple(mesh.axis_types) == (EXPLICIT, AUTO)
    assert list(mesh.devices.flat) == devices


def test_make_mesh_accepts_a_subset_of_devices():
    devices = jax.devices()[2:5]
    mesh = make_mesh(devices, (3,), ("x",), axis_types=(AUTO,))
    assert list(mesh.devices.flat) == devices


def test_make_mesh_accepts_numpy_integer_sizes():
    mesh = make_mesh(jax.devices(), (np.int64(8),), ("x",), axis_types=(EXPLICIT,))
    assert dict(mesh.shape) == {"x": 8}


@pytest.mark.parametrize(
    ("devices", "shape", "names", "types", "match"),
    [
        ("cpu", (1,), ("x",), (AUTO,), "devices must be a sequence"),
        ([0], (1,), ("x",), (AUTO,), r"devices\[0\] must be a jax.Device"),
        (None, (1,), ("x",), (AUTO,), "devices must be"),
        ("DEV", 8, ("x",), (AUTO,), "shape must be a sequence"),
        ("DEV", (True, 8), ("x", "y"), (AUTO, AUTO), r"shape\[0\] must be an int"),
        ("DEV", (8.0,), ("x",), (AUTO,), r"shape\[0\] must be an int"),
        ("DEV", (8,), "x", (AUTO,), "axis_names must be a sequence"),
        ("DEV", (8,), (1,), (AUTO,), r"axis_names\[0\] must be a non-empty str"),
        ("DEV", (8,), ("x",), AUTO, "axis_types must be a sequence"),
        ("DEV", (8,), ("x",), ("explicit",), r"axis_types\[0\] must be a jax.sharding.AxisType"),
    ],
)
def test_make_mesh_rejects_wrong_kinds(devices, shape, names, types, match):
    if devices == "DEV":
        devices = jax.devices()
    with pytest.raises(TypeError, match=match):
        make_mesh(devices, shape, names, axis_types=types)


def test_make_mesh_rejects_bool_sizes():
    with pytest.raises(TypeError, match=r"shape\[0\] must be an int >= 1, got True \(bool\)"):
        make_mesh(jax.devices()[:1], (True,), ("x",), axis_types=(AUTO,))


@pytest.mark.parametrize(
    ("devices", "shape", "names", "types", "match"),
    [
        ([], (1,), ("x",), (AUTO,), "devices must be a non-empty"),
        ("DUP", (2,), ("x",), (AUTO,), "devices must not repeat"),
        ("DEV", (0, 8), ("x", "y"), (AUTO, AUTO), r"shape\[0\] must be an int >= 1"),
        ("DEV", (-8,), ("x",), (AUTO,), r"shape\[0\] must be an int >= 1"),
        ("DEV", (), (), (), "shape must be a non-empty"),
        ("DEV", (8,), ("",), (AUTO,), r"axis_names\[0\] must be a non-empty str"),
        ("DEV", (2, 4), ("x", "x"), (AUTO, AUTO), "axis_names must not repeat"),
        ("DEV", (2, 4), ("x",), (AUTO, AUTO), "one entry per mesh axis"),
        ("DEV", (2, 4), ("x", "y"), (AUTO,), "one entry per mesh axis"),
        ("DEV", (2, 2), ("x", "y"), (AUTO, AUTO), "every device exactly once"),
        ("DEV", (4, 4), ("x", "y"), (AUTO, AUTO), "every device exactly once"),
    ],
)
def test_make_mesh_rejects_bad_values(devices, shape, names, types, match):
    if devices == "DEV":
        devices = jax.devices()
    elif devices == "DUP":
        devices = [jax.devices()[0]] * 2
    with pytest.raises(ValueError, match=match):
        make_mesh(devices, shape, names, axis_types=types)


# layout ---------------------------------------------------------------------


def test_layout_builds_a_named_sharding_of_the_given_rank():
    mesh = explicit_mesh()
    sharding = layout(mesh, ["data", None, "model"])
    assert isinstance(sharding, NamedSharding)
    assert sharding.mesh == mesh
    assert sharding.spec == PartitionSpec("data", None, "model")
    assert len(sharding.spec) == 3


def test_layout_accepts_axis_tuples_and_full_replication():
    mesh = explicit_mesh()
    assert layout(mesh, [("data", "model")]).spec == PartitionSpec(("data", "model"))
    assert layout(mesh, []).spec == PartitionSpec()


def test_layout_places_data_as_described():
    sharding = layout(explicit_mesh(), ["data", "model"])
    placed = jax.device_put(np.arange(32.0).reshape(4, 8), sharding)
    assert placed.sharding == sharding
    index = sharding.addressable_devices_indices_map((4, 8))[jax.devices()[5]]
    assert index == (slice(2, 4), slice(2, 4))


def test_layout_rejects_non_explicit_axes():
    mesh = make_mesh(jax.devices(), (2, 4), ("data", "model"), axis_types=(EXPLICIT, AUTO))
    with pytest.raises(ValueError, match=r"only Explicit axes.*'model' \(Auto\)"):
        layout(mesh, ["data"])


def test_layout_rejects_a_non_mesh():
    with pytest.raises(TypeError, match="mesh must be a jax.sharding.Mesh"):
        layout("mesh", ["data"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("partitions", "match"),
    [
        ("data", "partitions must be a sequence"),
        ([1], r"partitions\[0\] must be a mesh-axis name"),
        ([["data"]], r"partitions\[0\] must be a mesh-axis name"),
        ([("data", 2)], r"partitions\[0\]\[1\] must be a non-empty str"),
        # An empty tuple is no kind of entry layout takes; tinax 0.2 also raised TypeError.
        ([None, ()], r"partitions\[1\] must be a mesh-axis name, a non-empty tuple"),
    ],
)
def test_layout_rejects_wrong_entry_types(partitions, match):
    with pytest.raises(TypeError, match=match):
        layout(explicit_mesh(), partitions)


@pytest.mark.parametrize(
    ("partitions", "match"),
    [
        ([""], r"partitions\[0\] must be a non-empty str"),
        ([("data", "")], r"partitions\[0\]\[1\] must be a non-empty str"),
        (["batch"], "partitions\\[0\\] names mesh axis 'batch', which the mesh does not have"),
        ([("data", "other")], "mesh axis 'other'"),
        (["data", "data"], "dimension 0 and dimension 1"),
        (["model", ("data", "model")], "'model' may partition only one dimension"),
        ([("data", "data")], "'data' may partition only one dimension"),
    ],
)
def test_layout_rejects_bad_entries(partitions, match):
    with pytest.raises(ValueError, match=match):
        layout(explicit_mesh(), partitions)


# imports --------------------------------------------------------------------


def test_importing_tinax_parallel_is_inert():
    effects = import_side_effects("tinax.parallel")
    assert effects == {"backends_initialized": False, "integrations": []}
