"""Dispatch overhead of tinax.jit.bounded_jit against raw jax.jit.

Run from the repository root with ``hatch run bench:jit``. Options:
``--calls N`` (calls per timed batch), ``--repeats N`` (timed batches per
variant), ``--seed N`` (order of the variants inside each round).

The function is a scalar add, so a call costs what dispatch costs. Variants
are timed in interleaved rounds (every round times each variant once, in a
shuffled order) so that drift in machine load hits them all alike. Per variant
the script prints the median and minimum time per call, and per comparison the
median of the per-round ratios and the ratio of the minimums.

Comparisons:
  no mesh:   bounded_jit(f)            vs  jax.jit(f)
  with mesh: bounded_jit(f, mesh=mesh) vs  `with jax.set_mesh(mesh): jitted(x)`
"""

from __future__ import annotations

import os

# Eight CPU devices, as in the test suites; must be set before JAX starts.
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["JAX_NUM_CPU_DEVICES"] = "8"

import argparse
import sys

import jax
import jax.numpy as jnp
from _timing import report, run
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tinax.jit import bounded_jit


def add_one(x: jax.Array) -> jax.Array:
    return x + 1


def add_one_on_mesh(x: jax.Array) -> jax.Array:
    # A function of its own: wrappers of one function made at one place share a trace budget.
    return x + 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()

    print(f"jax {jax.__version__}, python {sys.version.split()[0]}, {jax.device_count()} CPU devices")
    print(f"{options.calls} calls per batch, {options.repeats} interleaved rounds")

    x = jnp.float32(1.0)
    raw = jax.jit(add_one)
    bounded = bounded_jit(add_one, max_traces=1)
    no_mesh = run(
        {"jax.jit": lambda: raw(x), "bounded_jit": lambda: bounded(x)},
        options.calls,
        options.repeats,
        options.seed,
    )

    mesh = jax.make_mesh((8,), ("data",))
    x_on_mesh = jax.device_put(x, NamedSharding(mesh, P()))
    raw_for_mesh = jax.jit(add_one_on_mesh)
    bounded_mesh = bounded_jit(add_one_on_mesh, max_traces=1, mesh=mesh)

    def raw_under_set_mesh() -> jax.Array:
        with jax.set_mesh(mesh):
            return raw_for_mesh(x_on_mesh)

    mesh_calls = max(options.calls // 20, 100)  # an 8-device dispatch is much slower
    with_mesh = run(
        {"jax.jit in set_mesh": raw_under_set_mesh, "bounded_jit(mesh=)": lambda: bounded_mesh(x_on_mesh)},
        mesh_calls,
        options.repeats,
        options.seed,
    )

    report("No mesh (scalar add, one device):", no_mesh, [("bounded_jit", "jax.jit")])
    report(
        f"With a mesh (scalar add replicated over 8 devices, {mesh_calls} calls per batch):",
        with_mesh,
        [("bounded_jit(mesh=)", "jax.jit in set_mesh")],
    )
    retraced = [name for name, f in (("bounded", bounded), ("bounded_mesh", bounded_mesh)) if f.trace_count != 1]
    if retraced:
        print(f"\nunexpected retraces in {retraced}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
