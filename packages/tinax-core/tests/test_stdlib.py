"""Behaviour of tinax.stdlib: explicit-argv configuration and isolated stream loggers."""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import subprocess
import sys
import types
from dataclasses import dataclass

import numpy as np
import pytest

import tinax.stdlib as stdlib_api
from tinax.stdlib import make_stream_logger, parse_config
from tinax_testing import import_side_effects


@dataclass(frozen=True)
class RunConfig:
    steps: int
    label: str


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainer")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--label", default="run")
    parser.add_argument("--tags", nargs="*", default=[])
    return parser


def to_config(values):
    return RunConfig(steps=values["steps"], label=values["label"])


def test_public_names():
    assert sorted(stdlib_api.__all__) == ["make_stream_logger", "parse_config"]


def test_import_is_inert_and_does_not_import_jax():
    assert import_side_effects("tinax.stdlib") == {"backends_initialized": False, "integrations": []}
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST")}
    probe = "import json, sys, tinax.stdlib; print(json.dumps('jax' in sys.modules))"
    completed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=environment, timeout=120, check=True
    )
    assert json.loads(completed.stdout) is False


# parse_config ---------------------------------------------------------------------


def test_parse_config_builds_the_factory_result_from_explicit_arguments():
    assert parse_config(build_parser(), ["--steps", "4", "--label", "warmup"], to_config) == RunConfig(4, "warmup")


def test_parse_config_accepts_any_sequence_of_str():
    assert parse_config(build_parser(), ("--steps", "2"), to_config) == RunConfig(2, "run")
    assert parse_config(build_parser(), [], to_config) == RunConfig(1, "run")


def test_parse_config_never_reads_sys_argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["trainer", "--steps", "99"])
    assert parse_config(build_parser(), [], to_config) == RunConfig(1, "run")


def test_the_factory_gets_a_read_only_mapping_of_every_destination():
    seen = []

    def factory(values):
        seen.append(values)
        with pytest.raises(TypeError):
            values["extra"] = True
        return dict(values)

    result = parse_config(build_parser(), ["--tags", "a", "b"], factory)

    assert isinstance(seen[0], types.MappingProxyType)
    assert result == {"steps": 1, "label": "run", "tags": ["a", "b"]}


def test_mutable_values_stay_the_callers():
    # The mapping is shallow: a list that argparse built is handed over as is.
    tags = parse_config(build_parser(), ["--tags", "a"], lambda values: values["tags"])
    tags.append("b")
    assert tags == ["a", "b"]


def test_subcommand_destinations_are_included():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dry-run", action="store_true")
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("train").add_argument("--epochs", type=int, default=1)

    values = parse_config(parser, ["train", "--epochs", "3"], dict)

    assert values == {"dry_run": False, "command": "train", "epochs": 3}


def test_parse_config_keeps_argparse_usage_errors(capsys):
    parser = argparse.ArgumentParser(prog="trainer")
    parser.add_argument("--steps", type=int, required=True)

    with pytest.raises(SystemExit) as missing:
        parse_config(parser, [], to_config)
    with pytest.raises(SystemExit) as unknown:
        parse_config(parser, ["--steps", "1", "--bogus"], to_config)
    with pytest.raises(SystemExit) as help_requested:
        parse_config(parser, ["--help"], to_config)

    assert (missing.value.code, unknown.value.code, help_requested.value.code) == (2, 2, 0)
    assert "usage: trainer" in capsys.readouterr().err


def test_parse_config_keeps_argument_errors_of_parsers_that_do_not_exit():
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--steps", type=int)
    with pytest.raises(argparse.ArgumentError):
        parse_config(parser, ["--steps", "many"], to_config)


def test_factory_errors_propagate():
    def factory(_values):
        raise KeyError("missing")

    with pytest.raises(KeyError):
        parse_config(build_parser(), [], factory)


@pytest.mark.parametrize(
    "argv",
    ["--steps", b"--steps", None, object(), {"--steps"}, {"--steps": "1"}, (arg for arg in ["--steps"])],
    ids=["str", "bytes", "None", "object", "set", "dict", "generator"],
)
def test_argv_must_be_a_sequence(argv):
    with pytest.raises(TypeError, match="argv"):
        parse_config(build_parser(), argv, to_config)


@pytest.mark.parametrize("item", [1, b"--steps", None], ids=["int", "bytes", "None"])
def test_argv_items_must_be_str(item):
    with pytest.raises(TypeError, match=r"argv\[1\]"):
        parse_config(build_parser(), ["--label", item], to_config)


def test_parser_and_factory_are_checked_in_order():
    with pytest.raises(TypeError, match="parser"):
        parse_config(object(), [1], None)
    with pytest.raises(TypeError, match="argv"):
        parse_config(build_parser(), [1], None)
    with pytest.raises(TypeError, match="factory"):
        parse_config(build_parser(), [], None)


# make_stream_logger -----------------------------------------------------------------


def test_logger_writes_formatted_records_to_its_stream():
    stream = io.StringIO()
    logger = make_stream_logger("trainer", level=logging.INFO, stream=stream, format_string="%(name)s %(message)s")

    logger.debug("hidden")
    logger.info("step=%d", 3)
    logger.warning("late")

    assert stream.getvalue() == "trainer step=3\ntrainer late\n"
    assert logger.name == "trainer"
    assert logger.level == logging.INFO


def test_logger_is_isolated_from_the_root_and_the_registry():
    root = logging.getLogger()
    root_state = (tuple(root.handlers), root.level)
    registered = set(logging.Logger.manager.loggerDict)

    logger = make_stream_logger("tinax.isolated", level=logging.INFO, stream=io.StringIO(), format_string="%(message)s")

    assert set(logging.Logger.manager.loggerDict) == registered
    assert not logger.propagate
    assert len(logger.handlers) == 1
    assert logging.getLogger("tinax.isolated") is not logger
    assert (tuple(root.handlers), root.level) == root_state


def test_loggers_with_one_name_are_independent():
    first_stream, second_stream = io.StringIO(), io.StringIO()
    first = make_stream_logger("same", level=logging.INFO, stream=first_stream, format_string="1 %(message)s")
    second = make_stream_logger("same", level=logging.INFO, stream=second_stream, format_string="2 %(message)s")

    first.info("a")
    second.info("b")

    assert first is not second
    assert (len(first.handlers), len(second.handlers)) == (1, 1)
    assert (first_stream.getvalue(), second_stream.getvalue()) == ("1 a\n", "2 b\n")


def test_logger_formats_exceptions():
    stream = io.StringIO()
    logger = make_stream_logger("errors", level=logging.ERROR, stream=stream, format_string="%(message)s")
    try:
        raise ZeroDivisionError("boom")
    except ZeroDivisionError:
        logger.exception("failed")
    assert stream.getvalue().startswith("failed\nTraceback")
    assert "ZeroDivisionError: boom" in stream.getvalue()


def test_any_object_with_write_and_flush_is_a_stream():
    class Collector:
        def __init__(self) -> None:
            self.parts: list[str] = []

        def write(self, text: str) -> None:
            self.parts.append(text)

        def flush(self) -> None:
            pass

    collector = Collector()
    make_stream_logger("duck", level=logging.INFO, stream=collector, format_string="%(message)s").info("hi")
    assert "".join(collector.parts) == "hi\n"


def test_level_accepts_numpy_integers():
    logger = make_stream_logger("x", level=np.int64(logging.WARNING), stream=io.StringIO(), format_string="%(message)s")
    assert logger.level == logging.WARNING
    assert type(logger.level) is int


class WriteOnly:
    def write(self, text: str) -> None:
        pass


@pytest.mark.parametrize(
    ("arguments", "error", "name"),
    [
        ({"name": 1}, TypeError, "name"),
        ({"name": ""}, ValueError, "name"),
        ({"level": True}, TypeError, "level"),
        ({"level": "INFO"}, TypeError, "level"),
        ({"level": 10.0}, TypeError, "level"),
        ({"stream": None}, TypeError, "stream"),
        ({"stream": WriteOnly()}, TypeError, "stream"),
        ({"format_string": 1}, TypeError, "format_string"),
        ({"format_string": "{message}"}, ValueError, "format"),
        ({"format_string": "%(message"}, ValueError, "format"),
    ],
    ids=lambda value: repr(value) if not isinstance(value, dict) else ",".join(value),
)
def test_logger_validates_its_arguments(arguments, error, name):
    values = {"name": "x", "level": logging.INFO, "stream": io.StringIO(), "format_string": "%(message)s"}
    values.update(arguments)
    with pytest.raises(error, match=name):
        make_stream_logger(
            values["name"], level=values["level"], stream=values["stream"], format_string=values["format_string"]
        )


def test_logger_checks_name_then_level_then_stream_then_format():
    with pytest.raises(ValueError, match="name"):
        make_stream_logger("", level=True, stream=None, format_string=1)
    with pytest.raises(TypeError, match="level"):
        make_stream_logger("x", level=True, stream=None, format_string=1)
    with pytest.raises(TypeError, match="stream"):
        make_stream_logger("x", level=1, stream=None, format_string=1)
