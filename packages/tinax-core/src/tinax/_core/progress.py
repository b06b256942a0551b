"""Progress of long operations: one callback protocol, and bars drawn with tqdm or rich on request.

Every long tinax operation that reports progress takes one keyword-only
argument, ``progress``, of the type :data:`Progress`:

* ``None`` (the default): nothing is reported, and nothing is shown.
* A callable ``progress(done, total)``: called with two ints in the unit the
  function documents (bytes or rows). The first call is ``(0, total)``
  before any work; then ``done`` grows, at most about a thousand calls in
  all, and after success the last call is ``(total, total)``. ``total`` is
  None where the amount is not known in advance (records from a
  generator); the last call then gives ``(done, done)``. The callback runs
  in the calling thread; an exception it raises aborts the operation like
  any other error (so a callback can cancel a long write, which leaves
  nothing behind, as every tinax write is atomic).
* ``"bar"``: a progress bar on standard error, drawn with ``tqdm`` if it is
  installed, otherwise with ``rich``. If neither is installed, the call
  raises ImportError before any work starts.

In a multi-process run each process reports its own part (the bytes it
writes or reads).

Neither tqdm nor rich is imported until a bar is asked for and the operation
starts, so importing tinax stays inert.
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
    """A checked ``progress`` argument: no reporting, a callback, or a bar of one library.

    Attributes:
      callback: The caller's callable, or None.
      bar: ``"tqdm"`` or ``"rich"`` when a bar was asked for, else None.
    """

    callback: ProgressCallback | None = None
    bar: str | None = None

    @contextlib.contextmanager
    def reporting(self, total: int | None, *, unit: _Unit, description: str) -> Iterator[Reporter]:
        """Reports one operation's progress for the duration of the block.

        The first report, ``(0, total)``, is made on entry; the last,
        ``(total, total)``, when the block ends without an error. A bar is
        closed however the block ends.

        Args:
          total: The amount of work, in ``unit``, or None if not known.
          unit: ``"bytes"`` or ``"rows"``; it sets how a bar counts.
          description: Shown at the start of a bar, such as a file name.

        Yields:
          The :class:`Reporter` to tell how much more is done.
        """
        sink: _Sink | None = self.callback
        close: Callable[[], None] = _nothing
        if self.bar == "tqdm":
            sink, close = _tqdm_bar(total, unit, description)
        elif self.bar == "rich":
            sink, close = _rich_bar(total, unit, description)
        try:
            reporter = Reporter(sink, total)
            yield reporter
            reporter.finish()
        finally:
            close()


def require_progress(value: object, *, needed_by: str, argument: str = "progress") -> ProgressChoice:
    """Checks a ``progress`` argument before any work starts.

    Args:
      value: The argument: None, a callable, or ``"bar"``.
      needed_by: The public name of the function, for the error raised when
        no bar library is installed, such as
        ``"tinax.weights.save_sharded_safetensors"``.
      argument: The argument's name in messages.

    Returns:
      The checked choice.

    Raises:
      TypeError: If ``value`` is neither None, a str nor callable (a bool
        included).
      ValueError: If ``value`` is a str other than ``"bar"``.
      ImportError: If a bar is asked for and neither tqdm nor rich can be
        imported.
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
    """Counts the work done and passes it on to a callback or a bar, at most about :data:`MAX_CALLS` times.

    Args:
      sink: Called with ``(done, total)``; None counts only.
      total: The amount of work, or None if not known.
    """

    def __init__(self, sink: _Sink | None, total: int | None) -> None:
        self.done = 0
        self.total = total
        self._sink = sink
        self._step = 1 if total is None else max(1, -(-total // MAX_CALLS))
        self._reported = 0
        if sink is not None:
            sink(0, total)

    def advance(self, amount: int) -> None:
        """Adds ``amount`` to the work done, and reports it if enough has been done since the last report."""
        self.done += amount
        if self._sink is not None and (self.done - self._reported >= self._step or self.done == self.total):
            self._reported = self.done
            self._sink(self.done, self.total)

    def finish(self) -> None:
        """Makes the last report, ``(total, total)``, or ``(done, done)`` where the total was not known."""
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
    in_bytes = unit == "bytes"
    bar = tqdm(
        total=total,
        desc=description,
        unit="B" if in_bytes else " rows",
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
