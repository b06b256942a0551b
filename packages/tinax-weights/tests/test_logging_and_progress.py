"""What the weight files log when they finish, and the progress of sharded exports and loads.

Each save, load and export logs one INFO line to ``tinax.weights`` with its
bytes and seconds, and nothing at all unless logging is configured for it.
``save_sharded_safetensors`` and ``load_sharded_safetensors`` report their
progress, in bytes, to a callback or a bar.
"""

from __future__ import annotations

import importlib.util
import logging
import pathlib
import subprocess
import sys
import textwrap
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from tinax.weights import (
    load_msgpack,
    load_safetensors,
    load_sharded_safetensors,
    save_msgpack,
    save_safetensors,
    save_sharded_safetensors,
)
from tinax_testing import import_side_effects, run_processes
from tinax_testing.progress import ProgressCalls, assert_progress, progress_recorder, tinax_info_records

HAS_RICH = importlib.util.find_spec("rich") is not None
HAS_TQDM = importlib.util.find_spec("tqdm") is not None


def _mesh() -> jax.sharding.Mesh:
    return jax.make_mesh((8,), ("x",))


def _arrays() -> dict[str, jax.Array]:
    """Two row-sharded tensors, one column-sharded (read and written row by row) and a replicated one."""
    mesh = _mesh()
    rows = NamedSharding(mesh, PartitionSpec("x"))
    columns = NamedSharding(mesh, PartitionSpec(None, "x"))
    replicated = NamedSharding(mesh, PartitionSpec())
    return {
        "w": jax.device_put(jnp.arange(64 * 32, dtype=jnp.float32).reshape(64, 32), rows),
        "v": jax.device_put(jnp.arange(16 * 64, dtype=jnp.int16).reshape(16, 64), columns),
        "b": jax.device_put(jnp.ones(8, dtype=jnp.bfloat16), rows),
        "scale": jax.device_put(jnp.float32(2.0), replicated),
    }


def _payload_bytes(arrays: dict[str, jax.Array]) -> int:
    return sum(array.nbytes for array in arrays.values())


def _assert_logged(record: logging.LogRecord, start: str, nbytes: int, path: pathlib.Path) -> None:
    message = record.getMessage()
    assert message.startswith(f"{start} {str(path)!r}: {nbytes} bytes"), message
    assert " in " in message
    assert " s" in message
    assert record.tinax_bytes == nbytes
    assert record.tinax_path == str(path)
    assert record.tinax_seconds >= 0


# ---------------------------------------------------------------------------
# Logging


def test_a_sharded_export_logs_one_info_line_with_its_bytes_and_seconds(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tinax")
    arrays = _arrays()
    save_sharded_safetensors(tmp_path / "model.safetensors", arrays, overwrite=False)
    [record] = tinax_info_records(caplog, "tinax.weights")
    _assert_logged(record, "exported 4 tensors to", _payload_bytes(arrays), tmp_path / "model.safetensors")


def test_a_multi_file_export_logs_one_line_naming_its_files(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tinax")
    arrays = _arrays()
    index = tmp_path / "model.safetensors.index.json"
    save_sharded_safetensors(index, arrays, overwrite=False, max_file_bytes=4096)
    [record] = tinax_info_records(caplog, "tinax.weights")
    _assert_logged(record, "exported 4 tensors to", _payload_bytes(arrays), index)
    assert record.getMessage().endswith("; 3 files and their index")


def test_a_sharded_load_logs_one_info_line_with_the_bytes_read(tmp_path, caplog):
    arrays = _arrays()
    save_sharded_safetensors(tmp_path / "model.safetensors", arrays, overwrite=False)
    caplog.set_level(logging.INFO, logger="tinax")
    shardings = {name: array.sharding for name, array in arrays.items()}
    loaded = load_sharded_safetensors(tmp_path / "model.safetensors", shardings=shardings, max_bytes=1 << 20)
    [record] = tinax_info_records(caplog, "tinax.weights")
    _assert_logged(record, "loaded 4 tensors from", loaded.bytes_read, tmp_path / "model.safetensors")


def test_a_safetensors_save_and_load_log_one_info_line_each(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tinax")
    path = tmp_path / "model.safetensors"
    save_safetensors(path, {"w": np.zeros((4, 4), np.float32)}, overwrite=False)
    load_safetensors(path, max_bytes=64)
    saved, loaded = tinax_info_records(caplog, "tinax.weights")
    _assert_logged(saved, "saved 1 tensor to", path.stat().st_size, path)
    _assert_logged(loaded, "loaded 1 tensor from", 64, path)


def test_a_msgpack_save_and_load_log_one_info_line_each(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tinax")
    path = tmp_path / "state.msgpack"
    save_msgpack(path, {"w": np.zeros(4, np.float32), "step": 3}, overwrite=False)
    load_msgpack(path, {"w": np.zeros(4, np.float32), "step": 0}, max_bytes=1 << 20)
    saved, loaded = tinax_info_records(caplog, "tinax.weights")
    _assert_logged(saved, "saved a state dict to", path.stat().st_size, path)
    _assert_logged(loaded, "loaded a state dict from", path.stat().st_size, path)


def test_nothing_is_logged_at_the_default_levels(tmp_path, caplog):
    arrays = _arrays()
    save_sharded_safetensors(tmp_path / "model.safetensors", arrays, overwrite=False)
    load_sharded_safetensors(
        tmp_path / "model.safetensors", shardings={"w": arrays["w"].sharding}, names=["w"], max_bytes=1 << 20
    )
    save_safetensors(tmp_path / "host.safetensors", {"w": np.zeros(2)}, overwrite=False)
    load_safetensors(tmp_path / "host.safetensors", max_bytes=16)
    save_msgpack(tmp_path / "state.msgpack", {"w": np.zeros(2)}, overwrite=False)
    load_msgpack(tmp_path / "state.msgpack", {"w": np.zeros(2)}, max_bytes=1024)
    assert [record for record in caplog.records if record.name.startswith("tinax")] == []


def test_a_failed_export_logs_nothing(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tinax")
    (tmp_path / "model.safetensors").write_bytes(b"old")
    with pytest.raises(FileExistsError):
        save_sharded_safetensors(tmp_path / "model.safetensors", _arrays(), overwrite=False)
    assert [record for record in caplog.records if record.name.startswith("tinax")] == []


_QUIET_PROBE = textwrap.dedent(
    """
    import pathlib, sys
    import numpy as np
    from tinax.weights import load_safetensors, save_safetensors
    path = pathlib.Path(sys.argv[1]) / "model.safetensors"
    save_safetensors(path, {"w": np.zeros(4)}, overwrite=False)
    load_safetensors(path, max_bytes=32)
    """
)


def test_an_application_that_configures_no_logging_sees_no_output(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-c", _QUIET_PROBE, str(tmp_path)], capture_output=True, text=True, timeout=300, check=True
    )
    assert (completed.stdout, completed.stderr) == ("", "")


# ---------------------------------------------------------------------------
# Progress


@pytest.mark.parametrize("max_file_bytes", [None, 4096], ids=["one-file", "three-files"])
def test_export_progress_grows_from_zero_to_the_bytes_this_process_writes(tmp_path, max_file_bytes):
    arrays = _arrays()
    calls, record = progress_recorder()
    name = "model.safetensors" if max_file_bytes is None else "model.safetensors.index.json"
    save_sharded_safetensors(tmp_path / name, arrays, overwrite=False, max_file_bytes=max_file_bytes, progress=record)
    assert_progress(calls, _payload_bytes(arrays))


def test_load_progress_grows_from_zero_to_the_bytes_read(tmp_path):
    arrays = _arrays()
    save_sharded_safetensors(tmp_path / "model.safetensors", arrays, overwrite=False)
    calls, record = progress_recorder()
    shardings = {name: array.sharding for name, array in arrays.items()}
    loaded = load_sharded_safetensors(
        tmp_path / "model.safetensors", shardings=shardings, max_bytes=1 << 20, progress=record
    )
    assert_progress(calls, loaded.bytes_read)


def test_progress_moves_within_a_long_shard(tmp_path, monkeypatch):
    from tinax._weights._safetensors import _sharded_load, _sharded_save

    monkeypatch.setattr(_sharded_save, "_WRITE_CHUNK_BYTES", 1024)
    monkeypatch.setattr(_sharded_load, "_READ_CHUNK_BYTES", 1024)
    monkeypatch.setattr(_sharded_load, "STAGING_BATCH_BYTES", 0)
    whole = jax.device_put(jnp.zeros((64, 64), jnp.float32), jax.devices()[0])  # One shard of 16 KiB.
    written, record_written = progress_recorder()
    save_sharded_safetensors(tmp_path / "model.safetensors", {"w": whole}, overwrite=False, progress=record_written)
    assert written == [(done, whole.nbytes) for done in range(0, whole.nbytes + 1, 1024)]
    read, record_read = progress_recorder()
    load_sharded_safetensors(
        tmp_path / "model.safetensors", shardings={"w": whole.sharding}, max_bytes=1 << 20, progress=record_read
    )
    assert read == written


def test_a_callback_that_raises_aborts_the_export_and_publishes_nothing(tmp_path):
    class CancelledError(Exception):
        pass

    def cancel(done: int, total: int | None) -> None:
        if done:
            raise CancelledError

    with pytest.raises(CancelledError):
        save_sharded_safetensors(tmp_path / "model.safetensors", _arrays(), overwrite=False, progress=cancel)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("progress", [True, 1, object()])
def test_a_progress_of_another_kind_is_a_type_error_before_anything_is_written(tmp_path, progress):
    with pytest.raises(TypeError, match=r"progress must be None, 'bar' or a callable progress\(done, total\)"):
        save_sharded_safetensors(tmp_path / "model.safetensors", _arrays(), overwrite=False, progress=progress)
    assert list(tmp_path.iterdir()) == []


def test_a_progress_str_other_than_bar_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="progress must be None, 'bar' or a callable"):
        load_sharded_safetensors(tmp_path / "missing.safetensors", shardings={}, max_bytes=0, progress="tqdm")


def test_a_bar_without_tqdm_or_rich_is_an_import_error_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "rich", None)
    with pytest.raises(ImportError, match=r"tinax\.weights\.save_sharded_safetensors\(progress='bar'\)"):
        save_sharded_safetensors(tmp_path / "model.safetensors", _arrays(), overwrite=False, progress="bar")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ImportError, match=r"tinax\.weights\.load_sharded_safetensors\(progress='bar'\)"):
        load_sharded_safetensors(tmp_path / "missing.safetensors", shardings={}, max_bytes=0, progress="bar")


@pytest.mark.parametrize(
    "library",
    [
        pytest.param("rich", marks=pytest.mark.skipif(not HAS_RICH, reason="rich is not installed here")),
        pytest.param("tqdm", marks=pytest.mark.skipif(not HAS_TQDM, reason="tqdm is not installed here")),
    ],
)
def test_a_bar_shows_the_export_and_the_load_on_stderr(tmp_path, monkeypatch, capsys, library):
    if library == "rich":
        monkeypatch.setitem(sys.modules, "tqdm", None)  # tqdm is preferred where both are installed.
    arrays = _arrays()
    save_sharded_safetensors(tmp_path / "model.safetensors", arrays, overwrite=False, progress="bar")
    shardings = {name: array.sharding for name, array in arrays.items()}
    load_sharded_safetensors(tmp_path / "model.safetensors", shardings=shardings, max_bytes=1 << 20, progress="bar")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("model.safetensors") >= 2


def test_importing_tinax_weights_imports_no_bar_library():
    assert import_side_effects("tinax.weights", watched=("tqdm", "rich"))["integrations"] == []


# ---------------------------------------------------------------------------
# Across processes: each reports and logs its own shards. The body runs in the
# child processes, loaded there from this file.


def _body_across_processes(folder: str) -> dict[str, Any]:
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger = logging.getLogger("tinax")
    logger.setLevel(logging.INFO)
    logger.addHandler(Collect())
    rows = NamedSharding(jax.make_mesh((8,), ("x",)), PartitionSpec("x"))
    whole = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    w = jax.make_array_from_callback(whole.shape, rows, lambda index: whole[index])
    written: ProgressCalls = []
    path = pathlib.Path(folder) / "model.safetensors"
    save_sharded_safetensors(
        path, {"w": w}, overwrite=False, progress=lambda done, total: written.append((done, total))
    )
    read: ProgressCalls = []
    load_sharded_safetensors(
        path, shardings={"w": rows}, max_bytes=1 << 20, progress=lambda done, total: read.append((done, total))
    )
    return {"process": jax.process_index(), "written": written, "read": read, "records": records}


@pytest.mark.timeout(600)
def test_across_processes_each_reports_and_logs_the_bytes_of_its_own_shards(tmp_path):
    results = run_processes(
        _body_across_processes, num_processes=2, devices_per_process=4, args=(str(tmp_path),), timeout=240
    )
    half = 64 * 32 * 4 // 2
    for result in results:
        assert_progress([tuple(call) for call in result["written"]], half)
        assert_progress([tuple(call) for call in result["read"]], half)
        exported, loaded = result["records"]
        whose = f"; the shards of process {result['process']} of 2"
        assert exported.startswith(f"exported 1 tensor to {str(tmp_path / 'model.safetensors')!r}: {half} bytes")
        assert loaded.startswith(f"loaded 1 tensor from {str(tmp_path / 'model.safetensors')!r}: {half} bytes")
        assert exported.endswith(whose)
        assert loaded.endswith(whose)
