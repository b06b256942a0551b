"""The progress protocol: checked arguments, callbacks from (0, total) to (total, total), and bars on request."""

import importlib.util
import sys

import pytest

from tinax._core.progress import MAX_CALLS, ProgressChoice, require_progress
from tinax_testing import import_side_effects

NEEDED_BY = "tinax.example.write"
HAS_TQDM = importlib.util.find_spec("tqdm") is not None
HAS_RICH = importlib.util.find_spec("rich") is not None


def _run(choice: ProgressChoice, total: int | None, steps: list[int]) -> None:
    with choice.reporting(total, unit="bytes", description="model.bin") as reporter:
        for step in steps:
            reporter.advance(step)


def _assert_increasing_to(calls: list[tuple[int, int | None]], total: int) -> None:
    assert calls[0] == (0, total)
    assert calls[-1] == (total, total)
    done = [done for done, _ in calls]
    assert done == sorted(done)
    assert len(set(done)) == len(done)
    assert {seen_total for _, seen_total in calls} == {total}


def test_a_callback_sees_zero_first_then_growing_counts_ending_at_the_total():
    calls: list[tuple[int, int | None]] = []
    _run(require_progress(lambda done, total: calls.append((done, total)), needed_by=NEEDED_BY), 1000, [100] * 10)
    assert calls == [(done, 1000) for done in range(0, 1001, 100)]


def test_a_callback_is_called_at_most_about_max_calls_times():
    calls: list[tuple[int, int | None]] = []
    total = 50 * MAX_CALLS + 7
    _run(require_progress(lambda done, total: calls.append((done, total)), needed_by=NEEDED_BY), total, [1] * total)
    _assert_increasing_to(calls, total)
    assert len(calls) <= MAX_CALLS + 2


def test_an_empty_operation_reports_zero_of_zero_once():
    calls: list[tuple[int, int | None]] = []
    _run(require_progress(lambda done, total: calls.append((done, total)), needed_by=NEEDED_BY), 0, [])
    assert calls == [(0, 0)]


def test_an_unknown_total_is_none_until_the_last_call_gives_the_amount_done():
    calls: list[tuple[int, int | None]] = []
    choice = require_progress(lambda done, total: calls.append((done, total)), needed_by=NEEDED_BY)
    with choice.reporting(None, unit="rows", description="rows") as reporter:
        for _ in range(3):
            reporter.advance(1)
    assert calls == [(0, None), (1, None), (2, None), (3, None), (3, 3)]


def test_a_failed_operation_makes_no_last_report():
    calls: list[tuple[int, int | None]] = []
    choice = require_progress(lambda done, total: calls.append((done, total)), needed_by=NEEDED_BY)

    def fail_after_four_bytes() -> None:
        with choice.reporting(10, unit="bytes", description="x") as reporter:
            reporter.advance(4)
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        fail_after_four_bytes()
    assert calls == [(0, 10), (4, 10)]


def test_an_exception_from_the_callback_reaches_the_caller():
    def cancel(done: int, total: int | None) -> None:
        if done:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _run(require_progress(cancel, needed_by=NEEDED_BY), 10, [5, 5])


def test_no_progress_reports_nothing_and_counts_what_was_done():
    choice = require_progress(None, needed_by=NEEDED_BY)
    assert choice == ProgressChoice()
    with choice.reporting(10, unit="bytes", description="x") as reporter:
        reporter.advance(7)
    assert reporter.done == 7


@pytest.mark.parametrize("value", [True, False, 1, 0.5, b"bar", ["bar"]])
def test_a_progress_of_another_kind_is_a_type_error(value):
    with pytest.raises(TypeError, match=r"progress must be None, 'bar' or a callable progress\(done, total\), got"):
        require_progress(value, needed_by=NEEDED_BY)


@pytest.mark.parametrize("value", ["", "Bar", "tqdm", "rich", "yes"])
def test_a_str_other_than_bar_is_a_value_error(value):
    with pytest.raises(ValueError, match=r"progress must be None, 'bar' or a callable"):
        require_progress(value, needed_by=NEEDED_BY)


def test_a_bar_without_tqdm_or_rich_is_an_import_error_naming_the_function(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "rich", None)
    with pytest.raises(ImportError, match=r"tinax\.example\.write\(progress='bar'\) .*tqdm or rich.*pip install tqdm"):
        require_progress("bar", needed_by=NEEDED_BY)


@pytest.mark.skipif(not HAS_RICH, reason="rich is not installed in this environment")
def test_a_bar_drawn_with_rich_shows_the_description_on_stderr(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    choice = require_progress("bar", needed_by=NEEDED_BY)
    assert choice.bar == "rich"
    _run(choice, 4096, [1024] * 4)
    captured = capsys.readouterr()
    assert "model.bin" in captured.err
    assert captured.out == ""


@pytest.mark.skipif(not HAS_RICH, reason="rich is not installed in this environment")
def test_a_rich_bar_counts_rows_of_an_unknown_total(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    with require_progress("bar", needed_by=NEEDED_BY).reporting(None, unit="rows", description="rows") as reporter:
        reporter.advance(3)
    assert "3/3 rows" in capsys.readouterr().err


@pytest.mark.skipif(not HAS_TQDM, reason="tqdm is not installed in this environment")
def test_a_bar_drawn_with_tqdm_shows_the_description_on_stderr(capsys):
    choice = require_progress("bar", needed_by=NEEDED_BY)
    assert choice.bar == "tqdm"  # Preferred when both are installed.
    _run(choice, 4096, [1024] * 4)
    captured = capsys.readouterr()
    assert "model.bin" in captured.err
    assert "100%" in captured.err


def test_importing_the_progress_module_imports_no_bar_library():
    assert import_side_effects("tinax._core.progress", watched=("tqdm", "rich")) == {
        "backends_initialized": False,
        "integrations": [],
    }


@pytest.mark.parametrize(
    "module", ["tinax.array", "tinax.debug", "tinax.device", "tinax.grad", "tinax.jit", "tinax.random", "tinax.stdlib"]
)
def test_importing_a_core_module_imports_no_bar_library(module):
    assert import_side_effects(module, watched=("tqdm", "rich"))["integrations"] == []
