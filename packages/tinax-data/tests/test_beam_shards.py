"""ArrayRecord shards that an Apache Beam pipeline writes, read by ``read_array_record`` as one dataset.

A real Beam pipeline runs on this machine and writes its output through the
ArrayRecord sink that the array-record package ships
(``array_record.beam.arrayrecordio.WriteToArrayRecord``): JSON records in one
folder, records in a binary layout of their own in another. The reference
for every read is each shard opened on its own with array-record's reader,
so the tests assume nothing about how Beam deals records to shards: the
dataset must give each shard's records in the order Beam wrote them, the
shards in the order of their names, whether it is opened from the folder, a
glob pattern or a list of the files, and the training pipelines must read
every record once across processes while their states name the shards.

Beam is installed only in the `interop` environment (see hatch.toml), which
`hatch run test:all` runs; everywhere else these tests skip.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from grain.sharding import ShardOptions

from tinax.data import read_array_record, stack_records, training_batches

beam = pytest.importorskip(
    "apache_beam", reason="Apache Beam is installed in the interop environment only (hatch run interop:test)"
)
arrayrecordio = pytest.importorskip("array_record.beam.arrayrecordio")
array_record_module = pytest.importorskip("array_record.python.array_record_module")

# A multiple of 2 processes x 8 records a batch, so that no record is dropped.
ROWS = 96
JSON_SHARDS = 4
PACKED_SHARDS = 3
SUFFIX = ".array_record"
# Beam's Python DirectRunner first tries to download its Prism runner from
# the internet and otherwise falls back to one of its two local engines; the
# tests name those engines directly, so that a run needs no network.
RUNNERS = ("BundleBasedDirectRunner", "FnApiRunner")

# The binary layout of the second pipeline's records: id, score, then UTF-8 text.
_PACKED_HEAD = struct.Struct("<qd")


def _record(index: int) -> dict[str, Any]:
    return {"id": index, "x": [float(index), -float(index)], "label": index % 3, "text": f"row {index}"}


def _json_bytes(record: dict[str, Any]) -> bytes:
    return json.dumps(record).encode("utf-8")


def _packed_bytes(record: dict[str, Any]) -> bytes:
    return _PACKED_HEAD.pack(record["id"], record["id"] / 4) + record["text"].encode("utf-8")


def decode_packed(raw: bytes) -> dict[str, Any]:
    """Reads one record of the binary layout (module level, as a decode function must be to reach Grain's workers)."""
    identifier, score = _PACKED_HEAD.unpack_from(raw)
    return {"id": identifier, "score": score, "text": raw[_PACKED_HEAD.size :].decode("utf-8")}


def _run_pipeline(runner: str, prefix: Path, encode: Any, num_shards: int) -> None:
    with beam.Pipeline(runner=runner) as pipeline:
        _ = (
            pipeline
            | "Create" >> beam.Create([_record(index) for index in range(ROWS)])
            | "Encode" >> beam.Map(encode)
            | "Write" >> arrayrecordio.WriteToArrayRecord(str(prefix), file_name_suffix=SUFFIX, num_shards=num_shards)
        )


class BeamShards:
    """A folder of shards one Beam pipeline wrote, and what each shard holds, read shard by shard."""

    def __init__(self, folder: Path, num_shards: int) -> None:
        self.folder = folder
        self.num_shards = num_shards
        self.paths = sorted(folder.iterdir(), key=lambda path: path.name)
        self.stored: list[list[bytes]] = []
        for path in self.paths:
            reader = array_record_module.ArrayRecordReader(str(path))
            try:
                self.stored.append(list(reader.read(0, reader.num_records())))
            finally:
                reader.close()

    def expected(self, decode: Any) -> list[Any]:
        """Every shard's records in the order Beam wrote them, the shards in name order."""
        return [decode(raw) for shard in self.stored for raw in shard]

    def files(self) -> list[list[Any]]:
        """``[name, size, records]`` of each shard, as a pipeline state lists its files."""
        return [
            [path.name, os.stat(path).st_size, len(shard)] for path, shard in zip(self.paths, self.stored, strict=True)
        ]


@pytest.fixture(scope="module", params=RUNNERS)
def written(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, BeamShards]:
    """Runs the two Beam pipelines once per runner: JSON records, and records in the binary layout."""
    root = tmp_path_factory.mktemp(request.param)
    _run_pipeline(request.param, root / "json" / "part", _json_bytes, JSON_SHARDS)
    _run_pipeline(request.param, root / "packed" / "part", _packed_bytes, PACKED_SHARDS)
    return {"json": BeamShards(root / "json", JSON_SHARDS), "packed": BeamShards(root / "packed", PACKED_SHARDS)}


def _rows(dataset: Any) -> list[Any]:
    return [dataset[index] for index in range(len(dataset))]


def test_beam_writes_the_named_shards_and_every_record_once(written):
    for shards in written.values():
        # Beam's default shard names, and only the shards: its temporary folder is gone.
        assert [path.name for path in shards.paths] == [
            f"part-{index:05d}-of-{shards.num_shards:05d}{SUFFIX}" for index in range(shards.num_shards)
        ]
    assert sorted(record["id"] for record in written["json"].expected(json.loads)) == list(range(ROWS))
    assert sorted(record["id"] for record in written["packed"].expected(decode_packed)) == list(range(ROWS))


def test_a_folder_a_pattern_and_a_list_read_the_shards_in_name_order(written):
    shards = written["json"]
    expected = shards.expected(json.loads)
    # Records without the tinax header read as JSON, as tinax 0.2 read them.
    assert _rows(read_array_record(shards.folder)) == expected
    assert _rows(read_array_record(str(shards.folder / f"part-*{SUFFIX}"))) == expected
    # The files of a list are put in name order too, whatever order it gives them in.
    assert _rows(read_array_record(list(reversed(shards.paths)))) == expected
    assert sorted(record["id"] for record in expected) == list(range(ROWS))
    assert all(record == _record(record["id"]) for record in expected)


def test_decode_reads_records_of_another_layout(written):
    shards = written["packed"]
    expected = shards.expected(decode_packed)
    for path in (shards.folder, str(shards.folder / "part-*"), [str(path) for path in shards.paths]):
        dataset = read_array_record(path, decode=decode_packed)
        assert len(dataset) == ROWS
        assert _rows(dataset) == expected
    assert sorted(record["id"] for record in expected) == list(range(ROWS))
    for record in expected:
        assert record == {"id": record["id"], "score": record["id"] / 4, "text": f"row {record['id']}"}


def test_training_batches_over_two_processes_read_every_record_once(written):
    shards = written["json"]
    seen: list[list[int]] = []
    for index in range(2):
        batches = training_batches(
            read_array_record(shards.folder),
            shard_options=ShardOptions(index, 2, drop_remainder=True),
            seed=11,
            shuffle=True,
            num_epochs=1,
            batch_size=8,
            batch_fn=stack_records,
        )
        iterator = iter(batches)
        first = next(iterator)
        # The state is JSON (it is saved with checkpoints) and lists the shards with their sizes and record counts.
        state = json.loads(json.dumps(iterator.get_state()))
        assert state["tinax_pipeline"]["files"] == shards.files()
        ids: list[int] = []
        for batch in [first, *iterator]:
            assert batch["id"].shape == (8,)
            # Each record arrives whole: its fields belong to its id.
            np.testing.assert_array_equal(batch["x"], np.stack([batch["id"], -batch["id"]], axis=1).astype(float))
            np.testing.assert_array_equal(batch["label"], batch["id"] % 3)
            ids.extend(batch["id"].tolist())
        assert len(ids) == ROWS // 2
        seen.append(ids)
    assert not set(seen[0]) & set(seen[1])
    assert sorted(seen[0] + seen[1]) == list(range(ROWS))
