"""``tinax inspect`` on safetensors files, multi-file indexes and msgpack weights, run as a user runs it."""

from __future__ import annotations

import importlib.util
import json
import pathlib
from importlib import metadata

import jax
import numpy as np
import pytest

from tinax._core._command._integrity import install_command
from tinax._core._command._registry import HEAD_BYTES, Probe
from tinax._weights import _sniff
from tinax._weights._safetensors._header import MAX_HEADER_BYTES
from tinax.weights import load_sharded_safetensors, save_msgpack, save_safetensors
from tinax_testing import run_tinax

GIB = 1 << 30
MIB = 1 << 20


@pytest.fixture
def model(tmp_path: pathlib.Path) -> pathlib.Path:
    # The name says nothing: the kind is told from the content.
    path = tmp_path / "weights.bin"
    tensors = {
        "encoder.weight": np.zeros((4, 3), np.float32),
        "encoder.bias": np.zeros((3,), np.float32),
        "head.weight": np.zeros((3, 2), np.int8),
    }
    save_safetensors(path, tensors, overwrite=False, metadata={"format": "pt"}, max_metadata_bytes=1024)
    return path


def test_safetensors_lists_tensors_and_metadata(model):
    result = run_tinax("inspect", str(model))
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "kind:               safetensors"
    assert "tensors:            3" in lines
    assert "total tensor bytes: 66" in lines
    assert "  encoder.weight  F32    (4, 3)     48" in lines
    document = run_tinax("inspect", str(model), "--json").json()
    assert document["kind"] == "safetensors"
    assert document["summary"]["metadata"] == {"format": "pt"}
    assert document["tables"]["tensors"]["rows"][0] == {
        "name": "encoder.bias",
        "dtype": "F32",
        "shape": [3],
        "bytes": 12,
    }
    assert document["bytes_read"] > 0


def test_names_filters_tensors(model):
    document = run_tinax("inspect", str(model), "--names", "encoder.*", "--json").json()
    assert [row["name"] for row in document["tables"]["tensors"]["rows"]] == ["encoder.bias", "encoder.weight"]
    assert document["summary"]["matching_tensors"] == 2
    assert document["summary"]["tensors"] == 3


def test_an_invalid_header_exits_1_with_the_loaders_message(model):
    data = bytearray(model.read_bytes())
    # Claim more data than the file holds: the header reader refuses it.
    data = data[:-10]
    model.write_bytes(bytes(data))
    result = run_tinax("inspect", str(model))
    assert result.code == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"tinax inspect: {model} is not a valid safetensors file:")
    assert result.stdout == ""


def test_a_one_gib_file_is_inspected_from_its_header_alone(tmp_path):
    path = tmp_path / "big.safetensors"
    count = GIB // 4
    header = json.dumps({"big": {"dtype": "F32", "shape": [count], "data_offsets": [0, GIB]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as handle:
        handle.write(len(header).to_bytes(8, "little") + header)
        # A sparse payload: the size is real, the blocks are not written.
        handle.truncate(8 + len(header) + GIB)
    assert path.stat().st_size > GIB
    document = run_tinax("inspect", str(path), "--json").json()
    assert document["summary"]["total_tensor_bytes"] == GIB
    # The header reader's own count (plus the detection's), not a timing.
    assert document["bytes_read"] < MIB


def _write_index(folder: pathlib.Path) -> pathlib.Path:
    save_safetensors(folder / "model-00001-of-00002.safetensors", {"a": np.ones((2, 2), np.float32)}, overwrite=False)
    save_safetensors(folder / "model-00002-of-00002.safetensors", {"b": np.ones((5,), np.int32)}, overwrite=False)
    index = folder / "model.safetensors.index.json"
    weight_map = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    index.write_text(json.dumps({"metadata": {"total_size": 36}, "weight_map": weight_map}))
    return index


def test_a_multi_file_index_lists_each_tensor_with_its_file(tmp_path):
    index = _write_index(tmp_path)
    result = run_tinax("inspect", str(index), "--json")
    document = result.json()
    assert result.code == 0
    assert document["kind"] == "safetensors-index"
    assert document["summary"]["files"] == 2
    assert document["tables"]["tensors"]["rows"] == [
        {"name": "a", "dtype": "F32", "shape": [2, 2], "bytes": 16, "file": "model-00001-of-00002.safetensors"},
        {"name": "b", "dtype": "I32", "shape": [5], "bytes": 20, "file": "model-00002-of-00002.safetensors"},
    ]
    text = run_tinax("inspect", str(index), "--names", "b").stdout
    assert "model-00002-of-00002.safetensors" in text
    assert "model-00001-of-00002.safetensors" not in text


def test_an_index_whose_metadata_comes_first_is_recognised_as_the_loader_reads_it(tmp_path):
    # Hugging Face writes "metadata" before "weight_map"; here the metadata
    # block (about 6 KB) pushes the key past detection's first 4 KiB read.
    _write_index(tmp_path)
    index = tmp_path / "model.safetensors.index.json"
    weight_map = json.loads(index.read_text())["weight_map"]
    notes = {f"note_{number}": "x" * 100 for number in range(60)}
    index.write_text(json.dumps({"metadata": {"total_size": 36, **notes}, "weight_map": weight_map}, indent=2))
    assert index.read_bytes().index(b'"weight_map"') > 6000
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    loaded = load_sharded_safetensors(index, shardings=lambda name, info: device, max_bytes=1 << 20)
    result = run_tinax("inspect", str(index), "--json")
    assert result.code == 0, result.stderr
    document = result.json()
    assert document["kind"] == "safetensors-index"
    assert [row["name"] for row in document["tables"]["tensors"]["rows"]] == sorted(loaded.tensors)
    # The index is read whole by the inspector and up to the key by detection.
    assert document["bytes_read"] > index.stat().st_size + 6000


def test_damaged_files_print_an_error_document_with_json(tmp_path, model):
    data = model.read_bytes()
    model.write_bytes(data[:-10])
    text = run_tinax("inspect", str(model))
    result = run_tinax("inspect", str(model), "--json")
    assert result.code == text.code == 1
    assert result.stderr == text.stderr
    document = result.json()
    assert document["ok"] is False
    assert document["kind"] == "safetensors"
    assert document["path"] == str(model)
    assert document["error"]["type"] == "unreadable"
    assert document["error"]["exception"] == "MalformedSafetensorsError"  # a ValueError
    assert f"tinax inspect: {document['error']['message']}\n" == text.stderr
    (tmp_path / "sharded").mkdir()
    index = _write_index(tmp_path / "sharded")
    (tmp_path / "sharded" / "model-00002-of-00002.safetensors").unlink()
    document = run_tinax("inspect", str(index), "--json").json()
    assert document["error"]["type"] == "unreadable"
    assert document["kind"] == "safetensors-index"


def test_an_index_naming_a_missing_file_exits_1(tmp_path):
    index = _write_index(tmp_path)
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    result = run_tinax("inspect", str(index))
    assert result.code == 1
    (line,) = result.stderr.strip().splitlines()
    assert "maps 1 tensors (first 'b') to 'model-00002-of-00002.safetensors', which is not a file" in line


def test_msgpack_lists_the_leaves(tmp_path):
    path = tmp_path / "state"
    save_msgpack(
        path,
        {"params": {"dense": {"kernel": np.zeros((3, 2), np.float32), "bias": np.zeros(2, np.float32)}}, "step": 7},
        overwrite=False,
    )
    result = run_tinax("inspect", str(path), "--json")
    assert result.code == 0, result.stderr
    document = result.json()
    assert document["kind"] == "msgpack"
    assert document["tables"]["leaves"]["rows"] == [
        {"name": "params/dense/kernel", "type": "array", "dtype": "float32", "shape": [3, 2], "bytes": 24},
        {"name": "params/dense/bias", "type": "array", "dtype": "float32", "shape": [2], "bytes": 8},
        {"name": "step", "type": "int", "dtype": None, "shape": None, "bytes": None},
    ]
    assert document["bytes_read"] >= path.stat().st_size
    assert "params/dense/kernel  array  float32  (3, 2)     24" in run_tinax("inspect", str(path)).stdout


def test_msgpack_damaged_or_over_the_limit_exits_1(tmp_path):
    path = tmp_path / "state.msgpack"
    save_msgpack(path, {"w": np.zeros((64,), np.float32)}, overwrite=False)
    assert run_tinax("inspect", str(path), "--max-bytes", "100").code == 1
    assert "more than --max-bytes=100" in run_tinax("inspect", str(path), "--max-bytes", "100").stderr
    path.write_bytes(path.read_bytes()[:-7])
    result = run_tinax("inspect", str(path))
    assert result.code == 1
    (line,) = result.stderr.strip().splitlines()
    assert "truncated" in line


def test_a_checkpoint_folder_names_the_distribution_to_install(tmp_path):
    # On an inference host with tinax-weights alone (the isolation run), a
    # checkpoint folder is recognised and the missing distribution named.
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    (folder / "_CHECKPOINT_METADATA").write_text("{}")
    (folder / "orbax.checkpoint").write_text("")
    result = run_tinax("inspect", str(folder))
    assert result.code == 1
    if importlib.util.find_spec("tinax.checkpointing") is None:
        # tinax-core knows no format: the message lists what is installed and what installs every inspector,
        # with the tool that installed tinax-core (`python -m pip` fails in an environment uv made).
        install = install_command(["tinax"], metadata.distribution("tinax-core"))
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"tinax inspect: cannot tell what {str(folder)!r} is from its content; ")
        assert "the installed tinax distributions inspect: msgpack weights file" in line
        assert line.endswith(f"; {install} adds those of every tinax distribution")
    else:
        assert "incomplete checkpoint" in result.stdout


# --- telling the kinds from their content ------------------------------------------------------


def _sniffed(path: pathlib.Path) -> tuple[dict[str, bool], int]:
    """What each of tinax-weights' sniffers says of ``path``, and the bytes they read together."""
    with open(path, "rb", buffering=0) as handle:
        probe = Probe(path, handle)
        answers = {name: inspector.sniff(probe) for name, inspector in _INSPECTORS.items()}
    return answers, probe.bytes_read


_INSPECTORS = {"safetensors": _sniff.SAFETENSORS, "safetensors-index": _sniff.INDEX, "msgpack": _sniff.MSGPACK}


def test_the_index_bound_is_the_loaders():
    assert _sniff.INDEX_MAX_BYTES == MAX_HEADER_BYTES


def test_each_file_is_recognised_by_its_own_sniffer_alone(tmp_path, model):
    save_msgpack(tmp_path / "state", {"w": np.zeros(3, np.float32)}, overwrite=False)
    index = _write_index(tmp_path)
    assert _sniffed(model)[0] == {"safetensors": True, "safetensors-index": False, "msgpack": False}
    assert _sniffed(index)[0] == {"safetensors": False, "safetensors-index": True, "msgpack": False}
    assert _sniffed(tmp_path / "state")[0] == {"safetensors": False, "safetensors-index": False, "msgpack": True}


def _index(metadata_bytes: int) -> bytes:
    document = {
        "metadata": {"total_size": 16, "notes": "x" * metadata_bytes},
        "weight_map": {"a": "model-00001-of-00001.safetensors"},
    }
    return json.dumps(document, indent=2).encode()


@pytest.mark.parametrize("metadata_bytes", [10, 6_000, 3 << 20])
def test_an_index_is_detected_wherever_its_weight_map_starts(tmp_path, metadata_bytes):
    # Hugging Face writes "metadata" before "weight_map"; a large metadata
    # block pushes the key past the first read.
    path = tmp_path / "model.safetensors.index.json"
    data = _index(metadata_bytes)
    path.write_bytes(data)
    answers, bytes_read = _sniffed(path)
    assert answers["safetensors-index"]
    # Detection stops within one read of the key.
    assert bytes_read < data.index(b'"weight_map"') + len(b'"weight_map"') + MIB
    if metadata_bytes > HEAD_BYTES:
        assert bytes_read > HEAD_BYTES


def test_a_weight_map_key_across_the_first_reads_end_is_found(tmp_path):
    key = b'"weight_map"'
    for split in range(1, len(key)):
        prefix = b'{"metadata": {"notes": "' + b"x" * (HEAD_BYTES - split - 28) + b'"}, '
        data = prefix + key + b': {"a": "m.safetensors"}}'
        assert data.index(key) == HEAD_BYTES - split
        path = tmp_path / f"index-{split}.json"
        path.write_bytes(data)
        assert _sniffed(path)[0]["safetensors-index"], split


def test_a_json_object_without_a_weight_map_is_not_an_index(tmp_path):
    path = tmp_path / "config.json"
    data = json.dumps({"notes": "x" * 50_000}).encode()
    path.write_bytes(data)
    assert _sniffed(path) == ({"safetensors": False, "safetensors-index": False, "msgpack": False}, len(data))


def test_detection_reads_no_more_of_a_json_object_than_the_loader_would(tmp_path, monkeypatch):
    monkeypatch.setattr(_sniff, "INDEX_MAX_BYTES", 20_000)
    path = tmp_path / "model.safetensors.index.json"
    path.write_bytes(_index(30_000))
    assert _sniffed(path) == ({"safetensors": False, "safetensors-index": False, "msgpack": False}, 20_000)


def test_a_glob_of_safetensors_files_is_a_usage_error_naming_the_kind(model):
    # Record files are described as one dataset by a pattern; weights files are described one at a time.
    pattern = str(model.parent / "*.bin")
    result = run_tinax("inspect", pattern)
    assert result.code == 2
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert f"PATH {pattern!r} does not exist" in line
    assert "give one file" in line
