"""The tinax test harness: shared by every member's tests, shipped in no wheel.

Forced CPU devices, import probes, the multi-process runner, the command
runner and the training proofs' scaffolding live here, in an unpublished workspace member, so that no runtime
wheel carries test code. Test environments install it next to the
distributions under test; each member's sdist carries a copy of it (under
tests/_harness), which its pytest settings put on the path.
"""

import importlib.metadata as _metadata
import os as _os

from tinax_testing.command import Completed, run_tinax
from tinax_testing.devices import TEST_DEVICE_COUNT, force_cpu_devices
from tinax_testing.imports import OPTIONAL_INTEGRATIONS, import_side_effects
from tinax_testing.processes import (
    ChildReport,
    DistributedRunError,
    cpu_child_environment,
    free_port,
    run_processes,
)
from tinax_testing.signatures import parameter_summary
from tinax_testing.training import array_digest, float32_bits, regression_records, sharded_mlp_class, stack_rows


def _share_with_child_processes() -> None:
    # A copy found through pytest's `pythonpath` (an sdist's tests) is on this
    # process's sys.path only; the Python processes that the tests start must
    # import it too. An installed harness needs nothing, and its folder
    # (site-packages) must not leak into other interpreters the tests start.
    try:
        _metadata.distribution("tinax-testing")
    except _metadata.PackageNotFoundError:
        folder = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
        entries = [entry for entry in _os.environ.get("PYTHONPATH", "").split(_os.pathsep) if entry]
        if folder not in entries:
            _os.environ["PYTHONPATH"] = _os.pathsep.join([folder, *entries])


_share_with_child_processes()

__all__ = [
    "OPTIONAL_INTEGRATIONS",
    "TEST_DEVICE_COUNT",
    "ChildReport",
    "Completed",
    "DistributedRunError",
    "cpu_child_environment",
    "force_cpu_devices",
    "free_port",
    "import_side_effects",
    "parameter_summary",
    "run_processes",
    "run_tinax",
    "array_digest",
    "float32_bits",
    "regression_records",
    "sharded_mlp_class",
    "stack_rows",
]
