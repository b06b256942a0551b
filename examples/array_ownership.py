"""Explicit ownership where arrays cross between NumPy and JAX (`tinax.array`).

What it shows:

- `from_numpy(host, copy=True)` snapshots the host data, so writing to the
  NumPy array afterwards never changes the JAX array. Plain
  `jax.device_put(host, may_alias=False)` may share a 64-byte-aligned host
  buffer on CPU (jax#37830); the example prints what it does here.
- `to_numpy(array, writable=False)` returns a read-only view, and
  `to_numpy(array, writable=True)` an independent copy the caller owns.
- `safe_astype` refuses a cast that can change values: int32 300 would
  silently become int8 44 with `astype`.

Run it with `python examples/array_ownership.py`.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np

from tinax.array import from_numpy, safe_astype, to_numpy


def report(claim: str, holds: bool) -> None:
    """Prints a claim the example has just checked, or stops if it does not hold."""
    if not holds:
        raise SystemExit(f"array_ownership: expected, but not observed: {claim}")
    print(claim)


def aligned_host_array(values: np.ndarray) -> np.ndarray:
    """Copies ``values`` into a buffer aligned to 64 bytes, the case where device_put shares memory on CPU."""
    storage = np.empty(values.nbytes + 64, dtype=np.uint8)
    start = -storage.ctypes.data % 64
    aligned = storage[start : start + values.nbytes].view(values.dtype).reshape(values.shape)
    aligned[...] = values
    return aligned


def main() -> int:
    host = aligned_host_array(np.arange(8, dtype=np.float32))

    snapshot = from_numpy(host, copy=True)
    plain = jax.device_put(host, may_alias=False)
    jax.block_until_ready((snapshot, plain))
    host[0] = 100.0
    plain_shares = float(np.asarray(plain)[0]) == 100.0
    print(f"jax.device_put(may_alias=False) on an aligned buffer shares host memory here: {plain_shares}")
    report(
        "from_numpy(copy=True): a later write to the NumPy array does not reach the JAX array",
        float(np.asarray(snapshot)[0]) == 0.0,
    )

    view = to_numpy(snapshot, writable=False)
    try:
        view[0] = 1.0
        refused = False
    except ValueError:
        refused = True
    report("to_numpy(writable=False): the host view is read-only", refused and not view.flags.writeable)
    owned = to_numpy(snapshot, writable=True)
    owned[0] = -1.0
    report(
        "to_numpy(writable=True): the host copy is writable and independent of the JAX array",
        float(np.asarray(snapshot)[0]) == 0.0,
    )

    counts = jnp.array([1, 300], dtype=jnp.int32)
    print(f"jnp astype int32 -> int8 silently gives {counts.astype(jnp.int8).tolist()}")
    try:
        safe_astype(counts, jnp.int8)
        message = ""
    except ValueError as error:
        message = str(error)
    print(f"safe_astype(int32 -> int8) raised ValueError: {message}")
    report("safe_astype refused the lossy int32 -> int8 cast", "allow_lossy=True" in message)
    small = jnp.array([1, -100], dtype=jnp.int8)
    widened = safe_astype(small, jnp.float32)
    report("safe_astype allowed the value-preserving int8 -> float32 cast", widened.tolist() == [1.0, -100.0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
