"""How the processes of a multi-process manager agree: process 0 decides, and every process sees the same steps."""

from __future__ import annotations

import hashlib
import json
import pathlib

__all__ = ["StepDisagreementError", "agree_on_steps", "any_process", "barrier", "is_process_zero", "process_count"]


class StepDisagreementError(RuntimeError):
    """The processes of a multi-process run see different committed steps under the root."""


def process_count() -> int:
    import jax

    return int(jax.process_count())


def is_process_zero() -> bool:
    import jax

    return int(jax.process_index()) == 0


def barrier(name: str) -> None:
    if process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def any_process(flag: bool) -> bool:
    """Whether ``flag`` is True on any process, known to every process (one small collective)."""
    import numpy as np
    from jax.experimental import multihost_utils

    flags = multihost_utils.process_allgather(np.array([flag], dtype=np.uint8))
    return bool(np.asarray(flags).any())


def agree_on_steps(root: pathlib.Path, committed: tuple[int, ...]) -> None:
    """Checks that every process sees process 0's committed steps, failing all processes at once otherwise.

    The summary is bytes (SHA-256, count, newest) so that it survives any JAX integer width.
    """
    if process_count() == 1:
        return
    import numpy as np
    from jax.experimental import multihost_utils

    digest = hashlib.sha256(json.dumps(list(committed)).encode("ascii")).digest()
    newest = committed[-1] if committed else 0
    summary = digest + len(committed).to_bytes(8, "little") + newest.to_bytes(8, "little")
    gathered = np.asarray(multihost_utils.process_allgather(np.frombuffer(summary, dtype=np.uint8)))
    rows = [bytes(row.tolist()) for row in gathered.reshape(process_count(), len(summary))]
    if all(row == rows[0] for row in rows):
        return

    def describe(row: bytes) -> str:
        count = int.from_bytes(row[32:40], "little")
        return f"{count} committed steps" + (f", newest {int.from_bytes(row[40:48], 'little')}" if count else "")

    differing = [index for index, row in enumerate(rows) if row != rows[0]]
    views = "; ".join(f"process {index} sees {describe(row)}" for index, row in enumerate(rows))
    raise StepDisagreementError(
        f"the processes disagree on the committed steps under {str(root)!r}: process(es) {differing} see a different "
        f"set than process 0, which decides ({views}). Every process must see the same root folder"
    )
