"""training_batches and evaluation_batches: tinax 0.2's batches, exact and checked resume."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle
import grain
import numpy as np
import pytest
from grain.sharding import NoSharding, ShardOptions

import tinax.data
from tinax.data import InMemorySource, evaluation_batches, split_random, training_batches
from tinax_testing import parameter_summary

ROWS = 20


def _stack(rows: Sequence[dict[str, Any]]) -> dict[str, np.ndarray]:
    return {"x": np.stack([row["x"] for row in rows]), "id": np.asarray([row["id"] for row in rows])}


def _ids(batch: dict[str, np.ndarray]) -> list[int]:
    return batch["id"].tolist()


def _as_list(rows: Sequence[Any]) -> list[Any]:
    return list(rows)


def _dataset(count: int = ROWS, source_id: str = "features:v1") -> grain.MapDataset:
    values = np.random.default_rng(0).standard_normal((count, 3)).astype(np.float32)
    rows = [{"id": index, "x": values[index]} for index in range(count)]
    return grain.MapDataset.source(InMemorySource(rows, source_id=source_id))


def _training(**overrides: Any) -> grain.MapDataset:
    arguments: dict[str, Any] = {
        "shard_options": ShardOptions(0, 1, drop_remainder=True),
        "seed": 7,
        "shuffle": True,
        "num_epochs": 2,
        "batch_size": 4,
        "batch_fn": _stack,
    }
    dataset = overrides.pop("dataset", None) or _dataset()
    arguments.update(overrides)
    return training_batches(dataset, **arguments)


def _plain(size: int, **overrides: Any) -> grain.MapDataset:
    arguments: dict[str, Any] = {
        "shard_options": ShardOptions(0, 1, drop_remainder=True),
        "seed": 0,
        "shuffle": False,
        "num_epochs": 1,
        "batch_size": 2,
        "batch_fn": _as_list,
    }
    arguments.update(overrides)
    return training_batches(grain.MapDataset.range(size), **arguments)


def _all_ids(batches: grain.MapDataset) -> list[int]:
    return [index for batch in batches for index in _ids(batch)]


# ---------------------------------------------------------------------------
# Determinism, epochs and shards, as in tinax 0.2


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
    batches = _training(num_epochs=3)
    iterated = list(batches)
    assert len(batches) == len(iterated) == 15
    assert [_ids(batches[index]) for index in range(15)] == [_ids(batch) for batch in iterated]


def test_one_global_shuffle_per_epoch_reseeded_each_epoch():
    # The order is grain's: dataset.seed(seed).shuffle(), with another seed for
    # every epoch, cut to whole global batches.
    ids = _all_ids(_training(num_epochs=3, batch_size=5))
    epochs = [ids[start : start + ROWS] for start in range(0, 3 * ROWS, ROWS)]
    expected = list(grain.MapDataset.range(ROWS).seed(7).shuffle().repeat(3, reseed_each_epoch=True))
    assert ids == expected
    assert all(sorted(epoch) == list(range(ROWS)) for epoch in epochs)
    assert len({tuple(epoch) for epoch in epochs}) == 3


def test_no_shuffle_keeps_order_in_every_epoch():
    assert _all_ids(_training(shuffle=False, num_epochs=2, batch_size=5)) == list(range(ROWS)) * 2


def test_epochs_are_cut_to_whole_global_batches_and_batches_never_span_two():
    # 11 rows, 2 processes of batch 2: a global batch of 4, so 8 rows per epoch.
    shards = [
        list(_plain(11, shard_options=ShardOptions(index, 2, drop_remainder=True), num_epochs=2)) for index in range(2)
    ]
    assert shards == [[[0, 1], [2, 3], [0, 1], [2, 3]], [[4, 5], [6, 7], [4, 5], [6, 7]]]
    # Every batch is full, also at the end of a finite run.
    assert [len(_ids(batch)) for batch in _training(num_epochs=1, batch_size=6)] == [6, 6, 6]


def test_processes_take_contiguous_blocks_of_one_global_order_with_equal_steps():
    count, size, batch_size, epochs = 3, 17, 2, 3
    shards = [
        list(
            _plain(
                size,
                shard_options=ShardOptions(index, count, drop_remainder=True),
                seed=5,
                shuffle=True,
                num_epochs=epochs,
                batch_size=batch_size,
            )
        )
        for index in range(count)
    ]
    assert [len(batches) for batches in shards] == [6, 6, 6]
    expected = list(
        grain.MapDataset.range(size).seed(5).shuffle().slice(slice(0, 12)).repeat(3, reseed_each_epoch=True)
    )
    for epoch in range(epochs):
        global_order = expected[epoch * 12 : (epoch + 1) * 12]
        for index, batches in enumerate(shards):
            local = [row for batch in batches[epoch * 2 : (epoch + 1) * 2] for row in batch]
            assert local == global_order[index * 4 : (index + 1) * 4]


def test_num_epochs_none_repeats_forever_with_a_new_order_each_epoch():
    batches = _training(num_epochs=None, batch_size=5)
    assert len(batches) > 10**12
    iterator = iter(batches)
    try:
        ids = [index for _ in range(20) for index in _ids(next(iterator))]
    finally:
        iterator.close()
    epochs = [ids[start : start + ROWS] for start in range(0, 5 * ROWS, ROWS)]
    assert all(sorted(epoch) == list(range(ROWS)) for epoch in epochs)
    assert len({tuple(epoch) for epoch in epochs}) == 5


def test_the_pipeline_adds_no_node_that_would_move_default_seeds():
    # A random transformation on top of the batches draws its default seed
    # from the pipeline's seed() by depth: it must see grain's bare chain, as
    # tinax 0.2 returned it.
    def noisy(batch: list[int], generator: np.random.Generator) -> tuple[int, ...]:
        return (*batch, int(generator.integers(1 << 30)))

    bare = (
        grain.MapDataset.range(12)
        .seed(3)
        .shuffle()
        .slice(slice(0, 12))
        .slice(slice(0, 12))
        .batch(3, drop_remainder=True, batch_fn=_as_list)
        .repeat(2, reseed_each_epoch=True)
    )
    ours = _plain(12, seed=3, shuffle=True, num_epochs=2, batch_size=3)
    assert list(ours) == list(bare)
    assert list(ours.random_map(noisy)) == list(bare.random_map(noisy))
    assert list(ours.to_iter_dataset().random_map(noisy)) == list(bare.to_iter_dataset().random_map(noisy))


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
        "state_format": 2,
    }


def test_a_state_tinax_02_saved_restores_and_continues():
    # tinax 0.2 returned grain's chain itself, whose iterator state is grain's
    # alone; it carries no description, so there is nothing to check.
    bare = (
        grain.MapDataset.range(13)
        .seed(2)
        .shuffle()
        .slice(slice(0, 12))
        .slice(slice(6, 12))
        .batch(3, drop_remainder=True, batch_fn=_as_list)
        .repeat(None, reseed_each_epoch=True)
    )
    saved = iter(bare)
    for _ in range(5):
        next(saved)
    state = json.loads(json.dumps(saved.get_state()))
    assert state == {"next_index": 5}
    expected = [next(saved) for _ in range(4)]
    ours = _plain(
        13, shard_options=ShardOptions(1, 2, drop_remainder=True), seed=2, shuffle=True, num_epochs=None, batch_size=3
    )
    for make_iterator in _ITERATORS:
        iterator = make_iterator(ours)
        iterator.set_state(state)
        assert [next(iterator) for _ in range(4)] == expected
        iterator.close()


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
        ({"shard_options": ShardOptions(1, 2, True)}, "shard_index is 0 in the state but 1 here; shard_count is 1"),
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


def test_unidentified_datasets_are_accepted_and_checked_by_what_can_be_compared():
    # tinax 0.2 took any MapDataset; without a source_id the check compares the rest.
    iterator = iter(_plain(10, seed=1, shuffle=True))
    state = iterator.get_state()
    assert state["tinax_pipeline"]["source_id"] is None
    iter(_plain(10, seed=1, shuffle=True)).set_state(state)
    with pytest.raises(ValueError, match="seed is 1 in the state but 2 here"):
        iter(_plain(10, seed=2, shuffle=True)).set_state(state)
    with pytest.raises(ValueError, match="num_rows is 10 in the state but 12 here"):
        iter(_plain(12, seed=1, shuffle=True)).set_state(state)


def test_a_state_from_more_workers_is_refused_by_name():
    iterator = iter(_training())
    state = iterator.get_state()
    state["tinax_pipeline"]["num_workers"] = 2
    with pytest.raises(ValueError, match="num_workers is 2 in the state but 0 here"):
        iter(_training()).set_state(state)


def test_states_that_are_no_mapping_or_a_broken_description_are_refused():
    plain = iter(grain.MapDataset.source(list(range(4))).batch(2))
    next(plain)
    with pytest.raises(TypeError, match="state must be a dict returned by get_state"):
        iter(_training()).set_state(json.dumps(plain.get_state()))
    with pytest.raises(ValueError, match=r"state must hold a 'tinax_pipeline' mapping and a 'grain' entry"):
        iter(_training()).set_state({"tinax_pipeline": "training", "next_index": 1})


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


def _evaluation(size: int, index: int = 0, count: int = 1, batch_size: int = 2) -> list[Any]:
    return list(
        evaluation_batches(
            grain.MapDataset.range(size),
            shard_options=ShardOptions(index, count, drop_remainder=False),
            batch_size=batch_size,
            batch_fn=_as_list,
        )
    )


def test_evaluation_keeps_order_and_the_final_partial_batch():
    batches = evaluation_batches(_dataset(10), shard_options=NoSharding(), batch_size=4, batch_fn=_stack)
    assert [_ids(batch) for batch in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_evaluation_shards_are_contiguous_blocks_that_differ_by_at_most_one_row():
    assert [_evaluation(8, index, 3) for index in range(3)] == [[[0, 1], [2]], [[3, 4], [5]], [[6, 7]]]
    assert [_evaluation(11, index, 3, batch_size=3) for index in range(3)] == [
        [[0, 1, 2], [3]],
        [[4, 5, 6], [7]],
        [[8, 9, 10]],
    ]


def test_an_evaluation_shard_without_rows_gives_no_batches():
    assert [_evaluation(3, index, 5) for index in range(5)] == [[[0]], [[1]], [[2]], [], []]
    assert _evaluation(0) == []


def test_evaluation_refuses_shard_options_that_drop_rows():
    with pytest.raises(ValueError, match="shard_options.drop_remainder must be False for evaluation"):
        evaluation_batches(_dataset(12), shard_options=ShardOptions(2, 3, True), batch_size=5, batch_fn=_stack)


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


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"dataset": [1, 2]}, TypeError, "dataset must be a grain.MapDataset"),
        ({"shard_options": (0, 1)}, TypeError, "shard_options must be a grain.sharding.ShardOptions"),
        ({"shard_options": ShardOptions(True, 2)}, TypeError, "shard_options.shard_index must be an int"),
        ({"shard_options": ShardOptions(0, 1, 1)}, TypeError, "shard_options.drop_remainder must be a bool"),
        ({"shard_options": NoSharding()}, ValueError, "shard_options.drop_remainder must be True for training"),
        ({"seed": True}, TypeError, "seed must be an int"),
        ({"seed": None}, TypeError, "seed must be an int"),
        ({"seed": -1}, ValueError, "non-negative"),
        ({"shuffle": 1}, TypeError, "shuffle must be a bool"),
        ({"num_epochs": 0}, ValueError, "num_epochs must be an int >= 1 or None"),
        ({"num_epochs": True}, TypeError, "num_epochs must be an int"),
        ({"batch_size": 0}, ValueError, "batch_size must be an int >= 1"),
        ({"batch_size": 2.0}, TypeError, "batch_size must be an int >= 1"),
        ({"batch_fn": "stack"}, TypeError, "batch_fn must be callable"),
        ({"batch_size": 21}, ValueError, "at least one complete global batch of 21 rows"),
        ({"dataset": _dataset().repeat()}, ValueError, "dataset must be one finite epoch"),
    ],
)
def test_training_arguments_are_checked(change, error, message):
    with pytest.raises(error, match=message):
        _training(**change)


def test_seeds_beyond_32_bits_and_negative_seeds_without_shuffle_are_accepted():
    # As in tinax 0.2: grain derives the shuffle seeds, and checks them only to shuffle.
    assert len(list(_training(seed=2**64))) == 10
    assert _all_ids(_training(seed=-1, shuffle=False, num_epochs=1)) == list(range(ROWS))


def test_every_process_needs_a_full_global_batch():
    with pytest.raises(ValueError, match="at least one complete global batch of 6 rows"):
        _plain(5, shard_options=ShardOptions(0, 3, drop_remainder=True))
    with pytest.raises(ValueError, match="at least one complete global batch"):
        _plain(0)


def test_evaluation_arguments_are_checked():
    with pytest.raises(TypeError, match="batch_size must be an int >= 1, got True"):
        evaluation_batches(_dataset(), shard_options=NoSharding(), batch_size=True, batch_fn=_stack)
    with pytest.raises(TypeError, match="batch_fn must be callable"):
        evaluation_batches(_dataset(), shard_options=NoSharding(), batch_size=1, batch_fn=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dataset must be one finite epoch"):
        evaluation_batches(_dataset().repeat(), shard_options=NoSharding(), batch_size=1, batch_fn=_stack)


# ---------------------------------------------------------------------------
# The 0.2 surface: same names, parameter names, kinds and defaults

_POSITIONAL = "POSITIONAL_OR_KEYWORD"
_KEYWORD = "KEYWORD_ONLY"


@pytest.mark.parametrize(
    ("name", "parameters"),
    [
        ("InMemorySource", [("records", _POSITIONAL, None), ("source_id", _KEYWORD, None)]),
        ("split_by_column", [("dataset", _POSITIONAL, None), ("column", _POSITIONAL, None),
                             ("values", _KEYWORD, ("train", "test")), ("drop_column", _KEYWORD, True),
                             ("progress", _KEYWORD, None)]),
        ("split_random", [("dataset", _POSITIONAL, None), ("train_ratio", _POSITIONAL, None),
                          ("seed", _KEYWORD, None), ("drop_column", _KEYWORD, None)]),
        ("training_batches", [("dataset", _POSITIONAL, None), ("shard_options", _KEYWORD, None),
                              ("seed", _KEYWORD, None), ("shuffle", _KEYWORD, None), ("num_epochs", _KEYWORD, None),
                              ("batch_size", _KEYWORD, None), ("batch_fn", _KEYWORD, None),
                              ("shuffle_window", _KEYWORD, None)]),
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


# ---------------------------------------------------------------------------
# Tampered iterator states are refused before grain sees them


def _saved_state(consumed: int = 2) -> dict[str, Any]:
    iterator = iter(_training())
    for _ in range(consumed):
        next(iterator)
    return json.loads(json.dumps(iterator.get_state()))


def _tampered(path: Sequence[str], value: Any) -> dict[str, Any]:
    state = _saved_state()
    target = state
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return state


_DELETE = object()


@pytest.mark.parametrize("make_iterator", _ITERATORS, ids=["iter", "to_iter_dataset"])
@pytest.mark.parametrize(
    ("path", "value", "error", "message"),
    [
        (("grain", "next_index"), -1, ValueError, r"state\['grain'\]\['next_index'\] must be an int in \[0, 10\]"),
        (("grain", "next_index"), -(2**70), ValueError, r"state\['grain'\]\['next_index'\]"),
        (("grain", "next_index"), 11, ValueError, r"state\['grain'\]\['next_index'\] must be an int in \[0, 10\]"),
        (("grain", "next_index"), 2**70, ValueError, r"state\['grain'\]\['next_index'\]"),
        (("grain", "next_index"), True, TypeError, r"state\['grain'\]\['next_index'\] must be an int"),
        (("grain", "next_index"), 2.0, TypeError, r"state\['grain'\]\['next_index'\] must be an int"),
        (("grain", "next_index"), "2", TypeError, r"state\['grain'\]\['next_index'\] must be an int"),
        (("grain", "next_index"), None, TypeError, r"state\['grain'\]\['next_index'\] must be an int"),
        (("grain", "next_index"), _DELETE, ValueError, r"state\['grain'\] must hold the keys .* no key 'next_index'"),
        (("grain", "extra"), 1, ValueError, r"state\['grain'\] must hold only the keys .* unknown key 'extra'"),
        (("grain",), [], TypeError, r"state\['grain'\] must be a mapping"),
        (("grain",), 3, TypeError, r"state\['grain'\] must be a mapping"),
        (("comment",), "hello", ValueError, r"state must hold only the keys .* unknown key 'comment'"),
        (("tinax_pipeline", "seed"), 7.0, ValueError, "seed is 7.0 in the state but 7 here"),
        (("tinax_pipeline", "batch_size"), 4.0, ValueError, "batch_size is 4.0 in the state but 4 here"),
        (("tinax_pipeline", "shuffle"), 1, ValueError, "shuffle is 1 in the state but True here"),
        (("tinax_pipeline", "shard_index"), False, ValueError, "shard_index is False in the state but 0 here"),
        (("tinax_pipeline", "note"), "x", ValueError, "note is 'x' in the state but '<absent>' here"),
    ],
)
def test_tampered_states_are_refused_by_field_and_leave_the_iterator_as_it_was(
    make_iterator, path, value, error, message
):
    reference = [_ids(batch) for batch in _training()]
    iterator = make_iterator(_training())
    next(iterator)
    with pytest.raises(error, match=message):
        iterator.set_state(_tampered(path, value))
    # The refused state changed nothing: the iterator goes on where it was.
    assert _ids(next(iterator)) == reference[1]


@pytest.mark.parametrize(
    ("state", "error", "message"),
    [
        ({}, ValueError, r"state must hold the keys \['next_index'\].* no key 'next_index'"),
        ({"next_index": -3}, ValueError, r"state\['next_index'\] must be an int in \[0, 10\]"),
        ({"next_index": 10**30}, ValueError, r"state\['next_index'\] must be an int in \[0, 10\]"),
        ({"next_index": False}, TypeError, r"state\['next_index'\] must be an int"),
        ({"next_index": 1.5}, TypeError, r"state\['next_index'\] must be an int"),
        ({"next_index": 1, "last": 0}, ValueError, "unknown key 'last'"),
    ],
)
def test_tampered_bare_states_are_refused_like_described_ones(state, error, message):
    iterator = iter(_training())
    with pytest.raises(error, match=message):
        iterator.set_state(state)


def test_bare_states_at_both_ends_of_the_range_restore():
    reference = [_ids(batch) for batch in _training()]
    for next_index in (0, len(reference) - 1):
        iterator = iter(_training())
        iterator.set_state({"next_index": next_index})
        assert _ids(next(iterator)) == reference[next_index]
    finished = iter(_training())
    finished.set_state({"next_index": len(reference)})
    with pytest.raises(StopIteration):
        next(finished)


def _worker_state() -> dict[str, Any]:
    # The form of grain's multiprocess prefetch state, as two workers save it.
    description = dict(_saved_state()["tinax_pipeline"])
    return {
        "next_index_in_cycle": 1,
        "next_index_in_datasets": 2,
        "iterators_in_use_indices": [0, 1],
        "iterators_in_use_states": [
            {"tinax_pipeline": description, "grain": {"next_index": 1}},
            {"tinax_pipeline": description, "grain": {"next_index": 0}},
        ],
        "exhausted": [0, 0],
        "future_states": {},
    }


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"next_index_in_cycle": 2}, ValueError, r"\['next_index_in_cycle'\] must be an int in \[0, 1\]"),
        ({"next_index_in_cycle": True}, TypeError, r"\['next_index_in_cycle'\] must be an int"),
        ({"next_index_in_datasets": -1}, ValueError, r"\['next_index_in_datasets'\] must be an int"),
        ({"iterators_in_use_indices": [0]}, ValueError, r"\['iterators_in_use_indices'\] must be a list of 2"),
        ({"iterators_in_use_indices": [0, 5]}, ValueError, r"\['iterators_in_use_indices'\]\[1\] must be an int"),
        ({"iterators_in_use_states": "x"}, TypeError, r"\['iterators_in_use_states'\] must be a list"),
        ({"iterators_in_use_states": [None, 3]}, TypeError, r"\['iterators_in_use_states'\]\[1\] must be a mapping"),
        (
            {"iterators_in_use_states": [None, {"tinax_pipeline": {}, "grain": {}}]},
            ValueError,
            r"\['iterators_in_use_states'\]\[1\]\['grain'\] must hold the keys",
        ),
        (
            {"iterators_in_use_states": [None, {"next_index": -1}]},
            ValueError,
            r"\['iterators_in_use_states'\]\[1\]\['next_index'\] must be an int >= 0",
        ),
        ({"exhausted": [0, 2]}, ValueError, r"\['exhausted'\]\[1\] must be an int in \[0, 1\]"),
        ({"exhausted": [0.0, 0]}, TypeError, r"\['exhausted'\]\[0\] must be an int"),
        ({"future_states": []}, TypeError, r"\['future_states'\] must be a mapping"),
        ({"spare": 1}, ValueError, "unknown key 'spare'"),
    ],
)
def test_tampered_worker_states_are_refused_by_field(change, error, message):
    from tinax._data._pipelines._pipeline_states import check_state

    expected = {**_saved_state()["tinax_pipeline"], "num_workers": 2}
    good = _worker_state()
    checked = check_state({"tinax_pipeline": expected, "grain": good}, expected)
    assert checked == good
    with pytest.raises(error, match=message):
        check_state({"tinax_pipeline": expected, "grain": {**good, **change}}, expected)
    # A bare (tinax 0.2) worker state is checked the same way.
    with pytest.raises(error, match=message):
        check_state({**good, **change}, expected)
    missing = dict(good)
    del missing["exhausted"]
    with pytest.raises(ValueError, match="no key 'exhausted'"):
        check_state(missing, expected)


# ---------------------------------------------------------------------------
# Hardening: counts beyond what grain can represent


@pytest.mark.parametrize("num_epochs", [2**62, 2**63, 2**80, 2**100, np.int64(2**62), np.uint64(2**64 - 1)])
def test_epoch_counts_grain_cannot_count_are_a_value_error_and_0_2s_overflow_error(num_epochs):
    # 20 rows in batches of 4: 5 batches per epoch.
    limit = (sys.maxsize - 1) // 5
    with pytest.raises(ValueError, match=rf"num_epochs must be at most {limit} for 5 batches per epoch") as caught:
        _training(num_epochs=num_epochs)
    # tinax 0.2 built the dataset, and its len() raised OverflowError.
    assert isinstance(caught.value, OverflowError)
    # tinax 0.2 refused a NumPy integer with TypeError.
    assert isinstance(caught.value, TypeError) is not isinstance(num_epochs, int)


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"batch_size": np.int64(4), "num_epochs": 0}, ValueError),
        ({"seed": np.int64(1), "shuffle": 1}, TypeError),
        ({"seed": np.int64(-1), "shuffle": True}, ValueError),
        ({"shard_options": ShardOptions(np.int64(0), 1, drop_remainder=False)}, ValueError),
        ({"num_epochs": np.int64(2), "dataset": grain.MapDataset.source(list(range(3)))}, ValueError),
    ],
)
def test_after_a_numpy_integer_refusals_are_also_0_2s_type_error(overrides, error):
    # tinax 0.2 refused the NumPy integer with TypeError before checking the rest.
    with pytest.raises(error) as caught:
        _training(**overrides)
    assert isinstance(caught.value, TypeError)
    with pytest.raises(ValueError, match="finite") as caught:
        evaluation_batches(
            _dataset().repeat(), shard_options=ShardOptions(0, 1), batch_size=np.int64(4), batch_fn=_stack
        )
    assert isinstance(caught.value, TypeError)


def test_the_largest_epoch_count_grain_can_count_still_builds_and_reads():
    # 20 rows, 2 processes, batches of 5: 2 batches per process and epoch.
    shard = ShardOptions(1, 2, drop_remainder=True)
    limit = (sys.maxsize - 1) // 2
    batches = _training(shard_options=shard, batch_size=5, num_epochs=limit, shuffle=False)
    assert len(batches) == 2 * limit < sys.maxsize
    assert _ids(batches[len(batches) - 1]) == [15, 16, 17, 18, 19]
    with pytest.raises(ValueError, match=rf"num_epochs must be at most {limit} for 2 batches per epoch"):
        _training(shard_options=shard, batch_size=5, num_epochs=limit + 1)
    # One batch per epoch allows the most epochs; None still repeats forever.
    assert len(_training(batch_size=20, num_epochs=sys.maxsize - 1)) == sys.maxsize - 1
    with pytest.raises(ValueError, match=rf"num_epochs must be at most {sys.maxsize - 1} for 1 batches"):
        _training(batch_size=20, num_epochs=sys.maxsize)
    assert len(_training(num_epochs=None)) == sys.maxsize


def test_absurd_batch_sizes_and_shard_counts_are_value_errors_or_work():
    with pytest.raises(ValueError, match="at least one complete global batch"):
        _training(batch_size=2**100)
    with pytest.raises(ValueError, match="at least one complete global batch"):
        _training(shard_options=ShardOptions(0, 2**70, drop_remainder=True))
    # Evaluation takes any positive batch size and shard count: the batch or
    # block is just everything, or nothing.
    everything = list(evaluation_batches(_dataset(), shard_options=NoSharding(), batch_size=2**100, batch_fn=_stack))
    assert [_ids(batch) for batch in everything] == [list(range(ROWS))]
    last = ShardOptions(2**70 - 1, 2**70, drop_remainder=False)
    assert list(evaluation_batches(_dataset(), shard_options=last, batch_size=2**63, batch_fn=_stack)) == []


@pytest.mark.parametrize("index", [True, False, np.bool_(True), np.bool_(False)])
def test_pipelines_refuse_bool_batch_indices(index):
    training = _training(shuffle=False)
    evaluation = evaluation_batches(_dataset(), shard_options=NoSharding(), batch_size=4, batch_fn=_stack)
    for batches in (training, evaluation, cloudpickle.loads(cloudpickle.dumps(training))):
        with pytest.raises(TypeError, match=r"index must be an int, got (np\.)?(True|False)"):
            batches[index]
        assert _ids(batches[np.int64(1)]) == [4, 5, 6, 7]
        assert [_ids(batch) for batch in batches[1:3]] == [[4, 5, 6, 7], [8, 9, 10, 11]]


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4096, 8192, 100_003])
def test_the_window_shuffles_permutation_is_the_stable_order_of_its_hash_keys(size):
    from tinax._data._pipelines._checked_datasets import _permutation

    for seed in (0, 1, 7, 2**31, 2**32 - 1):
        with np.errstate(over="ignore"):
            keys = np.arange(size, dtype=np.uint64) + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
            keys = (keys ^ (keys >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            keys = (keys ^ (keys >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            keys ^= keys >> np.uint64(31)
        # Distinct keys (SplitMix64 is a bijection): the one order a stable sort gives, whichever sort is used.
        assert len(np.unique(keys)) == size
        assert np.array_equal(_permutation(size, seed), np.argsort(keys, kind="stable"))
