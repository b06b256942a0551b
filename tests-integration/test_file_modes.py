"""Every file and folder that a tinax writer creates has the permissions the umask gives.

A weights export or a record file that only its writer can read breaks the
serving process or the colleague that reads it next, so each public writer is
run under two umasks, and an overwrite must keep the replaced file's mode.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import stat
from collections.abc import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from tinax.checkpointing import save_checkpointables
from tinax.data import write_array_record, write_parquet_record
from tinax.weights import save_msgpack, save_safetensors, save_sharded_safetensors


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def _safetensors(path: pathlib.Path, *, overwrite: bool) -> None:
    save_safetensors(path / "w.safetensors", {"w": np.ones((2, 3), np.float32)}, overwrite=overwrite)


def _msgpack(path: pathlib.Path, *, overwrite: bool) -> None:
    save_msgpack(path / "w.msgpack", {"w": np.ones((2, 3), np.float32)}, overwrite=overwrite)


def _sharded(path: pathlib.Path, *, overwrite: bool) -> None:
    mesh = jax.make_mesh((8,), ("x",))
    array = jax.device_put(np.arange(64, dtype=np.float32).reshape(8, 8), NamedSharding(mesh, PartitionSpec("x")))
    arrays = {"a": array, "b": array + 1}
    save_sharded_safetensors(path / "model.safetensors.index.json", arrays, overwrite=overwrite, max_file_bytes=300)


def _parquet(path: pathlib.Path, *, overwrite: bool) -> None:
    write_parquet_record(path / "r.parquet", [{"x": 1, "y": "a"}, {"x": 2, "y": "b"}], overwrite=overwrite)


def _array_record(path: pathlib.Path, *, overwrite: bool) -> None:
    write_array_record(path / "r.array_record", [{"x": 1}, {"x": 2}], overwrite=overwrite)


WRITERS: dict[str, Callable[..., None]] = {
    "save_safetensors": _safetensors,
    "save_msgpack": _msgpack,
    "save_sharded_safetensors": _sharded,
    "write_parquet_record": _parquet,
    "write_array_record": _array_record,
}


def modes(root: pathlib.Path) -> dict[str, int]:
    """The permission bits of everything below ``root``, by relative path."""
    found = {}
    for folder, folders, files in os.walk(root):
        for name in [*folders, *files]:
            path = pathlib.Path(folder, name)
            found[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return found


@pytest.mark.parametrize("mask", [0o022, 0o077], ids=["umask-022", "umask-077"])
@pytest.mark.parametrize("writer", list(WRITERS), ids=list(WRITERS))
def test_each_writer_creates_files_with_the_permissions_the_umask_gives(tmp_path, writer, mask):
    with umask(mask):
        WRITERS[writer](tmp_path, overwrite=False)
    written = modes(tmp_path)
    assert written
    for name, mode in written.items():
        expected = (0o777 if (tmp_path / name).is_dir() else 0o666) & ~mask
        assert mode == expected, f"{name}: {oct(mode)} under umask {oct(mask)}"


@pytest.mark.parametrize("writer", list(WRITERS), ids=list(WRITERS))
def test_overwriting_keeps_the_mode_of_the_replaced_files(tmp_path, writer):
    with umask(0o022):
        WRITERS[writer](tmp_path, overwrite=False)
    for name in modes(tmp_path):
        if (tmp_path / name).is_file():
            (tmp_path / name).chmod(0o640)
    with umask(0o077):
        WRITERS[writer](tmp_path, overwrite=True)
    for name, mode in modes(tmp_path).items():
        if (tmp_path / name).is_file():
            assert mode == 0o640, f"{name}: {oct(mode)}"


@pytest.mark.parametrize("mask", [0o022, 0o077], ids=["umask-022", "umask-077"])
def test_a_checkpoint_has_the_permissions_the_umask_gives(tmp_path, mask):
    with umask(mask):
        save_checkpointables(tmp_path / "ckpt", {"model": {"w": jnp.ones((4,))}}).result()
    written = modes(tmp_path)
    assert "ckpt" in written
    for name, mode in written.items():
        expected = (0o777 if (tmp_path / name).is_dir() else 0o666) & ~mask
        assert mode == expected, f"{name}: {oct(mode)} under umask {oct(mask)}"
