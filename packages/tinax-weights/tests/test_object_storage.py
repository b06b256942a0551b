"""tinax.weights on gs:// and s3:// URLs, against real servers on the loopback interface."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import threading
import time

import jax
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from tinax.weights import (
    TensorManifest,
    TensorRule,
    inspect_safetensors,
    load_msgpack,
    load_safetensors,
    load_sharded_safetensors,
    save_msgpack,
    save_safetensors,
    save_sharded_safetensors,
)
from tinax_testing.object_storage import object_store, skip_module_without_stores  # noqa: F401

# tinax-weights installed alone has no storage extras (nor etils); there this module is skipped.
skip_module_without_stores()

import fsspec  # noqa: E402
from etils import epath  # noqa: E402


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "bf16": rng.standard_normal((3, 5)).astype(ml_dtypes.bfloat16),
        "f8": rng.standard_normal(7).astype(ml_dtypes.float8_e4m3fn),
        "i64": np.arange(12, dtype=np.int64).reshape(3, 4),
        "transposed": np.arange(6, dtype=np.float32).reshape(2, 3).T,
        "empty": np.zeros((0, 4), np.float32),
        "big_endian": np.arange(5, dtype=">f4"),
    }


def _object_bytes(url: str) -> bytes:
    return bytes(fsspec.filesystem(url.partition("://")[0]).cat_file(url.partition("://")[2]))


def _assert_same(loaded: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert sorted(loaded) == sorted(expected)
    for name, array in expected.items():
        assert loaded[name].dtype == array.dtype.newbyteorder("=")
        np.testing.assert_array_equal(loaded[name], array)


@pytest.mark.parametrize("as_epath", [False, True])
def test_safetensors_round_trip(object_store: str, tmp_path, as_epath: bool) -> None:  # noqa: F811
    url = f"{object_store}/model.safetensors"
    path = epath.Path(url) if as_epath else url
    tensors = _tensors()
    save_safetensors(path, tensors, overwrite=False, metadata={"k": "v"}, max_metadata_bytes=64)
    save_safetensors(
        tmp_path / "local.safetensors", tensors, overwrite=False, metadata={"k": "v"}, max_metadata_bytes=64
    )
    # The object holds the very bytes of the local file.
    assert _object_bytes(url) == (tmp_path / "local.safetensors").read_bytes()
    info = inspect_safetensors(path, max_metadata_bytes=64)
    assert info == inspect_safetensors(tmp_path / "local.safetensors", max_metadata_bytes=64)
    loaded = load_safetensors(path, max_bytes=1 << 20, max_metadata_bytes=64)
    _assert_same(dict(loaded.tensors), tensors)
    assert loaded.metadata == {"k": "v"}
    some = load_safetensors(path, max_bytes=1 << 20, names=["i64", "bf16"], max_metadata_bytes=64)
    assert list(some.tensors) == ["i64", "bf16"]
    _assert_same(dict(some.tensors), {name: tensors[name] for name in ("i64", "bf16")})


def test_one_of_many_tensors_is_read_within_its_budget(object_store: str, monkeypatch) -> None:  # noqa: F811
    from tinax._weights import _remote

    url = f"{object_store}/many.safetensors"
    tensors = {f"t{index:02d}": np.full(4 * 1024, index, np.float32) for index in range(64)}
    save_safetensors(url, tensors, overwrite=False)
    # Every byte that comes from the store passes through the opened object's fetch.
    fetched: list[int] = []
    fetch = _remote.ObjectFile.fetch
    monkeypatch.setattr(_remote.ObjectFile, "fetch", lambda self, ranges: _counted(fetch(self, ranges), fetched))
    one = tensors["t37"].nbytes
    loaded = load_safetensors(url, max_bytes=one, names=["t37"])
    np.testing.assert_array_equal(loaded.tensors["t37"], tensors["t37"])
    assert sum(fetched) <= 2 * one  # The header's first read and the tensor's bytes.
    with pytest.raises(ValueError, match="max_bytes"):
        load_safetensors(url, max_bytes=one - 1, names=["t37"])


def _counted(pieces: list[bytes], fetched: list[int]) -> list[bytes]:
    fetched.extend(len(piece) for piece in pieces)
    return pieces


def test_large_file_loads_whole(object_store: str) -> None:  # noqa: F811
    # Spans several fetched pieces, with tensors that straddle their boundaries.
    from tinax._weights import _remote

    url = f"{object_store}/large.safetensors"
    rng = np.random.default_rng(1)
    tensors = {
        f"t{index}": rng.integers(0, 255, size=size, dtype=np.uint8)
        for index, size in enumerate([3, 700_001, 5, 1_300_000, 11])
    }
    save_safetensors(url, tensors, overwrite=False)
    original = _remote.PIECE_BYTES, _remote.PIECES_IN_FLIGHT
    _remote.PIECE_BYTES, _remote.PIECES_IN_FLIGHT = 256 * 1024, 3
    try:
        loaded = load_safetensors(url, max_bytes=1 << 22)
    finally:
        _remote.PIECE_BYTES, _remote.PIECES_IN_FLIGHT = original
    _assert_same(dict(loaded.tensors), tensors)


def test_manifest_loads_from_a_bucket(object_store: str) -> None:  # noqa: F811
    url = f"{object_store}/model.safetensors"
    save_safetensors(url, {"a": np.arange(4, dtype=np.float32)}, overwrite=False)
    manifest = TensorManifest([TensorRule("a", "b", lambda array: array.reshape(2, 2), expected_shape=(2, 2))])
    loaded = manifest.load(url, max_bytes=16)
    np.testing.assert_array_equal(loaded["b"], np.arange(4, dtype=np.float32).reshape(2, 2))


def test_msgpack_round_trip(object_store: str, tmp_path) -> None:  # noqa: F811
    url = f"{object_store}/state.msgpack"
    state = {
        "params": {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.zeros(2, ml_dtypes.bfloat16)},
        "step": 3,
    }
    save_msgpack(epath.Path(url), state, overwrite=False)
    save_msgpack(tmp_path / "state.msgpack", state, overwrite=False)
    assert _object_bytes(url) == (tmp_path / "state.msgpack").read_bytes()
    restored = load_msgpack(url, state, max_bytes=1 << 20)
    assert restored["step"] == 3
    np.testing.assert_array_equal(restored["params"]["w"], state["params"]["w"])
    assert restored["params"]["b"].dtype == ml_dtypes.bfloat16
    with pytest.raises(ValueError, match="max_bytes"):
        load_msgpack(url, state, max_bytes=8)


def test_overwrite_false_refuses_an_existing_object(object_store: str) -> None:  # noqa: F811
    url = f"{object_store}/model.safetensors"
    save_safetensors(url, {"a": np.ones(2, np.float32)}, overwrite=False)
    with pytest.raises(FileExistsError):
        save_safetensors(url, {"a": np.zeros(2, np.float32)}, overwrite=False)
    np.testing.assert_array_equal(load_safetensors(url, max_bytes=8).tensors["a"], np.ones(2, np.float32))
    save_safetensors(url, {"a": np.zeros(2, np.float32)}, overwrite=True)
    np.testing.assert_array_equal(load_safetensors(url, max_bytes=8).tensors["a"], np.zeros(2, np.float32))
    state_url = f"{object_store}/state.msgpack"
    save_msgpack(state_url, {"a": 1}, overwrite=False)
    with pytest.raises(FileExistsError):
        save_msgpack(state_url, {"a": 2}, overwrite=False)
    assert load_msgpack(state_url, {"a": 0}, max_bytes=64) == {"a": 1}


def test_missing_objects_are_file_not_found(object_store: str) -> None:  # noqa: F811
    with pytest.raises(FileNotFoundError):
        load_safetensors(f"{object_store}/absent.safetensors", max_bytes=8)
    with pytest.raises(FileNotFoundError):
        inspect_safetensors(f"{object_store}/absent.safetensors")
    with pytest.raises(FileNotFoundError):
        load_msgpack(f"{object_store}/absent.msgpack", {"a": 0}, max_bytes=8)


def test_racing_writers_one_wins_whole(object_store: str) -> None:  # noqa: F811
    url = f"{object_store}/raced.safetensors"
    contenders = {index: {"a": np.full(1024, index, np.int32)} for index in range(2)}
    start = threading.Barrier(2)

    def write(index: int) -> str:
        start.wait()
        try:
            save_safetensors(url, contenders[index], overwrite=False)
        except FileExistsError:
            return "refused"
        return "won"

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(write, range(2)))
    assert sorted(outcomes) == ["refused", "won"]
    winner = outcomes.index("won")
    np.testing.assert_array_equal(load_safetensors(url, max_bytes=4096).tensors["a"], contenders[winner]["a"])


_KILLED_WRITER = """
import sys
import numpy as np
from tinax._core import storage
from tinax.weights import save_safetensors

original = storage.publish_file
def announced(*args, **kwargs):
    print("uploading", flush=True)
    original(*args, **kwargs)
storage.publish_file = announced
save_safetensors(sys.argv[1], {f"t{i}": np.full(4 * 1024 * 1024, i, np.float32) for i in range(4)}, overwrite=False)
print("done", flush=True)
"""


def test_a_killed_writer_leaves_no_torn_object(object_store: str) -> None:  # noqa: F811
    url = f"{object_store}/killed.safetensors"
    with subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, url], stdout=subprocess.PIPE, env=os.environ.copy(), text=True
    ) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "uploading"
        time.sleep(0.2)  # Well into the upload of 64 MiB.
        child.kill()
        child.wait(timeout=60)
    scheme, _, key = url.partition("://")
    fs = fsspec.filesystem(scheme)
    fs.invalidate_cache()
    assert fs.find(key.rpartition("/")[0]) in ([], [key])
    if fs.exists(key):  # Only a complete object may be there.
        assert len(load_safetensors(url, max_bytes=1 << 26).tensors) == 4
    else:
        with pytest.raises(FileNotFoundError):
            load_safetensors(url, max_bytes=1 << 26)


_WITHOUT_CLIENT = """
import sys
sys.modules[sys.argv[1]] = None  # As if the extra were not installed.
import numpy as np
from tinax import weights
url = sys.argv[2]
calls = [
    lambda: weights.inspect_safetensors(url),
    lambda: weights.load_safetensors(url, max_bytes=8),
    lambda: weights.save_safetensors(url, {"a": np.zeros(1)}, overwrite=False),
    lambda: weights.load_msgpack(url, {"a": 0}, max_bytes=8),
    lambda: weights.save_msgpack(url, {"a": 0}, overwrite=False),
    lambda: weights.load_sharded_safetensors(url, shardings={}, max_bytes=8),
]
for call in calls:
    try:
        call()
    except ImportError as error:
        print(error)
    else:
        print("no error")
"""


@pytest.mark.parametrize("scheme", ["gs", "s3"])
def test_a_missing_client_names_the_extra(scheme: str) -> None:
    extra, client = {"gs": ("gcs", "gcsfs"), "s3": ("s3", "s3fs")}[scheme]
    url = f"{scheme}://bucket/model.safetensors"
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_CLIENT, client, url], capture_output=True, text=True, check=True, timeout=120
    )
    lines = result.stdout.splitlines()
    assert len(lines) == 6, result.stdout
    assert all(f"tinax-weights[{extra}]" in line for line in lines), result.stdout


def test_importing_the_module_imports_no_storage_client() -> None:
    code = "import sys, tinax.weights; print(sorted(m for m in ('fsspec', 'gcsfs', 's3fs') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert result.stdout.strip() == "[]"


def _rows() -> NamedSharding:
    return NamedSharding(Mesh(np.array(jax.devices()), ("x",)), PartitionSpec("x"))


def _columns() -> NamedSharding:
    return NamedSharding(Mesh(np.array(jax.devices()).reshape(2, 4), ("a", "b")), PartitionSpec(None, ("a", "b")))


def _global_arrays() -> dict[str, jax.Array]:
    return {
        "rows": jax.device_put(np.arange(64, dtype=np.float32).reshape(16, 4), _rows()),
        "columns": jax.device_put(np.arange(96, dtype=np.int32).reshape(6, 16), _columns()),
        "replicated": jax.device_put(np.arange(5, dtype=np.float32), NamedSharding(_rows().mesh, PartitionSpec())),
    }


def _shardings() -> dict[str, NamedSharding]:
    return {"rows": _rows(), "columns": _columns(), "replicated": NamedSharding(_rows().mesh, PartitionSpec())}


def _assert_loaded(loaded: dict[str, jax.Array], arrays: dict[str, jax.Array]) -> None:
    for name, array in arrays.items():
        assert loaded[name].sharding == _shardings()[name]
        np.testing.assert_array_equal(np.asarray(loaded[name]), np.asarray(array))


def test_sharded_single_file_round_trip(object_store: str, tmp_path) -> None:  # noqa: F811
    url = f"{object_store}/model.safetensors"
    arrays = _global_arrays()
    save_sharded_safetensors(epath.Path(url), arrays, overwrite=False)
    save_sharded_safetensors(tmp_path / "model.safetensors", arrays, overwrite=False)
    assert _object_bytes(url) == (tmp_path / "model.safetensors").read_bytes()
    with pytest.raises(FileExistsError):
        save_sharded_safetensors(url, arrays, overwrite=False)
    loaded = load_sharded_safetensors(url, shardings=_shardings(), max_bytes=1 << 20)
    _assert_loaded(dict(loaded.arrays), arrays)
    assert loaded.bytes_read == sum(array.nbytes for array in arrays.values())


def test_sharded_index_round_trip_and_replacement(object_store: str, tmp_path) -> None:  # noqa: F811
    index = f"{object_store}/model.safetensors.index.json"
    arrays = _global_arrays()
    save_sharded_safetensors(index, arrays, overwrite=False, max_file_bytes=300)
    save_sharded_safetensors(tmp_path / "model.safetensors.index.json", arrays, overwrite=False, max_file_bytes=300)
    scheme, _, key = object_store.partition("://")
    fs = fsspec.filesystem(scheme)
    fs.invalidate_cache()
    names = sorted(path.rpartition("/")[2] for path in fs.find(key))
    assert names == sorted(path.name for path in tmp_path.iterdir())
    for name in names:
        assert _object_bytes(f"{object_store}/{name}") == (tmp_path / name).read_bytes()
    loaded = load_sharded_safetensors(index, shardings=_shardings(), max_bytes=1 << 20)
    _assert_loaded(dict(loaded.arrays), arrays)
    with pytest.raises(FileExistsError):
        save_sharded_safetensors(index, arrays, overwrite=False, max_file_bytes=300)

    # A replacement publishes new files, then the index, then removes the old files.
    doubled = {name: array * 2 for name, array in arrays.items()}
    save_sharded_safetensors(index, doubled, overwrite=True, max_file_bytes=300)
    fs.invalidate_cache()
    assert not set(names) - {"model.safetensors.index.json"} & {path.rpartition("/")[2] for path in fs.find(key)}
    _assert_loaded(dict(load_sharded_safetensors(index, shardings=_shardings(), max_bytes=1 << 20).arrays), doubled)


def test_an_export_without_its_index_is_refused(object_store: str) -> None:  # noqa: F811
    import tinax._weights._safetensors._sharded_save as sharded_save

    index = f"{object_store}/model.safetensors.index.json"
    original = sharded_save._as_leader
    sharded_save._as_leader = lambda action, failure: None  # The export stops before its index.
    try:
        save_sharded_safetensors(index, _global_arrays(), overwrite=False, max_file_bytes=300)
    finally:
        sharded_save._as_leader = original
    scheme, _, key = object_store.partition("://")
    fs = fsspec.filesystem(scheme)
    fs.invalidate_cache()
    assert len(fs.find(key)) == 2  # The files are there; the index is not.
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_sharded_safetensors(index, shardings=_shardings(), max_bytes=1 << 20)
    with pytest.raises(FileNotFoundError, match="prefix"):
        load_sharded_safetensors(object_store, shardings=_shardings(), max_bytes=1 << 20)


def test_an_index_naming_a_missing_object_is_refused(object_store: str) -> None:  # noqa: F811
    index = f"{object_store}/model.safetensors.index.json"
    save_sharded_safetensors(index, _global_arrays(), overwrite=False, max_file_bytes=300)
    scheme, _, key = object_store.partition("://")
    fs = fsspec.filesystem(scheme)
    fs.invalidate_cache()
    part = next(path for path in fs.find(key) if path.endswith("-00001-of-00002.safetensors"))
    fs.rm_file(part)
    with pytest.raises(FileNotFoundError, match="not an object"):
        load_sharded_safetensors(index, shardings=_shardings(), max_bytes=1 << 20)


def test_tinax_inspect_reads_objects(object_store: str) -> None:  # noqa: F811
    from tinax_testing import run_tinax

    url = f"{object_store}/weights.bin"  # The kind is told from the content.
    save_safetensors(
        url, {"w": np.zeros((4, 3), np.float32)}, overwrite=False, metadata={"f": "pt"}, max_metadata_bytes=64
    )
    document = run_tinax("inspect", url, "--json").json()
    assert document["kind"] == "safetensors"
    assert document["summary"]["metadata"] == {"f": "pt"}
    assert document["tables"]["tensors"]["rows"] == [{"name": "w", "dtype": "F32", "shape": [4, 3], "bytes": 48}]

    index = f"{object_store}/model.safetensors.index.json"
    save_sharded_safetensors(index, _global_arrays(), overwrite=False, max_file_bytes=300)
    document = run_tinax("inspect", index, "--json").json()
    assert document["kind"] == "safetensors-index"
    assert document["summary"]["files"] == 2
    assert {row["name"] for row in document["tables"]["tensors"]["rows"]} == {"rows", "columns", "replicated"}

    state = f"{object_store}/state.msgpack"
    save_msgpack(state, {"params": {"w": np.ones(3, np.float32)}, "step": 1}, overwrite=False)
    document = run_tinax("inspect", state, "--json").json()
    assert document["kind"] == "msgpack"
    assert document["summary"]["leaves"] == 2


def test_an_object_replaced_while_read_is_refused(object_store: str) -> None:  # noqa: F811
    from tinax._weights._remote import ObjectChangedError, location_to_read, open_to_read

    url = f"{object_store}/model.safetensors"
    save_safetensors(url, {"a": np.zeros(1024, np.float32)}, overwrite=False)
    with open_to_read(location_to_read(url, "path"), kind="safetensors file", needed_by="test") as (handle, size):
        first = handle.read(16)
        # Same size and header, other values: only the version tells the two apart.
        save_safetensors(url, {"a": np.ones(1024, np.float32)}, overwrite=True)
        handle.seek(size - 16)
        with pytest.raises(ObjectChangedError, match="replaced or removed"):
            handle.read(16)
    assert len(first) == 16
    # A new load reads the new object whole.
    np.testing.assert_array_equal(load_safetensors(url, max_bytes=4096).tensors["a"], np.ones(1024, np.float32))
