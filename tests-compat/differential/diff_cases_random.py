"""Differential cases of ``tinax.random`` (the recorded key streams are in ``test_random_artifacts.py``)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from diff_common import Cases, jax_scalars, python_and_numpy_scalars, rng, scaled, size_scalars

import tinax.random as tr

M = "tinax.random"

#: Keys users hold: typed keys of each implementation, raw keys, batches and things that are no key.
KEYS: dict[str, Any] = {
    "threefry": lambda: jax.random.key(7),
    "rbg": lambda: jax.random.key(7, impl="rbg"),
    "unsafe_rbg": lambda: jax.random.key(7, impl="unsafe_rbg"),
    "threefry_split": lambda: jax.random.split(jax.random.key(1), 2)[1],
    "raw_prngkey": lambda: jax.random.PRNGKey(7),
    "raw_numpy": lambda: np.asarray([0, 7], dtype=np.uint32),
    "raw_int32": lambda: jnp.asarray([0, 7], dtype=jnp.int32),
    "raw_wrong_length": lambda: jnp.asarray([0, 7, 1], dtype=jnp.uint32),
    "typed_batch": lambda: jax.random.split(jax.random.key(0), 3),
    "typed_empty_batch": lambda: jax.random.split(jax.random.key(0), 0),
    "raw_batch": lambda: jax.random.split(jax.random.PRNGKey(0), 2),
    "python_int": lambda: 7,
    "none": lambda: None,
    "float_array": lambda: jnp.zeros(2),
    "list": lambda: [0, 7],
}


def _coordinates() -> list[tuple[str, Any]]:
    values = [*python_and_numpy_scalars(), *jax_scalars()]
    values += [
        ("np.uint8_200", np.uint8(200)),
        ("np.uint16_max", np.uint16(65535)),
        ("np.uint32_max", np.uint32(2**32 - 1)),
        ("np.int16_5", np.int16(5)),
        ("jnp.uint16_9", jnp.asarray(9, dtype=jnp.uint16)),
        ("np_array_uint32", np.asarray(5, dtype=np.uint32)),
        ("np_vector", np.arange(2, dtype=np.uint32)),
    ]
    return values


def _traced(function: Any, key: Any, *arguments: Any, **keywords: Any) -> Any:
    """``function`` under ``jax.jit``, with key and array arguments traced and Python values static."""
    positions = [index for index, value in enumerate(arguments) if isinstance(value, jax.Array | np.ndarray)]
    names = [name for name, value in keywords.items() if isinstance(value, jax.Array | np.ndarray)]

    def body(key: Any, traced_positional: list[Any], traced_keywords: dict[str, Any]) -> Any:
        merged = list(arguments)
        for index, value in zip(positions, traced_positional, strict=True):
            merged[index] = value
        return function(key, *merged, **{**keywords, **traced_keywords})

    return jax.jit(body)(key, [arguments[index] for index in positions], {name: keywords[name] for name in names})


def _derive_key(cases: Cases) -> None:
    function = f"{M}.derive_key"
    coordinates = _coordinates()
    for name, make in KEYS.items():
        cases.add(function, f"key-{name}", lambda _, m=make: tr.derive_key(m(), 3, 4))
        cases.add(function, f"key-{name}-no-coordinates", lambda _, m=make: tr.derive_key(m()))
    for name, value in coordinates:
        cases.add(function, f"coordinate-{name}", lambda _, v=value: tr.derive_key(jax.random.key(2), v))
        cases.add(function, f"coordinate-second-{name}", lambda _, v=value: tr.derive_key(jax.random.key(2), 1, v))
    r = rng(function)
    for _ in range(scaled(40)):
        key_name = r.choice(["threefry", "rbg", "unsafe_rbg", "raw_prngkey"])
        chosen = [r.choice(coordinates) for _ in range(r.randint(0, 4))]
        jitted = r.random() < 0.3
        cases.add(
            function,
            f"random-{key_name}{'-jit' if jitted else ''}",
            lambda _, k=key_name, c=tuple(value for _, value in chosen), j=jitted: (
                _traced(tr.derive_key, KEYS[k](), *c) if j else tr.derive_key(KEYS[k](), *c)
            ),
        )
    cases.add(
        function,
        "vmap-over-coordinates",
        lambda _: jax.vmap(lambda c: tr.derive_key(jax.random.key(0), c))(jnp.arange(4, dtype=jnp.uint32)),
    )
    cases.add(
        function,
        "eval_shape",
        lambda _: jax.eval_shape(
            lambda key, c: tr.derive_key(key, c), jax.random.key(0), jax.ShapeDtypeStruct((), jnp.uint32)
        ),
    )


def _derive_process_step_key(cases: Cases) -> None:
    function = f"{M}.derive_process_step_key"
    coordinates = _coordinates()
    for name, make in KEYS.items():
        cases.add(
            function,
            f"key-{name}",
            lambda _, m=make: tr.derive_process_step_key(m(), process_index=0, step=1),
        )
    for name, value in coordinates:
        for argument in ("process_index", "step", "stream"):
            keywords = {"process_index": 1, "step": 2, argument: value}
            cases.add(
                function,
                f"{argument}-{name}",
                lambda _, k=keywords: tr.derive_process_step_key(jax.random.key(4), **k),
            )
    r = rng(function)
    for _ in range(scaled(16)):
        keywords = {name: r.choice(coordinates)[1] for name in ("process_index", "step", "stream") if r.random() < 0.9}
        jitted = r.random() < 0.3
        cases.add(
            function,
            f"random{'-jit' if jitted else ''}",
            lambda _, k=keywords, j=jitted: (
                _traced(tr.derive_process_step_key, jax.random.key(9), **k)
                if j
                else tr.derive_process_step_key(jax.random.key(9), **k)
            ),
        )
    cases.add(function, "positional", lambda _: tr.derive_process_step_key(jax.random.key(0), 1, 2))  # type: ignore[misc]


def _split_key(cases: Cases) -> None:
    function = f"{M}.split_key"
    for name, make in KEYS.items():
        cases.add(function, f"key-{name}", lambda _, m=make: tr.split_key(m(), count=2))
    counts = [item for item in [*size_scalars(), *jax_scalars()] if item[0] != "bigint"]
    for name, count in counts:
        cases.add(function, f"count-{name}", lambda _, c=count: tr.split_key(jax.random.key(5), count=c))
    for count in (0, 1, 4):
        cases.add(
            function,
            "jit",
            lambda _, c=count: jax.jit(lambda key: tr.split_key(key, count=c))(jax.random.key(11)),
        )
        cases.add(
            function,
            "eval_shape",
            lambda _, c=count: jax.eval_shape(lambda key: tr.split_key(key, count=c), jax.random.key(0, impl="rbg")),
        )
    cases.add(function, "count-missing", lambda _: tr.split_key(jax.random.key(0)))  # type: ignore[call-arg]
    cases.add(function, "count-positional", lambda _: tr.split_key(jax.random.key(0), 2))  # type: ignore[misc]


def build(cases: Cases) -> None:
    """Every case of ``tinax.random``."""
    _derive_key(cases)
    _derive_process_step_key(cases)
    _split_key(cases)
