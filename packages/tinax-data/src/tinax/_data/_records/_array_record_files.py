"""Random access to the records of many ArrayRecord files as one dataset: a folder, a pattern or a list of shards.

Opening reads each file's last record (tinax header or JSON fingerprint); a file reopened later must still
end in the same record. See docs/guide/data.md, section "Datasets of many files".
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from tinax._data._records._array_record import ArrayRecordSource, _LastRecord
from tinax._data._records._file_sets import FileSet, require_one_kind
from tinax._data._records._locations import Location, file_size
from tinax._data._records._record_file_source import DEFAULT_CACHE_BYTES, FileSetSource, OpenFiles

__all__ = ["ArrayRecordFilesSource"]


class _RecordFiles(NamedTuple):
    """What the last records of a dataset's files say: the header of an :class:`ArrayRecordFilesSource`."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    last_records: tuple[_LastRecord, ...]


class ArrayRecordFilesSource(FileSetSource, ArrayRecordSource):
    """The one-file reader over the records of several ArrayRecord files, one after the other.

    Pickles as root, names and last records; a copy refuses a file that changed.
    """

    _files_header: _RecordFiles

    def __init__(
        self,
        files: FileSet,
        *,
        decode: Callable[[bytes], Any] | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        """Reads the last record of every file and checks them against each other."""
        self._given = files.given
        self._named_files = files.files
        super().__init__(files.root, decode=decode, cache_bytes=cache_bytes)

    def _reading_handle(self, header: Any) -> _OpenRecordFiles:
        return _OpenRecordFiles(self, header)

    def _read_headers(self) -> _RecordFiles:
        names = tuple(file.name for file in self._named_files)

        def read_one(path: Location) -> tuple[_LastRecord, int]:
            reader, last = self._open_file(path)
            reader.close()
            return last, file_size(path, "ArrayRecord")

        found = [read_one(file.path) for file in self._named_files]
        last_records = tuple(item[0] for item in found)
        require_one_kind(self._given, names, [last.header_bytes for last in last_records])
        return _RecordFiles(names, tuple(item[1] for item in found), last_records)

    def _adopt(self, header: Any) -> None:
        files: _RecordFiles = header
        combined = require_one_kind(self._given, files.names, [last.header_bytes for last in files.last_records])
        counts = _counts(files)
        if combined is None:
            super()._adopt(_LastRecord(None, sum(counts)))
        else:
            super()._adopt(_LastRecord(combined.to_json_bytes(), combined.count + 1))
        # The files' own last records stand for the dataset: pickled with it, compared when a file opens.
        self._header = header
        self._files_header = files
        self.file_set: list[list[Any]] = [
            [name, size, count] for name, size, count in zip(files.names, files.sizes, counts, strict=True)
        ]

    def __repr__(self) -> str:
        kind = "JSON records"
        if self._schema is not None:
            kind = f"fields={list(self._schema.names)}, source_id={self.source_id!r}"
        return (
            f"ArrayRecordFilesSource(root={str(self._path)!r}, files={len(self.file_set)}, "
            f"records={self._count}, {kind})"
        )


class _OpenRecordFiles:
    """Stands in for the one-file reader's ``ArrayRecordReader``; keeps a few files open (LRU), reads under a lock."""

    def __init__(self, source: ArrayRecordFilesSource, files: _RecordFiles) -> None:
        self._source = source
        self._files = files
        self._opened = OpenFiles(source, files.last_records, "last record")
        self._starts = _starts(files)
        self._lock = threading.Lock()

    def read(self, first: int | Sequence[int], stop: int | None = None) -> list[bytes]:
        """The records at positions ``first`` to ``stop``, or at a list of positions; errors name the file."""
        starts = self._starts
        if stop is not None:
            assert isinstance(first, int)
            records: list[bytes] = []
            file_index = int(np.searchsorted(starts, first, side="right")) - 1
            position = first
            while position < stop:
                end = min(stop, int(starts[file_index + 1]))
                if end > position:
                    offset = int(starts[file_index])
                    records.extend(self._read(file_index, position - offset, end - offset))
                position = end
                file_index += 1
            return records
        positions = np.asarray(first, dtype=np.int64)
        files = np.searchsorted(starts, positions, side="right") - 1
        found: list[bytes] = [b""] * len(positions)
        for file_index in np.unique(files).tolist():
            slots = np.flatnonzero(files == file_index)
            local = (positions[slots] - starts[file_index]).tolist()
            for slot, record in zip(slots.tolist(), self._read(file_index, local), strict=True):
                found[slot] = record
        return found

    def _read(self, file_index: int, first: int | list[int], stop: int | None = None) -> list[bytes]:
        with self._lock:
            reader = self._opened.get(file_index)
            try:
                return list(reader.read(first) if stop is None else reader.read(first, stop))
            except RuntimeError as error:
                raise RuntimeError(f"{self._files.names[file_index]!r}: {error}") from error

    def close(self) -> None:
        with self._lock:
            self._opened.close()


def _counts(files: _RecordFiles) -> list[int]:
    """Each file's number of records (the tinax header, a record of its own, left out)."""
    return [last.total - (last.header_bytes is not None) for last in files.last_records]


def _starts(files: _RecordFiles) -> np.ndarray[Any, Any]:
    """The dataset position of each file's first record, and the count of all records last."""
    return np.cumsum([0, *_counts(files)]).astype(np.int64)
