"""The loggers of the tinax distributions, and the one line each long operation logs when done.

Every area logs through ``logging.getLogger("tinax.<area>")``
(``tinax.weights``, ``tinax.checkpointing``, ``tinax.data``, ...), and the
``"tinax"`` logger carries a :class:`logging.NullHandler`, as libraries do:
nothing is shown unless the application configures logging, for example
``logging.basicConfig(level=logging.INFO)`` or
``logging.getLogger("tinax").setLevel(logging.INFO)`` with a handler of its own.

Long operations (saves, loads, exports, record writes, deletions) log one
INFO line when they succeed, in one shape::

    saved 3 tensors to '/run/model.safetensors': 536870912 bytes (512.0 MiB) in 1.204 s, 425.2 MiB/s

and attach the same numbers to the record for structured handlers:
``tinax_action``, ``tinax_path``, ``tinax_bytes``, ``tinax_rows`` (None where
not counted) and ``tinax_seconds``. A failed operation logs nothing: its
exception says what went wrong. Nothing is logged when a module is imported.
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
    """Returns the logger of one tinax area, ``tinax.<area>``.

    Args:
      area: The area, such as ``"weights"`` or ``"checkpointing"``.

    Returns:
      ``logging.getLogger(f"tinax.{area}")``.
    """
    return logging.getLogger(f"{LIBRARY_LOGGER}.{area}")


def format_bytes(nbytes: int) -> str:
    """Writes a byte count for people: ``"512.0 MiB"``, ``"12 bytes"``.

    Args:
      nbytes: A non-negative number of bytes.

    Returns:
      The count in the largest binary unit that keeps it at least 1.
    """
    if nbytes < 1024:
        return f"{nbytes} bytes"
    value = float(nbytes)
    unit = 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    return f"{value:.1f} {_UNITS[unit]}"


def tree_nbytes(path: str | os.PathLike[str]) -> int:
    """Returns the bytes of the regular files in a folder and its subfolders (or of one file).

    Symbolic links are not followed, and files that vanish or cannot be
    read while counting are left out, so the count never raises.

    Args:
      path: A file or folder.

    Returns:
      The sum of the sizes of the regular files found; 0 if there are none.
    """
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
    """Times one long operation and logs its INFO line once it has succeeded.

    Create it when the operation starts and call :meth:`done` when it
    succeeded; an operation that fails simply never calls it.

    Args:
      logger: The area's logger, from :func:`get_logger`.
      action: What was done, in the past tense, such as ``"saved"``.
      what: What was acted on, with the word that leads to ``target``, such
        as ``"3 tensors to"``; may be empty.
      target: The file or folder.
    """

    def __init__(self, logger: logging.Logger, action: str, what: str, target: str | os.PathLike[str]) -> None:
        self.logger = logger
        self.action = action
        self.what = what
        self.target = os.fspath(target)
        self.started = time.perf_counter()

    @property
    def enabled(self) -> bool:
        """Whether the INFO line would be shown; costly counts can be skipped when it would not."""
        return self.logger.isEnabledFor(logging.INFO)

    def seconds(self) -> float:
        """Seconds since the operation started."""
        return time.perf_counter() - self.started

    def done(self, *, nbytes: int | None = None, rows: int | None = None, detail: str = "") -> None:
        """Logs that the operation succeeded, with its amount and duration.

        Args:
          nbytes: The bytes written, read or deleted, or None if not counted.
          rows: The rows or records written, or None if not counted.
          detail: More words for the end of the line, such as ``"2 files"``.
        """
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
