"""Turning an explicit argument list into caller-owned configuration."""

from __future__ import annotations

import argparse
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

    ``sys.argv`` is never read: ``argv`` excludes the program name, so an
    entry point passes ``sys.argv[1:]`` (an Abseil ``main(argv)`` passes
    ``argv[1:]``). ``factory`` receives the parsed values as a read-only
    mapping from destination name to value; it is a shallow view, so a
    mutable value such as a list from ``nargs="*"`` stays the caller's.
    argparse's own error handling is kept: a usage error exits with status 2
    through ``SystemExit`` (or raises ``argparse.ArgumentError`` for a parser
    built with ``exit_on_error=False``), and ``--help`` exits with status 0.

    Args:
      parser: The ``argparse.ArgumentParser`` that defines the arguments.
      argv: The arguments as a sequence of ``str`` (not a single ``str``).
      factory: Called once with the read-only mapping; its result is
        returned.

    Returns:
      What ``factory`` returned.

    Raises:
      TypeError: If ``parser`` is not an ``argparse.ArgumentParser``,
        ``argv`` is not a sequence of ``str``, or ``factory`` is not callable.
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
        argv, "argv", item_check=_require_argument, description="a sequence of str arguments"
    )
    validation.require_callable(factory, "factory")
    namespace = parser.parse_args(list(arguments))
    return factory(types.MappingProxyType(dict(vars(namespace))))


def _require_argument(value: object, name: str) -> str:
    if not isinstance(value, str):
        validation.fail_type(name, "a str", value)
    return value
