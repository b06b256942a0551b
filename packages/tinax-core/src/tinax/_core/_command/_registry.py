"""The inspectors the installed members register, and which of them reads a path.

Members register an :class:`Inspector` per kind in the ``tinax.inspectors`` entry-point group;
sniffing uses only the standard library and the content. :func:`run` counts ``rchar`` of
``/proc/self/io`` for readers keeping no count. See docs/guide/command-line.md,
"How kinds are registered".
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
    """What a sniffer may see: a folder's path, or a file's first :data:`HEAD_BYTES`, ``size`` and reads on request."""

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
        """Reads up to ``count`` bytes from ``offset`` (nothing for a folder), counted in ``bytes_read``."""
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
      sniff: Whether a :class:`Probe` is of this kind; cheap, reading only through the probe.
      inspect: ``"module:function"`` taking ``(path, options)`` and returning a ``Report``; imported
        only for a path of this kind.
      order: Sniffers run in ascending order (then by kind); weak signatures get a higher order.
      patterns: Whether a glob pattern's files are described as one dataset, told by the first match.
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
    """The kind of the first inspector recognising ``path`` (None also for non-files/folders), and bytes read."""
    mode = path.stat().st_mode
    if not stat.S_ISDIR(mode) and not stat.S_ISREG(mode):
        return None, 0
    with contextlib.ExitStack() as stack:
        handle = None if stat.S_ISDIR(mode) else stack.enter_context(open(path, "rb", buffering=0))
        return detect_object(handle, None, path, inspectors)


def detect_object(
    handle: BinaryIO | None, size: int | None, path: pathlib.Path, inspectors: dict[str, Inspector]
) -> tuple[str | None, int]:
    """Like :func:`detect`, for a bucket object opened for ranged reads (or a folder, without ``handle``)."""
    probe = Probe(path, handle, size)
    kind = next((kind for kind, inspector in inspectors.items() if inspector.sniff(probe)), None)
    return kind, probe.bytes_read


def run(inspector: Inspector, path: pathlib.Path | str, options: InspectOptions) -> Report:
    """Runs ``inspector``'s function on ``path``, counting the process's reads if it keeps no count."""
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
