"""split_by_column and split_random over real grain datasets."""

from __future__ import annotations

import math

import cloudpickle
import grain
import numpy as np
import pytest

from tinax.data import InMemorySource, split_by_column, split_random
from tinax.data._sources import find_source_id


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
        ValueError, match=r"dataset\[4\]\['split'\] must be 'train' or 'test', got 'validation' \(str\)"
    ):
        split_by_column(_dataset(rows), "split")


def test_bytes_never_match_str_values():
    rows = _rows(3)
    rows[1]["split"] = b"train"
    with pytest.raises(ValueError, match=r"dataset\[1\]\['split'\] must be 'train' or 'test', got b'train' \(bytes\)"):
        split_by_column(_dataset(rows), "split")


def test_rows_without_the_column_or_missing_rows_are_errors():
    rows = _rows(3)
    del rows[2]["split"]
    with pytest.raises(ValueError, match=r"dataset\[2\] must have a 'split' column, got a row with columns 'x'"):
        split_by_column(_dataset(rows), "split")
    filtered = _dataset(_rows(3)).filter(lambda row: row["x"] != 1)
    with pytest.raises(ValueError, match=r"dataset\[1\] must be a row, got None"):
        split_by_column(filtered, "split")
    with pytest.raises(TypeError, match=r"dataset\[0\] must be a mapping with a 'split' column, got 7 \(int\)"):
        split_by_column(_dataset([7]), "split")


def test_a_value_that_no_row_has_gives_an_empty_part():
    train, test = split_by_column(_dataset([{"split": "train"}]), "split")
    assert (len(train), len(test)) == (1, 0)
    assert list(test) == []


@pytest.mark.parametrize(
    ("values", "error", "message"),
    [
        (("train",), ValueError, "values must be a tuple of exactly two str"),
        (("a", "b", "c"), ValueError, "values must be a tuple of exactly two str"),
        (("a", "a"), ValueError, "values must be two distinct str"),
        (("a", ""), ValueError, r"values\[1\] must be a non-empty str"),
        (("a", 1), TypeError, r"values\[1\] must be a non-empty str, got 1 \(int\)"),
        ("ab", TypeError, "values must be a tuple of two str"),
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
    with pytest.raises(TypeError, match="column must be a non-empty str"):
        split_by_column(_dataset(_rows(2)), 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="column must be a non-empty str"):
        split_by_column(_dataset(_rows(2)), "")
    with pytest.raises(TypeError, match="drop_column must be a bool, got 1 \\(int\\)"):
        split_by_column(_dataset(_rows(2)), "split", drop_column=1)  # type: ignore[arg-type]


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


def test_split_random_is_disjoint_covering_and_sized_by_the_ratio():
    train, test = split_random(_dataset(_rows(50)), 0.7, seed=11)
    assert len(train) == 35
    assert len(test) == 15
    assert set(_xs(train)).isdisjoint(_xs(test))
    assert sorted(_xs(train) + _xs(test)) == list(range(50))
    assert _xs(train) == sorted(_xs(train)), "rows keep their original order within a part"


def test_split_random_rounds_half_up():
    train, test = split_random(_dataset(_rows(5)), 0.5, seed=0)
    assert (len(train), len(test)) == (3, 2)
    train, test = split_random(_dataset(_rows(10)), 0.25, seed=0)
    assert (len(train), len(test)) == (3, 7)


def test_split_random_is_deterministic_for_a_seed():
    first = split_random(_dataset(_rows(40)), 0.5, seed=123)
    second = split_random(_dataset(_rows(40)), 0.5, seed=123)
    other = split_random(_dataset(_rows(40)), 0.5, seed=124)
    assert _xs(first[0]) == _xs(second[0])
    assert _xs(first[1]) == _xs(second[1])
    assert _xs(first[0]) != _xs(other[0])


def test_split_random_drop_column():
    train, test = split_random(_dataset(_rows(6)), 0.5, seed=2, drop_column="split")
    assert all(set(row) == {"x"} for row in [*train, *test])
    with pytest.raises(ValueError, match=r"dataset\[0\] must have a 'label' column"):
        split_random(_dataset(_rows(6)), 0.5, seed=2, drop_column="label")
    with pytest.raises(TypeError, match="drop_column must be a non-empty str"):
        split_random(_dataset(_rows(6)), 0.5, seed=2, drop_column=1)  # type: ignore[arg-type]


def test_split_random_keeps_rows_as_they_are_without_drop_column():
    train, _ = split_random(_dataset(_rows(4)), 0.5, seed=2)
    assert set(train[0]) == {"x", "split"}


def test_split_random_parts_carry_derived_identities():
    train, test = split_random(_dataset(_rows(4), source_id="corpus"), 0.5, seed=9)
    assert find_source_id(train) == "corpus/split_random(train_ratio=0.5, seed=9, part='train')"
    assert find_source_id(test) == "corpus/split_random(train_ratio=0.5, seed=9, part='test')"
    assert find_source_id(split_random(grain.MapDataset.source(_rows(4)), 0.5, seed=9)[0]) is None


@pytest.mark.parametrize("ratio", [0.0, 1.0, -0.25, 1.5, math.nan, math.inf])
def test_split_random_rejects_ratios_outside_the_open_interval(ratio):
    with pytest.raises(ValueError, match="train_ratio must be a float strictly between 0 and 1"):
        split_random(_dataset(_rows(10)), ratio, seed=0)


@pytest.mark.parametrize("ratio", [0, 1, True, "0.5", None])
def test_split_random_rejects_ratios_that_are_not_floats(ratio):
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
    with pytest.raises(ValueError, match=r"seed must be an int in \[0, 4294967295\], got -1"):
        split_random(_dataset(_rows(10)), 0.5, seed=-1)


def test_split_random_refuses_to_leave_a_part_empty():
    with pytest.raises(ValueError, match="leaves the test part empty"):
        split_random(_dataset(_rows(3)), 0.9, seed=0)
    with pytest.raises(ValueError, match="leaves the train part empty"):
        split_random(_dataset(_rows(1)), 0.4, seed=0)


def test_split_random_of_a_split_composes():
    train, _ = split_by_column(_dataset(_rows(16), source_id="base"), "split")
    fit, held_out = split_random(train, 0.75, seed=4)
    assert sorted(_xs(fit) + _xs(held_out)) == _xs(train)
    assert find_source_id(fit).startswith("base/split_by_column(column='split', value='train')/split_random(")
