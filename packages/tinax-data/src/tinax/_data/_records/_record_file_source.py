"""The lifecycle shared by the record sources over one file (ArrayRecord, Parquet).

A source pickles as path, header and options, never the open file; an unpickled copy (in a worker)
reopens lazily and refuses with ValueError a file whose header changed, so it never reads records the
parent did not describe.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from tinax._data._records._locations import Location, pickled_location, restored_location
from tinax._data._records._record_codec import RecordSchema, record_position

__all__ = ["DEFAULT_CACHE_BYTES", "FileSetSource", "OpenFiles", "RecordFileSource"]

#: The default memory budget of a reader's decoded rows: its cache of row groups, or its fields held whole.
DEFAULT_CACHE_BYTES = 512 << 20

HeaderT = TypeVar("HeaderT")


class RecordFileSource(Generic[HeaderT]):
    """A random-access data source over one record file, opened lazily in each process.

    The header must pickle and compare equal while the file is unchanged; only tinax-format files have a ``source_id``.
    """

    #: What the header is in the file, for the message refusing a changed file.
    _header_name = "header"
    #: Whether reads take turns under a lock, so extra prefetch threads only wait (see ``_pipelines._batches``).
    reads_in_turn = False

    def __init__(self, path: Location) -> None:
        """Opens the file (preferably an absolute path, for workers elsewhere) and reads its header."""
        self._path = path
        self._start_process()
        handle, header = self._open()
        self._adopt(header)
        self._opened: Any = handle

    def _start_process(self) -> None:
        """Sets up what belongs to one process (locks, caches); subclasses extend it."""
        self._open_lock = threading.Lock()

    def _open(self) -> tuple[Any, HeaderT]:
        """Opens the file and reads its header; returns the open file and the header."""
        raise NotImplementedError

    def _open_ahead(self) -> tuple[Any, HeaderT]:
        """Opens the file for a thread filling whole columns ahead of the batches (the usual opening by default)."""
        return self._open()

    def _adopt(self, header: HeaderT) -> None:
        """Takes a header as this source's description of the file; subclasses extend it."""
        self._header = header
        self._schema: RecordSchema | None = None
        self._count = 0

    def _options(self) -> dict[str, Any]:
        """The options an unpickled copy needs, besides the path and header."""
        return {}

    def _set_options(self, options: dict[str, Any]) -> None:
        """Restores the options :meth:`_options` gave."""

    def _handle(self) -> Any:
        """Returns the open file, opening it first in a new process; a ValueError if its header changed."""
        handle = self._opened
        if handle is None:
            with self._open_lock:
                if self._opened is None:
                    self._opened = self._unchanged(self._open())
                handle = self._opened
        return handle

    def _unchanged(self, opened: tuple[Any, HeaderT]) -> Any:
        """The handle of the file opened again, with its header; a ValueError if the header changed."""
        handle, header = opened
        if header != self._header:
            raise ValueError(f"{str(self._path)!r} changed since it was opened: its {self._header_name} is different")
        return handle

    @property
    def schema(self) -> RecordSchema | None:
        """The schema of the tinax header, or None for a file outside the tinax format."""
        return self._schema

    def __len__(self) -> int:
        return self._count

    def _position(self, index: int) -> int:
        """The position of ``index`` among the records, checked as a sequence checks it."""
        return record_position(index, self._count, self._path)

    def __getstate__(self) -> dict[str, Any]:
        return {"path": pickled_location(self._path), "header": self._header, "options": self._options()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._path = restored_location(state["path"])
        self._set_options(state["options"])
        self._start_process()
        self._adopt(state["header"])
        self._opened = None


class FileSetSource(RecordFileSource[Any]):
    """What the readers of many files share, beside their one-file reader (which comes after it in their bases).

    The header is all files' headers, read once; a copy opens and checks each file when it reads from it.
    """

    #: What the caller passed, in words, for messages.
    _given: str
    #: Every file's header together, with the files' names (``names``).
    _files_header: Any

    def _options(self) -> dict[str, Any]:
        return {**super()._options(), "given": self._given}

    def _set_options(self, options: dict[str, Any]) -> None:
        super()._set_options(options)
        self._given = options["given"]

    def _open(self) -> tuple[Any, Any]:
        header = getattr(self, "_files_header", None)
        if header is None:
            header = self._read_headers()
        return self._reading_handle(header), header

    @property
    def files(self) -> tuple[str, ...]:
        """The files' names relative to the root folder, in the dataset's order."""
        names: tuple[str, ...] = self._files_header.names
        return names

    def file_path(self, index: int) -> Location:
        """The path of the dataset's ``index``-th file."""
        return self._path / str(self._files_header.names[index])

    def _read_headers(self) -> Any:
        """Reads and checks every file's header; returns them together."""
        raise NotImplementedError

    def _reading_handle(self, header: Any) -> Any:
        """A handle that reads across the files, opening each on first use, as the one-file reader's open file."""
        raise NotImplementedError


class OpenFiles:
    """The files one reading handle holds open, each checked against its header on opening; at most ``most`` (LRU)."""

    def __init__(self, source: Any, headers: Sequence[Any], what: str, most: int = 16) -> None:
        """Holds no file yet; ``what`` names the header in the message refusing a changed file."""
        self._source = source
        self._headers = headers
        self._what = what
        self._most = most
        self._open: collections.OrderedDict[int, Any] = collections.OrderedDict()

    def get(self, file_index: int) -> Any:
        """The open file of the dataset's ``file_index``-th file; a ValueError if it changed since opening."""
        handle = self._open.get(file_index)
        if handle is not None:
            self._open.move_to_end(file_index)
            return handle
        path = self._source.file_path(file_index)
        handle, header = self._source._open_file(path)
        if header != self._headers[file_index]:
            handle.close()
            raise ValueError(f"{str(path)!r} changed since the dataset was opened: its {self._what} is different")
        self._open[file_index] = handle
        while len(self._open) > self._most:
            _, closed = self._open.popitem(last=False)
            closed.close()
        return handle

    def close(self) -> None:
        """Closes every file held open."""
        while self._open:
            _, handle = self._open.popitem()
            handle.close()
