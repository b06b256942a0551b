"""A small training job driven by TrainingCheckpointManager, run in child processes by test_manager.py.

It trains a linear model with momentum on a (data, model) mesh of 8 CPU
devices (one process of 8, or two of 4 under the distributed harness). Each
step takes its batch id from a Grain iterator and draws the batch from a
per-step key, so the weights, the momentum, the key, the auxiliary loss sum
and the iterator position all have to be restored for a resumed run to match
an uninterrupted one bit for bit. As a script it prints one JSON line per
event (``ready``, ``done``, ``committed``) and the result as its last line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time
from typing import Any

FEATURES = 8
OUTPUTS = 4
BATCH = 16


def _emit(event: dict[str, Any], report: bool) -> None:
    if report:
        print(json.dumps(event), flush=True)


def _digest(array: Any) -> str:
    """The bytes of every shard this process holds, with its index, as one SHA-256."""
    import numpy as np

    digest = hashlib.sha256()
    shards = sorted(array.addressable_shards, key=lambda shard: str(shard.index))
    for shard in shards:
        data = np.ascontiguousarray(np.asarray(shard.data))
        digest.update(str(shard.index).encode() + data.tobytes())
    return digest.hexdigest()


def build() -> dict[str, Any]:
    """The mesh, the initial state, the iterator and the jitted step, the same in every run."""
    import grain
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    devices = sorted(jax.devices(), key=lambda device: (device.process_index, device.id))
    mesh = jax.make_mesh((2, 4), ("data", "model"), devices=devices)
    sharded = NamedSharding(mesh, PartitionSpec("data", "model"))
    replicated = NamedSharding(mesh, PartitionSpec())
    initial = np.random.default_rng(0).standard_normal((FEATURES, OUTPUTS)).astype(np.float32)
    target = np.random.default_rng(1).standard_normal((FEATURES, OUTPUTS)).astype(np.float32)
    weights = jax.make_array_from_callback(initial.shape, sharded, lambda index: initial[index])
    momentum = jax.make_array_from_callback(initial.shape, sharded, lambda index: np.zeros_like(initial)[index])
    key = jax.jit(lambda: jax.random.key(2026), out_shardings=replicated)()

    def train_step(
        w: jax.Array, m: jax.Array, root: jax.Array, batch_id: Any
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        step_key = jax.random.fold_in(root, batch_id)
        x = jax.random.normal(step_key, (BATCH, FEATURES))
        y = jnp.tanh(x @ target)

        def loss_of(w: jax.Array) -> jax.Array:
            return jnp.mean((x @ w - y) ** 2)

        loss, grad = jax.value_and_grad(loss_of)(w)
        m = 0.9 * m + grad
        return w - 0.05 * m, m, loss

    step = jax.jit(train_step, out_shardings=(sharded, sharded, replicated))
    iterator = iter(grain.MapDataset.range(24).shuffle(seed=3).repeat(None))
    return {"weights": weights, "momentum": momentum, "key": key, "iterator": iterator, "step": step}


def run_job(
    root: str,
    total: int,
    interval: int,
    keep_last: int,
    keep_every: int | None,
    guard: bool,
    signal_at: int | None,
    pause: float,
    report: bool,
    signal_late: bool = False,
) -> dict[str, Any]:
    """Trains to step ``total``, resuming from the newest committed step under ``root`` if there is one.

    ``signal_at`` sends this process a real SIGTERM in that iteration of the
    loop: before its training step, or after its ``should_save`` when
    ``signal_late`` is True (so that the other processes learn of it first).
    """
    import contextlib

    import numpy as np

    from tinax.checkpointing import TrainingCheckpointManager, abstract_restore_target

    parts = build()
    weights, momentum, key, iterator, step_fn = (
        parts["weights"],
        parts["momentum"],
        parts["key"],
        parts["iterator"],
        parts["step"],
    )
    auxiliary = {"loss_sum": 0.0}
    manager = TrainingCheckpointManager(
        root,
        save_interval_steps=interval,
        keep_last=keep_last,
        keep_every=keep_every,
        keep_best=None,
        best_mode=None,
        save_in_flight="wait",
        create=True,
    )
    start = manager.latest_committed_step()
    if start is None:
        start = 0
    else:
        restored = manager.restore(
            start,
            {"w": abstract_restore_target(weights)},
            {"m": abstract_restore_target(momentum)},
            abstract_restore_target(key),
            {"loss_sum": 0.0},
            iterator,
        )
        weights, momentum, key = restored.model["w"], restored.optimizer["m"], restored.rng
        auxiliary = restored.auxiliary
    _emit({"ready": start}, report)
    losses: dict[str, str] = {}
    stopped = total
    guarded = manager.preemption_guard() if guard else contextlib.nullcontext()
    with guarded:
        for step in range(start, total):
            if signal_at == step and not signal_late:
                os.kill(os.getpid(), signal.SIGTERM)
            batch_id = next(iterator)
            weights, momentum, loss = step_fn(weights, momentum, key, batch_id)
            local_loss = np.asarray(loss.addressable_data(0))
            losses[str(step + 1)] = local_loss.tobytes().hex()
            auxiliary = {"loss_sum": auxiliary["loss_sum"] + float(local_loss)}
            _emit({"done": step + 1}, report)
            if pause:
                time.sleep(pause)
            if manager.should_save(step + 1):
                manager.save(step + 1, {"w": weights}, {"m": momentum}, key, auxiliary, iterator)
                if step + 1 - interval >= 1:
                    # The previous save was waited for and committed before this one started.
                    _emit({"committed": step + 1 - interval}, report)
            if signal_at == step and signal_late:
                os.kill(os.getpid(), signal.SIGTERM)
            if manager.preemption_requested:
                stopped = step + 1
                break
    manager.wait()
    return {
        "start": start,
        "stopped": stopped,
        "preempted": manager.preemption_requested,
        "losses": losses,
        "loss_sum": auxiliary["loss_sum"],
        "weights": _digest(weights),
        "momentum": _digest(momentum),
        "committed": list(manager.committed_steps()),
        "handler_restored": signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None),
    }


def _main(arguments: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--total", type=int, required=True)
    parser.add_argument("--interval", type=int, required=True)
    parser.add_argument("--keep-last", type=int, default=2)
    parser.add_argument("--keep-every", type=int, default=None)
    parser.add_argument("--guard", action="store_true")
    parser.add_argument("--pause", type=float, default=0.0)
    parser.add_argument("--report", action="store_true")
    options = parser.parse_args(arguments)
    result = run_job(
        options.root,
        options.total,
        options.interval,
        options.keep_last,
        options.keep_every,
        options.guard,
        None,
        options.pause,
        options.report,
    )
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
