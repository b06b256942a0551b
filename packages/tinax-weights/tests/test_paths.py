"""Paths that lead to no file, and folders where a file belongs, in every reader and writer of tinax.weights.

Every such path gives a documented error, never the operating system's bare
OSError: FileNotFoundError (also a ValueError) where no file can exist, and
the same IsADirectoryError (also a ValueError) from both writers where a
folder stands at the destination, as tinax 0.2 raised IsADirectoryError.
A path through a regular file is also a NotADirectoryError, which tinax
0.2's writers raised when the destination's folder was a file.
"""

from __future__ import annotations

import errno
import os
import pathlib
import pickle
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np
import pytest

import tinax._core.files
from tinax.weights import (
    inspect_safetensors,
    load_msgpack,
    load_safetensors,
    load_sharded_safetensors,
    save_msgpack,
    save_safetensors,
    save_sharded_safetensors,
)

# A name no Linux or macOS file system accepts (they allow 255 bytes).
LONG_NAME = "n" * 300


def _through_a_file(root: pathlib.Path) -> tuple[pathlib.Path, int]:
    (root / "plain").write_bytes(b"x")
    return root / "plain" / "inner" / "w.bin", errno.ENOTDIR


def _in_a_file(root: pathlib.Path) -> tuple[pathlib.Path, int]:
    (root / "plain").write_bytes(b"x")
    return root / "plain" / "w.bin", errno.ENOTDIR


def _a_link_to_itself(root: pathlib.Path) -> tuple[pathlib.Path, int]:
    os.symlink(root / "self", root / "self")
    return root / "self", errno.ELOOP


def _a_loop_of_two_links(root: pathlib.Path) -> tuple[pathlib.Path, int]:
    os.symlink(root / "b", root / "a")
    os.symlink(root / "a", root / "b")
    return root / "a", errno.ELOOP


def _a_loop_as_folder(root: pathlib.Path) -> tuple[pathlib.Path, int]:
    os.symlink(root / "loop", root / "loop")
    return root / "loop" / "w.bin", errno.ELOOP


def _a_long_file_name(root: pathlib.Path) -> tuple[pathlib.Path, int]:
    return root / LONG_NAME, errno.ENAMETOOLONG


def _a_long_folder_name(root: pathlib.Path) -> tuple[pathlib.Path, int]:
    return root / LONG_NAME / "w.bin", errno.ENAMETOOLONG


def _a_long_whole_path(root: pathlib.Path) -> tuple[pathlib.Path, int]:
    # Every name fits, but the whole path is longer than PATH_MAX (4096 on Linux).
    return root.joinpath(*["d" * 200] * 25, "w.bin"), errno.ENAMETOOLONG


UNREACHABLE: dict[str, Callable[[pathlib.Path], tuple[pathlib.Path, int]]] = {
    "through-a-file": _through_a_file,
    "in-a-file": _in_a_file,
    "link-to-itself": _a_link_to_itself,
    "loop-of-two-links": _a_loop_of_two_links,
    "loop-as-folder": _a_loop_as_folder,
    "long-file-name": _a_long_file_name,
    "long-folder-name": _a_long_folder_name,
    "long-whole-path": _a_long_whole_path,
}

READERS: dict[str, Callable[[pathlib.Path], object]] = {
    "inspect_safetensors": lambda path: inspect_safetensors(path),
    "load_safetensors": lambda path: load_safetensors(path, max_bytes=1),
    "load_msgpack": lambda path: load_msgpack(path, {"a": 1}, max_bytes=1),
    "load_sharded_safetensors": lambda path: load_sharded_safetensors(path, shardings={}, max_bytes=1),
}

WRITERS: dict[str, Callable[[pathlib.Path, bool], None]] = {
    "save_safetensors": lambda path, overwrite: save_safetensors(path, {"w": np.ones(2)}, overwrite=overwrite),
    "save_msgpack": lambda path, overwrite: save_msgpack(path, {"w": np.ones(2)}, overwrite=overwrite),
    "save_sharded_safetensors": lambda path, overwrite: save_sharded_safetensors(
        path, {"w": jnp.ones(2)}, overwrite=overwrite
    ),
}

# Each writer, and save_sharded_safetensors writing an index with its part files.
EVERY_WRITER: dict[str, Callable[[pathlib.Path, bool], None]] = {
    **WRITERS,
    "save_sharded_safetensors-index": lambda path, overwrite: save_sharded_safetensors(
        path.with_name(path.name + ".safetensors.index.json"), {"w": jnp.ones(2)}, overwrite=overwrite, max_file_bytes=8
    ),
}


def _listing(root: pathlib.Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("case", list(UNREACHABLE))
def test_readers_report_paths_that_lead_to_no_file(tmp_path: pathlib.Path, case: str, reader: str) -> None:
    path, code = UNREACHABLE[case](tmp_path)
    with pytest.raises(FileNotFoundError) as caught:
        READERS[reader](path)
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, NotADirectoryError) == (code == errno.ENOTDIR)
    assert caught.value.errno == code
    assert caught.value.filename == str(path)
    assert "cannot read a" in str(caught.value)
    restored = pickle.loads(pickle.dumps(caught.value))
    assert type(restored) is type(caught.value)
    assert (restored.errno, restored.filename, str(restored)) == (code, str(path), str(caught.value))


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("writer", list(WRITERS))
@pytest.mark.parametrize("case", list(UNREACHABLE))
def test_writers_report_paths_that_lead_to_no_file(
    tmp_path: pathlib.Path, case: str, writer: str, overwrite: bool
) -> None:
    path, _ = UNREACHABLE[case](tmp_path)
    before = _listing(tmp_path)
    with pytest.raises((FileNotFoundError, ValueError)) as caught:
        WRITERS[writer](path, overwrite)
    # A symbolic link (even a looping one) at the destination is refused as a link, with 0.2's ValueError;
    # everything else is a FileNotFoundError: a missing folder as tinax 0.2 reported it, or no possible file.
    if case in ("link-to-itself", "loop-of-two-links"):
        assert "must not be a symbolic link" in str(caught.value)
    else:
        assert isinstance(caught.value, FileNotFoundError)
        assert isinstance(caught.value, ValueError)
        assert isinstance(caught.value, NotADirectoryError) == (case in ("through-a-file", "in-a-file"))
    assert _listing(tmp_path) == before


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("writer", list(EVERY_WRITER))
def test_writers_raise_not_a_directory_error_like_02_when_the_folder_is_a_file(
    tmp_path: pathlib.Path, writer: str, overwrite: bool
) -> None:
    (tmp_path / "afile").write_bytes(b"x")
    with pytest.raises(NotADirectoryError, match="not a directory") as caught:
        EVERY_WRITER[writer](tmp_path / "afile" / "w", overwrite)
    # tinax 0.3 promises a FileNotFoundError that is also a ValueError for a path that leads to no file.
    assert isinstance(caught.value, FileNotFoundError)
    assert isinstance(caught.value, ValueError)
    assert caught.value.errno == errno.ENOTDIR
    assert (tmp_path / "afile").read_bytes() == b"x"


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_name_the_file_system_allows_is_written_however_long(tmp_path: pathlib.Path, writer: str) -> None:
    # 250 bytes is a valid name; the hidden temporary name written first shortens it to fit.
    path = tmp_path / ("t" * 250)
    WRITERS[writer](path, True)
    assert os.listdir(tmp_path) == [path.name]


@pytest.mark.parametrize("overwrite", [False, True])
def test_every_writer_refuses_a_folder_destination_with_the_same_error(tmp_path: pathlib.Path, overwrite: bool) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "kept").write_bytes(b"k")
    errors = []
    for write in WRITERS.values():
        with pytest.raises(IsADirectoryError) as caught:
            write(folder, overwrite)
        errors.append(caught.value)
    first = errors[0]
    for error in errors:
        assert type(error) is type(first)
        assert isinstance(error, ValueError)
        assert error.errno == errno.EISDIR
        assert error.filename == str(folder)
    assert _listing(tmp_path) == ["folder", "folder/kept"]


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_folder_that_takes_the_name_during_the_write_gives_the_same_error(
    tmp_path: pathlib.Path, writer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    destination = tmp_path / "w.bin"
    publish = tinax._core.files._publish

    def folder_appears_first(temporary: pathlib.Path, target: pathlib.Path, *, overwrite: bool) -> None:
        target.mkdir()
        publish(temporary, target, overwrite=overwrite)

    monkeypatch.setattr(tinax._core.files, "_publish", folder_appears_first)
    with pytest.raises(IsADirectoryError) as caught:
        WRITERS[writer](destination, True)
    assert isinstance(caught.value, ValueError)
    assert caught.value.filename == str(destination)
    assert _listing(tmp_path) == ["w.bin"]  # The folder, and no temporary file.
    assert destination.is_dir()


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_link_to_a_folder_is_refused_as_a_link_by_every_writer(tmp_path: pathlib.Path, writer: str) -> None:
    (tmp_path / "folder").mkdir()
    os.symlink(tmp_path / "folder", tmp_path / "link")
    with pytest.raises(ValueError, match="must not be a symbolic link"):
        WRITERS[writer](tmp_path / "link", True)
    assert _listing(tmp_path) == ["folder", "link"]


@pytest.mark.parametrize("reader", list(READERS))
def test_readers_keep_the_errors_of_tinax_0_2_for_missing_files_and_folders(
    tmp_path: pathlib.Path, reader: str
) -> None:
    with pytest.raises(FileNotFoundError):
        READERS[reader](tmp_path / "missing")
    # A folder: IsADirectoryError for safetensors and FileNotFoundError for msgpack, as in 0.2, both ValueErrors.
    expected = FileNotFoundError if reader == "load_msgpack" else IsADirectoryError
    with pytest.raises(expected) as caught:
        READERS[reader](tmp_path)
    assert isinstance(caught.value, ValueError)
