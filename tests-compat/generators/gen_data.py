"""tinax 0.2's data artifacts: record files, splits, batches and iterator states.

Runs under the real tinax 0.2 (its only argument is the output folder) and
writes there:

- ``records/``: Parquet and ArrayRecord files that 0.2's writers made from a
  range of record shapes, Parquet files that pyarrow wrote directly (0.2 read
  any Parquet file), and ``records.json``: for every input, what 0.2's writer
  did (the exception it raised, or the rows its reader gave back), and the
  exceptions 0.2's readers raised for files that are not records.
- ``splits.json``: the parts of ``split_random`` over a grid of sizes, ratios
  and seeds, and of ``split_by_column`` for several value types, plus the
  exception types of bad calls.
- ``pipelines.json``: the batches of ``training_batches`` and
  ``evaluation_batches`` over a grid of sizes, shards, batch sizes, shuffle
  flags, epoch counts and seeds, the values of random transformations applied
  on top (their default seeds come from the pipeline's seed), and the
  exception types of calls with one or two bad arguments.
- ``states/``: iterator states saved mid-stream (``get_state()``, and an
  Orbax checkpoint made by 0.2's ``save_checkpointables``), each with the
  batches that followed.

Values are written with :func:`tag`, a JSON encoding that keeps each value's
exact type, so ``test_data_artifacts.py`` compares 0.2's results with ours by
comparing tags. That test imports this file for :func:`tag` and the inputs
(:func:`record_cases` and the grids), so everything that needs tinax 0.2
runs inside :func:`main`.
"""

from __future__ import annotations

import collections
import datetime
import decimal
import json
import math
import pathlib
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# ---------------------------------------------------------------------------
# Shared with the test


def tag(value: Any) -> Any:
    """Encodes a value as JSON that names its exact type at every level."""
    kind = type(value)
    name = f"{kind.__module__}.{kind.__qualname__}"
    if value is None:
        return ["None"]
    if kind is bool:
        return ["bool", value]
    if kind is int:
        return ["int", str(value)]
    if kind is float:
        return ["float", repr(value)]
    if kind is str:
        return ["str", value]
    if kind is bytes:
        return ["bytes", value.hex()]
    if kind in (list, tuple):
        return [kind.__name__, [tag(item) for item in value]]
    if kind is dict:
        return ["dict", [[tag(key), tag(item)] for key, item in value.items()]]
    if isinstance(value, np.ndarray):
        return [name, str(value.dtype), list(value.shape), np.ascontiguousarray(value).tobytes().hex()]
    if isinstance(value, np.generic):
        return [name, str(value.dtype), value.tobytes().hex()]
    return [name, repr(value)]


def error_tag(error: BaseException) -> list[str]:
    """Names an exception's class and every class it derives from."""
    return [f"{cls.__module__}.{cls.__qualname__}" for cls in type(error).__mro__]


def outcome(function: Callable[[], Any]) -> dict[str, Any]:
    """Runs a call and records its tagged result or the exception it raised."""
    try:
        return {"value": tag(function())}
    except Exception as error:
        return {"error": error_tag(error)}


def record_cases() -> dict[str, tuple[Any, tuple[str, ...]]]:
    """The writer inputs: name -> (records, the writers to try them with)."""
    both = ("parquet", "array_record")
    nan = math.nan
    return {
        "ints": ([{"id": 0, "label": 1}, {"id": 1, "label": 0}], both),
        "scalars": (
            [{"i": 1, "f": 1.5, "s": "x", "t": True, "n": None}, {"i": -2, "f": -0.0, "s": "", "t": False, "n": None}],
            both,
        ),
        "scalars_and_bytes": ([{"i": 1, "b": b"\x00\xff"}, {"i": 2, "b": b""}], both),
        "none_then_int": ([{"a": None}, {"a": 3}], both),
        "str_then_none": ([{"a": "x"}, {"a": None}], both),
        "int_then_float": ([{"a": 1}, {"a": 2.5}], both),
        "bool_then_int": ([{"a": True}, {"a": 2}], both),
        "missing_field": ([{"a": 1, "b": 2}, {"a": 3}], both),
        "missing_first_field": ([{"a": 1, "b": 2}, {"b": 3}], both),
        "extra_field": ([{"a": 1}, {"a": 3, "b": 4}], both),
        "reordered_fields": ([{"a": 1, "b": "x"}, {"b": "y", "a": 2}], both),
        "lists": ([{"a": [1, 2, 3]}, {"a": [4]}], both),
        "tuples": ([{"a": (1, 2)}, {"a": (3,)}], both),
        "nested": ([{"a": {"b": 1, "c": [1.5]}}, {"a": {"b": 2, "c": []}}], both),
        "list_of_dicts": ([{"a": [{"x": 1}, {"x": 2}]}], both),
        "empty_list": ([{"a": []}], both),
        "ragged_nested": ([{"a": [[1], [2, 3]]}], both),
        "numpy_1d": ([{"a": np.arange(3, dtype=np.int32)}, {"a": np.arange(2, dtype=np.int32)}], both),
        "numpy_2d": ([{"a": np.ones((2, 2), dtype=np.float32)}], both),
        "numpy_bool": ([{"a": np.array([True, False])}], both),
        "numpy_float16": ([{"a": np.ones(2, np.float16)}], both),
        "numpy_and_list": ([{"a": np.arange(3), "b": [1]}, {"a": np.arange(1), "b": []}], both),
        "numpy_scalars": ([{"a": np.float32(1.5), "b": np.int64(3)}], both),
        "numpy_str": ([{"a": np.str_("q")}], both),
        "big_int": ([{"a": 2**63}], both),
        "nan_inf": ([{"a": nan, "b": math.inf, "c": -math.inf}], both),
        "unicode": ([{"a": "héllo 日本 🙂"}], both),
        "lone_surrogate": ([{"a": "\ud800"}], both),
        "int_keys": ([{1: "a", 2: "b"}], both),
        "none_key": ([{None: 1}], both),
        "numpy_str_key": ([{np.str_("a"): 1}], both),
        "empty_record": ([{}], both),
        "empty_records": ([{}, {}], both),
        "dates": ([{"a": datetime.date(2020, 1, 2)}], both),
        "decimals": ([{"a": decimal.Decimal("1.5")}], both),
        "ordered_dict": ([collections.OrderedDict(b=1, a=2)], both),
        "mapping_proxy": ([types.MappingProxyType({"a": 1})], both),
        "tuple_of_records": (({"a": 1}, {"a": 2}), both),
        "many_rows": ([{"id": index, "text": f"row {index}", "score": index / 7} for index in range(5000)], both),
        "no_records": ([], both),
        "list_rows": ([[1, 2], [3]], both),
        "str_rows": (["a", "bc"], both),
        "number_rows": ([1, 2.5, None], both),
        "second_not_a_mapping": ([{"a": 1}, 5], both),
    }


#: split_random part sizes: dataset sizes and ratios (the ratios of the
#: ``random.Random(0)`` stream complete the list).
SPLIT_SIZE_GRID = (*range(2, 61), 99, 100, 101, 1000, 1001, 12345)
SPLIT_SIZE_RATIOS = (
    0.001,
    0.01,
    0.1,
    0.125,
    0.2,
    0.25,
    0.3,
    1 / 3,
    0.35,
    0.4,
    0.45,
    0.5,
    0.55,
    0.6,
    2 / 3,
    0.7,
    0.75,
    0.8,
    0.85,
    0.875,
    0.9,
    0.95,
    0.99,
    0.999,
)
SPLIT_RANDOM_RATIOS = 30
#: split_random parts, row by row (grain's index shuffle takes about 1.5 ms
#: per row read, hence a smaller grid).
SPLIT_SIZES = (*range(2, 13), 17, 25, 40)
SPLIT_RATIOS = (0.1, 0.5, 2 / 3, 0.8, 0.999)
SPLIT_SEEDS = (0, 7, 2**32 - 1)


def split_size_ratios() -> list[float]:
    """The ratios of the part-size grid."""
    import random

    generator = random.Random(0)
    return [*SPLIT_SIZE_RATIOS, *(generator.random() for _ in range(SPLIT_RANDOM_RATIOS))]


#: Pipeline grid.
PIPELINE_SIZES = (1, 2, 3, 5, 8, 11, 13, 17, 24, 31)
PIPELINE_SHARD_COUNTS = (1, 2, 3, 4)
PIPELINE_BATCH_SIZES = (1, 2, 3, 4)
PIPELINE_EPOCHS = (1, 2, None)
#: Shuffle seeds (grain's index shuffle takes about 1.5 ms per row read, hence few).
PIPELINE_SEEDS = (5,)
#: Batches taken from an infinite pipeline.
INFINITE_TAKE = 12


def batch_ids(rows: Sequence[Any]) -> list[Any]:
    """The batch function of the pipeline grid: the rows of a batch, as a list."""
    return list(rows)


def row_ids(rows: Sequence[dict[str, Any]]) -> list[int]:
    """The batch function for dict rows: their ids."""
    return [row["id"] for row in rows]


def take(dataset: Any, count: int) -> list[Any]:
    """The first ``count`` elements of a MapDataset, by random access."""
    return [dataset[index] for index in range(min(count, len(dataset)))]


def pipeline_key(*parts: Any) -> str:
    return "|".join(repr(part) for part in parts)


def bad_pipeline_arguments(grain: Any) -> dict[str, list[tuple[str, Any]]]:
    """Invalid values per argument, for the error-precedence grid."""
    options = grain.sharding.ShardOptions
    return {
        "dataset": [
            ("list", [1, 2]),
            ("infinite", grain.MapDataset.range(4).repeat()),
            ("one_row", grain.MapDataset.range(1)),
            ("iter", grain.MapDataset.range(4).to_iter_dataset()),
        ],
        "shard_options": [
            ("tuple", (0, 1)),
            ("bool_index", options(True, 2, drop_remainder=True)),
            ("no_drop", options(0, 1, drop_remainder=False)),
            ("drop", options(0, 1, drop_remainder=True)),
            ("int_drop", options(0, 1, drop_remainder=1)),
            ("float_index", options(0.0, 1, drop_remainder=True)),
        ],
        "seed": [("bool", True), ("float", 1.5), ("negative", -1), ("none", None)],
        "shuffle": [("int", 1), ("none", None)],
        "num_epochs": [("bool", True), ("zero", 0), ("float", 1.0)],
        "batch_size": [("bool", True), ("zero", 0), ("large", 100), ("float", 2.0)],
        "batch_fn": [("none", None)],
    }


# ---------------------------------------------------------------------------
# Runs under tinax 0.2


def foreign_tables() -> dict[str, tuple[Any, dict[str, Any]]]:
    """Parquet files pyarrow writes directly: name -> (table, ``write_table`` options)."""
    import pyarrow as pa

    table = pa.table(
        {
            "int8": pa.array([1, -2, None, 4, 5, 6, 7], pa.int8()),
            "uint64": pa.array([2**64 - 1, 0, 1, 2, 3, 4, 5], pa.uint64()),
            "float32": pa.array([1.5, None, -0.0, math.inf, math.nan, 3.25, 0.1], pa.float32()),
            "dictionary": pa.array(["x", "y", "x", None, "z", "x", "y"]).dictionary_encode(),
            "large_string": pa.array(["a", "b", "c", "d", "e", "f", "g"], pa.large_string()),
            "binary": pa.array([b"\x00", b"", None, b"abc", b"d", b"e", b"f"], pa.binary()),
            "timestamp": pa.array([1, 2, 3, 4, 5, 6, None], pa.timestamp("ms", tz="UTC")),
            "naive_timestamp": pa.array([1, 2, 3, 4, 5, 6, 7], pa.timestamp("us")),
            "date": pa.array([0, 1, 2, 3, 4, 5, 18000], pa.date32()),
            "time": pa.array([0, 1000, 2000, 3000, 4000, 5000, 6000], pa.time32("ms")),
            "decimal": pa.array([decimal.Decimal("1.25")] * 6 + [None], pa.decimal128(5, 2)),
            "list": pa.array([[1], [], None, [2, 3], [4], [5], [6]], pa.list_(pa.int64())),
            "fixed_list": pa.array(
                [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10], [11, 12], [13, 14]], pa.list_(pa.int32(), 2)
            ),
            "struct": pa.array([{"p": 1, "q": "a"}] * 6 + [None], pa.struct([("p", pa.int16()), ("q", pa.string())])),
            "map": pa.array([[("k", 1)], [], None, [("a", 2), ("b", 3)], [], [], []], pa.map_(pa.string(), pa.int64())),
            "null": pa.nulls(7),
            "bool": pa.array([True, False, None, True, True, False, True]),
        }
    )
    return {
        "types": (table, {"row_group_size": 3}),
        "one_group": (table, {}),
        "no_rows": (table.slice(0, 0), {}),
        "no_compression": (table, {"compression": "none", "use_dictionary": False}),
    }


def record_extra_writes(data: Any, folder: pathlib.Path) -> dict[str, Callable[[], Any]]:
    """Writes beyond :func:`record_cases`; each returns the path it wrote."""

    def generated(kind: str) -> pathlib.Path:
        path = folder / f"generated.{kind}"
        writer = data.write_parquet_record if kind == "parquet" else data.write_array_record
        writer(path, ({"id": index} for index in range(3)))
        return path

    def grouped() -> pathlib.Path:
        path = folder / "grouped.array_record"
        data.write_array_record(
            path, [{"id": index, "tokens": list(range(index))} for index in range(10)], group_size=4
        )
        return path

    def replaced(kind: str) -> pathlib.Path:
        path = folder / f"replaced.{kind}"
        writer = data.write_parquet_record if kind == "parquet" else data.write_array_record
        writer(path, [{"a": 1}])
        writer(path, [{"a": 2}, {"a": 3}])
        return path

    return {
        "parquet/generated": lambda: generated("parquet"),
        "array_record/generated": lambda: generated("array_record"),
        "array_record/grouped": grouped,
        "parquet/replaced": lambda: replaced("parquet"),
        "array_record/replaced": lambda: replaced("array_record"),
    }


def record_error_calls(data: Any, folder: pathlib.Path) -> dict[str, Callable[[], Any]]:
    """Reads and writes of paths and arguments that are not records (``folder`` gets the targets)."""
    (folder / "garbage.bin").write_bytes(b"not a record file " * 10)
    (folder / "empty.bin").write_bytes(b"")
    (folder / "a_folder").mkdir()
    writers = {"parquet": data.write_parquet_record, "array_record": data.write_array_record}
    readers = {"parquet": data.read_parquet_record, "array_record": data.read_array_record}
    calls: dict[str, Callable[[], Any]] = {}
    for kind in ("parquet", "array_record"):
        for label, target in (
            ("garbage", folder / "garbage.bin"),
            ("empty", folder / "empty.bin"),
            ("folder", folder / "a_folder"),
            ("missing", folder / "missing.file"),
            ("not_a_path", 7),
            ("bytes_path", bytes(folder / "garbage.bin")),
        ):
            calls[f"read/{kind}/{label}"] = lambda kind=kind, target=target: list(readers[kind](target))
        for label, target, records in (
            ("missing_folder", folder / "nope" / f"x.{kind}", [{"a": 1}]),
            ("folder", folder / "a_folder", [{"a": 1}]),
            ("not_a_path", 7, [{"a": 1}]),
            ("records_none", folder / f"n.{kind}", None),
            ("records_int", folder / f"n.{kind}", 5),
            ("records_generator_of_lists", folder / f"g.{kind}", ([index] for index in range(2))),
        ):
            calls[f"write/{kind}/{label}"] = lambda kind=kind, target=target, records=records: writers[kind](
                target, records
            )
    for label, group_size in (("zero", 0), ("bool", True), ("float", 2.0), ("numpy", np.int64(2)), ("huge", 2**40)):
        calls[f"write/array_record/group_size_{label}"] = lambda label=label, group_size=group_size: (
            data.write_array_record(folder / f"g_{label}.array_record", [{"a": 1}], group_size=group_size)
        )
    return calls


def _records(out: pathlib.Path) -> None:
    import pyarrow.parquet as pq

    import tinax.data as data

    folder = out / "records"
    folder.mkdir()
    results: dict[str, Any] = {"written": {}, "foreign": {}, "errors": {}}
    writers = {"parquet": data.write_parquet_record, "array_record": data.write_array_record}
    readers = {"parquet": data.read_parquet_record, "array_record": data.read_array_record}
    for name, (records, kinds) in record_cases().items():
        for kind in kinds:
            path = folder / f"{name}.{kind}"
            entry: dict[str, Any] = {}
            try:
                writers[kind](path, records)
            except Exception as error:
                entry["write_error"] = error_tag(error)
            else:
                entry["file"] = path.name
                entry["read"] = outcome(lambda path=path, kind=kind: list(readers[kind](path)))
            results["written"][f"{kind}/{name}"] = entry
    for key, write in record_extra_writes(data, folder).items():
        entry = {}
        try:
            path = write()
        except Exception as error:
            entry["write_error"] = error_tag(error)
        else:
            entry["file"] = path.name
            entry["read"] = outcome(lambda path=path, key=key: list(readers[key.partition("/")[0]](path)))
        results["written"][key] = entry
    for name, (table, options) in foreign_tables().items():
        path = folder / f"foreign_{name}.parquet"
        pq.write_table(table, path, **options)
        results["foreign"][name] = {
            "file": path.name,
            "read": outcome(lambda path=path: list(data.read_parquet_record(path))),
        }
    targets = out / "record_error_targets"
    targets.mkdir()
    for key, call in record_error_calls(data, targets).items():
        results["errors"][key] = outcome(call)
    (folder / "records.json").write_text(json.dumps(results))


def split_random_calls(data: Any, grain: Any) -> dict[str, Callable[[], Any]]:
    """Calls of split_random beyond the grids."""

    def rows(size: int) -> Any:
        return grain.MapDataset.source([{"id": index, "c": "x"} for index in range(size)])

    def parts(*arguments: Any, **keywords: Any) -> list[list[Any]]:
        return [list(part) for part in data.split_random(*arguments, **keywords)]

    return {
        "drop_column": lambda: parts(rows(6), 0.5, seed=3, drop_column="c"),
        "drop_missing_column": lambda: parts(rows(6), 0.5, seed=3, drop_column="zz"),
        "drop_empty_name": lambda: parts(rows(6), 0.5, seed=3, drop_column=""),
        "drop_none": lambda: parts(rows(6), 0.5, seed=3, drop_column=None),
        "filtered": lambda: parts(rows(9).filter(lambda row: row["id"] % 3), 0.5, seed=1),
        "filtered_lengths": lambda: [
            len(part) for part in data.split_random(rows(9).filter(lambda row: row["id"] % 3), 0.5, seed=1)
        ],
        "ints": lambda: parts(grain.MapDataset.range(7), 0.5, seed=2),
        "float64_ratio": lambda: parts(rows(5), np.float64(0.4), seed=2),
        "shuffled_below": lambda: parts(rows(8).seed(4).shuffle(), 0.5, seed=9),
        "shuffle_above_part": lambda: [
            list(part.shuffle()) for part in data.split_random(rows(8).seed(4), 0.5, seed=9)
        ],
        "random_map_above_part": lambda: [
            list(part.random_map(lambda row, generator: (row["id"], int(generator.integers(1 << 20)))))
            for part in data.split_random(rows(8).seed(4), 0.5, seed=9)
        ],
        "ratio_int_zero": lambda: data.split_random(rows(4), 0, seed=0),
        "ratio_int_one": lambda: data.split_random(rows(4), 1, seed=0),
        "ratio_int_two": lambda: data.split_random(rows(4), 2, seed=0),
        "ratio_zero": lambda: data.split_random(rows(4), 0.0, seed=0),
        "ratio_one": lambda: data.split_random(rows(4), 1.0, seed=0),
        "ratio_nan": lambda: data.split_random(rows(4), math.nan, seed=0),
        "ratio_bool": lambda: data.split_random(rows(4), True, seed=0),
        "ratio_str": lambda: data.split_random(rows(4), "0.5", seed=0),
        "ratio_numpy_int": lambda: data.split_random(rows(4), np.int64(0), seed=0),
        "seed_bool": lambda: data.split_random(rows(4), 0.5, seed=True),
        "seed_float": lambda: data.split_random(rows(4), 0.5, seed=1.0),
        "seed_negative": lambda: data.split_random(rows(4), 0.5, seed=-1),
        "seed_too_large": lambda: data.split_random(rows(4), 0.5, seed=2**32),
        "drop_column_int": lambda: data.split_random(rows(4), 0.5, seed=0, drop_column=1),
        "one_row": lambda: data.split_random(rows(1), 0.5, seed=0),
        "no_rows": lambda: data.split_random(rows(0), 0.5, seed=0),
        "not_a_dataset": lambda: data.split_random([1, 2], 0.5, seed=0),
        "iter_dataset": lambda: data.split_random(rows(4).to_iter_dataset(), 0.5, seed=0),
        "ratio_bad_and_seed_bad": lambda: data.split_random(rows(4), 1.5, seed=True),
        "one_row_and_drop_bad": lambda: data.split_random(rows(1), 0.5, seed=0, drop_column=1),
        "one_row_and_seed_negative": lambda: data.split_random(rows(1), 0.5, seed=-1),
    }


def split_by_column_calls(data: Any, grain: Any) -> dict[str, Callable[[], Any]]:
    """Calls of split_by_column."""

    def keyed(values: Sequence[Any], key: str = "s") -> Any:
        return grain.MapDataset.source([{"id": index, key: value} for index, value in enumerate(values)])

    def parts(*arguments: Any, **keywords: Any) -> list[list[Any]]:
        return [list(part) for part in data.split_by_column(*arguments, **keywords)]

    def filtered() -> Any:
        return keyed(["train", "test", "train", "test"]).filter(lambda row: row["id"] != 1)

    return {
        "strings": lambda: parts(keyed(["train", "test", "train"]), "s"),
        "keep_column": lambda: parts(keyed(["train", "test"]), "s", drop_column=False),
        "ints": lambda: parts(keyed([0, 1, 1, 0]), "s", values=(0, 1)),
        "bool_and_int": lambda: parts(keyed([True, 0, 1]), "s", values=(1, 0), drop_column=False),
        "float_and_int": lambda: parts(keyed([1.0, 0]), "s", values=(1, 0), drop_column=False),
        "numpy_ints": lambda: parts(keyed([np.int64(0), np.int64(1)]), "s", values=(0, 1), drop_column=False),
        "bytes": lambda: parts(keyed([b"a", b"b"]), "s", values=(b"a", b"b")),
        "none_value": lambda: parts(keyed([None, 1]), "s", values=(None, 1)),
        "list_values": lambda: parts(keyed(["a", "b"]), "s", values=["a", "b"]),
        "str_values": lambda: parts(keyed(["a", "b"]), "s", values="ab"),
        "generator_values": lambda: parts(keyed(["a", "b"]), "s", values=(value for value in "ab")),
        "unhashable_values": lambda: parts(keyed([[1], [2]]), "s", values=([1], [2])),
        "empty_column_name": lambda: parts(keyed(["a"], key=""), "", values=("a", "b")),
        "empty_dataset": lambda: parts(keyed([]), "s"),
        "one_part_empty": lambda: parts(keyed(["train"]), "s"),
        "filtered": lambda: parts(filtered(), "s"),
        "filtered_lengths": lambda: [len(part) for part in data.split_by_column(filtered(), "s")],
        "mapped_to_none": lambda: parts(keyed(["train", "test"]).map(lambda row: None if row["id"] == 0 else row), "s"),
        "random_access": lambda: [
            [part[index] for index in range(len(part))]
            for part in data.split_by_column(keyed(["test", "train", "train"]), "s")
        ],
        "bytes_against_str": lambda: data.split_by_column(keyed([b"train", "test"]), "s"),
        "third_value": lambda: data.split_by_column(keyed(["train", "val"]), "s"),
        "nan": lambda: data.split_by_column(keyed([math.nan, 1]), "s", values=(math.nan, 1)),
        "three_values": lambda: data.split_by_column(keyed(["a"]), "s", values=("a", "b", "c")),
        "one_value": lambda: data.split_by_column(keyed(["a"]), "s", values=("a",)),
        "equal_values": lambda: data.split_by_column(keyed(["a"]), "s", values=("a", "a")),
        "one_and_true": lambda: data.split_by_column(keyed([1]), "s", values=(1, True)),
        "values_none": lambda: data.split_by_column(keyed(["a"]), "s", values=None),
        "values_int": lambda: data.split_by_column(keyed(["a"]), "s", values=5),
        "missing_column": lambda: data.split_by_column(keyed(["a"]), "t", values=("a", "b")),
        "missing_then_bad": lambda: data.split_by_column(grain.MapDataset.source([{"x": 1}, {"s": "zzz"}]), "s"),
        "bad_then_missing": lambda: data.split_by_column(grain.MapDataset.source([{"s": "zzz"}, {"x": 1}]), "s"),
        "not_a_row": lambda: data.split_by_column(grain.MapDataset.source([{"s": "train"}, 5]), "s"),
        "list_row": lambda: data.split_by_column(grain.MapDataset.source([["s"]]), "s"),
        "column_int": lambda: data.split_by_column(keyed(["a"]), 1, values=("a", "b")),
        "drop_column_int": lambda: data.split_by_column(keyed(["train"]), "s", drop_column=1),
        "not_a_dataset": lambda: data.split_by_column([{"s": "train"}], "s"),
        "column_bad_and_values_bad": lambda: data.split_by_column(keyed(["a"]), 1, values=("a",)),
        "values_bad_and_drop_bad": lambda: data.split_by_column(keyed(["a"]), "s", values=("a",), drop_column=1),
    }


def split_random_parts(data: Any, grain: Any, size: int, ratio: float, seed: int) -> list[list[int]]:
    """The ids in the parts of one split_random call of the grid."""
    dataset = grain.MapDataset.source([{"id": index, "c": index % 3} for index in range(size)])
    first, second = data.split_random(dataset, ratio, seed=seed)
    return [[part[index]["id"] for index in range(len(part))] for part in (first, second)]


def _splits(out: pathlib.Path) -> None:
    import grain

    import tinax.data as data

    results: dict[str, Any] = {"random_sizes": {}, "random": {}, "random_calls": {}, "by_column": {}}
    for size in SPLIT_SIZE_GRID:
        dataset = grain.MapDataset.range(size)
        for ratio in split_size_ratios():
            first, second = data.split_random(dataset, ratio, seed=0)
            results["random_sizes"][pipeline_key(size, ratio)] = [len(first), len(second)]
    for size in SPLIT_SIZES:
        for ratio in SPLIT_RATIOS:
            for seed in SPLIT_SEEDS:
                results["random"][pipeline_key(size, ratio, seed)] = split_random_parts(data, grain, size, ratio, seed)
    for name, call in split_random_calls(data, grain).items():
        results["random_calls"][name] = outcome(call)
    for name, call in split_by_column_calls(data, grain).items():
        results["by_column"][name] = outcome(call)
    (out / "splits.json").write_text(json.dumps(results))


def training_grid() -> list[tuple[int, int, int, int, bool, int | None, int]]:
    """(size, shard count, shard index, batch size, shuffle, epochs, seed) of the training grid."""
    return [
        (size, count, index, batch_size, shuffle, epochs, seed)
        for size in PIPELINE_SIZES
        for count in PIPELINE_SHARD_COUNTS
        for index in range(count)
        for batch_size in PIPELINE_BATCH_SIZES
        for shuffle in (False, True)
        for epochs in PIPELINE_EPOCHS
        for seed in (PIPELINE_SEEDS if shuffle else (0,))
    ]


def evaluation_grid() -> list[tuple[int, int, int, int]]:
    """(size, shard count, shard index, batch size) of the evaluation grid."""
    return [
        (size, count, index, batch_size)
        for size in (0, *PIPELINE_SIZES)
        for count in (*PIPELINE_SHARD_COUNTS, 5)
        for index in range(count)
        for batch_size in PIPELINE_BATCH_SIZES
    ]


def training_grid_batches(data: Any, grain: Any, point: tuple[Any, ...]) -> list[Any]:
    size, count, index, batch_size, shuffle, epochs, seed = point
    batches = data.training_batches(
        grain.MapDataset.range(size),
        shard_options=grain.sharding.ShardOptions(index, count, drop_remainder=True),
        seed=seed,
        shuffle=shuffle,
        num_epochs=epochs,
        batch_size=batch_size,
        batch_fn=batch_ids,
    )
    return take(batches, INFINITE_TAKE)


def evaluation_grid_batches(data: Any, grain: Any, point: tuple[Any, ...]) -> list[Any]:
    size, count, index, batch_size = point
    batches = data.evaluation_batches(
        grain.MapDataset.range(size),
        shard_options=grain.sharding.ShardOptions(index, count, drop_remainder=False),
        batch_size=batch_size,
        batch_fn=batch_ids,
    )
    return list(batches)


def noisy(value: Any, generator: np.random.Generator) -> Any:
    """A random transformation: its stream comes from the pipeline's seed."""
    return [value, int(generator.integers(1 << 30))]


def pipeline_calls(data: Any, grain: Any) -> dict[str, Callable[[], Any]]:
    """Pipelines beyond the grids: iteration, transformations on top, odd datasets and seeds."""
    options = grain.sharding.ShardOptions

    def records(size: int) -> Any:
        return grain.MapDataset.source(data.InMemorySource([{"id": index} for index in range(size)], source_id="gen"))

    def train(dataset: Any = None, **overrides: Any) -> Any:
        arguments: dict[str, Any] = {
            "shard_options": options(1, 2, drop_remainder=True),
            "seed": 11,
            "shuffle": True,
            "num_epochs": 3,
            "batch_size": 2,
            "batch_fn": row_ids,
        }
        arguments.update(overrides)
        return data.training_batches(records(13) if dataset is None else dataset, **arguments)

    def evaluate(dataset: Any, shard_options: Any) -> Any:
        return data.evaluation_batches(dataset, shard_options=shard_options, batch_size=2, batch_fn=row_ids)

    return {
        "iterated": lambda: list(train()),
        "iterated_infinite": lambda: [batch for batch, _ in zip(train(num_epochs=None), range(25), strict=False)],
        "to_iter_dataset": lambda: list(
            train().to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=3))
        ),
        "random_map_on_batches": lambda: list(train().random_map(noisy)),
        "random_map_on_iter_dataset": lambda: list(train().to_iter_dataset().random_map(noisy)),
        "shuffle_on_batches": lambda: list(train().shuffle()),
        "slice_of_batches": lambda: list(train()[2:7]),
        "length": lambda: len(train()),
        "length_infinite": lambda: len(train(num_epochs=None)),
        "evaluation_records": lambda: list(evaluate(records(9), options(2, 4))),
        "evaluation_random_map": lambda: list(evaluate(records(9).seed(3), options(0, 2)).random_map(noisy)),
        "mapped_dataset": lambda: list(train(records(13).map(lambda row: {"id": row["id"] * 10}))),
        "seeded_below": lambda: list(
            train(
                records(13).seed(1).random_map(lambda row, generator: {"id": row["id"] + int(generator.integers(100))})
            )
        ),
        "filtered_dataset": lambda: list(train(records(13).filter(lambda row: row["id"] % 2))),
        "filtered_evaluation": lambda: list(evaluate(records(9).filter(lambda row: row["id"] % 2), options(0, 1))),
        "seed_negative_no_shuffle": lambda: list(train(seed=-1, shuffle=False)),
        "seed_negative_shuffle": lambda: list(train(seed=-1)),
        "seed_huge": lambda: list(train(seed=2**70)),
        "seed_large": lambda: list(train(seed=2**40 + 3, shard_options=options(2, 3, drop_remainder=True))),
        "seed_zero_one_batch": lambda: list(
            train(seed=0, batch_size=1, shard_options=options(0, 1, drop_remainder=True))
        ),
        "seed_numpy": lambda: list(train(seed=np.int64(4))),
        "no_sharding": lambda: list(train(shard_options=grain.sharding.NoSharding())),
        "evaluation_no_sharding": lambda: list(evaluate(records(5), grain.sharding.NoSharding())),
        "shard_by_jax_process": lambda: list(
            train(shard_options=grain.sharding.ShardByJaxProcess(drop_remainder=True))
        ),
    }


def pipeline_error_calls(data: Any, grain: Any) -> dict[str, Callable[[], Any]]:
    """Calls with one or two bad arguments (which one a call reports decides the exception type)."""
    options = grain.sharding.ShardOptions
    bad = bad_pipeline_arguments(grain)
    base = {
        "dataset": grain.MapDataset.range(10),
        "shard_options": options(0, 1, drop_remainder=True),
        "seed": 0,
        "shuffle": False,
        "num_epochs": 1,
        "batch_size": 2,
        "batch_fn": batch_ids,
    }
    evaluation_names = ("dataset", "shard_options", "batch_size", "batch_fn")
    calls: dict[str, Callable[[], Any]] = {}
    for function, names in (("training", tuple(bad)), ("evaluation", evaluation_names)):
        for first_position, first in enumerate(names):
            for second in (None, *names[first_position + 1 :]):
                for first_label, first_value in bad[first]:
                    for second_label, second_value in bad[second] if second else [("", None)]:
                        arguments = dict(base)
                        if function == "evaluation":
                            arguments = {name: arguments[name] for name in evaluation_names}
                            arguments["shard_options"] = options(0, 1, drop_remainder=False)
                        arguments[first] = first_value
                        if second:
                            arguments[second] = second_value
                        key = f"{function}:{first}={first_label}" + (f"+{second}={second_label}" if second else "")
                        call = data.training_batches if function == "training" else data.evaluation_batches
                        calls[key] = lambda call=call, arguments=arguments: len(call(**arguments))
    return calls


def _pipelines(out: pathlib.Path) -> None:
    import grain

    import tinax.data as data

    results: dict[str, Any] = {
        "training": {
            pipeline_key(*point): outcome(lambda point=point: training_grid_batches(data, grain, point))
            for point in training_grid()
        },
        "evaluation": {
            pipeline_key(*point): outcome(lambda point=point: evaluation_grid_batches(data, grain, point))
            for point in evaluation_grid()
        },
        "calls": {name: outcome(call) for name, call in pipeline_calls(data, grain).items()},
        "errors": {name: outcome(call) for name, call in pipeline_error_calls(data, grain).items()},
    }
    (out / "pipelines.json").write_text(json.dumps(results))


def state_pipelines(data: Any, grain: Any) -> dict[str, Callable[[], Any]]:
    """Pipelines whose iterator states are saved."""
    options = grain.sharding.ShardOptions

    def rows(size: int) -> Any:
        return grain.MapDataset.source([{"id": index} for index in range(size)])

    return {
        "training": lambda: data.training_batches(
            rows(23),
            shard_options=options(1, 2, drop_remainder=True),
            seed=3,
            shuffle=True,
            num_epochs=3,
            batch_size=3,
            batch_fn=row_ids,
        ),
        "training_infinite": lambda: data.training_batches(
            grain.MapDataset.range(10),
            shard_options=options(0, 1, drop_remainder=True),
            seed=8,
            shuffle=True,
            num_epochs=None,
            batch_size=4,
            batch_fn=batch_ids,
        ),
        "evaluation": lambda: data.evaluation_batches(
            rows(11), shard_options=options(0, 2), batch_size=2, batch_fn=row_ids
        ),
    }


#: (pipeline, how it is iterated, batches consumed before the save, batches read after it)
STATE_CASES = (
    ("training", "iter", 0, 6),
    ("training", "iter", 4, 6),
    ("training", "iter", 9, 6),
    ("training", "to_iter_dataset", 5, 6),
    ("training", "threads", 5, 6),
    ("training_infinite", "iter", 7, 12),
    ("training_infinite", "workers_0", 7, 5),
    ("training_infinite", "workers_2", 7, 5),
    ("evaluation", "iter", 2, 3),
)


def make_iterator(data: Any, grain: Any, dataset: Any, how: str, stack: Any) -> Any:
    """Opens the iterator a state case names (``stack`` is a contextlib.ExitStack that closes it)."""
    if how == "iter":
        return iter(dataset)
    if how == "to_iter_dataset":
        return iter(dataset.to_iter_dataset())
    if how == "threads":
        return iter(dataset.to_iter_dataset(grain.ReadOptions(num_threads=3, prefetch_buffer_size=3)))
    workers = int(how.removeprefix("workers_"))
    return stack.enter_context(data.open_multiprocessing_iterator(dataset.to_iter_dataset(), num_workers=workers))


def following(iterator: Any, count: int) -> list[Any]:
    """The next ``count`` elements of an iterator (fewer if it ends first)."""
    taken = []
    for _ in range(count):
        try:
            taken.append(next(iterator))
        except StopIteration:
            break
    return taken


def _states(out: pathlib.Path) -> None:
    import contextlib

    import grain
    from absl import flags

    import tinax.checkpointing as checkpointing
    import tinax.data as data

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    folder = out / "states"
    folder.mkdir()
    pipelines = state_pipelines(data, grain)
    results: dict[str, Any] = {}
    for name, how, consumed, count in STATE_CASES:
        key = f"{name}|{how}|{consumed}"
        with contextlib.ExitStack() as stack:
            iterator = make_iterator(data, grain, pipelines[name](), how, stack)
            for _ in range(consumed):
                next(iterator)
            state = iterator.get_state()
            checkpoint = folder / key.replace("|", "_")
            checkpointing.save_checkpointables(checkpoint, {"iterator": iterator}).result()
            after = following(iterator, count)
        results[key] = {"state": state, "checkpoint": checkpoint.name, "following": tag(after)}
    (folder / "states.json").write_text(json.dumps(results))


def main(argv: Sequence[str]) -> int:
    import time

    out = pathlib.Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for part in (_records, _splits, _pipelines, _states):
        start = time.perf_counter()
        part(out)
        print(f"gen_data: {part.__name__} took {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
