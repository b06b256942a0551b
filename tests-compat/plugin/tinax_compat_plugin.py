"""pytest plugin for running tinax 0.2's suite against tinax 0.3.

Message wording is not part of the compatibility contract; exception types
are. This plugin therefore drops the ``match=`` pattern from every
``pytest.raises`` call while keeping the expected exception type, so a test
still fails when 0.3 raises another type (or nothing at all).
"""

from __future__ import annotations

from typing import Any

import pytest

_original_raises = pytest.raises


def _raises_ignoring_wording(*args: Any, **kwargs: Any) -> Any:
    kwargs.pop("match", None)
    return _original_raises(*args, **kwargs)


pytest.raises = _raises_ignoring_wording  # type: ignore[assignment]
