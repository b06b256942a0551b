"""Runs mypy (strict) over every distribution's src/ tree.

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
    sources = sorted(str(path) for path in (ROOT / "packages").glob("*/src") if (path / "tinax").is_dir())
    if not sources:
        print("typecheck: no packages/*/src/tinax folders found", file=sys.stderr)
        return 2
    environment = dict(os.environ, MYPYPATH=os.pathsep.join(sources))
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "mypy.ini"), *sys.argv[1:], *sources]
    return subprocess.call(command, env=environment, cwd=ROOT)


if __name__ == "__main__":
    raise SystemExit(main())
