"""The footer keys of the tinax Parquet format, and its checksums.

Every file gets SHA-256 digests of its row groups and of its footer, in a
fixed-length entry that ``seal_checksums`` fills in once the file is closed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

METADATA_KEY = b"tinax.records"
#: Key of the checksums of a tinax-format file: the SHA-256 of the bytes of
#: every row group, and of the footer (with its own digest written as zeros).
CHECKSUM_KEY = b"tinax.records.checksums"
#: How every checksum entry starts (see _checksum_value); no other file's footer holds it.
CHECKSUM_MARKER = b'{"footer_sha256":"'
_MAGIC = b"PAR1"
_ZERO_DIGEST = "0" * 64
_HASH_CHUNK = 1 << 20


def _checksum_value(footer_digest: str, group_digests: Sequence[str]) -> bytes:
    """Returns the checksum entry: fixed-length JSON, so a digest can be patched in place."""
    entry = {"footer_sha256": footer_digest, "row_groups_sha256": list(group_digests)}
    return json.dumps(entry, separators=(",", ":")).encode("ascii")


def _read_raw_footer(handle: Any, what: str) -> tuple[bytes, int]:
    """Reads an open Parquet file's footer with its 8-byte trailer, and its offset; ValueError if not Parquet."""
    size = handle.seek(0, os.SEEK_END)
    handle.seek(0)
    if size < 12 or handle.read(4) != _MAGIC:
        raise ValueError(f"{what} does not start with the Parquet magic bytes")
    handle.seek(size - 8)
    trailer = handle.read(8)
    length = int.from_bytes(trailer[:4], "little")
    if trailer[4:] != _MAGIC or length > size - 12:
        raise ValueError(f"{what} does not end with a Parquet footer")
    start = size - 8 - length
    handle.seek(start)
    return handle.read(length) + trailer, start


def _row_group_ranges(metadata: Any, footer_start: int, what: str) -> list[tuple[int, int]]:
    """Returns the byte range of every row group, checking that they tile the data."""
    ranges = []
    expected_start = len(_MAGIC)
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        start = end = expected_start
        for column in range(row_group.num_columns):
            chunk = row_group.column(column)
            first = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
            if first != end:
                raise ValueError(f"{what}: row group {group} does not follow the bytes before it")
            end = first + chunk.total_compressed_size
        ranges.append((start, end))
        expected_start = end
    if expected_start != footer_start:
        raise ValueError(f"{what}: its row groups do not end where its footer starts")
    return ranges


def _digest_range(handle: Any, start: int, end: int) -> str:
    digest = hashlib.sha256()
    handle.seek(start)
    remaining = end - start
    while remaining:
        chunk = handle.read(min(remaining, _HASH_CHUNK))
        if not chunk:
            raise ValueError("the file ends inside a row group")
        digest.update(chunk)
        remaining -= len(chunk)
    return digest.hexdigest()


def range_digests(
    path: pathlib.Path, ranges: Sequence[tuple[int, int]], hasher: DigestProcess | None = None
) -> list[str]:
    """The SHA-256 of each byte range of a local file, the ranges (in file order) read in one call.

    Hashed by ``hasher``'s process where one is given and still running, else in this thread.
    """
    if hasher is not None:
        found = hasher.digests(path, ranges)
        if found is not None:
            return found
    start, end = ranges[0][0], ranges[-1][1]
    with open(path, "rb") as handle:
        handle.seek(start)
        data = handle.read(end - start)
    if len(data) != end - start:
        raise ValueError(_SHORT_FILE)
    view = memoryview(data)
    return [hashlib.sha256(view[first - start : stop - start]).hexdigest() for first, stop in ranges]


_SHORT_FILE = "the file ends inside a row group"

# The child's whole program: only the standard library, so it starts in milliseconds. Each request is one line of
# JSON (a path and its ranges); each answer one line: the digests, or what failed.
_HASHER_PROGRAM = """
import hashlib, json, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
for line in sys.stdin:
    path, ranges = json.loads(line)
    start, end = ranges[0][0], ranges[-1][1]
    try:
        with open(path, "rb") as handle:
            handle.seek(start)
            data = handle.read(end - start)
    except OSError as error:
        answer = {"errno": error.errno, "message": error.strerror or str(error)}
    else:
        if len(data) != end - start:
            answer = {"short": True}
        else:
            view = memoryview(data)
            answer = [hashlib.sha256(view[a - start : b - start]).hexdigest() for a, b in ranges]
    sys.stdout.write(json.dumps(answer) + "\\n")
    sys.stdout.flush()
"""


class DigestProcess:
    """A child interpreter that hashes the byte ranges of local files for one reading thread, started on first use.

    Hashing here hands the interpreter lock back and forth once per row group, and while the pipeline's thread runs
    a training step each hand-back waits out the interpreter's switch interval (5 ms by default). A child hashes a
    whole run of row groups for one request and one answer.
    """

    def __init__(self) -> None:
        self._process: subprocess.Popen[str] | None = None
        #: False once the child could not start or stopped answering: the caller then hashes in its thread.
        self._usable = bool(sys.executable) and not getattr(sys, "frozen", False)

    def digests(self, path: pathlib.Path, ranges: Sequence[tuple[int, int]]) -> list[str] | None:
        """The digests of ``ranges`` of ``path``, or None where no child answers (the caller hashes them itself).

        Raises:
            OSError: The file cannot be opened or read.
            ValueError: The file ends inside a range.
        """
        process = self._running()
        if process is None:
            return None
        assert process.stdin is not None
        assert process.stdout is not None
        try:
            process.stdin.write(json.dumps([os.path.abspath(path), [list(pair) for pair in ranges]]) + "\n")
            process.stdin.flush()
            answer = json.loads(process.stdout.readline())
        except (OSError, ValueError):
            self.close()
            self._usable = False
            return None
        if isinstance(answer, list):
            return answer
        if answer.get("short"):
            raise ValueError(_SHORT_FILE)
        raise OSError(answer["errno"], answer["message"], str(path))

    def _running(self) -> subprocess.Popen[str] | None:
        if self._process is None and self._usable:
            try:
                self._process = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", _HASHER_PROGRAM],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                    encoding="ascii",
                )
            except (OSError, ValueError):
                self._usable = False
        return self._process

    def close(self) -> None:
        """Ends the child, if one runs: it reads the end of its input and exits."""
        process, self._process = self._process, None
        if process is None:
            return
        for stream in (process.stdin, process.stdout):
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _footer_digest(footer: bytes, stored: bytes, group_digests: Sequence[str]) -> str:
    """The footer's digest: its bytes with the checksum entry's footer digest as zeros."""
    if footer.count(stored) != 1:
        raise ValueError("its checksum entry cannot be found in its footer")
    return hashlib.sha256(footer.replace(stored, _checksum_value(_ZERO_DIGEST, group_digests))).hexdigest()


def seal_checksums(path: pathlib.Path) -> None:
    """Writes the digests into a closed file whose checksum entry holds zero placeholders.

    Row-group digests first, then the footer's; same lengths, so the footer keeps its layout.
    """
    import pyarrow.parquet as pq

    metadata = pq.ParquetFile(path).metadata
    with open(path, "r+b") as handle:
        try:
            footer, footer_start = _read_raw_footer(handle, str(path))
            ranges = _row_group_ranges(metadata, footer_start, str(path))
        except ValueError as error:
            raise OSError(f"sealing {str(path)!r} failed: {error}") from error
        placeholder = _checksum_value(_ZERO_DIGEST, [_ZERO_DIGEST] * len(ranges))
        if footer.count(placeholder) != 1:
            raise OSError(f"sealing {str(path)!r} failed: its footer holds no checksum entry to fill in")
        group_digests = [_digest_range(handle, start, end) for start, end in ranges]
        with_groups = footer.replace(placeholder, _checksum_value(_ZERO_DIGEST, group_digests))
        footer_digest = hashlib.sha256(with_groups).hexdigest()
        sealed = with_groups.replace(
            _checksum_value(_ZERO_DIGEST, group_digests), _checksum_value(footer_digest, group_digests)
        )
        handle.seek(footer_start)
        handle.write(sealed)
        handle.flush()


def _parse_checksums(stored: bytes, groups: int) -> tuple[str, list[str]]:
    try:
        entry = json.loads(stored.decode("ascii"))
    except (ValueError, RecursionError) as error:
        raise ValueError("its checksum entry is not JSON") from error
    if not isinstance(entry, dict):
        raise ValueError("its checksum entry is not a JSON object")
    digests = entry.get("row_groups_sha256")
    footer_digest = entry.get("footer_sha256")
    if (
        set(entry) != {"footer_sha256", "row_groups_sha256"}
        or not isinstance(digests, list)
        or len(digests) != groups
        or not all(_is_digest(value) for value in [footer_digest, *digests])
        or stored != _checksum_value(footer_digest, digests)  # type: ignore[arg-type]
    ):
        raise ValueError(f"its checksum entry is malformed or does not list {groups} row groups")
    return footer_digest, digests  # type: ignore[return-value]


def _is_digest(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(char in "0123456789abcdef" for char in value)
