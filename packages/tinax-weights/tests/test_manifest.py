"""Tests for TensorRule and TensorManifest."""

from __future__ import annotations

import dataclasses
import inspect

import ml_dtypes
import numpy as np
import pytest

from tinax.weights import TensorInfo, TensorManifest, TensorRule, save_safetensors
from tinax_testing import parameter_summary


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
    # A safetensors dtype (a str NumPy would misread: "U8" as text) stands for its array type.
    assert TensorRule("a", "b", expected_dtype=TensorInfo((1,), "U8").dtype).expected_dtype == np.dtype(np.uint8)
    with pytest.raises(TypeError, match="packed"):
        TensorRule("a", "b", expected_dtype=TensorInfo((2,), "F4").dtype)


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


class _DtypeAttribute:
    """An object that NumPy reads as a dtype through its ``dtype`` attribute."""

    def __init__(self, dtype: object) -> None:
        self.dtype = dtype


# Values that make numpy.dtype raise something other than TypeError: ValueError, SyntaxError.
MALFORMED_DTYPES = {
    "repeated-field": [("a", "f4"), ("a", "f4")],
    "negative-subarray": (np.int32, -1),
    "huge-subarray": (np.float32, (2**62, 2**62)),
    "subarray-not-a-shape": ("f4", "x"),
    "65-dim-subarray": (np.float32, (1,) * 65),
    "void-too-large": (np.void, 2**63),
    "comma-syntax": "f4,,",
    "subarray-syntax": "(2,)i4,,",
    "through-an-attribute": _DtypeAttribute([("b", "i1"), ("b", "i1")]),
}


@pytest.mark.parametrize("dtype", list(MALFORMED_DTYPES.values()), ids=list(MALFORMED_DTYPES))
def test_rule_refuses_malformed_dtype_descriptions_with_type_error(dtype):
    # NumPy's own error is a ValueError or SyntaxError for most of these; which
    # one an object read through its ``dtype`` attribute gives changed in NumPy 2.4.
    with pytest.raises((ValueError, SyntaxError, TypeError)) as numpy_error:
        np.dtype(dtype)
    with pytest.raises(TypeError, match="expected_dtype must be None or a numpy.dtype") as caught:
        TensorRule("a", "b", expected_dtype=dtype)
    assert isinstance(caught.value.__cause__, numpy_error.type)


# A str given to TensorInfo is a safetensors name: an unknown one is a ValueError, as documented.
NON_STR_MALFORMED_DTYPES = {name: dtype for name, dtype in MALFORMED_DTYPES.items() if not isinstance(dtype, str)}


@pytest.mark.parametrize("dtype", list(NON_STR_MALFORMED_DTYPES.values()), ids=list(NON_STR_MALFORMED_DTYPES))
def test_tensor_info_refuses_malformed_dtype_descriptions_with_type_error(dtype):
    with pytest.raises(TypeError, match="dtype must be a safetensors dtype name"):
        TensorInfo((1,), dtype)
    with pytest.raises(ValueError, match="dtype must be a safetensors dtype name"):
        TensorInfo((1,), "f4,,")


def test_manifest_validates_its_rules():
    with pytest.raises(TypeError, match=r"rules\[1\] must be a TensorRule"):
        TensorManifest([TensorRule("a", "b"), ("c", "d")])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="rules must be a sequence of TensorRule"):
        TensorManifest(TensorRule("a", "b"))  # type: ignore[arg-type]
    empty = TensorManifest([])  # A checkpoint without tensors, as tinax 0.2 allowed.
    assert empty.apply({}) == {}
    with pytest.raises(ValueError, match=r"unexpected=\['c'\]"):
        empty.apply({"c": np.zeros(1)})
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
    }


def test_apply_renames_transforms_and_checks():
    tensors = good_tensors()
    result = linear_manifest().apply(tensors)
    assert list(result) == ["dense/kernel", "dense/bias", "scale"]
    np.testing.assert_array_equal(result["dense/kernel"], tensors["model.w"].T)
    assert result["dense/bias"] is tensors["model.b"]  # No transform: passed through, not copied.
    assert result["scale"].dtype == np.dtype(ml_dtypes.bfloat16)


def test_apply_refuses_tensors_no_rule_covers_and_lists_every_name_at_once():
    # tinax 0.2 refused a checkpoint whose tensors differ from the manifest's
    # sources; a tensor no rule covers is most likely a rule forgotten.
    tensors = good_tensors()
    del tensors["model.scale"]
    tensors |= {"unused": np.zeros(1), "another": np.zeros(1)}
    with pytest.raises(ValueError, match=r"missing=\['model.scale'\], unexpected=\['another', 'unused'\]"):
        linear_manifest().apply(tensors)


def test_apply_stops_at_the_first_failing_rule():
    # The rules run in order and the first failure stops the run, so no later
    # transform runs on tensors already known not to fit (as in tinax 0.2).
    ran = []

    def recorded(array: np.ndarray) -> np.ndarray:
        ran.append("later")
        return array

    manifest = TensorManifest(
        [
            TensorRule("a", "x", lambda array: array.reshape(2, 1), (2,), np.float32),
            TensorRule("b", "y", recorded, (1,), np.float32),
        ]
    )
    tensors = {"a": np.ones(2, np.float32), "b": np.ones(1, np.float32)}
    with pytest.raises(ValueError, match=r"'a' -> 'x'.*shape \(2, 1\) after the transform, expected \(2,\)"):
        manifest.apply(tensors)
    assert ran == []


def test_a_dtype_mismatch_is_a_type_error_and_a_shape_mismatch_a_value_error():
    cast = TensorManifest([TensorRule("a", "x", lambda array: array.astype(np.int32), (2,), np.float32)])
    with pytest.raises(TypeError, match=r"'a' -> 'x'.*dtype int32 after the transform, expected float32"):
        cast.apply({"a": np.ones(2, np.float32)})
    plain = TensorManifest([TensorRule("a", "x", expected_dtype=np.float32)])
    with pytest.raises(TypeError, match=r"dtype float64, expected float32"):
        plain.apply({"a": np.ones(2)})
    with pytest.raises(TypeError, match=r"dtype >f4, expected float32"):  # Byte order is part of the dtype.
        plain.apply({"a": np.ones(2, ">f4")})
    # Both wrong: the shape decides, as in tinax 0.2, and the message names both.
    both = TensorManifest([TensorRule("a", "x", expected_shape=(3,), expected_dtype=np.float32)])
    with pytest.raises(ValueError, match=r"shape \(2,\), expected \(3,\); dtype int8, expected float32"):
        both.apply({"a": np.ones(2, np.int8)})


def test_transform_errors_propagate_unchanged_with_a_note():
    class LayoutError(RuntimeError):
        pass

    def broken(array: np.ndarray) -> np.ndarray:
        raise LayoutError("cannot convert this layout")

    manifest = TensorManifest([TensorRule("a", "x", broken), TensorRule("b", "y", lambda array: array.tolist())])
    with pytest.raises(LayoutError, match="cannot convert this layout") as caught:
        manifest.apply({"a": np.zeros(1), "b": np.zeros(2)})
    assert any("'a' -> 'x'" in note for note in caught.value.__notes__)
    returns_list = TensorManifest([TensorRule("b", "y", lambda array: array.tolist())])
    with pytest.raises(TypeError, match=r"'b' -> 'y' must return a numpy.ndarray, got \[0.0, 0.0\] \(list\)"):
        returns_list.apply({"b": np.zeros(2)})


def test_apply_refuses_inputs_of_the_wrong_kind():
    manifest = linear_manifest()
    with pytest.raises(TypeError, match="tensors must be a mapping"):
        manifest.apply([np.zeros(1)])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="keys of tensors must be str"):
        manifest.apply({1: np.zeros(1)})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"tensors\['model.b'\] must be a numpy.ndarray"):
        manifest.apply(good_tensors() | {"model.b": [1.0, 1.0, 1.0]})  # type: ignore[dict-item]
    # The names are checked first: a missing tensor is reported before a wrong kind.
    with pytest.raises(ValueError, match="missing"):
        manifest.apply({"model.w": np.zeros((2, 3), np.float32), "model.b": [1.0]})  # type: ignore[dict-item]


def test_load_reads_only_the_sources_and_applies_the_rules(tmp_path):
    path = tmp_path / "model.safetensors"
    tensors = good_tensors() | {"unused": np.zeros(1_000_000, np.float32)}
    save_safetensors(path, tensors, overwrite=False)
    # load() reads the sources only, so the file's other tensors do not count.
    sources_bytes = sum(tensors[name].nbytes for name in linear_manifest().source_names)
    result = linear_manifest().load(path, max_bytes=sources_bytes)  # The unused tensor is outside the budget.
    assert list(result) == ["dense/kernel", "dense/bias", "scale"]
    np.testing.assert_array_equal(result["dense/kernel"], tensors["model.w"].T)
    with pytest.raises(ValueError, match="max_bytes"):
        linear_manifest().load(path, max_bytes=sources_bytes - 1)


def test_load_reports_every_missing_source_at_once(tmp_path):
    path = tmp_path / "model.safetensors"
    save_safetensors(path, {"model.w": np.zeros((3, 2), np.float32)}, overwrite=False)
    with pytest.raises(ValueError, match=r"missing=\['model.b', 'model.scale'\], unexpected=\[\]"):
        linear_manifest().load(path, max_bytes=1 << 20)


def test_load_applies_the_rules_in_order(tmp_path):
    path = tmp_path / "model.safetensors"
    tensors = good_tensors() | {"model.w": np.zeros((3, 2), np.float32), "model.b": np.zeros(3, np.float16)}
    save_safetensors(path, tensors, overwrite=False)
    with pytest.raises(ValueError, match=r"'model.w' -> 'dense/kernel'.*shape \(2, 3\) after the transform"):
        linear_manifest().load(path, max_bytes=1 << 20)


def test_load_reads_metadata_only_when_allowed(tmp_path):
    path = tmp_path / "model.safetensors"
    save_safetensors(path, good_tensors(), overwrite=False, metadata={"k": "v"}, max_metadata_bytes=9)
    with pytest.raises(ValueError, match="max_metadata_bytes=0"):
        linear_manifest().load(path, max_bytes=1 << 20)
    assert list(linear_manifest().load(path, max_bytes=1 << 20, max_metadata_bytes=9)) == [
        "dense/kernel",
        "dense/bias",
        "scale",
    ]


def test_load_argument_errors(tmp_path):
    with pytest.raises(TypeError, match="max_bytes must be an int"):
        linear_manifest().load(tmp_path / "absent.safetensors", max_bytes=True)
    with pytest.raises(ValueError, match="max_bytes must be an int >= 0"):
        linear_manifest().load(tmp_path / "absent.safetensors", max_bytes=-1)
    with pytest.raises(FileNotFoundError):
        linear_manifest().load(tmp_path / "absent.safetensors", max_bytes=10)
