"""The one private NumPy API tinax-weights uses, with its fallback.

NumPy asks Linux for transparent huge pages for every array of 4 MiB or
more. Where huge pages must be assembled on demand (fragmented memory,
virtual machines), each first touch of a fresh 2 MiB page can stall, and a
loader touches every page of its result for the first time: measured full
loads of 1 GiB ran about 3x slower with the hint than without it, and the
upstream safetensors loader (plain malloc) never gives it. Load buffers are
therefore allocated with the hint off, through NumPy's private
``numpy._core.multiarray._set_madvise_hugepage``, the only switch NumPy has.
The switch is process-wide, so it is flipped under a lock and restored at
once. Where a NumPy release lacks it, :data:`HUGE_PAGE_SWITCH` is None and
buffers are allocated as NumPy allocates them by default (slower first
touches, same values); ``tests/test_numpy_compat.py`` fails when that
happens, so the fallback is never taken unnoticed.
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
    """Returns an uninitialised array, allocated without the transparent huge page hint where NumPy allows.

    Args:
      shape: The array's shape.
      dtype: Its dtype (None for NumPy's default).

    Returns:
      A fresh, writable, C-contiguous array that owns its memory.
    """
    if HUGE_PAGE_SWITCH is None or math.prod(shape) * np.dtype(dtype).itemsize < _HUGE_PAGE_HINT_BYTES:
        return np.empty(shape, dtype=dtype)
    with _switch_lock:
        previous = HUGE_PAGE_SWITCH(False)
        try:
            return np.empty(shape, dtype=dtype)
        finally:
            HUGE_PAGE_SWITCH(previous)
