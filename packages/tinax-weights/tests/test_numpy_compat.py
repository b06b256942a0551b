"""The private NumPy API of tinax-weights: present in the installed NumPy, with a working fallback."""

from __future__ import annotations

import numpy as np
import pytest

from tinax._weights import _numpy_compat


def test_numpy_still_has_the_huge_page_switch() -> None:
    # If this fails, NumPy dropped or moved _set_madvise_hugepage: loads still
    # work (the fallback below), but large ones lose the speed it bought.
    # Find NumPy's new switch, or delete the compat module and its callers.
    switch = _numpy_compat.HUGE_PAGE_SWITCH
    assert switch is not None, f"numpy {np.__version__} has no numpy._core.multiarray._set_madvise_hugepage"
    previous = switch(False)
    assert isinstance(previous, bool)
    assert switch(previous) is False


def test_the_switch_is_restored_after_a_large_allocation() -> None:
    switch = _numpy_compat.HUGE_PAGE_SWITCH
    assert switch is not None
    before = switch(True)
    try:
        array = _numpy_compat.empty_without_huge_page_hint((5, 1024, 1024), np.dtype(np.uint8))
        assert switch(True) is True
    finally:
        switch(before)
    assert array.shape == (5, 1024, 1024)
    assert array.flags.owndata
    assert array.flags.writeable
    assert array.flags.c_contiguous


@pytest.mark.parametrize("shape", [(0,), (3, 4), (5, 1024, 1024)])
def test_without_the_switch_buffers_are_plain_numpy_allocations(monkeypatch: pytest.MonkeyPatch, shape) -> None:
    monkeypatch.setattr(_numpy_compat, "HUGE_PAGE_SWITCH", None)
    array = _numpy_compat.empty_without_huge_page_hint(shape, np.dtype(np.float32))
    assert array.shape == shape
    assert array.dtype == np.float32
    assert array.flags.owndata
    assert array.flags.writeable
