"""Loggers that write to one stream and touch no global logging state."""

from __future__ import annotations

import logging
from typing import TextIO

from tinax._core import validation

__all__ = ["make_stream_logger"]


def make_stream_logger(name: str, *, level: int, stream: TextIO, format_string: str) -> logging.Logger:
    """Creates a logger that writes formatted records to ``stream`` and nowhere else.

    Built directly, not via ``logging.getLogger``: unregistered, non-propagating, with exactly one
    handler, so two calls with one name give independent loggers and the root logger is untouched.

    Args:
      name: The logger's name, as shown by ``%(name)s``; not empty.
      level: The logger's threshold, an ``int`` such as ``logging.INFO``.
      stream: Where records go; any object with callable ``write`` and ``flush``.
      format_string: A ``%``-style ``logging.Formatter`` format, e.g. ``"%(levelname)s %(message)s"``.

    Returns:
      The new ``logging.Logger``.

    Raises:
      TypeError: If ``name`` or ``format_string`` is not a ``str``, ``level`` not an int, or ``stream`` lacks ``write``.
      ValueError: If ``name`` is empty or ``format_string`` is not a valid ``%``-style format.

    Examples:
      >>> import io
      >>> import logging
      >>> from tinax.stdlib import make_stream_logger
      >>> stream = io.StringIO()
      >>> logger = make_stream_logger("train", level=logging.INFO, stream=stream, format_string="%(name)s: %(message)s")
      >>> logger.info("step %d", 10)
      >>> logger.debug("not written: below the level")
      >>> stream.getvalue().splitlines()
      ['train: step 10']
    """
    validation.require_str(name, "name")
    threshold = validation.require_int(level, "level")
    for method in ("write", "flush"):
        if not callable(getattr(stream, method, None)):
            validation.fail_type("stream", "a stream with callable write and flush methods", stream)
    validation.require_str(format_string, "format_string", allow_empty=True)
    formatter = logging.Formatter(format_string)  # Raises ValueError for a malformed format.
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    logger = logging.Logger(name, threshold)
    logger.propagate = False
    logger.addHandler(handler)
    return logger
