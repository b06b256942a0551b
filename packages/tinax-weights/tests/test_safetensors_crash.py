"""A writer killed with SIGKILL mid-save leaves the old file or the new one, never a torn one."""

from __future__ import annotations

import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import numpy as np
import pytest

from tinax.weights import inspect_safetensors, load_safetensors

TRIALS = 24
SEED = 825
DESTINATION = "model.safetensors"

# The child saves, over and over with overwrite=True, two versions that differ
# in every byte and in size, so any mix of them would be detected.
CHILD = textwrap.dedent(
    """
    import sys
    sys.path[:0] = [{tests_folder!r}]
    from test_safetensors_crash import version
    from tinax.weights import save_safetensors

    path = sys.argv[1]
    versions = [version(0), version(1)]
    print("ready", flush=True)
    count = 0
    while True:
        tensors, metadata = versions[count % 2]
        save_safetensors(path, tensors, overwrite=True, metadata=metadata, max_metadata_bytes=64)
        count += 1
    """
)


def version(index: int) -> tuple[dict[str, np.ndarray[Any, Any]], dict[str, str]]:
    """One of the two contents: a few MB, every value tied to the version."""
    rows = 640 if index == 0 else 768
    tensors = {
        "embedding": np.full((rows, 1024), index + 1, dtype=np.float32),
        "bias": np.full((rows,), -(index + 1), dtype=np.int64),
        "flags": np.full((3 + index,), bool(index), dtype=np.bool_),
    }
    return tensors, {"version": str(index)}


def matching_version(path: pathlib.Path) -> int | None:
    """Returns which version the file holds exactly, or None if it matches neither."""
    inspect_safetensors(path, max_metadata_bytes=64)  # The header must validate completely.
    loaded = load_safetensors(path, max_bytes=path.stat().st_size, max_metadata_bytes=64)
    for index in (0, 1):
        tensors, metadata = version(index)
        same_names = loaded.info.metadata == metadata and loaded.tensors.keys() == tensors.keys()
        if same_names and all(np.array_equal(loaded.tensors[name], tensors[name]) for name in tensors):
            return index
    return None


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_during_save_never_leaves_a_torn_file(tmp_path: pathlib.Path) -> None:
    rng = random.Random(SEED)
    code = CHILD.format(tests_folder=str(pathlib.Path(__file__).parent))
    temporary_name = re.compile(rf"^\.{re.escape(DESTINATION)}\.[^/]+\.tmp$")
    outcomes = []
    for trial in range(TRIALS):
        folder = tmp_path / f"trial{trial}"
        folder.mkdir()
        destination = folder / DESTINATION
        child = subprocess.Popen(
            [sys.executable, "-c", code, str(destination)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            assert child.stdout is not None
            ready = child.stdout.readline()
            assert ready == "ready\n", f"trial {trial}: the child did not start: {ready!r} {child.stderr.read()}"  # type: ignore[union-attr]
            # A random moment: often during the first save, otherwise during any later one.
            time.sleep(rng.uniform(0.0, 0.02) if trial % 2 else rng.uniform(0.0, 0.3))
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.kill()
            child.communicate(timeout=60)
        assert child.returncode == -signal.SIGKILL

        leftovers = sorted(name for name in os.listdir(folder) if name != DESTINATION)
        # Whatever a killed save left behind is a hidden temporary file, never the destination.
        assert all(temporary_name.match(name) for name in leftovers), f"trial {trial}: {leftovers}"
        if destination.exists():
            held = matching_version(destination)
            assert held in (0, 1), f"trial {trial}: the destination matches neither version"
            outcomes.append(held)
        else:
            outcomes.append(None)
    assert len(outcomes) == TRIALS
