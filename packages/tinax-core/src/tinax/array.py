"""Explicit ownership where arrays cross the NumPy, JAX and DLPack boundary.

Every conversion states its copy or writability policy, and a few operations
that fail silently upstream (lossy casts, mixed batches) raise instead.
"""

from tinax._array._info import ArrayInfo as ArrayInfo
from tinax._array._info import inspect_array as inspect_array
from tinax._array._ops import one_hot as one_hot
from tinax._array._ops import safe_astype as safe_astype
from tinax._array._ops import stack_batch as stack_batch
from tinax._array._ownership import from_dlpack as from_dlpack
from tinax._array._ownership import from_numpy as from_numpy
from tinax._array._ownership import to_numpy as to_numpy
from tinax._core._command._versions import distribution_version as _distribution_version

__all__ = [
    "ArrayInfo",
    "from_dlpack",
    "from_numpy",
    "inspect_array",
    "one_hot",
    "safe_astype",
    "stack_batch",
    "to_numpy",
]

#: The version of the installed tinax-core distribution, which ships this module.
__version__: str = _distribution_version("tinax-core", __file__)
