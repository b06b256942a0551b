"""Differential cases of ``tinax.grad``: build the transform, then call it."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from diff_common import Cases, jax_scalars, python_and_numpy_scalars, random_array, rng, scaled
from diff_describe import attempt

import tinax.grad as tg

M = "tinax.grad"


def _loss(w: Any, x: Any, b: Any = 0.5) -> Any:
    return jnp.sum(jnp.tanh(w * x + b) ** 2)


def _loss_aux(w: Any, x: Any, b: Any = 0.5) -> Any:
    value = _loss(w, x, b)
    return value, {"value": value, "norm": jnp.linalg.norm(w)}


def _vector(w: Any, x: Any, b: Any = 0.5) -> Any:
    return jnp.stack([jnp.sum(w * x), jnp.prod(jnp.sin(w)) + b, jnp.sum(w**2 * x)])


def _vector_aux(w: Any, x: Any, b: Any = 0.5) -> Any:
    return _vector(w, x, b), jnp.max(w)


def _tree_loss(params: Any, x: Any) -> Any:
    return jnp.sum((params["w"] @ x + params["b"]) ** 2) + jnp.sum(params["extra"][0])


FUNCTIONS = {"loss": _loss, "loss_aux": _loss_aux, "vector": _vector, "vector_aux": _vector_aux}

ARGNUMS: dict[str, Any] = {
    "zero": 0,
    "one": 1,
    "two": 2,
    "tuple": (0, 1),
    "list": [0, 2],
    "tuple_one": (1,),
    "empty": (),
    "duplicate": (0, 0),
    "negative": -1,
    "negative_in_tuple": (0, -1),
    "bool": True,
    "bool_in_tuple": (0, False),
    "float": 1.0,
    "string": "0",
    "none": None,
    "too_big": 5,
    "np_int": np.int64(1),
    "np_in_tuple": (np.int32(0), 1),
    "jnp_int": jnp.asarray(0),
    "set": {0, 1},
    "range": range(2),
}

HAS_AUX: dict[str, Any] = {
    "true": True,
    "false": False,
    "none": None,
    "int1": 1,
    "int0": 0,
    "np_bool": np.bool_(True),
    "string": "yes",
}


def _inputs(salt: object, dtype_name: str = "float32") -> tuple[Any, Any, Any]:
    w = jnp.asarray(random_array(dtype_name, (3,), "w", salt))
    x = jnp.asarray(random_array(dtype_name, (3,), "x", salt))
    return w, x, jnp.asarray(0.25, dtype=w.dtype)


def _apply(transform: Any, salt: object, dtype_name: str = "float32") -> Any:
    w, x, b = _inputs(salt, dtype_name)
    return attempt(transform, w, x, b)


def _value_and_grad(cases: Cases) -> None:
    function = f"{M}.value_and_grad"
    for name, argnums in ARGNUMS.items():
        for aux in (False, True):
            cases.add(
                function,
                f"argnums-{name}",
                lambda _, a=argnums, h=aux: _apply(
                    tg.value_and_grad(_loss_aux if h else _loss, argnums=a, has_aux=h), "vg"
                ),
            )
    for name, has_aux in HAS_AUX.items():
        cases.add(
            function,
            f"has_aux-{name}",
            lambda _, h=has_aux: _apply(tg.value_and_grad(_loss_aux, has_aux=h), "aux"),
        )
    r = rng(function)
    for index in range(scaled(8)):
        dtype_name = r.choice(["float32", "bfloat16", "float16", "float64", "int32", "complex64"])
        cases.add(
            function,
            f"dtype-{dtype_name}",
            lambda _, d=dtype_name, i=index: _apply(tg.value_and_grad(_loss, argnums=(0, 1)), i, d),
        )
    _shared(cases, function, lambda f, **k: tg.value_and_grad(f, **k))

    def tree(_: Any) -> Any:
        params = {"w": jnp.eye(2) * 0.5, "b": jnp.ones(2), "extra": (jnp.arange(2.0), None)}
        return tg.value_and_grad(_tree_loss)(params, jnp.asarray([1.0, -2.0]))

    cases.add(function, "pytree-params", tree)
    cases.add(
        function,
        "non-scalar-output",
        lambda _: _apply(tg.value_and_grad(_vector), "vector"),
    )
    cases.add(
        function,
        "integer-input",
        lambda _: tg.value_and_grad(lambda n: n * 2.0)(3),
    )
    cases.add(
        function,
        "jit",
        lambda _: jax.jit(tg.value_and_grad(_loss, argnums=(0, 2)))(*_inputs("jit")),
    )
    cases.add(
        function,
        "eval_shape",
        lambda _: jax.eval_shape(
            tg.value_and_grad(_loss_aux, has_aux=True),
            jax.ShapeDtypeStruct((3,), jnp.float32),
            jax.ShapeDtypeStruct((3,), jnp.float32),
        ),
    )


def _shared(cases: Cases, function: str, make: Any) -> None:
    """Cases every transform shares: what it wraps, and keyword-only arguments passed by position."""
    wrapped = {
        "none": None,
        "int": 1,
        "string": "f",
        "builtin": abs,
        "partial": functools.partial(_loss, b=1.0),
        "method": jnp.arange(3.0).__mul__,
        "class": float,
    }
    for name, value in wrapped.items():
        cases.add(function, f"function-{name}", lambda _, v=value: _apply(make(v), "wrapped"))


def _jacobian(cases: Cases) -> None:
    function = f"{M}.jacobian"
    modes = {
        "forward": "forward",
        "reverse": "reverse",
        "upper": "Forward",
        "fwd": "fwd",
        "rev": "rev",
        "empty": "",
        "none": None,
        "int": 0,
        "bytes": b"forward",
        "bool": True,
    }
    for name, mode in modes.items():
        cases.add(function, f"mode-{name}", lambda _, m=mode: _apply(tg.jacobian(_vector, mode=m), "mode"))
    cases.add(function, "mode-missing", lambda _: tg.jacobian(_vector))  # type: ignore[call-arg]
    for name, argnums in ARGNUMS.items():
        for mode in ("forward", "reverse"):
            cases.add(
                function,
                f"argnums-{name}",
                lambda _, a=argnums, m=mode: _apply(tg.jacobian(_vector, mode=m, argnums=a), "jac"),
            )
    for name, has_aux in HAS_AUX.items():
        for mode in ("forward", "reverse"):
            cases.add(
                function,
                f"has_aux-{name}",
                lambda _, h=has_aux, m=mode: _apply(tg.jacobian(_vector_aux, mode=m, has_aux=h), "jaux"),
            )
    r = rng(function)
    for index in range(scaled(6)):
        dtype_name = r.choice(["float32", "bfloat16", "float16", "int32", "complex64"])
        mode = r.choice(["forward", "reverse"])
        cases.add(
            function,
            f"dtype-{dtype_name}",
            lambda _, d=dtype_name, m=mode, i=index: _apply(tg.jacobian(_vector, mode=m, argnums=(0, 1)), i, d),
        )
    _shared(cases, function, lambda f, **k: tg.jacobian(f, mode="reverse", **k))
    for mode in ("forward", "reverse"):
        cases.add(
            function,
            "pytree-params",
            lambda _, m=mode: tg.jacobian(lambda p: {"y": p["w"] * 2.0, "z": jnp.sum(p["b"])}, mode=m)(
                {"w": jnp.arange(2.0), "b": (jnp.ones(2),)}
            ),
        )
        cases.add(
            function,
            "eval_shape",
            lambda _, m=mode: jax.eval_shape(
                tg.jacobian(_vector, mode=m, argnums=(0, 1)),
                jax.ShapeDtypeStruct((3,), jnp.float32),
                jax.ShapeDtypeStruct((3,), jnp.float32),
            ),
        )
        cases.add(
            function,
            "jit",
            lambda _, m=mode: jax.jit(tg.jacobian(_vector, mode=m))(*_inputs("jjit")),
        )


def _hessian(cases: Cases) -> None:
    function = f"{M}.hessian"
    for name, argnums in ARGNUMS.items():
        cases.add(function, f"argnums-{name}", lambda _, a=argnums: _apply(tg.hessian(_loss, argnums=a), "hess"))
    r = rng(function)
    for index in range(scaled(4)):
        dtype_name = r.choice(["float32", "bfloat16", "float16", "int32"])
        cases.add(
            function,
            f"dtype-{dtype_name}",
            lambda _, d=dtype_name, i=index: _apply(tg.hessian(_loss, argnums=(0, 1)), i, d),
        )
    _shared(cases, function, lambda f, **k: tg.hessian(f, **k))
    cases.add(function, "has_aux-keyword", lambda _: tg.hessian(_loss_aux, has_aux=True))  # type: ignore[call-arg]
    cases.add(function, "vector-output", lambda _: _apply(tg.hessian(_vector), "hvec"))
    cases.add(
        function,
        "pytree-params",
        lambda _: tg.hessian(lambda p: jnp.sum(p["w"] ** 3) * p["s"])({"w": jnp.arange(2.0), "s": jnp.asarray(2.0)}),
    )
    cases.add(
        function,
        "eval_shape",
        lambda _: jax.eval_shape(tg.hessian(_loss), *(jax.ShapeDtypeStruct((3,), jnp.float32),) * 2),
    )
    for name, value in [*python_and_numpy_scalars()[:6], *jax_scalars()[:2]]:
        cases.add(function, f"argnums-scalar-{name}", lambda _, v=value: _apply(tg.hessian(_loss, argnums=v), "hs"))


def build(cases: Cases) -> None:
    """Every case of ``tinax.grad``."""
    _value_and_grad(cases)
    _jacobian(cases)
    _hessian(cases)
