"""The ``tinax`` command's JSON documents, ``--version``, ``python -m tinax`` and content detection.

The command runs in a subprocess, as a user runs it; the JSON conventions and
the schema check are also tested on their own.
"""

from __future__ import annotations

import datetime
import decimal
import json
import os
import pathlib
import re
import subprocess
import sys
from importlib import metadata
from typing import Any

import numpy as np
import pytest

import tinax._core._command._registry as registry
from tinax._core._command._integrity import install_command
from tinax._core._command._report import (
    SCHEMA,
    SCHEMA_ID,
    SCHEMA_VERSION,
    Report,
    Shown,
    error_document,
    json_key,
    json_value,
    schema_text,
)
from tinax._core._command._versions import UNKNOWN_VERSION, distribution_version
from tinax_testing import run_tinax
from tinax_testing.json_schema import schema_problems

ROOT = pathlib.Path(__file__).resolve().parents[3]
KEYS = list(SCHEMA["required"])
SNAKE = re.compile(SCHEMA["$defs"]["key"]["pattern"])


def _python_m_tinax(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tinax", *arguments], capture_output=True, text=True, check=False, timeout=300
    )


def _our_keys(document: dict[str, Any]) -> list[str]:
    """Every key the command chose: the document's, the summary's, the tables', their columns and row keys."""
    keys = [*document, *document["summary"], *document["tables"]]
    for table in document["tables"].values():
        keys += table["columns"]
        for row in table["rows"]:
            keys += list(row)
    if document["error"] is not None:
        keys += list(document["error"])
    return keys


# --- --version and python -m tinax -------------------------------------------------------------


def test_version_prints_every_installed_tinax_distribution_on_one_line():
    completed = _python_m_tinax("--version")
    assert completed.returncode == 0, completed.stderr
    (line,) = completed.stdout.splitlines()
    listed = dict(item.rsplit(" ", 1) for item in line.split(", "))
    assert listed["tinax-core"] == metadata.version("tinax-core")
    assert list(listed) == sorted(listed)
    for name, version in listed.items():
        assert metadata.version(name) == version


def test_version_with_json_is_a_document_of_the_schema():
    for arguments in (("--version", "--json"), ("--json", "--version")):
        result = run_tinax(*arguments)
        assert result.code == 0
        document = result.json()
        assert document["command"] == "version"
        rows = document["tables"]["tinax_distributions"]["rows"]
        assert {"name": "tinax-core", "version": metadata.version("tinax-core")} in rows


def test_python_m_tinax_runs_the_console_script():
    console_script = pathlib.Path(sys.executable).with_name("tinax")
    if not console_script.is_file():
        pytest.skip("the environment's console scripts are not next to its interpreter")
    for arguments in (("--version",), ("--help",), ("inspect", "--help"), ("bogus",)):
        module = _python_m_tinax(*arguments)
        script = subprocess.run([str(console_script), *arguments], capture_output=True, text=True, check=False)
        assert (module.returncode, module.stdout, module.stderr) == (script.returncode, script.stdout, script.stderr)
    info = json.loads(_python_m_tinax("info", "--json").stdout)
    assert info["command"] == "info"
    assert info["ok"] is True


def test_the_namespace_main_module_sits_where_tinax_02_had_nothing():
    recorded = ROOT / "tests-compat" / "tinax-0.2.0-record.txt"
    if not recorded.is_file():
        pytest.skip("needs the repository's list of tinax 0.2's files")
    assert "tinax/__main__.py" not in recorded.read_text().split()
    assert (ROOT / "packages" / "tinax-core" / "src" / "tinax" / "__main__.py").is_file()
    assert not (ROOT / "packages" / "tinax-core" / "src" / "tinax" / "__init__.py").exists()


@pytest.mark.parametrize("module", ["array", "debug", "device", "grad", "jit", "random", "stdlib"])
def test_each_public_module_gives_its_distributions_version(module):
    code = (
        "import importlib, sys\n"
        "from importlib import metadata\n"
        f"module = importlib.import_module('tinax.{module}')\n"
        "assert module.__version__ == metadata.version('tinax-core'), module.__version__\n"
        "assert '__version__' not in module.__all__\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr


def _version_in_fresh_process(site: pathlib.Path, name: str) -> tuple[str, bool]:
    code = (
        "import sys, pathlib\n"
        "from tinax._core._command._versions import distribution_version\n"
        f"version = distribution_version({name!r}, {str(site / 'tinax' / 'module.py')!r})\n"
        "print(version, 'importlib.metadata' in sys.modules)\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    version, imported = completed.stdout.split()
    return version, imported == "True"


def test_the_version_is_read_from_the_dist_info_next_to_the_module_without_importlib_metadata(tmp_path):
    # How pip and uv lay out site-packages: the tinax folder and each distribution's dist-info side by side.
    (tmp_path / "tinax").mkdir()
    (tmp_path / "tinax" / "module.py").write_text("")
    info = tmp_path / "tinax_probe_dist-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.4\nName: tinax-probe.dist\nVersion: 1.2.3\n\nVersion: 9\n")
    assert _version_in_fresh_process(tmp_path, "tinax-probe.dist") == ("1.2.3", False)
    # Two dist-info folders of one name (a damaged install): importlib.metadata decides.
    (tmp_path / "tinax_probe_dist-1.2.4.dist-info").mkdir()
    assert _version_in_fresh_process(tmp_path, "tinax-probe.dist") == (UNKNOWN_VERSION, True)
    # None beside the module (an editable install): importlib.metadata finds it wherever it is.
    assert _version_in_fresh_process(tmp_path / "elsewhere", "tinax-core") == (metadata.version("tinax-core"), True)


def test_a_distribution_without_metadata_has_the_unknown_version():
    assert distribution_version("tinax-no-such-distribution") == UNKNOWN_VERSION == "0+unknown"
    assert distribution_version("tinax-core") == metadata.version("tinax-core")


# --- the schema ------------------------------------------------------------------------------


def test_the_schema_ships_next_to_the_command_and_names_its_version():
    shipped = pathlib.Path(registry.__file__).with_name("schema.json")
    assert json.loads(shipped.read_text(encoding="utf-8")) == SCHEMA
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert SCHEMA_ID == SCHEMA["$id"] == f"urn:tinax:command-output:{SCHEMA_VERSION}"
    assert SCHEMA_VERSION == 2
    printed = run_tinax("--schema")
    assert printed.code == 0
    assert printed.stdout == schema_text()


_KNOWN_KEYWORDS = {
    "$schema",
    "$id",
    "$defs",
    "$ref",
    "title",
    "description",
    "type",
    "enum",
    "const",
    "required",
    "properties",
    "additionalProperties",
    "propertyNames",
    "items",
    "pattern",
    "minimum",
    "anyOf",
}


def _keywords(schema: object, where: str = "$") -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if isinstance(schema, dict):
        for key, value in schema.items():
            found.append((where, key))
            if key in ("properties", "$defs"):
                for name, child in value.items():
                    found += _keywords(child, f"{where}.{key}.{name}")
            elif key in ("items", "additionalProperties", "propertyNames"):
                found += _keywords(value, f"{where}.{key}")
            elif key == "anyOf":
                for index, child in enumerate(value):
                    found += _keywords(child, f"{where}.anyOf[{index}]")
    return found


def test_the_schema_uses_only_keywords_the_checker_follows():
    # schema_problems stands in for a JSON Schema library; a keyword it does
    # not know would be silently ignored.
    unknown = [(where, key) for where, key in _keywords(SCHEMA) if key not in _KNOWN_KEYWORDS]
    assert unknown == []


def test_the_schema_checker_follows_refs_patterns_and_consts():
    document = Report("info", "environment", summary={"files checked": 1}).to_json()
    assert schema_problems(document) == []
    document["summary"]["Files Checked"] = 1
    document["schema_version"] = 1
    document["bytes_read"] = -1
    document["error"] = {"type": "bogus", "message": "m", "exception": None, "exit_code": 3}
    problems = schema_problems(document)
    assert sorted(problems) == [
        "$.bytes_read: -1 is less than 0",
        "$.error.exit_code: 3 is not one of [1, 2]",
        "$.error.type: 'bogus' is not one of " + str(SCHEMA["$defs"]["error"]["properties"]["type"]["enum"]),
        "$.schema_version: 1 is not 2",
        "$.summary[key 'Files Checked']: 'Files Checked' does not match '^[a-z0-9]+(_[a-z0-9]+)*$'",
    ]


# --- documents of reports --------------------------------------------------------------------


def test_display_labels_become_snake_case_keys_and_the_text_keeps_them():
    report = Report("inspect", "parquet", "x.parquet", summary={"row groups": 2, "footer checksum": "verified"})
    report.add_table("row groups", ("row group", "first record"), [{"row group": 0, "first record": 0}])
    document = report.to_json()
    assert document["summary"] == {"row_groups": 2, "footer_checksum": "verified"}
    assert document["tables"] == {
        "row_groups": {"columns": ["row_group", "first_record"], "rows": [{"row_group": 0, "first_record": 0}]}
    }
    assert "row groups:      2" in report.to_text().splitlines()
    assert [json_key(label) for label in ("files checked", "Arrow type", "python mapping", "bytes-read")] == [
        "files_checked",
        "arrow_type",
        "python_mapping",
        "bytes_read",
    ]


def test_two_labels_with_one_json_name_are_refused():
    report = Report("info", "environment", summary={"files checked": 1, "files-checked": 2})
    with pytest.raises(ValueError, match="'files-checked' gives the JSON name 'files_checked'"):
        report.to_json()


def test_values_read_from_files_become_json_data():
    record = {
        "image": np.arange(4, dtype=np.float32).reshape(2, 2),
        "label": np.int64(3),
        "blob": b"\x00\xff",
        "loss": float("nan"),
        "phase": np.array([1 + 2j, np.inf]),
        "day": datetime.date(2024, 5, 17),
        "price": decimal.Decimal("1.25"),
        "tags": ("a", "b"),
        "raw": np.array([b"ab"]),
        3: None,
    }
    converted = json_value(record)
    assert converted == {
        "image": {"type": "ndarray", "dtype": "float32", "shape": [2, 2], "values": [[0.0, 1.0], [2.0, 3.0]]},
        "label": 3,
        "blob": {"type": "bytes", "base64": "AP8="},
        "loss": {"type": "float", "value": "NaN"},
        "phase": {"type": "ndarray", "dtype": "complex128", "shape": [2], "values": [[1.0, 2.0], ["Infinity", 0.0]]},
        "day": {"type": "datetime.date", "value": "2024-05-17"},
        "price": {"type": "decimal.Decimal", "value": "1.25"},
        "tags": ["a", "b"],
        "raw": {"type": "ndarray", "dtype": "|S2", "shape": [1], "values": ["YWI="]},
        "3": None,
    }
    json.dumps(converted, allow_nan=False)  # strict JSON


def test_a_shown_cell_prints_its_text_and_holds_its_data():
    record = {"image": np.zeros((2, 2), np.uint8), "label": 1}
    report = Report("inspect", "parquet", "x")
    report.add_table("records", ("index", "record"), [{"index": 0, "record": Shown("{'image': uint8[2, 2]}", record)}])
    assert report.to_text().splitlines()[-1] == "      0  {'image': uint8[2, 2]}"
    (row,) = report.to_json()["tables"]["records"]["rows"]
    assert row["record"]["image"] == {"type": "ndarray", "dtype": "uint8", "shape": [2, 2], "values": [[0, 0], [0, 0]]}
    assert row["record"]["label"] == 1
    assert schema_problems(report.to_json()) == []


def test_every_document_has_the_same_keys_in_the_same_order():
    report = Report("inspect", "safetensors", "m").to_json()
    error = error_document("inspect", error_type="usage", message="m", exit_code=2)
    assert list(report) == list(error) == KEYS
    assert report["error"] is None
    assert error["ok"] is False
    with pytest.raises(ValueError, match="error_type must be one of"):
        error_document(None, error_type="bogus", message="m", exit_code=1)


def test_info_and_version_documents_have_only_snake_case_keys():
    for arguments in (("info", "--json"), ("--version", "--json")):
        document = run_tinax(*arguments).json()
        assert [key for key in _our_keys(document) if not SNAKE.fullmatch(key)] == []


# --- documents of errors ---------------------------------------------------------------------


def _distribution_with_inspector(site: pathlib.Path, body: str) -> None:
    """Installs, by hand, a distribution registering one inspector (for the safetensors kind) that runs ``body``."""
    info = site / "tinax_probe-0.3.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.4\nName: tinax-probe\nVersion: 0.3.0\n")
    (info / "entry_points.txt").write_text("[tinax.inspectors]\nsafetensors = tinax_probe_inspector:PROBE\n")
    (site / "tinax_probe_inspector.py").write_text(
        "from tinax._core._command._registry import Inspector\n"
        "PROBE = Inspector('safetensors file', lambda p: p.head[8:9] == b'{', 'tinax_probe_inspector:inspect')\n"
        f"def inspect(path, options):\n    {body}\n"
    )


# Runs the command with only the probe distribution's inspectors visible.
_ONLY_PROBE = """
import sys
from importlib import metadata
import tinax._core._command._registry as registry
every = metadata.entry_points
registry.metadata = type("M", (), {"entry_points": staticmethod(
    lambda **kw: [e for e in every(**kw) if e.value.startswith("tinax_probe_inspector")])})
from tinax._core._command._main import main
sys.exit(main(sys.argv[1:]))
"""


def _run_with_probe(tmp_path: pathlib.Path, body: str | None, *arguments: str) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    if body is not None:
        _distribution_with_inspector(site, body)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-c", _ONLY_PROBE, *arguments], capture_output=True, text=True, check=False, env=environment
    )


def _safetensors(path: pathlib.Path) -> pathlib.Path:
    header = b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(4))
    return path


@pytest.mark.parametrize(
    ("body", "error_type", "exception"),
    [
        (None, "missing_inspector", None),
        ("raise ValueError('not a valid safetensors file: header too short')", "unreadable", "ValueError"),
        ("raise FileNotFoundError(2, 'gone')", "unreadable", "FileNotFoundError"),
        ("raise ModuleNotFoundError(\"No module named 'safetensors'\")", "missing_dependency", "ModuleNotFoundError"),
        ("raise KeyError('boom')", "unexpected", "KeyError"),
    ],
    ids=["missing-inspector", "unreadable", "unreadable-os-error", "missing-dependency", "unexpected"],
)
def test_a_failing_inspect_prints_an_error_document_with_json_and_the_same_line_and_exit_code(
    tmp_path, body, error_type, exception
):
    path = _safetensors(tmp_path / "model.safetensors")
    text = _run_with_probe(tmp_path, body, "inspect", str(path))
    as_json = _run_with_probe(tmp_path, body, "inspect", str(path), "--json")
    assert text.returncode == as_json.returncode == 1
    assert text.stdout == ""
    (line,) = text.stderr.strip().splitlines()
    assert as_json.stderr.strip().splitlines() == [line]
    document = json.loads(as_json.stdout)
    assert schema_problems(document) == []
    assert list(document) == KEYS
    assert document["ok"] is False
    # With no inspector installed, the kind is never told.
    assert document["kind"] == (None if body is None else "safetensors")
    assert document["path"] == str(path)
    assert document["error"] == {
        "type": error_type,
        "message": line.removeprefix("tinax inspect: "),
        "exception": exception,
        "exit_code": 1,
    }
    assert (document["problems"], document["summary"], document["tables"], document["bytes_read"]) == ([], {}, {}, None)


def test_a_missing_inspector_is_installed_with_the_tool_that_installed_tinax_core(tmp_path):
    path = _safetensors(tmp_path / "model.safetensors")
    result = _run_with_probe(tmp_path, None, "inspect", str(path))
    install = install_command(["tinax"], metadata.distribution("tinax-core"))
    assert result.stderr.strip().splitlines() == [
        f"tinax inspect: no installed tinax distribution inspects files such as {str(path)!r}; "
        f"{install} installs every tinax distribution with its inspectors"
    ]


@pytest.mark.parametrize(
    ("arguments", "command", "code"),
    [
        (("inspect", "{missing}"), "inspect", 2),
        (("inspect",), "inspect", 2),
        (("inspect", "{text}", "--head", "-1"), "inspect", 2),
        (("bogus",), None, 2),
        ((), None, 2),
        (("inspect", "{text}"), "inspect", 1),
    ],
    ids=["missing-path", "no-path", "bad-option", "bad-command", "no-command", "unknown-kind"],
)
def test_usage_errors_and_unknown_kinds_print_an_error_document_with_json(tmp_path, arguments, command, code):
    text_file = tmp_path / "notes.txt"
    text_file.write_text("just text\n")
    given = [item.format(missing=tmp_path / "absent", text=text_file) for item in arguments]
    unknown = "unknown_kind" if registry.installed() else "missing_inspector"
    plain = run_tinax(*given)
    for flags in (["--json"], ["--js"]):  # argparse takes an unambiguous prefix
        result = run_tinax(*flags, *given)
        assert result.code == plain.code == code
        assert result.stderr == plain.stderr
        document = result.json()
        assert document["command"] == command
        # tinax-core alone (the isolation run) has no inspector to tell any kind.
        assert document["error"]["type"] == ("usage" if code == 2 else unknown)
        assert document["error"]["exit_code"] == code
        assert f"{document['error']['message']}\n" in plain.stderr
        assert [key for key in _our_keys(document) if not SNAKE.fullmatch(key)] == []


def test_a_path_after_double_dash_named_json_is_not_the_flag(tmp_path):
    assert not pathlib.Path("--json").exists()
    result = run_tinax("inspect", "--", "--json")
    assert result.code == 2
    assert result.stdout == ""


# --- detection ---------------------------------------------------------------------------------


class _EntryPoint:
    def __init__(self, name: str, inspector: registry.Inspector) -> None:
        self.name = name
        self.inspector = inspector

    def load(self) -> registry.Inspector:
        return self.inspector


def test_sniffers_run_by_order_then_kind_and_the_first_that_recognises_the_path_tells_it(tmp_path, monkeypatch):
    path = tmp_path / "data"
    path.write_bytes(b"x" * 10_000)
    asked: list[str] = []

    def sniffer(kind: str, answer: bool, tail: int = 0) -> Any:
        def sniff(probe: registry.Probe) -> bool:
            asked.append(kind)
            assert (probe.is_folder, probe.size, probe.head) == (False, 10_000, b"x" * registry.HEAD_BYTES)
            probe.read(probe.size - tail, tail)
            return answer

        return sniff

    found = [
        _EntryPoint("weak", registry.Inspector("weak kind", sniffer("weak", True), "m:f", order=1)),
        _EntryPoint("b-strong", registry.Inspector("b", sniffer("b-strong", True), "m:f")),
        _EntryPoint("a-strong", registry.Inspector("a", sniffer("a-strong", False, tail=4), "m:f")),
        _EntryPoint("a-strong", registry.Inspector("shadowed", sniffer("shadowed", True), "m:f")),
    ]
    monkeypatch.setattr(registry, "metadata", type("M", (), {"entry_points": staticmethod(lambda **kw: found)}))
    inspectors = registry.installed()
    assert list(inspectors) == ["a-strong", "b-strong", "weak"]
    assert registry.detect(path, inspectors) == ("b-strong", registry.HEAD_BYTES + 4)
    assert asked == ["a-strong", "b-strong"]
    # A folder's probe reads nothing; a path that is neither file nor folder is asked of no sniffer.
    folder_probe = registry.Probe(tmp_path, None)
    assert (folder_probe.is_folder, folder_probe.head, folder_probe.read(0, 10), folder_probe.bytes_read) == (
        True,
        b"",
        b"",
        0,
    )
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    asked.clear()
    assert registry.detect(fifo, inspectors) == (None, 0)
    assert asked == []
