"""Probes what importing a module does, in a fresh interpreter.

The inert-import rule (no JAX backend start, no optional integration pulled
in) can only be checked where nothing has been imported yet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterable

__all__ = ["OPTIONAL_INTEGRATIONS", "import_side_effects"]

#: Third-party top-level modules that belong to other distributions' stacks
#: and must never be imported as a side effect of importing a tinax module.
OPTIONAL_INTEGRATIONS = (
    "flax",
    "optax",
    "orbax",
    "grain",
    "pyarrow",
    "safetensors",
    "array_record",
    "msgpack",
    "tensorstore",
    # Object storage clients: imported only when a gs:// or s3:// path is used.
    "fsspec",
    "gcsfs",
    "s3fs",
    "botocore",
    "aiobotocore",
    # Progress bars: imported only when a caller asks for one.
    "tqdm",
    "rich",
)

_PROBE = textwrap.dedent(
    """
    import importlib, json, sys
    before = set(sys.modules)
    importlib.import_module(MODULE)
    from jax._src import xla_bridge
    print(json.dumps({
        "backends_initialized": bool(xla_bridge.backends_are_initialized()),
        "imported": sorted({name.split(".")[0] for name in set(sys.modules) - before}),
    }))
    """
)


def import_side_effects(module: str, watched: Iterable[str] = OPTIONAL_INTEGRATIONS) -> dict[str, object]:
    """Imports ``module`` in a fresh interpreter and reports its side effects.

    Args:
      module: Dotted module name, for example ``"tinax.array"``.
      watched: Top-level module names that count as unwanted integrations.

    Returns:
      A dict with ``backends_initialized`` (whether any JAX backend started)
      and ``integrations`` (the sorted watched modules that were imported).

    Raises:
      RuntimeError: If the import itself failed in the child interpreter.
    """
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST")}
    completed = subprocess.run(
        [sys.executable, "-c", f"MODULE = {module!r}\n{_PROBE}"],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"importing {module} in a fresh interpreter failed:\n{completed.stderr}")
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    watched_names = set(watched)
    return {
        "backends_initialized": report["backends_initialized"],
        "integrations": sorted(watched_names.intersection(report["imported"])),
    }
