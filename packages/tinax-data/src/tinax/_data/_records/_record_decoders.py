"""Decoding tinax record encodings: one record at a time, or a field of many records at once with NumPy."""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from tinax._data._records._record_fields import (
    _FLOAT,
    _INT,
    _LENGTH,
    KIND_BOOL,
    KIND_BYTES,
    KIND_FLOAT,
    KIND_INT,
    KIND_NONE,
    KIND_STR,
    FieldSpec,
)

_Decoder = Callable[[bytes, int], tuple[Any, int]]


def _decoder(field: FieldSpec) -> _Decoder:
    # Each decoder returns (value, offset after it); hot, so each binds what it needs up front.
    kind = field.kind
    if kind == KIND_NONE:
        return lambda data, offset: (None, offset)
    if kind == KIND_BOOL:
        return _decode_bool
    if kind in (KIND_INT, KIND_FLOAT):
        unpack = (_INT if kind == KIND_INT else _FLOAT).unpack_from
        return lambda data, offset: (unpack(data, offset)[0], offset + 8)
    if kind == KIND_STR:
        return _decode_str
    if kind == KIND_BYTES:
        return _decode_sized
    assert field.dtype is not None
    assert field.ndim is not None
    dtype, itemsize, ndim = field.dtype, field.dtype.itemsize, field.ndim
    unpack_extents = struct.Struct(f"<{ndim}Q").unpack_from
    extents_size = 8 * ndim
    frombuffer, empty, prod = np.frombuffer, np.empty, math.prod

    def decode_array(data: bytes, offset: int) -> tuple[Any, int]:
        shape = unpack_extents(data, offset)
        offset += extents_size
        count = shape[0] if ndim == 1 else prod(shape)
        if not count:
            return empty(shape, dtype), offset
        if count * itemsize > len(data) - offset:
            # Checked before NumPy sees it: extents of 2**63 or more overflow its sizes.
            raise ValueError(f"an array of shape {shape} needs {count * itemsize} bytes but the record ends first")
        # frombuffer refuses a short buffer; the copy makes the view aligned, writable and owning.
        array = frombuffer(data, dtype, count, offset)
        return (array if ndim == 1 else array.reshape(shape)).copy(), offset + count * itemsize

    return decode_array


def _decode_bool(data: bytes, offset: int) -> tuple[Any, int]:
    byte = data[offset]  # IndexError here means a short record.
    if byte > 1:
        raise ValueError(f"a bool field holds the byte {byte}")
    return byte == 1, offset + 1


def _decode_sized(data: bytes, offset: int) -> tuple[bytes, int]:
    (length,) = _LENGTH.unpack_from(data, offset)
    start = offset + 8
    end = start + length
    if end > len(data):
        raise ValueError(f"a field declares {length} bytes but the record ends before them")
    return data[start:end], end


def _decode_str(data: bytes, offset: int) -> tuple[Any, int]:
    raw, end = _decode_sized(data, offset)
    return raw.decode("utf-8"), end


class _Batch(NamedTuple):
    """The encodings of several records, joined, for :meth:`RecordSchema.decode_many`."""

    #: Every record's encoding, one after the other.
    joined: bytes
    #: ``joined`` as a NumPy array of bytes (no copy).
    octets: np.ndarray[Any, Any]
    #: Where each record ends in ``joined``.
    ends: np.ndarray[Any, Any]


#: Decodes one field of every record of a batch, given each record's offset of the field: the
#: values and the offsets after the field, or None where a record is not well formed.
_BatchDecoder = Callable[[_Batch, np.ndarray[Any, Any]], tuple[list[Any], np.ndarray[Any, Any]] | None]

# Extents from this far up are left to the one-record decoder and its messages.
_BATCH_EXTENT_LIMIT = 2**40


def _gathered(batch: _Batch, offsets: np.ndarray[Any, Any], size: int) -> np.ndarray[Any, Any] | None:
    """The ``size`` bytes at each offset, one row per record; None if a record ends before them."""
    if (offsets + size > batch.ends).any():
        return None
    return batch.octets[offsets[:, None] + np.arange(size)]


def _batch_decoder(field: FieldSpec) -> _BatchDecoder:
    kind = field.kind
    if kind == KIND_NONE:
        return lambda batch, offsets: ([None] * len(offsets), offsets)
    if kind == KIND_BOOL:
        return _decode_bools
    if kind in (KIND_INT, KIND_FLOAT):
        number = np.dtype("<i8" if kind == KIND_INT else "<f8")

        def decode_numbers(batch: _Batch, offsets: np.ndarray[Any, Any]) -> Any:
            octets = _gathered(batch, offsets, 8)
            if octets is None:
                return None
            # tolist gives Python ints and floats, as struct does.
            return octets.view(number).ravel().tolist(), offsets + 8

        return decode_numbers
    if kind in (KIND_STR, KIND_BYTES):
        text = kind == KIND_STR

        def decode_sized(batch: _Batch, offsets: np.ndarray[Any, Any]) -> Any:
            octets = _gathered(batch, offsets, 8)
            if octets is None:
                return None
            lengths = octets.view("<u8").ravel()
            starts = offsets + 8
            # Compared as uint64, so that a crafted length of 2**63 or more stays a large number.
            if (lengths > (batch.ends - starts).astype(np.uint64)).any():
                return None
            stops = starts + lengths.astype(np.int64)
            joined = batch.joined
            pieces: list[Any] = [
                joined[start:stop] for start, stop in zip(starts.tolist(), stops.tolist(), strict=True)
            ]
            if text:
                try:
                    pieces = [piece.decode("utf-8") for piece in pieces]
                except UnicodeDecodeError:
                    return None
            return pieces, stops

        return decode_sized
    assert field.dtype is not None
    assert field.ndim is not None
    return _array_batch_decoder(field.dtype, field.ndim)


def _decode_bools(batch: _Batch, offsets: np.ndarray[Any, Any]) -> Any:
    octets = _gathered(batch, offsets, 1)
    if octets is None or (octets > 1).any():
        return None
    return (octets.ravel() == 1).tolist(), offsets + 1


def _array_batch_decoder(dtype: np.dtype[Any], ndim: int) -> _BatchDecoder:
    itemsize = dtype.itemsize
    extents_size = 8 * ndim
    frombuffer, empty, prod = np.frombuffer, np.empty, math.prod

    def decode_arrays(batch: _Batch, offsets: np.ndarray[Any, Any]) -> Any:
        count = len(offsets)
        if ndim:
            octets = _gathered(batch, offsets, extents_size)
            if octets is None:
                return None
            extents = octets.view("<u8").reshape(count, ndim)
            if (extents >= _BATCH_EXTENT_LIMIT).any():
                return None
        else:
            extents = np.zeros((count, 0), np.uint64)
        starts = offsets + extents_size
        joined, ends = batch.joined, batch.ends
        if (extents == extents[0]).all():
            # One shape for every record: one check for all, then one copy each.
            shape = tuple(extents[0].tolist())
            size = prod(shape)
            nbytes = size * itemsize
            if nbytes > int((ends - starts).min()):
                return None
            if not size:
                return [empty(shape, dtype) for _ in range(count)], starts
            if ndim == 1:
                arrays = [frombuffer(joined, dtype, size, start).copy() for start in starts.tolist()]
            else:
                arrays = [frombuffer(joined, dtype, size, start).reshape(shape).copy() for start in starts.tolist()]
            return arrays, starts + nbytes
        # Shapes differ from record to record (token sequences, say).
        arrays = []
        stops = []
        for row, start, end in zip(extents.tolist(), starts.tolist(), ends.tolist(), strict=True):
            shape = tuple(row)
            size = prod(shape)
            stop = start + size * itemsize
            if stop > end:
                return None
            arrays.append(frombuffer(joined, dtype, size, start).reshape(shape).copy() if size else empty(shape, dtype))
            stops.append(stop)
        return arrays, np.asarray(stops, np.int64)

    return decode_arrays
