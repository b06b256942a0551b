"""Checks that the documentation site covers every public tinax name, and renders it well.

  python scripts/docs_check.py [--site SITE]

Run after ``mkdocs build`` (``hatch run docs:build`` runs both). It fails when
a public name (packages/tinax-meta/public-api.txt, which the test suite keeps
equal to the modules' ``__all__``), or a public method of a public class, has
no docstring in the sources, when a public
module has no API page (``docs/api/<module>.md`` holding ``::: <module>``), or
when the built page has no entry for one of the module's names. It also fails
when a built page shows

- a Sphinx role as text (``:func:`name```), which Markdown does not know:
  docs/griffe_tinax.py turns the roles it can read into links, so one left is
  written in a form it does not read;
- a Returns or Yields table with more rows than the entry returns values (a
  tuple annotation of N items returns N values, anything else one);
- a default value that is a private tinax name, which a reader cannot look up
  (docs/griffe_tinax.py shows a private constant's value instead).
"""

from __future__ import annotations

import argparse
import html
import pathlib
import re
import sys

import griffe

ROOT = pathlib.Path(__file__).resolve().parent.parent
API_LIST = ROOT / "packages" / "tinax-meta" / "public-api.txt"


# A role as Markdown renders it: the role's name as text, then inline code
# (or a lone backtick, outside code, when the role's backticks did not pair).
_ROLE_CODE = re.compile(r"(?<![\w:])(:(?:[a-z]+:)?[a-z]+:)<code\b[^>]*>(.*?)</code>", re.DOTALL)
_ROLE_TICK = re.compile(r"(?<![\w:])(:(?:[a-z]+:)?[a-z]+:)`([^`<]*)")
_PRE = re.compile(r"<pre\b.*?</pre>", re.DOTALL)
_CODE = re.compile(r"(<code\b[^>]*>).*?(</code>)", re.DOTALL)
_HEADING = re.compile(r'<h[1-6] id="([^"]+)" class="doc doc-heading"')
_SECTION = re.compile(r'<span class="doc-section-title">(Returns|Yields):</span></p>\s*<table>(.*?)</table>', re.DOTALL)
_ROW = '<tr class="doc-section-item">'
# The Default cell, the last of a Parameters row.
_DEFAULT_CELL = re.compile(r"<td>\s*<code>((?:(?!</td>).)*?)</code>\s*</td>\s*</tr>", re.DOTALL)
_PRIVATE_TITLE = re.compile(r'title="(tinax\.(?:[\w]+\.)*_[\w.]*)"')
# Iterator-like annotations whose first argument is the yielded type.
_ITERATORS = frozenset({"Iterator", "Iterable", "Generator", "AsyncIterator", "AsyncIterable", "AsyncGenerator"})


def raw_roles(page: str) -> list[str]:
    """Each Sphinx role that `page` (HTML) shows as text, as it reads there."""
    text = _PRE.sub("", page)
    found = [role + "`" + html.unescape(target) + "`" for role, target in _ROLE_CODE.findall(text)]
    found.extend(role + "`" + html.unescape(target) for role, target in _ROLE_TICK.findall(_CODE.sub(r"\1\2", text)))
    return found


def entries(page: str) -> dict[str, str]:
    """The HTML of each API entry of `page`, by id, up to the next entry's heading."""
    found = list(_HEADING.finditer(page))
    return {
        match.group(1): page[match.end() : found[index + 1].start() if index + 1 < len(found) else len(page)]
        for index, match in enumerate(found)
    }


def section_rows(entry: str) -> dict[str, int]:
    """The number of rows of the entry's Returns and Yields tables."""
    return {match.group(1): match.group(2).count(_ROW) for match in _SECTION.finditer(entry)}


def private_defaults(entry: str) -> list[str]:
    """The private tinax names that the entry's Parameters table shows as defaults."""
    return [name for cell in _DEFAULT_CELL.findall(entry) for name in _PRIVATE_TITLE.findall(cell)]


def value_count(annotation: object, section: str) -> int:
    """How many values an annotation describes: N for a ``tuple`` of N items, else 1.

    For Yields, the annotation is the function's (an iterator or generator),
    and the yielded type is its first argument.
    """
    if section == "Yields" and isinstance(annotation, griffe.ExprSubscript) and annotation.canonical_name in _ITERATORS:
        items = annotation.slice.elements if isinstance(annotation.slice, griffe.ExprTuple) else [annotation.slice]
        annotation = items[0]
    if isinstance(annotation, griffe.ExprSubscript) and annotation.canonical_name == "tuple":
        items = annotation.slice.elements if isinstance(annotation.slice, griffe.ExprTuple) else [annotation.slice]
        if not any(str(item) == "..." for item in items):
            return len(items)
    return 1


def public_names() -> dict[str, list[str]]:
    """Every public module with its public names, from the checked-in list."""
    modules: dict[str, list[str]] = {}
    for line in API_LIST.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            module, _, name = line.strip().rpartition(".")
            modules.setdefault(module, []).append(name)
    return modules


def page_slug(module: str) -> str:
    """``tinax.checkpointing.legacy.v0`` -> ``checkpointing-legacy-v0``."""
    return module.removeprefix("tinax.").replace(".", "-")


def _undocumented(module: griffe.Object | griffe.Alias, names: list[str]) -> list[str]:
    """The public names (and public methods of public classes) without a docstring."""
    found: list[str] = []
    for name in names:
        value = module.get_member(name)
        if not value.docstring or not value.docstring.value.strip():
            found.append(f"{value.path}: no docstring")
        if value.is_class:
            found.extend(
                f"{member.path}: no docstring"
                for member_name, member in value.members.items()
                if not member_name.startswith("_")
                and (member.is_function or "property" in member.labels)
                and not (member.docstring and member.docstring.value.strip())
            )
    return found


def rendering_problems(site: pathlib.Path, collection: griffe.ModulesCollection) -> list[str]:
    """Every raw role, overlong Returns table and private default of the built site, one line each."""
    found: list[str] = []
    for path in sorted(site.rglob("*.html")):
        page = path.read_text(encoding="utf-8")
        where = path.relative_to(site).as_posix()
        found.extend(f"{where}: a Sphinx role shown as text: {role}" for role in raw_roles(page))
        for identifier, entry in entries(page).items():
            found.extend(
                f"{where}: {identifier}: the default {name} is a private name" for name in private_defaults(entry)
            )
            for section, rows in section_rows(entry).items():
                try:
                    function = collection.get_member(identifier)
                except (KeyError, ValueError, griffe.AliasResolutionError):
                    found.append(f"{where}: {identifier}: has a {section} table but is not in the sources")
                    continue
                annotation = function.returns if function.is_function else getattr(function, "annotation", None)
                values = value_count(annotation, section)
                if rows > values:
                    found.append(
                        f"{where}: {identifier}: the {section} table has {rows} rows for {values} value(s)"
                        " (a description of several lines is one value)"
                    )
    return found


def problems(site: pathlib.Path) -> list[str]:
    """Every missing docstring, API page or API entry, and every rendering problem, one line each."""
    # The docstrings as the site renders them: griffe reads the sources, which
    # also documents type aliases and other module attributes.
    loader = griffe.GriffeLoader(docstring_parser="google")
    found: list[str] = []
    modules = public_names()
    for module_name in modules:
        top = ".".join(module_name.split(".")[:2])
        if top not in loader.modules_collection:
            loader.load(top)
    loader.resolve_aliases(implicit=False, external=None)
    for module_name, names in modules.items():
        module = loader.modules_collection.get_member(module_name)
        missing = [name for name in names if name not in module.members]
        found.extend(f"{module_name}.{name}: not found in the sources" for name in missing)
        found.extend(_undocumented(module, [name for name in names if name not in missing]))
        slug = page_slug(module_name)
        source = ROOT / "docs" / "api" / f"{slug}.md"
        if not source.is_file() or f"::: {module_name}\n" not in source.read_text(encoding="utf-8"):
            found.append(f"{module_name}: no API page docs/api/{slug}.md with '::: {module_name}'")
            continue
        built = site / "api" / slug / "index.html"
        if not built.is_file():
            found.append(f"{module_name}: the API page was not built (api/{slug}/index.html)")
            continue
        page = built.read_text(encoding="utf-8")
        found.extend(
            f"{module_name}.{name}: missing from the API page"
            for name in names
            if f'id="{module_name}.{name}"' not in page
        )
    found.extend(rendering_problems(site, loader.modules_collection))
    return found


def main(argv: list[str] | None = None) -> int:
    """Prints every problem; the exit status is 1 when there is one."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--site", type=pathlib.Path, default=ROOT / "site", help="the built site (mkdocs build)")
    arguments = parser.parse_args(argv)
    found = problems(arguments.site)
    for line in found:
        print(f"docs: {line}", file=sys.stderr)
    if found:
        print(f"docs: {len(found)} problem(s)", file=sys.stderr)
        return 1
    print(
        f"docs: every public name of {len(public_names())} modules is documented and on its API page;"
        " no page shows a Sphinx role, an overlong Returns table or a private default"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
