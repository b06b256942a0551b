"""Writing ArrayRecord files: 0.2's JSON records, or the tinax record format with its header record last.

Records ``json.dumps`` takes (judged by the first) are written as tinax 0.2
wrote them, one UTF-8 JSON text each; others go in the tinax record format,
ending in a ``tinax-records`` header record (see docs/guide/data.md, "The tinax
record format"). The file appears only once whole; array-record is imported lazily.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import pathlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from typing import Any

from tinax._core import storage, validation
from tinax._core._compat02 import MissingPathError, also_raised_as
from tinax._core.files import atomic_path
from tinax._core.logs import Operation, get_logger
from tinax._core.progress import Progress, ProgressChoice, require_progress
from tinax._data._compat02 import ArrayRecordWriteError
from tinax._data._records._array_record import _HEADER_MAGIC, _array_record_module
from tinax._data._records._paths import DestinationErrors, require_record_path, writable_destination
from tinax._data._records._record_codec import RecordHeader, RecordSchema

__all__ = ["write_array_record"]

_logger = get_logger("data")

_DESTINATION_ERRORS = DestinationErrors(
    also_raised_as(ArrayRecordWriteError, FileNotFoundError),
    also_raised_as(ArrayRecordWriteError, NotADirectoryError),
    also_raised_as(ArrayRecordWriteError, IsADirectoryError),
)
#: The system's refusals a write keeps the class of (array-record, so 0.2, raised a RuntimeError).
_KEPT_WRITE_ERRORS = (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)


def write_array_record(
    path: str | os.PathLike[str],
    records: Iterable[Mapping[str, Any]],
    *,
    group_size: int = 1,
    overwrite: bool = True,
    progress: Progress = None,
) -> None:
    """Writes records to an ArrayRecord file, atomically.

    Records are streamed, so ``records`` may be a generator larger than memory.
    Records ``json.dumps`` takes are written as tinax 0.2 wrote them (UTF-8 JSON,
    read back as ``json.loads`` gives); if the first record holds NumPy arrays or
    bytes, all are written in the tinax record format and read back exactly. The
    file appears only once fully written and flushed; a refused record leaves any
    old file untouched. A successful write logs one INFO line (rows, bytes,
    seconds) to the ``tinax.data`` logger.

    Args:
      path: The file; its folder must exist, and a symlink there is followed. A
        ``gs://`` or ``s3://`` URL is uploaded as one whole object (needs the
        ``gcs`` or ``s3`` extra).
      records: An iterable of records (a ``str``, ``bytes`` or mapping is refused).
      group_size: Records per ArrayRecord chunk: 1 (the default) reads fastest at
        random, larger groups compress better.
      overwrite: Whether a file already at ``path`` is replaced (default True, as in 0.2).
      progress: None, a callable ``progress(done, total)`` (``total`` None for
        records without a length; raising stops the write), or ``"bar"`` for a
        progress bar on standard error (tqdm, else rich).

    Raises:
      TypeError: If an argument's type is wrong, or a record is neither JSON nor tinax (later ones also ``ValueError``).
      ValueError: If ``group_size`` is out of range, ``progress`` is another str, or a JSON record is circular.
      ArrayRecordWriteError: A RuntimeError, as in 0.2, if the path is unusable or the write fails (also an OSError).
      FileExistsError: If a file exists at ``path`` and ``overwrite`` is False.
      ImportError: If array-record, tqdm or rich for ``progress="bar"``, or the URL's store client is missing.

    Examples:
      >>> import numpy as np
      >>> from tinax.data import read_array_record, write_array_record
      >>> write_array_record("rows.array_record", ({"x": np.full(2, i), "label": i % 2} for i in range(3)))
      >>> len(read_array_record("rows.array_record"))
      3
    """
    # After a NumPy integer group_size, which tinax 0.2 refused with TypeError, a later refusal is both types.
    with validation.reported_as_both(validation.is_non_python_int(group_size)):
        remote = storage.as_remote(path, "path")
        destination = (
            require_record_path(path, "path", empty_error=also_raised_as(ArrayRecordWriteError, MissingPathError))
            if remote is None
            else None
        )
        group_size = validation.require_positive_int(group_size, "group_size")
        validation.require_bool(overwrite, "overwrite")
        if isinstance(records, (Mapping, str, bytes, bytearray)) or not isinstance(records, Iterable):
            validation.fail_type("records", "an iterable of records (not a str, bytes or a single mapping)", records)
        reporting = require_progress(progress, needed_by="tinax.data.write_array_record")
    module = _array_record_module("write_array_record")
    options = f"group_size:{group_size}"
    if remote is None:
        assert destination is not None
        with _reported_as_write_errors(destination):
            destination = writable_destination(destination, _DESTINATION_ERRORS)
        operation = Operation(_logger, "wrote", "records to", destination)
        count = _write_file(module, destination, options, records, overwrite=overwrite, reporting=reporting)
        nbytes = _size(destination) if operation.enabled else None
    else:
        # array-record writes local files only: the whole file is written locally, then published as one
        # object that appears whole or not at all (and, without overwrite, only where none is).
        fs = storage.filesystem(remote, distribution="tinax-data", needed_by="tinax.data.write_array_record")
        operation = Operation(_logger, "wrote", "records to", remote.url)
        with storage.local_copy_to_publish(fs, remote, overwrite=overwrite) as local:
            count = _write_file(module, local, options, records, overwrite=True, reporting=reporting)
            nbytes = _size(local)
    if operation.enabled:
        operation.what = f"{count} {'record' if count == 1 else 'records'} to"
        operation.done(rows=count, nbytes=nbytes)


def _write_file(
    module: Any,
    destination: pathlib.Path,
    options: str,
    records: Iterable[Any],
    *,
    overwrite: bool,
    reporting: ProgressChoice,
) -> int:
    """Writes checked records to a local file, atomically; returns how many."""
    total = len(records) if isinstance(records, Sized) else None
    # The last report comes before the file is published, so a callback that raises leaves nothing behind.
    with (
        _published(destination, overwrite=overwrite) as temporary,
        reporting.reporting(total, unit="rows", description=destination.name) as reporter,
    ):
        return _write_records(module, temporary, options, iter(records), destination, reporter.advance)


def _size(path: pathlib.Path) -> int | None:
    """The size of a file just written, for the log line; None if it cannot be found out."""
    try:
        return path.stat().st_size
    except OSError:
        return None


@contextlib.contextmanager
def _reported_as_write_errors(destination: pathlib.Path) -> Iterator[None]:
    """Raises the file-system failures of the block as ArrayRecordWriteError, the RuntimeError of tinax 0.2."""
    try:
        yield
    except OSError as error:
        if isinstance(error, (RuntimeError, FileExistsError)):
            raise
        kept = next((base for base in _KEPT_WRITE_ERRORS if isinstance(error, base)), None)
        kind = ArrayRecordWriteError if kept is None else also_raised_as(ArrayRecordWriteError, kept)
        if error.errno is None:
            raise kind(f"writing {str(destination)!r} failed: {error}") from error
        raise kind(error.errno, f"writing {str(destination)!r} failed: {error.strerror}", error.filename) from error


@contextlib.contextmanager
def _published(destination: pathlib.Path, *, overwrite: bool) -> Iterator[pathlib.Path]:
    """``atomic_path``, whose own file-system failures are ArrayRecordWriteError; the block's errors pass unchanged."""
    manager = atomic_path(destination, overwrite=overwrite)
    with _reported_as_write_errors(destination):
        temporary = manager.__enter__()
    try:
        yield temporary
    except BaseException as error:
        # Removes the temporary file and gives the error back.
        manager.__exit__(type(error), error, error.__traceback__)
        raise
    with _reported_as_write_errors(destination):
        manager.__exit__(None, None, None)


@contextlib.contextmanager
def _writing(module: Any, path: pathlib.Path, options: str, destination: pathlib.Path) -> Iterator[Any]:
    try:
        writer = module.ArrayRecordWriter(str(path), options)
    except RuntimeError as error:
        raise ArrayRecordWriteError(f"array-record could not start writing {str(destination)!r}: {error}") from error
    if not writer.ok():
        raise ArrayRecordWriteError(f"array-record could not start writing {str(destination)!r}")
    try:
        yield writer
    except BaseException:
        with contextlib.suppress(RuntimeError):
            writer.close()
        raise
    try:
        writer.close()
    except RuntimeError as error:
        raise ArrayRecordWriteError(f"writing {str(destination)!r} failed: {error}") from error


_NO_RECORD = object()


def _write_records(
    module: Any,
    temporary: pathlib.Path,
    options: str,
    records: Iterator[Any],
    destination: pathlib.Path,
    advance: Callable[[int], None],
) -> int:
    """Writes the records, calling ``advance(1)`` after each; returns how many were written."""
    with _writing(module, temporary, options, destination) as writer:
        first = next(records, _NO_RECORD)
        if first is _NO_RECORD:
            return 0  # A file without records, as tinax 0.2 wrote it.
        # json.dumps with its defaults, as tinax 0.2 encoded records.
        dumps, write = json.dumps, writer.write
        try:
            data = dumps(first).encode("utf-8")
        except (TypeError, ValueError) as error:
            refused = error
        else:
            # What tinax 0.2 could write, written as it wrote it (names held locally: it runs once per record).
            count = 0
            for encoded in itertools.chain([data], (dumps(record).encode("utf-8") for record in records)):
                try:
                    write(encoded)
                except RuntimeError as error:
                    raise _write_failed(destination, error) from error
                advance(1)
                count += 1
            return count
        return _write_tinax_records(writer, first, records, refused, destination, advance)


def _write_tinax_records(
    writer: Any,
    first: Any,
    rest: Iterator[Any],
    refused: Exception,
    destination: pathlib.Path,
    advance: Callable[[int], None],
) -> int:
    """Writes records whose first one is not JSON in the tinax format, or raises what tinax 0.2 raised."""
    try:
        schema = RecordSchema.from_first_record(first)
        data = schema.encode(first, 0)
        if tuple(first) != schema.names:
            raise _fields_out_of_order(schema, first, 0)
    except (TypeError, ValueError) as error:
        # Neither JSON nor the tinax format: json's error, as tinax 0.2 raised it.
        refused.add_note(f"records[0] does not fit the tinax record format either: {error}")
        raise refused from None
    digest = hashlib.sha256(data)
    _write_record(writer, data, destination)
    advance(1)
    count = 1
    # The loop of _write_record, inlined: it runs once per record.
    encode, names, update, write = schema.encode, schema.names, digest.update, writer.write
    for index, record in enumerate(rest, start=1):
        try:
            data = encode(record, index)
            if tuple(record) != names:
                raise _fields_out_of_order(schema, record, index)
        except TypeError:
            raise
        except ValueError as error:
            # A ValueError, and the TypeError tinax 0.2 raised.
            raise validation.TypeAndValueError(
                f"{error}; records must all fit the tinax record format once records[0] is not JSON ({refused})"
            ) from error
        update(data)
        try:
            write(data)
        except RuntimeError as error:
            raise _write_failed(destination, error) from error
        advance(1)
        count += 1
    header = RecordHeader(schema, count, digest.hexdigest())
    _write_record(writer, _HEADER_MAGIC + header.to_json_bytes(), destination)
    return count


def _fields_out_of_order(schema: RecordSchema, record: Any, index: int) -> ValueError:
    return ValueError(
        f"records[{index}] must have the fields of records[0] in its order {list(schema.names)}, got {list(record)}"
    )


def _write_record(writer: Any, data: bytes, destination: pathlib.Path) -> None:
    try:
        writer.write(data)
    except RuntimeError as error:
        raise _write_failed(destination, error) from error


def _write_failed(destination: pathlib.Path, error: RuntimeError) -> ArrayRecordWriteError:
    return ArrayRecordWriteError(f"writing {str(destination)!r} failed: {error}")
