"""The documentation site's build code: the offline inventories, the docstring
extension and the checks of the built pages (docs/inventories.py,
docs/griffe_tinax.py, scripts/docs_check.py).

The site itself is built by ``hatch run docs:build``; these tests hold the
pieces to their contracts without building it.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys
import textwrap
import types
import zlib

import griffe
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _load(name: str, path: pathlib.Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


inventories = _load("docs_inventories", ROOT / "docs" / "inventories.py")
griffe_tinax = _load("docs_griffe_tinax", ROOT / "docs" / "griffe_tinax.py")
docs_check = _load("docs_check", ROOT / "scripts" / "docs_check.py")


def _parse_inventory(data: bytes) -> tuple[list[str], list[str]]:
    """The header lines and the entry lines of a Sphinx inventory, version 2."""
    lines = data.split(b"\n", 4)
    header, body = lines[:4], lines[4]
    return [line.decode() for line in header], zlib.decompress(body).decode().splitlines()


# ---------------------------------------------------------------- inventories


def test_an_inventory_is_a_sphinx_version_2_file_with_each_name_once():
    data = inventories.inventory_bytes(
        "demo",
        "1.2",
        [
            ("b.f", "py:function", "b.html#b.f"),
            ("a.C", "py:class", "a.html#a.C"),
            ("b.f", "py:function", "elsewhere.html"),
        ],
    )
    header, entries = _parse_inventory(data)
    assert header == [
        "# Sphinx inventory version 2",
        "# Project: demo",
        "# Version: 1.2",
        "# The remainder of this file is compressed using zlib.",
    ]
    assert entries == ["a.C py:class 1 a.html#a.C -", "b.f py:function 1 b.html#b.f -"]


def test_roles_follow_what_a_value_is():
    assert inventories.role(json) == "py:module"
    assert inventories.role(pathlib.Path) == "py:class"
    assert inventories.role(ValueError) == "py:exception"
    assert inventories.role(json.dumps) == "py:function"
    assert inventories.role(3) == "py:data"


def test_public_names_include_what_a_module_defines_beyond_its_all():
    module = types.ModuleType("demo")
    module.__all__ = ["listed"]
    module.listed = 1
    module.hidden = 2
    module._private = 3

    class Defined:
        pass

    Defined.__module__ = "demo"
    module.Defined = Defined
    assert inventories.public_names(module) == ["Defined", "listed"]


def test_the_python_inventory_places_builtins_and_the_standard_library_as_docs_python_org_does():
    # Run apart: building it imports the whole standard library.
    wanted = ["str", "int", "ValueError", "None", "os.PathLike", "collections.abc.Mapping"]
    # A method of a class defined in its own module (pathlib.Path moved to
    # pathlib._local in Python 3.13, and is listed under that name there).
    wanted += ["collections.Counter.most_common", "json"]
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(ROOT / "docs")!r})
        import inventories
        found = {{name: [kind, uri] for name, kind, uri in inventories.python_entries()}}
        print(json.dumps({{name: found.get(name) for name in {wanted!r}}}))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=240)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "str": ["py:class", "library/stdtypes.html#str"],
        "int": ["py:class", "library/functions.html#int"],
        "ValueError": ["py:exception", "library/exceptions.html#ValueError"],
        "None": ["py:data", "library/constants.html#None"],
        "os.PathLike": ["py:class", "library/os.html#os.PathLike"],
        "collections.abc.Mapping": ["py:class", "library/collections.abc.html#collections.abc.Mapping"],
        "collections.Counter.most_common": ["py:method", "library/collections.html#collections.Counter.most_common"],
        "json": ["py:module", "library/json.html#module-json"],
    }


def test_the_numpy_and_jax_inventories_follow_their_documented_schemes():
    numpy_entries = {name: uri for name, _, uri in inventories.numpy_entries()}
    assert numpy_entries["numpy.ndarray"] == "reference/generated/numpy.ndarray.html"
    assert numpy_entries["numpy.ndarray.astype"] == "reference/generated/numpy.ndarray.astype.html"
    assert numpy_entries["numpy.float32"] == "reference/arrays.scalars.html#numpy.float32"
    assert numpy_entries["numpy.typing.NDArray"] == "reference/typing.html#numpy.typing.NDArray"
    jax_entries = {name: uri for name, _, uri in inventories.jax_entries()}
    assert jax_entries["jax.jit"] == "_autosummary/jax.jit.html"
    assert jax_entries["jax.numpy.stack"] == "_autosummary/jax.numpy.stack.html"
    assert jax_entries["jax.sharding.Mesh"] == "jax.sharding.html#jax.sharding.Mesh"


def test_the_grain_and_orbax_inventories_list_only_what_has_a_known_place():
    grain_entries = {name: uri for name, _, uri in inventories.grain_entries()}
    assert grain_entries["grain.MapDataset"] == "grain.dataset.html#grain.MapDataset"
    assert grain_entries["grain.sharding.ShardOptions"] == "grain.sharding.html#grain.sharding.ShardOptions"
    assert all(name.count(".") >= 1 for name in grain_entries)
    orbax_entries = {name: uri for name, _, uri in inventories.orbax_entries()}
    assert orbax_entries
    assert all(uri.startswith("api_reference/checkpoint.v1.html") for uri in orbax_entries.values())


def test_an_inventory_file_is_written_once_per_version_and_replaces_older_ones(tmp_path, monkeypatch):
    calls = []

    def entries():
        calls.append(1)
        return [("demo.f", "py:function", "demo.html#demo.f")]

    monkeypatch.setitem(inventories.PROJECTS, "demo", (None, entries))
    stale = tmp_path / "inventories" / "demo-0.1-000000000000.inv"
    stale.parent.mkdir()
    stale.write_bytes(b"an older version's")
    first = inventories.write("demo", tmp_path / "inventories")
    second = inventories.write("demo", tmp_path / "inventories")
    assert first == second
    assert len(calls) == 1
    assert first.name.startswith(f"demo-{inventories.version_of(None)}-")
    assert _parse_inventory(first.read_bytes())[1] == ["demo.f py:function 1 demo.html#demo.f -"]
    assert sorted(first.parent.iterdir()) == [first]


# --------------------------------------------------------- griffe extension


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("save", ("save", "save")),
        ("~pkg.mod.save", ("save", "pkg.mod.save")),
        ("the saver <pkg.mod.save>", ("the saver", "pkg.mod.save")),
        ("!save", ("save", "save")),
    ],
)
def test_a_role_shows_what_sphinx_shows(body, expected):
    assert griffe_tinax.role_target(body) == expected


def test_roles_become_links_to_known_targets_and_code_otherwise():
    text = "See :func:`save`, :class:`~pkg.Hidden`, :meth:`!load` and :py:data:`LIMIT`."
    converted = griffe_tinax.convert_roles(text, {"save": "pkg.api.save", "LIMIT": "pkg.api.LIMIT"}.get)
    assert converted == "See [`save()`][pkg.api.save], `Hidden`, `load()` and [`LIMIT`][pkg.api.LIMIT]."
    assert not griffe_tinax.ROLE.search(converted)


@pytest.fixture
def package(tmp_path):
    """A package laid out like tinax: a public module re-exporting a private one."""
    root = tmp_path / "demo"
    (root / "_impl").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "_impl" / "__init__.py").write_text("")
    (root / "_impl" / "core.py").write_text(
        textwrap.dedent(
            '''
            _BUDGET = 512 << 20


            def read(path, *, budget=_BUDGET):
                """Reads a file; :func:`write` writes one, :class:`Reader` is private."""


            def write(path):
                """Writes a file that :func:`~demo.api.read` reads."""


            class Reader:
                """Private."""
            '''
        )
    )
    (root / "api.py").write_text('from demo._impl.core import read, write\n\n__all__ = ["read", "write"]\n')
    api_list = tmp_path / "public-api.txt"
    api_list.write_text("# names\ndemo.api.read\ndemo.api.write\n")
    return tmp_path, api_list


def test_the_extension_links_roles_to_public_names_and_shows_private_defaults(package):
    search_path, api_list = package
    extension = griffe_tinax.TinaxAPI(package="demo", api_list=str(api_list))
    loader = griffe.GriffeLoader(search_paths=[search_path], extensions=griffe.load_extensions(extension))
    loader.load("demo")
    read = loader.modules_collection.get_member("demo._impl.core.read")
    write = loader.modules_collection.get_member("demo._impl.core.write")
    assert read.docstring.value == "Reads a file; [`write()`][demo.api.write] writes one, `Reader` is private."
    assert write.docstring.value == "Writes a file that [`read()`][demo.api.read] reads."
    assert str(read.parameters["budget"].default) == "512 << 20"


# ------------------------------------------------------------ site checks


def test_a_role_left_as_text_is_found_but_not_one_quoted_in_code():
    page = (
        "<p>See :func:<code>save</code> and :meth:`load.</p>"
        "<p>Write <code>:func:`save`</code> in a docstring.</p>"
        '<pre><code>""":class:`Reader`"""</code></pre>'
        "<p>A ratio 1:2:<code>x</code> is no role.</p>"
    )
    assert docs_check.raw_roles(page) == [":func:`save`", ":meth:`load."]


def test_returns_rows_are_counted_per_entry():
    page = (
        '<h2 id="pkg.f" class="doc doc-heading">f</h2>'
        '<p><span class="doc-section-title">Returns:</span></p>\n<table><tbody>'
        '<tr class="doc-section-item">a</tr><tr class="doc-section-item">b</tr></tbody></table>'
        '<h2 id="pkg.g" class="doc doc-heading">g</h2><p>no sections</p>'
    )
    rows = {identifier: docs_check.section_rows(entry) for identifier, entry in docs_check.entries(page).items()}
    assert rows == {"pkg.f": {"Returns": 2}, "pkg.g": {}}


@pytest.mark.parametrize(
    ("annotation", "section", "values"),
    [
        ("int", "Returns", 1),
        ("tuple[int, str]", "Returns", 2),
        ("tuple[int, ...]", "Returns", 1),
        ("Iterator[tuple[int, str, bytes]]", "Yields", 3),
        ("Iterator[int]", "Yields", 1),
    ],
)
def test_a_tuple_annotation_of_n_items_returns_n_values(annotation, section, values):
    code = f"from typing import Iterator\n\ndef f() -> {annotation}: ...\n"
    module = griffe.visit("demo", pathlib.Path("demo.py"), code)
    assert docs_check.value_count(module["f"].returns, section) == values


def test_a_private_default_is_found():
    entry = (
        "<tr><td><code>budget</code></td><td><code>int</code></td><td>desc</td>"
        '<td>\n<code><span title="tinax._data._records._parquet_write.DEFAULT">DEFAULT</span></code>\n</td>\n</tr>'
        '<tr><td><code>path</code></td><td><code><span title="tinax._data._records._paths.P">P</span></code></td>'
        "<td>desc</td><td>\n<code>None</code>\n</td>\n</tr>"
    )
    assert docs_check.private_defaults(entry) == ["tinax._data._records._parquet_write.DEFAULT"]
