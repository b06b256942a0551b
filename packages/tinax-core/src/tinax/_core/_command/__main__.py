"""Runs the ``tinax`` command as ``python -m tinax._core._command``."""

from tinax._core._command._main import console

console()
