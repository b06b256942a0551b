"""The private grain names tinax-data relies on still exist and behave as relied on.

Each test names the grain internal it checks: when one fails after a grain
upgrade, ``tinax._data._grain_compat`` is the one place to adapt. The
fallbacks are tested too, on objects without the private names.
"""

from __future__ import annotations

import grain
import pytest

from tinax._data import _grain_compat as compat
from tinax.data import InMemorySource


def _source_dataset(count: int = 6) -> grain.MapDataset:
    return grain.MapDataset.source(InMemorySource(list(range(10, 10 + count)), source_id="numbers"))


def test_the_unnamed_grain_classes_are_the_ones_grain_builds():
    # grain has no public names for them; tinax subclasses these.
    assert compat.SOURCE_MAP_DATASET.__name__ == "SourceMapDataset", "grain renamed its source dataset"
    assert compat.SLICE_MAP_DATASET.__name__ == "SliceMapDataset", "grain renamed its slice dataset"
    assert compat.BATCH_MAP_DATASET.__name__ == "BatchMapDataset", "grain renamed its batch dataset"
    for cls in (compat.SOURCE_MAP_DATASET, compat.SLICE_MAP_DATASET, compat.BATCH_MAP_DATASET):
        assert issubclass(cls, grain.MapDataset)


def test_grain_datasets_still_read_many_elements_through_getitems():
    dataset = _source_dataset().map(lambda value: value * 2)
    assert hasattr(dataset, "_getitems"), "grain's MapDataset lost _getitems: read_many falls back to indexing"
    assert dataset._getitems([3, 0, 5]) == [26, 20, 30]
    assert compat.read_many(dataset, range(3)) == [20, 22, 24]


def test_read_many_indexes_one_by_one_without_getitems():
    assert compat.read_many([5, 6, 7], [2, 0]) == [7, 5]


def test_grain_source_dataset_still_keeps_its_source_as_source():
    source = InMemorySource([1, 2], source_id="pair")
    dataset = grain.MapDataset.source(source)
    assert getattr(dataset, "_source", None) is source, "grain's SourceMapDataset no longer keeps _source"
    assert compat.wrapped_source(dataset) is source
    assert compat.wrapped_source(dataset.map(lambda value: value)) is None
    assert compat.wrapped_source(grain.MapDataset.range(3)) is None


def test_grain_batch_still_reads_rows_through_the_hook_bulk_batch_overrides():
    assert hasattr(compat.BATCH_MAP_DATASET, "_get_parent_items_fn"), (
        "grain's BatchMapDataset lost _get_parent_items_fn: batches are still right, but each row is read alone"
    )
    reads = []

    class Recording(grain.MapDataset):
        def __len__(self):
            return 6

        def __getitem__(self, index):
            reads.append(index)
            return index

        def _getitems(self, indices):
            reads.append(list(indices))
            return list(indices)

    batches = compat.BulkBatchMapDataset(Recording(), 4, drop_remainder=False, batch_fn=list)
    assert [batches[0], batches[1]] == [[0, 1, 2, 3], [4, 5]]
    assert reads == [[0, 1, 2, 3], [4, 5]], "grain's batch no longer reads through _get_parent_items_fn"


def test_grain_iterators_still_know_their_length_and_next_index():
    iterator = iter(_source_dataset(5).to_iter_dataset())
    assert compat.iterator_length(iterator) == 5, "grain's prefetch iterator lost _dataset_length"
    next(iterator)
    next(iterator)
    assert compat.get_next_index(iterator) == 2
    compat.set_next_index(iterator, 4)
    assert next(iterator) == 14
    assert compat.iterator_length(object()) is None


def test_an_iterator_without_the_index_protocol_raises_as_grain_does():
    iterator = iter(grain.MapDataset.range(4).to_iter_dataset().filter(lambda value: value % 2 == 0))
    with pytest.raises((NotImplementedError, ValueError)):
        compat.set_next_index(iterator, 1)


def test_an_iterator_without_the_index_protocol_at_all_raises_not_implemented():
    with pytest.raises(NotImplementedError, match="cannot say"):
        compat.get_next_index(iter([1, 2]))
    with pytest.raises(NotImplementedError, match="cannot move"):
        compat.set_next_index(iter([1, 2]), 1)


def test_grain_iterators_still_keep_their_parents_and_share_one_context_with_them():
    child = iter(_source_dataset().to_iter_dataset().map(lambda value: value))
    assert hasattr(child, "_ctx"), "grain's iterators lost _ctx: a re-dealt iterator keeps grain's default context"
    assert len(child._parents) == 1, "grain's iterators lost _parents: a re-dealt iterator is not closed"
    assert all(node._ctx is child._ctx for node in child._parents)
    replacement = iter(_source_dataset().to_iter_dataset())
    compat.replace_parent_iterator(child, replacement)
    assert child._parents == (replacement,)
    assert replacement._ctx is child._ctx
    child.close()
    assert replacement._closed, "closing the iterator closes its new parent"


def test_replace_parent_iterator_leaves_a_replacement_its_context_where_there_is_none():
    class Bare:
        _parents = ()

    iterator, replacement = Bare(), Bare()
    compat.replace_parent_iterator(iterator, replacement)
    assert iterator._parents == (replacement,)
    assert not hasattr(replacement, "_ctx")
