"""Runs the ``tinax`` command in a subprocess for tests, and checks its JSON against the schema."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from tinax_testing.json_schema import schema_problems

__all__ = ["Completed", "run_tinax"]


@dataclasses.dataclass(frozen=True)
class Completed:
    """What one run of the command gave."""

    code: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, Any]:
        """Parses stdout as the command's JSON document and asserts that it follows the schema."""
        document: dict[str, Any] = json.loads(self.stdout)
        problems = schema_problems(document)
        assert not problems, problems
        return document


def run_tinax(*arguments: str, python: str | None = None, env: Mapping[str, str] | None = None) -> Completed:
    """Runs ``python -m tinax._core._command ARGUMENTS`` and returns its exit code and output."""
    completed = subprocess.run(
        [python or sys.executable, "-m", "tinax._core._command", *arguments],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
        timeout=300,
    )
    return Completed(completed.returncode, completed.stdout, completed.stderr)
