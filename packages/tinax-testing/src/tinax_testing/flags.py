"""absl flags marked parsed for the length of a test, as grain's worker processes need."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["absl_flags_parsed"]


@contextlib.contextmanager
def absl_flags_parsed() -> Iterator[None]:
    """Marks absl's flags parsed inside the block.

    Grain refuses to start worker processes until absl's flags are parsed,
    which ``absl.app.run`` does in an application and nothing does under
    pytest. Flags that were parsed before the block stay parsed after it.

    Yields:
        Nothing; the flags are parsed while the block runs.
    """
    # Imported here so that importing the harness never imports absl: members
    # whose tests run without grain (or absl) import the harness too.
    from absl import flags

    was_parsed = flags.FLAGS.is_parsed()
    if not was_parsed:
        flags.FLAGS.mark_as_parsed()
    try:
        yield
    finally:
        if not was_parsed:
            flags.FLAGS.unparse_flags()
