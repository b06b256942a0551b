"""The inspectors the installed members register, and which of them reads a path.

tinax-core knows no file format. Each member registers one :class:`Inspector`
per kind it reads in the ``tinax.inspectors`` entry-point group, the entry
point's name being the kind::

    [project.entry-points."tinax.inspectors"]
    safetensors = "tinax._weights._sniff:SAFETENSORS"

An inspector's module imports only the standard library, so that telling
the kind imports no member's readers. Its ``sniff`` tells the kind from the
content, never the name, through a :class:`Probe`; only the inspector of the
kind found is imported. Readers that keep no count of their own leave
``Report.bytes_read`` unset, and :func:`run` counts what the process read
meanwhile: the ``rchar`` field of ``/proc/self/io`` (every read of every
thread, Linux only).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import pathlib
import stat
from collections.abc import Callable
from importlib import metadata
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from tinax._core._command._report import InspectOptions, Report

__all__ = ["GROUP", "HEAD_BYTES", "Inspector", "Probe", "detect", "installed", "run"]

#: The entry-point group every member registers its inspectors in.
GROUP = "tinax.inspectors"
#: The bytes a :class:`Probe` reads from the start of every file.
HEAD_BYTES = 4096


class Probe:
    """What a sniffer may look at: a folder's path, or a file's first :data:`HEAD_BYTES`, size and more on request.

    Attributes:
      path: The path being told.
      is_folder: Whether it is a folder (then ``head`` is empty and ``size`` 0).
      head: The file's first :data:`HEAD_BYTES` (all of a smaller file).
      size: The file's size.
      bytes_read: Every byte read from the file so far.
    """

    def __init__(self, path: pathlib.Path, handle: BinaryIO | None, size: int | None = None) -> None:
        self.path = path
        self.is_folder = handle is None
        self._handle = handle
        if size is None:
            size = 0 if handle is None else os.fstat(handle.fileno()).st_size
        self.size = size
        self.bytes_read = 0
        self.head = self.read(0, HEAD_BYTES)

    def read(self, offset: int, count: int) -> bytes:
        """Reads up to ``count`` bytes of the file from ``offset`` (nothing of a folder), counted in ``bytes_read``."""
        if self._handle is None or offset >= self.size:
            return b""
        self._handle.seek(offset)
        data = self._handle.read(count)
        self.bytes_read += len(data)
        return data


@dataclasses.dataclass(frozen=True)
class Inspector:
    """One kind of file or folder a member reads.

    Attributes:
      description: The kind in words (``"safetensors file"``).
      sniff: Whether a :class:`Probe`'s path is of this kind; cheap, and reads only through the probe.
      inspect: ``"module:function"`` of the inspector, imported only for a path of this kind: the function
        takes ``(path, options)`` and returns a :class:`~tinax._core._command._report.Report`.
      order: Sniffers run in ascending order (then by kind); a signature that other kinds' content can
        also show (one byte, a footer) has a higher order.
      patterns: Whether the inspector also describes the files a glob pattern matches, as one (a dataset
        of many files): the kind is told from the first file the pattern matches in sorted order.
    """

    description: str
    sniff: Callable[[Probe], bool]
    inspect: str
    order: int = 0
    patterns: bool = False


def installed() -> dict[str, Inspector]:
    """Returns every registered inspector by kind, in the order their sniffers run."""
    found: dict[str, Inspector] = {}
    for entry_point in metadata.entry_points(group=GROUP):
        found.setdefault(entry_point.name, entry_point.load())
    return dict(sorted(found.items(), key=lambda item: (item[1].order, item[0])))


def detect(path: pathlib.Path, inspectors: dict[str, Inspector]) -> tuple[str | None, int]:
    """Tells the kind of ``path`` from its content.

    Returns:
      The kind of the first inspector whose sniffer recognises ``path`` (None
      if none does, or if it is neither a file nor a folder), and the bytes read.
    """
    mode = path.stat().st_mode
    if not stat.S_ISDIR(mode) and not stat.S_ISREG(mode):
        return None, 0
    with contextlib.ExitStack() as stack:
        handle = None if stat.S_ISDIR(mode) else stack.enter_context(open(path, "rb", buffering=0))
        probe = Probe(path, handle)
        kind = next((kind for kind, inspector in inspectors.items() if inspector.sniff(probe)), None)
    return kind, probe.bytes_read


def detect_object(
    handle: BinaryIO, size: int, path: pathlib.Path, inspectors: dict[str, Inspector]
) -> tuple[str | None, int]:
    """Tells the kind of an object in a bucket, opened for ranged reads, from its content; see :func:`detect`."""
    probe = Probe(path, handle, size)
    kind = next((kind for kind, inspector in inspectors.items() if inspector.sniff(probe)), None)
    return kind, probe.bytes_read


def run(inspector: Inspector, path: pathlib.Path | str, options: InspectOptions) -> Report:
    """Imports ``inspector``'s function and runs it on ``path``, counting the process's reads if it keeps no count."""
    module, _, name = inspector.inspect.partition(":")
    function: Callable[[pathlib.Path | str, InspectOptions], Report] = getattr(importlib.import_module(module), name)
    start = _process_bytes_read()
    report = function(path, options)
    if report.bytes_read is None and start is not None:
        end = _process_bytes_read()
        report.bytes_read = None if end is None else end - start
    return report


def _process_bytes_read() -> int | None:
    try:
        with open("/proc/self/io", "rb") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    return next((int(value) for name, _, value in (line.partition(b":") for line in lines) if name == b"rchar"), None)
