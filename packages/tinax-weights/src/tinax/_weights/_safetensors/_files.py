"""Safetensors files read and written by tinax itself: validated, budgeted, exact and atomic.

Not the upstream library, so that headers are validated in full before any
payload byte is read, only selected tensors are read, float8 loads exactly,
strided arrays are stored correctly and writes are atomic; upstream is imported
only to raise its ``SafetensorError``. Upstream's ``serialize_file`` matches our
writer's speed, but orders ``__metadata__`` differently in every process (bytes
not reproducible) and cannot write one file from several processes' shards.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from tinax._core import validation
from tinax._core.host import require_host_array
from tinax._core.logs import Operation, get_logger
from tinax._weights._compat02 import malformed_safetensors
from tinax._weights._numpy_compat import empty_without_huge_page_hint
from tinax._weights._remote import (
    RemotePath,
    display,
    fetch_into,
    location_to_read,
    location_to_write,
    open_to_read,
    read_location_header,
    write_atomically,
)
from tinax._weights._safetensors import _dtypes
from tinax._weights._safetensors._header import (
    LENGTH_FIELD_BYTES,
    MAX_HEADER_BYTES,
    METADATA_KEY,
    ReadableFile,
    SafetensorsInfo,
    TensorInfo,
    encode_header,
    metadata_nbytes,
    read_exactly,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["LoadedSafetensors", "inspect_safetensors", "load_safetensors", "save_safetensors"]

# Strided or byte-swapped arrays are converted in pieces of this size, never a second full copy.
_CONVERSION_PIECE_BYTES = 16 * 1024 * 1024
_MAX_CLOSE_MATCHES = 3
_INSPECT = "tinax.weights.inspect_safetensors"
_LOAD = "tinax.weights.load_safetensors"
_SAVE = "tinax.weights.save_safetensors"
_logger = get_logger("weights")


@dataclasses.dataclass(frozen=True)
class LoadedSafetensors:
    """Tensors loaded from a safetensors file, with the file's header.

    Each tensor is checked on construction to be one the header describes, with
    its shape and exact dtype (native byte order).

    Attributes:
      tensors: Name to NumPy array; from :func:`load_safetensors`, writable arrays
        that own their memory, in the order asked for (by name when all were
        loaded). Any mapping is accepted and stored as a new dict.
      info: The header of the whole file, every tensor included.

    Raises:
      TypeError: If ``info`` is not a :class:`SafetensorsInfo`, or ``tensors`` does not hold the described ndarrays.
      ValueError: If a tensor is not described in ``info`` or has another shape.
    """

    tensors: Mapping[str, np.ndarray[Any, Any]]
    info: SafetensorsInfo

    def __post_init__(self) -> None:
        info = validation.require_instance(self.info, "info", SafetensorsInfo, "a SafetensorsInfo")
        tensors = validation.require_str_mapping(self.tensors, "tensors")
        for name, array in tensors.items():
            description = info.tensors.get(name)
            if description is None:
                raise ValueError(f"tensors[{name!r}] is absent from info, which describes {len(info.tensors)} tensors")
            validation.require_instance(array, f"tensors[{name!r}]", np.ndarray, "a numpy.ndarray")
            if array.shape != description.shape:
                validation.fail_value(f"tensors[{name!r}]", f"an array of shape {description.shape}", array)
            if array.dtype != description.numpy_dtype:
                expected = description.numpy_dtype if description.numpy_dtype is not None else "no array type"
                validation.fail_type(
                    f"tensors[{name!r}]", f"an array of dtype {expected} (safetensors {description.dtype})", array
                )
        object.__setattr__(self, "tensors", dict(tensors))

    @property
    def metadata(self) -> Mapping[str, str]:
        """The file's ``__metadata__`` mapping (the same as ``info.metadata``)."""
        return self.info.metadata


def inspect_safetensors(path: str | os.PathLike[str], *, max_metadata_bytes: int = 0) -> SafetensorsInfo:
    """Reads and validates a safetensors header without reading any tensor data.

    The header is checked completely (the weights guide's section "The
    safetensors format" lists the checks), so a file that passes can be loaded.

    Args:
      path: The file, or a ``gs://`` or ``s3://`` URL of an object; only the
        header is fetched.
      max_metadata_bytes: Largest accepted size of ``__metadata__`` as compact
        UTF-8 JSON. The default, 0, accepts no metadata (an empty mapping passes),
        so an untrusted file cannot hand over an unbounded mapping unasked.

    Returns:
      The tensors' names, shapes, dtypes and offsets, sorted by name, and the metadata.

    Raises:
      TypeError: If ``path`` is not a str or path-like, or ``max_metadata_bytes`` is not an int.
      ValueError: If ``max_metadata_bytes`` is negative or too small, or the header is bad (also ``SafetensorError``).
      IsADirectoryError: If ``path`` is a directory (also a ValueError).
      ImportError: If ``path`` is a ``gs://`` or ``s3://`` URL and its client (gcsfs or s3fs) is not installed.
      FileNotFoundError: If no file exists at ``path``, or none can (also a ValueError).

    Examples:
      >>> import numpy as np
      >>> from tinax.weights import inspect_safetensors, save_safetensors
      >>> save_safetensors("model.safetensors", {"w": np.ones((2, 3), np.float32)}, overwrite=False)
      >>> inspect_safetensors("model.safetensors").tensors["w"]  # read from the header alone
      TensorInfo(shape=(2, 3), dtype='F32', data_offsets=(0, 24))
    """
    file_path = location_to_read(path, "path")
    metadata_limit = validation.require_non_negative_int(max_metadata_bytes, "max_metadata_bytes")
    with open_to_read(file_path, kind="safetensors file", needed_by=_INSPECT) as (handle, file_size):
        return read_location_header(handle, file_size, file_path, metadata_limit).info


def load_safetensors(
    path: str | os.PathLike[str],
    *,
    max_bytes: int,
    names: Iterable[str] | None = None,
    max_metadata_bytes: int = 0,
) -> LoadedSafetensors:
    """Loads some or all tensors of a safetensors file into host NumPy arrays.

    The load is planned from the validated header: unknown names and an
    over-budget selection are refused before any tensor data is read, then only
    the selected tensors' bytes are read, each straight into its result array.
    Every dtype with an array type (bfloat16 and float8 included) loads as its
    exact type, in native byte order. A successful load logs one INFO line to the
    ``tinax.weights`` logger.

    Args:
      path: The file, or a ``gs://`` or ``s3://`` URL of an object, read with
        ranged GETs (adjacent tensors in one run of large concurrent requests).
      max_bytes: Largest total size, in bytes, of the selected tensors' data.
      names: The tensors to load, listed in the result in this order, or None for
        all (sorted by name).
      max_metadata_bytes: As for :func:`inspect_safetensors`; the default, 0,
        accepts no metadata.

    Returns:
      The selected tensors as writable arrays that own their memory, and the
      header of the whole file.

    Raises:
      TypeError: If an argument's type is wrong, or a chosen tensor has a packed sub-byte dtype (F4, F6_E2M3, F6_E3M2).
      ValueError: If a limit is negative or exceeded, a name repeats or is missing, or the file is malformed or short.
      IsADirectoryError: If ``path`` is a directory (also a ValueError).
      ImportError: If ``path`` is a ``gs://`` or ``s3://`` URL and its client (gcsfs or s3fs) is not installed.
      FileNotFoundError: If no file exists at ``path``, or none can (also a ValueError).

    Examples:
      >>> import numpy as np
      >>> from tinax.weights import load_safetensors, save_safetensors
      >>> save_safetensors("model.safetensors", {"b": np.zeros(2, np.float32), "w": np.eye(2)}, overwrite=False)
      >>> loaded = load_safetensors("model.safetensors", max_bytes=1024, names=["w"])
      >>> loaded.tensors["w"].tolist(), sorted(loaded.info.tensors)
      ([[1.0, 0.0], [0.0, 1.0]], ['b', 'w'])
    """
    file_path = location_to_read(path, "path")
    budget = validation.require_non_negative_int(max_bytes, "max_bytes")
    metadata_limit = validation.require_non_negative_int(max_metadata_bytes, "max_metadata_bytes")
    requested = require_names(names)
    source = str(file_path)
    operation = Operation(_logger, "loaded", "", display(file_path))
    # tinax 0.2 refused NumPy integer limits with TypeError; a later refusal of such a call is both types.
    widened = validation.is_non_python_int(max_bytes) or validation.is_non_python_int(max_metadata_bytes)
    with (
        validation.reported_as_both(widened),
        open_to_read(file_path, kind="safetensors file", needed_by=_LOAD) as (handle, file_size),
    ):
        header = read_location_header(handle, file_size, file_path, metadata_limit)
        available = header.info.tensors
        selected = list(available) if requested is None else require_known(requested, available, source)
        total = sum(available[name].nbytes for name in selected)
        if total > budget:
            raise ValueError(
                f"loading {len(selected)} tensors from {source} needs {total} bytes, more than max_bytes={budget}; "
                "select fewer tensors with names= or raise max_bytes"
            )
        packed = [name for name in selected if available[name].numpy_dtype is None]
        if packed:
            raise TypeError(
                f"tensors {packed} of {source} have packed sub-byte dtypes "
                f"({', '.join(sorted({str(available[name].dtype) for name in packed}))}) that no NumPy or ml_dtypes "
                "array type holds; leave them out with names="
            )
        # Reading in file order keeps the disk access sequential.
        in_order = sorted(selected, key=lambda name: available[name].data_offsets or (0, 0))
        remote = isinstance(file_path, RemotePath)
        loaded = _read_tensors(
            handle, header.payload_start, {name: available[name] for name in in_order}, source, remote
        )
    operation.what = f"{count_tensors(len(selected))} from"
    operation.done(nbytes=total)
    return LoadedSafetensors(tensors={name: loaded[name] for name in selected}, info=header.info)


def save_safetensors(
    path: str | os.PathLike[str],
    tensors: Mapping[str, NDArray[np.generic]],
    *,
    overwrite: bool,
    metadata: Mapping[str, str] | None = None,
    max_metadata_bytes: int = 0,
) -> None:
    """Writes host NumPy arrays to a safetensors file, atomically.

    The file is laid out as the upstream writer lays it out (tensors by
    descending dtype size, then by name; header padded to 8 bytes), so upstream
    reads it and writes the same bytes (up to the order of several metadata
    entries, which upstream does not fix). Non-C-contiguous arrays are stored in
    logical C order and big-endian arrays byte-swapped, copied in pieces of at
    most 16 MiB. The file is flushed under a temporary name in the same folder
    before it takes ``path``, so readers see the old file or the new one. A
    successful save logs one INFO line to the ``tinax.weights`` logger.

    Args:
      path: The destination file, whose folder must exist and which must not be a
        symbolic link; or a ``gs://`` or ``s3://`` URL of an object, uploaded whole
        (create-if-absent without ``overwrite``, so of two racing writers one fails).
      tensors: Name to host ``numpy.ndarray`` (subclasses included; a masked
        array only with no masked element). Names are non-empty str other than
        ``"__metadata__"``; dtypes are bool, (u)int8 to (u)int64, float16/32/64,
        complex64, bfloat16 and the ml_dtypes float8 types (float8_e4m3fn,
        float8_e5m2, float8_e8m0fnu, float8_e4m3fnuz, float8_e5m2fnuz).
      overwrite: Whether an existing destination may be replaced.
      metadata: Str-to-str mapping stored as ``__metadata__``, or None; an empty
        mapping is stored as none, as upstream does.
      max_metadata_bytes: Largest accepted size of ``metadata`` as compact UTF-8
        JSON. The default, 0, accepts no metadata: pass a limit to store any.

    Raises:
      TypeError: If an argument has the wrong type, or a tensor is not a ``numpy.ndarray`` or has an unstorable dtype.
      ValueError: If a name is empty or reserved, an element is masked, a limit is exceeded, or ``path`` is a symlink.
      UnicodeEncodeError: If a name or metadata entry holds a lone surrogate (a ValueError).
      IsADirectoryError: If ``path`` is, or becomes before the rename, a directory (also a ValueError).
      ImportError: If ``path`` is a ``gs://`` or ``s3://`` URL and its client (gcsfs or s3fs) is not installed.
      FileExistsError: If ``path`` exists and ``overwrite`` is False.
      FileNotFoundError: If the folder of ``path`` does not exist, or no file can exist at ``path`` (also a ValueError).

    Examples:
      >>> import numpy as np
      >>> from tinax.weights import load_safetensors, save_safetensors
      >>> save_safetensors("model.safetensors", {"w": np.arange(3, dtype=np.int32)}, overwrite=False)
      >>> load_safetensors("model.safetensors", max_bytes=12).tensors["w"].tolist()
      [0, 1, 2]
    """
    file_path = location_to_write(path, "path")
    validation.require_bool(overwrite, "overwrite")
    arrays = validation.require_str_mapping(tensors, "tensors")
    metadata_limit = validation.require_non_negative_int(max_metadata_bytes, "max_metadata_bytes")
    # An empty mapping is stored as none, as upstream does.
    stored_metadata = None if metadata is None else validation.require_str_to_str_mapping(metadata, "metadata") or None

    planned: dict[str, tuple[np.ndarray[Any, Any], str]] = {}
    for name, value in arrays.items():
        require_tensor_name(name)
        planned[name] = _require_storable_array(value, f"tensors[{name!r}]")
    if stored_metadata is not None:
        require_storable_metadata(stored_metadata, metadata_limit)
    entries, header = plan_file([(name, text, array.shape) for name, (array, text) in planned.items()], stored_metadata)
    operation = Operation(_logger, "saved", f"{count_tensors(len(entries))} to", display(file_path))
    with write_atomically(file_path, overwrite=overwrite, needed_by=_SAVE) as handle:
        handle.write(header)
        for name, *_ in entries:
            _write_little_endian_c_order(handle, planned[name][0])
    operation.done(nbytes=len(header) + (entries[-1][4] if entries else 0))


def count_tensors(count: int) -> str:
    """``"1 tensor"``, ``"2 tensors"``: for log lines."""
    return f"{count} tensor" if count == 1 else f"{count} tensors"


def plan_file(
    tensors: list[tuple[str, str, tuple[int, ...]]], metadata: Mapping[str, str] | None
) -> tuple[list[tuple[str, str, tuple[int, ...], int, int]], bytes]:
    """Lays out a file as the upstream writer does: ``(name, dtype, shape, start, end)`` entries and the encoded header.

    Every tinax writer uses it, so sharded exports match :func:`save_safetensors` byte for byte.
    """
    entries: list[tuple[str, str, tuple[int, ...], int, int]] = []
    offset = 0
    for name, dtype_text, shape in _dtypes.in_file_order(tensors):
        nbytes = _dtypes.tensor_nbytes(dtype_text, shape)
        entries.append((name, dtype_text, tuple(shape), offset, offset + nbytes))
        offset += nbytes
    header = encode_header(entries, metadata)
    if len(header) - LENGTH_FIELD_BYTES > MAX_HEADER_BYTES:
        raise ValueError(
            f"the header for {len(entries)} tensors would be {len(header) - LENGTH_FIELD_BYTES} bytes, more than the "
            f"{MAX_HEADER_BYTES}-byte limit that safetensors readers accept"
        )
    return entries, header


def require_names(names: object) -> tuple[str, ...] | None:
    """Checks a ``names=`` argument: None, or an iterable of distinct str (a lone str refused)."""
    if names is None:
        return None
    expected = "None or an iterable of str tensor names"
    if isinstance(names, (str, bytes, bytearray)) or not isinstance(names, Iterable):
        validation.fail_type("names", expected, names)
    requested = tuple(names)
    for index, name in enumerate(requested):
        validation.require_instance(name, f"names[{index}]", str, "a str")
    validation.require_unique(requested, "names")
    return requested


def require_known(requested: tuple[str, ...], available: Mapping[str, TensorInfo], source: str) -> list[str]:
    """Refuses names absent from ``available`` with a ValueError that suggests close matches."""
    unknown = [name for name in requested if name not in available]
    if unknown:
        hints = []
        for name in unknown:
            matches = difflib.get_close_matches(name, list(available), n=_MAX_CLOSE_MATCHES)
            hint = f"did you mean {', '.join(repr(match) for match in matches)}?" if matches else "no close match"
            hints.append(f"{name!r} ({hint})")
        raise ValueError(
            f"names must name tensors in {source}, which has {len(available)}; not found: {'; '.join(hints)}"
        )
    return list(requested)


def _read_tensors(
    handle: ReadableFile, payload_start: int, tensors: dict[str, TensorInfo], source: str, remote: bool
) -> dict[str, np.ndarray[Any, Any]]:
    """Reads tensors (in file order) straight into owned arrays; an object's adjacent ones in large concurrent GETs."""
    # No intermediate bytes, and only selected data's pages touched; packed dtypes were refused before any read.
    arrays = {name: empty_without_huge_page_hint(info.shape, info.numpy_dtype) for name, info in tensors.items()}
    targets = [
        (payload_start + (info.data_offsets or (0, 0))[0], arrays[name].reshape(-1).view(np.uint8).data)
        for name, info in tensors.items()
    ]
    if remote:
        fetch_into(handle, targets, source=source, what=f"the data of {count_tensors(len(tensors))}")
    else:
        for name, (offset, view) in zip(tensors, targets, strict=True):
            if view.nbytes:
                read_payload(handle, view, offset, name=name, source=source)
    for array in arrays.values():
        if _dtypes.is_big_endian_in_memory(array.dtype):
            array.byteswap(inplace=True)
    return arrays


def read_payload(handle: ReadableFile, destination: memoryview, offset: int, *, name: str, source: str) -> None:
    """Fills ``destination`` from file ``offset`` on; ValueError (a SafetensorError) if the file shrank meanwhile."""
    expected = destination.nbytes
    received = read_exactly(handle, destination, offset)
    if received != expected:
        raise malformed_safetensors(
            f"{source} is not a valid safetensors file: tensor {name!r}: the file ended after {received} of the "
            f"{expected} bytes read from offset {offset} (was it truncated while being read?)"
        )


def require_tensor_name(name: str) -> None:
    """Refuses a tensor name that cannot be stored: empty, reserved, or not encodable as UTF-8."""
    if not name:
        validation.fail_value("keys of tensors", "non-empty str tensor names", name)
    if name == METADATA_KEY:
        validation.fail_value("keys of tensors", f"tensor names other than the reserved {METADATA_KEY!r}", name)
    # UnicodeEncodeError, a ValueError, is what tinax 0.2 raised here.
    validation.require_utf8(name, f"the tensor name {name!r}")


def _require_storable_array(value: object, name: str) -> tuple[np.ndarray[Any, Any], str]:
    array = require_host_array(value, name)
    if isinstance(array, np.ma.MaskedArray):
        # The file has no place for a mask: masked elements would come back as ordinary values.
        if np.ma.getmask(array) is not np.ma.nomask and bool(np.ma.getmask(array).any()):
            validation.fail_value(name, "an array without masked elements (safetensors cannot store a mask)", array)
        array = np.ma.getdata(array)
    return array, _dtypes.require_dtype_name(array.dtype, name, array)


def require_storable_metadata(metadata: dict[str, str], limit: int) -> None:
    """Refuses metadata that UTF-8 cannot encode or that encodes to more than ``limit`` bytes."""
    for key, item in metadata.items():
        for text in (key, item):
            validation.require_utf8(text, f"metadata entry {key!r}")
    size = metadata_nbytes(metadata)
    if size > limit:
        raise ValueError(
            f"metadata encodes to {size} bytes, more than max_metadata_bytes={limit}; pass a larger "
            "max_metadata_bytes to store it"
        )


def _write_little_endian_c_order(handle: BinaryIO, array: np.ndarray[Any, Any]) -> None:
    if array.size == 0:
        return
    swap = _dtypes.is_big_endian_in_memory(array.dtype)
    if array.flags.c_contiguous and not swap:
        handle.write(array.reshape(-1).view(np.uint8).data)
        return
    for piece in _bounded_pieces(array, _CONVERSION_PIECE_BYTES):
        # A private C-ordered copy: swapping it in place never touches the caller's data.
        converted = np.array(piece, order="C", copy=True)
        if swap:
            converted.byteswap(inplace=True)
        handle.write(converted.reshape(-1).view(np.uint8).data)


def _bounded_pieces(array: np.ndarray[Any, Any], limit: int) -> Iterator[np.ndarray[Any, Any]]:
    """Splits ``array`` into views whose C-order bytes, concatenated, are its own."""
    if array.nbytes <= limit or array.ndim == 0:
        yield array
        return
    row_nbytes = array.nbytes // array.shape[0]
    if row_nbytes > limit:
        for row in array:
            yield from _bounded_pieces(row, limit)
        return
    rows_per_piece = limit // row_nbytes
    for start in range(0, array.shape[0], rows_per_piece):
        yield array[start : start + rows_per_piece]
