"""tinax 0.2's data artifacts, read and recomputed by ours: the results must be 0.2's.

``generators/gen_data.py`` ran under tinax 0.2 and wrote record files, split
parts, pipeline batches and iterator states, each with what 0.2 computed (see
its docstring). These tests read 0.2's files with our readers, make the same
calls with our functions (the generator's call tables, given our
``tinax.data``), restore 0.2's iterator states into our iterators, and compare
the results as :func:`gen_data.tag` encodes them, which keeps every value's
exact type. An exception matches when ours is an instance of the class 0.2
raised.

The few places where we differ on purpose are listed here, each with its
reason; everything else must be exactly 0.2's.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import sys
from collections.abc import Callable, Collection, Iterator
from typing import Any

import grain
import pytest
from absl import flags

import tinax.data as data

GENERATORS = pathlib.Path(__file__).resolve().parent / "generators"
# The generator's module-level functions (batch functions among them) must be
# importable by name, in this process and in grain's spawned workers.
if str(GENERATORS) not in sys.path:
    sys.path.insert(0, str(GENERATORS))
import gen_data as gen  # noqa: E402

#: Writer inputs we handle differently on purpose. "exact": we accept them and
#: read the records back exactly as given (tinax 0.2 refused them, or read its
#: arrays back as lists). "refused": we raise ValueError where 0.2 wrote a file
#: that silently lost data.
WRITE_DEVIATIONS = {
    # Our record format stores NumPy arrays exactly (dtype and shape) where 0.2
    # refused them: 2-d arrays in Parquet, every array in ArrayRecord's JSON.
    # (1-d arrays in Parquet are written and read as 0.2 did: lists.)
    "parquet/numpy_2d": "exact",
    "array_record/numpy_1d": "exact",
    "array_record/numpy_bool": "exact",
    "array_record/numpy_float16": "exact",
    "array_record/numpy_2d": "exact",
    # bytes, and mappings that are not dicts, which 0.2's JSON refused.
    "array_record/scalars_and_bytes": "exact",
    "array_record/mapping_proxy": "exact",
    # 0.2's Parquet kept only the fields of records[0], dropping the others.
    "parquet/extra_field": "refused",
    # 0.2's Parquet file of records without fields held no rows at all.
    "parquet/empty_record": "refused",
    "parquet/empty_records": "refused",
}

#: Error cases where we accept what 0.2 refused (widenings).
ERROR_WIDENINGS = {
    # NumPy integers are integers (the tinax argument rules).
    "write/array_record/group_size_numpy",
}
PIPELINE_WIDENINGS = {"seed_numpy"}


@pytest.fixture(scope="module")
def data02(artifacts02: pathlib.Path) -> pathlib.Path:
    return artifacts02 / "data"


def _load(path: pathlib.Path) -> Any:
    return json.loads(path.read_text())


def _matches(ours: dict[str, Any], theirs: dict[str, Any]) -> bool:
    if "error" in theirs:
        return "error" in ours and theirs["error"][0] in ours["error"]
    return ours == theirs


def _mismatches(
    expected: dict[str, dict[str, Any]],
    calls: dict[str, Callable[[], Any]],
    widened: Collection[str] = (),
) -> list[str]:
    assert set(calls) == set(expected), "the call table changed since 0.2 ran it"
    found = []
    for name, theirs in expected.items():
        ours = gen.outcome(calls[name])
        if name in widened:
            assert "error" in theirs, f"{name}: listed as a widening, but 0.2 accepted it"
            if "error" in ours:
                found.append(f"{name}: we refuse it with {ours['error'][0]}, but it is a widening")
        elif not _matches(ours, theirs):
            found.append(f"{name}: 0.2 gave {str(theirs)[:300]}, we give {str(ours)[:300]}")
    return found


@pytest.fixture
def parsed_flags() -> Iterator[None]:
    was_parsed = flags.FLAGS.is_parsed()
    if not was_parsed:
        flags.FLAGS.mark_as_parsed()
    yield
    if not was_parsed:
        flags.FLAGS.unparse_flags()


# ---------------------------------------------------------------------------
# Records


def _reader(key: str) -> Callable[[Any], Any]:
    return data.read_parquet_record if key.startswith("parquet/") else data.read_array_record


def _writer(key: str) -> Callable[..., None]:
    return data.write_parquet_record if key.startswith("parquet/") else data.write_array_record


def test_files_02_wrote_read_back_as_02_read_them(data02):
    results = _load(data02 / "records" / "records.json")
    checked, found = 0, []
    for key, entry in results["written"].items():
        if "file" not in entry:
            continue
        path = data02 / "records" / entry["file"]
        ours = gen.outcome(lambda path=path, key=key: list(_reader(key)(path)))
        checked += 1
        if not _matches(ours, entry["read"]):
            found.append(f"{key}: 0.2 read {str(entry['read'])[:300]}, we read {str(ours)[:300]}")
    assert checked > 40
    assert not found, "\n".join(found)


def test_any_parquet_file_reads_as_02_read_it(data02):
    results = _load(data02 / "records" / "records.json")
    assert set(results["foreign"]) == set(gen.foreign_tables())
    for name, entry in results["foreign"].items():
        ours = gen.outcome(lambda entry=entry: list(data.read_parquet_record(data02 / "records" / entry["file"])))
        assert _matches(ours, entry["read"]), name


def test_records_02_accepted_are_accepted_and_read_back_as_02_or_exactly(data02, tmp_path):
    results = _load(data02 / "records" / "records.json")
    found = []
    for name, (records, kinds) in gen.record_cases().items():
        for kind in kinds:
            key = f"{kind}/{name}"
            theirs = results["written"][key]
            path = tmp_path / f"{name}.{kind}"
            try:
                _writer(key)(path, records)
            except Exception as error:
                ours: dict[str, Any] = {"write_error": gen.error_tag(error)}
            else:
                ours = {"read": gen.outcome(lambda path=path, key=key: list(_reader(key)(path)))}
            deviation = WRITE_DEVIATIONS.get(key)
            if deviation == "refused":
                assert "write_error" not in theirs, f"{key}: listed as refused, but 0.2 refused it too"
                if "builtins.ValueError" not in ours.get("write_error", ()):
                    found.append(f"{key}: we must refuse it with ValueError, got {ours}")
            elif deviation == "exact":
                exact = {"value": gen.tag([dict(record) for record in records])}
                if ours.get("read") != exact:
                    found.append(f"{key}: we must read back exactly what was written, got {str(ours)[:300]}")
            elif "write_error" in theirs:
                if theirs["write_error"][0] not in ours.get("write_error", ()):
                    found.append(f"{key}: 0.2 raised {theirs['write_error'][0]}, we give {str(ours)[:300]}")
            elif ours.get("read") != theirs["read"]:
                found.append(f"{key}: 0.2 read back {str(theirs['read'])[:200]}, we read back {str(ours)[:300]}")
    assert not found, "\n".join(found)


def test_generators_groups_and_replaced_files_behave_as_in_02(data02, tmp_path):
    results = _load(data02 / "records" / "records.json")
    for key, write in gen.record_extra_writes(data, tmp_path).items():
        theirs = results["written"][key]
        written = gen.outcome(write)
        if "error" in written:
            assert "write_error" in theirs, key
            assert theirs["write_error"][0] in written["error"], key
            continue
        assert "file" in theirs, key
        path = tmp_path / theirs["file"]
        assert gen.outcome(lambda path=path, key=key: list(_reader(key)(path))) == theirs["read"], key


def test_reader_and_writer_errors_are_02s(data02, tmp_path):
    results = _load(data02 / "records" / "records.json")
    found = _mismatches(results["errors"], gen.record_error_calls(data, tmp_path), ERROR_WIDENINGS)
    assert not found, "\n".join(found)


# ---------------------------------------------------------------------------
# Splits


def test_split_random_part_sizes_are_02s(data02):
    expected = _load(data02 / "splits.json")["random_sizes"]
    found = []
    for size in gen.SPLIT_SIZE_GRID:
        dataset = grain.MapDataset.range(size)
        for ratio in gen.split_size_ratios():
            first, second = data.split_random(dataset, ratio, seed=0)
            key = gen.pipeline_key(size, ratio)
            if [len(first), len(second)] != expected[key]:
                found.append(f"{key}: 0.2 {expected[key]}, ours {[len(first), len(second)]}")
    assert len(expected) == len(gen.SPLIT_SIZE_GRID) * len(gen.split_size_ratios())
    assert not found, "\n".join(found)


def test_split_random_parts_are_02s_row_for_row(data02):
    expected = _load(data02 / "splits.json")["random"]
    for size in gen.SPLIT_SIZES:
        for ratio in gen.SPLIT_RATIOS:
            for seed in gen.SPLIT_SEEDS:
                key = gen.pipeline_key(size, ratio, seed)
                assert gen.split_random_parts(data, grain, size, ratio, seed) == expected[key], key


def test_split_random_calls_are_02s(data02):
    expected = _load(data02 / "splits.json")["random_calls"]
    found = _mismatches(expected, gen.split_random_calls(data, grain))
    assert not found, "\n".join(found)


def test_split_by_column_calls_are_02s(data02):
    expected = _load(data02 / "splits.json")["by_column"]
    found = _mismatches(expected, gen.split_by_column_calls(data, grain))
    assert not found, "\n".join(found)


# ---------------------------------------------------------------------------
# Pipelines


def test_training_batches_are_02s_for_the_whole_grid(data02):
    expected = _load(data02 / "pipelines.json")["training"]
    grid = gen.training_grid()
    assert len(grid) == len(expected)
    found = []
    for point in grid:
        key = gen.pipeline_key(*point)
        ours = gen.outcome(lambda point=point: gen.training_grid_batches(data, grain, point))
        if not _matches(ours, expected[key]):
            found.append(f"{key}: 0.2 {str(expected[key])[:200]}, ours {str(ours)[:200]}")
    assert not found, f"{len(found)} of {len(grid)} differ:\n" + "\n".join(found[:20])


def test_evaluation_batches_are_02s_for_the_whole_grid(data02):
    expected = _load(data02 / "pipelines.json")["evaluation"]
    grid = gen.evaluation_grid()
    assert len(grid) == len(expected)
    found = []
    for point in grid:
        key = gen.pipeline_key(*point)
        ours = gen.outcome(lambda point=point: gen.evaluation_grid_batches(data, grain, point))
        if not _matches(ours, expected[key]):
            found.append(f"{key}: 0.2 {str(expected[key])[:200]}, ours {str(ours)[:200]}")
    assert not found, f"{len(found)} of {len(grid)} differ:\n" + "\n".join(found[:20])


def test_pipeline_calls_are_02s_random_streams_included(data02):
    expected = _load(data02 / "pipelines.json")["calls"]
    found = _mismatches(expected, gen.pipeline_calls(data, grain), PIPELINE_WIDENINGS)
    assert not found, "\n".join(found)


def test_bad_arguments_raise_02s_exception_types(data02):
    expected = _load(data02 / "pipelines.json")["errors"]
    found = _mismatches(expected, gen.pipeline_error_calls(data, grain))
    assert not found, "\n".join(found)


# ---------------------------------------------------------------------------
# Iterator states


@pytest.mark.parametrize(("name", "how", "consumed", "count"), gen.STATE_CASES)
def test_a_state_02_saved_continues_identically_in_ours(data02, parsed_flags, name, how, consumed, count):
    saved = _load(data02 / "states" / "states.json")[f"{name}|{how}|{consumed}"]
    with contextlib.ExitStack() as stack:
        iterator = gen.make_iterator(data, grain, gen.state_pipelines(data, grain)[name](), how, stack)
        iterator.set_state(saved["state"])
        assert gen.tag(gen.following(iterator, count)) == saved["following"]


@pytest.mark.parametrize(("name", "how", "consumed", "count"), gen.STATE_CASES)
def test_a_checkpoint_02_saved_restores_into_ours(data02, parsed_flags, name, how, consumed, count):
    ocp = pytest.importorskip("orbax.checkpoint.experimental.v1")
    checkpointing = pytest.importorskip("tinax.checkpointing")
    saved = _load(data02 / "states" / "states.json")[f"{name}|{how}|{consumed}"]
    checkpoint = data02 / "states" / saved["checkpoint"]
    for load in (ocp.load_checkpointables, checkpointing.load_checkpointables):
        with contextlib.ExitStack() as stack:
            iterator = gen.make_iterator(data, grain, gen.state_pipelines(data, grain)[name](), how, stack)
            load(checkpoint, {"iterator": iterator})
            assert gen.tag(gen.following(iterator, count)) == saved["following"], load.__module__
