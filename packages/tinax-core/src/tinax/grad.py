"""Differentiation transforms whose arguments are checked when they wrap.

JAX's transforms accept ``argnums=True`` as if it were ``1`` and report an
index past the last parameter only at the first call. The transforms here share
one ``argnums`` check that refuses both when the function is wrapped. There is
no bare ``grad``: :func:`value_and_grad` returns the gradient as well, and
:func:`jacobian` makes the forward-or-reverse choice explicit.
"""

from tinax._core._command._versions import distribution_version as _distribution_version
from tinax._grad._transforms import hessian as hessian
from tinax._grad._transforms import jacobian as jacobian
from tinax._grad._transforms import value_and_grad as value_and_grad

__all__ = [
    "value_and_grad",
    "jacobian",
    "hessian",
]

#: The version of the installed tinax-core distribution, which ships this module.
__version__: str = _distribution_version("tinax-core", __file__)
