"""Array operations where jax.numpy and jax.nn fail silently."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax.typing import DTypeLike

from tinax._core import validation
from tinax._core._compat02 import DTypeEncodingError
from tinax._core.shapes import devices_of, is_extended_dtype, require_fits

__all__ = ["is_value_preserving_cast", "one_hot", "safe_astype", "stack_batch"]


def _require_dtype(value: object, name: str) -> np.dtype[Any]:
    """Resolves a dtype-like to a NumPy dtype JAX can hold, else a :class:`TypeAndValueError`.

    Both types, since tinax 0.2 passed on NumPy's ``ValueError`` for some such dtypes, ``TypeError`` for others.
    """
    expected = "a numeric or bool dtype"
    if value is None or isinstance(value, bool):
        validation.fail_type_and_value(name, expected, value)
    try:
        extended = is_extended_dtype(value)
        dtype: np.dtype[Any] | None = None if extended else np.dtype(value)  # type: ignore[call-overload]
    except UnicodeEncodeError as error:
        raise DTypeEncodingError(validation.expectation_message(name, expected, value), error) from error
    except Exception as error:
        # Refuse whatever is not a dtype, however NumPy says so (TypeError, ValueError, ...).
        raise validation.TypeAndValueError(validation.expectation_message(name, expected, value)) from error
    if dtype is None:
        validation.fail_type_and_value(name, expected + " (extended dtypes such as PRNG keys cannot be cast to)", value)
    if dtype.hasobject or dtype.kind in {"U", "S", "M", "m"} or (dtype.kind == "V" and not _is_jax_numeric(dtype)):
        validation.fail_type_and_value(name, expected, value)
    if not dtype.isnative:
        validation.fail_type_and_value(name, expected + " in native byte order", value)
    return dtype


def _is_jax_numeric(dtype: np.dtype[Any]) -> bool:
    # ml_dtypes types (bfloat16, float8_*, int4) report NumPy kind "V".
    return bool(jnp.issubdtype(dtype, jnp.number) or jnp.issubdtype(dtype, jnp.bool_))


def _canonical(dtype: np.dtype[Any], name: str) -> np.dtype[Any]:
    canonical = np.dtype(jax.dtypes.canonicalize_dtype(dtype))
    if canonical != dtype:
        raise ValueError(
            f"{name} must be a dtype JAX can hold in this configuration, got {dtype} which would silently "
            f"become {canonical} (enable jax_enable_x64 for 64-bit types)"
        )
    return canonical


def _default_float() -> np.dtype[Any]:
    """JAX's default float in this configuration: float32, or float64 with x64."""
    return np.dtype(jax.dtypes.canonicalize_dtype(np.float64))


def _finfo(dtype: np.dtype[Any]) -> Any:
    # ml_dtypes' iinfo/finfo also understand int4, bfloat16 and the float8 types.
    return ml_dtypes.finfo(dtype)  # type: ignore[no-untyped-call]


def _integer_bounds(dtype: np.dtype[Any]) -> tuple[int, int]:
    info = ml_dtypes.iinfo(dtype)  # type: ignore[no-untyped-call]
    return int(info.min), int(info.max)


def _float_preserves(source: np.dtype[Any], target: np.dtype[Any]) -> bool:
    source_info, target_info = _finfo(source), _finfo(target)
    return (
        int(target_info.nmant) >= int(source_info.nmant)
        and float(target_info.max) >= float(source_info.max)
        and float(target_info.min) <= float(source_info.min)
        and float(target_info.smallest_subnormal) <= float(source_info.smallest_subnormal)
    )


def _component(dtype: np.dtype[Any]) -> np.dtype[Any]:
    return np.dtype(np.float32 if dtype == np.complex64 else np.float64)


def is_value_preserving_cast(source: DTypeLike, target: DTypeLike) -> bool:
    """Whether every ``source`` value is exact in ``target``, from dtypes alone (same under ``jit``).

    Rules are in docs/guide/arrays.md, "Casts and encodings that refuse to lose data".
    """
    source_dtype, target_dtype = np.dtype(source), np.dtype(target)
    if source_dtype == target_dtype or jnp.issubdtype(source_dtype, jnp.bool_):
        return True
    if jnp.issubdtype(target_dtype, jnp.bool_):
        return False
    if jnp.issubdtype(source_dtype, jnp.complexfloating):
        return bool(jnp.issubdtype(target_dtype, jnp.complexfloating)) and _float_preserves(
            _component(source_dtype), _component(target_dtype)
        )
    if jnp.issubdtype(target_dtype, jnp.complexfloating):
        target_dtype = _component(target_dtype)
    if jnp.issubdtype(source_dtype, jnp.integer):
        if jnp.issubdtype(target_dtype, jnp.integer):
            source_low, source_high = _integer_bounds(source_dtype)
            target_low, target_high = _integer_bounds(target_dtype)
            return target_low <= source_low and source_high <= target_high
        info = _finfo(target_dtype)
        low, high = _integer_bounds(source_dtype)
        if low < 0 and float(info.min) >= 0:
            return False
        return max(abs(low) - 1, high).bit_length() <= int(info.nmant) + 1
    if jnp.issubdtype(target_dtype, jnp.integer):
        return False
    return _float_preserves(source_dtype, target_dtype)


def safe_astype(array: jax.Array, dtype: DTypeLike, *, allow_lossy: bool = False) -> jax.Array:
    """Casts an array, refusing casts that can change values unless asked.

    ``jnp.astype`` wraps, truncates and rounds silently (int32 300 becomes int8 44). Here a cast
    that is not value-preserving for every value of the source dtype needs ``allow_lossy=True``.
    The decision uses dtypes only, so it works on traced values inside ``jit``.

    Args:
      array: A ``jax.Array``, concrete or traced.
      dtype: The target dtype, representable in the current JAX configuration (64-bit types need
        ``jax_enable_x64``). None means the default float: float32, or float64 with x64.
      allow_lossy: Whether a cast that may change values is acceptable; a lossy complex-to-real
        cast keeps the real part.

    Returns:
      The cast array.

    Raises:
      TypeError: If ``array`` is not a ``jax.Array``, or an argument is unusable (for ``dtype``, also ``ValueError``).
      ValueError: If the cast is lossy without ``allow_lossy``, or JAX's configuration would narrow the target dtype.

    Examples:
      >>> import jax.numpy as jnp
      >>> from tinax.array import safe_astype
      >>> safe_astype(jnp.array([1, 2], jnp.int8), jnp.int32).tolist()
      [1, 2]
      >>> safe_astype(jnp.array([300], jnp.int32), jnp.int8)
      Traceback (most recent call last):
      ...
      ValueError: casting int32 to int8 can change values ...
      >>> safe_astype(jnp.array([300], jnp.int32), jnp.int8, allow_lossy=True).tolist()
      [44]
    """
    validation.require_instance(array, "array", jax.Array, "a jax.Array")
    if is_extended_dtype(array.dtype):
        validation.fail_type("array", "an array with a numeric or bool dtype", array)
    validation.require_bool(allow_lossy, "allow_lossy")
    requested: object = dtype  # DTypeLike leaves None out, but callers of tinax 0.2 pass it.
    # As in NumPy and tinax 0.2, None is the default float; the cast is checked as any other.
    target = _default_float() if requested is None else _canonical(_require_dtype(dtype, "dtype"), "dtype")
    source = np.dtype(array.dtype)
    if not allow_lossy and not is_value_preserving_cast(source, target):
        raise ValueError(
            f"casting {source} to {target} can change values (narrowing, truncation, sign or precision loss); "
            "pass allow_lossy=True to accept that"
        )
    if jnp.issubdtype(source, jnp.complexfloating) and not jnp.issubdtype(target, jnp.complexfloating):
        # Upstream is deprecating the implicit form; keep the documented meaning.
        return jnp.real(array).astype(target)
    return array.astype(target)


def one_hot(indices: jax.Array, *, num_classes: int, dtype: DTypeLike | None = None) -> jax.Array:
    """Encodes integer class indices as one-hot vectors.

    An index outside ``[0, num_classes - 1]`` gives an all-zero row, as in ``jax.nn.one_hot`` and
    tinax 0.2, eagerly and under ``jit``; the padding index -1 encodes as "no class".

    Args:
      indices: Integer class indices (a ``jax.Array`` or ``numpy.ndarray``).
      num_classes: The number of classes, at least 1.
      dtype: The dtype of the result, or None for JAX's default float.

    Returns:
      An array of shape ``indices.shape + (num_classes,)``.

    Raises:
      TypeError: If ``indices`` is not an integer array or an argument is unusable (for ``dtype``, also ``ValueError``).
      ValueError: If ``num_classes`` is below 1, or the result would not fit in memory.

    Examples:
      >>> import jax.numpy as jnp
      >>> from tinax.array import one_hot
      >>> one_hot(jnp.array([0, 2]), num_classes=3).tolist()
      [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
      >>> one_hot(jnp.array([-1, 3]), num_classes=3).tolist()  # padding: no class
      [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    """
    if not isinstance(indices, (jax.Array, np.ndarray)):
        validation.fail_type("indices", "an integer jax.Array or numpy.ndarray", indices)
    if is_extended_dtype(indices.dtype) or not jnp.issubdtype(indices.dtype, jnp.integer):
        validation.fail_type("indices", "an array with an integer dtype (not bool or float)", indices)
    # tinax 0.2 refused NumPy indices and a NumPy integer num_classes as the wrong type.
    widened = not isinstance(indices, jax.Array) or validation.is_non_python_int(num_classes)
    with validation.reported_as_both(widened):
        classes = validation.require_positive_int(num_classes, "num_classes")
        target = _default_float() if dtype is None else _canonical(_require_dtype(dtype, "dtype"), "dtype")
    require_fits(
        "num_classes", num_classes, shape=(*indices.shape, classes), dtype=target, devices=lambda: devices_of(indices)
    )
    return jax.nn.one_hot(indices, classes, dtype=target)


def stack_batch(arrays: Sequence[jax.Array], *, axis: int = 0) -> jax.Array:
    """Stacks same-typed examples into a batch along a new axis.

    ``jnp.stack`` promotes mixed dtypes silently; here every array must have the first's dtype and
    shape, and the error names the first that differs.

    Args:
      arrays: A non-empty sequence of ``jax.Array`` (concrete or traced).
      axis: Where the new batch axis goes, in ``[-(ndim + 1), ndim]``.

    Returns:
      The stacked array.

    Raises:
      TypeError: If ``arrays`` is not a sequence of ``jax.Array``, or ``axis`` is not an int.
      ValueError: If ``arrays`` is empty, dtypes or shapes differ, or ``axis`` is out of range.

    Examples:
      >>> import jax.numpy as jnp
      >>> from tinax.array import stack_batch
      >>> stack_batch([jnp.zeros(3), jnp.ones(3)]).shape
      (2, 3)
      >>> stack_batch([jnp.zeros(3), jnp.ones(3, jnp.int32)])
      Traceback (most recent call last):
      ...
      ValueError: arrays must share one dtype, got arrays[1] with dtype int32 but arrays[0] with dtype float32
    """
    items = validation.require_sequence(
        arrays,
        "arrays",
        item_check=lambda item, name: validation.require_instance(item, name, jax.Array, "a jax.Array"),
        non_empty=True,
        description="a sequence of jax.Array",
    )
    first = items[0]
    rank = first.ndim
    axis_text = f"in [{-(rank + 1)}, {rank}]"
    validation.require_int(axis, "axis", bounds_text=axis_text)  # Its kind first, as tinax 0.2 checked it.
    # tinax 0.2 refused a NumPy integer axis as the wrong type.
    with validation.reported_as_both(validation.is_non_python_int(axis)):
        for index, item in enumerate(items[1:], start=1):
            for field in ("dtype", "shape"):
                if getattr(item, field) != getattr(first, field):
                    raise ValueError(
                        f"arrays must share one {field}, got arrays[{index}] with {field} {getattr(item, field)} "
                        f"but arrays[0] with {field} {getattr(first, field)}"
                    )
    batch_axis = validation.require_int(axis, "axis", minimum=-(rank + 1), maximum=rank, bounds_text=axis_text)
    return jnp.stack(items, axis=batch_axis)
