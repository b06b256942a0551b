"""Turning an explicit argument list into caller-owned configuration."""

from __future__ import annotations

import argparse
import functools
import types
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from tinax._core import validation

__all__ = ["parse_config"]

T = TypeVar("T")


def parse_config(
    parser: argparse.ArgumentParser,
    argv: Sequence[str],
    factory: Callable[[Mapping[str, object]], T],
) -> T:
    """Parses ``argv`` with ``parser`` and builds the configuration with ``factory``.

    ``sys.argv`` is never read: pass ``sys.argv[1:]`` (Abseil: ``argv[1:]``). ``factory`` gets a
    shallow read-only mapping of destination names to values (a list from ``nargs="*"`` stays
    mutable). argparse's error handling is kept: usage errors exit 2 via ``SystemExit`` (or raise
    ``argparse.ArgumentError`` with ``exit_on_error=False``), ``--help`` exits 0.

    Args:
      parser: The ``argparse.ArgumentParser`` that defines the arguments.
      argv: The arguments as a sequence of ``str`` (not a single ``str``).
      factory: Called once with the read-only mapping; its result is returned.

    Returns:
      What ``factory`` returned.

    Raises:
      TypeError: If ``parser`` is no ``ArgumentParser``, ``argv`` not a sequence of str, or ``factory`` not callable.
      SystemExit: From argparse, on a usage error or ``--help``.

    Examples:
      >>> import argparse
      >>> from tinax.stdlib import parse_config
      >>> parser = argparse.ArgumentParser()
      >>> _ = parser.add_argument("--steps", type=int, default=100)
      >>> _ = parser.add_argument("--name", default="run")
      >>> parse_config(parser, ["--steps", "5"], dict)
      {'steps': 5, 'name': 'run'}
    """
    validation.require_instance(parser, "parser", argparse.ArgumentParser, "an argparse.ArgumentParser")
    arguments = validation.require_sequence(
        argv,
        "argv",
        item_check=functools.partial(validation.require_str, allow_empty=True),
        description="a sequence of str arguments",
    )
    validation.require_callable(factory, "factory")
    namespace = parser.parse_args(list(arguments))
    return factory(types.MappingProxyType(dict(vars(namespace))))
