"""Conversions across the NumPy, JAX and DLPack boundary with explicit ownership."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Sharding

from tinax._core import validation
from tinax._core._compat02 import DLPackBufferError
from tinax._core.host import apply_copy_policy, require_host_array, require_unmasked
from tinax._core.jax_compat import RuntimeTypeAndValueError, RuntimeValueError, is_tracer, require_concrete
from tinax._core.shapes import is_extended_dtype

__all__ = ["from_dlpack", "from_numpy", "to_numpy"]

_DEVICE_EXPECTATION = "a jax.Device, a jax.sharding.Sharding or None"


def _require_placement(device: object) -> jax.Device | Sharding | None:
    if not (device is None or isinstance(device, (jax.Device, Sharding))):
        validation.fail_type("device", _DEVICE_EXPECTATION, device)
    return device


def from_numpy(array: np.ndarray, *, copy: bool, device: jax.Device | Sharding | None = None) -> jax.Array:
    """Moves a host NumPy array into JAX under a stated ownership policy.

    ``jax.device_put`` may alias the host buffer on CPU even when asked not to, so a later NumPy
    write would show through. This takes a private host snapshot first, so the result never
    changes afterwards. The transfer itself is asynchronous.

    Args:
      array: The host data. Object dtypes are refused; a ``numpy.ma.MaskedArray`` only without
        masked elements (its data is used).
      copy: True to snapshot now, so the result is independent of ``array``. False allows sharing
        in principle, but today the result is independent too, as in tinax 0.2.
      device: A device, a sharding (whose shape must divide the array), or None for the default.

    Returns:
      A ``jax.Array`` with ``array``'s shape and (canonicalized) dtype.

    Raises:
      TypeError: If ``array`` is not a ``numpy.ndarray`` or has an object dtype, or another argument's type is wrong.
      ValueError: If ``array`` has masked elements or JAX cannot place the data (JAX's own errors pass with a note).

    Examples:
      >>> import numpy as np
      >>> from tinax.array import from_numpy
      >>> host = np.arange(4, dtype=np.float32)
      >>> array = from_numpy(host, copy=True)
      >>> host[0] = 100.0  # the snapshot does not see later writes
      >>> array.tolist()
      [0.0, 1.0, 2.0, 3.0]
    """
    require_host_array(array, "array")
    validation.require_bool(copy, "copy")
    placement = _require_placement(device)
    # Snapshot for copy=False too: tinax 0.2 never shared CPU memory, and device_put
    # shares aligned buffers even with may_alias=False (jax#37830).
    source = apply_copy_policy(require_unmasked(array, "array", where="a jax.Array"), copy=True)
    try:
        placed: jax.Array = jax.device_put(source, placement, may_alias=False)
    except (ValueError, RuntimeError) as error:
        message = f"array {validation.describe(array)} cannot be placed on {placement}: {error}"
        if _is_specific(error):
            # JAX's own subclass (IndivisibleError, say), which tinax 0.2 let through.
            error.add_note(message)
            raise
        raise (RuntimeValueError if isinstance(error, RuntimeError) else ValueError)(message) from error
    return placed


def _is_specific(error: Exception) -> bool:
    """Whether ``error`` is a subclass a re-raised builtin type would hide; such errors keep their class."""
    return type(error) not in {TypeError, ValueError, RuntimeError, BufferError, jax.errors.JaxRuntimeError}


def to_numpy(array: jax.Array, *, writable: bool) -> np.ndarray:
    """Materializes a JAX array on the host, after its computation finishes.

    Args:
      array: A concrete, fully addressable ``jax.Array``.
      writable: False for a read-only view that may share JAX's host copy (no extra copy); True
        for an independent, writable copy the caller owns.

    Returns:
      A ``numpy.ndarray`` with the array's shape and dtype.

    Raises:
      TypeError: If ``array`` is not a ``jax.Array``, has an extended dtype or is traced, or ``writable`` is not a bool.
      ValueError: If the array is not fully addressable, or was deleted or donated (then also ``JaxRuntimeError``).

    Examples:
      >>> import jax.numpy as jnp
      >>> from tinax.array import to_numpy
      >>> view = to_numpy(jnp.arange(3), writable=False)
      >>> view.flags.writeable, view.tolist()
      (False, [0, 1, 2])
      >>> owned = to_numpy(jnp.arange(3), writable=True)
      >>> owned[0] = 7
      >>> owned.tolist()
      [7, 1, 2]
    """
    _require_concrete_array(array, "array")
    validation.require_bool(writable, "writable")
    if is_extended_dtype(array.dtype):
        validation.fail_type("array", "an array with a NumPy dtype (use jax.random.key_data for PRNG keys)", array)
    if not array.is_fully_addressable:
        raise ValueError(
            f"array must be fully addressable from this process to be materialized, got an array sharded "
            f"over {len(array.sharding.device_set)} devices of which only "
            f"{len(array.sharding.addressable_devices)} are local"
        )
    if array.is_deleted():
        raise RuntimeValueError(
            validation.expectation_message("array", "a live array (it was deleted or donated)", array)
        )
    if writable:
        return np.array(array, copy=True)
    host = np.asarray(array)
    # JAX may return a fresh, writable buffer; freeze it so both forms behave the same.
    host.flags.writeable = False
    return host


class _WatchedProducer:
    """DLPack stand-in that records what the producer raised, so that error passes back unchanged."""

    def __init__(self, producer: Any) -> None:
        self._producer = producer
        self.raised: BaseException | None = None

    def __dlpack_device__(self) -> Any:
        try:
            return self._producer.__dlpack_device__()
        except BaseException as error:
            self.raised = error
            raise

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._producer.__dlpack__(*args, **kwargs)
        except BaseException as error:
            self.raised = error
            raise

    def __repr__(self) -> str:
        return repr(self._producer)


def _is_tensorflow_tensor(value: object) -> bool:
    # JAX omits the stream argument for TF eager tensors only if it sees their own type.
    kind = type(value)
    return kind.__qualname__ == "EagerTensor" and kind.__module__.endswith("tensorflow.python.framework.ops")


def from_dlpack(array: object, *, copy: bool | None = None, device: jax.Device | Sharding | None = None) -> jax.Array:
    """Imports any DLPack producer into JAX.

    Args:
      array: An object implementing ``__dlpack__`` and ``__dlpack_device__`` (NumPy, JAX,
        PyTorch, ...).
      copy: True for storage independent of the producer, complete when the call returns (also
        for producers JAX would share); False to require sharing; None to let JAX decide.
      device: Where the result should live, or None for the producer's device.

    Returns:
      A ``jax.Array`` with the producer's shape and dtype.

    Raises:
      TypeError: If ``array`` is no DLPack producer, an argument's type is wrong, or JAX does not support its device.
      ValueError: If JAX cannot import as asked, or ``array`` is a deleted ``jax.Array`` (then also a ``TypeError``).
      Exception: Whatever the producer's ``__dlpack__`` or ``__dlpack_device__`` raises, unchanged.

    Examples:
      >>> import numpy as np
      >>> from tinax.array import from_dlpack
      >>> host = np.arange(3, dtype=np.int32)
      >>> array = from_dlpack(host, copy=True)
      >>> host[:] = 0  # the copy is complete when from_dlpack returns
      >>> array.tolist()
      [0, 1, 2]
    """
    if not (hasattr(array, "__dlpack__") and hasattr(array, "__dlpack_device__")):
        validation.fail_type("array", "an object implementing __dlpack__ and __dlpack_device__", array)
    if copy is not None:
        validation.require_bool(copy, "copy")
    placement = _require_placement(device)
    if isinstance(array, jax.Array) and not is_tracer(array) and array.is_deleted():
        raise RuntimeTypeAndValueError(
            validation.expectation_message("array", "a live array (it was deleted or donated)", array)
        )
    watched = None if _is_tensorflow_tensor(array) else _WatchedProducer(array)
    try:
        imported: jax.Array = jax.dlpack.from_dlpack(
            array if watched is None else watched, device=placement, copy=None if copy else copy
        )
        if not copy:
            return imported
        independent = jnp.copy(imported)
        independent.block_until_ready()
    except Exception as error:
        translated = None if watched is not None and error is watched.raised else _import_error(error, array, copy)
        if translated is None:
            raise  # The producer's own failure (or one we have no better word for) as it is.
        raise translated from error
    return independent


def _import_error(error: Exception, array: object, copy: bool | None) -> Exception | None:
    """The exception to raise for a failure of JAX's importer, or None to let it through (with a note)."""
    if _is_specific(error):
        if isinstance(error, (TypeError, ValueError, RuntimeError, BufferError)):
            error.add_note(f"array {validation.describe(array)} cannot be imported through DLPack with copy={copy}")
        return None
    if isinstance(error, TypeError):
        return TypeError(f"array {validation.describe(array)} cannot be imported through DLPack: {error}")
    message = f"array {validation.describe(array)} cannot be imported through DLPack with copy={copy}: {error}"
    translations = ((RuntimeError, RuntimeValueError), (BufferError, DLPackBufferError), (ValueError, ValueError))
    return next((translated(message) for raised, translated in translations if isinstance(error, raised)), None)


def _require_concrete_array(array: object, name: str) -> Any:
    validation.require_instance(array, name, jax.Array, "a jax.Array")
    require_concrete(array, name, "a concrete jax.Array, not a traced value")
    return array
