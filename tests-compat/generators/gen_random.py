"""Records the PRNG key streams that tinax 0.2's ``tinax.random`` derives.

Runs under the real tinax 0.2 (see ``tests-compat/conftest.py``). Its only
argument is the output folder, which receives:

- ``cases.json``: one entry per call, saying which function was called with
  which key, coordinates or count, eagerly or under ``jax.jit``, and the
  dtype of each result (``key<fry>``, ``key<rbg>``, ...);
- ``keys.npz``: the raw key data (``jax.random.key_data``) of each result,
  under ``<case id>/<result name>``.

``test_random_artifacts.py`` rebuilds every call from ``cases.json`` against
tinax 0.3 and requires the same key data, bit for bit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tinax.random import derive_key, derive_process_step_key, split_key

#: The PRNG implementations a typed key can use, and the seeds tried with each.
IMPLEMENTATIONS = ("threefry2x32", "rbg", "unsafe_rbg")
SEEDS = (0, 1, 42, 2**31 - 1)

#: Coordinates, each a (value, kind) pair; the kind says how it is passed.
COORDINATE_SETS: tuple[tuple[tuple[int, str], ...], ...] = (
    ((0, "int"),),
    ((1, "int"),),
    ((2**32 - 1, "int"),),
    ((2, "int"), (5, "int")),
    ((5, "int"), (2, "int")),
    ((3, "int"), (0, "int"), (2**32 - 1, "int"), (17, "int")),
    ((7, "jnp.uint32"),),
    ((7, "np.uint32"),),
    ((200, "jnp.uint8"), (60000, "jnp.uint16")),
    ((11, "int"), (2**32 - 2, "jnp.uint32"), (4, "np.uint16")),
)

#: (process_index, step, stream or None for the default), each with its kind.
PROCESS_STEPS: tuple[tuple[tuple[int, str], tuple[int, str], tuple[int, str] | None], ...] = (
    ((0, "int"), (0, "int"), None),
    ((0, "int"), (10, "int"), None),
    ((1, "int"), (7, "int"), (3, "int")),
    ((3, "int"), (2**32 - 1, "int"), (0, "int")),
    ((1, "jnp.uint32"), (7, "jnp.uint32"), (3, "jnp.uint32")),
    ((2, "np.uint32"), (123456, "jnp.uint32"), None),
)

SPLIT_COUNTS = (0, 1, 2, 3, 8)

#: Calls under jax.jit compile each time, so only the first seed is tried jitted.
JIT_SEEDS = SEEDS[:1]


def coordinate(value: int, kind: str) -> Any:
    """Builds a coordinate the way the case says it is passed."""
    if kind == "int":
        return value
    module, dtype = kind.split(".")
    return (jnp if module == "jnp" else np).asarray(value, dtype=getattr(np, dtype))


def traced_call(function: Any, key: jax.Array, *args: Any, **kwargs: Any) -> Any:
    """Calls ``function`` under ``jax.jit``: key and array arguments traced, Python ints static."""
    positions = [index for index, value in enumerate(args) if not isinstance(value, int)]
    names = [name for name, value in kwargs.items() if not isinstance(value, int)]

    def body(key: jax.Array, positional: list[Any], keyword: dict[str, Any]) -> Any:
        merged = list(args)
        for index, value in zip(positions, positional, strict=True):
            merged[index] = value
        return function(key, *merged, **{**kwargs, **keyword})

    return jax.jit(body)(key, [args[index] for index in positions], {name: kwargs[name] for name in names})


def typed_key(seed: int, implementation: str) -> jax.Array:
    """A typed key (``jax.random.key``) of the given seed and implementation."""
    return jax.random.key(seed, impl=implementation)


def key_data(key: jax.Array) -> np.ndarray:
    """The raw words of a typed key array, as NumPy data."""
    return np.asarray(jax.random.key_data(key))


def main(output: Path) -> None:
    """Runs every case under tinax 0.2 and writes ``cases.json`` and ``keys.npz`` to ``output``."""
    cases: list[dict[str, Any]] = []
    arrays: dict[str, np.ndarray] = {}

    def record(case: dict[str, Any], results: dict[str, jax.Array]) -> None:
        case_id = f"case{len(cases):04d}"
        case["id"] = case_id
        case["dtypes"] = {name: str(value.dtype) for name, value in results.items()}
        case["shapes"] = {name: list(value.shape) for name, value in results.items()}
        for name, value in results.items():
            arrays[f"{case_id}/{name}"] = key_data(value)
        cases.append(case)

    for implementation in IMPLEMENTATIONS:
        for seed in SEEDS:
            key = typed_key(seed, implementation)
            base = {"seed": seed, "impl": implementation}

            for coordinates in COORDINATE_SETS:
                values = [coordinate(value, kind) for value, kind in coordinates]
                for jitted in (False, True) if seed in JIT_SEEDS else (False,):
                    derived = traced_call(derive_key, key, *values) if jitted else derive_key(key, *values)
                    record(
                        {
                            **base,
                            "function": "derive_key",
                            "jit": jitted,
                            "coordinates": [list(c) for c in coordinates],
                        },
                        {"key": derived},
                    )

            for process_index, step, stream in PROCESS_STEPS:
                keywords = {"process_index": coordinate(*process_index), "step": coordinate(*step)}
                if stream is not None:
                    keywords["stream"] = coordinate(*stream)
                for jitted in (False, True) if seed in JIT_SEEDS else (False,):
                    if jitted:
                        derived = traced_call(derive_process_step_key, key, **keywords)
                    else:
                        derived = derive_process_step_key(key, **keywords)
                    record(
                        {
                            **base,
                            "function": "derive_process_step_key",
                            "jit": jitted,
                            "process_index": list(process_index),
                            "step": list(step),
                            "stream": None if stream is None else list(stream),
                        },
                        {"key": derived},
                    )

            for count in SPLIT_COUNTS:
                for jitted in (False, True) if seed in JIT_SEEDS else (False,):
                    if jitted:
                        continuation, operation_keys = jax.jit(lambda key, count=count: split_key(key, count=count))(
                            key
                        )
                    else:
                        continuation, operation_keys = split_key(key, count=count)
                    record(
                        {**base, "function": "split_key", "jit": jitted, "count": count},
                        {"continuation": continuation, "operation_keys": operation_keys},
                    )

            # A stream as a training loop uses it: split the carried key every step,
            # then derive per-process step keys from the continuation.
            carried = key
            stream_results: dict[str, jax.Array] = {}
            for step in range(4):
                carried, operation_keys = split_key(carried, count=2)
                stream_results[f"step{step}_operations"] = operation_keys
                stream_results[f"step{step}_process1"] = derive_process_step_key(carried, process_index=1, step=step)
            stream_results["final"] = carried
            record({**base, "function": "training_stream", "jit": False, "steps": 4}, stream_results)

    output.mkdir(parents=True, exist_ok=True)
    np.savez(output / "keys.npz", **arrays)
    (output / "cases.json").write_text(json.dumps({"cases": cases}, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
