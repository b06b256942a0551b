"""Atomic writes (by handle and by path) and the checked open of files to read."""

import contextlib
import errno
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from tinax._core.files import (
    DestinationErrors,
    atomic_path,
    atomic_write,
    open_regular_file,
    require_file_destination,
)

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


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


@writers
@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_a_new_file_gets_the_permissions_the_umask_gives(tmp_path, write, mask):
    destination = tmp_path / "out.bin"
    with _umask(mask), write(destination, overwrite=False) as put:
        # Already while it is written, not only once it is published.
        temporary = [path for path in tmp_path.iterdir() if path.name != "out.bin"]
        assert [path.stat().st_mode & 0o777 for path in temporary] == [0o666 & ~mask]
        put(b"payload")
    assert destination.stat().st_mode & 0o777 == 0o666 & ~mask


@writers
@pytest.mark.parametrize("mask", [0o022, 0o077])
@pytest.mark.parametrize("existing_mode", [0o644, 0o640, 0o600, 0o664])
def test_overwriting_keeps_the_replaced_files_permissions(tmp_path, write, mask, existing_mode):
    destination = tmp_path / "out.bin"
    destination.write_bytes(b"old")
    destination.chmod(existing_mode)
    with _umask(mask), write(destination, overwrite=True) as put:
        put(b"new")
    assert destination.read_bytes() == b"new"
    assert destination.stat().st_mode & 0o777 == existing_mode


@writers
def test_replacing_something_that_is_not_a_regular_file_uses_the_umask(tmp_path, write):
    (tmp_path / "target").write_bytes(b"x")
    (tmp_path / "target").chmod(0o600)
    destination = tmp_path / "link"
    destination.symlink_to(tmp_path / "target")
    with _umask(0o022), write(destination, overwrite=True) as put:
        put(b"new")
    # The link itself is replaced by a file; what it pointed to is untouched.
    assert not destination.is_symlink()
    assert (tmp_path / "target").read_bytes() == b"x"
    assert destination.stat().st_mode & 0o777 == 0o600


def test_reading_the_umask_leaves_it_as_it_was():
    from tinax._core.files import _current_umask

    with _umask(0o027):
        assert _current_umask() == 0o027
        assert os.umask(0o027) == 0o027


class _FolderMissingError(FileNotFoundError, ValueError):
    pass


class _NotAFolderError(NotADirectoryError, ValueError):
    pass


class _IsAFolderError(IsADirectoryError, ValueError):
    pass


_MAPPED = DestinationErrors(
    folder_missing=_FolderMissingError, not_a_folder=_NotAFolderError, is_folder=_IsAFolderError
)


@pytest.mark.parametrize(
    ("where", "expected", "code"),
    [
        ("absent/f", _FolderMissingError, errno.ENOENT),
        ("regular/f", _NotAFolderError, errno.ENOTDIR),
        ("regular/sub/f", _NotAFolderError, errno.ENOTDIR),
        ("folder", _IsAFolderError, errno.EISDIR),
    ],
)
def test_a_destination_that_cannot_be_a_file_raises_the_mapped_class_with_its_errno(tmp_path, where, expected, code):
    (tmp_path / "regular").write_bytes(b"x")
    (tmp_path / "folder").mkdir()
    destination = tmp_path / where
    with pytest.raises(expected) as caught:
        require_file_destination(destination, _MAPPED)
    assert caught.value.errno == code
    assert caught.value.filename == str(destination)
    assert (tmp_path / "regular").read_bytes() == b"x"
    assert sorted(os.listdir(tmp_path)) == ["folder", "regular"]


def test_a_destination_in_an_existing_folder_passes_and_the_default_map_is_the_systems_classes(tmp_path):
    require_file_destination(tmp_path / "new", DestinationErrors())
    assert not (tmp_path / "new").exists()
    with pytest.raises(FileNotFoundError) as caught:
        require_file_destination(tmp_path / "absent" / "f", DestinationErrors())
    assert type(caught.value) is FileNotFoundError
