"""Atomic writes (by handle and by path) and the checked open of files to read."""

import contextlib
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from tinax._core.files import atomic_path, atomic_write, open_regular_file

Put = Callable[[bytes], object]


@contextlib.contextmanager
def _through_handle(destination: pathlib.Path, *, overwrite: bool) -> Iterator[Put]:
    with atomic_write(destination, overwrite=overwrite) as handle:
        yield handle.write


@contextlib.contextmanager
def _through_path(destination: pathlib.Path, *, overwrite: bool) -> Iterator[Put]:
    with atomic_path(destination, overwrite=overwrite) as temporary:
        yield temporary.write_bytes


# Both writers publish the same way; every shared property is checked for each.
writers = pytest.mark.parametrize("write", [_through_handle, _through_path], ids=["atomic_write", "atomic_path"])


@writers
def test_publishes_what_was_written(tmp_path, write):
    destination = tmp_path / "out.bin"
    with write(destination, overwrite=False) as put:
        put(b"payload")
    assert destination.read_bytes() == b"payload"
    assert sorted(os.listdir(tmp_path)) == ["out.bin"]


@writers
def test_refuses_an_existing_destination_unless_overwrite(tmp_path, write):
    destination = tmp_path / "out.bin"
    destination.write_bytes(b"old")
    with pytest.raises(FileExistsError, match="already exists"), write(destination, overwrite=False):
        pytest.fail("must not be reached")
    assert sorted(os.listdir(tmp_path)) == ["out.bin"]
    with write(destination, overwrite=True) as put:
        put(b"new")
    assert destination.read_bytes() == b"new"
    assert sorted(os.listdir(tmp_path)) == ["out.bin"]


@writers
def test_a_failed_write_leaves_nothing_behind(tmp_path, write):
    destination = tmp_path / "out.bin"

    def crash_while_writing() -> None:
        with write(destination, overwrite=False) as put:
            put(b"partial")
            raise RuntimeError("crash")

    with pytest.raises(RuntimeError, match="crash"):
        crash_while_writing()
    assert os.listdir(tmp_path) == []


@writers
def test_a_failed_write_leaves_the_old_file(tmp_path, write):
    destination = tmp_path / "out.bin"
    destination.write_bytes(b"old")

    def crash_while_writing() -> None:
        with write(destination, overwrite=True) as put:
            put(b"partial")
            raise RuntimeError("crash")

    with pytest.raises(RuntimeError, match="crash"):
        crash_while_writing()
    assert destination.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["out.bin"]


@writers
def test_refuses_a_destination_created_meanwhile(tmp_path, write):
    destination = tmp_path / "out.bin"

    def race_with_another_writer() -> None:
        with write(destination, overwrite=False) as put:
            put(b"mine")
            destination.write_bytes(b"theirs")

    with pytest.raises(FileExistsError, match="another writer"):
        race_with_another_writer()
    assert destination.read_bytes() == b"theirs"
    assert sorted(os.listdir(tmp_path)) == ["out.bin"]


@writers
def test_needs_an_existing_folder(tmp_path, write):
    with pytest.raises(FileNotFoundError), write(pathlib.Path(tmp_path / "no" / "x"), overwrite=False):
        pytest.fail("must not be reached")


def test_atomic_path_gives_a_temporary_path_in_the_destination_folder(tmp_path):
    destination = tmp_path / "out.bin"
    with atomic_path(destination, overwrite=False) as temporary:
        assert temporary.parent == tmp_path
        assert temporary.exists()
        assert not destination.exists()
        # A writer that truncates and rewrites the file by path, as native libraries do.
        temporary.write_bytes(b"payload")
    assert destination.read_bytes() == b"payload"
    assert sorted(os.listdir(tmp_path)) == ["out.bin"]


def test_atomic_path_works_for_a_writer_in_another_process(tmp_path):
    destination = tmp_path / "out.bin"
    with atomic_path(destination, overwrite=False) as temporary:
        code = "import pathlib, sys; pathlib.Path(sys.argv[1]).write_bytes(b'from a child')"
        subprocess.run([sys.executable, "-c", code, str(temporary)], check=True, timeout=60)
    assert destination.read_bytes() == b"from a child"


def test_open_regular_file_gives_the_file_and_its_size(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(b"12345")
    with open_regular_file(path, kind="data file") as (handle, size):
        assert size == 5
        assert handle.read() == b"12345"
    assert handle.closed


def test_open_regular_file_refuses_missing_paths_and_non_files(tmp_path):
    missing = pytest.raises(FileNotFoundError, match=r"path must name an existing data file, got .*absent")
    with missing, open_regular_file(tmp_path / "absent", kind="data file"):
        pass
    not_a_file = pytest.raises(ValueError, match=r"path must be a regular data file \(not a directory or device\)")
    with not_a_file, open_regular_file(tmp_path, kind="data file"):
        pass
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # Refused before opening: opening a FIFO for reading would block.
    with pytest.raises(ValueError, match="regular data file"), open_regular_file(fifo, kind="data file"):
        pass
