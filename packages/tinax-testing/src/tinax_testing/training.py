"""Scaffolding for the training proofs: synthetic records, batching, byte digests and a sharded MLP.

The resume, multi-process and shard_map training tests compare runs bit for
bit, so they need the same deterministic data, the same way of stacking it
into batches, and one way of reducing an array to a comparable string. They
also train the same two-layer MLP with its kernels split over ``model``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["array_digest", "float32_bits", "regression_records", "sharded_mlp_class", "stack_rows"]


def regression_records(count: int, features: int, targets: int, *, seed: int) -> list[dict[str, np.ndarray]]:
    """Rows of a small regression problem: ``{"x": float32[features], "y": float32[targets]}``.

    The inputs are standard normal and ``y = tanh(x @ w)`` for a random ``w``,
    all drawn from one NumPy generator seeded with ``seed``, so the same
    arguments give the same bytes everywhere.

    Args:
      count: Number of rows.
      features: Width of each ``x``.
      targets: Width of each ``y``.
      seed: Seed of the NumPy generator.

    Returns:
      ``count`` dicts, each holding one row's ``x`` and ``y``.
    """
    generator = np.random.default_rng(seed)
    inputs = generator.normal(size=(count, features)).astype(np.float32)
    weights = generator.normal(size=(features, targets)).astype(np.float32)
    outputs = np.tanh(inputs @ weights).astype(np.float32)
    return [{"x": inputs[index], "y": outputs[index]} for index in range(count)]


def stack_rows(rows: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Stacks rows of equal keys into one batch, field by field (a ``batch_fn`` for ``training_batches``).

    Args:
      rows: Non-empty rows, each a mapping of field name to array.

    Returns:
      One array per field, with a new leading batch axis.
    """
    return {name: np.stack([row[name] for row in rows]) for name in rows[0]}


def array_digest(array: Any) -> str:
    """The SHA-256 of an array's dtype, shape and bytes, as hex.

    Two arrays have the same digest exactly when they hold the same bits in
    the same dtype and shape, which is what the bit-for-bit proofs compare.

    Args:
      array: Anything ``numpy.asarray`` accepts (a host or fully addressable
        JAX array, a NumPy scalar).

    Returns:
      A 64-character hex string.
    """
    host = np.ascontiguousarray(np.asarray(array))
    return hashlib.sha256(f"{host.dtype}{host.shape}".encode() + host.tobytes()).hexdigest()


def float32_bits(value: Any) -> str:
    """The eight hex digits of a float32 scalar's bits (a loss compared bit for bit)."""
    return f"{int(np.asarray(value, dtype=np.float32).view(np.uint32)):08x}"


def sharded_mlp_class(
    features: int,
    hidden: int,
    targets: int,
    *,
    activation: Callable[[Any], Any],
    output_spec: tuple[str | None, ...],
) -> type[Any]:
    """A Flax NNX MLP class whose hidden kernel is split over ``model`` on its output axis.

    The model is ``Linear(features, hidden)``, ``activation``, then
    ``Linear(hidden, targets)``; the first kernel is partitioned
    ``(None, "model")`` and the second ``("model", None)``. The second layer
    contracts over the model-split axis, so it is told where its sum lands:
    ``output_spec``, a ``PartitionSpec``'s entries.

    Flax is imported here, not with this module: only the tests that train
    need it.

    Args:
      features: Input width.
      hidden: Hidden width; a multiple of the mesh's ``model`` size.
      targets: Output width.
      activation: Applied to the hidden layer, for example ``jax.nn.gelu``.
      output_spec: Sharding of the output, for example ``("data", None)``.

    Returns:
      An ``nnx.Module`` subclass built as ``cls(nnx.Rngs(seed))``.
    """
    from flax import nnx
    from jax.sharding import PartitionSpec

    out_sharding = PartitionSpec(*output_spec)  # type: ignore[no-untyped-call]

    class MLP(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            init = nnx.initializers.lecun_normal()
            self.hidden = nnx.Linear(
                features, hidden, kernel_init=nnx.with_partitioning(init, (None, "model")), rngs=rngs
            )
            self.output = nnx.Linear(
                hidden, targets, kernel_init=nnx.with_partitioning(init, ("model", None)), rngs=rngs
            )

        def __call__(self, inputs: Any) -> Any:
            return self.output(activation(self.hidden(inputs)), out_sharding=out_sharding)

    return MLP
