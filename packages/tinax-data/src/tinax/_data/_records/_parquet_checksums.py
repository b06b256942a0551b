"""The footer keys of the tinax Parquet format, and its checksums.

Every file gets SHA-256 digests of its row groups and of its footer, in a
fixed-length entry that ``seal_checksums`` fills in once the file is closed.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
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


def range_digests(path: pathlib.Path, ranges: Sequence[tuple[int, int]]) -> list[str]:
    """The SHA-256 of each byte range of a local file, the ranges (in file order) read in one call."""
    start, end = ranges[0][0], ranges[-1][1]
    with open(path, "rb") as handle:
        handle.seek(start)
        data = handle.read(end - start)
    if len(data) != end - start:
        raise ValueError("the file ends inside a row group")
    view = memoryview(data)
    return [hashlib.sha256(view[first - start : stop - start]).hexdigest() for first, stop in ranges]


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
