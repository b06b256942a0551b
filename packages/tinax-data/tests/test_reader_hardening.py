"""Readers under damage and abandonment: damaged dictionary pages, iterators nobody closes.

A Parquet file another tool wrote carries no tinax checksums, so a flipped
bit in a data page may reach the decoded values; a damaged dictionary index
is then a ValueError naming the file and the record, never an IndexError.
An iterator its program stops reading and never closes does not keep the
process alive.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tinax.data import read_parquet_record, split_by_column


def _dictionary_file(path: Any) -> tuple[int, int]:
    """A foreign file with a dictionary-encoded string column; returns the byte range of that column's data pages."""
    rows = 40
    table = pa.table(
        {
            "id": pa.array(range(rows), pa.int32()),
            "split": pa.array(["train" if index % 3 else "test" for index in range(rows)]).dictionary_encode(),
            "label": pa.array([f"l{index % 5}" if index % 7 else None for index in range(rows)]).dictionary_encode(),
        }
    )
    # No page checksums (pyarrow's default), no compression: a flip reaches the decoder as it is.
    pq.write_table(table, path, row_group_size=rows, compression="none")
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(1)
    assert chunk.has_dictionary_page
    assert chunk.dictionary_page_offset < chunk.data_page_offset
    return chunk.data_page_offset, chunk.dictionary_page_offset + chunk.total_compressed_size


def test_bit_flips_in_a_dictionary_encoded_column_give_only_value_errors_naming_the_file_and_record(tmp_path):
    original_path = tmp_path / "dictionary.parquet"
    start, end = _dictionary_file(original_path)
    original = original_path.read_bytes()
    mutated = tmp_path / "flipped.parquet"
    outcomes = {"read": 0, "refused": 0, "index outside": 0}
    wrong = []
    for position in range(start, end):
        for bit in range(8):
            data = bytearray(original)
            data[position] ^= 1 << bit
            mutated.write_bytes(bytes(data))
            for mapping in ("python", "numpy"):
                try:
                    dataset = read_parquet_record(mutated, mapping=mapping)
                    for index in range(len(dataset)):
                        dataset[index]
                except ValueError as error:
                    outcomes["refused"] += 1
                    if str(mutated) not in str(error):
                        wrong.append(f"{position}.{bit}/{mapping}: unnamed {error!r}")
                    if "dictionary index" in str(error):
                        outcomes["index outside"] += 1
                        if "record " not in str(error):
                            wrong.append(f"{position}.{bit}/{mapping}: no record in {error!r}")
                except Exception as error:  # Any undocumented error is a failure.
                    wrong.append(f"{position}.{bit}/{mapping}: {error!r}")
                else:
                    outcomes["read"] += 1
            # The column-only pass of split_by_column reads the same pages.
            try:
                split_by_column(read_parquet_record(mutated), "split")
            except ValueError as error:
                if "dictionary index" in str(error) and str(mutated) not in str(error):
                    wrong.append(f"{position}.{bit}/split: unnamed {error!r}")
            except Exception as error:
                wrong.append(f"{position}.{bit}/split: {error!r}")
    assert wrong == [], "\n".join(wrong[:10])
    # The flips exercise the check: some give indices outside the dictionary.
    assert outcomes["index outside"] > 0, outcomes
    assert outcomes["read"] > 0, outcomes


def test_a_dictionary_index_outside_the_dictionary_is_a_value_error_naming_file_and_record(tmp_path, monkeypatch):
    from tinax._data._records import _parquet_source
    from tinax._data._records._arrow_values import column_getter

    indices = pa.array([0, 1, 7, -1, None, 1], pa.int32())
    damaged = pa.DictionaryArray.from_arrays(indices, pa.array(["a", "b"]), safe=False)
    for mapping in ("python", "numpy"):
        get = column_getter(damaged, mapping)
        assert [get(row) for row in (0, 1, 4, 5)] == ["a", "b", None, "b"]
        for row, index in ((2, 7), (3, -1)):
            with pytest.raises(ValueError, match=f"row {row} holds the dictionary index {index}, outside its"):
                get(row)
    # Through the reader, with the decoded row group damaged as a flipped bit damages it.
    path = tmp_path / "names.parquet"
    pq.write_table(pa.table({"name": pa.array(["a", "b", "a", "b", None, "b"]).dictionary_encode()}), path)

    def damaged_group(self: Any, group: int, columns: Any, parquet_file: Any = None) -> pa.Table:
        return pa.table({"name": damaged})

    monkeypatch.setattr(_parquet_source.ParquetRecordSource, "_read_group", damaged_group)
    dataset = read_parquet_record(path)
    assert dataset[1] == {"name": "b"}
    with pytest.raises(ValueError, match=r"record 2 is malformed \(column 'name': row 2 holds the dictionary index 7"):
        dataset[2]
    with pytest.raises(ValueError, match=r"record 3 is malformed .*dictionary index -1") as caught:
        dataset._source._getitems([0, 3])
    assert str(path) in str(caught.value)
    assert isinstance(caught.value.__cause__, ValueError), "the cause is chained"
    # The column-only pass of split_by_column names the record too (pyarrow's own conversion refuses the column).
    with pytest.raises(ValueError, match=r"record 2 is malformed \(column 'name': row 2 holds the dictionary index 7"):
        split_by_column(dataset, "name", values=("a", "b"))


# ---------------------------------------------------------------------------
# An iterator nobody reads any more never holds the process

# The child builds a training pipeline, takes three batches and leaves the
# iterator in the state its case names. From then on every read is slow (a
# stand-in for a large file on a slow disk): a Parquet row group takes
# SLOW_READ seconds, an ArrayRecord record or a row of another source a
# twentieth of that. grain's prefetch thread is reading a batch then, with
# hundreds more queued. The parent times the exit from the moment the
# child's main code finished.
_EXIT_SCRIPT = textwrap.dedent(
    """
    import sys
    import time

    import grain
    import pyarrow.parquet as pq
    from grain.sharding import ShardOptions

    from tinax._data._records._array_record import ArrayRecordSource
    from tinax.data import read_array_record, read_parquet_record, stack_records, training_batches

    SLOW_READ = 0.5
    slow = False
    case, kind, path = sys.argv[1], sys.argv[2], sys.argv[3]


    def slowed(function, seconds):
        def slow_function(*args, **kwargs):
            if slow:
                time.sleep(seconds)
            return function(*args, **kwargs)

        return slow_function


    class OtherRows:
        def __len__(self):
            return 4000

        def __getitem__(self, index):
            return {"id": index}


    def dataset():
        if kind in ("parquet", "parquet_stacked"):
            pq.ParquetFile.read_row_group = slowed(pq.ParquetFile.read_row_group, SLOW_READ)
            # A cache of one row group: every batch reads most row groups again.
            return read_parquet_record(path, cache_bytes=1)
        if kind == "array_record":
            ArrayRecordSource._handle = slowed(ArrayRecordSource._handle, SLOW_READ / 20)
            return read_array_record(path)
        OtherRows.__getitem__ = slowed(OtherRows.__getitem__, SLOW_READ / 20)
        return grain.MapDataset.source(OtherRows())


    kept = []


    def main():
        global slow
        batches = training_batches(
            dataset(),
            shard_options=ShardOptions(0, 1, drop_remainder=True),
            seed=0,
            shuffle=True,
            num_epochs=None,
            batch_size=40,
            # Stacked batches are read from windows, the next one read ahead in a thread of tinax's own.
            batch_fn=stack_records if kind == "parquet_stacked" else lambda rows: [row["id"] for row in rows],
        )
        iterator = iter(batches)
        taken = [next(iterator) for _ in range(3)]
        assert all(len(batch["id"] if isinstance(batch, dict) else batch) == 40 for batch in taken)
        slow = True
        if case == "global":
            kept.append(iterator)
        elif case == "closed":
            iterator.close()
            try:
                next(iterator)
            except ValueError:
                pass
            else:
                raise AssertionError("a closed iterator went on")
        elif case == "traceback":
            # An uncaught exception keeps main's frame, and so the iterator, alive until the exit.
            print("main finished", flush=True)
            raise RuntimeError("the training step failed")
        print("main finished", flush=True)


    main()
    """
)


def _exit_inputs(tmp_path: Any, kind: str) -> str:
    path = tmp_path / f"rows.{kind}"
    if kind in ("parquet", "parquet_stacked"):
        # A foreign file of 100 row groups of 40 rows: a batch of 40 shuffled rows reads about 33 of them.
        pq.write_table(pa.table({"id": pa.array(range(4000), pa.int64())}), path, row_group_size=40)
    elif kind == "array_record":
        pytest.importorskip("array_record.python.array_record_module", reason="array-record is not installed")
        from tinax.data import write_array_record

        write_array_record(path, [{"id": index} for index in range(4000)])
    return str(path)


def _seconds_to_exit(tmp_path: Any, case: str, kind: str, limit: float) -> tuple[float, int, str]:
    script = tmp_path / "abandon.py"
    script.write_text(_EXIT_SCRIPT)
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST")}
    with subprocess.Popen(
        [sys.executable, str(script), case, kind, _exit_inputs(tmp_path, kind)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
        cwd=tmp_path,
    ) as child:
        assert child.stdout is not None
        assert child.stderr is not None
        line = child.stdout.readline()
        if line != "main finished\n":
            child.kill()
            pytest.fail(f"the child failed before its main code finished: {line}{child.stderr.read()}")
        finished = time.monotonic()
        try:
            child.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            child.kill()
            pytest.fail(f"the process was still running {limit} s after its main code finished ({case}, {kind})")
        return time.monotonic() - finished, child.returncode, child.stderr.read()


# Without the stop, the queued batches take hours (hundreds, each reading
# about 33 slow row groups), and the batch being read alone about 16 s.
_EXIT_LIMIT = 10.0


@pytest.mark.parametrize("kind", ["parquet", "parquet_stacked"])
@pytest.mark.parametrize("case", ["global", "traceback", "dropped", "closed"])
def test_an_abandoned_parquet_pipeline_iterator_does_not_hold_the_process(tmp_path, case, kind):
    seconds, returncode, stderr = _seconds_to_exit(tmp_path, case, kind, _EXIT_LIMIT)
    if case == "traceback":
        assert returncode == 1
        assert "RuntimeError: the training step failed" in stderr
    else:
        assert returncode == 0, stderr
        assert stderr == ""
    # The stopped reads are not reported: nobody was to read their batches.
    assert "ReadsStoppedError" not in stderr
    print(f"{case}: exited {seconds:.2f} s after main finished")


@pytest.mark.parametrize("kind", ["array_record", "another_source"])
def test_an_abandoned_pipeline_iterator_over_other_datasets_does_not_hold_the_process(tmp_path, kind):
    seconds, returncode, stderr = _seconds_to_exit(tmp_path, "global", kind, _EXIT_LIMIT)
    assert returncode == 0, stderr
    print(f"{kind}: exited {seconds:.2f} s after main finished")


def test_reads_stop_at_shutdown_only_in_grains_prefetch_threads(tmp_path, monkeypatch):
    from tinax._data import _shutdown

    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": pa.array(range(10), pa.int64())}), path, row_group_size=5)
    dataset = read_parquet_record(path)
    # grain names its prefetch threads as tinax expects (see tinax._data._shutdown).
    seen = []
    original = _shutdown.check_reads_go_on

    def recording(what: Any) -> None:
        seen.append(threading.current_thread().name)
        original(what)

    monkeypatch.setattr("tinax._data._records._parquet_source.check_reads_go_on", recording)
    iterator = iter(dataset.to_iter_dataset())
    assert [row["id"] for row in iterator] == list(range(10))
    iterator.close()
    assert seen
    assert all(name.startswith(_shutdown.PREFETCH_THREAD_PREFIX) for name in seen), seen
    monkeypatch.setattr(_shutdown, "_shutting_down", True)
    # The program's own threads and the main thread (atexit handlers) read on.
    assert dataset[7] == {"id": 7}
    found: list[Any] = []
    reader = threading.Thread(target=lambda: found.append(read_parquet_record(path)[2]))
    reader.start()
    reader.join()
    assert found == [{"id": 2}]
    # A prefetch thread's read is refused.
    failures: list[BaseException] = []

    def prefetch_read() -> None:
        try:
            read_parquet_record(path)[3]
        except BaseException as error:  # Any error is recorded for the assertion below.
            failures.append(error)

    prefetch = threading.Thread(target=prefetch_read, name=f"{_shutdown.PREFETCH_THREAD_PREFIX}_7")
    prefetch.start()
    prefetch.join()
    assert len(failures) == 1
    assert isinstance(failures[0], _shutdown.ReadsStoppedError)
    assert isinstance(failures[0], RuntimeError)
    assert str(path) in str(failures[0])
