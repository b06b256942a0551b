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
    function: Callable[P, object],
    *,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
) -> Callable[P, tuple[object, object]]:
    """Transforms ``function`` to return its value together with its gradient.

    This is the only gradient transform tinax offers: when just the gradient
    is needed, drop the value from the result.

    Args:
      function: A scalar-valued function of one or more arrays (or pytrees
        of arrays).
      argnums: Index of the positional parameter to differentiate against,
        or a sequence of indices to get one gradient per index, in order.
      has_aux: Whether ``function`` returns a pair ``(value, aux)`` whose
        second item is carried through without being differentiated.

    Returns:
      A function with the same parameters as ``function`` that returns
      ``(value, gradient)``, or ``((value, aux), gradient)`` with ``has_aux``.
      It keeps the name and docstring of ``function``.

    Raises:
      TypeError: If ``function`` is not callable, ``has_aux`` is not a bool,
        or ``argnums`` (or one of its items) is a bool or not an integer.
      ValueError: If ``argnums`` is empty, negative, repeats an index, or
        names a positional parameter that ``function`` does not have.

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

    The mode has no default because the right choice depends on the shape of
    the problem: forward mode costs one pass per input element and suits
    functions with fewer inputs than outputs (tall Jacobians), reverse mode
    costs one pass per output element and suits the opposite (wide ones).
    Both give the same values.

    Args:
      function: A function of one or more arrays (or pytrees of arrays).
      mode: ``"forward"`` (what ``jax.jacfwd`` does) or ``"reverse"``
        (what ``jax.jacrev`` does).
      argnums: Index of the positional parameter to differentiate against,
        or a sequence of indices to get one Jacobian per index, in order.
      has_aux: Whether ``function`` returns a pair ``(output, aux)`` whose
        second item is carried through without being differentiated.

    Returns:
      A function with the same parameters as ``function`` that returns the
      Jacobian, or ``(jacobian, aux)`` with ``has_aux``. It keeps the name
      and docstring of ``function``.

    Raises:
      TypeError: If ``function`` is not callable, ``mode`` is not a str,
        ``has_aux`` is not a bool, or ``argnums`` (or one of its items) is a
        bool or not an integer.
      ValueError: If ``mode`` is another string, or ``argnums`` is empty,
        negative, repeats an index, or names a positional parameter that
        ``function`` does not have.

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
      function: A scalar-valued function of one or more arrays (or pytrees
        of arrays).
      argnums: Index of the positional parameter to differentiate against,
        or a sequence of indices to get the blocks of second derivatives for
        every pair of them.

    Returns:
      A function with the same parameters as ``function`` that returns the
      matrix of second derivatives, computed as ``jax.hessian`` does. It keeps
      the name and docstring of ``function``.

    Raises:
      TypeError: If ``function`` is not callable, or ``argnums`` (or one of
        its items) is a bool or not an integer.
      ValueError: If ``argnums`` is empty, negative, repeats an index, or
        names a positional parameter that ``function`` does not have.

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
    # A thin wrapper, rather than renaming JAX's own function object in place,
    # keeps tinax independent of how each JAX release builds its transforms.
    @functools.wraps(function)
    def named(*args: P.args, **kwargs: P.kwargs) -> R:
        return transformed(*args, **kwargs)

    return named
