"""Progress of long operations: one callback protocol, and bars drawn with tqdm or rich on request.

Long operations take a keyword-only ``progress`` (:data:`Progress`): None, a callable
``progress(done, total)``, or ``"bar"``. See docs/guide/logging.md for the call sequence and
the multi-process rule. tqdm and rich are imported only once a bar is asked for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
from collections.abc import Callable, Iterator
from typing import Any, Literal, TypeAlias

from tinax._core import validation
from tinax._core.optional import import_optional

__all__ = ["BAR", "Progress", "ProgressCallback", "ProgressChoice", "Reporter", "require_progress"]

#: The callback protocol: ``callback(done, total)``; see the module docstring.
ProgressCallback: TypeAlias = Callable[[int, int | None], None]
#: The type of every ``progress=`` argument.
Progress: TypeAlias = ProgressCallback | Literal["bar"] | None
#: The value of ``progress`` that asks for a bar.
BAR = "bar"
#: The bar libraries, in the order they are preferred.
BAR_LIBRARIES = ("tqdm", "rich")
#: At most about this many calls reach a callback when the total is known.
MAX_CALLS = 1000

_EXPECTED = "None, 'bar' or a callable progress(done, total)"
_Unit = Literal["bytes", "rows"]
_Sink = ProgressCallback


@dataclasses.dataclass(frozen=True)
class ProgressChoice:
    """A checked ``progress`` argument: a ``callback``, a ``bar`` library (``"tqdm"``/``"rich"``), or neither."""

    callback: ProgressCallback | None = None
    bar: str | None = None

    @contextlib.contextmanager
    def reporting(self, total: int | None, *, unit: _Unit, description: str) -> Iterator[Reporter]:
        """Yields a :class:`Reporter`: ``(0, total)`` on entry, ``(total, total)`` on success; bars always close.

        ``unit`` (``"bytes"``/``"rows"``) sets how a bar counts; ``description`` starts the bar.
        """
        sink: _Sink | None = self.callback
        close: Callable[[], None] = _nothing
        if self.bar is not None:
            sink, close = {"tqdm": _tqdm_bar, "rich": _rich_bar}[self.bar](total, unit, description)
        try:
            reporter = Reporter(sink, total)
            yield reporter
            reporter.finish()
        finally:
            close()


def require_progress(value: object, *, needed_by: str, argument: str = "progress") -> ProgressChoice:
    """Checks a ``progress`` argument before any work starts.

    TypeError unless None, a str or callable (bool refused); ValueError for a str other than ``"bar"``;
    ImportError, naming ``needed_by``, when a bar is asked for and neither tqdm nor rich imports.
    """
    if value is None:
        return ProgressChoice()
    if isinstance(value, str):
        if value != BAR:
            validation.fail_value(argument, _EXPECTED, value)
        return ProgressChoice(bar=_bar_library(needed_by, argument))
    if isinstance(value, bool) or not callable(value):
        validation.fail_type(argument, _EXPECTED, value)
    return ProgressChoice(callback=value)


class Reporter:
    """Counts work done and passes it to ``sink`` (None: count only), at most about :data:`MAX_CALLS` times."""

    def __init__(self, sink: _Sink | None, total: int | None) -> None:
        self.done = 0
        self.total = total
        self._sink = sink
        self._step = 1 if total is None else max(1, -(-total // MAX_CALLS))
        self._reported = 0
        if sink is not None:
            sink(0, total)

    def advance(self, amount: int) -> None:
        """Adds ``amount`` and reports if enough was done since the last report."""
        self.done += amount
        if self._sink is not None and (self.done - self._reported >= self._step or self.done == self.total):
            self._reported = self.done
            self._sink(self.done, self.total)

    def finish(self) -> None:
        """The last report: ``(total, total)``, or ``(done, done)`` where the total was unknown."""
        final = self.done if self.total is None else self.total
        if self._sink is not None and (self._reported != final or self.total is None):
            self.done = self._reported = final
            self._sink(final, final)


def _nothing() -> None:
    return None


def _bar_library(needed_by: str, argument: str) -> str:
    for library in BAR_LIBRARIES:
        try:
            if importlib.util.find_spec(library) is not None:
                return library
        except (ImportError, ValueError):
            continue
    raise ImportError(
        f"{needed_by}({argument}='bar') draws its bar with tqdm or rich, and neither can be imported; "
        "install one (pip install tqdm) or pass a callable progress(done, total) instead"
    )


def _tqdm_bar(total: int | None, unit: _Unit, description: str) -> tuple[_Sink, Callable[[], None]]:
    tqdm: Any = import_optional("tqdm", needed_by="a progress bar", install_hint="pip install tqdm").tqdm
    # Decimal units (MB, MB/s), as rich's transfer speed shows them.
    bar = tqdm(
        total=total,
        desc=description,
        unit="B" if unit == "bytes" else " rows",
        unit_scale=True,
        unit_divisor=1000,
        leave=True,
    )

    def show(done: int, total: int | None) -> None:
        if total is not None and bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    return show, bar.close


def _rich_bar(total: int | None, unit: _Unit, description: str) -> tuple[_Sink, Callable[[], None]]:
    hint = "pip install rich"
    console = import_optional("rich.console", needed_by="a progress bar", install_hint=hint)
    progress = import_optional("rich.progress", needed_by="a progress bar", install_hint=hint)
    if unit == "bytes":
        amount = [progress.DownloadColumn(), progress.TransferSpeedColumn()]
    else:
        amount = [progress.MofNCompleteColumn(), progress.TextColumn("rows")]
    bar = progress.Progress(
        progress.TextColumn("{task.description}"),
        progress.BarColumn(),
        *amount,
        progress.TimeRemainingColumn(),
        console=console.Console(stderr=True),
    )
    bar.start()
    task = bar.add_task(description, total=total)

    def show(done: int, total: int | None) -> None:
        bar.update(task, completed=done, total=total)

    return show, bar.stop
