"""tinax 0.2's exception types, kept where 0.3 says more: every accommodation of 0.2 in this member.

0.2 let the file system's, array-record's, pyarrow's, json's and grain's exceptions through, and code
catches those types; so each error here is both the type 0.3 documents and the one 0.2 raised.
``UnreadableParquetError`` (an ``ArrowInvalid``) stays with the Parquet reader: this module imports no pyarrow.
"""

from __future__ import annotations

__all__ = [
    "ArrayRecordWriteError",
    "CorruptParquetError",
    "MissingColumnError",
    "UnreadableArrayRecordError",
]


# Paths.


# An empty path raises tinax-core's ``MissingPathError``: a ValueError, and the FileNotFoundError 0.2 raised
# (it read "" as the current folder). An ArrayRecord write refused for its destination is also the OSError
# subclass the system gave.


# ArrayRecord files.


class ArrayRecordWriteError(OSError, RuntimeError):
    """Writing an ArrayRecord file failed: an OSError, and the RuntimeError array-record (so 0.2) raised."""


class UnreadableArrayRecordError(ValueError, RuntimeError):
    """Not an ArrayRecord file tinax can read: a ValueError, and the RuntimeError array-record (so 0.2) raised."""


# Parquet files.


class CorruptParquetError(OSError, ValueError):
    """A damaged Parquet file: a ValueError naming it, and the OSError pyarrow raised (so tinax 0.2 let through).

    A row group failing tinax's own digest is the same damage, so the same class.
    """


# Pipelines.


# ``num_epochs`` asking for more batches than grain can count raises tinax-core's ``ValueOverflowError``:
# a ValueError, and 0.2's ``len()`` OverflowError; also a TypeError where a NumPy integer argument (which 0.2
# refused with TypeError) asked for them, as is the RuntimeError of absl flags not parsed.


# Splits.


class MissingColumnError(KeyError, ValueError):
    """A row lacks the split column: a ValueError, and the KeyError 0.2 let through from the row lookup."""

    def __str__(self) -> str:
        # KeyError shows its argument's repr; this error carries a sentence.
        return str(self.args[0]) if self.args else ""
