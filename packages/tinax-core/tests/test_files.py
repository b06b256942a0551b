"""The path-based atomic publish used by native writers, and the checked open of files to read."""

import os
import pathlib
import subprocess
import sys

import pytest

from tinax._core.files import atomic_path, open_regular_file


def test_atomic_path_publishes_what_was_written_at_the_path(tmp_path):
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


def test_atomic_path_refuses_an_existing_destination_unless_overwrite(tmp_path):
    destination = tmp_path / "out.bin"
    destination.write_bytes(b"old")
    with pytest.raises(FileExistsError, match="already exists"), atomic_path(destination, overwrite=False):
        pytest.fail("must not be reached")
    assert sorted(os.listdir(tmp_path)) == ["out.bin"]
    with atomic_path(destination, overwrite=True) as temporary:
        temporary.write_bytes(b"new")
    assert destination.read_bytes() == b"new"
    assert sorted(os.listdir(tmp_path)) == ["out.bin"]


def test_atomic_path_removes_the_temporary_file_when_the_writer_fails(tmp_path):
    destination = tmp_path / "out.bin"

    def crash_while_writing() -> None:
        with atomic_path(destination, overwrite=False) as temporary:
            temporary.write_bytes(b"partial")
            raise RuntimeError("crash")

    with pytest.raises(RuntimeError, match="crash"):
        crash_while_writing()
    assert os.listdir(tmp_path) == []


def test_atomic_path_refuses_a_destination_created_meanwhile(tmp_path):
    destination = tmp_path / "out.bin"

    def race_with_another_writer() -> None:
        with atomic_path(destination, overwrite=False) as temporary:
            temporary.write_bytes(b"mine")
            destination.write_bytes(b"theirs")

    with pytest.raises(FileExistsError, match="another writer"):
        race_with_another_writer()
    assert destination.read_bytes() == b"theirs"
    assert sorted(os.listdir(tmp_path)) == ["out.bin"]


def test_atomic_path_needs_an_existing_folder(tmp_path):
    with pytest.raises(FileNotFoundError), atomic_path(pathlib.Path(tmp_path / "no" / "x"), overwrite=False):
        pytest.fail("must not be reached")


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
