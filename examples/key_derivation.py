"""Deterministic PRNG keys from named coordinates (`tinax.random`).

What it shows:

- `derive_process_step_key(root, process_index=..., step=...)` gives the same
  key for the same coordinates, so a restarted run draws the same noise at
  the same step, and a different key for another step or stream.
- `split_key(key, count=n)` returns the continuation key first and the `n`
  operation keys second: keep the first in place of `key`, hand out the rest.
- A coordinate outside `[0, 2**32 - 1]` (here -1) is refused with a
  ValueError that names the argument.

Run it with `python examples/key_derivation.py`.
"""

from __future__ import annotations

import sys

import jax
import numpy as np

from tinax.random import derive_key, derive_process_step_key, split_key


def report(claim: str, holds: bool) -> None:
    """Prints a claim the example has just checked, or stops if it does not hold."""
    if not holds:
        raise SystemExit(f"key_derivation: expected, but not observed: {claim}")
    print(claim)


def same_key(first: jax.Array, second: jax.Array) -> bool:
    return bool(np.array_equal(jax.random.key_data(first), jax.random.key_data(second)))


def main() -> int:
    root = jax.random.key(2024)

    step_key = derive_process_step_key(root, process_index=0, step=10)
    after_restart = derive_process_step_key(root, process_index=0, step=10)
    report(
        "derive_process_step_key: the same process and step give the same key (a restart repeats its noise)",
        same_key(step_key, after_restart),
    )
    next_step = derive_process_step_key(root, process_index=0, step=11)
    other_stream = derive_process_step_key(root, process_index=0, step=10, stream=1)
    other_process = derive_process_step_key(root, process_index=1, step=10)
    report(
        "derive_process_step_key: another step, stream or process gives another key",
        not any(same_key(step_key, other) for other in (next_step, other_stream, other_process)),
    )
    report(
        "derive_process_step_key folds in process, step, stream in that order (same as derive_key(root, 0, 10, 0))",
        same_key(step_key, derive_key(root, 0, 10, 0)),
    )

    continuation, operation_keys = split_key(root, count=3)
    draws = [float(jax.random.uniform(key)) for key in (continuation, *operation_keys)]
    report(
        f"split_key(count=3): continuation key first, then {operation_keys.shape[0]} operation keys, "
        "all drawing different numbers",
        operation_keys.shape == (3,) and len(set(draws)) == 4,
    )
    report(
        "split_key continues exactly like jax.random.split(key, count + 1)",
        same_key(continuation, jax.random.split(root, 4)[0]),
    )

    try:
        derive_process_step_key(root, process_index=0, step=-1)
        message = ""
    except ValueError as error:
        message = str(error)
    print(f"derive_process_step_key(step=-1) raised ValueError: {message}")
    report(
        "derive_process_step_key refused a negative step with a ValueError naming 'step'", message.startswith("step ")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
