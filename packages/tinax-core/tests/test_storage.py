"""tinax-core's object storage layer against real servers on the loopback interface (gs:// and s3://)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tinax._core import storage
from tinax_testing.object_storage import object_store, start_object_stores  # noqa: F401


def _filesystem(url: str) -> tuple[object, storage.RemotePath]:
    location = storage.as_remote(url, "path")
    assert location is not None
    return storage.filesystem(location, distribution="tinax-weights", needed_by="test"), location


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gs://bucket/a/b.bin", ("gs", "bucket", "a/b.bin")),
        ("s3://bucket/a//b.bin/", ("s3", "bucket", "a/b.bin")),
        ("gs://bucket/a/./b/../c", ("gs", "bucket", "a/c")),
    ],
)
def test_urls_name_a_bucket_and_key(text: str, expected: tuple[str, str, str]) -> None:
    location = storage.as_remote(text, "path")
    assert location is not None
    assert (location.scheme, location.bucket, location.key) == expected
    assert str(location) == f"{expected[0]}://{expected[1]}/{expected[2]}"


def test_an_epath_url_is_a_bucket_location() -> None:
    # Orbax's path type: installed with tinax-checkpointing, not with tinax-core alone.
    epath = pytest.importorskip("etils.epath")

    location = storage.require_location(epath.Path("gs://bucket/run/1"), "path")
    assert location == storage.RemotePath("gs", "bucket", "run/1")
    assert location.parent.joinpath("2") == storage.RemotePath("gs", "bucket", "run/2")


@pytest.mark.parametrize("value", ["weights.safetensors", pathlib.Path("gs:/bucket/x"), "gcs://bucket/x", "file://x"])
def test_local_paths_stay_local(value: object) -> None:
    assert storage.as_remote(value, "path") is None
    assert storage.require_location(value, "path") == pathlib.Path(os.fspath(value))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "needs_key", "message"),
    [
        ("gs://", True, "must name a bucket"),
        ("s3:///key", True, "must name a bucket"),
        ("gs://bucket", True, "must name an object"),
        ("s3://bucket/", True, "must name an object"),
        ("gs://bucket/../other/key", True, "climb out"),
    ],
)
def test_bad_urls_are_value_errors(text: str, needs_key: bool, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        storage.require_location(text, "path", needs_key=needs_key)


def test_a_bucket_root_may_name_a_folder() -> None:
    assert storage.require_location("gs://bucket/", "root", needs_key=False) == storage.RemotePath("gs", "bucket", "")


def test_bytes_are_a_type_error() -> None:
    with pytest.raises(TypeError, match="path must be a str or os.PathLike"):
        storage.require_location(b"gs://bucket/key", "path")


@pytest.mark.parametrize(("scheme", "client", "extra"), [("gs", "gcsfs", "gcs"), ("s3", "s3fs", "s3")])
def test_a_missing_client_names_the_extra(scheme: str, client: str, extra: str) -> None:
    program = textwrap.dedent(
        f"""
        import sys
        sys.modules[{client!r}] = None
        from tinax._core import storage
        location = storage.as_remote("{scheme}://bucket/key", "path")
        try:
            storage.filesystem(location, distribution="tinax-data", needed_by="tinax.data.read_parquet_record")
        except ImportError as error:
            print(error)
        """
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert "tinax.data.read_parquet_record needs" in result.stdout
    assert f'pip install "tinax-data[{extra}]"' in result.stdout


def test_objects_are_read_with_ranges(object_store: str, tmp_path: pathlib.Path) -> None:  # noqa: F811
    fs, location = _filesystem(f"{object_store}/data.bin")
    payload = bytes(range(256)) * 64
    with storage.remote_write(fs, location, overwrite=False) as handle:  # type: ignore[arg-type]
        handle.write(payload)
    with storage.open_to_read(fs, location, kind="test file") as (handle, size):  # type: ignore[arg-type]
        assert size == len(payload)
        handle.seek(1000)
        assert handle.read(10) == payload[1000:1010]
    assert storage.read_range(fs, location, 5, 9) == payload[5:9]  # type: ignore[arg-type]


def test_missing_objects_and_prefixes_are_file_not_found(object_store: str) -> None:  # noqa: F811
    fs, location = _filesystem(f"{object_store}/folder/data.bin")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        storage.open_to_read(fs, location, kind="test file").__enter__()  # type: ignore[arg-type]
    with storage.remote_write(fs, location, overwrite=False) as handle:  # type: ignore[arg-type]
        handle.write(b"x")
    with pytest.raises(FileNotFoundError, match="is a prefix"):
        storage.open_to_read(fs, location.parent, kind="test file").__enter__()  # type: ignore[arg-type]


def test_overwrite_is_the_callers_choice(object_store: str) -> None:  # noqa: F811
    fs, location = _filesystem(f"{object_store}/data.bin")
    with storage.remote_write(fs, location, overwrite=False) as handle:  # type: ignore[arg-type]
        handle.write(b"first")
    with (
        pytest.raises(FileExistsError, match="already exists"),
        storage.remote_write(fs, location, overwrite=False) as handle,
    ):  # type: ignore[arg-type]
        handle.write(b"second")
    assert fs.cat_file(location.fs_path) == b"first"  # type: ignore[attr-defined]
    with storage.remote_write(fs, location, overwrite=True) as handle:  # type: ignore[arg-type]
        handle.write(b"third")
    assert fs.cat_file(location.fs_path) == b"third"  # type: ignore[attr-defined]


def test_a_failed_block_uploads_nothing(object_store: str) -> None:  # noqa: F811
    fs, location = _filesystem(f"{object_store}/data.bin")

    def write_then_fail() -> None:
        with storage.remote_write(fs, location, overwrite=False) as handle:  # type: ignore[arg-type]
            handle.write(b"partial")
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        write_then_fail()
    assert not fs.exists(location.fs_path)  # type: ignore[attr-defined]


def test_racing_writers_one_wins_whole(object_store: str, tmp_path: pathlib.Path) -> None:  # noqa: F811
    fs, location = _filesystem(f"{object_store}/race.bin")
    writers = 6
    sources = []
    for index in range(writers):
        source = tmp_path / f"writer-{index}.bin"
        source.write_bytes(bytes([index]) * 100_000)
        sources.append(source)
    start = threading.Barrier(writers)
    outcomes: list[str] = [""] * writers

    def write(index: int) -> None:
        start.wait()
        try:
            # The existence check of publish_file is skipped: the store's condition alone decides.
            fs.put_file(os.fspath(sources[index]), location.fs_path, mode="create")  # type: ignore[attr-defined]
            outcomes[index] = "won"
        except FileExistsError:
            outcomes[index] = "lost"

    threads = [threading.Thread(target=write, args=(index,)) for index in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["lost"] * (writers - 1) + ["won"]
    winner = outcomes.index("won")
    fs.invalidate_cache()  # type: ignore[attr-defined]
    assert fs.cat_file(location.fs_path) == sources[winner].read_bytes()  # type: ignore[attr-defined]
    with pytest.raises(FileExistsError, match="already exists"):
        storage.publish_file(fs, sources[0], location, overwrite=False)  # type: ignore[arg-type]


_UPLOADER = textwrap.dedent(
    """
    import pathlib, sys
    from tinax._core import storage
    source, url = pathlib.Path(sys.argv[1]), sys.argv[2]
    location = storage.as_remote(url, "path")
    fs = storage.filesystem(location, distribution="tinax-weights", needed_by="test")
    print("uploading", flush=True)
    storage.publish_file(fs, source, location, overwrite=False)
    print("done", flush=True)
    """
)


@pytest.mark.timeout(300)
def test_an_upload_killed_midway_leaves_no_torn_object(object_store: str, tmp_path: pathlib.Path) -> None:  # noqa: F811
    fs, location = _filesystem(f"{object_store}/big.bin")
    source = tmp_path / "big.bin"
    payload = os.urandom(1 << 20) * 96  # Past one resumable chunk (GCS) and one multipart part (S3).
    source.write_bytes(payload)
    child = subprocess.Popen(
        [sys.executable, "-c", _UPLOADER, os.fspath(source), location.url],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "uploading"
    time.sleep(0.5)
    child.kill()
    child.wait()
    child.stdout.close()
    # A request whose body had fully reached the server may still be stored after the kill: watch a while.
    for _ in range(20):
        fs.invalidate_cache()  # type: ignore[attr-defined]
        listed = fs.find(location.parent.fs_path)  # type: ignore[attr-defined]
        # Nothing but the object itself (no part, no temporary name) is ever listed, and the object is whole.
        assert set(listed) <= {location.fs_path}
        if listed:
            assert fs.cat_file(location.fs_path) == payload  # type: ignore[attr-defined]
        time.sleep(0.25)
