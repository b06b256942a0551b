"""Compiled and batched execution with a trace budget.

``bounded_jit`` wraps ``jax.jit`` and ``batched_jit`` wraps
``jax.jit(jax.vmap(...))``. Both check their arguments when the function is
wrapped, count how often JAX traces the function and refuse to go over the
stated budget with a :class:`TraceBudgetExceededError` that names the argument
whose abstract value changed. Both can enter a mesh around every call.

Importing this module starts no JAX backend.
"""

from tinax._core._command._versions import distribution_version as _distribution_version
from tinax._jit._batched import batched_jit as batched_jit
from tinax._jit._bounded import bounded_jit as bounded_jit
from tinax._jit._budget import TraceBudgetExceededError as TraceBudgetExceededError

__all__ = [
    "bounded_jit",
    "batched_jit",
    "TraceBudgetExceededError",
]

#: The version of the installed tinax-core distribution, which ships this module.
__version__: str = _distribution_version("tinax-core", __file__)
