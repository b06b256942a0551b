"""The tinax test harness: shared by every member's tests, shipped in no wheel.

Forced CPU devices, import probes, the multi-process runner, the command
runner and the training proofs' scaffolding live here, in an unpublished workspace member, so that no runtime
wheel carries test code. Test environments and the isolation check install it
next to the distribution under test.
"""

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
