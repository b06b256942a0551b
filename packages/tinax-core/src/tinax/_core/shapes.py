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
from tinax._core._compat02 import TooLargeIntegerError
from tinax._core.jax_compat import RuntimeValueError, is_tracer

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

#: The largest byte size of one array that XLA can represent. XLA computes an
#: array's byte size as a signed 64-bit integer; a larger shape aborts the
#: process inside XLA ("overflow in static extent product") instead of
#: raising, so tinax refuses it before JAX sees it.
XLA_MAX_BYTES = 2**63 - 1


# The largest extent JAX's shape builders take; a larger one is refused
# there with a TypeError (it does not convert to a signed 64-bit integer).
_INT64_MAX = 2**63 - 1


# Results up to this size are never compared with device memory, so the
# common small calls do not look the memory up.
_ALWAYS_FITS_BYTES = 2**24

# No element that tinax sizes is larger (complex128 and rbg keys take 16), so
# up to this many elements the result fits without looking at the dtype.
_ALWAYS_FITS_ELEMENTS = _ALWAYS_FITS_BYTES // 256


def require_shape(value: object, name: str) -> tuple[int, ...]:
    """Checks a shape: a sequence of non-negative ints (bool refused).

    Args:
      value: The received value, for example ``(2, 3)`` or ``[4]``.
      name: The argument name for messages.

    Returns:
      The shape as a tuple of Python ints.

    Raises:
      TypeError: If the value is not a sequence or an extent is not an int.
      ValueError: If an extent is negative.
    """
    return validation.require_sequence(
        value,
        name,
        item_check=validation.require_non_negative_int,
        description="a sequence of ints",
    )


def is_extended_dtype(dtype: Any) -> bool:
    """Returns whether ``dtype`` is a JAX extended dtype (PRNG keys and the like).

    Extended dtypes have no NumPy equivalent: their element size is an
    implementation detail and the data cannot be viewed as plain bytes.
    """
    try:
        return bool(jax.numpy.issubdtype(dtype, jax.dtypes.extended))
    except TypeError:
        return False


def logical_nbytes(shape: tuple[int, ...], dtype: Any) -> int | None:
    """Returns the logical payload size of a value of ``shape`` and ``dtype``.

    Returns:
      ``prod(shape) * itemsize``, or None for extended dtypes, whose payload
      size is not part of their contract.
    """
    if is_extended_dtype(dtype):
        return None
    return int(math.prod(shape)) * int(np.dtype(dtype).itemsize)


def element_nbytes(dtype: Any) -> int:
    """Returns the bytes one element of ``dtype`` occupies on a device.

    For PRNG key dtypes this is the size of one key's underlying data (8
    bytes for the default threefry keys); other extended dtypes count as 1
    byte, the least any stored element takes.
    """
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
    """Returns this host's physical memory, or None where it is unknown."""
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    if pages <= 0 or page_size <= 0:
        return None
    return int(pages) * int(page_size)


@functools.lru_cache(maxsize=64)
def _device_memory_bytes(device: jax.Device) -> int | None:
    """Returns the memory an accelerator device reports, or None if it reports none."""
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
    """Returns the devices a result computed from ``value`` may live on.

    A concrete ``jax.Array`` gives its own devices. A traced value or a host
    array may end up on any device of the default backend, so it gives them
    all: the bound is then the largest any placement could have.
    """
    if isinstance(value, jax.Array) and not is_tracer(value):
        try:
            return tuple(value.sharding.device_set)
        except Exception:  # A deleted array still has a sharding; anything odd gets the default.
            pass
    return tuple(jax.devices())


def memory_bound(devices: Iterable[jax.Device]) -> tuple[int, str] | None:
    """Returns the combined memory of ``devices``, which no one array can exceed.

    An accelerator counts with the ``bytes_limit`` its ``memory_stats()``
    reports. CPU devices report no memory (``memory_stats()`` is None), so the
    CPU devices of one process count together as that host's physical
    memory (``os.sysconf``). Where any device's memory is unknown there is no
    bound, and only :data:`XLA_MAX_BYTES` applies.

    Args:
      devices: The devices a value would live on.

    Returns:
      ``(bytes, description)``, or None where the memory is unknown.
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
    """Refuses a count or size whose result the backend cannot hold.

    Two limits apply, checked by arithmetic before JAX is called: the
    result's byte size (``prod(shape)`` times :func:`element_nbytes`) must
    be at most :data:`XLA_MAX_BYTES`, beyond which XLA aborts the process;
    and it must be at most :func:`memory_bound` of ``devices`` where that is
    known, beyond which JAX would fail with an out-of-memory error.

    Args:
      name: The argument that sets the size, for the message.
      value: The argument's value, for the message.
      shape: The shape of the result that ``value`` asks for.
      dtype: The dtype of the result.
      devices: Called, only for a result too large to pass at a glance, to
        get the devices the result would live on (see :func:`devices_of`);
        None to check only the XLA limit (without looking up any device, so
        no backend starts).
      what: How to call the result in the message.

    Raises:
      ValueError: If the result would exceed either limit. The message names
        the shape, the bytes it would need and the limit. The error is also
        a ``jax.errors.JaxRuntimeError`` (a ``RuntimeError``), the type
        that JAX raised for such a result where it did not abort, and also
        a ``TypeError`` when ``value`` is a NumPy integer or an extent of
        ``shape`` is beyond the signed 64-bit range (as JAX refused those).
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
    error = TooLargeIntegerError if refused_as_type else RuntimeValueError
    if nbytes > XLA_MAX_BYTES:
        raise error(
            validation.expectation_message(name, "small enough for the result to be representable by XLA", value)
            + f": {needs}, more than XLA can represent in one array (2**63 - 1 bytes)"
        )
    if devices is None:
        return
    bound = memory_bound(devices())
    if bound is not None and nbytes > bound[0]:
        raise error(
            validation.expectation_message(name, "small enough for the result to fit in memory", value)
            + f": {needs}, more than {bound[1]}"
        )
