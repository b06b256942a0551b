"""Shape and dtype helpers shared by the tinax distributions."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterable
from typing import Any

import jax
import numpy as np

from tinax._core import validation
from tinax._core.jax_compat import RuntimeTypeAndValueError, RuntimeValueError, is_tracer

__all__ = [
    "XLA_MAX_BYTES",
    "devices_of",
    "element_nbytes",
    "is_extended_dtype",
    "logical_nbytes",
    "memory_bound",
    "require_fits",
    "require_shape",
]

#: Largest byte size of one XLA array (int64); beyond it XLA aborts the process instead of raising.
XLA_MAX_BYTES = 2**63 - 1


# The largest extent JAX's shape builders take; beyond it they raise TypeError.
_INT64_MAX = 2**63 - 1


# Results up to this size skip the device memory lookup.
_ALWAYS_FITS_BYTES = 2**24

# No element tinax sizes exceeds 256 bytes, so this many elements fit whatever the dtype.
_ALWAYS_FITS_ELEMENTS = _ALWAYS_FITS_BYTES // 256


def require_shape(value: object, name: str) -> tuple[int, ...]:
    """Checks a shape: a sequence of non-negative ints (bool refused); returns a tuple."""
    return validation.require_sequence(
        value,
        name,
        item_check=validation.require_non_negative_int,
        description="a sequence of ints",
    )


def is_extended_dtype(dtype: Any) -> bool:
    """Whether ``dtype`` is a JAX extended dtype (PRNG keys...), which has no NumPy byte view."""
    try:
        return bool(jax.numpy.issubdtype(dtype, jax.dtypes.extended))
    except TypeError:
        return False


def logical_nbytes(shape: tuple[int, ...], dtype: Any) -> int | None:
    """``prod(shape) * itemsize``, or None for extended dtypes, whose size is not part of their contract."""
    if is_extended_dtype(dtype):
        return None
    return int(math.prod(shape)) * int(np.dtype(dtype).itemsize)


def element_nbytes(dtype: Any) -> int:
    """Device bytes per element: a PRNG key's data size (8 for threefry), 1 for other extended dtypes."""
    if is_extended_dtype(dtype):
        return _extended_element_nbytes(dtype)
    return max(1, int(np.dtype(dtype).itemsize))


@functools.lru_cache(maxsize=32)
def _extended_element_nbytes(dtype: Any) -> int:
    # Tracing key_data costs a little; split_key asks on every call.
    try:
        data = jax.eval_shape(jax.random.key_data, jax.ShapeDtypeStruct((), dtype))  # type: ignore[no-untyped-call]
    except Exception:  # Not a PRNG key dtype: fall back to the least size.
        return 1
    return max(1, int(math.prod(data.shape)) * int(np.dtype(data.dtype).itemsize))


def _host_memory_bytes() -> int | None:
    """This host's physical memory, or None where unknown."""
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    if pages <= 0 or page_size <= 0:
        return None
    return int(pages) * int(page_size)


@functools.lru_cache(maxsize=64)
def _device_memory_bytes(device: jax.Device) -> int | None:
    """The ``bytes_limit`` an accelerator reports, or None."""
    candidates = [device]
    if device.process_index != jax.process_index():
        # A remote device cannot be asked; a local one of the same kind answers for it.
        candidates = [
            local for local in jax.local_devices(backend=device.platform) if local.device_kind == device.device_kind
        ]
    for candidate in candidates:
        try:
            stats = candidate.memory_stats()
        except Exception:  # Backends without the query raise instead of returning None.
            stats = None
        if stats and int(stats.get("bytes_limit", 0)) > 0:
            return int(stats["bytes_limit"])
    return None


def devices_of(value: object) -> tuple[jax.Device, ...]:
    """Devices a result computed from ``value`` may live on: its own if concrete, else all default ones."""
    if isinstance(value, jax.Array) and not is_tracer(value):
        try:
            return tuple(value.sharding.device_set)
        except Exception:  # A deleted array still has a sharding; anything odd gets the default.
            pass
    return tuple(jax.devices())


def memory_bound(devices: Iterable[jax.Device]) -> tuple[int, str] | None:
    """``(bytes, description)`` of the combined memory of ``devices``, or None where any is unknown.

    Accelerators count their ``bytes_limit``; the CPU devices of one process count as the host's memory.
    """
    listed = list(dict.fromkeys(devices))
    if not listed:
        return None
    total = 0
    cpu_processes: set[int] = set()
    for device in listed:
        if device.platform == "cpu":
            cpu_processes.add(device.process_index)
            continue
        limit = _device_memory_bytes(device)
        if limit is None:
            return None
        total += limit
    if cpu_processes:
        host = _host_memory_bytes()
        if host is None:
            return None
        total += host * len(cpu_processes)
    platforms = ", ".join(sorted({device.platform for device in listed}))
    return total, f"the {total} bytes of memory of the {len(listed)} {platforms} device(s) it would live on"


def require_fits(
    name: str,
    value: object,
    *,
    shape: tuple[int, ...],
    dtype: Any,
    devices: Callable[[], Iterable[jax.Device]] | None,
    what: str = "the result",
) -> None:
    """Refuses a size whose result exceeds :data:`XLA_MAX_BYTES` (XLA would abort) or :func:`memory_bound`.

    Checked by arithmetic before JAX runs; ``devices`` is called only for large results (None: XLA limit
    only, no backend start). Raises a ValueError that is also ``JaxRuntimeError`` (JAX's type there),
    and also TypeError for a NumPy-integer ``value`` or an extent beyond int64, as JAX refused those.
    """
    count = int(math.prod(shape))
    if count <= _ALWAYS_FITS_ELEMENTS:
        return
    nbytes = count * element_nbytes(dtype)
    if nbytes <= _ALWAYS_FITS_BYTES:
        return
    extents = ", ".join(str(extent) for extent in shape)
    dtype_text = str(dtype) if is_extended_dtype(dtype) else str(np.dtype(dtype))
    needs = f"{what}, {dtype_text}[{extents}], would need {nbytes} bytes"
    refused_as_type = isinstance(value, np.integer) or any(extent > _INT64_MAX for extent in shape)
    error = RuntimeTypeAndValueError if refused_as_type else RuntimeValueError
    if nbytes > XLA_MAX_BYTES:
        expected, limit = "be representable by XLA", "XLA can represent in one array (2**63 - 1 bytes)"
    else:
        bound = None if devices is None else memory_bound(devices())
        if bound is None or nbytes <= bound[0]:
            return
        expected, limit = "fit in memory", bound[1]
    raise error(
        validation.expectation_message(name, f"small enough for the result to {expected}", value)
        + f": {needs}, more than {limit}"
    )
