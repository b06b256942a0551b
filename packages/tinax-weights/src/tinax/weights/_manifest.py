"""Tensor manifests: which tensors to take from a weights file, under which names, in which form.

A manifest states the whole mapping from a checkpoint's tensor names to a
model's, with the shape and dtype each tensor must end up with. Applying it
checks every rule and reports every problem in one error, so a mismatched
checkpoint is diagnosed in one run instead of one tensor at a time.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tinax._core import validation

__all__ = ["TensorManifest", "TensorRule"]

_DTYPE_EXPECTATION = "None or a numpy.dtype (or a type or name that numpy.dtype accepts)"


@dataclasses.dataclass(frozen=True)
class TensorRule:
    """How one source tensor becomes one destination tensor.

    The expectations describe the destination tensor, that is the source
    tensor after ``transform``. Both are compared exactly: a ``float32``
    tensor does not meet ``expected_dtype=np.float16``, and no value is ever
    cast behind the caller's back; put a cast in ``transform`` to have one.

    Attributes:
      source_name: The tensor's name in the source (a safetensors file, say).
      destination_name: The name it gets in the result.
      transform: A function from the source array to the destination array
        (a transpose, a reshape, a cast), or None to take the source array
        as it is. It must return a ``numpy.ndarray``.
      expected_shape: The destination shape, or None not to check it. Any
        sequence of non-negative ints is accepted and stored as a tuple.
      expected_dtype: The destination dtype, or None not to check it. Any
        value ``numpy.dtype`` accepts (``np.float32``,
        ``ml_dtypes.bfloat16``, ``"int8"``) is accepted and stored as a
        ``numpy.dtype``.

    Raises:
      TypeError: If a name is not a str, ``transform`` is not callable,
        ``expected_shape`` is not a sequence of ints (bools refused) or
        ``expected_dtype`` is not a dtype.
      ValueError: If a name is empty or an extent of ``expected_shape`` is
        negative.
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
            # tinax._core.shapes.require_shape performs this same check, but
            # importing it imports jax, which tinax.weights never needs.
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
    try:
        return np.dtype(value)  # type: ignore[call-overload, no-any-return]
    except TypeError as error:
        raise TypeError(validation.expectation_message("expected_dtype", _DTYPE_EXPECTATION, value)) from error


def _require_rule(value: object, name: str) -> TensorRule:
    return validation.require_instance(value, name, TensorRule, "a TensorRule")


@dataclasses.dataclass(frozen=True)
class TensorManifest:
    """A set of :class:`TensorRule`, checked together.

    Attributes:
      rules: The rules, stored as a tuple. No two rules share a source name
        or a destination name (one name may be the source of one rule and the
        destination of another, as in a swap).

    Raises:
      TypeError: If ``rules`` is not a sequence (a str included) or an item is
        not a :class:`TensorRule`.
      ValueError: If ``rules`` is empty, or two rules share a source name or a
        destination name.
    """

    rules: Sequence[TensorRule]

    def __post_init__(self) -> None:
        rules = validation.require_sequence(
            self.rules, "rules", item_check=_require_rule, non_empty=True, description="a sequence of TensorRule"
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

        Each rule takes its source tensor, runs its transform and checks the
        result's shape and dtype. Every rule is tried even after one fails, and
        all problems are reported together. Tensors that no rule names are
        ignored.

        Args:
          tensors: Source name to host array, for example the ``tensors`` of
            :func:`~tinax.weights.load_safetensors`'s result.

        Returns:
          Destination name to array, in rule order. A rule without a transform
          passes its source array through itself, not a copy.

        Raises:
          TypeError: If ``tensors`` is not a mapping with ``str`` keys, or a
            tensor that a rule names is not a ``numpy.ndarray``.
          ValueError: If any rule fails: its source is missing, its transform
            raises or returns something other than a ``numpy.ndarray``, or
            the result has another shape or dtype than the rule expects. The
            message lists every failed rule; the exceptions that transforms
            raised are chained as an ``ExceptionGroup``.
        """
        validation.require_str_mapping(tensors, "tensors")
        for rule in self.rules:
            if rule.source_name in tensors:
                validation.require_instance(
                    tensors[rule.source_name], f"tensors[{rule.source_name!r}]", np.ndarray, "a numpy.ndarray"
                )
        results: dict[str, np.ndarray[Any, Any]] = {}
        problems: list[str] = []
        raised: list[Exception] = []
        for rule in self.rules:
            if rule.source_name not in tensors:
                problems.append(f"{rule._label()}: the source tensor is missing")
                continue
            tensor: object = tensors[rule.source_name]
            if rule.transform is not None:
                try:
                    tensor = rule.transform(tensors[rule.source_name])
                except Exception as error:  # Collected: every rule is tried and reported.
                    raised.append(error)
                    problems.append(f"{rule._label()}: the transform raised {type(error).__name__}: {error}")
                    continue
            rule_problems = _result_problems(rule, tensor)
            if rule_problems:
                problems.extend(f"{rule._label()}: {problem}" for problem in rule_problems)
                continue
            results[rule.destination_name] = tensor  # type: ignore[assignment]
        if problems:
            listed = "\n".join(f"  - {problem}" for problem in problems)
            failed = len(self.rules) - len(results)
            cause = ExceptionGroup("exceptions raised by transforms", raised) if raised else None
            raise ValueError(f"{failed} of {len(self.rules)} tensor rules failed:\n{listed}") from cause
        return results

    def load(self, path: str | os.PathLike[str], *, max_bytes: int) -> dict[str, np.ndarray[Any, Any]]:
        """Loads the manifest's source tensors from a safetensors file and applies the rules.

        Only the source tensors are read, under one byte budget. A source
        missing from the file is reported together with every other problem,
        as :meth:`apply` reports them, rather than on its own.

        Args:
          path: The safetensors file.
          max_bytes: The largest total size, in bytes, of the source tensors'
            data, as for :func:`~tinax.weights.load_safetensors`.

        Returns:
          Destination name to array, in rule order, as :meth:`apply` returns.

        Raises:
          TypeError: If ``path`` is not a path or ``max_bytes`` is not an int
            (bool included).
          ValueError: If ``max_bytes`` is negative or smaller than the source
            tensors' data, the file is not a valid safetensors file, or any
            rule fails (see :meth:`apply`).
          FileNotFoundError: If no file exists at ``path``.
        """
        from tinax.weights import _safetensors

        validation.require_non_negative_int(max_bytes, "max_bytes")
        # The header says which sources exist, so that a missing one joins the
        # full report from apply() instead of stopping the load on its own.
        available = _safetensors.inspect_safetensors(path).tensors
        present = [name for name in self.source_names if name in available]
        loaded = _safetensors.load_safetensors(path, max_bytes=max_bytes, names=present)
        return self.apply(loaded.tensors)


def _result_problems(rule: TensorRule, tensor: object) -> list[str]:
    if not isinstance(tensor, np.ndarray):
        return [f"the transform returned {validation.describe(tensor)}, not a numpy.ndarray"]
    after = " after the transform" if rule.transform is not None else ""
    problems = []
    if rule.expected_shape is not None and tensor.shape != rule.expected_shape:
        problems.append(f"shape {tensor.shape}{after}, expected {rule.expected_shape}")
    if rule.expected_dtype is not None and tensor.dtype != rule.expected_dtype:
        problems.append(f"dtype {tensor.dtype}{after}, expected {rule.expected_dtype}")
    return problems
