"""The identity of a dataset's source, and InMemorySource, records in memory that carry one.

A pipeline's iterator state records *which* data it walked, so that the state
of one dataset is never restored into a pipeline over another. That identity
is the ``source_id`` of the data source at the bottom of a grain dataset: every
tinax source has one (:class:`InMemorySource`, the record readers, the split
views), and :func:`find_source_id` looks it up through any chain of grain
transformations.
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

    It has ``len`` and integer indexing, which is all that
    ``grain.MapDataset.source`` needs, and a ``source_id`` that names the data
    for the pipelines' iterator-state checks. Give the same ``source_id`` to
    the same records every run (for example a file name and version), and a
    different one to different records.

    The records are materialized once, in order, when the source is built. They
    are held as given, not copied: indexing returns the stored object itself,
    so treat records as read-only (the split views and pipelines in
    ``tinax.data`` never modify them).

    The source pickles with its records, so it can be sent to grain's worker
    processes as long as the records themselves pickle.

    Args:
      records: The records, any finite iterable (a list, a generator, ...).
        A ``str`` or ``bytes`` object is refused rather than split into
        characters.
      source_id: A non-empty string naming these records.

    Raises:
      TypeError: If ``records`` is not iterable or is a ``str``/``bytes``, or
        ``source_id`` is not a ``str``.
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
          IndexError: If ``index`` is outside the records, as for any sequence.
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
    """Finds the identity of the data under a grain dataset.

    It walks the dataset's ``parents`` down to its sources. A dataset or data
    source with a ``source_id`` string attribute is a named source; grain's
    source dataset (``MapDataset.source(...)``) is looked through to the source
    object it wraps. When the dataset draws from several sources (mixed or
    concatenated datasets), their identities are joined with ``" + "`` in
    parent order.

    Args:
      dataset: A grain ``MapDataset`` or ``IterDataset``.

    Returns:
      The source identity, or None if any source underneath has no
      ``source_id`` (for example ``MapDataset.source(a_list)`` or
      ``MapDataset.range(n)``).
    """
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
    """Finds the files under a grain dataset that reads a dataset of many files.

    Walks the dataset's ``parents`` as :func:`find_source_id` does, to the
    readers of many files (a folder, a pattern or a list given to
    ``read_parquet_record`` or ``read_array_record``), which list their files.

    Args:
      dataset: A grain ``MapDataset`` or ``IterDataset``.

    Returns:
      ``[name, size, rows]`` of every file of those readers, in parent
      order, or None where no such reader is underneath.
    """
    from tinax._data._grain_compat import wrapped_source

    found: list[list[Any]] = []
    any_found = False
    pending: list[Any] = [dataset]
    while pending:
        node = pending.pop()
        files = getattr(wrapped_source(node), "file_set", None)
        if isinstance(files, list):
            found.extend([list(entry) for entry in files])
            any_found = True
            continue
        pending.extend(reversed(tuple(getattr(node, "parents", ()))))
    return found if any_found else None


def _own_source_id(node: Any) -> str | None:
    named = getattr(node, "source_id", None)
    if isinstance(named, str) and named:
        return named
    # Imported here, where grain already is: importing tinax.data imports no grain.
    from tinax._data._grain_compat import wrapped_source

    named = getattr(wrapped_source(node), "source_id", None)
    if isinstance(named, str) and named:
        return named
    return None
