"""Runs mypy (strict) over every member's src/ tree, the test harness's included.

The tinax namespace spans several src/ folders, so mypy is told about all of
them at once: each becomes a base on MYPYPATH and the files are checked under
their real module names (tinax._array._ownership, ...).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main() -> int:
    # Every member's src/: the tinax namespace's parts and the test harness (tinax_testing).
    sources = sorted(str(path) for path in (ROOT / "packages").glob("*/src") if path.is_dir())
    if not sources:
        print("typecheck: no packages/*/src folders found", file=sys.stderr)
        return 2
    environment = dict(os.environ, MYPYPATH=os.pathsep.join(sources))
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "mypy.ini"), *sys.argv[1:], *sources]
    return subprocess.call(command, env=environment, cwd=ROOT)


if __name__ == "__main__":
    raise SystemExit(main())
