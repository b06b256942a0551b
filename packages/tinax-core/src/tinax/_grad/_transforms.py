"""Checked wrappers around JAX's differentiation transforms."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Literal, ParamSpec, TypeVar

import jax

from tinax._core import validation
from tinax._grad._argnums import check_argnums

__all__ = ["hessian", "jacobian", "value_and_grad"]

P = ParamSpec("P")
R = TypeVar("R")

_MODES = ("forward", "reverse")


def value_and_grad(
    function: Callable[P, object], *, argnums: int | Sequence[int] = 0, has_aux: bool = False
) -> Callable[P, tuple[object, object]]:
    """Transforms ``function`` to return its value together with its gradient.

    The only gradient transform tinax offers: drop the value when only the gradient is needed.

    Args:
      function: A scalar-valued function of one or more arrays (or pytrees of arrays).
      argnums: Index of the positional parameter to differentiate against, or a sequence of
        indices for one gradient per index, in order.
      has_aux: Whether ``function`` returns ``(value, aux)`` with ``aux`` carried through.

    Returns:
      A function with ``function``'s parameters, name and docstring that returns
      ``(value, gradient)``, or ``((value, aux), gradient)`` with ``has_aux``.

    Raises:
      TypeError: If ``function`` is not callable, ``has_aux`` is not a bool, or ``argnums`` holds a non-integer.
      ValueError: If ``argnums`` is empty, negative, repeats an index, or names a missing parameter.

    Examples:
      >>> import jax.numpy as jnp
      >>> from tinax.grad import value_and_grad
      >>> def loss(w, x):
      ...     return jnp.sum((w * x) ** 2)
      >>> value, (grad_w, grad_x) = value_and_grad(loss, argnums=(0, 1))(jnp.array(2.0), jnp.array(3.0))
      >>> float(value), float(grad_w), float(grad_x)
      (36.0, 36.0, 24.0)
    """
    checked = validation.require_callable(function, "function")
    aux = validation.require_bool(has_aux, "has_aux")
    indices = check_argnums(argnums, checked)
    transformed = jax.value_and_grad(checked, argnums=indices, has_aux=aux)
    return _named_like(function, transformed)


def jacobian(
    function: Callable[P, object],
    *,
    mode: Literal["forward", "reverse"],
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
) -> Callable[P, object]:
    """Transforms ``function`` to return its Jacobian.

    ``mode`` has no default: forward mode costs one pass per input element (suits tall
    Jacobians), reverse mode one per output element (wide ones). Both give the same values.

    Args:
      function: A function of one or more arrays (or pytrees of arrays).
      mode: ``"forward"`` (as ``jax.jacfwd``) or ``"reverse"`` (as ``jax.jacrev``).
      argnums: Index of the positional parameter to differentiate against, or a sequence of
        indices for one Jacobian per index, in order.
      has_aux: Whether ``function`` returns ``(output, aux)`` with ``aux`` carried through.

    Returns:
      A function with ``function``'s parameters, name and docstring that returns the Jacobian,
      or ``(jacobian, aux)`` with ``has_aux``.

    Raises:
      TypeError: If ``function`` is not callable, ``mode`` is not a str, or another argument has the wrong type.
      ValueError: If ``mode`` is another string, or ``argnums`` is empty, negative, repeated or out of range.

    Examples:
      >>> import jax.numpy as jnp
      >>> from tinax.grad import jacobian
      >>> def product_and_sum(x):
      ...     return jnp.stack([x[0] * x[1], x[0] + x[1]])
      >>> jacobian(product_and_sum, mode="reverse")(jnp.array([2.0, 3.0])).tolist()
      [[3.0, 2.0], [1.0, 1.0]]
    """
    checked = validation.require_callable(function, "function")
    chosen = validation.require_one_of(mode, "mode", _MODES)
    aux = validation.require_bool(has_aux, "has_aux")
    indices = check_argnums(argnums, checked)
    transform = jax.jacfwd if chosen == "forward" else jax.jacrev
    return _named_like(function, transform(checked, argnums=indices, has_aux=aux))


def hessian(function: Callable[P, object], *, argnums: int | Sequence[int] = 0) -> Callable[P, object]:
    """Transforms a scalar-valued ``function`` to return its Hessian.

    Args:
      function: A scalar-valued function of one or more arrays (or pytrees of arrays).
      argnums: Index of the positional parameter to differentiate against, or a sequence of
        indices for the second-derivative blocks of every pair of them.

    Returns:
      A function with ``function``'s parameters, name and docstring that returns the second
      derivatives, computed as ``jax.hessian`` does.

    Raises:
      TypeError: If ``function`` is not callable, or ``argnums`` (or an item) is a bool or not an integer.
      ValueError: If ``argnums`` is empty, negative, repeats an index, or names a missing parameter.

    Examples:
      >>> import jax.numpy as jnp
      >>> from tinax.grad import hessian
      >>> def cubes(x):
      ...     return jnp.sum(x**3)
      >>> hessian(cubes)(jnp.array([1.0, 2.0])).tolist()
      [[6.0, 0.0], [0.0, 12.0]]
    """
    checked = validation.require_callable(function, "function")
    indices = check_argnums(argnums, checked)
    return _named_like(function, jax.hessian(checked, argnums=indices))


def _named_like(function: Callable[P, object], transformed: Callable[..., R]) -> Callable[P, R]:
    # A wrapper, not renaming JAX's function in place, stays independent of how JAX builds transforms.
    @functools.wraps(function)
    def named(*args: P.args, **kwargs: P.kwargs) -> R:
        return transformed(*args, **kwargs)

    return named
