"""Counts and sizes that no backend can hold are refused before JAX sees them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tinax._core import shapes
from tinax.array import one_hot
from tinax.debug import observe_nonfinite
from tinax.jit import batched_jit
from tinax.random import split_key

# Each case runs in a child process: before the fix these values aborted the
# interpreter inside XLA (SIGABRT), which would take pytest down with it.
_ABSURD_CASES = {
    "split_key_typed_2**62": "split_key(jax.random.key(0), count=2**62)",
    "split_key_raw_2**61": "split_key(jax.random.PRNGKey(0), count=2**61)",
    "split_key_2**63-1": "split_key(jax.random.key(1), count=2**63 - 1)",
    "split_key_2**100": "split_key(jax.random.key(1), count=2**100)",
    "split_key_numpy_int": "split_key(jax.random.key(1), count=np.int64(2**62))",
    "split_key_jit_2**62": "jax.jit(lambda k: split_key(k, count=2**62)[1])(jax.random.key(2))",
    "split_key_2**40": "split_key(jax.random.key(0), count=2**40)",
    "one_hot_2**62": "one_hot(jnp.arange(3), num_classes=2**62)",
    "one_hot_numpy_2**61": "one_hot(np.arange(4), num_classes=2**61, dtype=jnp.int8)",
    "one_hot_jit_2**62": "jax.jit(lambda i: one_hot(i, num_classes=2**62))(jnp.arange(5))",
    "one_hot_2**40": "one_hot(jnp.arange(3), num_classes=2**40)",
    "one_hot_wide_indices": "one_hot(jnp.zeros((2**20,), jnp.int32), num_classes=2**44, dtype=jnp.bool_)",
    "batched_axis_size_2**62": "batched_jit(lambda: 1.0, in_axes=(), axis_size=2**62, max_traces=1)()",
    "batched_axis_size_2**61_pytree": (
        "batched_jit(lambda: {'a': jnp.ones(8)}, in_axes=(), axis_size=2**61, max_traces=1)()"
    ),
    "batched_axis_size_2**63": "batched_jit(lambda: 1.0, in_axes=(), axis_size=2**63, max_traces=1)",
    "batched_axis_size_2**40": "batched_jit(lambda: 1.0, in_axes=(), axis_size=2**40, max_traces=1)()",
    "observe_nonfinite_2**62": "observe_nonfinite(jnp.ones(3), callback=print, max_indices=2**62)",
    "observe_nonfinite_jit_2**61": (
        "jax.jit(lambda x: observe_nonfinite(x, callback=print, max_indices=2**61))(jnp.ones(3))"
    ),
}

_CHILD = textwrap.dedent(
    """
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    from tinax.array import one_hot
    from tinax.debug import observe_nonfinite
    from tinax.jit import batched_jit
    from tinax.random import split_key

    results = {}
    for name, code in json.loads(sys.argv[1]).items():
        try:
            value = eval(code)
            jax.block_until_ready(value)
        except BaseException as error:
            kinds = [kind.__module__ + "." + kind.__qualname__ for kind in type(error).__mro__]
            results[name] = [kinds, str(error).split(chr(10))[0]]
        else:
            results[name] = [["returned"], ""]
    print(json.dumps(results))
    """
)


@pytest.fixture(scope="module")
def absurd_results() -> dict[str, list[Any]]:
    completed = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(_ABSURD_CASES)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, f"the child died ({completed.returncode}): {completed.stderr[-2000:]}"
    results: dict[str, list[Any]] = json.loads(completed.stdout.strip().splitlines()[-1])
    return results


@pytest.mark.parametrize("case", sorted(_ABSURD_CASES))
def test_absurd_counts_raise_value_error_naming_bytes_and_limit(
    absurd_results: dict[str, list[Any]], case: str
) -> None:
    kinds, message = absurd_results[case]
    assert "builtins.ValueError" in kinds, (case, kinds, message)
    # What JAX raised for such sizes where it did not abort (and tinax 0.2 let through).
    assert "builtins.RuntimeError" in kinds, (case, kinds, message)
    assert any(kind.endswith(".JaxRuntimeError") for kind in kinds), (case, kinds)
    assert "must be small enough" in message
    assert "would need" in message
    assert "bytes" in message
    assert "more than XLA can represent" in message or "bytes of memory of the" in message


def test_xla_limit_message_names_argument_shape_and_bytes() -> None:
    with pytest.raises(ValueError, match=r"^count must be small enough") as caught:
        split_key(jax.random.key(0), count=2**62)
    message = str(caught.value)
    assert f"key<fry>[{2**62 + 1}]" in message
    assert f"{(2**62 + 1) * 8} bytes" in message
    assert "2**63 - 1 bytes" in message


@pytest.mark.parametrize(
    "call",
    [
        lambda: split_key(jax.random.key(0), count=2**62),
        lambda: one_hot(jnp.arange(3), num_classes=2**62),
        lambda: batched_jit(lambda: 1.0, in_axes=(), axis_size=2**63 - 1, max_traces=1)(),
    ],
)
def test_absurd_sizes_are_also_the_runtime_error_of_tinax_02(call: Any) -> None:
    # With tinax 0.2, JAX raised RuntimeError (JaxRuntimeError when out of memory) for these.
    with pytest.raises(ValueError, match="must be small enough") as caught:
        call()
    assert isinstance(caught.value, jax.errors.JaxRuntimeError)
    assert isinstance(caught.value, RuntimeError)
    assert not isinstance(caught.value, TypeError)


@pytest.mark.parametrize(
    "call",
    [
        lambda: split_key(jax.random.key(0), count=np.int64(2**62)),
        lambda: one_hot(jnp.arange(3), num_classes=np.int64(2**62)),
        lambda: batched_jit(lambda: 1.0, in_axes=(), axis_size=np.uint64(2**63), max_traces=1),
    ],
)
def test_absurd_numpy_integer_sizes_are_also_the_type_error_of_tinax_02(call: Any) -> None:
    # tinax 0.2 refused a NumPy integer size as the wrong type, whatever its value.
    with pytest.raises(ValueError, match="must be small enough") as caught:
        call()
    assert isinstance(caught.value, TypeError)
    assert isinstance(caught.value, jax.errors.JaxRuntimeError)


@pytest.mark.parametrize(
    "call",
    [
        lambda: one_hot(jnp.arange(3), num_classes=10**30),
        lambda: one_hot(jnp.arange(3), num_classes=2**63),
        lambda: observe_nonfinite(jnp.ones(3), callback=print, max_indices=10**30),
        lambda: split_key(jax.random.key(0), count=2**63),
        lambda: batched_jit(lambda: 1.0, in_axes=(), axis_size=2**63, max_traces=1),
    ],
)
def test_sizes_beyond_the_int64_range_are_also_the_type_error_of_tinax_02(call: Any) -> None:
    # JAX's shape builders refused an extent that does not fit a signed 64-bit integer as the wrong type.
    with pytest.raises(ValueError, match="must be small enough") as caught:
        call()
    assert isinstance(caught.value, TypeError)
    assert isinstance(caught.value, jax.errors.JaxRuntimeError)


@pytest.fixture
def small_host(monkeypatch: pytest.MonkeyPatch) -> int:
    """Pretends the host has 32 MiB of memory, so the memory bound is reachable cheaply."""
    limit = 2**25
    monkeypatch.setattr(shapes, "_host_memory_bytes", lambda: limit)
    return limit


def test_split_key_refuses_keys_beyond_host_memory(small_host: int) -> None:
    count = small_host // 8  # Plus the continuation key: 8 bytes over the bound.
    with pytest.raises(ValueError, match="fit in memory") as caught:
        split_key(jax.random.key(0), count=count)
    assert f"{(count + 1) * 8} bytes" in str(caught.value)
    assert f"the {small_host} bytes of memory of the 1 cpu device(s)" in str(caught.value)
    continuation, keys = split_key(jax.random.key(0), count=count - 1)
    assert keys.shape == (count - 1,)
    assert continuation.shape == ()


def test_split_key_of_raw_key_counts_its_uint32_words(small_host: int) -> None:
    with pytest.raises(ValueError, match=r"uint32\[4194305, 2\]"):
        split_key(jax.random.PRNGKey(0), count=2**22)


def test_one_hot_refuses_results_beyond_memory_of_indices_devices(small_host: int) -> None:
    indices = np.arange(4)
    with pytest.raises(ValueError, match=r"^num_classes must be small enough for the result to fit in memory"):
        one_hot(indices, num_classes=2**21 + 1)  # float32: 4 * (2**21 + 1) * 4 bytes > 2**25.
    assert one_hot(indices, num_classes=2**21 + 1, dtype=jnp.int8).shape == (4, 2**21 + 1)


def test_one_hot_bound_sums_the_devices_of_a_sharded_input(small_host: int) -> None:
    # All CPU devices of one process share the host's memory: 8 devices are no bigger than one.
    mesh = jax.make_mesh((8,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,))
    sharded = jax.device_put(jnp.arange(8), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x")))
    with pytest.raises(ValueError, match=r"the 33554432 bytes of memory of the 8 cpu device\(s\)"):
        one_hot(sharded, num_classes=2**20 + 1)


def test_batched_jit_refuses_outputs_beyond_memory_when_traced(small_host: int) -> None:
    batched = batched_jit(lambda x: {"wide": jnp.zeros(2**20, jnp.float32) + x}, max_traces=2)
    with pytest.raises(ValueError, match=r"batched output\['wide'\], float32\[9, 1048576\], would need 37748736 bytes"):
        batched(jnp.ones(9))
    assert batched(jnp.ones(7))["wide"].shape == (7, 2**20)


def test_batched_jit_under_a_mesh_bounds_outputs_by_the_mesh_devices(small_host: int) -> None:
    mesh = jax.make_mesh((8,), ("x",))
    batched = batched_jit(
        lambda: jnp.zeros(2**10, jnp.complex64), in_axes=(), axis_size=2**12 + 1, max_traces=1, mesh=mesh
    )
    with pytest.raises(ValueError, match=r"^axis_size must be small enough .* got 4097 \(int\).*8 cpu device\(s\)"):
        batched()


def test_observe_nonfinite_refuses_index_budgets_beyond_memory(small_host: int) -> None:
    with pytest.raises(ValueError, match=r"^max_indices must be small enough"):
        observe_nonfinite(jnp.array([1.0, jnp.nan]), callback=lambda *_: None, max_indices=2**23 + 1)
    # Integer arrays cannot hold NaN: nothing is computed, so nothing is refused.
    values = jnp.arange(3)
    assert observe_nonfinite(values, callback=lambda *_: None, max_indices=2**62) is values


def test_ordinary_sizes_are_unaffected() -> None:
    _, keys = split_key(jax.random.key(3), count=5)
    assert keys.shape == (5,)
    assert one_hot(jnp.array([0, 2]), num_classes=3).tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    assert batched_jit(lambda: jnp.int8(1), in_axes=(), axis_size=4, max_traces=1)().tolist() == [1, 1, 1, 1]


class _FakeDevice:
    def __init__(self, platform: str, stats: dict[str, Any] | None, process_index: int = 0) -> None:
        self.platform = platform
        self.device_kind = platform
        self.process_index = process_index
        self._stats = stats

    def memory_stats(self) -> dict[str, Any] | None:
        return self._stats


def test_memory_bound_sums_reported_accelerator_limits() -> None:
    devices = [_FakeDevice("gpu", {"bytes_limit": 1000}), _FakeDevice("gpu", {"bytes_limit": 24})]
    bound = shapes.memory_bound(devices)  # type: ignore[arg-type]
    assert bound is not None
    assert bound[0] == 1024
    assert "2 gpu device(s)" in bound[1]


def test_memory_bound_is_unknown_when_a_device_reports_nothing() -> None:
    assert shapes.memory_bound([_FakeDevice("gpu", {"bytes_limit": 1000}), _FakeDevice("gpu", None)]) is None  # type: ignore[list-item]
    assert shapes.memory_bound([]) is None


def test_memory_bound_counts_host_memory_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shapes, "_host_memory_bytes", lambda: 100)
    same_host = [_FakeDevice("cpu", None), _FakeDevice("cpu", None)]
    assert shapes.memory_bound(same_host) == (100, "the 100 bytes of memory of the 2 cpu device(s) it would live on")  # type: ignore[arg-type]
    two_hosts = [_FakeDevice("cpu", None, 0), _FakeDevice("cpu", None, 1)]
    assert shapes.memory_bound(two_hosts)[0] == 200  # type: ignore[arg-type,index]
    monkeypatch.setattr(shapes, "_host_memory_bytes", lambda: None)
    assert shapes.memory_bound(same_host) is None  # type: ignore[arg-type]


def test_without_memory_bound_only_the_xla_limit_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shapes, "memory_bound", lambda devices: None)
    shapes.require_fits("size", 2**40, shape=(2**40,), dtype=np.float32, devices=jax.devices)
    with pytest.raises(ValueError, match="more than XLA can represent"):
        shapes.require_fits("size", 2**61, shape=(2**61,), dtype=np.float32, devices=jax.devices)


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        (np.float32, 4),
        (np.bool_, 1),
        (jnp.bfloat16, 2),
        (jnp.int4, 1),
        (jax.dtypes.float0, 1),
        (jax.random.key(0).dtype, 8),
        (jax.random.key(0, impl="rbg").dtype, 16),
    ],
)
def test_element_nbytes(dtype: Any, expected: int) -> None:
    assert shapes.element_nbytes(dtype) == expected
