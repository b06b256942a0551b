"""The ``tinax`` console script: argument parsing, dispatch, output and exit codes.

Exit codes 0 (ok), 1 (a check found a problem), 2 (usage); with ``--json`` stdout always
holds one schema document, on errors too. See docs/guide/command-line.md, "Exit status and JSON".
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import itertools
import json
import pathlib
import sys
import traceback
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any, NoReturn

from tinax._core import storage
from tinax._core._command._registry import Inspector, detect, detect_object, installed, run
from tinax._core._command._report import InspectOptions, Report, error_document, schema_text

__all__ = ["main"]

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_USAGE = 2

_COMMANDS = ("info", "inspect")


class _CommandError(Exception):
    """Why the command could not run: an ``error.type`` of the schema and the exit code."""

    def __init__(
        self, message: str, error_type: str = "usage", code: int = EXIT_USAGE, *, program: str | None = None
    ) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.code = code
        # The parser that refused the arguments (``tinax`` or ``tinax inspect``), which starts the line.
        self.program = program


@dataclasses.dataclass
class _Context:
    """What is known of the run when it fails: the subcommand, the PATH, the kind told from it."""

    command: str | None = None
    path: str | None = None
    kind: str | None = None
    json: bool = False
    debug: bool = False


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (and exit code 2)."""

    def error(self, message: str) -> NoReturn:
        message = f"error: {' '.join(message.split())} (see {self.prog} --help)"
        raise _CommandError(message, program=self.prog)


class _PrintAction(argparse.Action):
    """An option that prints ``text()`` and exits 0 whatever else is given (``--version``, ``--schema``)."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, text: Callable[[], str], **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)
        self.text = text

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> NoReturn:
        print(self.text())
        parser.exit(EXIT_OK)


def _versions(*, as_json: bool) -> str:
    """Every installed tinax distribution with its version, on one line (or as a document)."""
    from tinax._core._command._integrity import tinax_distributions

    rows = [{"name": item.metadata["Name"] or "?", "version": item.version} for item in tinax_distributions()]
    if not as_json:
        return ", ".join(f"{row['name']} {row['version']}" for row in rows) or "no tinax distribution is installed"
    report = Report("version", "versions")
    report.add_table("tinax distributions", ("name", "version"), rows)
    return _json_text(report.to_json())


def _common_options(default: object) -> _Parser:
    # Accepted before and after the subcommand; the subcommand's parser must
    # not reset a flag given before it, hence SUPPRESS there.
    common = _Parser(add_help=False)
    common.add_argument(
        "--json",
        action="store_true",
        default=default,
        help="print one JSON document, on errors too (its JSON Schema: tinax --schema)",
    )
    common.add_argument("--debug", action="store_true", default=default, help="print the traceback of an error")
    return common


def _parser(*, as_json: bool = False) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tinax",
        description="Describe the tinax installation, or inspect a file that tinax reads, without loading payloads.",
        parents=[_common_options(False)],
    )
    parser.add_argument(
        "--version",
        action=_PrintAction,
        # Told from the arguments before parsing: --json may come after --version.
        text=lambda: _versions(as_json=as_json),
        help="print every installed tinax distribution's version and exit",
    )
    parser.add_argument(
        "--schema",
        action=_PrintAction,
        text=lambda: schema_text().removesuffix("\n"),
        help="print the JSON Schema of the --json documents and exit",
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
        help="describe a file or folder that an installed tinax distribution reads",
        description="Describe PATH, whose kind the inspectors of the installed tinax distributions tell from its "
        "content. Only headers, footers and metadata are read. A folder or a glob pattern of record files "
        "is described as the one dataset the readers make of them.",
    )
    inspect.add_argument("path", metavar="PATH", help="the file, folder or glob pattern to describe")
    inspect.add_argument("--names", metavar="PATTERN", help="list only tensors or arrays whose name matches PATTERN")
    inspect.add_argument("--head", metavar="N", type=_at_least(0), default=0, help="print the first N records")
    inspect.add_argument(
        "--max-bytes",
        metavar="N",
        type=_at_least(1),
        default=InspectOptions.max_bytes,
        help="the largest file to decode whole, for kinds without an index (default: %(default)s)",
    )
    return parser


def _at_least(minimum: int) -> Callable[[str], int]:
    """Argparse type for an integer of at least ``minimum`` (0 or 1)."""
    wanted = ("non-negative", "positive")[minimum]

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = -1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a {wanted} integer, got {text!r}")
        return value

    return parse


def _wants_json(argv: Sequence[str]) -> bool:
    """Whether ``argv`` asks for JSON, told before parsing (argparse accepts ``--js`` for ``--json``)."""
    before_separator = itertools.takewhile("--".__ne__, argv)
    return any(len(argument) > 3 and "--json".startswith(argument) for argument in before_separator)


def _context(argv: Sequence[str]) -> _Context:
    """What the arguments say before parsing: the subcommand, and whether JSON and tracebacks are wanted."""
    command = next((argument for argument in argv if argument in _COMMANDS), None)
    debug = any(len(argument) > 3 and "--debug".startswith(argument) for argument in argv)
    return _Context(command=command, json=_wants_json(argv), debug=debug)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command with ``argv`` (default: the process's arguments) and returns its exit code."""
    arguments_given = list(sys.argv[1:] if argv is None else argv)
    context = _context(arguments_given)
    try:
        arguments = _parser(as_json=context.json).parse_args(arguments_given)
        context.json = arguments.json
        context.debug = arguments.debug
        report = _run(arguments, context)
        output = _json_text(report.to_json()) if context.json else report.to_text()
    except _CommandError as failure:
        return _fail(context, str(failure), failure.error_type, failure.code, failure)
    except ImportError as error:
        return _fail(context, _one_line(error), "missing_dependency", EXIT_PROBLEM, error)
    except (OSError, ValueError, TypeError, RuntimeError) as error:
        return _fail(context, _one_line(error), "unreadable", EXIT_PROBLEM, error)
    except Exception as error:  # a reader's unexpected failure is still one line, not a traceback
        message = f"unexpected {type(error).__name__}: {_one_line(error)} (--debug shows where)"
        return _fail(context, message, "unexpected", EXIT_PROBLEM, error)
    print(output)
    return EXIT_OK if report.ok else EXIT_PROBLEM


def _json_text(document: dict[str, Any]) -> str:
    """The document as strict JSON (no NaN), keys in the schema's order."""
    return json.dumps(document, indent=2, allow_nan=False)


def _run(arguments: argparse.Namespace, context: _Context) -> Report:
    if arguments.command == "info":
        from tinax._core._command._info import environment_report

        return environment_report(devices=arguments.devices)
    return _inspect(arguments, context)


def _inspect(arguments: argparse.Namespace, context: _Context) -> Report:
    context.path = arguments.path
    try:
        remote = storage.as_remote(arguments.path, "PATH")
    except ValueError as error:
        raise _CommandError(f"error: {error}") from error
    if remote is None:
        target: pathlib.Path | str = pathlib.Path(arguments.path)
        inspectors, kind, bytes_read = _detect_local(arguments.path)
    else:
        target = remote.url
        inspectors, kind, bytes_read = _detect_in_bucket(remote)
    if kind is None:
        raise _unknown_kind(str(target), inspectors)
    context.kind = kind
    options = InspectOptions(names=arguments.names, head=arguments.head, max_bytes=arguments.max_bytes)
    report = run(inspectors[kind], target, options)
    if report.bytes_read is not None:
        report.bytes_read += bytes_read
    return report


def _detect_local(text: str) -> tuple[dict[str, Inspector], str | None, int]:
    """The inspectors, the kind of the path ``text`` and the bytes read to tell it."""
    path = pathlib.Path(text)
    # A glob pattern stands for the files it matches, told by the first of them (see Inspector.patterns).
    matches = [] if path.exists() else sorted(glob.glob(text, recursive=True))
    if not path.exists() and not matches:
        raise _CommandError(f"error: PATH {str(path)!r} does not exist")
    inspectors = _require_inspectors(str(path))
    kind, bytes_read = detect(pathlib.Path(matches[0]) if matches else path, inspectors)
    if matches and kind is not None and not inspectors[kind].patterns:
        raise _CommandError(
            f"error: PATH {str(path)!r} does not exist, and {inspectors[kind].description}s are not described "
            "by a glob pattern: give one file"
        )
    return inspectors, kind, bytes_read


def _detect_in_bucket(location: storage.RemotePath) -> tuple[dict[str, Inspector], str | None, int]:
    """Like :func:`_detect_local` for an object, a prefix or a glob pattern in a bucket, read with ranged GETs."""
    inspectors = _require_inspectors(location.url)
    # The `tinax` distribution brings both stores' clients.
    fs = storage.filesystem(location, distribution="tinax", needed_by="tinax inspect", install_hint="pip install tinax")
    fs.invalidate_cache()
    pattern = any(character in location.key for character in "*?[")
    if not pattern and fs.isfile(location.fs_path):
        return inspectors, *_detect_object(fs, location, inspectors)
    kind, bytes_read = None, 0
    if not pattern and fs.isdir(location.fs_path):
        kind = _detect_remote_folder(location, inspectors)
    if kind is None:
        first = _first_object(fs, location, pattern=pattern)
        kind, bytes_read = _detect_object(fs, first, inspectors)
        if kind is not None and not inspectors[kind].patterns:
            raise _CommandError(
                f"error: PATH {location.url!r} is not an object, and {inspectors[kind].description}s are not "
                "described by a prefix or pattern: give one object"
            )
    return inspectors, kind, bytes_read


def _detect_object(fs: Any, location: storage.RemotePath, inspectors: dict[str, Inspector]) -> tuple[str | None, int]:
    with storage.open_to_read(fs, location, kind="object") as (handle, size):
        return detect_object(handle, size, pathlib.Path(location.name), inspectors)


def _detect_remote_folder(location: storage.RemotePath, inspectors: dict[str, Inspector]) -> str | None:
    """The folder kinds (checkpoints) told through ``etils.epath``, which Orbax installs; None without it."""
    try:
        from etils import epath  # type: ignore[import-untyped]
    except ImportError:
        return None
    return detect_object(None, None, epath.Path(location.url), inspectors)[0]


def _first_object(fs: Any, location: storage.RemotePath, *, pattern: bool) -> storage.RemotePath:
    """The first object a dataset reader would read under a prefix or pattern (hidden ``.``/``_`` names skipped)."""
    found = fs.glob(location.fs_path) if pattern else fs.find(location.fs_path)
    prefix = location.fs_path.rsplit("/", 1)[0] if pattern else location.fs_path
    names = sorted(
        name
        for name in found
        if not any(part.startswith((".", "_")) for part in name[len(prefix) :].split("/") if part) and fs.isfile(name)
    )
    if not names:
        raise _CommandError(f"error: PATH {location.url!r} does not exist")
    bucket, _, key = names[0].partition("/")
    return storage.RemotePath(location.scheme, bucket, key)


def _require_inspectors(path: str) -> dict[str, Inspector]:
    inspectors = installed()
    if not inspectors:
        raise _CommandError(
            f"no installed tinax distribution inspects files such as {path!r}; "
            f"{_install()} installs every tinax distribution with its inspectors",
            "missing_inspector",
            EXIT_PROBLEM,
        )
    return inspectors


def _unknown_kind(path: str, inspectors: dict[str, Inspector]) -> _CommandError:
    known = ", ".join(inspectors[name].description for name in sorted(inspectors))
    return _CommandError(
        f"cannot tell what {path!r} is from its content; the installed tinax distributions inspect: {known}"
        + ("" if _installed("tinax") else f"; {_install()} adds those of every tinax distribution"),
        "unknown_kind",
        EXIT_PROBLEM,
    )


def _installed(name: str) -> metadata.Distribution | None:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def _install() -> str:
    """The command installing the ``tinax`` distribution, with the tool that installed tinax-core."""
    from tinax._core._command._integrity import install_command

    return install_command(["tinax"], _installed("tinax-core"))


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__


def _fail(context: _Context, message: str, error_type: str, code: int, error: BaseException) -> int:
    """Prints one error line on stderr (after the traceback with ``--debug``), the JSON document, returns ``code``."""
    if context.debug and error_type != "usage":
        traceback.print_exc()
    message = " ".join(message.split())
    prefix = "tinax" if context.command is None else f"tinax {context.command}"
    if isinstance(error, _CommandError) and error.program is not None:
        prefix = error.program
    print(f"{prefix}: {message}", file=sys.stderr)
    if context.json:
        document = error_document(
            context.command,
            error_type=error_type,
            message=message.removeprefix("error: "),
            exit_code=code,
            exception=None if isinstance(error, _CommandError) else error,
            kind=context.kind,
            path=context.path,
        )
        print(_json_text(document))
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
