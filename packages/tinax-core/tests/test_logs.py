"""The tinax loggers: quiet by default, one INFO line per finished operation, nothing at import."""

import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest

from tinax._core.logs import LIBRARY_LOGGER, Operation, format_bytes, get_logger, tree_nbytes

CORE_MODULES = ["tinax.array", "tinax.debug", "tinax.device", "tinax.grad", "tinax.jit", "tinax.random", "tinax.stdlib"]


def test_area_loggers_are_children_of_the_tinax_logger_which_carries_a_null_handler():
    assert get_logger("weights").name == "tinax.weights"
    assert get_logger("weights").parent is logging.getLogger(LIBRARY_LOGGER)
    handlers = logging.getLogger(LIBRARY_LOGGER).handlers
    assert sum(isinstance(handler, logging.NullHandler) for handler in handlers) == 1


def test_a_finished_operation_logs_one_info_line_with_its_bytes_and_seconds(caplog):
    caplog.set_level(logging.INFO, logger="tinax")
    Operation(get_logger("example"), "saved", "3 tensors to", "/run/model.bin").done(nbytes=3 * 1024 * 1024)
    [record] = caplog.records
    assert (record.name, record.levelno) == ("tinax.example", logging.INFO)
    message = record.getMessage()
    assert message.startswith("saved 3 tensors to '/run/model.bin': 3145728 bytes (3.0 MiB) in ")
    assert " s" in message
    assert record.tinax_action == "saved"
    assert record.tinax_path == "/run/model.bin"
    assert record.tinax_bytes == 3 * 1024 * 1024
    assert record.tinax_rows is None
    assert isinstance(record.tinax_seconds, float)
    assert record.tinax_seconds >= 0


def test_an_operation_on_rows_logs_the_rows_and_the_bytes(caplog):
    caplog.set_level(logging.INFO, logger="tinax")
    Operation(get_logger("example"), "wrote", "records to", "rows.parquet").done(rows=100_000, nbytes=2048)
    [record] = caplog.records
    assert "100000 rows, 2048 bytes (2.0 KiB) in " in record.getMessage()
    assert (record.tinax_rows, record.tinax_bytes) == (100_000, 2048)


def test_a_detail_ends_the_line(caplog):
    caplog.set_level(logging.INFO, logger="tinax")
    Operation(get_logger("example"), "exported", "", "index.json").done(nbytes=10, detail="2 files")
    assert caplog.records[0].getMessage().endswith("; 2 files")


def test_nothing_is_logged_unless_info_is_enabled(caplog):
    caplog.set_level(logging.WARNING)
    operation = Operation(get_logger("example"), "saved", "", "x")
    assert not operation.enabled
    operation.done(nbytes=1)
    assert caplog.records == []


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [(0, "0 bytes"), (1023, "1023 bytes"), (1024, "1.0 KiB"), (512 * 1024**2, "512.0 MiB"), (3 * 1024**4, "3.0 TiB")],
)
def test_byte_counts_are_written_in_binary_units(nbytes, text):
    assert format_bytes(nbytes) == text


def test_tree_nbytes_counts_regular_files_below_a_folder_without_following_links(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 10)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b").write_bytes(b"x" * 5)
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "big").write_bytes(b"x" * 1000)
    os.symlink(outside, tmp_path / "link")
    assert tree_nbytes(tmp_path) == 15
    assert tree_nbytes(tmp_path / "a") == 10
    assert tree_nbytes(tmp_path / "missing") == 0


_IMPORT_PROBE = textwrap.dedent(
    """
    import importlib, json, logging, sys
    records = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record.name)

    logging.basicConfig(level=logging.DEBUG, handlers=[Collect()])
    for module in MODULES:
        importlib.import_module(module)
    print(json.dumps(sorted({name for name in records if name == "tinax" or name.startswith("tinax.")})))
    """
)


def test_importing_tinax_logs_nothing_even_with_logging_at_debug():
    modules = [*CORE_MODULES, "tinax._core.logs", "tinax._core.progress"]
    completed = subprocess.run(
        [sys.executable, "-c", f"MODULES = {modules!r}\n{_IMPORT_PROBE}"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert json.loads(completed.stdout.strip().splitlines()[-1]) == []
