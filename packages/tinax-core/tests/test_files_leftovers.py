"""Temporary files of killed writers are removed by the next write; live writers' files never are."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import pytest

from tinax._core import files
from tinax._core.files import atomic_path, atomic_write

pytestmark = pytest.mark.skipif(
    files._host_token() == files._UNKNOWN_HOST, reason="needs /proc to tell live writers from dead ones"
)

# Opens an atomic write, writes part of the content, says so, and waits for a
# line on stdin before finishing: the parent decides whether it lives or dies.
WRITER = textwrap.dedent(
    """
    import pathlib, sys
    from tinax._core.files import atomic_write

    destination = pathlib.Path(sys.argv[1])
    with atomic_write(destination, overwrite=True) as handle:
        handle.write(b"half of the child's")
        handle.flush()
        print("writing", flush=True)
        sys.stdin.readline()
        handle.write(b" content")
    """
)


def _start_writer(destination: pathlib.Path) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(destination)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline() == "writing\n"
    return child


def _kill(child: subprocess.Popen[str]) -> None:
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=60)  # Reaps the child and closes its pipes.
    assert child.returncode == -signal.SIGKILL


def _temporaries(folder: pathlib.Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.endswith(".tmp"))


def _temporary_name(destination: str, host: str, pid: int, start: int) -> str:
    return f".{destination}.tinax-{host}-{pid}-{start}.abc123de.tmp"


@pytest.mark.parametrize("write", [atomic_write, atomic_path], ids=["atomic_write", "atomic_path"])
def test_the_next_write_removes_the_temporary_file_of_a_killed_writer(tmp_path, write):
    destination = tmp_path / "weights.bin"
    child = _start_writer(destination)
    _kill(child)
    assert len(_temporaries(tmp_path)) == 1

    with write(destination, overwrite=False) as target:
        if isinstance(target, pathlib.Path):
            target.write_bytes(b"new")
        else:
            target.write(b"new")

    assert sorted(os.listdir(tmp_path)) == ["weights.bin"]
    assert destination.read_bytes() == b"new"


def test_a_live_writer_keeps_its_temporary_file_and_finishes(tmp_path):
    destination = tmp_path / "weights.bin"
    child = _start_writer(destination)
    try:
        (left,) = _temporaries(tmp_path)
        with atomic_write(destination, overwrite=True) as handle:
            handle.write(b"parent")
        assert _temporaries(tmp_path) == [left]
        assert destination.read_bytes() == b"parent"
    finally:
        child.communicate("go on\n", timeout=60)
    assert child.returncode == 0
    assert destination.read_bytes() == b"half of the child's content"
    assert _temporaries(tmp_path) == []


def test_only_leftovers_of_certainly_dead_writers_of_this_destination_go(tmp_path):
    host = files._host_token()
    parent = os.getppid()
    parent_start = files._process_start(parent)
    assert parent_start is not None
    exited = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(exited.stdout)
    removed = [
        _temporary_name("out.bin", host, dead_pid, 1),
        # A live process id that was reused by a process started at another time.
        _temporary_name("out.bin", host, parent, parent_start + 1),
    ]
    kept = [
        _temporary_name("out.bin", host, parent, parent_start),  # alive
        _temporary_name("out.bin", "f" * 8 if host != "f" * 8 else "e" * 8, dead_pid, 1),  # another host
        _temporary_name("out.bin.x", host, dead_pid, 1),  # another destination
        _temporary_name("out.bin", host, os.getpid(), 1),  # this process: maybe another thread
        ".out.bin.tinax-notahost-1-1.abc.tmp",  # not a name tinax writes
    ]
    for name in [*removed, *kept]:
        (tmp_path / name).write_bytes(b"partial")
    folder_with_the_name = tmp_path / _temporary_name("out.bin", host, dead_pid, 2)
    folder_with_the_name.mkdir()
    link_with_the_name = tmp_path / _temporary_name("out.bin", host, dead_pid, 3)
    link_with_the_name.symlink_to(tmp_path / kept[0])

    with atomic_write(tmp_path / "out.bin", overwrite=False) as handle:
        handle.write(b"complete")

    remaining = set(os.listdir(tmp_path))
    assert remaining.isdisjoint(removed)
    assert remaining >= {*kept, folder_with_the_name.name, link_with_the_name.name, "out.bin"}


def test_a_destination_name_too_long_for_a_tagged_temporary_name_is_still_written(tmp_path):
    destination = tmp_path / ("w" * 240)
    with atomic_write(destination, overwrite=False) as handle:
        handle.write(b"long")
    assert destination.read_bytes() == b"long"
    assert os.listdir(tmp_path) == [destination.name]


def test_leftovers_of_a_long_destination_name_are_found_too(tmp_path):
    destination = tmp_path / ("w" * 240)
    child = _start_writer(destination)
    _kill(child)
    assert len(_temporaries(tmp_path)) == 1
    with atomic_write(destination, overwrite=True) as handle:
        handle.write(b"again")
    assert os.listdir(tmp_path) == [destination.name]
