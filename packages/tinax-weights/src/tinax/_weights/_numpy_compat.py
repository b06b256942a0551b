"""The one private NumPy API tinax-weights uses, with its fallback.

NumPy asks for transparent huge pages for arrays of 4 MiB or more; where they are assembled on
demand, first touches stall, and full 1 GiB loads measured about 3x slower (upstream's malloc never
gives the hint). Load buffers are allocated with the hint off via the private, process-wide
``numpy._core.multiarray._set_madvise_hugepage``, flipped under a lock. Where NumPy lacks it,
:data:`HUGE_PAGE_SWITCH` is None and buffers are plain; ``tests/test_numpy_compat.py`` then fails.
"""

from __future__ import annotations

import importlib
import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["HUGE_PAGE_SWITCH", "empty_without_huge_page_hint"]

#: NumPy's private switch of the huge page hint (takes the new setting,
#: returns the previous one), or None where this NumPy has none.
HUGE_PAGE_SWITCH: Callable[[bool], bool] | None = getattr(
    importlib.import_module("numpy._core.multiarray"), "_set_madvise_hugepage", None
)

# NumPy gives the hint from this size on; smaller arrays need no switching.
_HUGE_PAGE_HINT_BYTES = 4 * 1024 * 1024
_switch_lock = threading.Lock()


def empty_without_huge_page_hint(shape: tuple[int, ...], dtype: np.dtype[Any] | None) -> np.ndarray[Any, Any]:
    """A fresh, writable, C-contiguous uninitialised array, allocated without the huge page hint where NumPy allows."""
    if HUGE_PAGE_SWITCH is None or math.prod(shape) * np.dtype(dtype).itemsize < _HUGE_PAGE_HINT_BYTES:
        return np.empty(shape, dtype=dtype)
    with _switch_lock:
        previous = HUGE_PAGE_SWITCH(False)
        try:
            return np.empty(shape, dtype=dtype)
        finally:
            HUGE_PAGE_SWITCH(previous)
