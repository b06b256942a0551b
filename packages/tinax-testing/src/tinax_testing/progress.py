"""Checks on the progress callbacks and the INFO lines that tinax's writers and loaders report."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Only for the annotation: the harness does not depend on pytest.
    import pytest

__all__ = ["ProgressCalls", "assert_progress", "progress_recorder", "tinax_info_records"]

ProgressCalls = list[tuple[int, int | None]]
"""The ``(done, total)`` pairs that a progress callback received, in order."""


def progress_recorder() -> tuple[ProgressCalls, Callable[[int, int | None], None]]:
    """Makes a progress callback that records each call.

    Returns:
        The list that fills with the ``(done, total)`` pairs, and the callback
        to pass as ``progress=``.
    """
    calls: ProgressCalls = []

    def record(done: int, total: int | None) -> None:
        calls.append((done, total))

    return calls, record


def assert_progress(calls: ProgressCalls, total: int) -> None:
    """Asserts that progress went from ``(0, total)`` to ``(total, total)``.

    Args:
        calls: The ``(done, total)`` pairs a callback received.
        total: The total that every call must report.

    Raises:
        AssertionError: If the first or last call is off, ``done`` fails to
            grow at some call, or the total changes.
    """
    assert calls[0] == (0, total)
    assert calls[-1] == (total, total)
    done = [done for done, _ in calls]
    assert all(before < after for before, after in itertools.pairwise(done))
    assert {seen for _, seen in calls} == {total}


def tinax_info_records(caplog: pytest.LogCaptureFixture, logger_name: str) -> list[logging.LogRecord]:
    """Returns the records that tinax's loggers captured, all INFO lines of one logger.

    Args:
        caplog: pytest's log capture of the test.
        logger_name: The one logger that may have logged, e.g. ``"tinax.data"``.

    Returns:
        The captured records of loggers under ``tinax``, in order.

    Raises:
        AssertionError: If any of them is from another logger or not at INFO.
    """
    records = [record for record in caplog.records if record.name.startswith("tinax")]
    assert all(record.name == logger_name and record.levelno == logging.INFO for record in records)
    return records
