"""split_by_column and split_random over real grain datasets."""

from __future__ import annotations

import math

import cloudpickle
import grain
import numpy as np
import pytest

from tinax._data._records._source_identity import find_source_id
from tinax._data._splits import MissingColumnError
from tinax.data import InMemorySource, split_by_column, split_random


def _rows(count: int) -> list[dict[str, object]]:
    return [{"x": index, "split": "test" if index % 4 == 3 else "train"} for index in range(count)]


def _dataset(rows: list[dict[str, object]], source_id: str = "rows") -> grain.MapDataset:
    return grain.MapDataset.source(InMemorySource(rows, source_id=source_id))


# ---------------------------------------------------------------------------
# split_by_column


def test_split_by_column_keeps_order_and_drops_the_column():
    rows = _rows(8)
    train, test = split_by_column(_dataset(rows), "split")
    assert list(train) == [{"x": index} for index in (0, 1, 2, 4, 5, 6)]
    assert list(test) == [{"x": 3}, {"x": 7}]
    assert rows[0] == {"x": 0, "split": "train"}, "the parent's rows must not be modified"


def test_split_by_column_can_keep_the_column_and_order_the_parts_by_values():
    test, train = split_by_column(_dataset(_rows(4)), "split", values=("test", "train"), drop_column=False)
    assert list(test) == [{"x": 3, "split": "test"}]
    assert [row["x"] for row in train] == [0, 1, 2]


def test_split_parts_keep_random_access_and_work_in_grain_pipelines():
    train, _ = split_by_column(_dataset(_rows(12)), "split")
    assert len(train) == 9
    assert train[4] == {"x": 5}
    assert sorted(row["x"] for row in train.shuffle(seed=5)) == [0, 1, 2, 4, 5, 6, 8, 9, 10]
    assert [len(batch) for batch in train.batch(4, batch_fn=list)] == [4, 4, 1]


def test_a_third_value_is_an_error_that_names_it_and_its_row():
    rows = _rows(6)
    rows[4]["split"] = "validation"
    with pytest.raises(
        ValueError, match=r"dataset\[4\]\['split'\] must be 'train' \(str\) or 'test' \(str\), got 'validation' \(str\)"
    ):
        split_by_column(_dataset(rows), "split")


def test_bytes_never_match_str_values():
    rows = _rows(3)
    rows[1]["split"] = b"train"
    with pytest.raises(ValueError, match=r"dataset\[1\]\['split'\] must be .*, got b'train' \(bytes\)"):
        split_by_column(_dataset(rows), "split")


def test_values_of_any_type_split_by_equality_as_in_02():
    rows = [{"x": index, "fold": index % 2} for index in range(5)]
    even, odd = split_by_column(_dataset(rows), "fold", values=(0, 1))
    assert list(even) == [{"x": 0}, {"x": 2}, {"x": 4}]
    assert list(odd) == [{"x": 1}, {"x": 3}]
    # Equality decides, so True is 1 and 1.0 is 1, as they were in tinax 0.2.
    flags = [{"x": 0, "flag": True}, {"x": 1, "flag": 0}, {"x": 2, "flag": 1.0}]
    ones, zeros = split_by_column(_dataset(flags), "flag", values=(1, 0), drop_column=False)
    assert [row["x"] for row in ones] == [0, 2]
    assert [row["x"] for row in zeros] == [1]
    # Any iterable of two values: a list, a str of two characters, a generator.
    letters = _dataset([{"c": "a"}, {"c": "b"}])
    for values in (["a", "b"], "ab", (value for value in "ab")):
        first, second = split_by_column(letters, "c", values=values)
        assert (len(first), len(second)) == (1, 1)


def test_rows_a_filter_removed_belong_to_neither_part():
    filtered = _dataset(_rows(8)).filter(lambda row: row["x"] not in (1, 3))
    train, test = split_by_column(filtered, "split")
    assert [row["x"] for row in train] == [0, 2, 4, 5, 6]
    assert [row["x"] for row in test] == [7]
    assert (len(train), len(test)) == (5, 1)
    assert train[1] == {"x": 2}


def test_rows_without_the_column_or_that_are_no_rows_are_errors():
    rows = _rows(3)
    del rows[2]["split"]
    # A ValueError, and the KeyError tinax 0.2 let through.
    with pytest.raises(
        MissingColumnError, match=r"dataset\[2\] must have a 'split' column, got a row with columns 'x'"
    ):
        split_by_column(_dataset(rows), "split")
    assert issubclass(MissingColumnError, KeyError)
    assert issubclass(MissingColumnError, ValueError)
    with pytest.raises(TypeError, match=r"dataset\[0\] must be a row with a 'split' column, got 7 \(int\)"):
        split_by_column(_dataset([7]), "split")


def test_a_value_that_no_row_has_gives_an_empty_part():
    train, test = split_by_column(_dataset([{"split": "train"}]), "split")
    assert (len(train), len(test)) == (1, 0)
    assert list(test) == []


@pytest.mark.parametrize(
    ("values", "error", "message"),
    [
        (("train",), ValueError, "values must be exactly two distinct values"),
        (("a", "b", "c"), ValueError, "values must be exactly two distinct values"),
        (("a", "a"), ValueError, "values must be two distinct values"),
        ((1, True), ValueError, "values must be two distinct values"),
        (None, TypeError, "values must be an iterable of two distinct values"),
        (5, TypeError, "values must be an iterable of two distinct values"),
    ],
)
def test_split_by_column_values_are_checked(values, error, message):
    with pytest.raises(error, match=message):
        split_by_column(_dataset(_rows(2)), "split", values=values)


def test_split_by_column_argument_kinds():
    with pytest.raises(TypeError, match="dataset must be a grain.MapDataset, got"):
        split_by_column(_rows(2), "split")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="dataset must be a grain.MapDataset"):
        split_by_column(_dataset(_rows(2)).to_iter_dataset(), "split")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="column must be a str"):
        split_by_column(_dataset(_rows(2)), 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="drop_column must be a bool, got 1 \\(int\\)"):
        split_by_column(_dataset(_rows(2)), "split", drop_column=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dataset must be a finite grain.MapDataset"):
        split_by_column(_dataset(_rows(2)).repeat(), "split")
    # An empty column name is a name like any other.
    first, second = split_by_column(_dataset([{"": "a"}]), "", values=("a", "b"))
    assert (list(first), list(second)) == ([{}], [])


def test_split_by_column_parts_carry_derived_identities():
    train, test = split_by_column(_dataset(_rows(4), source_id="corpus:v1"), "split")
    assert find_source_id(train) == "corpus:v1/split_by_column(column='split', value='train')"
    assert find_source_id(test) == "corpus:v1/split_by_column(column='split', value='test')"
    assert find_source_id(train.shuffle(seed=1).batch(2)) == find_source_id(train)


def test_parts_of_an_unidentified_dataset_stay_unidentified():
    train, test = split_by_column(grain.MapDataset.source(_rows(4)), "split")
    assert find_source_id(train) is None
    assert find_source_id(test) is None
    assert list(test) == [{"x": 3}]


def test_parts_pickle_for_worker_processes():
    train, _ = split_by_column(_dataset(_rows(8)), "split")
    restored = cloudpickle.loads(cloudpickle.dumps(train))
    assert list(restored) == list(train)
    assert find_source_id(restored) == find_source_id(train)


# ---------------------------------------------------------------------------
# split_random


def _xs(dataset: grain.MapDataset) -> list[int]:
    return [row["x"] for row in dataset]


def test_split_random_is_a_seeded_shuffle_cut_at_the_ratio():
    dataset = _dataset(_rows(50))
    train, test = split_random(dataset, 0.7, seed=11)
    assert (len(train), len(test)) == (35, 15)
    shuffled = _xs(dataset.shuffle(seed=11))
    # The parts are the two ends of grain's seeded shuffle, in shuffled order, as in tinax 0.2.
    assert _xs(train) == shuffled[:35]
    assert _xs(test) == shuffled[35:]
    assert sorted(_xs(train) + _xs(test)) == list(range(50))


@pytest.mark.parametrize(
    ("size", "ratio", "sizes"),
    [
        (5, 0.5, (2, 3)),  # round(2.5) is 2: Python rounds halves to even.
        (7, 0.5, (4, 3)),  # round(3.5) is 4.
        (10, 0.25, (2, 8)),
        (10, 0.999, (9, 1)),  # Never an empty part: at most len - 1 ...
        (10, 0.001, (1, 9)),  # ... and at least 1.
        (2, 0.5, (1, 1)),
    ],
)
def test_split_random_part_sizes_round_and_never_leave_a_part_empty(size, ratio, sizes):
    train, test = split_random(_dataset(_rows(size)), ratio, seed=0)
    assert (len(train), len(test)) == sizes


def test_split_random_is_deterministic_for_a_seed():
    first = split_random(_dataset(_rows(40)), 0.5, seed=123)
    second = split_random(_dataset(_rows(40)), 0.5, seed=123)
    other = split_random(_dataset(_rows(40)), 0.5, seed=124)
    assert _xs(first[0]) == _xs(second[0])
    assert _xs(first[1]) == _xs(second[1])
    assert _xs(first[0]) != _xs(other[0])


def test_split_random_drop_column():
    rows = _rows(6)
    train, test = split_random(_dataset(rows), 0.5, seed=2, drop_column="split")
    assert all(set(row) == {"x"} for row in [*train, *test])
    assert rows[0] == {"x": 0, "split": "train"}, "the parent's rows must not be modified"
    # A column the rows lack is nothing to drop, as in tinax 0.2.
    kept, _ = split_random(_dataset(_rows(6)), 0.5, seed=2, drop_column="label")
    assert all(set(row) == {"x", "split"} for row in kept)
    with pytest.raises(TypeError, match="drop_column must be a str"):
        split_random(_dataset(_rows(6)), 0.5, seed=2, drop_column=1)  # type: ignore[arg-type]


def test_split_random_keeps_rows_as_they_are_without_drop_column():
    train, _ = split_random(_dataset(_rows(4)), 0.5, seed=2)
    assert set(train[0]) == {"x", "split"}


def test_split_random_adds_no_node_that_would_move_default_seeds():
    # A random transformation above a part draws its default seed from the
    # nearest seed() below, by depth; the part is grain's shuffle and slice,
    # as it was in tinax 0.2, so that stream is 0.2's.
    seeded = _dataset(_rows(8)).seed(4)
    train, _ = split_random(seeded, 0.5, seed=9)
    assert _xs(train.shuffle()) == _xs(seeded.shuffle(seed=9).slice(slice(0, 4)).shuffle())


def test_split_random_parts_carry_derived_identities():
    train, test = split_random(_dataset(_rows(4), source_id="corpus"), 0.5, seed=9)
    assert find_source_id(train) == "corpus/split_random(train_ratio=0.5, seed=9, part='train')"
    assert find_source_id(test) == "corpus/split_random(train_ratio=0.5, seed=9, part='test')"
    assert find_source_id(split_random(grain.MapDataset.source(_rows(4)), 0.5, seed=9)[0]) is None
    restored = cloudpickle.loads(cloudpickle.dumps(train))
    assert find_source_id(restored) == find_source_id(train)
    assert _xs(restored) == _xs(train)


@pytest.mark.parametrize("ratio", [0.0, 1.0, -0.25, 1.5, math.nan, math.inf, 0, 1, 2, -1])
def test_split_random_rejects_ratios_outside_the_open_interval(ratio):
    # An int is never strictly between 0 and 1: a ValueError, as in tinax 0.2.
    with pytest.raises(ValueError, match="train_ratio must be a float strictly between 0 and 1"):
        split_random(_dataset(_rows(10)), ratio, seed=0)


def test_split_random_refuses_an_int_beyond_the_float_range_with_value_error_as_in_02():
    with pytest.raises(ValueError, match="train_ratio must be a float strictly between 0 and 1"):
        split_random(_dataset(_rows(10)), 2**2000, seed=0)


def test_after_a_numpy_ratio_or_seed_refusals_are_also_0_2s_type_error():
    # tinax 0.2 refused a NumPy float32 ratio and a NumPy integer seed with TypeError before anything else.
    with pytest.raises(ValueError, match="train_ratio must be a float strictly between 0 and 1") as caught:
        split_random(_dataset(_rows(10)), np.float32(1.5), seed=0)
    assert isinstance(caught.value, TypeError)
    with pytest.raises(ValueError, match="at least two rows") as caught:
        split_random(_dataset(_rows(1)), 0.5, seed=np.int64(0))
    assert isinstance(caught.value, TypeError)
    with pytest.raises(ValueError, match="Seed must be an integer between 0") as caught:  # grain refuses it
        split_random(_dataset(_rows(10)), 0.5, seed=np.int64(-1))
    assert isinstance(caught.value, TypeError)


@pytest.mark.parametrize("ratio", [True, "0.5", None, np.int64(0)])
def test_split_random_rejects_ratios_that_are_not_numbers(ratio):
    with pytest.raises(TypeError, match="train_ratio must be a float strictly between 0 and 1"):
        split_random(_dataset(_rows(10)), ratio, seed=0)


def test_split_random_accepts_numpy_floats():
    train, _ = split_random(_dataset(_rows(10)), np.float32(0.5), seed=0)
    assert len(train) == 5


def test_split_random_requires_a_valid_seed():
    with pytest.raises(TypeError, match="seed"):
        split_random(_dataset(_rows(10)), 0.5)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="seed must be an int"):
        split_random(_dataset(_rows(10)), 0.5, seed=True)
    # grain's shuffle checks the range.
    with pytest.raises(ValueError, match="Seed must be an integer between 0 and 2\\*\\*32-1"):
        split_random(_dataset(_rows(10)), 0.5, seed=-1)
    with pytest.raises(ValueError, match="Seed must be an integer between 0 and 2\\*\\*32-1"):
        split_random(_dataset(_rows(10)), 0.5, seed=2**32)


def test_split_random_needs_two_rows():
    with pytest.raises(ValueError, match="dataset must be a grain.MapDataset of at least two rows"):
        split_random(_dataset(_rows(1)), 0.5, seed=0)


def test_split_random_of_a_split_composes():
    train, _ = split_by_column(_dataset(_rows(16), source_id="base"), "split")
    fit, held_out = split_random(train, 0.75, seed=4)
    assert sorted(_xs(fit) + _xs(held_out)) == _xs(train)
    assert find_source_id(fit).startswith("base/split_by_column(column='split', value='train')/split_random(")


# ---------------------------------------------------------------------------
# Hardening: indices that are not ints


@pytest.mark.parametrize("index", [True, False, np.bool_(True), 1.0, "1", None, np.asarray([0])])
def test_split_views_refuse_bools_and_other_non_int_indices(index):
    train, test = split_by_column(_dataset(_rows(8)), "split")
    for part in (train, test):
        with pytest.raises(TypeError, match="index must be an int"):
            part._source[index]


def test_split_views_index_like_sequences():
    train, _ = split_by_column(_dataset(_rows(8)), "split")
    view = train._source
    assert view[0] == {"x": 0}
    assert view[-1] == {"x": 6}
    assert view[np.int64(1)] == {"x": 1}
    for index in (6, -7, 2**70):
        with pytest.raises(IndexError, match=f"index {index} is out of range for the 6 rows"):
            view[index]


@pytest.mark.parametrize("index", [True, False, np.bool_(True), np.bool_(False)])
def test_split_parts_refuse_bool_indices_that_grain_would_read_as_0_or_1(index):
    train, test = split_by_column(_dataset(_rows(8)), "split")
    for part in (train, test):
        with pytest.raises(TypeError, match=r"index must be an int, got (np\.)?(True|False)"):
            part[index]
    assert train[1] == {"x": 1}
    assert test[np.int64(-1)] == {"x": 7}


def test_split_parts_stay_grain_datasets_that_slice_shuffle_and_pickle():
    train, test = split_by_column(_dataset(_rows(8)), "split")
    plain = grain.MapDataset.source(train._source)
    assert isinstance(train, type(plain))
    assert list(train[1:5]) == list(plain[1:5])
    assert list(train.shuffle(seed=2)) == list(plain.shuffle(seed=2))
    assert _xs(train.map(lambda row: {"x": row["x"] * 10})) == [value * 10 for value in _xs(train)]
    copy = cloudpickle.loads(cloudpickle.dumps(test))
    assert type(copy) is type(test)
    assert list(copy) == list(test)
    assert find_source_id(copy) == find_source_id(test)
    with pytest.raises(TypeError, match="index must be an int"):
        copy[np.bool_(False)]


@pytest.mark.parametrize("drop_column", [None, "split"])
@pytest.mark.parametrize("index", [True, False, np.bool_(True), np.bool_(False)])
def test_split_random_parts_refuse_bool_indices(index, drop_column):
    rows = [{"x": value, "split": "a"} for value in range(10)]
    for part in split_random(grain.MapDataset.source(rows), 0.5, seed=3, drop_column=drop_column):
        with pytest.raises(TypeError, match=r"index must be an int, got (np\.)?(True|False)"):
            part[index]


def test_split_random_parts_read_slice_and_pickle_as_grain_slices_do():
    rows = [{"x": value} for value in range(10)]
    shuffled = grain.MapDataset.source(rows).shuffle(seed=3)
    train, test = split_random(grain.MapDataset.source(rows), 0.7, seed=3)
    assert list(train) == list(shuffled.slice(slice(0, 7)))
    assert list(test) == list(shuffled.slice(slice(7, 10)))
    assert train[np.int64(2)] == shuffled[2]
    assert list(train[1:4]) == list(shuffled.slice(slice(0, 7))[1:4])
    assert list(train.shuffle(seed=1)) == list(shuffled.slice(slice(0, 7)).shuffle(seed=1))
    copy = cloudpickle.loads(cloudpickle.dumps(test))
    assert list(copy) == list(test)
