"""Sphinx object inventories for the projects the API reference links to, built offline.

A site build may reach package indexes but not documentation sites, so it cannot
download each project's ``objects.inv``. This module writes one from the
installed package instead: the package's public names, each with the address
that the project's documentation gives such a name. docs/hooks.py writes them
before mkdocstrings reads the ``inventories`` of mkdocs.yml, which holds each
project's documentation root (``base_url``); the addresses here are relative
to it.

The addresses follow each project's documented scheme, so a name the project
exports but does not document links to a page (or an anchor) that is missing.
Only the parts of each project whose scheme is known are listed:

- Python: ``library/<module>.html#<module>.<name>`` for every standard-library
  module, and the builtins on their pages (functions, types, exceptions, constants).
- NumPy: ``reference/generated/numpy.<name>.html`` (scalar types on
  ``arrays.scalars.html``, ``numpy.typing`` on ``typing.html``).
- JAX: ``_autosummary/<name>.html``; ``jax.sharding`` and ``jax.typing``
  document their members on the module's own page.
- Grain: ``grain.<module>.html#<name>`` for its public modules, and the three
  dataset classes on ``grain.dataset.html``.
- Orbax: the V1 API's top-level names, on ``api_reference/checkpoint.v1.html``.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import importlib
import importlib.metadata
import inspect
import io
import pathlib
import sys
import types
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator

# (name, role, address relative to the project's documentation root).
Entry = tuple[str, str, str]

# Standard-library modules that act on import (print, open a browser) or are
# no API: not imported, not listed.
_STDLIB_SKIPPED = frozenset(
    {"antigravity", "this", "idlelib", "turtledemo", "test", "lib2to3", "pydoc_data", "readline", "rlcompleter"}
)
# Submodules with a page of their own in the Python documentation.
_STDLIB_SUBMODULES = (
    "collections.abc",
    "concurrent.futures",
    "importlib.metadata",
    "importlib.resources",
    "logging.config",
    "logging.handlers",
    "multiprocessing.shared_memory",
    "os.path",
    "unittest.mock",
    "urllib.parse",
    "urllib.request",
    "xml.etree.ElementTree",
)
# Builtins documented on library/stdtypes.html and library/constants.html;
# every other builtin is on library/functions.html or library/exceptions.html.
_STDTYPES = frozenset({"str", "list", "tuple", "dict", "set", "frozenset", "bytes", "bytearray", "memoryview", "range"})
_CONSTANTS = frozenset({"None", "True", "False", "Ellipsis", "NotImplemented"})


def role(value: object) -> str:
    """The Sphinx role of a documented value."""
    if isinstance(value, types.ModuleType):
        return "py:module"
    if isinstance(value, type):
        return "py:exception" if issubclass(value, BaseException) else "py:class"
    if callable(value):
        return "py:function"
    return "py:data"


def public_names(module: types.ModuleType) -> list[str]:
    """A module's public names.

    These are its ``__all__`` and what it defines itself (``os.PathLike`` is not
    in ``os.__all__``), or, without ``__all__``, every name without a leading
    underscore.
    """
    names = [name for name in dir(module) if not name.startswith("_")]
    listed = getattr(module, "__all__", None)
    if listed is not None:
        names = [*listed, *(name for name in names if _defined_in(module, name))]
    return sorted({name for name in names if not name.startswith("_")})


def _defined_in(module: types.ModuleType, name: str) -> bool:
    """Whether the module's attribute `name` was defined by the module itself."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return getattr(getattr(module, name), "__module__", None) == module.__name__
        except Exception:  # an attribute that fails to load is not listed
            return False


def _quiet_import(name: str) -> types.ModuleType | None:
    """The module, or None when it cannot be imported here; its warnings and prints are dropped."""
    quiet = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        warnings.simplefilter("ignore")
        try:
            return importlib.import_module(name)
        except Exception:  # any failure only leaves the module out
            return None


def _members(module: types.ModuleType) -> Iterator[tuple[str, object]]:
    """The module's public (name, value) pairs, submodules left out."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in public_names(module):
            try:
                value = getattr(module, name)
            except Exception:  # a name that fails to load is not listed
                continue
            if not isinstance(value, types.ModuleType):
                yield name, value


def _class_members(cls: type) -> Iterator[tuple[str, str]]:
    """A class's own public attributes as (name, role)."""
    for name, value in vars(cls).items():
        if not name.startswith("_"):
            method = inspect.isfunction(value) or inspect.ismethoddescriptor(value) or isinstance(value, classmethod)
            yield name, "py:method" if method else "py:attribute"


def python_entries() -> Iterator[Entry]:
    """The builtins and the standard library, as docs.python.org/3/ places them."""
    for name, value in vars(builtins).items():
        if name.startswith("_"):
            continue
        if name in _CONSTANTS:
            yield name, "py:data", f"library/constants.html#{name}"
        elif isinstance(value, type) and issubclass(value, BaseException):
            yield name, "py:exception", f"library/exceptions.html#{name}"
        elif name in _STDTYPES:
            yield name, "py:class", f"library/stdtypes.html#{name}"
        elif callable(value):
            yield name, role(value), f"library/functions.html#{name}"
    modules = sorted(
        name for name in sys.stdlib_module_names if not name.startswith("_") and name not in _STDLIB_SKIPPED
    )
    for module_name in [*modules, *_STDLIB_SUBMODULES]:
        module = _quiet_import(module_name)
        if module is None:
            continue
        page = f"library/{module_name.lower()}.html"
        yield module_name, "py:module", f"{page}#module-{module_name}"
        for name, value in _members(module):
            yield f"{module_name}.{name}", role(value), f"{page}#{module_name}.{name}"
            if isinstance(value, type) and value.__module__.lstrip("_") == module_name.lstrip("_"):
                for member, member_role in _class_members(value):
                    yield f"{module_name}.{name}.{member}", member_role, f"{page}#{module_name}.{name}.{member}"


def numpy_entries() -> Iterator[Entry]:
    """NumPy's top level, linalg, fft and typing, as numpy.org/doc/stable/ places them."""
    import numpy

    yield "numpy", "py:module", "reference/index.html#module-numpy"
    for module_name in ("numpy", "numpy.linalg", "numpy.fft"):
        module = importlib.import_module(module_name)
        for name, value in _members(module):
            full = f"{module_name}.{name}"
            if isinstance(value, type) and issubclass(value, numpy.generic):
                yield full, "py:class", f"reference/arrays.scalars.html#{full}"
            elif callable(value):
                yield full, role(value), f"reference/generated/{full}.html"
            else:
                yield full, "py:data", f"reference/constants.html#{full}"
    for cls in (numpy.ndarray, numpy.dtype):
        for member, member_role in _class_members(cls):
            full = f"numpy.{cls.__name__}.{member}"
            yield full, member_role, f"reference/generated/{full}.html"
    typing = importlib.import_module("numpy.typing")
    yield "numpy.typing", "py:module", "reference/typing.html#module-numpy.typing"
    for name, value in _members(typing):
        yield f"numpy.typing.{name}", role(value), f"reference/typing.html#numpy.typing.{name}"


# JAX modules whose members each have an _autosummary page.
_JAX_AUTOSUMMARY = (
    "jax",
    "jax.numpy",
    "jax.random",
    "jax.lax",
    "jax.nn",
    "jax.tree",
    "jax.tree_util",
    "jax.dlpack",
    "jax.debug",
    "jax.dtypes",
    "jax.profiler",
    "jax.distributed",
)
# JAX modules that document their members on their own page.
_JAX_INLINE = ("jax.sharding", "jax.typing")


def jax_entries() -> Iterator[Entry]:
    """JAX's documented modules, as docs.jax.dev/en/latest/ places them."""
    for module_name in (*_JAX_AUTOSUMMARY, *_JAX_INLINE):
        module = _quiet_import(module_name)
        if module is None:
            continue
        page = f"{module_name}.html"
        yield module_name, "py:module", f"{page}#module-{module_name}"
        for name, value in _members(module):
            full = f"{module_name}.{name}"
            inline = module_name in _JAX_INLINE
            yield full, role(value), f"{page}#{full}" if inline else f"_autosummary/{full}.html"


_GRAIN_MODULES = (
    "checkpoint",
    "constants",
    "experimental",
    "multiprocessing",
    "samplers",
    "sharding",
    "sources",
    "transforms",
)


def grain_entries() -> Iterator[Entry]:
    """Grain's public modules and dataset classes, as google-grain.readthedocs.io/en/latest/ places them."""
    grain = importlib.import_module("grain")
    for cls in ("MapDataset", "IterDataset", "DatasetIterator"):
        if hasattr(grain, cls):
            yield f"grain.{cls}", "py:class", f"grain.dataset.html#grain.{cls}"
    for module_name in (f"grain.{name}" for name in _GRAIN_MODULES):
        module = _quiet_import(module_name)
        if module is None:
            continue
        page = f"{module_name}.html"
        yield module_name, "py:module", f"{page}#module-{module_name}"
        for name, value in _members(module):
            yield f"{module_name}.{name}", role(value), f"{page}#{module_name}.{name}"


def orbax_entries() -> Iterator[Entry]:
    """The Orbax checkpoint V1 API's top level, as orbax.readthedocs.io/en/latest/ places it."""
    page = "api_reference/checkpoint.v1.html"
    # The V1 API moved from `experimental.v1` to `v1`; the documentation names it `v1`.
    for module_name in ("orbax.checkpoint.experimental.v1", "orbax.checkpoint.v1"):
        module = _quiet_import(module_name)
        if module is None:
            continue
        yield module_name, "py:module", page
        for name, value in _members(module):
            yield f"{module_name}.{name}", role(value), f"{page}#orbax.checkpoint.v1.{name}"


# Project -> (the distribution whose version the inventory records, its entries).
PROJECTS: dict[str, tuple[str | None, Callable[[], Iterable[Entry]]]] = {
    "python": (None, python_entries),
    "numpy": ("numpy", numpy_entries),
    "jax": ("jax", jax_entries),
    "grain": ("grain", grain_entries),
    "orbax": ("orbax-checkpoint", orbax_entries),
}


def inventory_bytes(project: str, version: str, entries: Iterable[Entry]) -> bytes:
    """A Sphinx inventory, format version 2, holding each entry once (the first wins)."""
    seen: dict[str, Entry] = {}
    for entry in entries:
        seen.setdefault(entry[0], entry)
    lines = "".join(f"{name} {kind} 1 {uri} -\n" for name, kind, uri in sorted(seen.values()))
    header = (
        "# Sphinx inventory version 2\n"
        f"# Project: {project}\n"
        f"# Version: {version}\n"
        "# The remainder of this file is compressed using zlib.\n"
    )
    return header.encode() + zlib.compress(lines.encode())


def version_of(distribution: str | None) -> str:
    """The installed version of a distribution (Python's own for None)."""
    if distribution is None:
        return ".".join(map(str, sys.version_info[:3]))
    return importlib.metadata.version(distribution)


def write(project: str, folder: pathlib.Path) -> pathlib.Path:
    """The project's inventory file in `folder`, written unless one for this version exists.

    The file name holds the project's version and a digest of this module, so a
    new release or a changed scheme gives a new file.
    """
    distribution, entries = PROJECTS[project]
    version = version_of(distribution)
    digest = hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()[:12]
    path = folder / f"{project}-{version}-{digest}.inv"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_bytes(inventory_bytes(project, version, entries()))
        partial.replace(path)
        for stale in folder.glob(f"{project}-*.inv"):
            if stale != path:
                stale.unlink()
    return path
