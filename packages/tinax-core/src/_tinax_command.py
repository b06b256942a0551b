"""The ``tinax`` console script's entry point, outside the ``tinax`` namespace.

In a healthy environment it hands over to ``tinax._core._command``. Where the
single-distribution tinax 0.2 is installed next to the 0.3 members, no
``tinax`` module can be imported (0.2's package folders shadow the namespace,
and the upgrade guard refuses them), so this module still answers:
``tinax info`` checks every tinax distribution against its RECORD with the
integrity module loaded by its file path (a path 0.2 never installed, which
needs only the standard library), and every subcommand ends with a one-line
message naming the repairs and exit code 1. It imports only the standard
library and the guard.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

__all__ = ["console"]

_INTEGRITY = os.path.join("tinax", "_core", "_command", "_integrity.py")


def console() -> None:
    """Runs the ``tinax`` command, or reports a mixed tinax 0.2 / 0.3 environment."""
    import _tinax_upgrade_guard

    if not os.path.exists(_tinax_upgrade_guard.leftover_marker()):
        from tinax._core._command._main import console as run

        run()
        return
    sys.exit(_mixed(sys.argv[1:], _tinax_upgrade_guard.leftover_marker()))


def _mixed(arguments: list[str], marker: str) -> int:
    repair = "python -m pip install -U tinax"
    if "info" in arguments:
        integrity = _load_integrity()
        if integrity is not None:
            for distribution in integrity.tinax_distributions():
                check = integrity.check_distribution(distribution)
                status = "ok" if not check.problems else f"{len(check.problems)} problems"
                print(f"{check.name} {check.version}: {status}")
                for problem in check.problems:
                    fix = integrity.repair_command(distribution)
                    print(f"  {problem}; repair: {fix}")
    print(
        f"tinax: this environment mixes the single-distribution tinax 0.2 (it installed {marker}) with the tinax 0.3 "
        f"distributions, so no tinax module can be imported; repair: {repair} (or uninstall the 0.3 distributions "
        "to keep 0.2 alone)",
        file=sys.stderr,
    )
    return 1


def _load_integrity() -> ModuleType | None:
    """Loads the integrity module from its file, without importing the ``tinax`` namespace."""
    folder = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(folder, _INTEGRITY)
    spec = importlib.util.spec_from_file_location("_tinax_integrity_standalone", path)
    if spec is None or spec.loader is None or not os.path.isfile(path):
        return None
    module = importlib.util.module_from_spec(spec)
    # Registered first so that its dataclasses can find their module.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
