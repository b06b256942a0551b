"""The iterator states of tinax's pipelines: grain's state plus a pipeline description, and the restore checks.

Shared by the pipelines' datasets and the re-deal. See docs/guide/data.md,
section "What a restored state must match".
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tinax._core.validation import fail_type, fail_value
from tinax._data._pipelines._epoch_layout import REDEAL_KEY, RedealtEpoch, checked_redeal_record, exact_int
from tinax._data._records._file_sets import describe_file_difference

__all__ = [
    "STATE_DESCRIPTION_KEY",
    "STATE_FORMAT",
    "STATE_GRAIN_KEY",
    "check_state",
    "check_state_and_record",
    "in_process_description",
]

#: Key of the pipeline description in an iterator state.
STATE_DESCRIPTION_KEY = "tinax_pipeline"
#: Key of grain's own iterator state in an iterator state.
STATE_GRAIN_KEY = "grain"
#: Version of the description. 2: tinax 0.2's chains (per-process blocks of whole global batches).
STATE_FORMAT = 2
# Fields are reported in this order when a restore is refused; the rest follow alphabetically.
_FIELD_ORDER = (
    "kind",
    "source_id",
    "files",
    "num_rows",
    "seed",
    "shuffle",
    "shard_index",
    "shard_count",
    "drop_remainder",
    "batch_size",
    "num_workers",
    "sequential_slice",
)


def in_process_description(pipeline: Mapping[str, Any]) -> dict[str, Any]:
    """The description an iterator state carries, without workers (the multiprocessing iterator sets its own)."""
    return {**pipeline, "num_workers": 0, "sequential_slice": False, "state_format": STATE_FORMAT}


def check_state(state: object, expected: Mapping[str, Any], *, length: int | None = None) -> Any:
    """:func:`check_state_and_record`, returning grain's part only."""
    return check_state_and_record(state, expected, length=length)[0]


def check_state_and_record(
    state: object, expected: Mapping[str, Any], *, length: int | None = None
) -> tuple[Any, RedealtEpoch | None]:
    """Checks a state against the pipeline's description; returns a checked copy of grain's part and the re-deal record.

    Strict, so a tampered state never reaches grain; a 0.2 state (no description) is checked as grain's part.
    """
    if not isinstance(state, Mapping):
        fail_type("state", "a dict returned by get_state() of a grain or tinax pipeline iterator", state)
    num_workers = expected.get("num_workers", 0)
    if STATE_DESCRIPTION_KEY not in state:
        return _checked_grain_state(state, "state", num_workers, length), None
    saved = state[STATE_DESCRIPTION_KEY]
    if not isinstance(saved, Mapping) or STATE_GRAIN_KEY not in state:
        keys = ", ".join(repr(key) for key in state)
        raise ValueError(
            f"state must hold a {STATE_DESCRIPTION_KEY!r} mapping and a {STATE_GRAIN_KEY!r} entry, as states from "
            f"get_state() of a tinax pipeline iterator do, got a state with keys [{keys}]"
        )
    _refuse_unknown_keys(state, "state", _state_keys(state))
    fields = set(saved) | set(expected)
    ordered = [name for name in _FIELD_ORDER if name in fields] + sorted(fields.difference(_FIELD_ORDER), key=str)
    missing = "<absent>"
    differing = [name for name in ordered if not _same_value(saved.get(name, missing), expected.get(name, missing))]
    if differing:
        differences = [_difference(name, saved.get(name, missing), expected.get(name, missing)) for name in differing]
        hint = ""
        if expected.get("kind") == "training_batches" and set(differing) <= _LAYOUT_FIELDS:
            hint = (
                ". A state restores on another number of processes, or with another batch size, only once "
                "tinax.data.redeal_state has dealt the rest of its epoch out again for this pipeline"
            )
        raise ValueError(
            "state must come from a pipeline built with the same arguments, got one that differs: "
            + "; ".join(differences)
            + hint
        )
    record = None
    if REDEAL_KEY in state:
        record = _checked_record(state[REDEAL_KEY], f"state[{REDEAL_KEY!r}]", expected, top_level=True)
    grain_state = _checked_grain_state(state[STATE_GRAIN_KEY], f"state[{STATE_GRAIN_KEY!r}]", num_workers, length)
    return grain_state, record


# The description fields a re-deal may change.
_LAYOUT_FIELDS = {"shard_index", "shard_count", "batch_size"}


def _state_keys(state: Mapping[Any, Any]) -> tuple[str, ...]:
    """The keys a state with a description must hold: a re-dealt one also holds its record."""
    if REDEAL_KEY in state:
        return (STATE_DESCRIPTION_KEY, STATE_GRAIN_KEY, REDEAL_KEY)
    return (STATE_DESCRIPTION_KEY, STATE_GRAIN_KEY)


def _checked_record(record: object, where: str, description: Mapping[str, Any], *, top_level: bool) -> RedealtEpoch:
    """Checks a state's re-deal record against the pipeline it restores into."""
    if description.get("kind") != "training_batches":
        raise ValueError(
            f"{where} is the re-deal record of a training_batches state, but this pipeline is "
            f"{description.get('kind')!r}: only training states are re-dealt"
        )
    if top_level and description.get("num_workers", 0) != 0:
        raise ValueError(
            f"{where} must not be there: with worker processes, the re-deal record of a state sits in the "
            "state of each worker, as redeal_state(..., num_workers=...) writes it"
        )
    return checked_redeal_record(record, where, description.get("num_rows"))


def _difference(name: str, saved: object, expected: object) -> str:
    if name == "files":
        # Thousands of files: the message names what changed rather than both lists.
        change = describe_file_difference(saved, expected)
        if change is not None:
            return f"the files differ: {change}"
    return f"{name} is {saved!r} in the state but {expected!r} here"


def _same_value(saved: object, expected: object) -> bool:
    # 7.0 == 7 and True == 1 in Python; a state holding either was tampered with.
    return type(saved) is type(expected) and saved == expected


# The keys of the state of grain's multiprocess prefetch (an interleave over one dataset per worker).
_WORKER_STATE_KEYS = (
    "next_index_in_cycle",
    "next_index_in_datasets",
    "iterators_in_use_indices",
    "iterators_in_use_states",
    "exhausted",
    "future_states",
)


def _refuse_unknown_keys(state: Mapping[Any, Any], where: str, known: Sequence[str]) -> None:
    unknown = [key for key in state if key not in known]
    if unknown:
        raise ValueError(
            f"{where} must hold only the keys {list(known)} of a saved iterator state, "
            f"got the unknown key {unknown[0]!r}"
        )
    absent = [key for key in known if key not in state]
    if absent:
        raise ValueError(
            f"{where} must hold the keys {list(known)} of a saved iterator state, but has no key {absent[0]!r}"
        )


def _checked_grain_state(grain_state: object, where: str, num_workers: object, length: int | None) -> dict[str, Any]:
    """Checks grain's part of an iterator state and returns a copy for grain."""
    if not isinstance(grain_state, Mapping):
        fail_type(where, "a mapping, as grain's iterator states are", grain_state)
    if type(num_workers) is not int or num_workers <= 0:
        _refuse_unknown_keys(grain_state, where, ("next_index",))
        maximum = length if length is not None and length < sys.maxsize else None
        return {"next_index": exact_int(grain_state["next_index"], f"{where}['next_index']", 0, maximum)}
    _refuse_unknown_keys(grain_state, where, _WORKER_STATE_KEYS)
    checked: dict[str, Any] = {
        "next_index_in_cycle": exact_int(
            grain_state["next_index_in_cycle"], f"{where}['next_index_in_cycle']", 0, num_workers - 1
        ),
        "next_index_in_datasets": exact_int(
            grain_state["next_index_in_datasets"], f"{where}['next_index_in_datasets']", 0, num_workers
        ),
    }
    # One entry per worker in each list, each checked once all lists have the right length.
    entry_checks: dict[str, Callable[[Any, str], Any]] = {
        "iterators_in_use_indices": lambda value, name: exact_int(value, name, 0, num_workers - 1),
        "iterators_in_use_states": _checked_worker_state,
        "exhausted": lambda value, name: exact_int(value, name, 0, 1),
    }
    for key in entry_checks:
        value = grain_state[key]
        if not isinstance(value, (list, tuple)):
            fail_type(f"{where}[{key!r}]", f"a list of {num_workers} entries, one per worker", value)
        if len(value) != num_workers:
            fail_value(f"{where}[{key!r}]", f"a list of {num_workers} entries, one per worker", value)
    for key, check in entry_checks.items():
        checked[key] = [check(value, f"{where}[{key!r}][{index}]") for index, value in enumerate(grain_state[key])]
    future = grain_state["future_states"]
    if not isinstance(future, Mapping):
        fail_type(f"{where}['future_states']", "a mapping of worker states", future)
    checked["future_states"] = {
        key: _checked_worker_state(value, f"{where}['future_states'][{key!r}]") for key, value in future.items()
    }
    return checked


def _checked_worker_state(worker_state: object, where: str) -> Any:
    """Checks the state of one worker's iterator (None or {} when it has none)."""
    if worker_state is None:
        return None
    if not isinstance(worker_state, Mapping):
        fail_type(where, "a mapping, as grain's iterator states are, or None", worker_state)
    if not worker_state:
        return {}
    if STATE_DESCRIPTION_KEY not in worker_state:
        # Whatever grain iterator the worker runs: only the index every such state shares is checked.
        checked = dict(worker_state)
        if "next_index" in checked:
            checked["next_index"] = exact_int(checked["next_index"], f"{where}['next_index']", 0)
        return checked
    _refuse_unknown_keys(worker_state, where, _state_keys(worker_state))
    description = worker_state[STATE_DESCRIPTION_KEY]
    if not isinstance(description, Mapping):
        fail_type(f"{where}[{STATE_DESCRIPTION_KEY!r}]", "a mapping describing the pipeline", description)
    # The worker's own iterator compares the description when it restores.
    checked = {
        STATE_DESCRIPTION_KEY: dict(description),
        STATE_GRAIN_KEY: _checked_grain_state(worker_state[STATE_GRAIN_KEY], f"{where}[{STATE_GRAIN_KEY!r}]", 0, None),
    }
    if REDEAL_KEY in worker_state:
        where = f"{where}[{REDEAL_KEY!r}]"
        checked[REDEAL_KEY] = _checked_record(worker_state[REDEAL_KEY], where, description, top_level=False).to_state()
    return checked
