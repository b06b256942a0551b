"""The small checks every distribution shares: UTF-8 text, existing destinations, the dtype table."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from tinax._core import dtypes, validation
from tinax._core.files import atomic_write, exists_error


def test_utf8_problem_names_the_lone_surrogate_and_its_index() -> None:
    assert validation.utf8_problem("plain é") is None
    assert validation.utf8_problem("ab\ud800") == (
        "contains a lone surrogate '\\ud800' at index 2, which UTF-8 cannot encode"
    )


def test_require_utf8_returns_the_bytes_or_raises_a_value_error_naming_the_argument() -> None:
    assert validation.require_utf8("é", "name") == "é".encode()
    with pytest.raises(UnicodeEncodeError, match="keys of state contains a lone surrogate '\\\\udfff' at index 1"):
        validation.require_utf8("x\udfff", "keys of state")
    assert issubclass(UnicodeEncodeError, ValueError)


class _RefusedError(FileExistsError, ValueError):
    pass


def test_exists_error_has_one_wording_and_the_type_asked_for(tmp_path: pathlib.Path) -> None:
    error = exists_error(tmp_path / "f", "checkpoints are immutable", _RefusedError)
    assert type(error) is _RefusedError
    assert str(error) == f"{str(tmp_path / 'f')!r} already exists; checkpoints are immutable"
    (tmp_path / "f").write_bytes(b"")
    expected = "already exists; this write does not replace existing files"
    with pytest.raises(FileExistsError, match=expected), atomic_write(tmp_path / "f", overwrite=False):
        pass


def test_array_dtype_is_native_and_only_for_table_entries() -> None:
    assert dtypes.array_dtype(np.dtype(">f4")) == np.dtype("float32")
    assert dtypes.array_dtype(np.dtype("float32")) is dtypes.array_dtypes()["float32"]
    for unstored in (np.dtype(object), np.dtype("U2"), np.dtype("f4,i4"), np.dtype("M8[s]")):
        assert dtypes.array_dtype(unstored) is None
    assert list(dtypes.safetensors_dtypes()) == list(dtypes.SAFETENSORS_NAMES)


def test_big_endian_in_memory() -> None:
    assert dtypes.is_big_endian_in_memory(np.dtype(">i4"))
    assert not dtypes.is_big_endian_in_memory(np.dtype("<i4"))
    assert not dtypes.is_big_endian_in_memory(np.dtype(">i1"))
