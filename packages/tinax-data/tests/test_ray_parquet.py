"""A folder of Parquet files that Ray Data writes, read by ``read_parquet_record`` as one dataset.

A local Ray instance (one CPU, no dashboard) runs on this machine and
writes rows with ``ray.data.Dataset.write_parquet``. The reference is each
file read on its own with pyarrow, in the order of the file names, so the
test assumes nothing about how Ray names or fills its files; tinax must give
exactly those rows, every row once.

Ray is installed only in the `interop` environment (see hatch.toml), which
`hatch run test:all` runs; everywhere else this test skips.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from typing import Any

import pyarrow.parquet as pq
import pytest

from tinax.data import read_parquet_record

ray = pytest.importorskip("ray", reason="Ray is installed in the interop environment only (hatch run interop:test)")
pytest.importorskip("ray.data")

ROWS = 60
BLOCKS = 4


@pytest.fixture
def local_ray(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A local Ray instance for one test: on the loopback address, reporting nothing, its files removed after."""
    # No usage report and no token file in the home folder; the processes Ray starts inherit these.
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    # Ray's sockets live in its temporary folder, and a socket's path may not exceed about 100 bytes, which a test
    # runner's deep TMPDIR (or tmp_path) can reach: the folder goes straight into /tmp wherever there is one.
    session_folder = tempfile.mkdtemp(prefix="ray-", dir="/tmp" if os.path.isdir("/tmp") else None)
    ray.init(
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
        _temp_dir=session_folder,
    )
    try:
        with warnings.catch_warnings():
            # Ray Data's own defaults set options it has deprecated when its context is first made.
            warnings.simplefilter("ignore", DeprecationWarning)
            ray.data.DataContext.get_current()
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(session_folder, ignore_errors=True)


def _row(index: int) -> dict[str, Any]:
    return {"id": index, "score": index / 4, "text": f"row {index}", "vector": [float(index), -float(index)]}


@pytest.mark.timeout(240)
# Ray starts its processes with subprocess and a preexec_fn, so Python forks before it runs the new program; JAX,
# whose CPU devices this test folder's conftest set up, warns on any fork. The child runs no JAX code.
@pytest.mark.filterwarnings(r"ignore:os\.fork\(\) was called:RuntimeWarning")
def test_read_parquet_record_reads_the_folder_ray_data_wrote(local_ray, tmp_path):
    folder = tmp_path / "rows"
    rows = [_row(index) for index in range(ROWS)]
    ray.data.from_items(rows, override_num_blocks=BLOCKS).write_parquet(str(folder))

    paths = sorted((path for path in folder.rglob("*") if path.is_file()), key=lambda path: path.as_posix())
    assert len(paths) > 1
    assert all(path.suffix == ".parquet" for path in paths)
    expected = [row for path in paths for row in pq.read_table(path).to_pylist()]

    dataset = read_parquet_record(folder)
    assert [dataset[index] for index in range(len(dataset))] == expected
    assert sorted(row["id"] for row in expected) == list(range(ROWS))
    assert all(row == _row(row["id"]) for row in expected)
    # A glob pattern and a list of the files give the same dataset.
    for path in (str(folder / "*.parquet"), [str(path) for path in reversed(paths)]):
        again = read_parquet_record(path)
        assert [again[index] for index in range(len(again))] == expected
