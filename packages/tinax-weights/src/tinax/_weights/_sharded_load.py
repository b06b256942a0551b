"""Safetensors tensors loaded straight onto a mesh, each process reading only its own shards."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tinax._core import validation
from tinax._weights import _dtypes
from tinax._weights._header import TensorInfo
from tinax._weights._index import OpenTensor, open_checkpoint
from tinax._weights._ranges import Box, box_of_index, shard_runs
from tinax._weights._safetensors import empty_load_buffer, read_payload, require_known, require_names

if TYPE_CHECKING:
    import jax
    from jax.sharding import Sharding

__all__ = ["LoadedShardedSafetensors", "load_sharded_safetensors"]

#: Tensors whose shards on this process, a copy per device included, fit in
#: this many bytes are placed in one batched transfer.
BATCHED_PLACEMENT_BYTES = 256 * 1024
#: Tensors whose shards on this process fit in this many bytes are read
#: together (a box they tile in long runs) before they are placed; larger
#: ones are read one shard at a time. Host staging memory thus stays within
#: the larger of one shard and this constant.
STAGING_BATCH_BYTES = 16 * 1024 * 1024
# Rows of a tiled box read at a time; the buffer is reused for each slab.
_SLAB_BYTES = 1024 * 1024

ShardingChoice = Mapping[str, "Sharding"] | Callable[[str, TensorInfo], "Sharding"]


@dataclasses.dataclass(frozen=True)
class LoadedShardedSafetensors:
    """Tensors loaded onto devices by :func:`load_sharded_safetensors`.

    Attributes:
      arrays: Name to a global ``jax.Array`` with the sharding asked for, in
        the order the names were given.
      tensors: Name to the :class:`TensorInfo` of each loaded tensor, as its
        file describes it (offsets relative to that file's payload).
      bytes_read: How many payload bytes this process read from disk,
        counted read by read: the bytes of the distinct shards that its
        devices hold, each once.
    """

    arrays: Mapping[str, jax.Array]
    tensors: Mapping[str, TensorInfo]
    bytes_read: int


@dataclasses.dataclass(frozen=True)
class _Plan:
    name: str
    tensor: OpenTensor
    sharding: Sharding
    # The distinct shards this process's devices hold, each with those devices.
    shards: dict[Box, list[Any]]
    nbytes: int
    # The bytes of every local device's shard, copies of the same shard included.
    device_nbytes: int
    # The payload bytes read so far, counted read by read.
    counter: list[int] = dataclasses.field(default_factory=lambda: [0])


def load_sharded_safetensors(
    path: str | os.PathLike[str],
    *,
    shardings: ShardingChoice,
    max_bytes: int,
    names: Iterable[str] | None = None,
    max_metadata_bytes: int = 0,
) -> LoadedShardedSafetensors:
    """Loads safetensors tensors as global ``jax.Array`` s with the given shardings.

    Each process reads only the bytes of the shards that its own devices
    hold, and a shard held by several of its devices (replicated) only
    once. A shard along the first axis is one contiguous read; a shard along
    a later axis is read row by row, never as the whole tensor. The load is
    planned from the validated headers alone: unknown names, shardings that
    do not fit a tensor, dtypes that JAX would change, and a plan that reads
    more than ``max_bytes`` are refused before any tensor data is read. Host
    memory beyond the arrays' own stays within the larger of one shard and
    16 MiB: small tensors are staged together and placed in one transfer,
    larger ones one shard at a time.

    Every process of a multi-process runtime calls this with the same
    arguments; nothing is exchanged between them.

    Args:
      path: A safetensors file, or the JSON index of a multi-file checkpoint
        (any name ending with ``.json``, conventionally
        ``model.safetensors.index.json``) whose ``weight_map`` maps each
        tensor name to its file in the index's folder.
      shardings: Name to a ``jax.sharding.Sharding`` for each tensor to
        load, or a callable that takes the name and the tensor's
        :class:`TensorInfo` and returns its sharding.
      max_bytes: Largest total number of payload bytes this process may
        read: the sum, over the tensors, of the distinct shards its devices
        hold.
      names: The tensors to load, in the order the result lists them. None
        loads the keys of a ``shardings`` mapping, or every tensor of the
        checkpoint for a callable.
      max_metadata_bytes: As for :func:`load_safetensors`, for every file.

    Returns:
      The arrays, their descriptions and the bytes this process read.

    Raises:
      TypeError: If an argument has the wrong kind (``shardings`` neither a
        mapping nor a callable, a sharding that is not a
        ``jax.sharding.Sharding``, ``max_bytes`` not an int), or a tensor's
        dtype has no exact JAX type here: packed sub-byte types, and 64-bit
        types while ``jax_enable_x64`` is off (JAX would narrow them).
      ValueError: If ``max_bytes`` is negative, a name repeats, is not in
        the checkpoint or has no sharding in the mapping, the mapping has
        shardings for tensors not loaded, a sharding does not divide its
        tensor's shape, the plan reads more than ``max_bytes``, the
        checkpoint is malformed (see :func:`load_safetensors`), or an index
        maps a tensor to two files or to a file that lacks it.
      FileNotFoundError: If ``path`` does not exist, or a file the index
        names does not (then also a ValueError naming the index).
    """
    file_path = validation.require_path(path, "path")
    budget = validation.require_non_negative_int(max_bytes, "max_bytes")
    metadata_limit = validation.require_non_negative_int(max_metadata_bytes, "max_metadata_bytes")
    requested = require_names(names)
    if isinstance(shardings, Mapping):
        given = validation.require_str_mapping(shardings, "shardings")
        choose: Callable[[str, TensorInfo], object] = lambda name, _: given[name]  # noqa: E731
    elif callable(shardings):
        given, choose = None, shardings
    else:
        validation.fail_type(
            "shardings", "a mapping of names to shardings, or a callable (name, TensorInfo)", shardings
        )

    with contextlib.ExitStack() as stack:
        available, source = open_checkpoint(stack, file_path, max_metadata_bytes=metadata_limit)
        if requested is None:
            requested = tuple(given) if given is not None else tuple(available)
        selected = require_known(requested, {name: entry.info for name, entry in available.items()}, source)
        if given is not None:
            missing = [name for name in selected if name not in given]
            extra = [name for name in given if name not in set(selected)]
            if missing or extra:
                raise ValueError(
                    f"shardings must give a sharding for exactly the tensors loaded from {source}; "
                    f"missing for {missing}, given for tensors not loaded: {extra}"
                )
        plans = [_plan(name, available[name], choose, source) for name in selected]
        total = sum(plan.nbytes for plan in plans)
        if total > budget:
            largest = max(plans, key=lambda plan: plan.nbytes)
            raise ValueError(
                f"loading {len(plans)} tensors from {source} reads {total} bytes in this process (the shards of its "
                f"devices; the largest, tensor {largest.name!r}, {largest.nbytes}), more than max_bytes={budget}; "
                "select fewer tensors with names=, shard them further or raise max_bytes"
            )
        arrays = {plan.name: _load(plan) for plan in plans}
        bytes_read = sum(plan.counter[0] for plan in plans)
    return LoadedShardedSafetensors(
        arrays=arrays, tensors={name: available[name].info for name in selected}, bytes_read=bytes_read
    )


def _plan(name: str, tensor: OpenTensor, choose: Callable[[str, TensorInfo], object], source: str) -> _Plan:
    import jax
    from jax.sharding import Sharding

    info = tensor.info
    dtype = info.numpy_dtype
    if dtype is None:
        raise TypeError(
            f"tensor {name!r} of {source} has the packed sub-byte dtype {info.dtype}, which no array type holds; "
            "leave it out with names="
        )
    if jax.dtypes.canonicalize_dtype(dtype) != dtype:
        raise TypeError(
            f"tensor {name!r} of {source} is {info.dtype} ({dtype}), which JAX stores as "
            f"{jax.dtypes.canonicalize_dtype(dtype)} while jax_enable_x64 is off; enable it to load the tensor exactly"
        )
    sharding = validation.require_instance(
        choose(name, info), f"shardings[{name!r}]", Sharding, "a jax.sharding.Sharding"
    )
    try:
        shard_shape = sharding.shard_shape(info.shape)
        indices: Mapping[Any, Any] = sharding.addressable_devices_indices_map(info.shape)
    except (ValueError, TypeError, IndexError, AssertionError) as error:
        raise ValueError(f"shardings[{name!r}] does not fit tensor {name!r} of shape {info.shape}: {error}") from error
    shards: dict[Box, list[Any]] = {}
    for device, index in sorted(indices.items(), key=lambda item: int(item[0].id)):
        box = box_of_index(index if index is not None else (), info.shape)
        if tuple(stop - start for start, stop in box) != tuple(shard_shape):
            raise ValueError(
                f"shardings[{name!r}] does not divide tensor {name!r} of shape {info.shape} evenly: device "
                f"{device} would hold {box}, not a shard of shape {tuple(shard_shape)}"
            )
        shards.setdefault(box, []).append(device)
    sizes = {box: math.prod(stop - start for start, stop in box) * dtype.itemsize for box in shards}
    nbytes = sum(sizes.values())
    device_nbytes = sum(sizes[box] * len(devices) for box, devices in shards.items())
    return _Plan(name, tensor, sharding, shards, nbytes, device_nbytes)


def _load(plan: _Plan) -> jax.Array:
    """Reads and places the shards of one tensor."""
    import jax

    info = plan.tensor.info
    if plan.device_nbytes <= BATCHED_PLACEMENT_BYTES:
        # Tiny tensors (biases, norms): every local shard staged and placed in
        # one batched transfer, whose fixed cost dominates at this size. A
        # shard that several devices hold goes to each as its own copy, so no
        # two devices ever share host memory.
        staged = _read_boxes(plan)
        placed: set[Box] = set()

        def piece(index: Any) -> np.ndarray[Any, Any]:
            box = box_of_index(index, info.shape)
            if box in placed:
                return staged[box].copy()
            placed.add(box)
            return staged[box]

        array = jax.make_array_from_callback(info.shape, plan.sharding, piece)
        array.block_until_ready()
        return array

    # One shard placed at a time: the first device may take the staged
    # buffer over (on CPU it does, so it is no staging at all); the others
    # copy from that device. Waiting for each transfer keeps at most one
    # shard staged beyond what is already read.
    pieces = []
    tiled = _read_boxes(plan) if plan.device_nbytes <= STAGING_BATCH_BYTES else {}
    for box, devices in plan.shards.items():
        buffer = tiled.pop(box) if box in tiled else _read_box(plan, box)
        first = jax.device_put(buffer, devices[0])
        pieces.append(first)
        pieces.extend(jax.device_put(first, device) for device in devices[1:])
        for placed_piece in pieces[-len(devices) :]:
            placed_piece.block_until_ready()
        del buffer
    return jax.make_array_from_single_device_arrays(info.shape, plan.sharding, pieces)


def _read_boxes(plan: _Plan) -> dict[Box, np.ndarray[Any, Any]]:
    """Reads every local shard of a tensor at once, each into its own buffer.

    Where the shards tile a box (column blocks of the same rows, say) and each
    would take several reads, the box is read in its longer runs, slab by
    slab, and cut up; each byte is still read once.
    """
    boxes = list(plan.shards)
    union = _union_box(boxes)
    if union is None or len(shard_runs(plan.tensor.info.shape, 1, boxes[0]).offsets) == 1:
        return {box: _read_box(plan, box) for box in boxes}
    return _read_tiles(plan, union, boxes)


def _union_box(boxes: list[Box]) -> Box | None:
    """Returns the box that ``boxes`` (the tiles of one sharding) exactly fill, or None if they fill none."""
    if len(boxes) < 2:
        return None
    bounds = tuple(
        (min(box[axis][0] for box in boxes), max(box[axis][1] for box in boxes)) for axis in range(len(boxes[0]))
    )
    volume = math.prod(stop - start for start, stop in bounds)
    # Tiles of one sharding never overlap, so they fill their bounds exactly when their volumes add up.
    if volume == 0 or sum(math.prod(stop - start for start, stop in box) for box in boxes) != volume:
        return None
    return bounds


def _read_tiles(plan: _Plan, union: Box, boxes: list[Box]) -> dict[Box, np.ndarray[Any, Any]]:
    """Reads the box ``union`` that ``boxes`` tile, slab by slab along its first axis, into one buffer per box.

    A slab holds at most ``_SLAB_BYTES`` (or one index of the first axis), and
    its buffer is reused, so the staging beyond the boxes' own buffers stays
    that small.
    """
    dtype = plan.tensor.info.numpy_dtype
    buffers = {box: empty_load_buffer(tuple(stop - start for start, stop in box), dtype) for box in boxes}
    (first, last), rest = union[0], union[1:]
    row_nbytes = math.prod(stop - start for start, stop in rest) * np.dtype(dtype).itemsize
    step = max(1, _SLAB_BYTES // max(1, row_nbytes))
    scratch = empty_load_buffer((min(step, last - first), *(stop - start for start, stop in rest)), dtype)
    for low in range(first, last, step):
        high = min(low + step, last)
        slab = scratch[: high - low]
        _read_into(plan, ((low, high), *rest), slab)
        for box, buffer in buffers.items():
            (start, stop), inner = box[0], box[1:]
            overlap_low, overlap_high = max(start, low), min(stop, high)
            if overlap_low >= overlap_high:
                continue
            source = (
                slice(overlap_low - low, overlap_high - low),
                *(slice(begin - base, end - base) for (begin, end), (base, _) in zip(inner, rest, strict=True)),
            )
            buffer[overlap_low - start : overlap_high - start] = slab[source]
    return buffers


def _read_box(plan: _Plan, box: Box) -> np.ndarray[Any, Any]:
    """Reads one box of the tensor into a new buffer."""
    buffer = empty_load_buffer(tuple(stop - start for start, stop in box), plan.tensor.info.numpy_dtype)
    _read_into(plan, box, buffer)
    return buffer


def _read_into(plan: _Plan, box: Box, buffer: np.ndarray[Any, Any]) -> None:
    """Fills the C-contiguous ``buffer`` with one box of the tensor, run by run, counting the bytes read."""
    tensor = plan.tensor
    info = tensor.info
    start = tensor.payload_start + (info.data_offsets or (0, 0))[0]
    runs = shard_runs(info.shape, buffer.itemsize, box)
    flat = buffer.reshape(-1).view(np.uint8).data
    size = runs.run_nbytes
    for position, offset in enumerate(runs.offsets.tolist()):
        read_payload(
            tensor.handle, flat[position * size : (position + 1) * size], start + offset, name=plan.name,
            source=tensor.source,
        )  # fmt: skip
        plan.counter[0] += size
    if _dtypes.is_big_endian_in_memory(buffer.dtype):
        buffer.byteswap(inplace=True)
