"""Tests for TensorRule and TensorManifest."""

from __future__ import annotations

import dataclasses
import inspect

import ml_dtypes
import numpy as np
import pytest

from tinax._core.testing import parameter_summary
from tinax.weights import TensorManifest, TensorRule, save_safetensors


def test_signatures_match_the_02_api():
    assert parameter_summary(TensorRule) == [
        ("source_name", "POSITIONAL_OR_KEYWORD", None),
        ("destination_name", "POSITIONAL_OR_KEYWORD", None),
        ("transform", "POSITIONAL_OR_KEYWORD", None),
        ("expected_shape", "POSITIONAL_OR_KEYWORD", None),
        ("expected_dtype", "POSITIONAL_OR_KEYWORD", None),
    ]
    parameters = inspect.signature(TensorRule).parameters.values()
    required = [parameter.name for parameter in parameters if parameter.default is inspect.Parameter.empty]
    assert required == ["source_name", "destination_name"]
    assert parameter_summary(TensorManifest) == [("rules", "POSITIONAL_OR_KEYWORD", None)]


def test_rules_are_frozen_and_compare_by_value():
    rule = TensorRule("a", "b", None, (2, 3), np.float32)
    assert rule == TensorRule("a", "b", expected_shape=(2, 3), expected_dtype=np.dtype(np.float32))
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.source_name = "c"  # type: ignore[misc]


def test_rule_normalizes_shape_and_dtype():
    rule = TensorRule("a", "b", expected_shape=[4, np.int64(2)], expected_dtype=ml_dtypes.bfloat16)
    assert rule.expected_shape == (4, 2)
    assert type(rule.expected_shape[1]) is int
    assert rule.expected_dtype == np.dtype(ml_dtypes.bfloat16)
    assert TensorRule("a", "b", expected_dtype="int8").expected_dtype == np.dtype(np.int8)
    assert TensorRule("a", "b", expected_shape=()).expected_shape == ()


@pytest.mark.parametrize(
    ("arguments", "error", "expected"),
    [
        ({"source_name": 1}, TypeError, "source_name must be a non-empty str"),
        ({"source_name": ""}, ValueError, "source_name must be a non-empty str"),
        ({"destination_name": None}, TypeError, "destination_name must be a non-empty str"),
        ({"transform": "transpose"}, TypeError, "transform must be callable"),
        ({"expected_shape": "34"}, TypeError, "expected_shape must be None or a sequence of ints"),
        ({"expected_shape": 3}, TypeError, "expected_shape must be None or a sequence of ints"),
        ({"expected_shape": (2, True)}, TypeError, r"expected_shape\[1\] must be an int"),
        ({"expected_shape": (2, 1.0)}, TypeError, r"expected_shape\[1\] must be an int"),
        ({"expected_shape": (2, -1)}, ValueError, r"expected_shape\[1\] must be an int >= 0"),
        ({"expected_dtype": "not-a-dtype"}, TypeError, "expected_dtype must be None or a numpy.dtype"),
        ({"expected_dtype": True}, TypeError, "expected_dtype must be None or a numpy.dtype"),
        ({"expected_dtype": object()}, TypeError, "expected_dtype must be None or a numpy.dtype"),
    ],
)
def test_rule_refuses_bad_fields(arguments, error, expected):
    fields = {"source_name": "a", "destination_name": "b"} | arguments
    with pytest.raises(error, match=expected):
        TensorRule(**fields)


def test_manifest_validates_its_rules():
    with pytest.raises(TypeError, match=r"rules\[1\] must be a TensorRule"):
        TensorManifest([TensorRule("a", "b"), ("c", "d")])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="rules must be a sequence of TensorRule"):
        TensorManifest(TensorRule("a", "b"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rules must be a non-empty sequence"):
        TensorManifest([])
    with pytest.raises(ValueError, match="source names of rules must not repeat items, got 'a'"):
        TensorManifest([TensorRule("a", "b"), TensorRule("a", "c")])
    with pytest.raises(ValueError, match="destination names of rules must not repeat items, got 'b'"):
        TensorManifest([TensorRule("a", "b"), TensorRule("c", "b")])
    swap = TensorManifest([TensorRule("a", "b"), TensorRule("b", "a")])
    assert swap.source_names == ("a", "b")
    assert swap.destination_names == ("b", "a")
    assert isinstance(swap.rules, tuple)


def linear_manifest() -> TensorManifest:
    return TensorManifest(
        [
            TensorRule("model.w", "dense/kernel", np.transpose, (3, 2), np.float32),
            TensorRule("model.b", "dense/bias", expected_shape=(3,), expected_dtype=np.float32),
            TensorRule("model.scale", "scale", lambda array: array.astype(ml_dtypes.bfloat16), (), ml_dtypes.bfloat16),
        ]
    )


def good_tensors() -> dict[str, np.ndarray]:
    return {
        "model.w": np.arange(6, dtype=np.float32).reshape(2, 3),
        "model.b": np.ones(3, np.float32),
        "model.scale": np.array(0.5, np.float32),
        "unused": np.zeros(1),
    }


def test_apply_renames_transforms_and_checks():
    tensors = good_tensors()
    result = linear_manifest().apply(tensors)
    assert list(result) == ["dense/kernel", "dense/bias", "scale"]
    np.testing.assert_array_equal(result["dense/kernel"], tensors["model.w"].T)
    assert result["dense/bias"] is tensors["model.b"]  # No transform: passed through, not copied.
    assert result["scale"].dtype == np.dtype(ml_dtypes.bfloat16)


def test_apply_reports_every_mismatch_at_once():
    def broken(array: np.ndarray) -> np.ndarray:
        raise RuntimeError("cannot convert this layout")

    manifest = TensorManifest(
        [
            TensorRule("missing.a", "a"),
            TensorRule("missing.b", "b", expected_shape=(1,)),
            TensorRule("shape", "shape_out", expected_shape=(3, 2)),
            TensorRule("dtype", "dtype_out", expected_dtype=np.float16),
            TensorRule("both", "both_out", np.transpose, (5,), np.int8),
            TensorRule("raises", "raises_out", broken),
            TensorRule("returns_list", "list_out", lambda array: array.tolist()),
            TensorRule("fine", "fine_out", expected_shape=(2,), expected_dtype=np.float32),
        ]
    )
    tensors = {
        "shape": np.zeros((2, 3), np.float32),
        "dtype": np.zeros(2, np.float32),
        "both": np.zeros((2, 3), np.float32),
        "raises": np.zeros(1),
        "returns_list": np.zeros(2),
        "fine": np.zeros(2, np.float32),
    }
    with pytest.raises(ValueError, match="7 of 8 tensor rules failed") as info:
        manifest.apply(tensors)
    message = str(info.value)
    for expected in [
        "'missing.a' -> 'a': the source tensor is missing",
        "'missing.b' -> 'b': the source tensor is missing",
        "'shape' -> 'shape_out': shape (2, 3), expected (3, 2)",
        "'dtype' -> 'dtype_out': dtype float32, expected float16",
        "'both' -> 'both_out': shape (3, 2) after the transform, expected (5,)",
        "'both' -> 'both_out': dtype float32 after the transform, expected int8",
        "'raises' -> 'raises_out': the transform raised RuntimeError: cannot convert this layout",
        "'returns_list' -> 'list_out': the transform returned [0.0, 0.0] (list), not a numpy.ndarray",
    ]:
        assert expected in message
    assert "fine" not in message
    cause = info.value.__cause__
    assert isinstance(cause, ExceptionGroup)
    assert [str(error) for error in cause.exceptions] == ["cannot convert this layout"]


def test_apply_refuses_inputs_of_the_wrong_kind():
    manifest = linear_manifest()
    with pytest.raises(TypeError, match="tensors must be a mapping"):
        manifest.apply([np.zeros(1)])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="keys of tensors must be str"):
        manifest.apply({1: np.zeros(1)})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"tensors\['model.b'\] must be a numpy.ndarray"):
        manifest.apply(good_tensors() | {"model.b": [1.0, 1.0, 1.0]})  # type: ignore[dict-item]


def test_load_reads_only_the_sources_and_applies_the_rules(tmp_path):
    path = tmp_path / "model.safetensors"
    tensors = good_tensors() | {"unused": np.zeros(1_000_000, np.float32)}
    save_safetensors(path, tensors, overwrite=False)
    sources_bytes = sum(tensors[name].nbytes for name in linear_manifest().source_names)
    result = linear_manifest().load(path, max_bytes=sources_bytes)  # The unused tensor is outside the budget.
    assert list(result) == ["dense/kernel", "dense/bias", "scale"]
    np.testing.assert_array_equal(result["dense/kernel"], tensors["model.w"].T)
    with pytest.raises(ValueError, match="max_bytes"):
        linear_manifest().load(path, max_bytes=sources_bytes - 1)


def test_load_reports_missing_sources_with_every_other_mismatch(tmp_path):
    path = tmp_path / "model.safetensors"
    save_safetensors(
        path, {"model.w": np.zeros((3, 2), np.float32), "model.b": np.zeros(3, np.float16)}, overwrite=False
    )
    with pytest.raises(ValueError, match="3 of 3 tensor rules failed") as info:
        linear_manifest().load(path, max_bytes=1 << 20)
    message = str(info.value)
    assert "'model.w' -> 'dense/kernel': shape (2, 3) after the transform, expected (3, 2)" in message
    assert "'model.b' -> 'dense/bias': dtype float16, expected float32" in message
    assert "'model.scale' -> 'scale': the source tensor is missing" in message


def test_load_argument_errors(tmp_path):
    with pytest.raises(TypeError, match="max_bytes must be an int"):
        linear_manifest().load(tmp_path / "absent.safetensors", max_bytes=True)
    with pytest.raises(ValueError, match="max_bytes must be an int >= 0"):
        linear_manifest().load(tmp_path / "absent.safetensors", max_bytes=-1)
    with pytest.raises(FileNotFoundError):
        linear_manifest().load(tmp_path / "absent.safetensors", max_bytes=10)
