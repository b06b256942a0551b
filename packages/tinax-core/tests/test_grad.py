"""Tests for tinax.grad: results match JAX, and argnums is checked at wrap time."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tinax.grad
from tinax.grad import hessian, jacobian, value_and_grad
from tinax_testing import import_side_effects, parameter_summary

X = jnp.array([0.5, -1.0, 2.0], dtype=jnp.float32)
Y = jnp.array([1.5, 0.25, -0.75], dtype=jnp.float32)


def loss(x: jax.Array, y: jax.Array) -> jax.Array:
    """A scalar function of two arrays."""
    return jnp.sum(jnp.sin(x) * y**2) + jnp.sum(x**3)


def loss_with_aux(x: jax.Array, y: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    return loss(x, y), {"mean": jnp.mean(x * y)}


def residual(x: jax.Array, y: jax.Array) -> jax.Array:
    """A vector function of two arrays."""
    return jnp.stack([jnp.sum(x * y), jnp.prod(x), jnp.sum(jnp.cos(y))])


def residual_with_aux(x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    return residual(x, y), jnp.max(x)


def assert_trees_equal(actual: object, expected: object) -> None:
    assert str(jax.tree.structure(actual)) == str(jax.tree.structure(expected))
    for got, want in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)


# Every transform, built on ``loss`` (two positional parameters), so the shared
# argnums checks can be run against each of them.
TRANSFORMS: dict[str, Callable[..., Callable[..., object]]] = {
    "value_and_grad": lambda function, **kwargs: value_and_grad(function, **kwargs),
    "jacobian-forward": lambda function, **kwargs: jacobian(function, mode="forward", **kwargs),
    "jacobian-reverse": lambda function, **kwargs: jacobian(function, mode="reverse", **kwargs),
    "hessian": lambda function, **kwargs: hessian(function, **kwargs),
}

transform_cases = pytest.mark.parametrize("make", list(TRANSFORMS.values()), ids=list(TRANSFORMS))


# --- public surface ---------------------------------------------------------------------------------------------


def test_public_names_are_exactly_the_three_transforms() -> None:
    assert tinax.grad.__all__ == ["value_and_grad", "jacobian", "hessian"]
    assert not hasattr(tinax.grad, "grad")


@pytest.mark.parametrize(
    ("name", "parameters"),
    [
        ("value_and_grad", [("function", "POSITIONAL_OR_KEYWORD", None), ("argnums", "KEYWORD_ONLY", 0),
                            ("has_aux", "KEYWORD_ONLY", False)]),
        ("jacobian", [("function", "POSITIONAL_OR_KEYWORD", None), ("mode", "KEYWORD_ONLY", None),
                      ("argnums", "KEYWORD_ONLY", 0), ("has_aux", "KEYWORD_ONLY", False)]),
        ("hessian", [("function", "POSITIONAL_OR_KEYWORD", None), ("argnums", "KEYWORD_ONLY", 0)]),
    ],
)  # fmt: skip
def test_signatures_match_the_compatible_surface(name: str, parameters: list[tuple[str, str, object]]) -> None:
    assert parameter_summary(getattr(tinax.grad, name)) == parameters


def test_importing_the_module_is_inert() -> None:
    effects = import_side_effects("tinax.grad")
    assert effects["backends_initialized"] is False
    assert effects["integrations"] == []


# --- results equal JAX's ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("argnums", [0, 1, (0,), (0, 1), (1, 0), [1, 0]])
def test_value_and_grad_matches_jax(argnums: int | tuple[int, ...] | list[int]) -> None:
    expected = jax.value_and_grad(loss, argnums=argnums)(X, Y)
    assert_trees_equal(value_and_grad(loss, argnums=argnums)(X, Y), expected)


def test_value_and_grad_with_tuple_argnums_returns_one_gradient_per_index() -> None:
    value, gradients = value_and_grad(loss, argnums=(0, 1))(X, Y)
    assert isinstance(gradients, tuple)
    assert len(gradients) == 2
    np.testing.assert_allclose(np.asarray(value), np.asarray(loss(X, Y)), rtol=1e-6)


def test_value_and_grad_with_single_index_returns_a_bare_gradient() -> None:
    _, gradient = value_and_grad(loss, argnums=1)(X, Y)
    assert isinstance(gradient, jax.Array)
    assert gradient.shape == Y.shape


@pytest.mark.parametrize("argnums", [0, (0, 1)])
def test_value_and_grad_with_aux_matches_jax(argnums: int | tuple[int, ...]) -> None:
    expected = jax.value_and_grad(loss_with_aux, argnums=argnums, has_aux=True)(X, Y)
    actual = value_and_grad(loss_with_aux, argnums=argnums, has_aux=True)(X, Y)
    assert_trees_equal(actual, expected)
    value_and_aux, _ = cast(tuple[tuple[jax.Array, dict[str, jax.Array]], object], actual)
    aux = value_and_aux[1]
    np.testing.assert_allclose(np.asarray(aux["mean"]), np.asarray(jnp.mean(X * Y)), rtol=1e-6)


def test_value_and_grad_accepts_numpy_integer_argnums() -> None:
    expected = jax.value_and_grad(loss, argnums=1)(X, Y)
    assert_trees_equal(value_and_grad(loss, argnums=np.int64(1))(X, Y), expected)  # type: ignore[arg-type]
    assert_trees_equal(
        value_and_grad(loss, argnums=(np.int32(1),))(X, Y),  # type: ignore[arg-type]
        jax.value_and_grad(loss, argnums=(1,))(X, Y),
    )


@pytest.mark.parametrize(("mode", "reference"), [("forward", jax.jacfwd), ("reverse", jax.jacrev)])
@pytest.mark.parametrize("argnums", [0, 1, (0, 1), (1, 0)])
def test_jacobian_matches_the_jax_transform_of_its_mode(
    mode: str, reference: Callable[..., Callable[..., object]], argnums: int | tuple[int, ...]
) -> None:
    expected = reference(residual, argnums=argnums)(X, Y)
    assert_trees_equal(jacobian(residual, mode=mode, argnums=argnums)(X, Y), expected)  # type: ignore[arg-type]


@pytest.mark.parametrize(("mode", "reference"), [("forward", jax.jacfwd), ("reverse", jax.jacrev)])
def test_jacobian_with_aux_matches_jax(mode: str, reference: Callable[..., Callable[..., object]]) -> None:
    expected = reference(residual_with_aux, argnums=(0, 1), has_aux=True)(X, Y)
    actual = jacobian(residual_with_aux, mode=mode, argnums=(0, 1), has_aux=True)(X, Y)  # type: ignore[arg-type]
    assert_trees_equal(actual, expected)


def test_forward_and_reverse_jacobians_agree() -> None:
    forward = jacobian(residual, mode="forward", argnums=(0, 1))(X, Y)
    reverse = jacobian(residual, mode="reverse", argnums=(0, 1))(X, Y)
    assert_trees_equal(forward, reverse)


@pytest.mark.parametrize("argnums", [0, 1, (0, 1), [1, 0]])
def test_hessian_matches_jax(argnums: int | tuple[int, ...] | list[int]) -> None:
    expected = jax.hessian(loss, argnums=argnums)(X, Y)
    assert_trees_equal(hessian(loss, argnums=argnums)(X, Y), expected)


@transform_cases
def test_transforms_keep_the_function_name_and_docstring(make: Callable[..., Callable[..., object]]) -> None:
    transformed = make(loss)
    assert transformed.__name__ == "loss"
    assert transformed.__qualname__ == loss.__qualname__
    assert transformed.__doc__ == loss.__doc__
    assert list(inspect.signature(transformed).parameters) == ["x", "y"]


@transform_cases
def test_a_variadic_function_has_no_upper_argnums_bound(make: Callable[..., Callable[..., object]]) -> None:
    def total(*arrays: jax.Array) -> jax.Array:
        return sum((jnp.sum(a**2) for a in arrays), start=jnp.float32(0))

    make(total, argnums=(0, 3))(X, Y, X, Y)


@transform_cases
def test_an_uninspectable_function_skips_the_range_check(make: Callable[..., Callable[..., object]]) -> None:
    class Opaque:
        # inspect.signature refuses this __signature__ (TypeError on 3.11, ValueError on 3.12).
        __signature__ = "not a signature"

        def __call__(self, x: jax.Array, y: jax.Array) -> jax.Array:
            return loss(x, y)

    with pytest.raises((TypeError, ValueError)):
        inspect.signature(Opaque())
    make(Opaque(), argnums=5)  # Nothing to check against: JAX reports it when called.
    make(Opaque(), argnums=1)(X, Y)


def test_a_bound_method_is_bounded_by_its_parameters_after_self() -> None:
    class Model:
        def energy(self, x: jax.Array, y: jax.Array) -> jax.Array:
            return loss(x, y)

    model = Model()
    assert_trees_equal(value_and_grad(model.energy, argnums=1)(X, Y), jax.value_and_grad(loss, argnums=1)(X, Y))
    with pytest.raises(ValueError, match=r"^argnums must be an int in \[0, 1\]"):
        value_and_grad(model.energy, argnums=2)


# --- the shared argnums check -----------------------------------------------------------------------------------


@transform_cases
@pytest.mark.parametrize(
    ("argnums", "name"),
    [(True, "argnums"), (False, "argnums"), ((0, True), r"argnums\[1\]"), ([True], r"argnums\[0\]"),
     (np.bool_(True), "argnums")],
)  # fmt: skip
def test_bool_argnums_are_a_type_error(make: Callable[..., Callable[..., object]], argnums: object, name: str) -> None:
    with pytest.raises(TypeError, match=rf"^{name} must be an int >= 0, got "):
        make(loss, argnums=argnums)


@transform_cases
@pytest.mark.parametrize(
    ("argnums", "name"),
    [(1.0, "argnums"), ("0", "argnums"), (None, "argnums"), ({0, 1}, "argnums"), ((0, 1.5), r"argnums\[1\]"),
     (["0"], r"argnums\[0\]"), ((0, None), r"argnums\[1\]")],
)  # fmt: skip
def test_non_integer_argnums_are_a_type_error(
    make: Callable[..., Callable[..., object]], argnums: object, name: str
) -> None:
    with pytest.raises(TypeError, match=rf"^{name} must be an int >= 0, got "):
        make(loss, argnums=argnums)


@transform_cases
@pytest.mark.parametrize("argnums", [(), []])
def test_empty_argnums_are_a_value_error(make: Callable[..., Callable[..., object]], argnums: object) -> None:
    with pytest.raises(ValueError, match=r"^argnums must be a non-empty sequence of ints >= 0, got "):
        make(loss, argnums=argnums)


@transform_cases
@pytest.mark.parametrize(("argnums", "name"), [(-1, "argnums"), ((0, -1), r"argnums\[1\]"), ([-2], r"argnums\[0\]")])
def test_negative_argnums_are_a_value_error(
    make: Callable[..., Callable[..., object]], argnums: object, name: str
) -> None:
    with pytest.raises(ValueError, match=rf"^{name} must be an int >= 0, got -"):
        make(loss, argnums=argnums)


@transform_cases
@pytest.mark.parametrize("argnums", [(0, 0), [1, 0, 1]])
def test_duplicate_argnums_are_a_value_error(make: Callable[..., Callable[..., object]], argnums: object) -> None:
    with pytest.raises(ValueError, match=r"^argnums must not repeat items"):
        make(loss, argnums=argnums)


@transform_cases
@pytest.mark.parametrize(("argnums", "name"), [(2, "argnums"), ((0, 2), r"argnums\[1\]"), ([7], r"argnums\[0\]")])
def test_argnums_past_the_last_positional_parameter_fail_at_wrap_time(
    make: Callable[..., Callable[..., object]], argnums: object, name: str
) -> None:
    with pytest.raises(ValueError, match=rf"^{name} must be an int in \[0, 1\] because loss\(\) takes 2 positional"):
        make(loss, argnums=argnums)


@transform_cases
def test_keyword_only_parameters_cannot_be_differentiated(make: Callable[..., Callable[..., object]]) -> None:
    def scaled(x: jax.Array, *, y: jax.Array) -> jax.Array:
        return loss(x, y)

    with pytest.raises(
        ValueError, match=r"^argnums must be an int in \[0, 0\] because .*scaled\(\) takes 1 positional"
    ):
        make(scaled, argnums=1)


@transform_cases
def test_a_function_without_positional_parameters_accepts_no_argnums(
    make: Callable[..., Callable[..., object]],
) -> None:
    def constant() -> jax.Array:
        return jnp.asarray(1.0, dtype=jnp.float32)

    with pytest.raises(ValueError, match=r"^argnums must be the index of a positional parameter, but .* takes none"):
        make(constant)


# --- the other arguments ----------------------------------------------------------------------------------------


@transform_cases
@pytest.mark.parametrize("function", [None, 3, "loss", X])
def test_function_must_be_callable(make: Callable[..., Callable[..., object]], function: object) -> None:
    with pytest.raises(TypeError, match=r"^function must be callable, got "):
        make(function)


@pytest.mark.parametrize("has_aux", [1, 0, "yes", None, np.bool_(True)])
@pytest.mark.parametrize(
    "make",
    [
        lambda has_aux: value_and_grad(loss_with_aux, has_aux=has_aux),
        lambda has_aux: jacobian(residual_with_aux, mode="forward", has_aux=has_aux),
        lambda has_aux: jacobian(residual_with_aux, mode="reverse", has_aux=has_aux),
    ],
    ids=["value_and_grad", "jacobian-forward", "jacobian-reverse"],
)
def test_has_aux_must_be_a_bool(make: Callable[[object], object], has_aux: object) -> None:
    with pytest.raises(TypeError, match=r"^has_aux must be a bool, got "):
        make(has_aux)


@pytest.mark.parametrize("mode", [None, 1, b"forward", ("forward",)])
def test_a_non_string_mode_is_a_type_error(mode: object) -> None:
    with pytest.raises(TypeError, match=r"^mode must be one of 'forward', 'reverse', got "):
        jacobian(residual, mode=mode)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["fwd", "rev", "Forward", "", "jacfwd"])
def test_an_unknown_mode_is_a_value_error(mode: str) -> None:
    with pytest.raises(ValueError, match=r"^mode must be one of 'forward', 'reverse', got "):
        jacobian(residual, mode=mode)  # type: ignore[arg-type]


def test_jacobian_has_no_default_mode() -> None:
    with pytest.raises(TypeError, match="mode"):
        jacobian(residual)  # type: ignore[call-arg]


# --- under jit --------------------------------------------------------------------------------------------------


def test_value_and_grad_under_jit_matches_eager() -> None:
    transformed = value_and_grad(loss_with_aux, argnums=(0, 1), has_aux=True)
    assert_trees_equal(jax.jit(transformed)(X, Y), transformed(X, Y))
    assert_trees_equal(
        jax.jit(transformed)(X, Y), jax.value_and_grad(loss_with_aux, argnums=(0, 1), has_aux=True)(X, Y)
    )


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_jacobian_under_jit_matches_eager(mode: str) -> None:
    transformed = jacobian(residual_with_aux, mode=mode, argnums=(1, 0), has_aux=True)  # type: ignore[arg-type]
    assert_trees_equal(jax.jit(transformed)(X, Y), transformed(X, Y))


def test_hessian_under_jit_matches_eager() -> None:
    transformed = hessian(loss, argnums=(0, 1))
    assert_trees_equal(jax.jit(transformed)(X, Y), transformed(X, Y))


def test_transforms_of_a_jitted_function_match_jax() -> None:
    jitted = jax.jit(loss)
    assert_trees_equal(value_and_grad(jitted, argnums=1)(X, Y), jax.value_and_grad(loss, argnums=1)(X, Y))
    with pytest.raises(ValueError, match=r"^argnums must be an int in \[0, 1\]"):
        value_and_grad(jitted, argnums=2)


def test_transforms_built_while_tracing_match_eager() -> None:
    @jax.jit
    def step(x: jax.Array, y: jax.Array) -> tuple[object, object, object]:
        return (
            value_and_grad(loss, argnums=(0, 1))(x, y),
            jacobian(residual, mode="reverse")(x, y),
            hessian(loss, argnums=1)(x, y),
        )

    expected = (
        jax.value_and_grad(loss, argnums=(0, 1))(X, Y),
        jax.jacrev(residual)(X, Y),
        jax.hessian(loss, argnums=1)(X, Y),
    )
    assert_trees_equal(step(X, Y), expected)


def test_argnums_errors_surface_while_tracing() -> None:
    @jax.jit
    def step(x: jax.Array, y: jax.Array) -> object:
        return value_and_grad(loss, argnums=True)(x, y)

    with pytest.raises(TypeError, match=r"^argnums must be an int >= 0, got True \(bool\)"):
        step(X, Y)


def test_an_argnums_past_the_positional_parameters_is_both_type_and_value_error_as_jax_raised_in_tinax_02():
    import numpy as np

    from tinax._core.validation import TypeAndValueError
    from tinax.grad import hessian, value_and_grad

    with pytest.raises(TypeAndValueError, match=r"argnums must be an int in \[0, 1\]"):
        value_and_grad(lambda a, b: a * b, argnums=5)
    with pytest.raises(TypeError):
        hessian(lambda a, b: a * b, argnums=np.uint32(7))
