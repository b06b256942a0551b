"""The ``tinax`` console script: argument parsing, dispatch, output and exit codes.

Exit codes: 0 when the command succeeded and found nothing wrong, 1 when a
check found a problem (a damaged install or file, an incomplete checkpoint, a
kind no installed distribution reads), 2 for usage errors (bad arguments, a
path that does not exist). An error is one line on stderr; ``--debug`` adds
the traceback.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from tinax._core._command._registry import KINDS, detect_kind, find_inspector
from tinax._core._command._report import InspectOptions, Report

__all__ = ["main"]

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_USAGE = 2


class _UsageError(Exception):
    """An error in what the caller asked for (exit code 2)."""


class _ProblemError(Exception):
    """A problem found in what the command looked at (exit code 1)."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (and exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def _common_options(default: object) -> _Parser:
    # Accepted before and after the subcommand; the subcommand's parser must
    # not reset a flag given before it, hence SUPPRESS there.
    common = _Parser(add_help=False)
    common.add_argument(
        "--json", action="store_true", default=default, help="print one JSON document (schema: see the README)"
    )
    common.add_argument("--debug", action="store_true", default=default, help="print the traceback of an error")
    return common


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tinax",
        description="Describe the tinax installation, or inspect a file that tinax reads, without loading payloads.",
        parents=[_common_options(False)],
    )
    common = _common_options(argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    info = commands.add_parser(
        "info",
        parents=[common],
        help="installed tinax distributions and libraries, the platform, and an integrity check",
        description="List the installed tinax distributions, library versions and the platform, and check every "
        "tinax distribution's files against its RECORD. Exits 1 if a file is missing or changed.",
    )
    info.add_argument("--devices", action="store_true", help="also start JAX and list its devices and processes")
    inspect = commands.add_parser(
        "inspect",
        parents=[common],
        help="describe a weights file, record file, checkpoint or folder of step checkpoints",
        description="Describe PATH, whose kind is told from its content: "
        + ", ".join(description for description, _ in KINDS.values())
        + ". Only headers, footers and metadata are read.",
    )
    inspect.add_argument("path", metavar="PATH", help="the file or folder to describe")
    inspect.add_argument("--names", metavar="PATTERN", help="list only tensors or arrays whose name matches PATTERN")
    inspect.add_argument("--head", metavar="N", type=_non_negative, default=0, help="print the first N records")
    inspect.add_argument(
        "--max-bytes",
        metavar="N",
        type=_positive,
        default=InspectOptions.max_bytes,
        help="the largest msgpack file to decode (default: %(default)s)",
    )
    return parser


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command with ``argv`` (default: the process's arguments) and returns its exit code."""
    parser = _parser()
    arguments = parser.parse_args(argv)
    try:
        report = _run(arguments)
    except _UsageError as error:
        return _fail(arguments, f"tinax {arguments.command}: error: {error}", EXIT_USAGE)
    except _ProblemError as error:
        return _fail(arguments, f"tinax {arguments.command}: {error}", EXIT_PROBLEM)
    except (OSError, ValueError, TypeError, RuntimeError, ImportError) as error:
        return _fail(arguments, f"tinax {arguments.command}: {_one_line(error)}", EXIT_PROBLEM)
    except Exception as error:  # a reader's unexpected failure is still one line, not a traceback
        name = type(error).__name__
        message = f"tinax {arguments.command}: unexpected {name}: {_one_line(error)} (--debug shows where)"
        return _fail(arguments, message, EXIT_PROBLEM)
    if arguments.json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=False))
    else:
        print(report.to_text())
    return EXIT_OK if report.ok else EXIT_PROBLEM


def _run(arguments: argparse.Namespace) -> Report:
    if arguments.command == "info":
        from tinax._core._command._info import environment_report

        return environment_report(devices=arguments.devices)
    return _inspect(arguments)


def _inspect(arguments: argparse.Namespace) -> Report:
    path = pathlib.Path(arguments.path)
    if not path.exists():
        raise _UsageError(f"PATH {str(path)!r} does not exist")
    detected = detect_kind(path)
    if detected.kind is None:
        known = ", ".join(description for description, _ in KINDS.values())
        raise _ProblemError(f"cannot tell what {str(path)!r} is from its content; tinax inspects: {known}")
    description, distribution = KINDS[detected.kind]
    inspector = find_inspector(detected.kind)
    if inspector is None:
        raise _ProblemError(
            f"{str(path)!r} is {_article(description)} {description}; install {distribution} to inspect it "
            f"(python -m pip install {distribution})"
        )
    options = InspectOptions(names=arguments.names, head=arguments.head, max_bytes=arguments.max_bytes)
    report: Report = inspector(path, options)
    if report.bytes_read is not None:
        report.bytes_read += detected.bytes_read
    return report


def _article(noun: str) -> str:
    return "an" if noun[:1].lower() in "aeiou" else "a"


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__


def _fail(arguments: argparse.Namespace, message: str, code: int) -> int:
    if arguments.debug:
        traceback.print_exc()
    print(" ".join(message.split()), file=sys.stderr)
    return code


def console() -> None:
    """The console script's entry point."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader (``| head``, say) left early; that is no error of ours.
        sys.stdout = None
        code = EXIT_OK
    sys.exit(code)
