"""The ``tinax`` console script's entry point, outside the ``tinax`` namespace.

Normally it hands over to ``tinax._core._command``. Next to the single-distribution tinax 0.2 no
``tinax`` module imports, so this still answers with the standard library and the upgrade guard:
``info`` checks RECORDs (the integrity module loaded by file path, one 0.2 never installed),
``--version`` lists distributions, and every subcommand exits 1 with the repair (``--json``: the
schema's error document). See docs/guide/command-line.md, "A mixed tinax 0.2 and 0.3 install".
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from types import ModuleType

__all__ = ["console"]

_COMMAND = os.path.join("tinax", "_core", "_command")


def console() -> None:
    """Runs the ``tinax`` command, or reports a mixed tinax 0.2 / 0.3 environment."""
    import _tinax_upgrade_guard

    if not os.path.exists(_tinax_upgrade_guard.leftover_marker()):
        from tinax._core._command._main import console as run

        run()
        return
    sys.exit(_mixed(sys.argv[1:], _tinax_upgrade_guard.leftover_marker()))


def _mixed(arguments: list[str], marker: str) -> int:
    integrity = _load("_integrity")
    repair = "python -m pip install -U tinax"
    distributions = [] if integrity is None else integrity.tinax_distributions()
    problems = []
    as_json = any(len(argument) > 3 and "--json".startswith(argument) for argument in arguments)
    if integrity is not None:
        # With the tool that installed tinax-core, which may not be pip.
        core = [item for item in distributions if (item.metadata["Name"] or "").lower() == "tinax-core"]
        repair = integrity.install_command(["-U", "tinax"], core[0] if core else None)
        if "--version" in arguments and not as_json:
            print(", ".join(f"{item.metadata['Name']} {item.version}" for item in distributions))
        if "info" in arguments:
            for distribution in distributions:
                check = integrity.check_distribution(distribution)
                status = "ok" if not check.problems else f"{len(check.problems)} problems"
                if not as_json:
                    print(f"{check.name} {check.version}: {status}")
                for problem in check.problems:
                    fix = integrity.repair_command(distribution)
                    problems.append(f"{check.name} {check.version}: {problem}; repair: {fix}")
                    if not as_json:
                        print(f"  {problem}; repair: {fix}")
    message = (
        f"this environment mixes the single-distribution tinax 0.2 (it installed {marker}) with the tinax 0.3 "
        f"distributions, so no tinax module can be imported; repair: {repair} (or uninstall the 0.3 distributions "
        "to keep 0.2 alone)"
    )
    print(f"tinax: {message}", file=sys.stderr)
    report = _load("_report") if as_json else None
    if report is not None:
        command = next((argument for argument in arguments if argument in ("info", "inspect")), None)
        document = report.error_document(command, error_type="mixed_install", message=message, exit_code=1)
        document["problems"] = problems
        print(json.dumps(document, indent=2))
    return 1


def _load(name: str) -> ModuleType | None:
    """Loads a standard-library-only module of the command by file, without importing ``tinax``."""
    folder = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(folder, _COMMAND, f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_tinax_command_standalone{name}", path)
    if spec is None or spec.loader is None or not os.path.isfile(path):
        return None
    module = importlib.util.module_from_spec(spec)
    # Registered first so that its dataclasses can find their module.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
