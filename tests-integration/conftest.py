"""Cross-package tests run on 8 CPU devices, forced before JAX starts.

If JAX was already started with another device count (for example by a plugin
that imported it first), the session fails here rather than testing on the
wrong topology.
"""

import pytest

from tinax._jit import _budget
from tinax_testing import force_cpu_devices

force_cpu_devices()


@pytest.fixture(autouse=True)
def _separate_trace_budgets() -> None:
    """Gives each test fresh trace budgets: a parametrized test wraps its step at the same place every time."""
    _budget._sites.clear()
