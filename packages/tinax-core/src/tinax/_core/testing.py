"""Test support shared by the tinax distributions' suites.

These helpers are imported by ``conftest.py`` files and tests, never by
library code. They let each distribution's suite run alone against an
installed wheel as well as inside the monorepo.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterable

__all__ = [
    "OPTIONAL_INTEGRATIONS",
    "TEST_DEVICE_COUNT",
    "force_cpu_devices",
    "import_side_effects",
    "parameter_summary",
]

#: Devices that every tinax test session runs on.
TEST_DEVICE_COUNT = 8

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
)


def force_cpu_devices(count: int = TEST_DEVICE_COUNT) -> None:
    """Makes JAX start with ``count`` CPU devices, or fails loudly.

    Must run before any JAX backend starts, which is why conftest files call
    it at import time.

    Raises:
      RuntimeError: If a backend already started with another device count.
    """
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["JAX_NUM_CPU_DEVICES"] = str(count)
    import jax

    from tinax._core.jax_compat import backends_are_initialized

    if backends_are_initialized():
        actual = jax.device_count()
        if actual != count:
            raise RuntimeError(
                f"the tests need {count} CPU devices but JAX already started with {actual}; "
                "something initialised JAX before conftest.py ran"
            )
        return
    jax.config.update("jax_num_cpu_devices", count)  # type: ignore[no-untyped-call]
    actual = jax.device_count()
    if actual != count:
        raise RuntimeError(f"asked JAX for {count} CPU devices, got {actual}")


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


def parameter_summary(function: object) -> list[tuple[str, str, object]]:
    """Lists ``(name, kind, default)`` per parameter, for signature-compatibility tests.

    ``kind`` is the ``inspect.Parameter`` kind's name (for example
    ``"KEYWORD_ONLY"``), and ``default`` is None where there is none.
    """
    signature = inspect.signature(function)  # type: ignore[arg-type]
    summary: list[tuple[str, str, object]] = []
    for parameter in signature.parameters.values():
        default = None if parameter.default is inspect.Parameter.empty else parameter.default
        summary.append((parameter.name, parameter.kind.name, default))
    return summary
