"""Tensor manifests: which tensors to take from a weights file, under which names, in which form.

docs/guide/weights.md, section "Renaming and checking with a manifest", shows them in use.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tinax._core import validation
from tinax._weights._safetensors._dtypes import SafetensorsDtype

__all__ = ["TensorManifest", "TensorRule"]

_DTYPE_EXPECTATION = "None or a numpy.dtype (or a type or name that numpy.dtype accepts)"


@dataclasses.dataclass(frozen=True)
class TensorRule:
    """How one source tensor becomes one destination tensor.

    The expectations describe the tensor after ``transform`` and are compared
    exactly: a ``float32`` tensor does not meet ``expected_dtype=np.float16``, and
    nothing is cast behind the caller's back (put a cast in ``transform``).

    Attributes:
      source_name: The tensor's name in the source (a safetensors file, say).
      destination_name: The name it gets in the result.
      transform: A function from the source array to the destination
        ``numpy.ndarray`` (a transpose, a reshape, a cast), or None to take the
        source array as it is.
      expected_shape: The destination shape, or None not to check it; any
        sequence of non-negative ints, stored as a tuple.
      expected_dtype: The destination dtype, or None not to check it; anything
        ``numpy.dtype`` accepts, or a safetensors dtype from a :class:`TensorInfo`,
        stored as a ``numpy.dtype``.

    Raises:
      TypeError: If a name is not a str, ``transform`` not callable, or an expected shape or dtype has the wrong type.
      ValueError: If a name is empty or an extent of ``expected_shape`` is negative.
    """

    source_name: str
    destination_name: str
    transform: Callable[[np.ndarray[Any, Any]], np.ndarray[Any, Any]] | None = None
    expected_shape: tuple[int, ...] | None = None
    expected_dtype: np.dtype[Any] | None = None

    def __post_init__(self) -> None:
        validation.require_str(self.source_name, "source_name")
        validation.require_str(self.destination_name, "destination_name")
        if self.transform is not None:
            validation.require_callable(self.transform, "transform")
        if self.expected_shape is not None:
            # Not tinax._core.shapes.require_shape: importing it imports jax, which tinax.weights never needs.
            shape = validation.require_sequence(
                self.expected_shape,
                "expected_shape",
                item_check=validation.require_non_negative_int,
                description="None or a sequence of ints",
            )
            object.__setattr__(self, "expected_shape", shape)
        if self.expected_dtype is not None:
            object.__setattr__(self, "expected_dtype", _require_dtype(self.expected_dtype))

    def _label(self) -> str:
        return f"{self.source_name!r} -> {self.destination_name!r}"


def _require_dtype(value: object) -> np.dtype[Any]:
    if isinstance(value, bool):  # numpy reads True as the bool dtype; a flag here is a mistake.
        validation.fail_type("expected_dtype", _DTYPE_EXPECTATION, value)
    if isinstance(value, SafetensorsDtype):
        # A safetensors name is a str, which numpy would misread ("U8" as text).
        if value.numpy_dtype is None:
            validation.fail_type("expected_dtype", _DTYPE_EXPECTATION + " (not a packed sub-byte type)", value)
        return value.numpy_dtype
    try:
        return np.dtype(value)  # type: ignore[call-overload, no-any-return]
    # Malformed descriptions make NumPy raise ValueError or even SyntaxError ("f4,,").
    except (TypeError, ValueError, SyntaxError, OverflowError, RecursionError) as error:
        raise TypeError(validation.expectation_message("expected_dtype", _DTYPE_EXPECTATION, value)) from error


def _require_rule(value: object, name: str) -> TensorRule:
    return validation.require_instance(value, name, TensorRule, "a TensorRule")


@dataclasses.dataclass(frozen=True)
class TensorManifest:
    """A set of :class:`TensorRule`, checked together.

    Attributes:
      rules: The rules, stored as a tuple (none describes a checkpoint without
        tensors). No two share a source name or a destination name, though one
        name may be the source of one rule and the destination of another.

    Raises:
      TypeError: If ``rules`` is not a sequence (a str included) or an item is not a :class:`TensorRule`.
      ValueError: If two rules share a source name or a destination name.
    """

    rules: Sequence[TensorRule]

    def __post_init__(self) -> None:
        rules = validation.require_sequence(
            self.rules, "rules", item_check=_require_rule, description="a sequence of TensorRule"
        )
        validation.require_unique((rule.source_name for rule in rules), "the source names of rules")
        validation.require_unique((rule.destination_name for rule in rules), "the destination names of rules")
        object.__setattr__(self, "rules", rules)

    @property
    def source_names(self) -> tuple[str, ...]:
        """The source names in rule order, for example for ``load_safetensors(names=...)``."""
        return tuple(rule.source_name for rule in self.rules)

    @property
    def destination_names(self) -> tuple[str, ...]:
        """The destination names in rule order: the keys that :meth:`apply` returns."""
        return tuple(rule.destination_name for rule in self.rules)

    def apply(self, tensors: Mapping[str, np.ndarray[Any, Any]]) -> dict[str, np.ndarray[Any, Any]]:
        """Applies every rule to ``tensors`` and checks every result.

        ``tensors`` must hold exactly the manifest's source names; every missing and
        unexpected name is reported in one error. Then each rule, in order, runs its
        transform and checks the result; the first failure stops the run, so later
        transforms never run on a checkpoint already known not to fit.

        Args:
          tensors: Source name to host array, such as the ``tensors`` of
            :func:`~tinax.weights.load_safetensors`'s result.

        Returns:
          Destination name to array, in rule order; a rule without a transform
          passes its source array itself, not a copy.

        Raises:
          TypeError: If ``tensors`` is not a ``str``-keyed mapping, or a source or result has the wrong type or dtype.
          ValueError: If source names are missing or unexpected, or a result has another shape than expected.
          Exception: Whatever a transform raises, unchanged, with a note naming the rule.
        """
        validation.require_str_mapping(tensors, "tensors")
        sources = self.source_names
        expected = set(sources)
        missing = sorted(name for name in sources if name not in tensors)
        unexpected = sorted(name for name in tensors if name not in expected)
        if missing or unexpected:
            raise ValueError(
                f"tensors must hold exactly the manifest's {len(sources)} source tensors; "
                f"missing={missing}, unexpected={unexpected}"
            )
        results: dict[str, np.ndarray[Any, Any]] = {}
        for rule in self.rules:
            source = validation.require_instance(
                tensors[rule.source_name], f"tensors[{rule.source_name!r}]", np.ndarray, "a numpy.ndarray"
            )
            results[rule.destination_name] = _apply_rule(rule, source)
        return results

    def load(
        self, path: str | os.PathLike[str], *, max_bytes: int, max_metadata_bytes: int = 0
    ) -> dict[str, np.ndarray[Any, Any]]:
        """Loads the manifest's source tensors from a safetensors file and applies the rules.

        Only the source tensors are read, under one byte budget; other tensors are
        left alone (to refuse them, use ``apply(load_safetensors(...).tensors)``).
        Missing sources are all reported in one error, as :meth:`apply` reports them.

        Args:
          path: The safetensors file.
          max_bytes: The largest total size of the source tensors' data, as for
            :func:`~tinax.weights.load_safetensors`.
          max_metadata_bytes: As for :func:`~tinax.weights.load_safetensors`; the
            default, 0, accepts no metadata.

        Returns:
          Destination name to array, in rule order, as :meth:`apply` returns.

        Raises:
          TypeError: If an argument has the wrong type, or a rule fails with a TypeError (see :meth:`apply`).
          ValueError: If ``max_bytes`` is too small, the file is bad, sources are missing, or a rule fails with one.
          FileNotFoundError: If no file exists at ``path``.
        """
        from tinax._weights._safetensors import _files

        validation.require_non_negative_int(max_bytes, "max_bytes")
        # The header says which sources exist, so apply() reports missing ones together.
        available = _files.inspect_safetensors(path, max_metadata_bytes=max_metadata_bytes).tensors
        present = [name for name in self.source_names if name in available]
        loaded = _files.load_safetensors(
            path, max_bytes=max_bytes, names=present, max_metadata_bytes=max_metadata_bytes
        )
        return self.apply(loaded.tensors)


def _apply_rule(rule: TensorRule, source: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Runs one rule's transform and checks the result against the rule."""
    if rule.transform is None:
        result: object = source
    else:
        try:
            result = rule.transform(source)
        except Exception as error:
            # Callers may expect the transform's own exception type; the note only says where it came from.
            error.add_note(f"raised by the transform of the tensor rule {rule._label()}")
            raise
    if not isinstance(result, np.ndarray):
        raise TypeError(
            f"the transform of the tensor rule {rule._label()} must return a numpy.ndarray, "
            f"got {validation.describe(result)}"
        )
    after = " after the transform" if rule.transform is not None else ""
    wrong_shape = rule.expected_shape is not None and result.shape != rule.expected_shape
    wrong_dtype = rule.expected_dtype is not None and result.dtype != rule.expected_dtype
    problems = []
    if wrong_shape:
        problems.append(f"shape {result.shape}{after}, expected {rule.expected_shape}")
    if wrong_dtype:
        problems.append(f"dtype {result.dtype}{after}, expected {rule.expected_dtype}")
    if problems:
        message = f"tensor rule {rule._label()} (source tensor {rule.source_name!r}): {'; '.join(problems)}"
        # A wrong shape is a bad value; a wrong dtype alone is the wrong kind of array.
        raise ValueError(message) if wrong_shape else TypeError(message)
    return result
