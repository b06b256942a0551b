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
from importlib import metadata

import pytest

from tinax._core._command._integrity import install_command
from tinax._core._command._report import SCHEMA, Report
from tinax_testing import run_tinax
from tinax_testing.json_schema import schema_problems


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


def test_unknown_content_exits_1_naming_the_installed_kinds_and_what_installs_the_others(tmp_path):
    path = tmp_path / "notes.safetensors"
    path.write_text("just some text, whatever the name says\n")
    empty = tmp_path / "empty-folder"
    empty.mkdir()
    for given in (path, empty):
        result = _run_with_fake_inspector(tmp_path, "raise KeyError('never run')", "inspect", str(given))
        assert result.returncode == 1
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"tinax inspect: cannot tell what {str(given)!r} is from its content; ")
        assert "the installed tinax distributions inspect: fake folder" in line
        # tinax-core knows no member: the tinax distribution installs every inspector, where it is not installed.
        assert line.endswith(" tinax adds those of every tinax distribution") is not _meta_installed()


def _meta_installed() -> bool:
    try:
        metadata.distribution("tinax")
    except metadata.PackageNotFoundError:
        return False
    return True


def test_with_no_inspector_installed_inspect_names_what_installs_them(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"anything")
    result = _run_with_fake_inspector(tmp_path, None, "inspect", str(path), registered=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"tinax inspect: no installed tinax distribution inspects files such as {str(path)!r}; "
        f"{install_command(['tinax'], metadata.distribution('tinax-core'))} installs every tinax distribution "
        "with its inspectors"
    ]


def test_debug_adds_the_traceback(tmp_path):
    path = tmp_path / "notes"
    path.write_text("text")
    result = run_tinax("inspect", "--debug", str(path))
    assert result.code == 1
    assert "Traceback" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("tinax inspect: ")
    assert "Traceback" not in run_tinax("inspect", str(path)).stderr


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


def _run_with_fake_inspector(
    tmp_path: pathlib.Path, body: str | None, *arguments: str, registered: bool = True
) -> subprocess.CompletedProcess[str]:
    """Runs the command with only a hand-installed distribution's inspector visible (none if not ``registered``).

    Its sniffer recognises every folder holding a file named ``FAKE``; its
    inspector, in a module of its own (absent if ``body`` is None), runs ``body``.
    """
    site = tmp_path / "site"
    info = site / "tinax_fake_inspector-0.3.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.4\nName: tinax-fake-inspector\nVersion: 0.3.0\n")
    if registered:
        (info / "entry_points.txt").write_text("[tinax.inspectors]\nfake = tinax_fake_inspector:FAKE\n")
    (site / "tinax_fake_inspector.py").write_text(
        "from tinax._core._command._registry import Inspector\n"
        "FAKE = Inspector('fake folder', lambda probe: (probe.path / 'FAKE').is_file(), 'tinax_fake_reader:inspect')\n"
    )
    if body is not None:
        (site / "tinax_fake_reader.py").write_text(f"def inspect(path, options):\n    {body}\n")
    environment = {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-c", _ONLY_FAKE, *arguments],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **environment},
    )


# Runs the command with only the fake distribution's inspectors visible.
_ONLY_FAKE = """
import sys
from importlib import metadata
import tinax._core._command._registry as registry
every = metadata.entry_points
registry.metadata = type("M", (), {"entry_points": staticmethod(
    lambda **kw: [e for e in every(**kw) if e.value.startswith("tinax_fake_inspector")])})
from tinax._core._command._main import main
sys.exit(main(sys.argv[1:]))
"""


def test_an_inspector_failing_unexpectedly_is_still_one_line(tmp_path):
    # A distribution registering a broken inspector: its sniffer recognises
    # the folder, its inspector raises something no reader documents.
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "FAKE").write_text("")
    completed = _run_with_fake_inspector(tmp_path, "raise KeyError('boom')", "inspect", str(folder))
    assert completed.returncode == 1
    assert completed.stderr.strip().splitlines() == ["tinax inspect: unexpected KeyError: 'boom' (--debug shows where)"]


def test_an_inspector_is_imported_only_for_a_path_of_its_kind(tmp_path):
    # The fake inspector's module is absent: importing it fails, which only a path of its kind shows.
    text = tmp_path / "notes.txt"
    text.write_text("text\n")
    unknown = _run_with_fake_inspector(tmp_path, None, "inspect", str(text))
    assert unknown.returncode == 1
    assert "cannot tell what" in unknown.stderr
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "FAKE").write_text("")
    recognised = _run_with_fake_inspector(tmp_path, None, "inspect", str(folder), "--json")
    assert recognised.returncode == 1
    document = json.loads(recognised.stdout)
    assert (document["kind"], document["error"]["type"]) == ("fake", "missing_dependency")
    assert "tinax_fake_reader" in document["error"]["message"]
