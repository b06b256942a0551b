"""Differential cases of ``tinax.stdlib``."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np
from diff_common import Cases, rng, scaled

import tinax.stdlib as ts

M = "tinax.stdlib"


def _parser(kind: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="train", exit_on_error=kind != "no_exit")
    if kind in ("full", "no_exit"):
        parser.add_argument("dataset")
        parser.add_argument("--steps", type=int, default=10)
        parser.add_argument("--lr", type=float, default=1e-3)
        parser.add_argument("--mode", choices=["fast", "exact"], default="fast")
        parser.add_argument("--verbose", action="store_true")
        parser.add_argument("--tags", nargs="*", default=[])
    elif kind == "subcommands":
        commands = parser.add_subparsers(dest="command", required=True)
        train = commands.add_parser("train")
        train.add_argument("--epochs", type=int, default=1)
        commands.add_parser("eval")
    elif kind == "empty":
        pass
    return parser


@dataclasses.dataclass(frozen=True)
class _Config:
    dataset: str
    steps: int
    lr: float
    mode: str
    verbose: bool
    tags: list[str]


def _parse(parser_kind: str, argv: Any, factory: Any) -> Any:
    seen: list[Any] = []

    def recording(values: Any) -> Any:
        seen.append({"type": type(values), "items": dict(values), "read_only": _read_only(values)})
        return factory(values)

    out, err = io.StringIO(), io.StringIO()
    result: Any
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            result = ts.parse_config(_parser(parser_kind), argv, recording if callable(factory) else factory)
        except SystemExit as exit_:
            result = {"system_exit": exit_.code}
    return {"result": result, "factory_saw": seen, "stdout": out.getvalue(), "stderr": err.getvalue()}


def _read_only(values: Any) -> Any:
    try:
        values["new"] = 1
    except TypeError as error:
        return type(error).__name__
    return "writable"


def _parse_config(cases: Cases) -> None:
    function = f"{M}.parse_config"
    argvs: dict[str, Any] = {
        "minimal": ["data.parquet"],
        "full": ["d", "--steps", "5", "--lr", "0.5", "--mode", "exact", "--verbose", "--tags", "a", "b"],
        "tuple": ("d", "--steps", "3"),
        "empty": [],
        "bad_int": ["d", "--steps", "x"],
        "bad_choice": ["d", "--mode", "slow"],
        "unknown": ["d", "--nope"],
        "help": ["--help"],
        "string": "d --steps 3",
        "bytes": b"d",
        "non_string_item": ["d", 3],
        "path_item": ["d", Path("x")],
        "generator": (item for item in ["d"]),
        "none": None,
        "np_str_item": ["d", np.str_("--verbose")],
        "equals": ["d", "--steps=7"],
        "dash_dash": ["--", "-d"],
    }
    factories: dict[str, Any] = {
        "dict": dict,
        "identity": lambda values: values,
        "dataclass": lambda values: _Config(**values),
        "not_callable": 3,
    }
    for name, argv in argvs.items():
        cases.add(function, f"argv-{name}", lambda _, a=argv: _parse("full", a, dict))
    for name, factory in factories.items():
        cases.add(function, f"factory-{name}", lambda _, f=factory: _parse("full", ["d"], f))
    cases.add(function, "factory-raises", lambda _: _parse("full", ["d"], lambda values: values["missing"]))
    for kind, argv in {
        "subcommands": ["train", "--epochs", "2"],
        "subcommands-missing": [],
        "empty": [],
        "empty-extra": ["x"],
        "no_exit": ["d", "--steps", "x"],
    }.items():
        cases.add(function, f"parser-{kind}", lambda _, k=kind, a=argv: _parse(k.split("-")[0], a, dict))
    not_parsers = {"none": None, "namespace": argparse.Namespace(), "dict": {}, "string": "parser"}
    for name, parser in not_parsers.items():
        cases.add(function, f"parser-not-{name}", lambda _, p=parser: ts.parse_config(p, [], dict))
    r = rng(function)
    for _ in range(scaled(12)):
        argv = ["ds"]
        if r.random() < 0.5:
            argv += ["--steps", str(r.randint(-3, 100))]
        if r.random() < 0.5:
            argv += ["--lr", repr(r.uniform(-1, 1))]
        if r.random() < 0.3:
            argv += ["--verbose"]
        if r.random() < 0.3:
            argv += ["--tags", *[f"t{index}" for index in range(r.randint(0, 3))]]
        cases.add(function, "random", lambda _, a=argv: _parse("full", a, lambda values: _Config(**values)))


class _NoFlush:
    def write(self, text: str) -> int:
        return len(text)


def _logger(cases: Cases) -> None:
    function = f"{M}.make_stream_logger"

    def make(name: Any, level: Any, stream: Any, format_string: Any) -> Any:
        logger = ts.make_stream_logger(name, level=level, stream=stream, format_string=format_string)
        logger.debug("debug %s", 1)
        logger.info("info %s", "two")
        logger.warning("warning")
        logger.error("error %d%%", 3)
        return {
            "logger": logger,
            "text": stream.getvalue() if isinstance(stream, io.StringIO) else None,
            "registry_has_it": logging.getLogger(name) is logger if isinstance(name, str) and name else None,
            "root_handlers": len(logging.getLogger().handlers),
        }

    names: dict[str, Any] = {
        "plain": "app",
        "dotted": "app.train",
        "root": "root",
        "empty": "",
        "none": None,
        "int": 1,
        "unicode": "läufer",
        "spaces": "  ",
    }
    for label_, name in names.items():
        cases.add(
            function, f"name-{label_}", lambda _, n=name: make(n, logging.INFO, io.StringIO(), "%(name)s:%(message)s")
        )
    levels: dict[str, Any] = {
        "debug": logging.DEBUG,
        "zero": 0,
        "fifteen": 15,
        "critical": logging.CRITICAL,
        "negative": -1,
        "bool": True,
        "string": "INFO",
        "none": None,
        "float": 20.0,
        "np_int": np.int64(20),
    }
    for label_, level in levels.items():
        cases.add(
            function, f"level-{label_}", lambda _, lv=level: make("lv", lv, io.StringIO(), "%(levelname)s %(message)s")
        )
    formats: dict[str, Any] = {
        "percent": "%(levelname)s|%(name)s|%(message)s",
        "brace": "{levelname} {message}",
        "dollar": "$levelname $message",
        "no_fields": "constant",
        "empty": "",
        "unknown_field": "%(bogus)s %(message)s",
        "bad_percent": "%(message",
        "none": None,
        "int": 3,
    }
    for label_, format_string in formats.items():
        cases.add(function, f"format-{label_}", lambda _, f=format_string: make("fmt", logging.INFO, io.StringIO(), f))
    streams: dict[str, Any] = {
        "stringio": lambda folder: io.StringIO(),
        "none": lambda folder: None,
        "no_flush": lambda folder: _NoFlush(),
        "bytesio": lambda folder: io.BytesIO(),
        "stderr": lambda folder: sys.stderr,
        "list": lambda folder: [],
    }
    for label_, make_stream in streams.items():
        cases.add(
            function,
            f"stream-{label_}",
            lambda folder, s=make_stream: ts.make_stream_logger(
                "s", level=20, stream=s(folder), format_string="%(message)s"
            ),
        )

    def to_file(folder: Path) -> Any:
        with (folder / "log.txt").open("w", encoding="utf-8") as handle:
            logger = ts.make_stream_logger("file", level=logging.INFO, stream=handle, format_string="%(message)s")
            logger.info("line one")
            logger.info("line two")
        return (folder / "log.txt").read_text(encoding="utf-8")

    cases.add(function, "stream-file", to_file)

    def two_loggers_same_name(_: Any) -> Any:
        first, second = io.StringIO(), io.StringIO()
        one = ts.make_stream_logger("same", level=logging.INFO, stream=first, format_string="%(message)s")
        two = ts.make_stream_logger("same", level=logging.INFO, stream=second, format_string="%(message)s")
        one.info("to first")
        two.info("to second")
        return {"first": first.getvalue(), "second": second.getvalue(), "same_object": one is two}

    cases.add(function, "same-name-twice", two_loggers_same_name)


def build(cases: Cases) -> None:
    """Every case of ``tinax.stdlib``."""
    _parse_config(cases)
    _logger(cases)
