"""tinax.jit budgets obey chex's switches, as tinax 0.2's chex-counted budgets did.

These tests need chex, which tinax never depends on; they are skipped where it
is not installed.
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Iterator

import jax.numpy as jnp
import numpy as np
import pytest

from tinax._core import _compat02
from tinax.jit import TraceBudgetExceededError, batched_jit, bounded_jit

chex = pytest.importorskip("chex")


@pytest.fixture(autouse=True)
def chex_enabled() -> Iterator[None]:
    chex.enable_asserts()
    yield
    chex.enable_asserts()


def test_chex_still_keeps_the_switches_where_tinax_reads_them():
    # If this fails, a chex release moved its private state: budgets then ignore
    # both switches (the fallback), and _compat02 must learn the new names.
    state = sys.modules[_compat02.CHEX_STATE_MODULE]
    assert isinstance(state.DISABLE_ASSERTIONS, bool)
    assert isinstance(state.TRACE_COUNTER, collections.Counter)
    chex.disable_asserts()
    assert _compat02.chex_asserts_disabled() is True
    chex.enable_asserts()
    assert _compat02.chex_asserts_disabled() is False
    before = _compat02.chex_counter_clears()
    chex.clear_trace_counter()
    assert _compat02.chex_counter_clears() == before + 1
    assert _compat02.chex_counter_clears() == before + 1


@pytest.mark.parametrize("wrap", [bounded_jit, batched_jit])
def test_chex_disable_asserts_lets_every_trace_through_and_they_still_count(wrap):
    wrapped = wrap(lambda x: x * 2, max_traces=1)
    chex.disable_asserts()
    for length in range(1, 4):
        np.testing.assert_array_equal(wrapped(jnp.ones((length, 2))), np.full((length, 2), 2.0))
    assert wrapped.trace_count == 3
    chex.enable_asserts()
    wrapped(jnp.ones((2, 2)))  # cached
    with pytest.raises(TraceBudgetExceededError):
        wrapped(jnp.ones((5, 2)))


def test_chex_clear_trace_counter_gives_every_budget_back():
    first = bounded_jit(lambda x: x + 1, max_traces=1)
    second = bounded_jit(lambda x: x - 1, max_traces=2)
    first(jnp.ones(1))
    second(jnp.ones(1))
    second(jnp.ones(2))
    chex.clear_trace_counter()
    first(jnp.ones(2))
    assert first.trace_count == 1
    second(jnp.ones(3))
    second(jnp.ones(4))
    assert second.trace_count == 2
    with pytest.raises(TraceBudgetExceededError):
        first(jnp.ones(3))
    with pytest.raises(TraceBudgetExceededError):
        second(jnp.ones(5))


def test_a_trace_over_budget_is_refused_again_once_chex_asserts_are_enabled():
    wrapped = bounded_jit(lambda x: x * 3, max_traces=1)
    wrapped(jnp.ones(1))
    with pytest.raises(TraceBudgetExceededError):
        wrapped(jnp.ones(2))
    chex.disable_asserts()
    wrapped(jnp.ones(2))
    chex.enable_asserts()
    with pytest.raises(TraceBudgetExceededError, match="max_traces=1"):
        wrapped(jnp.ones(3))
