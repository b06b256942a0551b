"""tinax 0.3 derives the same PRNG key streams as tinax 0.2, bit for bit.

``generators/gen_random.py`` ran every call under tinax 0.2 and stored the
raw key data of the results. Each case is rebuilt here from its description
(the same key, coordinates, count, eagerly or under ``jax.jit``) against our
``tinax.random`` and must give the same key dtype, shape and data.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import numpy as np
import pytest

from tinax.random import derive_key, derive_process_step_key, split_key

GENERATOR = Path(__file__).resolve().parent / "generators" / "gen_random.py"


def _generator() -> ModuleType:
    # The generator's helpers build the inputs, so both sides pass the same values.
    spec = importlib.util.spec_from_file_location("tinax_compat_gen_random", GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _generator()


@pytest.fixture(scope="module")
def recorded(artifacts02: Path) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    """The cases tinax 0.2 ran and the raw key data of their results."""
    folder = artifacts02 / "random"
    cases = json.loads((folder / "cases.json").read_text(encoding="utf-8"))["cases"]
    with np.load(folder / "keys.npz") as archive:
        arrays = {name: archive[name] for name in archive.files}
    return cases, arrays


def _coordinate(pair: list[Any] | None) -> Any:
    return None if pair is None else gen.coordinate(pair[0], pair[1])


def _replay(case: dict[str, Any]) -> dict[str, jax.Array]:
    key = gen.typed_key(case["seed"], case["impl"])
    jitted = case["jit"]
    function = case["function"]
    if function == "derive_key":
        values = [gen.coordinate(value, kind) for value, kind in case["coordinates"]]
        return {"key": gen.traced_call(derive_key, key, *values) if jitted else derive_key(key, *values)}
    if function == "derive_process_step_key":
        keywords = {"process_index": _coordinate(case["process_index"]), "step": _coordinate(case["step"])}
        if case["stream"] is not None:
            keywords["stream"] = _coordinate(case["stream"])
        if jitted:
            return {"key": gen.traced_call(derive_process_step_key, key, **keywords)}
        return {"key": derive_process_step_key(key, **keywords)}
    if function == "split_key":
        count = case["count"]
        if jitted:
            continuation, operation_keys = jax.jit(lambda key: split_key(key, count=count))(key)
        else:
            continuation, operation_keys = split_key(key, count=count)
        return {"continuation": continuation, "operation_keys": operation_keys}
    assert function == "training_stream"
    carried = key
    results: dict[str, jax.Array] = {}
    for step in range(case["steps"]):
        carried, operation_keys = split_key(carried, count=2)
        results[f"step{step}_operations"] = operation_keys
        results[f"step{step}_process1"] = derive_process_step_key(carried, process_index=1, step=step)
    results["final"] = carried
    return results


def test_the_recording_covers_every_function_implementation_and_count_zero(
    recorded: tuple[list[dict[str, Any]], dict[str, np.ndarray]],
) -> None:
    """The recording is not vacuous: every function, implementation, jit and count 0 appear."""
    cases, _ = recorded
    assert {case["function"] for case in cases} == {
        "derive_key",
        "derive_process_step_key",
        "split_key",
        "training_stream",
    }
    assert {case["impl"] for case in cases} == {"threefry2x32", "rbg", "unsafe_rbg"}
    assert any(case["jit"] for case in cases)
    assert any(case["function"] == "split_key" and case["count"] == 0 for case in cases)


def test_every_recorded_key_is_reproduced_bit_for_bit(
    recorded: tuple[list[dict[str, Any]], dict[str, np.ndarray]],
) -> None:
    """Each result of tinax 0.2 has the same dtype, shape and key data under tinax 0.3."""
    cases, arrays = recorded
    mismatches: list[str] = []
    for case in cases:
        results = _replay(case)
        assert sorted(results) == sorted(case["dtypes"]), case["id"]
        for name, value in results.items():
            expected = arrays[f"{case['id']}/{name}"]
            actual = np.asarray(jax.random.key_data(value))
            same = (
                str(value.dtype) == case["dtypes"][name]
                and list(value.shape) == case["shapes"][name]
                and actual.dtype == expected.dtype
                and np.array_equal(actual, expected)
            )
            if not same:
                mismatches.append(f"{case['id']} {name}: {json.dumps({k: v for k, v in case.items() if k != 'id'})}")
    assert not mismatches, "keys that differ from tinax 0.2:\n" + "\n".join(mismatches[:20])
