"""The training proofs' scaffolding gives the same bytes for the same arguments."""

from __future__ import annotations

import numpy as np
import pytest

from tinax_testing import array_digest, float32_bits, regression_records, sharded_mlp_class, stack_rows


def test_regression_records_are_deterministic_float32_rows():
    rows = regression_records(5, 3, 2, seed=7)
    again = regression_records(5, 3, 2, seed=7)
    assert len(rows) == 5
    assert all(row["x"].shape == (3,) and row["y"].shape == (2,) for row in rows)
    assert all(row["x"].dtype == row["y"].dtype == np.float32 for row in rows)
    assert [array_digest(row["x"]) for row in rows] == [array_digest(row["x"]) for row in again]
    assert array_digest(rows[0]["x"]) != array_digest(regression_records(5, 3, 2, seed=8)[0]["x"])
    assert np.all(np.abs(np.stack([row["y"] for row in rows])) < 1)


def test_stack_rows_adds_a_batch_axis_per_field():
    batch = stack_rows(regression_records(4, 3, 2, seed=0))
    assert sorted(batch) == ["x", "y"]
    assert batch["x"].shape == (4, 3)
    assert batch["y"].shape == (4, 2)


def test_array_digest_sees_dtype_shape_and_bytes():
    values = np.arange(6, dtype=np.int32)
    assert array_digest(values) == array_digest(values.copy())
    assert array_digest(values) != array_digest(values.reshape(2, 3))
    assert array_digest(values) != array_digest(values.view(np.float32))
    assert array_digest(values[::2]) == array_digest(np.ascontiguousarray(values[::2]))


def test_float32_bits_are_the_ieee_bits():
    assert float32_bits(np.float32(1.0)) == "3f800000"
    assert float32_bits(np.float32(-0.0)) == "80000000"


def test_sharded_mlp_class_splits_its_kernels_over_model():
    pytest.importorskip("flax", reason="the MLP is a Flax NNX module")
    import jax
    from flax import nnx
    from jax.sharding import AxisType

    from tinax.parallel import eager_sharded_init, make_mesh

    mesh = make_mesh(jax.devices(), (4, 2), ("data", "model"), axis_types=(AxisType.Explicit, AxisType.Explicit))
    mlp_class = sharded_mlp_class(6, 4, 2, activation=jax.nn.gelu, output_spec=("data", None))
    model = eager_sharded_init(lambda: mlp_class(nnx.Rngs(0)), mesh)
    assert tuple(model.hidden.kernel[...].sharding.spec) == (None, "model")
    assert tuple(model.output.kernel[...].sharding.spec) == ("model", None)
    with jax.set_mesh(mesh):
        output = model(jax.numpy.ones((8, 6), jax.numpy.float32))
    assert output.shape == (8, 2)
