"""InMemorySource and source identities, through real grain datasets."""

from __future__ import annotations

import pickle

import grain
import numpy as np
import pytest

from tinax._data._records._source_identity import find_source_id
from tinax.data import InMemorySource


def test_random_access_over_materialized_records():
    generated = (value * value for value in range(5))
    source = InMemorySource(generated, source_id="squares")
    assert len(source) == 5
    assert [source[index] for index in range(5)] == [0, 1, 4, 9, 16]
    assert source[-1] == 16
    assert source[np.int64(2)] == 4
    assert source.source_id == "squares"
    assert "squares" in repr(source)


def test_records_are_held_as_given_not_copied():
    record = {"x": np.arange(3)}
    source = InMemorySource([record], source_id="one")
    assert source[0] is record


def test_the_outer_iterable_is_snapshotted_and_the_records_are_shared():
    nested = {"values": [1]}
    records = [nested]
    source = InMemorySource(records, source_id="train-records-v1")
    records.append({"values": [9]})  # The list changes: the source does not.
    nested["values"].append(2)  # A record changes: the source shows it.
    assert len(source) == 1
    assert source[0] is nested
    assert source[0] == {"values": [1, 2]}
    assert repr(source) == "InMemorySource(source_id='train-records-v1', size=1)"  # tinax 0.2's repr
    assert isinstance(source, grain.sources.RandomAccessDataSource)


def test_grain_reads_it_with_shuffle_and_batch():
    dataset = grain.MapDataset.source(InMemorySource(range(6), source_id="six"))
    assert sorted(dataset.shuffle(seed=3)) == list(range(6))
    assert [list(batch) for batch in dataset.batch(4)] == [[0, 1, 2, 3], [4, 5]]


def test_pickles_with_its_records():
    source = InMemorySource([{"a": 1}, {"a": 2}], source_id="pickled")
    restored = pickle.loads(pickle.dumps(source))
    assert restored.source_id == "pickled"
    assert [restored[0], restored[1]] == [{"a": 1}, {"a": 2}]


@pytest.mark.parametrize("records", ["abc", b"abc", 3, None])
def test_rejects_records_that_are_not_an_iterable_of_records(records):
    with pytest.raises(TypeError, match="records must be an iterable of records"):
        InMemorySource(records, source_id="x")


def test_source_id_must_be_a_non_empty_str():
    with pytest.raises(TypeError, match="source_id must be a non-empty str, got 3 \\(int\\)"):
        InMemorySource([1], source_id=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="source_id must be a non-empty str"):
        InMemorySource([1], source_id="")


def test_index_errors():
    source = InMemorySource([1, 2], source_id="two")
    with pytest.raises(IndexError, match=r"index must be an int in \[-2, 1\], got 2 \(int\)"):
        source[2]
    with pytest.raises(IndexError, match="the source has no records"):
        InMemorySource([], source_id="empty")[0]
    with pytest.raises(TypeError, match="index must be an int, got True"):
        source[True]
    with pytest.raises(TypeError, match="index must be an int, got '0'"):
        source["0"]  # type: ignore[call-overload]


def test_find_source_id_walks_down_grain_transformations():
    dataset = grain.MapDataset.source(InMemorySource(range(10), source_id="digits"))
    chained = dataset.map(lambda value: value + 1).shuffle(seed=1).slice(slice(0, None, 2)).repeat(2).batch(2)
    assert find_source_id(chained) == "digits"
    assert find_source_id(chained.to_iter_dataset()) == "digits"


def test_find_source_id_of_several_sources_names_them_all():
    first = grain.MapDataset.source(InMemorySource(range(2), source_id="a"))
    second = grain.MapDataset.source(InMemorySource(range(2), source_id="b"))
    assert find_source_id(grain.MapDataset.concatenate([first, second])) == "a + b"
    unnamed = grain.MapDataset.source([1, 2])
    assert find_source_id(grain.MapDataset.concatenate([first, unnamed])) is None


def test_find_source_id_is_none_for_unidentified_sources():
    assert find_source_id(grain.MapDataset.source([1, 2, 3])) is None
    assert find_source_id(grain.MapDataset.range(4).map(lambda value: value)) is None


def test_any_data_source_with_a_source_id_attribute_is_identified():
    class Named:
        source_id = "custom-reader:v2"

        def __len__(self):
            return 1

        def __getitem__(self, index):
            return index

    assert find_source_id(grain.MapDataset.source(Named())) == "custom-reader:v2"


def test_in_memory_source_holds_no_instance_dict_as_in_tinax_02():
    source = InMemorySource([1, 2], source_id="s")
    assert not hasattr(source, "__dict__")
    with pytest.raises(AttributeError):
        source.extra = 1  # type: ignore[attr-defined]
