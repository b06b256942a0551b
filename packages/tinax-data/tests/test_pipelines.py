"""training_batches and evaluation_batches: determinism, shards, epochs, exact and checked resume."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle
import grain
import numpy as np
import pytest
from grain.sharding import NoSharding, ShardOptions

import tinax.data
from tinax._core.testing import parameter_summary
from tinax.data import InMemorySource, evaluation_batches, split_random, training_batches

ROWS = 20


def _stack(rows: Sequence[dict[str, Any]]) -> dict[str, np.ndarray]:
    return {"x": np.stack([row["x"] for row in rows]), "id": np.asarray([row["id"] for row in rows])}


def _ids(batch: dict[str, np.ndarray]) -> list[int]:
    return batch["id"].tolist()


def _dataset(count: int = ROWS, source_id: str = "features:v1") -> grain.MapDataset:
    values = np.random.default_rng(0).standard_normal((count, 3)).astype(np.float32)
    rows = [{"id": index, "x": values[index]} for index in range(count)]
    return grain.MapDataset.source(InMemorySource(rows, source_id=source_id))


def _training(**overrides: Any) -> grain.MapDataset:
    arguments: dict[str, Any] = {
        "shard_options": NoSharding(),
        "seed": 7,
        "shuffle": True,
        "num_epochs": 2,
        "batch_size": 4,
        "batch_fn": _stack,
    }
    dataset = overrides.pop("dataset", None) or _dataset()
    arguments.update(overrides)
    return training_batches(dataset, **arguments)


def _all_ids(batches: grain.MapDataset) -> list[int]:
    return [index for batch in batches for index in _ids(batch)]


# ---------------------------------------------------------------------------
# Determinism, shards and epochs


def test_two_runs_give_bit_identical_batches():
    first = list(_training())
    second = list(_training())
    assert len(first) == len(second) == 10
    for one, other in zip(first, second, strict=True):
        assert one["x"].dtype == other["x"].dtype == np.float32
        assert one["x"].tobytes() == other["x"].tobytes()
        assert one["id"].tobytes() == other["id"].tobytes()


def test_another_seed_gives_another_order():
    assert _all_ids(_training(seed=7)) != _all_ids(_training(seed=8))


def test_random_access_matches_iteration():
    batches = _training()
    iterated = list(batches)
    assert len(batches) == len(iterated)
    assert _ids(batches[3]) == _ids(iterated[3])


@pytest.mark.parametrize("drop_remainder", [False, True])
def test_shards_are_disjoint_and_cover_the_rows(drop_remainder):
    count, rows = 3, 10
    shards = [
        _all_ids(
            _training(
                dataset=_dataset(rows),
                shard_options=ShardOptions(index, count, drop_remainder=drop_remainder),
                num_epochs=1,
                batch_size=1,
            )
        )
        for index in range(count)
    ]
    seen = [set(shard) for shard in shards]
    assert all(len(shard) == len(set(shard)) for shard in shards)
    assert all(a.isdisjoint(b) for i, a in enumerate(seen) for b in seen[i + 1 :])
    if drop_remainder:
        assert [len(shard) for shard in shards] == [3, 3, 3]
        # As documented: the last n % shard_count rows are the ones dropped.
        assert set().union(*seen) == set(range(9))
    else:
        assert [len(shard) for shard in shards] == [4, 3, 3]
        assert set().union(*seen) == set(range(rows))
    # Strided shards: shard i holds positions i, i + count, ...
    assert seen[1] <= {1, 4, 7}


def test_each_epoch_is_a_new_order_of_the_same_rows():
    ids = _all_ids(_training(num_epochs=3, batch_size=5))
    epochs = [ids[start : start + ROWS] for start in range(0, 3 * ROWS, ROWS)]
    assert all(sorted(epoch) == list(range(ROWS)) for epoch in epochs)
    assert len({tuple(epoch) for epoch in epochs}) == 3


def test_no_shuffle_keeps_order_in_every_epoch():
    ids = _all_ids(_training(shuffle=False, num_epochs=2, batch_size=6))
    assert ids == list(range(ROWS)) * 2


def test_finite_epochs_keep_the_final_partial_batch():
    batches = list(_training(num_epochs=1, batch_size=6))
    assert [len(_ids(batch)) for batch in batches] == [6, 6, 6, 2]
    assert sorted(index for batch in batches for index in _ids(batch)) == list(range(ROWS))


def test_num_epochs_none_repeats_forever():
    batches = _training(num_epochs=None, batch_size=5)
    assert len(batches) > 10**12
    iterator = iter(batches)
    ids = [index for _ in range(5 * ROWS // 5) for index in _ids(next(iterator))]
    epochs = [ids[start : start + ROWS] for start in range(0, 5 * ROWS, ROWS)]
    assert all(sorted(epoch) == list(range(ROWS)) for epoch in epochs)
    assert len({tuple(epoch) for epoch in epochs}) == 5


def test_pipelines_pickle_for_worker_processes():
    # grain sends datasets to its workers with cloudpickle.
    batches = _training()
    for pipeline in (batches, batches.to_iter_dataset()):
        restored = cloudpickle.loads(cloudpickle.dumps(pipeline))
        assert type(restored) is type(pipeline)
        assert [_ids(batch) for batch in restored] == [_ids(batch) for batch in batches]
        assert iter(restored).get_state() == iter(batches).get_state()


# ---------------------------------------------------------------------------
# Iterator state: exact resume and checked restores

_ITERATORS: list[Callable[[grain.MapDataset], Any]] = [
    lambda batches: iter(batches),
    lambda batches: iter(batches.to_iter_dataset()),
]


@pytest.mark.parametrize("make_iterator", _ITERATORS, ids=["iter", "to_iter_dataset"])
@pytest.mark.parametrize("consumed", [0, 3, 7])
def test_restored_state_continues_at_the_next_batch(make_iterator, consumed):
    reference = [_ids(batch) for batch in _training()]
    iterator = make_iterator(_training())
    assert isinstance(iterator, grain.DatasetIterator)
    for _ in range(consumed):
        next(iterator)
    state = json.loads(json.dumps(iterator.get_state()))
    next(iterator)  # Moving on must not change the saved state.

    fresh = make_iterator(_training())
    fresh.set_state(state)
    assert [_ids(batch) for batch in fresh] == reference[consumed:]


def test_state_records_the_pipeline():
    iterator = iter(_training(shard_options=ShardOptions(1, 2, drop_remainder=True)))
    next(iterator)
    description = iterator.get_state()["tinax_pipeline"]
    assert description == {
        "kind": "training_batches",
        "source_id": "features:v1",
        "num_rows": ROWS,
        "seed": 7,
        "shuffle": True,
        "shard_index": 1,
        "shard_count": 2,
        "drop_remainder": True,
        "batch_size": 4,
        "num_workers": 0,
        "sequential_slice": False,
        "state_format": 1,
    }


def test_a_resumed_run_may_train_for_more_epochs():
    iterator = iter(_training(num_epochs=1))
    next(iterator)
    longer = iter(_training(num_epochs=3))
    longer.set_state(iterator.get_state())
    assert _ids(next(longer)) == _ids(next(iterator))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seed": 8}, "seed is 7 in the state but 8 here"),
        ({"shuffle": False}, "shuffle is True in the state but False here"),
        ({"batch_size": 5}, "batch_size is 4 in the state but 5 here"),
        ({"shard_options": ShardOptions(1, 2)}, "shard_index is 0 in the state but 1 here; shard_count is 1"),
        ({"shard_options": ShardOptions(0, 1, drop_remainder=True)}, "drop_remainder is False in the state but True"),
        ({"dataset": _dataset(source_id="other")}, "source_id is 'features:v1' in the state but 'other' here"),
        ({"dataset": _dataset(ROWS + 1)}, "num_rows is 20 in the state but 21 here"),
    ],
)
def test_a_mismatched_restore_names_the_field(change, message):
    iterator = iter(_training())
    next(iterator)
    state = iterator.get_state()
    other = iter(_training(**change))
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        other.set_state(state)


def test_a_state_from_more_workers_is_refused_by_name():
    iterator = iter(_training())
    state = iterator.get_state()
    state["tinax_pipeline"]["num_workers"] = 2
    with pytest.raises(ValueError, match="num_workers is 2 in the state but 0 here"):
        iter(_training()).set_state(state)


def test_states_that_are_not_from_a_tinax_pipeline_are_refused():
    plain = iter(grain.MapDataset.source(list(range(4))).batch(2))
    next(plain)
    with pytest.raises(ValueError, match=r"state must hold 'tinax_pipeline' and 'grain' entries.*\['next_index'\]"):
        iter(_training()).set_state(plain.get_state())
    with pytest.raises(TypeError, match="state must be a dict returned by get_state"):
        iter(_training()).set_state(json.dumps(plain.get_state()))


def test_training_and_evaluation_states_do_not_mix():
    state = iter(evaluation_batches(_dataset(), shard_options=NoSharding(), batch_size=4, batch_fn=_stack)).get_state()
    with pytest.raises(ValueError, match="kind is 'evaluation_batches' in the state but 'training_batches' here"):
        iter(_training()).set_state(state)


def test_orbax_saves_and_loads_the_iterator(tmp_path):
    ocp = pytest.importorskip("orbax.checkpoint.experimental.v1")
    reference = [_ids(batch) for batch in _training(num_epochs=None).slice(slice(0, 8))]
    iterator = iter(_training(num_epochs=None))
    for _ in range(5):
        next(iterator)
    ocp.save_checkpointables(tmp_path / "checkpoint", {"iterator": iterator})
    saved = json.loads((tmp_path / "checkpoint" / "iterator" / "process_0-of-1.json").read_text())
    assert saved["tinax_pipeline"]["source_id"] == "features:v1"

    fresh = iter(_training(num_epochs=None))
    loaded = ocp.load_checkpointables(tmp_path / "checkpoint", {"iterator": fresh})
    assert loaded["iterator"] is fresh
    assert [_ids(next(fresh)) for _ in range(3)] == reference[5:8]

    # Orbax wraps what the iterator raises; the refusal is the cause.
    mismatched = iter(_training(num_epochs=None, seed=99))
    with pytest.raises(Exception) as caught:  # noqa: PT011
        ocp.load_checkpointables(tmp_path / "checkpoint", {"iterator": mismatched})
    causes = []
    error: BaseException | None = caught.value
    while error is not None:
        causes.append(error)
        error = error.__cause__ or error.__context__
    assert any(isinstance(cause, ValueError) and "seed is 7 in the state but 99 here" in str(cause) for cause in causes)


def test_split_parts_are_identified_pipelines_of_their_own():
    train, test = split_random(_dataset(), 0.5, seed=1)
    train_state = iter(_training(dataset=train)).get_state()
    with pytest.raises(ValueError, match="source_id is \"features:v1/split_random.*part='train'.*part='test'"):
        iter(_training(dataset=test)).set_state(train_state)


# ---------------------------------------------------------------------------
# Evaluation


def test_evaluation_keeps_order_and_the_final_partial_batch():
    batches = evaluation_batches(_dataset(10), shard_options=NoSharding(), batch_size=4, batch_fn=_stack)
    assert [_ids(batch) for batch in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_evaluation_shards_are_strided_disjoint_and_covering():
    shards = [
        [
            _ids(batch)
            for batch in evaluation_batches(
                _dataset(11), shard_options=ShardOptions(index, 3), batch_size=2, batch_fn=_stack
            )
        ]
        for index in range(3)
    ]
    assert shards == [[[0, 3], [6, 9]], [[1, 4], [7, 10]], [[2, 5], [8]]]


def test_evaluation_accepts_drop_remainder_only_when_nothing_is_dropped():
    even = evaluation_batches(_dataset(12), shard_options=ShardOptions(2, 3, True), batch_size=5, batch_fn=_stack)
    assert [_ids(batch) for batch in even] == [[2, 5, 8, 11]]
    with pytest.raises(ValueError, match="would drop the last 2 rows"):
        evaluation_batches(_dataset(11), shard_options=ShardOptions(0, 3, True), batch_size=5, batch_fn=_stack)


def test_evaluation_state_resumes_exactly():
    def make():
        return evaluation_batches(_dataset(), shard_options=ShardOptions(1, 2), batch_size=3, batch_fn=_stack)

    reference = [_ids(batch) for batch in make()]
    iterator = iter(make())
    next(iterator)
    next(iterator)
    fresh = iter(make())
    fresh.set_state(json.loads(json.dumps(iterator.get_state())))
    assert [_ids(batch) for batch in fresh] == reference[2:]


# ---------------------------------------------------------------------------
# Arguments


def test_unidentified_sources_are_refused_with_a_pointer_to_in_memory_source():
    with pytest.raises(
        TypeError, match=r"dataset must be a grain.MapDataset over an identified source.*InMemorySource"
    ):
        training_batches(
            grain.MapDataset.source(list(range(4))),
            shard_options=NoSharding(),
            seed=0,
            shuffle=True,
            num_epochs=1,
            batch_size=2,
            batch_fn=list,
        )
    with pytest.raises(TypeError, match="InMemorySource"):
        evaluation_batches(grain.MapDataset.range(4), shard_options=NoSharding(), batch_size=2, batch_fn=list)


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"dataset": [1, 2]}, TypeError, "dataset must be a grain.MapDataset"),
        ({"shard_options": (0, 1)}, TypeError, "shard_options must be a grain.sharding.ShardOptions"),
        ({"shard_options": ShardOptions(True, 2)}, TypeError, "shard_options.shard_index must be an int"),
        ({"shard_options": ShardOptions(0, 1, 1)}, TypeError, "shard_options.drop_remainder must be a bool"),
        ({"seed": True}, TypeError, "seed must be an int"),
        ({"seed": 2**32}, ValueError, r"seed must be an int in \[0, 4294967295\]"),
        ({"seed": None}, TypeError, "seed must be an int"),
        ({"shuffle": 1}, TypeError, "shuffle must be a bool"),
        ({"num_epochs": 0}, ValueError, "num_epochs must be an int >= 1 or None"),
        ({"num_epochs": True}, TypeError, "num_epochs must be an int"),
        ({"batch_size": 0}, ValueError, "batch_size must be an int >= 1"),
        ({"batch_size": 2.0}, TypeError, "batch_size must be an int >= 1"),
        ({"batch_fn": "stack"}, TypeError, "batch_fn must be callable"),
    ],
)
def test_training_arguments_are_checked(change, error, message):
    with pytest.raises(error, match=message):
        _training(**change)


def test_a_shard_without_rows_is_an_error():
    with pytest.raises(ValueError, match="shard 2 of 3 .* of a dataset of 2 rows, which holds none"):
        _training(dataset=_dataset(2), shard_options=ShardOptions(2, 3))
    with pytest.raises(ValueError, match="which holds none"):
        evaluation_batches(_dataset(2), shard_options=ShardOptions(2, 3), batch_size=1, batch_fn=_stack)


def test_evaluation_arguments_are_checked():
    with pytest.raises(TypeError, match="batch_size must be an int >= 1, got True"):
        evaluation_batches(_dataset(), shard_options=NoSharding(), batch_size=True, batch_fn=_stack)
    with pytest.raises(TypeError, match="batch_fn must be callable"):
        evaluation_batches(_dataset(), shard_options=NoSharding(), batch_size=1, batch_fn=None)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# The 0.2 surface: same names, parameter names, kinds and defaults

_POSITIONAL = "POSITIONAL_OR_KEYWORD"
_KEYWORD = "KEYWORD_ONLY"


@pytest.mark.parametrize(
    ("name", "parameters"),
    [
        ("InMemorySource", [("records", _POSITIONAL, None), ("source_id", _KEYWORD, None)]),
        ("split_by_column", [("dataset", _POSITIONAL, None), ("column", _POSITIONAL, None),
                             ("values", _KEYWORD, ("train", "test")), ("drop_column", _KEYWORD, True)]),
        ("split_random", [("dataset", _POSITIONAL, None), ("train_ratio", _POSITIONAL, None),
                          ("seed", _KEYWORD, None), ("drop_column", _KEYWORD, None)]),
        ("training_batches", [("dataset", _POSITIONAL, None), ("shard_options", _KEYWORD, None),
                              ("seed", _KEYWORD, None), ("shuffle", _KEYWORD, None), ("num_epochs", _KEYWORD, None),
                              ("batch_size", _KEYWORD, None), ("batch_fn", _KEYWORD, None)]),
        ("evaluation_batches", [("dataset", _POSITIONAL, None), ("shard_options", _KEYWORD, None),
                                ("batch_size", _KEYWORD, None), ("batch_fn", _KEYWORD, None)]),
        ("open_multiprocessing_iterator", [("dataset", _POSITIONAL, None), ("num_workers", _KEYWORD, None),
                                           ("per_worker_buffer_size", _KEYWORD, 1),
                                           ("worker_init_fn", _KEYWORD, None),
                                           ("sequential_slice", _KEYWORD, False)]),
    ],
)  # fmt: skip
def test_signatures_match_the_compatible_surface(name, parameters):
    assert parameter_summary(getattr(tinax.data, name)) == parameters


def test_batch_transform_is_a_generic_alias():
    alias = tinax.data.BatchTransform[int, list]
    assert alias == Callable[[Sequence[int]], list]
