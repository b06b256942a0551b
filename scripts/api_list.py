"""Checks (or rewrites) the checked-in list of every public tinax name.

  python scripts/api_list.py --check     compare each module's __all__ with the list
  python scripts/api_list.py --write     rewrite the list from the modules

The list lives in packages/tinax-meta/public-api.txt, one ``module.name`` per
line, so any change to the public surface shows up in review as a diff. The
modules are found by walking the installed ``tinax`` namespace, which makes the
same check work in the repository's environments and in a venv that installed
the distributions from their wheels.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import pathlib
import pkgutil
import sys

API_LIST = pathlib.Path(__file__).resolve().parent.parent / "packages" / "tinax-meta" / "public-api.txt"
HEADER = (
    "# Every public tinax name, as `module.name`, from each public module's __all__.\n"
    "# Rewrite with: hatch run test:api-list --write (and review the diff).\n"
)


def public_modules() -> list[str]:
    """Every public module: the namespace's own, and the submodules of those that have a ``__path__``."""
    namespace = importlib.import_module("tinax")
    found: list[str] = []
    pending = [(list(namespace.__path__), "tinax.")]
    while pending:
        path, prefix = pending.pop()
        for module in pkgutil.iter_modules(path, prefix=prefix):
            if any(part.startswith("_") for part in module.name.split(".")):
                continue
            found.append(module.name)
            submodule_path = getattr(importlib.import_module(module.name), "__path__", None)
            if submodule_path is not None:
                pending.append((list(submodule_path), f"{module.name}."))
    return sorted(found)


def current_surface() -> list[str]:
    lines = []
    for name in public_modules():
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", None)
        if exported is None:
            raise SystemExit(f"api-list: {name} declares no __all__")
        missing = [item for item in exported if not hasattr(module, item)]
        if missing:
            raise SystemExit(f"api-list: {name}.__all__ names {missing}, which the module does not define")
        lines.extend(f"{name}.{item}" for item in sorted(exported))
    return lines


def recorded_surface(path: pathlib.Path = API_LIST) -> list[str]:
    return [line for line in path.read_text().splitlines() if line and not line.startswith("#")]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="api-list", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="fail if the modules differ from the list")
    mode.add_argument("--write", action="store_true", help="rewrite the list from the modules")
    parser.add_argument("--list", type=pathlib.Path, default=API_LIST, help="the list to check or write")
    arguments = parser.parse_args(argv)
    surface = current_surface()
    if arguments.write:
        arguments.list.write_text(HEADER + "".join(f"{line}\n" for line in surface))
        print(f"api-list: wrote {len(surface)} names to {arguments.list}")
        return 0
    recorded = recorded_surface(arguments.list)
    if surface != recorded:
        diff = difflib.unified_diff(recorded, surface, "checked-in list", "modules", lineterm="")
        print("api-list: the public surface differs from the checked-in list:\n" + "\n".join(diff))
        return 1
    print(f"api-list: {len(surface)} public names match the checked-in list")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
