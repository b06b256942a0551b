"""Safetensors, Flax msgpack and tinax records store the dtypes of tinax-core's one table.

Every dtype of the table round-trips through msgpack and through records
bit for bit; safetensors round-trips exactly the table's dtypes that have a
safetensors name and refuses the others with a TypeError, the one exception
the safetensors format imposes (it has no name for them).
"""

from __future__ import annotations

import pathlib
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tinax._core import dtypes
from tinax._data._records._record_codec import dtype_descriptor, dtype_from_descriptor
from tinax._weights._safetensors import _dtypes as safetensors_table
from tinax.data import read_array_record, write_array_record
from tinax.weights import load_msgpack, load_safetensors, save_msgpack, save_safetensors

TABLE = dtypes.array_dtypes()

#: Table dtypes the safetensors format has no name for.
NOT_IN_SAFETENSORS = {
    "complex128",
    # New in ml-dtypes 0.7; the safetensors format has no name for it.
    "float8_e5m3fnu",
    "bcomplex32",
    "complex32",
    "float4_e2m1fn",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3b11fnuz",
    "int1",
    "int2",
    "int4",
    "uint1",
    "uint2",
    "uint4",
}


def values(dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    # Raw bytes, so every bit pattern of every type is covered, NaNs included.
    return np.frombuffer(np.arange(6 * dtype.itemsize, dtype=np.uint8).tobytes(), dtype).reshape(2, 3).copy()


def test_the_table_holds_numpy_and_every_ml_dtypes_type() -> None:
    numpy_names = {"bool", "complex64", "complex128", "float16", "float32", "float64"}
    numpy_names |= {f"{sign}int{bits}" for sign in ("", "u") for bits in (8, 16, 32, 64)}
    # Private aliases (ml-dtypes 0.7 has `_dt`) are no names of their own.
    ml_names = {
        name for name in dir(ml_dtypes) if not name.startswith("_") and isinstance(getattr(ml_dtypes, name), type)
    }
    ml_names = {name for name in ml_names if issubclass(getattr(ml_dtypes, name), np.generic)}
    assert set(TABLE) == numpy_names | ml_names
    assert {"bfloat16", "float8_e4m3fn", "int4"} <= set(TABLE)
    for name, dtype in TABLE.items():
        assert dtype.name == name
        assert dtype.isnative
        assert dtypes.array_dtype(dtype.newbyteorder()) == dtype or dtype.itemsize == 1


@pytest.mark.parametrize("name", sorted(TABLE))
def test_msgpack_and_records_store_every_dtype_of_the_table(tmp_path: pathlib.Path, name: str) -> None:
    array = values(TABLE[name])
    save_msgpack(tmp_path / "state.msgpack", {"a": array, "s": array[0, 0]}, overwrite=False)
    loaded = load_msgpack(tmp_path / "state.msgpack", {"a": array, "s": array[0, 0]}, max_bytes=1 << 20)
    assert loaded["a"].dtype == array.dtype
    assert loaded["a"].tobytes() == array.tobytes()
    assert loaded["s"].dtype == array.dtype

    assert dtype_from_descriptor(dtype_descriptor(array.dtype)) == array.dtype
    write_array_record(tmp_path / "records.array_record", [{"a": array}])
    record = read_array_record(tmp_path / "records.array_record")[0]
    assert record["a"].dtype == array.dtype
    assert record["a"].tobytes() == array.tobytes()


@pytest.mark.parametrize("name", sorted(TABLE))
def test_safetensors_stores_every_dtype_it_has_a_name_for(tmp_path: pathlib.Path, name: str) -> None:
    array = values(TABLE[name])
    path = tmp_path / "w.safetensors"
    if name in NOT_IN_SAFETENSORS:
        assert safetensors_table.dtype_name(array.dtype) is None
        with pytest.raises(TypeError, match="a dtype safetensors stores exactly"):
            save_safetensors(path, {"a": array}, overwrite=False)
        return
    save_safetensors(path, {"a": array}, overwrite=False)
    loaded = load_safetensors(path, max_bytes=array.nbytes).tensors["a"]
    assert loaded.dtype == array.dtype
    assert loaded.tobytes() == array.tobytes()


def test_safetensors_names_cover_the_table_but_for_the_format_exceptions() -> None:
    named = {dtype.name for dtype in dtypes.safetensors_dtypes().values()}
    assert named == set(TABLE) - NOT_IN_SAFETENSORS
    assert dtypes.safetensors_dtypes() == safetensors_table.SAFETENSORS_DTYPES


@pytest.mark.parametrize("dtype", [np.dtype(object), np.dtype("U3"), np.dtype("f4,i4"), np.dtype("M8[s]")])
def test_no_format_stores_what_the_table_lacks(tmp_path: pathlib.Path, dtype: np.dtype[Any]) -> None:
    assert dtypes.array_dtype(dtype) is None
    assert dtype_descriptor(dtype) is None
    array = np.zeros(2, dtype)
    with pytest.raises(TypeError):
        save_msgpack(tmp_path / "state.msgpack", {"a": array}, overwrite=False)
    with pytest.raises(TypeError):
        save_safetensors(tmp_path / "w.safetensors", {"a": array}, overwrite=False)
