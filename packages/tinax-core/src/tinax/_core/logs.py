"""The loggers of the tinax distributions, and the one line each long operation logs when done.

Areas log to ``tinax.<area>``; the ``tinax`` logger has a NullHandler. A successful long
operation logs one INFO line plus ``tinax_*`` record attributes; failures log nothing.
See docs/guide/logging.md.
"""

from __future__ import annotations

import logging
import os
import time

__all__ = ["LIBRARY_LOGGER", "Operation", "format_bytes", "get_logger", "tree_nbytes"]

#: The parent of every tinax logger; it carries the library's NullHandler.
LIBRARY_LOGGER = "tinax"

_library_logger = logging.getLogger(LIBRARY_LOGGER)
if not any(isinstance(handler, logging.NullHandler) for handler in _library_logger.handlers):
    _library_logger.addHandler(logging.NullHandler())

_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB")


def get_logger(area: str) -> logging.Logger:
    """The logger of one tinax area, ``tinax.<area>``."""
    return logging.getLogger(f"{LIBRARY_LOGGER}.{area}")


def format_bytes(nbytes: int) -> str:
    """A byte count in the largest binary unit keeping it >= 1: ``"512.0 MiB"``, ``"12 bytes"``."""
    if nbytes < 1024:
        return f"{nbytes} bytes"
    value = float(nbytes)
    unit = 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    return f"{value:.1f} {_UNITS[unit]}"


def tree_nbytes(path: str | os.PathLike[str]) -> int:
    """Bytes of the regular files under a folder (or of one file); never follows links and never raises."""
    total = 0
    pending = [os.fspath(path)]
    while pending:
        current = pending.pop()
        try:
            if not os.path.isdir(current) or os.path.islink(current):
                total += os.stat(current, follow_symlinks=False).st_size if os.path.isfile(current) else 0
                continue
            with os.scandir(current) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return total


class Operation:
    """Times one long operation; :meth:`done` logs its INFO line on success (failures never call it).

    ``what`` leads to ``target``, e.g. ``action="saved", what="3 tensors to"``; it may be empty.
    """

    def __init__(self, logger: logging.Logger, action: str, what: str, target: str | os.PathLike[str]) -> None:
        self.logger = logger
        self.action = action
        self.what = what
        self.target = os.fspath(target)
        self.started = time.perf_counter()

    @property
    def enabled(self) -> bool:
        """Whether the INFO line would show; costly counts can be skipped otherwise."""
        return self.logger.isEnabledFor(logging.INFO)

    def seconds(self) -> float:
        """Seconds since the operation started."""
        return time.perf_counter() - self.started

    def done(self, *, nbytes: int | None = None, rows: int | None = None, detail: str = "") -> None:
        """Logs success with ``nbytes`` and ``rows`` (None if not counted), duration and ``detail``."""
        if not self.enabled:
            return
        seconds = self.seconds()
        amounts = []
        if rows is not None:
            amounts.append(f"{rows} {'row' if rows == 1 else 'rows'}")
        if nbytes is not None:
            amounts.append(f"{nbytes} bytes ({format_bytes(nbytes)})" if nbytes >= 1024 else f"{nbytes} bytes")
        rate = ""
        if seconds > 0 and nbytes:
            rate = f", {format_bytes(round(nbytes / seconds))}/s"
        elif seconds > 0 and rows:
            rate = f", {rows / seconds:.0f} rows/s"
        what = f"{self.what} " if self.what else ""
        extra = f"; {detail}" if detail else ""
        self.logger.info(
            "%s %s%r: %s in %.3f s%s%s",
            self.action,
            what,
            self.target,
            ", ".join(amounts) or "done",
            seconds,
            rate,
            extra,
            extra={
                "tinax_action": self.action,
                "tinax_path": self.target,
                "tinax_bytes": nbytes,
                "tinax_rows": rows,
                "tinax_seconds": seconds,
            },
            stacklevel=2,
        )
