"""Differential cases of ``tinax.data``: sources, record files, splits and batch pipelines."""

from __future__ import annotations

import fractions
import os
from pathlib import Path
from typing import Any

import grain
import numpy as np
from diff_common import Cases, rng, scaled, size_scalars
from diff_describe import attempt

import tinax.data as tdata

M = "tinax.data"


def _rows(count: int, *salt: object) -> list[dict[str, Any]]:
    """JSON- and Parquet-friendly rows: ints, floats, strings, booleans, None, lists and nested maps."""
    r = rng("rows", count, *salt)
    rows = []
    for index in range(count):
        rows.append(
            {
                "id": index,
                "x": round(r.uniform(-10, 10), 6),
                "label": r.choice(["cat", "dog", "émoji 🐍", ""]),
                "split": r.choice(["train", "test"]),
                "flag": r.random() < 0.5,
                "maybe": None if r.random() < 0.3 else r.randint(-5, 5),
                "tokens": [r.randint(0, 9) for _ in range(r.randint(0, 3))],
                "meta": {"source": "s" + str(r.randint(0, 3)), "weight": r.random()},
            }
        )
    return rows


def _dataset(count: int, *salt: object) -> Any:
    return grain.MapDataset.source(_rows(count, *salt))


def _stack(rows: Any) -> Any:
    return {"id": np.asarray([row["id"] for row in rows]), "x": np.asarray([row["x"] for row in rows])}


def _source(cases: Cases) -> None:
    function = f"{M}.InMemorySource"

    def facts(records: Any, source_id: Any) -> Any:
        source = tdata.InMemorySource(records, source_id=source_id)
        return {
            "len": len(source),
            "items": [attempt(source.__getitem__, index) for index in (0, 1, -1, 10**6)],
            "slice": attempt(source.__getitem__, slice(0, 2)),
            "repr": repr(source),
            "source_id": source.source_id,
            "has_dict": hasattr(source, "__dict__"),
            "through_grain": attempt(lambda: list(grain.MapDataset.source(source))),
            "assign_source_id": attempt(setattr, source, "source_id", "other"),
        }

    records: dict[str, Any] = {
        "list": lambda: _rows(3, "src"),
        "tuple": lambda: tuple(range(4)),
        "generator": lambda: (index * index for index in range(3)),
        "empty": list,
        "dict": lambda: {"a": 1, "b": 2},
        "string": lambda: "abc",
        "numpy": lambda: np.arange(3),
        "none": lambda: None,
        "int": lambda: 3,
    }
    for name, make in records.items():
        cases.add(function, f"records-{name}", lambda _, m=make: facts(m(), "source"))
    for name, source_id in {"empty": "", "none": None, "int": 1, "bytes": b"s", "unicode": "données"}.items():
        cases.add(function, f"source_id-{name}", lambda _, s=source_id: facts([1, 2], s))
    cases.add(function, "source_id-missing", lambda _: tdata.InMemorySource([1]))  # type: ignore[call-arg]

    def shares_records(_: Any) -> Any:
        rows = [{"a": [1]}]
        source = tdata.InMemorySource(rows, source_id="s")
        rows[0]["a"].append(2)
        rows.append({"a": [3]})
        return {"first": source[0], "len": len(source)}

    cases.add(function, "holds-references", shares_records)


def _parquet_file(path: Path) -> Any:
    """What a Parquet reader sees besides the rows: schema, row groups, encodings, compression, statistics."""
    import pyarrow.parquet as pq

    metadata = pq.ParquetFile(path).metadata
    columns = []
    for group in range(metadata.num_row_groups):
        for column in range(metadata.num_columns):
            chunk = metadata.row_group(group).column(column).to_dict()
            chunk.pop("file_offset", None)
            for offset in (
                "dictionary_page_offset",
                "data_page_offset",
                "total_compressed_size",
                "total_uncompressed_size",
            ):
                chunk.pop(offset, None)  # They move with the page checksums 0.3 adds.
            columns.append(chunk)
    return {
        "schema": str(pq.read_schema(path)),
        "num_rows": metadata.num_rows,
        "row_groups": metadata.num_row_groups,
        "created_by": metadata.created_by,
        "format_version": metadata.format_version,
        "columns": columns,
    }


def _read_parquet(folder: Path, name: str = "data.parquet") -> Any:
    return {"records": tdata.read_parquet_record(folder / name), "file": _parquet_file(folder / name)}


def _parquet(cases: Cases) -> None:
    write = f"{M}.write_parquet_record"
    read = f"{M}.read_parquet_record"
    r = rng(write)
    for index in range(scaled(10)):
        count = r.choice([1, 2, 5, 12])
        cases.add(
            write,
            "rows",
            lambda folder, c=count, i=index: tdata.write_parquet_record(folder / "data.parquet", _rows(c, "pq", i)),
            files="readback",
            read=_read_parquet,
            also=(read,),
        )
    record_sets: dict[str, Any] = {
        "tuple": lambda: tuple(_rows(2, "t")),
        "empty": list,
        "generator": lambda: (row for row in _rows(2, "g")),
        "string": lambda: "abc",
        "dict": lambda: {"a": [1, 2]},
        "not_mappings": lambda: [1, 2],
        "mixed_schema": lambda: [{"a": 1}, {"b": "x"}],
        "mixed_types": lambda: [{"a": 1}, {"a": "x"}],
        "numpy_values": lambda: [{"a": np.int32(1), "b": np.float32(0.5)}],
        "numpy_array_values": lambda: [{"a": np.arange(3)}],
        "bytes_values": lambda: [{"a": b"\x00\xff"}],
        "nested_lists": lambda: [{"a": [[1, 2], []]}],
        "big_int": lambda: [{"a": 2**70}],
        "nan": lambda: [{"a": float("nan"), "b": float("inf")}],
        "non_string_keys": lambda: [{1: "a"}],
        "empty_row": lambda: [{}],
    }
    for name, make in record_sets.items():
        cases.add(
            write,
            f"records-{name}",
            lambda folder, m=make: tdata.write_parquet_record(folder / "data.parquet", m()),
            files="readback",
            read=_read_parquet,
            also=(read,),
        )
    _paths(cases, write, lambda path: tdata.write_parquet_record(path, [{"a": 1}]), "readback", _read_parquet)
    _read_paths(
        cases,
        read,
        tdata.read_parquet_record,
        "data.parquet",
        lambda path: tdata.write_parquet_record(path, [{"a": 1}]),
    )


def _array_record(cases: Cases) -> None:
    write = f"{M}.write_array_record"
    read = f"{M}.read_array_record"
    r = rng(write)
    for index in range(scaled(8)):
        count = r.choice([0, 1, 3, 9])
        group_size = r.choice([1, 2, 4])
        cases.add(
            write,
            "rows",
            lambda folder, c=count, g=group_size, i=index: tdata.write_array_record(
                folder / "data.array_record", _rows(c, "ar", i), group_size=g
            ),
            files="bytes",
            read=lambda folder: tdata.read_array_record(folder / "data.array_record"),
            also=(read,),
        )
    record_sets: dict[str, Any] = {
        "generator": lambda: (row for row in _rows(3, "gen")),
        "tuple": lambda: tuple(_rows(2, "tup")),
        "not_json": lambda: [{"a": np.arange(2)}],
        "not_json_set": lambda: [{"a": {1}}],
        "nan": lambda: [{"a": float("nan")}],
        "non_string_keys": lambda: [{1: "a", None: 2}],
        "not_mappings": lambda: [1, "a", [2]],
        "none": lambda: None,
        "numpy_scalar_values": lambda: [{"a": np.int64(1)}],
    }
    for name, make in record_sets.items():
        cases.add(
            write,
            f"records-{name}",
            lambda folder, m=make: tdata.write_array_record(folder / "data.array_record", m()),
            files="bytes",
            read=lambda folder: tdata.read_array_record(folder / "data.array_record"),
            also=(read,),
        )
    for name, group_size in size_scalars():
        if name in ("bigint",):
            continue
        cases.add(
            write,
            f"group_size-{name}",
            lambda folder, g=group_size: tdata.write_array_record(
                folder / "data.array_record", _rows(2, "gs"), group_size=g
            ),
            files="bytes",
        )
    _paths(cases, write, lambda path: tdata.write_array_record(path, [{"a": 1}]), "bytes", None)
    _read_paths(
        cases,
        read,
        tdata.read_array_record,
        "data.array_record",
        lambda path: tdata.write_array_record(path, [{"a": 1}]),
    )


def _paths(cases: Cases, function: str, write: Any, files: Any, read: Any) -> None:
    """Where users point a writer: str and Path, an existing file, a folder, a missing parent, no path."""

    def existing(folder: Path) -> Any:
        (folder / "out").write_bytes(b"old")
        result = write(folder / "out")
        return {"result": result, "old_kept": (folder / "out").read_bytes() == b"old"}

    variants: dict[str, Any] = {
        "str": lambda folder: write(str(folder / "out")),
        "pathlike": lambda folder: write(folder / "out"),
        "existing_file": existing,
        "folder": lambda folder: write(folder),
        "missing_parent": lambda folder: write(folder / "missing" / "out"),
        "parent_is_file": lambda folder: (folder / "file").write_bytes(b"x") and write(folder / "file" / "out"),
        "bytes_path": lambda folder: write(os.fsencode(folder / "out")),
        "int_path": lambda folder: write(3),
        "none_path": lambda folder: write(None),
        "relative_dot": lambda folder: _in_folder(folder, lambda: write("./out")),
    }
    for name, call in variants.items():
        cases.add(
            function,
            f"path-{name}",
            call,
            files=files,
            read=None
            if read is None or name in ("folder", "int_path", "none_path")
            else (lambda folder, r=read: r(folder, "out")),
        )


def _in_folder(folder: Path, call: Any) -> Any:
    previous = os.getcwd()
    os.chdir(folder)
    try:
        return call()
    finally:
        os.chdir(previous)


def _read_paths(cases: Cases, function: str, read: Any, name: str, write: Any) -> None:
    def wrong_format(folder: Path) -> Any:
        (folder / name).write_bytes(b"not a record file at all")
        return read(folder / name)

    def written(folder: Path, how: Any) -> Any:
        write(folder / name)
        return read(how(folder / name))

    variants: dict[str, Any] = {
        "str": lambda folder: written(folder, str),
        "pathlike": lambda folder: written(folder, lambda path: path),
        "missing": lambda folder: read(folder / "missing"),
        "folder": lambda folder: read(folder),
        "wrong_format": wrong_format,
        "empty_file": lambda folder: (folder / name).write_bytes(b"") is None and read(folder / name),
        "bytes_path": lambda folder: written(folder, os.fsencode),
        "int_path": lambda folder: read(3),
        "none_path": lambda folder: read(None),
    }
    for label_, call in variants.items():
        cases.add(function, f"path-{label_}", call)


def _splits(cases: Cases) -> None:
    function = f"{M}.split_by_column"
    r = rng(function)
    for _ in range(scaled(8)):
        count = r.choice([0, 1, 4, 11])
        drop = r.choice([True, False])
        cases.add(
            function,
            "random",
            lambda _, c=count, d=drop: tdata.split_by_column(_dataset(c, "sbc"), "split", drop_column=d),
        )
    variants: dict[str, Any] = {
        "values_reversed": lambda: tdata.split_by_column(_dataset(6, "v"), "split", values=("test", "train")),
        "values_list": lambda: tdata.split_by_column(_dataset(6, "v"), "split", values=["train", "test"]),
        "values_same": lambda: tdata.split_by_column(_dataset(6, "v"), "split", values=("train", "train")),
        "values_three": lambda: tdata.split_by_column(_dataset(6, "v"), "split", values=("a", "b", "c")),
        "values_one": lambda: tdata.split_by_column(_dataset(6, "v"), "split", values=("train",)),
        "values_string": lambda: tdata.split_by_column(_dataset(6, "v"), "split", values="ab"),
        "values_ints": lambda: tdata.split_by_column(
            grain.MapDataset.source([{"s": 0}, {"s": 1}, {"s": 0}]), "s", values=(0, 1)
        ),
        "value_outside": lambda: tdata.split_by_column(_dataset(6, "v"), "label"),
        "missing_column": lambda: tdata.split_by_column(_dataset(3, "v"), "nope"),
        "column_int": lambda: tdata.split_by_column(_dataset(3, "v"), 1),
        "drop_none": lambda: tdata.split_by_column(_dataset(3, "v"), "split", drop_column=None),
        "drop_int": lambda: tdata.split_by_column(_dataset(3, "v"), "split", drop_column=1),
        "dataset_list": lambda: tdata.split_by_column(_rows(3, "v"), "split"),
        "dataset_iter": lambda: tdata.split_by_column(_dataset(3, "v").to_iter_dataset(), "split"),
        "source_dataset": lambda: tdata.split_by_column(
            grain.MapDataset.source(tdata.InMemorySource(_rows(5, "ims"), source_id="ims")), "split"
        ),
        "mapped_dataset": lambda: tdata.split_by_column(
            _dataset(5, "m").map(lambda row: {**row, "x2": row["x"] * 2}), "split"
        ),
    }
    for name, call in variants.items():
        cases.add(function, name, lambda _, c=call: c())
    function = f"{M}.split_random"
    r = rng(function)
    for _ in range(scaled(14)):
        count = r.choice([2, 3, 10, 25])
        ratio = r.choice([0.1, 0.25, 0.5, 0.8, 0.99])
        seed = r.choice([0, 1, 42, 2**31])
        drop = r.choice([None, "split", "missing"])
        cases.add(
            function,
            "random",
            lambda _, c=count, t=ratio, s=seed, d=drop: tdata.split_random(_dataset(c, "sr"), t, seed=s, drop_column=d),
        )
    ratios: dict[str, Any] = {
        "zero": 0.0,
        "one": 1.0,
        "negative": -0.5,
        "above": 1.5,
        "int_zero": 0,
        "bool": True,
        "string": "0.5",
        "np_float32": np.float32(0.3),
        "np_float64": np.float64(0.7),
        "nan": float("nan"),
        "none": None,
        "fraction": fractions.Fraction(1, 3),
    }
    for name, ratio in ratios.items():
        cases.add(function, f"ratio-{name}", lambda _, t=ratio: tdata.split_random(_dataset(6, "rt"), t, seed=0))
    for name, seed in {**dict(size_scalars()), "negative": -1}.items():
        cases.add(function, f"seed-{name}", lambda _, s=seed: tdata.split_random(_dataset(6, "sd"), 0.5, seed=s))
    for count in (0, 1):
        cases.add(function, f"size-{count}", lambda _, c=count: tdata.split_random(_dataset(c, "sz"), 0.5, seed=0))
    cases.add(function, "drop_column-int", lambda _: tdata.split_random(_dataset(4, "dc"), 0.5, seed=0, drop_column=1))
    cases.add(function, "dataset-list", lambda _: tdata.split_random(_rows(4, "dl"), 0.5, seed=0))


def _pipelines(cases: Cases) -> None:
    training = f"{M}.training_batches"
    evaluation = f"{M}.evaluation_batches"
    r = rng(training)
    for _ in range(scaled(16)):
        count = r.choice([4, 10, 17, 32])
        shard_count = r.choice([1, 2, 3])
        shard_index = r.randrange(shard_count)
        batch_size = r.choice([1, 2, 3, 4])
        epochs = r.choice([1, 2, None])
        shuffle = r.choice([True, False])
        seed = r.choice([0, 7, 123456789])
        cases.add(
            training,
            "random",
            lambda _, c=count, sc=shard_count, si=shard_index, b=batch_size, e=epochs, sh=shuffle, s=seed: (
                tdata.training_batches(
                    _dataset(c, "tb"),
                    shard_options=grain.sharding.ShardOptions(si, sc, drop_remainder=True),
                    seed=s,
                    shuffle=sh,
                    num_epochs=e,
                    batch_size=b,
                    batch_fn=_stack,
                )
            ),
        )
    for _ in range(scaled(10)):
        count = r.choice([0, 1, 5, 11])
        shard_count = r.choice([1, 2, 3])
        shard_index = r.randrange(shard_count)
        batch_size = r.choice([1, 2, 4])
        cases.add(
            evaluation,
            "random",
            lambda _, c=count, sc=shard_count, si=shard_index, b=batch_size: tdata.evaluation_batches(
                _dataset(c, "eb"),
                shard_options=grain.sharding.ShardOptions(si, sc, drop_remainder=False),
                batch_size=b,
                batch_fn=_stack,
            ),
        )

    def train(**overrides: Any) -> Any:
        arguments = {
            "dataset": _dataset(12, "tv"),
            "shard_options": grain.sharding.ShardOptions(0, 1, drop_remainder=True),
            "seed": 0,
            "shuffle": True,
            "num_epochs": 1,
            "batch_size": 4,
            "batch_fn": _stack,
        }
        arguments.update(overrides)
        dataset = arguments.pop("dataset")
        return tdata.training_batches(dataset, **arguments)

    def evaluate(**overrides: Any) -> Any:
        arguments = {
            "dataset": _dataset(7, "ev"),
            "shard_options": grain.sharding.ShardOptions(0, 1, drop_remainder=False),
            "batch_size": 3,
            "batch_fn": _stack,
        }
        arguments.update(overrides)
        dataset = arguments.pop("dataset")
        return tdata.evaluation_batches(dataset, **arguments)

    shard_options: dict[str, Any] = {
        "wrong_drop": lambda drop: grain.sharding.ShardOptions(0, 1, drop_remainder=not drop),
        "index_out_of_range": lambda drop: grain.sharding.ShardOptions(2, 2, drop_remainder=drop),
        "negative_index": lambda drop: grain.sharding.ShardOptions(-1, 2, drop_remainder=drop),
        "zero_count": lambda drop: grain.sharding.ShardOptions(0, 0, drop_remainder=drop),
        "numpy_ints": lambda drop: grain.sharding.ShardOptions(np.int64(0), np.int64(2), drop_remainder=drop),
        "bool_index": lambda drop: grain.sharding.ShardOptions(False, 1, drop_remainder=drop),
        "by_process": lambda drop: grain.sharding.ShardByJaxProcess(drop_remainder=drop),
        "no_sharding": lambda drop: grain.sharding.NoSharding(),
        "tuple": lambda drop: (0, 1, drop),
        "none": lambda drop: None,
        "drop_int": lambda drop: grain.sharding.ShardOptions(0, 1, drop_remainder=int(drop)),
    }
    for name, make in shard_options.items():
        cases.add(training, f"shard_options-{name}", lambda _, m=make: train(shard_options=m(True)))
        cases.add(evaluation, f"shard_options-{name}", lambda _, m=make: evaluate(shard_options=m(False)))
    for name, value in size_scalars():
        if name == "bigint":
            continue
        cases.add(training, f"batch_size-{name}", lambda _, v=value: train(batch_size=v))
        cases.add(evaluation, f"batch_size-{name}", lambda _, v=value: evaluate(batch_size=v))
        cases.add(training, f"num_epochs-{name}", lambda _, v=value: train(num_epochs=v))
        cases.add(training, f"seed-{name}", lambda _, v=value: train(seed=v))
    others: dict[str, Any] = {
        "shuffle-none": {"shuffle": None},
        "shuffle-int": {"shuffle": 1},
        "batch_fn-none": {"batch_fn": None},
        "batch_fn-list": {"batch_fn": list},
        "batch_fn-tuple": {"batch_fn": tuple},
        "dataset-list": {"dataset": _rows(8, "dl")},
        "dataset-iter": {"dataset": _dataset(8, "di").to_iter_dataset()},
        "dataset-infinite": {"dataset": _dataset(4, "inf").repeat(None)},
        "dataset-too-small": {"dataset": _dataset(3, "small")},
        "dataset-empty": {"dataset": _dataset(0, "empty")},
        "dataset-range": {"dataset": grain.MapDataset.range(12), "batch_fn": list},
    }
    for name, overrides in others.items():
        cases.add(training, name, lambda _, o=overrides: train(**o))
        if not name.startswith(("shuffle", "dataset-too-small")):
            evaluation_overrides = dict(overrides)
            cases.add(evaluation, name, lambda _, o=evaluation_overrides: evaluate(**o))

    def iterated(_: Any) -> Any:
        batches = train(num_epochs=2, batch_size=3)
        iterator = iter(batches)
        first = [next(iterator) for _ in range(3)]
        state = iterator.get_state()
        rest = list(iterator)
        return {"first": first, "state": state, "rest": rest}

    cases.add(training, "iterate-with-state", iterated)


def _workers(cases: Cases) -> None:
    function = f"{M}.open_multiprocessing_iterator"

    def opened(dataset: Any, **keywords: Any) -> Any:
        with tdata.open_multiprocessing_iterator(dataset, **keywords) as iterator:
            first = [next(iterator) for _ in range(2)]
            state = iterator.get_state()
            rest = list(iterator)
        return {"first": first, "state": state, "rest": rest, "type": type(iterator)}

    def iter_dataset(count: int = 6) -> Any:
        return _dataset(count, "mp").to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))

    variants: dict[str, Any] = {
        "in_process": {},
        "buffer_two": {"per_worker_buffer_size": 2},
        "sequential_slice": {"sequential_slice": True},
        "worker_init_fn": {"worker_init_fn": lambda index, count: None},
        "one_worker_unparsed_flags": {"num_workers": 1},
        "negative_workers": {"num_workers": -1},
        "bool_workers": {"num_workers": False},
        "np_workers": {"num_workers": np.int64(0)},
        "buffer_zero": {"per_worker_buffer_size": 0},
        "buffer_bool": {"per_worker_buffer_size": True},
        "buffer_np": {"per_worker_buffer_size": np.int32(1)},
        "init_not_callable": {"worker_init_fn": 3},
        "slice_none": {"sequential_slice": None},
    }
    for name, keywords in variants.items():
        options = {"num_workers": 0, **keywords}
        cases.add(function, name, lambda _, k=options: opened(iter_dataset(), **k))
    datasets: dict[str, Any] = {
        "map_dataset": lambda: _dataset(3, "md"),
        "list": lambda: [1, 2],
        "none": lambda: None,
        "empty": lambda: iter_dataset(0),
        "batched": lambda: iter_dataset(5).batch(2, batch_fn=_stack),
    }
    for name, make in datasets.items():
        cases.add(function, f"dataset-{name}", lambda _, m=make: opened(m(), num_workers=0))
    cases.add(function, "num_workers-missing", lambda _: opened(iter_dataset()))


def build(cases: Cases) -> None:
    """Every case of ``tinax.data``."""
    _source(cases)
    _parquet(cases)
    _array_record(cases)
    _splits(cases)
    _pipelines(cases)
    _workers(cases)
