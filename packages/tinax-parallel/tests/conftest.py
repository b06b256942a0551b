"""Runs tinax-parallel's tests on 8 CPU devices, set before any JAX backend starts."""

import pytest

from tinax._jit import _budget
from tinax_testing import force_cpu_devices

force_cpu_devices()


@pytest.fixture(autouse=True)
def _separate_trace_budgets() -> None:
    """Gives each test fresh trace budgets.

    Wrappers of one function made at one place share a budget (as tinax 0.2's
    chex counters did), and a parametrized test wraps at the same place every
    time.
    """
    _budget._sites.clear()
