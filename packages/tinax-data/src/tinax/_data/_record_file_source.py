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

import os
import pathlib
import threading
from typing import Any, Generic, TypeVar

from tinax._data._record_codec import RecordSchema, record_position

__all__ = ["FileSetSource", "RecordFileSource"]

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

    def __init__(self, path: pathlib.Path) -> None:
        """Opens the file and reads its header.

        Args:
          path: The file, preferably absolute so that workers with another
            working directory find it too.

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
        return {"path": os.fspath(self._path), "header": self._header, "options": self._options()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._path = pathlib.Path(state["path"])
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

    def _read_headers(self) -> Any:
        """Reads and checks every file's header; returns them together."""
        raise NotImplementedError

    def _reading_handle(self, header: Any) -> Any:
        """A handle that reads across the files, opening each on first use, as the one-file reader's open file."""
        raise NotImplementedError
