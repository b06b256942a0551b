"""Prints the folder of a working interpreter for a Python version, e.g. 3.12.

Hatch's `test-newest` (3.13) and `compat` (3.12) environments only use
interpreters they can find on PATH (hatch never downloads one here). ./dev, CI
and contributors put the folder this prints on PATH first:

  export PATH="$(python3 scripts/find_python.py 3.12):$PATH"

It looks at `pythonX.Y` on PATH (skipping pyenv shims that are not enabled),
then at pyenv's installed versions, then at the usual system folders, and
fails with a clear message when none works.
"""

from __future__ import annotations

import glob
import os
import pathlib
import shutil
import subprocess
import sys


def works(executable: str, version: str) -> bool:
    try:
        result = subprocess.run(
            [executable, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except OSError:
        return False
    return result.returncode == 0 and result.stdout.strip() == version


def candidates(version: str) -> list[str]:
    found = []
    on_path = shutil.which(f"python{version}")
    if on_path:
        found.append(on_path)
    pyenv_root = os.environ.get("PYENV_ROOT") or str(pathlib.Path.home() / ".pyenv")
    found += sorted(glob.glob(f"{pyenv_root}/versions/{version}.*/bin/python{version}"), reverse=True)
    found += [f"/usr/local/bin/python{version}", f"/usr/bin/python{version}"]
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: find_python.py X.Y", file=sys.stderr)
        return 2
    version = argv[0]
    for executable in candidates(version):
        if os.path.exists(executable) and works(executable, version):
            print(pathlib.Path(executable).parent)
            return 0
    print(
        f"find_python: no working Python {version} found (looked on PATH, under pyenv and in /usr). "
        f"Install it, for example with `pyenv install {version}`, or put python{version} on PATH.",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
