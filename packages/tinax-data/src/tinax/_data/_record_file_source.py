"""The lifecycle shared by the record sources over one file (ArrayRecord, Parquet).

A source reads what it needs to know about its file (the header: the tinax
header where there is one, record counts, row-group bounds, ...) when it is
made, keeps the open file, and pickles as the path, that header and its
options, never the open file. An unpickled copy, in a Grain worker say,
opens the file on first use, reads the header again and refuses, with a
ValueError, a file whose header changed in the meantime, so a worker never
reads records the parent did not describe.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from tinax._data._locations import Location, pickled_location, restored_location
from tinax._data._record_codec import RecordSchema, record_position

__all__ = ["FileSetSource", "OpenFiles", "RecordFileSource"]

HeaderT = TypeVar("HeaderT")


class RecordFileSource(Generic[HeaderT]):
    """A random-access data source over one record file, opened lazily in each process.

    Subclasses say how to open the file and read its header (:meth:`_open`),
    what the header means (:meth:`_adopt`), and which options travel with a
    pickled copy (:meth:`_options`, :meth:`_set_options`). The header must be
    picklable and compare equal when the file has not changed.

    Attributes:
      source_id: For files in the tinax format only: the identity of the
        records, from the tinax header (see the package README). Other files
        have none, since naming their content would mean reading all of it.
    """

    #: What the header is in the file, for the message refusing a changed file.
    _header_name = "header"
    #: Whether reads take turns (one at a time under a lock), so that more than
    #: one prefetch thread can only wait (see ``_pipelines``).
    reads_in_turn = False

    def __init__(self, path: Location) -> None:
        """Opens the file and reads its header.

        Args:
          path: The file, preferably absolute so that workers with another
            working directory find it too, or its location in a bucket.

        Raises:
          ValueError: If the file cannot be read as this kind of record file
            (the subclass says which ValueError).
        """
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
        """Returns the open file, opening it first in a process that has not yet.

        Raises:
          ValueError: If the file's header is no longer the one this source
            was made with.
        """
        handle = self._opened
        if handle is None:
            with self._open_lock:
                if self._opened is None:
                    handle, header = self._open()
                    if header != self._header:
                        raise ValueError(
                            f"{str(self._path)!r} changed since it was opened: its {self._header_name} is different"
                        )
                    self._opened = handle
                handle = self._opened
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

    The header is the files' own headers together (``_files_header``); it is
    read once, when the source is made, and an unpickled copy opens each
    file only when it reads from it, checking that file's header then.
    Subclasses say how to read the headers and how to read rows across the
    files.
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
        name: str = self._files_header.names[index]
        return self._path / name

    def _read_headers(self) -> Any:
        """Reads and checks every file's header; returns them together."""
        raise NotImplementedError

    def _reading_handle(self, header: Any) -> Any:
        """A handle that reads across the files, opening each on first use, as the one-file reader's open file."""
        raise NotImplementedError


class OpenFiles:
    """The files of a dataset of many files that one reading handle holds open, each checked when it opens.

    A file is opened on first use through its source's one-file opener, and
    its header must be the one read when the dataset was opened; past
    ``most`` open files, the least recently used is closed.
    """

    def __init__(self, source: Any, headers: Sequence[Any], what: str, most: int = 16) -> None:
        """Holds no file yet.

        Args:
          source: The dataset's source (``file_path`` and ``_open_file``).
          headers: Each file's header as read when the dataset was opened.
          what: What the header is, for the message refusing a changed file.
          most: The most files held open at once.
        """
        self._source = source
        self._headers = headers
        self._what = what
        self._most = most
        self._open: collections.OrderedDict[int, Any] = collections.OrderedDict()

    def get(self, file_index: int) -> Any:
        """The open file of the dataset's ``file_index``-th file.

        Raises:
          ValueError: If the file changed since the dataset was opened.
        """
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
