"""The cases of the differential check, and the inputs they are built from.

A *case* is one public call of tinax 0.2 (or a short sequence of calls a user
would make: wrap a function, then call it) with inputs drawn from seeded
generators. Both sides build the same list of cases from the same seed, run
every case in one process per module, and describe what came back (see
``diff_describe.py``).

Each ``diff_cases_<module>.py`` defines ``build(cases)``, which adds its cases
to a ``Cases`` collection. A case's ``call`` receives the case's own empty
folder (for the files it writes) and returns the value to describe; what it
raises is recorded instead. A case that writes files says how they are
compared: ``"bytes"`` where tinax 0.3 keeps 0.2's file format (the files must
be identical), or ``"readback"`` where only the content must survive (then
``read`` is called on each side's folder, and each release must read what the
other wrote as it reads its own).

The inputs are what users pass: arrays of every dtype and of awkward shapes
(scalars, empty), Python, NumPy and JAX scalars, empty containers, padding
indices (-1), existing and missing paths, optax states, Flax NNX states,
``jax.eval_shape`` results and ``ShapeDtypeStruct`` targets.
"""

from __future__ import annotations

import os
import random
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

#: The seed of every generator: the same on both sides, so both build the same cases.
SEED = 20250

#: Multiplies the number of drawn cases (``TINAX_DIFFERENTIAL_SCALE``, default 1: what fits CI).
#: A scaled run explores more inputs; since the later draws of a generator shift, some case ids
#: then name other inputs than the ones differential-deviations.toml lists: read a scaled run's
#: report for new kinds of difference, not against the list.
SCALE = float(os.environ.get("TINAX_DIFFERENTIAL_SCALE", "1"))


def scaled(count: int) -> int:
    """How many cases to draw where the default is ``count``."""
    return max(1, round(count * SCALE))


#: Every dtype JAX has a NumPy (or ml_dtypes) type for.
DTYPE_NAMES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3b11fnuz",
    "int4",
    "uint4",
)
INTEGER_DTYPE_NAMES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOAT_DTYPE_NAMES = ("float16", "bfloat16", "float32", "float64")

#: Shapes users meet, the awkward ones included.
SHAPES: tuple[tuple[int, ...], ...] = ((), (0,), (1,), (3,), (2, 3), (2, 0), (1, 1, 1), (4, 2), (3, 0, 2))


@dataclass
class Case:
    """One call (or short sequence of calls) of a public tinax function."""

    id: str
    function: str
    call: Callable[[Path], Any]
    files: Literal["bytes", "readback"] | None = None
    read: Callable[[Path], Any] | None = None
    #: Extra names this case also exercises (a class's method, say).
    also: tuple[str, ...] = ()

    @property
    def folder_name(self) -> str:
        """A file-system-safe folder name, unique per case."""
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", self.id)


@dataclass
class Cases:
    """The cases of one module, with ids ``<function>/<group>/<number>``."""

    items: list[Case] = field(default_factory=list)
    _numbers: Counter[tuple[str, str]] = field(default_factory=Counter)

    def add(
        self,
        function: str,
        group: str,
        call: Callable[[Path], Any],
        *,
        files: Literal["bytes", "readback"] | None = None,
        read: Callable[[Path], Any] | None = None,
        also: tuple[str, ...] = (),
    ) -> Case:
        """Adds a case of ``function`` in ``group``; returns it."""
        number = self._numbers[(function, group)]
        self._numbers[(function, group)] += 1
        case = Case(f"{function}/{group}/{number}", function, call, files, read, also)
        self.items.append(case)
        return case

    def __iter__(self) -> Iterator[Case]:
        return iter(self.items)


def rng(*salt: object) -> random.Random:
    """A generator seeded by SEED and ``salt`` (stable across processes: no hash())."""
    return random.Random(f"{SEED}:" + ":".join(str(part) for part in salt))


def np_rng(*salt: object) -> Any:
    """A NumPy generator seeded like ``rng``."""
    import numpy as np

    return np.random.default_rng(rng(*salt).getrandbits(64))


def numpy_dtype(name: str) -> Any:
    """The NumPy dtype of a name, ml_dtypes' types included."""
    import ml_dtypes
    import numpy as np

    if hasattr(ml_dtypes, name):
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def random_array(dtype_name: str, shape: tuple[int, ...], *salt: object, special: bool = False) -> Any:
    """A seeded NumPy array; floats finite unless ``special`` (then nan, inf, -0.0 mixed in)."""
    import numpy as np

    dtype = numpy_dtype(dtype_name)
    generator = np_rng("array", dtype_name, shape, *salt)
    count = int(np.prod(shape, dtype=np.int64))
    if dtype == np.bool_:
        return generator.integers(0, 2, size=shape).astype(np.bool_)
    if dtype_name in ("int4", "uint4"):
        low, high = (-8, 7) if dtype_name == "int4" else (0, 15)
        return generator.integers(low, high, size=shape, endpoint=True).astype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return generator.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    values = generator.standard_normal(count) * 4
    if dtype.kind == "c":
        values = values + 1j * generator.standard_normal(count)
    if special and count:
        specials = [np.nan, np.inf, -np.inf, -0.0]
        for index in generator.choice(count, size=min(count, 2), replace=False):
            values[index] = specials[int(generator.integers(0, len(specials)))]
    return values.astype(dtype).reshape(shape)


def python_and_numpy_scalars() -> list[tuple[str, Any]]:
    """Scalars a caller passes where an integer is expected, each with a label."""
    import numpy as np

    return [
        ("int0", 0),
        ("int1", 1),
        ("int3", 3),
        ("int-1", -1),
        ("int_2e31", 2**31),
        ("int_2e32m1", 2**32 - 1),
        ("int_2e32", 2**32),
        ("bigint", 10**30),
        ("true", True),
        ("false", False),
        ("float2", 2.0),
        ("float_nan", float("nan")),
        ("np.int8_3", np.int8(3)),
        ("np.int32_2", np.int32(2)),
        ("np.int64_-1", np.int64(-1)),
        ("np.uint32_5", np.uint32(5)),
        ("np.uint64_big", np.uint64(2**40)),
        ("np.bool_true", np.bool_(True)),
        ("np.float32_2", np.float32(2.0)),
        ("str3", "3"),
        ("none", None),
        ("list", [1]),
        ("tuple_empty", ()),
    ]


#: Labels of the scalars that, used as a size, would ask for gigabytes.
HUGE = frozenset({"int_2e31", "int_2e32m1", "int_2e32", "np.uint64_big"})


def size_scalars() -> list[tuple[str, Any]]:
    """``python_and_numpy_scalars`` without the values that would allocate gigabytes as a size."""
    return [(name, value) for name, value in python_and_numpy_scalars() if name not in HUGE]


def jax_scalars() -> list[tuple[str, Any]]:
    """JAX scalars a caller passes where an integer is expected, each with a label."""
    import jax.numpy as jnp

    return [
        ("jnp.int32_2", jnp.asarray(2, dtype=jnp.int32)),
        ("jnp.uint32_7", jnp.asarray(7, dtype=jnp.uint32)),
        ("jnp.uint8_1", jnp.asarray(1, dtype=jnp.uint8)),
        ("jnp.int8_-1", jnp.asarray(-1, dtype=jnp.int8)),
        ("jnp.bool_true", jnp.asarray(True)),
        ("jnp.float32_1", jnp.asarray(1.0, dtype=jnp.float32)),
        ("jnp.weak_int", jnp.asarray(4)),
        ("jnp.vector", jnp.arange(2, dtype=jnp.uint32)),
    ]


def optax_states() -> list[tuple[str, Any]]:
    """Optimizer states of the common optax optimizers over a small parameter tree."""
    import jax.numpy as jnp
    import optax

    params = {
        "dense": {"kernel": jnp.arange(6, dtype=jnp.float32).reshape(2, 3) / 7, "bias": jnp.zeros(3, jnp.float32)},
        "scale": jnp.asarray(1.5, jnp.float32),
    }
    mask = {"dense": {"kernel": True, "bias": False}, "scale": True}
    optimizers = [
        ("adam", optax.adam(1e-3)),
        ("adamw", optax.adamw(1e-3, weight_decay=1e-4)),
        ("sgd", optax.sgd(0.1)),
        ("sgd_momentum", optax.sgd(0.1, momentum=0.9)),
        ("chain_clip_adam", optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))),
        ("masked_adam", optax.masked(optax.adam(1e-3), mask)),
        ("empty", optax.identity()),
    ]
    states = []
    for name, optimizer in optimizers:
        state = optimizer.init(params)
        # One real update, so counts and moments are not all zero.
        grads = {
            "dense": {"kernel": jnp.full((2, 3), 0.25, jnp.float32), "bias": jnp.ones(3, jnp.float32)},
            "scale": jnp.asarray(-2.0, jnp.float32),
        }
        _, state = optimizer.update(grads, state, params)
        states.append((name, state))
    states.append(("empty_state", optax.EmptyState()))
    return states


def nnx_modules() -> list[tuple[str, Callable[[], Any]]]:
    """Constructors of Flax NNX modules users checkpoint, shard and copy."""
    import jax.numpy as jnp
    from flax import nnx

    class Block(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.linear = nnx.Linear(3, 4, rngs=rngs)
            self.norm = nnx.BatchNorm(4, rngs=rngs)
            self.dropout = nnx.Dropout(0.5, rngs=rngs)
            self.count = nnx.BatchStat(jnp.zeros((), jnp.int32))

        def __call__(self, x: Any) -> Any:
            return self.dropout(self.norm(self.linear(x)))

    class Shared(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            layer = nnx.Linear(2, 2, rngs=rngs)
            self.first = layer
            self.second = layer  # An alias: a copy must keep it one layer.
            self.embed = nnx.Embed(5, 2, rngs=rngs)

    return [
        ("linear", lambda: nnx.Linear(2, 3, rngs=nnx.Rngs(0))),
        ("linear_nobias_bf16", lambda: nnx.Linear(3, 2, use_bias=False, param_dtype="bfloat16", rngs=nnx.Rngs(1))),
        ("block", lambda: _block(Block)),
        ("shared", lambda: Shared(nnx.Rngs(3))),
        ("conv", lambda: nnx.Conv(2, 3, kernel_size=(2,), rngs=nnx.Rngs(4))),
        ("layernorm", lambda: nnx.LayerNorm(4, rngs=nnx.Rngs(5))),
    ]


def _block(block: type) -> Any:
    from flax import nnx

    return block(nnx.Rngs(params=2, dropout=7))


def ensure_devices(count: int = 8) -> None:
    """Asks JAX for ``count`` CPU devices, unless the environment already did."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("JAX_NUM_CPU_DEVICES", str(count))


def label(value: Any) -> str:
    """A short label of a value for a case id."""
    text = repr(value) if not isinstance(value, str) else value
    return re.sub(r"\s+", "", text)[:40]


def module_loaded(name: str) -> bool:
    """Whether ``name`` is imported in this process."""
    return name in sys.modules
