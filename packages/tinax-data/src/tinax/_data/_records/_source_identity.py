"""The identity of a dataset's source, and InMemorySource, records in memory that carry one.

Iterator states record the ``source_id`` of the source at the bottom of a grain dataset, found through
any chain of transformations, so a state never restores into a pipeline over other data.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any, Generic, TypeVar, overload

from tinax._core.validation import expectation_message, fail_type, require_str

__all__ = ["InMemorySource", "find_file_set", "find_source_id"]

T = TypeVar("T")


class InMemorySource(Generic[T]):
    """A grain random-access data source over records held in memory.

    Its ``source_id`` names the data for the pipelines' iterator-state
    checks: give the same one to the same records every run, and a different
    one to different records. Records are materialized once and held as
    given, not copied, so treat them as read-only. The source pickles with
    its records, for grain's worker processes.

    Args:
      records: Any finite iterable of records (not a ``str`` or ``bytes``).
      source_id: A non-empty string naming these records.

    Raises:
      TypeError: If ``records`` is not iterable or is a ``str``/``bytes``, or ``source_id`` is not a ``str``.
      ValueError: If ``source_id`` is empty.
    """

    # No per-instance dict, as in tinax 0.2: a source holds its records and its name only.
    __slots__ = ("_records", "_source_id")

    def __init__(self, records: Iterable[T], *, source_id: str) -> None:
        if isinstance(records, (str, bytes, bytearray)) or not isinstance(records, Iterable):
            fail_type("records", "an iterable of records (not a str or bytes)", records)
        self._source_id = require_str(source_id, "source_id")
        self._records: tuple[T, ...] = tuple(records)

    @property
    def source_id(self) -> str:
        """The name of these records, recorded in pipeline iterator states."""
        return self._source_id

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...

    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        """Returns the record at ``index`` (negative indices count from the end).

        Raises:
          TypeError: If ``index`` is a bool or not an integer or slice.
          IndexError: If ``index`` is outside the records.
        """
        if isinstance(index, slice):
            return self._records[index]
        if isinstance(index, bool):
            fail_type("index", "an int", index)
        try:
            position = operator.index(index)
        except TypeError:
            fail_type("index", "an int", index)
        count = len(self._records)
        if not -count <= position < count:
            bounds = f"an int in [{-count}, {count - 1}]" if count else "no int at all (the source has no records)"
            raise IndexError(expectation_message("index", bounds, index))
        return self._records[position]

    def __repr__(self) -> str:
        return f"InMemorySource(source_id={self._source_id!r}, size={len(self._records)})"


def find_source_id(dataset: Any) -> str | None:
    """The ``source_id`` under a grain dataset (several joined with ``" + "``), or None if any source has none."""
    found: list[str] = []
    pending: list[Any] = [dataset]
    while pending:
        node = pending.pop()
        named = _own_source_id(node)
        if named is not None:
            found.append(named)
            continue
        parents = tuple(getattr(node, "parents", ()))
        if not parents:
            return None
        # Reversed, so that popping visits the parents in their own order.
        pending.extend(reversed(parents))
    return " + ".join(found) if found else None


def find_file_set(dataset: Any) -> list[list[Any]] | None:
    """``[name, size, rows]`` of the files of the many-file readers under a grain dataset, or None where none is."""
    from tinax._data._grain_compat import wrapped_source

    found: list[list[Any]] | None = None
    pending: list[Any] = [dataset]
    while pending:
        node = pending.pop()
        files = getattr(wrapped_source(node), "file_set", None)
        if isinstance(files, list):
            found = (found or []) + [list(entry) for entry in files]
        else:
            pending.extend(reversed(tuple(getattr(node, "parents", ()))))
    return found


def _own_source_id(node: Any) -> str | None:
    named = getattr(node, "source_id", None)
    if not (isinstance(named, str) and named):
        # Imported here, where grain already is: importing tinax.data imports no grain.
        from tinax._data._grain_compat import wrapped_source

        named = getattr(wrapped_source(node), "source_id", None)
    return named if isinstance(named, str) and named else None
