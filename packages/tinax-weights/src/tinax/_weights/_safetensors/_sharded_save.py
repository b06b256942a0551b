"""Sharded ``jax.Array`` s exported to safetensors without gathering them to one host.

The header is fixed from global shapes and dtypes first (``plan_file``); then
each process ``os.pwrite`` s the shards it owns (``replica_id`` 0) at their
offsets into a temporary file that process 0 creates and names for the others.
Upstream's ``serialize_file`` cannot: it writes a whole file from one process's
memory. docs/guide/weights.md, section "Saving from several processes", has the rules.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import pathlib
import stat
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tinax._core import storage, validation
from tinax._core.files import exists_error
from tinax._core.logs import Operation, get_logger
from tinax._core.progress import Progress, ProgressChoice, Reporter, require_progress
from tinax._weights._paths import path_to_write_atomically, require_writable_destination
from tinax._weights._remote import (
    Location,
    RemotePath,
    display,
    filesystem,
    location_to_read,
    object_exists,
    read_object,
    remove_object,
    write_atomically,
)
from tinax._weights._safetensors import _dtypes
from tinax._weights._safetensors._files import count_tensors, plan_file, require_storable_metadata, require_tensor_name
from tinax._weights._safetensors._index import encode_index, indexed_file_names, part_file_names
from tinax._weights._safetensors._ranges import box_of_index, box_shape, shard_runs
from tinax._weights._safetensors._sharded_load import whose_shards

if TYPE_CHECKING:
    import jax

__all__ = ["save_sharded_safetensors"]

# The longest temporary file name process 0 can hand to the others.
_MAX_NAME_BYTES = 1024
# The most bytes one write call takes, so that progress moves within a large shard.
_WRITE_CHUNK_BYTES = 16 * 1024 * 1024
_Entry = tuple[str, str, tuple[int, ...], int, int]
_File = tuple[Location, list[_Entry], bytes]
_logger = get_logger("weights")
_SAVE_SHARDED = "tinax.weights.save_sharded_safetensors"


def save_sharded_safetensors(
    path: str | os.PathLike[str],
    arrays: Mapping[str, jax.Array],
    *,
    overwrite: bool,
    metadata: Mapping[str, str] | None = None,
    max_metadata_bytes: int = 0,
    max_file_bytes: int | None = None,
    progress: Progress = None,
) -> None:
    """Writes global ``jax.Array`` s to safetensors without gathering any of them.

    Each process writes only the shards it owns (one copy of each replicated
    shard across processes), one shard at a time from device to its place in the
    file; host memory never holds a whole array. A single file is byte-identical
    to what :func:`save_safetensors` writes for the arrays gathered. A file takes
    its name only after every process wrote and flushed its part, so a crash
    leaves the old file or none. With several processes, every process calls
    this with the same arguments and the destination's folder must be one file
    system they all see; for a ``gs://`` or ``s3://`` destination each file's
    shards must belong to one process, which uploads it as one object. The
    weights guide's section "Saving from several processes" gives the details.
    A successful export logs one INFO line to the ``tinax.weights`` logger.

    Args:
      path: A safetensors file or, with ``max_file_bytes``, the index of a
        multi-file checkpoint (a name ending ``.safetensors.index.json``), or a
        ``gs://`` or ``s3://`` URL. Its folder must exist; not a symbolic link.
      arrays: Name to ``jax.Array`` (sharded, replicated or on one device,
        possibly across processes); dtypes as for :func:`save_safetensors`.
      overwrite: Whether existing destination files may be replaced.
      metadata: Str-to-str ``__metadata__`` stored in every file, or None.
      max_metadata_bytes: As for :func:`save_safetensors`.
      max_file_bytes: None writes one file. Otherwise the tensors, in layout
        order, go into files ``<prefix>-00001-of-0000N.safetensors`` whose payloads
        hold at most this many bytes (a larger tensor gets its own), then the
        index. Replacing an index is atomic for the whole set: the new files get
        new names and the old ones are removed once the new index is in place.
      progress: None; a callable ``progress(done, total)`` over the payload bytes
        this process writes (first ``(0, total)``, last ``(total, total)``, at most
        about a thousand calls), whose exception aborts the export with nothing
        new published; or ``"bar"`` for a tqdm or rich bar on standard error.

    Raises:
      TypeError: If an argument has the wrong type (a NumPy array, say), or an array is traced or its dtype unstorable.
      ValueError: If a name, limit or ``path`` is unusable, ``progress`` is another str, or a URL file mixes processes.
      ImportError: If ``progress="bar"`` finds neither tqdm nor rich, or a URL's client (gcsfs, s3fs) is not installed.
      FileExistsError: If a destination file or object exists and ``overwrite`` is False.
      FileNotFoundError: If the folder of ``path`` does not exist, or no file can exist at ``path`` (also a ValueError).
      RuntimeError: In the other processes, when one could not create, write or publish its file (nothing is published).

    Examples:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> import numpy as np
      >>> from jax.sharding import Mesh, NamedSharding, PartitionSpec
      >>> from tinax.weights import load_safetensors, save_sharded_safetensors
      >>> rows = NamedSharding(Mesh(np.array(jax.devices()), ("x",)), PartitionSpec("x"))
      >>> w = jax.device_put(jnp.arange(16.0).reshape(8, 2), rows)
      >>> save_sharded_safetensors("model.safetensors", {"w": w}, overwrite=False)  # each shard written in place
      >>> load_safetensors("model.safetensors", max_bytes=64).tensors["w"][-1].tolist()
      [14.0, 15.0]
    """
    file_path = location_to_read(path, "path")
    validation.require_bool(overwrite, "overwrite")
    given = validation.require_str_mapping(arrays, "arrays")
    metadata_limit = validation.require_non_negative_int(max_metadata_bytes, "max_metadata_bytes")
    file_limit = None if max_file_bytes is None else validation.require_positive_int(max_file_bytes, "max_file_bytes")
    # An empty mapping is stored as none, as upstream does.
    stored_metadata = None if metadata is None else validation.require_str_to_str_mapping(metadata, "metadata") or None
    reporting = require_progress(progress, needed_by="tinax.weights.save_sharded_safetensors")
    described: list[tuple[str, str, tuple[int, ...]]] = []
    for name, value in given.items():
        require_tensor_name(name)
        described.append((name, _require_global_array(value, f"arrays[{name!r}]"), tuple(value.shape)))
    if stored_metadata is not None:
        require_storable_metadata(stored_metadata, metadata_limit)

    operation = Operation(_logger, "exported", f"{count_tensors(len(described))} to", display(file_path))
    if file_limit is None:
        files: list[_File] = [(file_path, *plan_file(described, stored_metadata))]
        replaced = None
        if isinstance(file_path, RemotePath):
            _require_destination(file_path, overwrite=overwrite)
    else:
        files, replaced = _plan_parts(file_path, described, stored_metadata, file_limit, overwrite=overwrite)
    total = sum(_owned_nbytes(entries, given) for _, entries, _ in files)
    # Every file lies beside the index, so it is of the index's kind: objects, or local files.
    if isinstance(file_path, RemotePath):
        objects = [(place, entries, header) for place, entries, header in files if isinstance(place, RemotePath)]
        _upload_files(file_path, objects, given, reporting, total, overwrite=overwrite)
    else:
        with reporting.reporting(total, unit="bytes", description=file_path.name) as reporter:
            for destination, entries, header in files:
                if isinstance(destination, pathlib.Path):
                    _write_file(destination, header, entries, given, reporter, overwrite=overwrite)
    if file_limit is None:
        operation.done(nbytes=total, detail=whose_shards())
        return
    _publish_index(file_path, files, replaced, overwrite=overwrite)  # After every process's files.
    operation.done(nbytes=total, detail=whose_shards(f"{len(files)} files and their index"))


def _plan_parts(
    index_path: Location,
    described: list[tuple[str, str, tuple[int, ...]]],
    metadata: Mapping[str, str] | None,
    file_limit: int,
    *,
    overwrite: bool,
) -> tuple[list[_File], bytes | None]:
    """The files of a multi-file export, each with its entries and header, and the bytes of the index it replaces."""
    _require_destination(index_path, overwrite=overwrite)
    replaced = read_object(index_path, _SAVE_SHARDED) if overwrite else None
    plans = [plan_file(group, metadata) for group in _split(described, file_limit)]
    tag = None if replaced is None else _replacement_tag(replaced, [header for _, header in plans])
    part_names = part_file_names(index_path, len(plans), tag=tag)
    files: list[_File] = [(index_path.parent / part, *plan) for part, plan in zip(part_names, plans, strict=True)]
    for destination, _, _ in files:
        _require_destination(destination, overwrite=overwrite)
    return files, replaced


def _publish_index(index_path: Location, files: list[_File], replaced: bytes | None, *, overwrite: bool) -> None:
    """Has process 0 write the index, the commit point, then remove the replaced files it no longer names."""
    weight_map = {name: destination.name for destination, entries, _ in files for name, *_ in entries}
    total_size = sum(end - start for _, entries, _ in files for *_, start, end in entries)
    index = encode_index(weight_map, total_size)

    def publish() -> None:
        if replaced is not None and isinstance(index_path, pathlib.Path):
            # The new files take the replaced index's permissions, as a replaced single file keeps its own.
            _give_mode_of(index_path, [place for place, _, _ in files if isinstance(place, pathlib.Path)])
        # The index is the commit point, written once every file is complete: until it is replaced, the old
        # one names only untouched old files. Then the replaced files it no longer names are removed.
        with write_atomically(index_path, overwrite=overwrite, needed_by=_SAVE_SHARDED) as handle:
            handle.write(index)
        for name in sorted((indexed_file_names(replaced or b"{}") or set()) - set(weight_map.values())):
            remove_object(index_path.parent / name, _SAVE_SHARDED)

    _as_leader(publish, f"process 0 could not write {str(index_path)!r}")


def _require_destination(location: Location, *, overwrite: bool) -> None:
    """Refuses an unwritable destination, as ``require_writable_destination`` does, or an existing object."""
    if not isinstance(location, RemotePath):
        require_writable_destination(location, overwrite=overwrite)
    elif not overwrite and object_exists(location, _SAVE_SHARDED):
        raise exists_error(location.url, "this write does not replace existing objects")


def _upload_files(
    index_path: RemotePath,
    files: list[tuple[RemotePath, list[_Entry], bytes]],
    arrays: Mapping[str, Any],
    reporting: ProgressChoice,
    total: int,
    *,
    overwrite: bool,
) -> None:
    """Uploads each file as one object from the one process that owns all of its bytes.

    A file whose shards several processes own is refused by all of them before anything is written.
    """
    import jax

    writers = _file_writers(index_path, files, arrays)

    def upload() -> None:
        # Each file is written locally as ``_write_file`` writes it, then published as one object.
        with reporting.reporting(total, unit="bytes", description=index_path.name) as reporter:
            for writer, (destination, entries, header) in zip(writers, files, strict=True):
                if writer == jax.process_index():
                    fs = filesystem(destination, _SAVE_SHARDED)
                    with storage.local_copy_to_publish(fs, destination, overwrite=overwrite) as temporary:
                        _write_complete(temporary, header, entries, arrays, reporter)

    _together(
        upload, lambda failed: f"process(es) {failed} could not upload their files of {index_path.url!r}; not published"
    )


def _file_writers(
    index_path: RemotePath, files: list[tuple[RemotePath, list[_Entry], bytes]], arrays: Mapping[str, Any]
) -> list[int]:
    """The process that uploads each file: the one that owns all of its payload (process 0 for none)."""
    import jax

    if jax.process_count() == 1:
        return [0] * len(files)
    from jax.experimental import multihost_utils

    # Per file, 0: owns none of its bytes, 1: all of them, 2: some.
    codes = []
    for _, entries, _ in files:
        owned = _owned_nbytes(entries, arrays)
        codes.append(0 if owned == 0 else 1 if owned == _payload_nbytes(entries) else 2)
    table = np.asarray(multihost_utils.process_allgather(np.array(codes, dtype=np.int32))).reshape(
        jax.process_count(), len(files)
    )
    writers = []
    for column, (destination, _, _) in enumerate(files):
        owners = [process for process in range(jax.process_count()) if table[process, column] == 1]
        if (table[:, column] == 2).any() or len(owners) > 1:
            raise ValueError(
                f"path {index_path.url!r} is in a bucket, where processes cannot write parts of one object, but "
                f"{destination.name!r} would hold shards of several processes; export to a file system that every "
                "process shares, or place each tensor (with max_file_bytes, each file) on one process"
            )
        writers.append(owners[0] if owners else 0)
    return writers


def _payload_nbytes(entries: list[_Entry]) -> int:
    """The payload size of a file: where its last tensor ends."""
    return entries[-1][4] if entries else 0


def _owned_nbytes(entries: list[_Entry], arrays: Mapping[str, Any]) -> int:
    """The payload bytes this process writes into one file: those of the shards it owns (replica 0)."""
    total = 0
    for name, _, shape, _, _ in entries:
        array = arrays[name]
        itemsize = np.dtype(array.dtype).itemsize
        for shard in array.addressable_shards:
            if shard.replica_id == 0:
                total += math.prod(box_shape(box_of_index(shard.index, shape))) * itemsize
    return total


def _give_mode_of(model: pathlib.Path, paths: list[pathlib.Path]) -> None:
    try:
        mode = stat.S_IMODE(os.stat(model).st_mode)
    except FileNotFoundError:  # Replaced meanwhile: the new files keep what the umask gave.
        return
    for path in paths:
        os.chmod(path, mode)


def _replacement_tag(replaced: bytes, headers: list[bytes]) -> str:
    """A tag for a replacement's file names, hashed from what every process sees alike, so agreed without messages.

    The old index is hashed too, so no old file name already carries the tag.
    """
    digest = hashlib.sha256(replaced)
    for header in headers:
        digest.update(len(header).to_bytes(8, "little"))
        digest.update(header)
    return digest.hexdigest()[:12]


def _require_global_array(value: object, name: str) -> str:
    import jax

    from tinax._core.jax_compat import require_concrete

    if not isinstance(value, jax.Array):
        hint = "; save host NumPy arrays with save_safetensors" if isinstance(value, np.ndarray) else ""
        validation.fail_type(name, f"a jax.Array{hint}", value)
    require_concrete(value, name, "a concrete jax.Array")
    if value.is_deleted():
        validation.fail_value(name, "a jax.Array that was not deleted", value)
    try:
        dtype = np.dtype(value.dtype)
    except TypeError:  # PRNG key arrays and other extended dtypes have no NumPy dtype.
        dtype = None
    return _dtypes.require_dtype_name(dtype, name, value)


def _split(
    described: list[tuple[str, str, tuple[int, ...]]], limit: int
) -> list[list[tuple[str, str, tuple[int, ...]]]]:
    groups: list[list[tuple[str, str, tuple[int, ...]]]] = [[]]
    filled = 0
    for item in _dtypes.in_file_order(described):
        nbytes = _dtypes.tensor_nbytes(item[1], item[2])
        if groups[-1] and filled + nbytes > limit:
            groups.append([])
            filled = 0
        groups[-1].append(item)
        filled += nbytes
    return groups


def _write_file(
    destination: pathlib.Path,
    header: bytes,
    entries: list[_Entry],
    arrays: Mapping[str, Any],
    reporter: Reporter,
    *,
    overwrite: bool,
) -> None:
    import jax

    if jax.process_count() == 1:
        with path_to_write_atomically(destination, overwrite=overwrite) as temporary:
            _write_complete(temporary, header, entries, arrays, reporter)
        return

    require_writable_destination(destination, overwrite=overwrite)
    # On an error, closing the stack removes process 0's temporary file; it is empty once published.
    with contextlib.ExitStack() as stack:
        _write_file_together(stack, destination, header, entries, arrays, reporter, overwrite=overwrite)


def _write_complete(
    temporary: pathlib.Path, header: bytes, entries: list[_Entry], arrays: Mapping[str, Any], reporter: Reporter
) -> None:
    """Writes a whole file from the one process that owns all of it; publishing flushes the file."""
    _write_header(temporary, header, len(header) + _payload_nbytes(entries))
    _write_owned_shards(temporary, len(header), entries, arrays, reporter, flush=False)


def _write_file_together(
    stack: contextlib.ExitStack,
    destination: pathlib.Path,
    header: bytes,
    entries: list[_Entry],
    arrays: Mapping[str, Any],
    reporter: Reporter,
    *,
    overwrite: bool,
) -> None:
    import jax

    # Process 0 creates the temporary file with its final header and size.
    name = ""
    leader_error: BaseException | None = None
    if jax.process_index() == 0:
        try:
            temporary = stack.enter_context(path_to_write_atomically(destination, overwrite=overwrite))
            _write_header(temporary, header, len(header) + _payload_nbytes(entries))
            name = temporary.name
        except Exception as error:
            leader_error = error
    name = _broadcast_text(name)
    if not name:
        if leader_error is not None:
            raise leader_error
        raise RuntimeError(f"process 0 could not create the temporary file for {str(destination)!r}")

    def write_part() -> None:
        try:
            _write_owned_shards(destination.parent / name, len(header), entries, arrays, reporter, flush=True)
        except FileNotFoundError as error:
            raise FileNotFoundError(
                f"process {jax.process_index()} cannot open the temporary file {name!r} that process 0 created next "
                f"to {str(destination)!r}: every process must see the destination's folder as one shared file system"
            ) from error

    # Every process writes its part; none goes on before all reported.
    _together(
        write_part,
        lambda failed: f"process(es) {failed} could not write their part of {str(destination)!r}; not published",
    )

    # Process 0 publishes (only its stack holds the file); every process returns once it did, or raises.
    _as_leader(stack.close, f"process 0 could not publish {str(destination)!r}")


def _as_leader(action: Callable[[], object], failure: str) -> None:
    """Runs ``action`` in process 0 only, and has every process return or raise (RuntimeError(failure)) together."""
    import jax

    _together(lambda: action() if jax.process_index() == 0 else None, lambda _: failure)


def _together(action: Callable[[], object], failure: Callable[[list[int]], str]) -> None:
    """Runs ``action`` in every process; each then returns, or raises its own error or RuntimeError(failure(failed))."""
    import jax

    if jax.process_count() == 1:
        action()
        return
    error: BaseException | None = None
    try:
        action()
    except Exception as caught:
        error = caught
    failed = _failed_processes(error is None)
    if error is not None:
        raise error
    if failed:
        raise RuntimeError(failure(failed))


def _write_header(path: pathlib.Path, header: bytes, size: int) -> None:
    descriptor = os.open(path, os.O_WRONLY)
    try:
        _write_at(descriptor, memoryview(header), 0)
        # The payload's length is known now, so every process writes inside the file.
        os.ftruncate(descriptor, size)
    finally:
        os.close(descriptor)


def _write_owned_shards(
    path: pathlib.Path,
    payload_start: int,
    entries: list[_Entry],
    arrays: Mapping[str, Any],
    reporter: Reporter,
    *,
    flush: bool,
) -> None:
    descriptor = os.open(path, os.O_WRONLY)
    try:
        for name, _, shape, start, _ in entries:
            for shard in arrays[name].addressable_shards:
                if shard.replica_id != 0:
                    continue
                data = np.asarray(shard.data)
                runs = shard_runs(shape, data.itemsize, box_of_index(shard.index, shape))
                if not runs.nbytes:
                    continue
                data = np.ascontiguousarray(data)
                if _dtypes.is_big_endian_in_memory(data.dtype):
                    data = data.byteswap().view(data.dtype.newbyteorder())
                flat = data.reshape(-1).view(np.uint8).data
                for low, offset, length in runs.pieces(_WRITE_CHUNK_BYTES):
                    _write_at(descriptor, flat[low : low + length], payload_start + start + offset)
                    reporter.advance(length)
                del data, flat
        if flush:
            # On a network file system, another process's flush need not cover these writes.
            os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _write_at(descriptor: int, view: memoryview, offset: int) -> None:
    while view.nbytes:
        written = os.pwrite(descriptor, view, offset)
        view = view[written:]
        offset += written


def _broadcast_text(text: str) -> str:
    from jax.experimental import multihost_utils

    raw = text.encode("utf-8")
    if len(raw) > _MAX_NAME_BYTES:
        raw = b""
    message = np.zeros(_MAX_NAME_BYTES + 1, dtype=np.int32)
    message[0] = len(raw)
    message[1 : 1 + len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    received = np.asarray(multihost_utils.broadcast_one_to_all(message))
    return bytes(received[1 : 1 + int(received[0])].astype(np.uint8)).decode("utf-8")


def _failed_processes(succeeded: bool) -> list[int]:
    from jax.experimental import multihost_utils

    flags = np.asarray(multihost_utils.process_allgather(np.array([int(succeeded)], dtype=np.int32)))
    return [index for index, flag in enumerate(flags.reshape(-1).tolist()) if not flag]
