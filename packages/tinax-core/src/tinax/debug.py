"""Bounded, asynchronous observation of running JAX programs.

:func:`observe_nonfinite` reports NaN and infinity from inside staged code
through a JAX callback, :func:`profile_call` keeps a profiler trace open until
the results and their side effects are complete, and
:func:`visualize_array_sharding` draws an array's layout over its devices.
Callbacks observe a computation; they never change its values.
"""

from tinax._core._command._versions import distribution_version as _distribution_version
from tinax._debug._nonfinite import observe_nonfinite as observe_nonfinite
from tinax._debug._profiling import profile_call as profile_call
from tinax._debug._visualization import visualize_array_sharding as visualize_array_sharding

__all__ = [
    "observe_nonfinite",
    "profile_call",
    "visualize_array_sharding",
]

#: The version of the installed tinax-core distribution, which ships this module.
__version__: str = _distribution_version("tinax-core", __file__)
