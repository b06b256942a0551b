"""tinax 0.2's exception types, kept where 0.3 says more: every accommodation of 0.2 in this member.

tinax 0.2 let the file system's, array-record's, pyarrow's, json's and
Grain's own exceptions reach the caller, and code written against 0.2
catches those types. So each error here is the type 0.3 documents and also
the type 0.2 raised for the same input; each class says which:

- an empty path: the FileNotFoundError 0.2 raised (:class:`EmptyPathError`);
- ArrayRecord files: array-record's RuntimeError for a failed write or an
  unreadable file, the TypeError of records that do not fit the format the
  first record chose, json's JSONDecodeError for a record that is not JSON,
  and the AttributeError for an index that is not an int;
- Parquet files: the OSError pyarrow raised for a footer or page it cannot
  decode or whose page checksum fails (:class:`CorruptParquetError`);
- pipelines: the OverflowError of too many batches, and the TypeError 0.2
  raised for the NumPy integers 0.3 accepts;
- splits: the KeyError for a row without the split column.

One accommodation cannot live here: ``UnreadableParquetError`` derives from
``pyarrow.ArrowInvalid`` (0.2's error for a file that is not Parquet), and
this module, imported by ``tinax.data``, imports no pyarrow; it stays with
the Parquet reader, which does.
"""

from __future__ import annotations

import json
from typing import Any

from tinax._core import validation

__all__ = [
    "ArrayRecordWriteError",
    "CorruptParquetError",
    "EmptyPathError",
    "MissingColumnError",
    "TooManyBatchesError",
    "UnreadableArrayRecordError",
]


# Paths.


class EmptyPathError(ValueError, FileNotFoundError):
    """The path is empty.

    A ValueError, as tinax reports a bad argument value, and a
    FileNotFoundError, which is what tinax 0.2 raised: it read the empty path
    as the current folder, where no file is.
    """


# ArrayRecord files.


class ArrayRecordWriteError(OSError, RuntimeError):
    """Writing an ArrayRecord file failed.

    An OSError, as tinax reports file-system failures, and a RuntimeError,
    which is what array-record (and so tinax 0.2) raised.
    """


class _FolderMissingError(FileNotFoundError, ArrayRecordWriteError):
    """The folder of the destination does not exist."""


class _FolderIsFileError(NotADirectoryError, ArrayRecordWriteError):
    """A part of the destination's folder is a regular file."""


class _DestinationIsFolderError(IsADirectoryError, ArrayRecordWriteError):
    """The destination is a folder."""


class _UnwritableError(PermissionError, ArrayRecordWriteError):
    """The file system does not let this process write there."""


class _EmptyDestinationError(EmptyPathError, ArrayRecordWriteError):
    """The destination path is empty (array-record could not open it in tinax 0.2)."""


class _OutsideTheFormatError(validation.TypeAndValueError):
    """A record after the first does not fit the tinax format that the first record chose.

    A ValueError, as tinax reports a bad value, and a TypeError, which is what
    tinax 0.2 raised for these records: their first record was already not
    JSON.
    """


class _NotJsonError(json.JSONDecodeError):
    """A record of a file without the tinax header is not JSON: the message names the file and ``decode``."""

    def __init__(self, message: str, doc: str, pos: int) -> None:
        super().__init__(message, doc, pos)
        # JSONDecodeError appends the line and column; the message already says what matters.
        self.args = (message,)

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.args[0], self.doc, self.pos))


class _IndexTypeError(TypeError, AttributeError):
    """A record index is not an int.

    A TypeError, as tinax reports the wrong kind of index, and an
    AttributeError, which is what tinax 0.2 let through from array-record
    (it asked the index for ``__index__``).
    """


class UnreadableArrayRecordError(ValueError, RuntimeError):
    """A file is not an ArrayRecord file tinax can read.

    A ValueError, as tinax reports malformed files, and a RuntimeError, which
    is what array-record (and so tinax 0.2) raised for a file that is not
    ArrayRecord at all.
    """


# Parquet files.


class CorruptParquetError(OSError, ValueError):
    """A damaged Parquet file: a ValueError naming it, and the OSError pyarrow raised (so tinax 0.2 let through).

    pyarrow raises a plain OSError for a footer or page it cannot decode and
    for a page that fails its checksum; a row group that fails the digest
    tinax wrote for it is the same kind of damage, so the same class.
    """


# Pipelines.


class TooManyBatchesError(ValueError, OverflowError):
    """``num_epochs`` asks for more batches than grain can count.

    A ValueError, as tinax reports a bad argument value, and an
    OverflowError, which is what ``len()`` of the dataset raised in tinax 0.2,
    where grain's index-sized length overflowed.
    """


class _TooManyBatchesAfterWideningError(TooManyBatchesError, TypeError):
    """:class:`TooManyBatchesError` for a NumPy integer argument, which tinax 0.2 refused with TypeError."""


class _FlagsNotParsedAfterWideningError(RuntimeError, TypeError):
    """absl flags are not parsed, and ``num_workers`` is a NumPy integer, which tinax 0.2 refused with TypeError."""


# Splits.


class MissingColumnError(KeyError, ValueError):
    """A row lacks the column a split is made by.

    A ValueError, as tinax reports bad values, and a KeyError, which is what
    tinax 0.2 let through from the row lookup.
    """

    def __str__(self) -> str:
        # KeyError shows its argument's repr; this error carries a sentence.
        return str(self.args[0]) if self.args else ""
