"""The ``tinax`` command's core: usage, exit codes, one-line errors, ``tinax info`` and its integrity check.

Every test runs the command in a subprocess, as a user does.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pathlib
import shlex
import subprocess
import sys

import pytest

from tinax._core._command._report import SCHEMA, Report, schema_problems
from tinax_testing import run_tinax


def test_help_lists_both_subcommands_and_starts_no_jax():
    code = (
        "import sys\n"
        "sys.argv = ['tinax', '--help']\n"
        "import _tinax_command\n"  # the console script's entry point
        "try:\n"
        "    _tinax_command.console()\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
        "assert 'jax' not in sys.modules, 'jax was imported'\n"
        "assert 'numpy' not in sys.modules, 'numpy was imported'\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr
    assert "info" in completed.stdout
    assert "inspect" in completed.stdout


@pytest.mark.parametrize(
    "arguments",
    [("bogus",), ("inspect",), ("inspect", "x", "--head", "-1"), ("inspect", "x", "--max-bytes", "0"), ()],
)
def test_usage_errors_exit_2_with_one_line(arguments):
    result = run_tinax(*arguments)
    assert result.code == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert "error:" in result.stderr


def test_a_missing_path_is_a_usage_error(tmp_path):
    result = run_tinax("inspect", str(tmp_path / "absent.safetensors"))
    assert result.code == 2
    assert result.stderr.strip().splitlines() == [
        f"tinax inspect: error: PATH {str(tmp_path / 'absent.safetensors')!r} does not exist"
    ]


def test_unknown_content_exits_1_naming_the_kinds_it_reads(tmp_path):
    path = tmp_path / "notes.safetensors"
    path.write_text("just some text, whatever the name says\n")
    result = run_tinax("inspect", str(path))
    assert result.code == 1
    (line,) = result.stderr.strip().splitlines()
    assert "cannot tell what" in line
    assert "safetensors file" in line
    assert "Orbax checkpoint folder" in line
    empty = tmp_path / "empty-folder"
    empty.mkdir()
    assert run_tinax("inspect", str(empty)).code == 1


def test_debug_adds_the_traceback(tmp_path):
    path = tmp_path / "notes"
    path.write_text("text")
    result = run_tinax("inspect", "--debug", str(path))
    assert result.code == 1
    assert "Traceback" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("tinax inspect: cannot tell")


def test_info_lists_distributions_libraries_and_platform():
    result = run_tinax("info")
    assert result.code == 0, result.stderr
    assert "tinax-core" in result.stdout
    assert "numpy" in result.stdout
    assert "platform:" in result.stdout
    document = run_tinax("info", "--json").json()
    assert document["command"] == "info"
    assert document["ok"] is True
    names = [row["name"] for row in document["tables"]["tinax_distributions"]["rows"]]
    assert "tinax-core" in names
    assert all(row["status"] == "ok" for row in document["tables"]["tinax_distributions"]["rows"])
    packages = {row["name"] for row in document["tables"]["packages"]["rows"]}
    assert {"jax", "jaxlib", "numpy", "ml_dtypes"} <= packages
    assert "devices" not in document["tables"]
    assert document["summary"]["python"] == ".".join(map(str, sys.version_info[:3]))


def test_json_flag_works_before_and_after_the_subcommand():
    assert run_tinax("--json", "info").json()["command"] == "info"
    assert run_tinax("info", "--json").json()["command"] == "info"


def test_info_devices_starts_jax_and_lists_them():
    document = run_tinax("info", "--devices", "--json").json()
    assert document["summary"]["process_count"] == 1
    devices = document["tables"]["devices"]["rows"]
    assert devices
    assert {row["platform"] for row in devices} == {"cpu"}


def _record_line(root: pathlib.Path, relative: str) -> str:
    data = (root / relative).read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{relative},sha256={digest},{len(data)}"


def _fake_distribution(
    root: pathlib.Path, *, classifiers: tuple[str, ...] = (), installer: str | None = None
) -> pathlib.Path:
    """Installs, by hand as an installer would, a distribution 'tinax-fake' with a RECORD into ``root``."""
    package = root / "tinax_fake_payload"
    package.mkdir()
    (package / "__init__.py").write_text("VALUE = 1\n")
    (package / "data.txt").write_text("some data\n")
    info = root / "tinax_fake-0.3.0.dist-info"
    info.mkdir()
    fields = ["Metadata-Version: 2.4", "Name: tinax-fake", "Version: 0.3.0"]
    (info / "METADATA").write_text("\n".join([*fields, *(f"Classifier: {item}" for item in classifiers)]) + "\n")
    lines = [_record_line(root, name) for name in ("tinax_fake_payload/__init__.py", "tinax_fake_payload/data.txt")]
    lines += [_record_line(root, "tinax_fake-0.3.0.dist-info/METADATA"), "tinax_fake-0.3.0.dist-info/RECORD,,"]
    if installer is not None:
        # What pip and uv write: the tool's name, on one line.
        (info / "INSTALLER").write_text(f"{installer}\n")
        lines.append(_record_line(root, "tinax_fake-0.3.0.dist-info/INSTALLER"))
    (info / "RECORD").write_text("\n".join(lines) + "\n")
    return info


def _info_with(root: pathlib.Path) -> tuple[int, dict[str, object], str]:
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    result = run_tinax("info", "--json", env={"PYTHONPATH": path})
    text = run_tinax("info", env={"PYTHONPATH": path})
    assert text.code == result.code
    return result.code, result.json(), text.stdout


def _row(document: dict[str, object], name: str) -> dict[str, object]:
    (row,) = [row for row in document["tables"]["tinax_distributions"]["rows"] if row["name"] == name]  # type: ignore[index]
    return row  # type: ignore[no-any-return]


def test_integrity_check_passes_an_intact_distribution(tmp_path):
    _fake_distribution(tmp_path)
    code, document, _ = _info_with(tmp_path)
    assert code == 0
    assert _row(document, "tinax-fake") == {
        "name": "tinax-fake",
        "version": "0.3.0",
        "files_checked": 3,
        "status": "ok",
        "repair": None,
    }


def test_integrity_check_reports_a_hand_edited_file_with_the_repair(tmp_path):
    _fake_distribution(tmp_path)
    (tmp_path / "tinax_fake_payload" / "__init__.py").write_text("VALUE = 2  # edited\n")
    code, document, text = _info_with(tmp_path)
    assert code == 1
    repair = "python -m pip install --force-reinstall --no-deps tinax-fake==0.3.0"
    assert _row(document, "tinax-fake")["repair"] == repair
    assert document["problems"] == [
        f"tinax-fake 0.3.0: tinax_fake_payload/__init__.py differs from the installed file (its hash changed); "
        f"repair: {repair}"
    ]
    assert repair in text


@pytest.mark.parametrize(
    ("installer", "repair"),
    [
        ("pip", "python -m pip install --force-reinstall --no-deps tinax-fake==0.3.0"),
        (None, "python -m pip install --force-reinstall --no-deps tinax-fake==0.3.0"),
        ("uv", f"uv pip install --python {shlex.quote(sys.executable)} --reinstall --no-deps tinax-fake==0.3.0"),
    ],
    ids=["pip", "unknown", "uv"],
)
def test_the_repair_uses_the_tool_that_installed_the_distribution(tmp_path, installer, repair):
    # uv's environments have no pip: a repair saying `python -m pip` fails there.
    _fake_distribution(tmp_path, installer=installer)
    (tmp_path / "tinax_fake_payload" / "data.txt").write_text("changed\n")
    code, document, text = _info_with(tmp_path)
    assert code == 1
    assert _row(document, "tinax-fake")["repair"] == repair
    assert document["problems"] == [
        f"tinax-fake 0.3.0: tinax_fake_payload/data.txt differs from the installed file (its hash changed); "
        f"repair: {repair}"
    ]
    assert repair in text


def test_a_private_distribution_is_repaired_from_its_checkout_not_an_index(tmp_path):
    _fake_distribution(tmp_path, classifiers=("Private :: Do Not Upload",))
    (tmp_path / "tinax_fake_payload" / "__init__.py").write_text("VALUE = 2  # edited\n")
    code, document, _ = _info_with(tmp_path)
    assert code == 1
    repair = _row(document, "tinax-fake")["repair"]
    assert isinstance(repair, str)
    assert "source checkout" in repair
    assert "pip install" not in repair


def test_integrity_check_reports_a_missing_file(tmp_path):
    _fake_distribution(tmp_path)
    (tmp_path / "tinax_fake_payload" / "data.txt").unlink()
    code, document, _ = _info_with(tmp_path)
    assert code == 1
    assert document["problems"][0].startswith("tinax-fake 0.3.0: tinax_fake_payload/data.txt is missing")


def test_integrity_check_reports_a_hand_edited_record(tmp_path):
    info = _fake_distribution(tmp_path)
    record = info / "RECORD"
    lines = record.read_text().splitlines()
    lines[1] = lines[1].replace("sha256=", "sha256=A")
    record.write_text("\n".join(lines) + "\n")
    code, document, _ = _info_with(tmp_path)
    assert code == 1
    assert "tinax_fake_payload/data.txt differs" in document["problems"][0]


def test_integrity_check_reports_a_deleted_record(tmp_path):
    info = _fake_distribution(tmp_path)
    (info / "RECORD").unlink()
    code, document, _ = _info_with(tmp_path)
    assert code == 1
    assert _row(document, "tinax-fake")["status"] == "1 problems"
    assert document["problems"][0].startswith("tinax-fake 0.3.0: its RECORD file is missing")


def test_the_integrity_check_lives_where_tinax_02_installed_nothing():
    import tinax._core._command._integrity as integrity

    recorded = pathlib.Path(__file__).resolve().parents[3] / "tests-compat" / "tinax-0.2.0-record.txt"
    if not recorded.is_file():
        pytest.skip("needs the repository's list of tinax 0.2's files (not there when the tests run from a wheel)")
    source = pathlib.Path(integrity.__file__).resolve()
    relative = source.relative_to(source.parents[3]).as_posix()
    assert relative == "tinax/_core/_command/_integrity.py"
    assert relative not in recorded.read_text().split()


def test_text_output_aligns_columns_and_json_follows_the_schema():
    report = Report("inspect", "safetensors", "model.safetensors", summary={"tensors": 2}, bytes_read=10)
    report.add_table("tensors", ("name", "bytes"), [{"name": "a", "bytes": 5}, {"name": "long.name", "bytes": 1234}])
    lines = report.to_text().splitlines()
    assert lines[:4] == ["kind:       safetensors", "path:       model.safetensors", "tensors:    2", "bytes read: 10"]
    assert lines[-3:] == ["  name       bytes", "  a              5", "  long.name   1234"]
    assert schema_problems(json.loads(json.dumps(report.to_json()))) == []


def test_schema_check_finds_violations():
    document = Report("info", "environment").to_json()
    assert schema_problems(document) == []
    document["ok"] = "yes"
    del document["tables"]
    document["extra"] = 1
    assert schema_problems(document) == [
        "$: lacks 'tables'",
        "$.ok: expected boolean, got str",
        "$: unexpected key 'extra'",
    ]
    assert SCHEMA["properties"]["command"]["enum"] == ["info", "inspect", "version", None]


def test_an_inspector_failing_unexpectedly_is_still_one_line(tmp_path):
    # A distribution registering a broken inspector: the entry point exists,
    # its code raises something no reader documents.
    site = tmp_path / "site"
    info = site / "tinax_broken-0.3.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.4\nName: tinax-broken\nVersion: 0.3.0\n")
    (info / "entry_points.txt").write_text("[tinax.inspectors]\ncheckpoint-root = tinax_broken_inspector:inspect\n")
    (site / "tinax_broken_inspector.py").write_text("def inspect(path, options):\n    raise KeyError('boom')\n")
    root = tmp_path / "run"
    (root / "12").mkdir(parents=True)
    environment = {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    completed = subprocess.run(
        [sys.executable, "-c", _ONLY_BROKEN, "inspect", str(root)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **environment},
    )
    assert completed.returncode == 1
    assert completed.stderr.strip().splitlines() == ["tinax inspect: unexpected KeyError: 'boom' (--debug shows where)"]


# Runs the command with only the broken distribution's inspectors visible.
_ONLY_BROKEN = """
import sys
from importlib import metadata
import tinax._core._command._registry as registry
every = metadata.entry_points
registry.metadata = type("M", (), {"entry_points": staticmethod(
    lambda **kw: [e for e in every(**kw) if e.value.startswith("tinax_broken_inspector")])})
from tinax._core._command._main import main
sys.exit(main(sys.argv[1:]))
"""
