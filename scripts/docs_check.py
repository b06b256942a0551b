"""Checks that the documentation site covers every public tinax name.

  python scripts/docs_check.py [--site SITE]

Run after ``mkdocs build`` (``hatch run docs:build`` runs both). It fails when
a public name (packages/tinax-meta/public-api.txt, which the test suite keeps
equal to the modules' ``__all__``), or a public method of a public class, has
no docstring in the sources, when a public
module has no API page (``docs/api/<module>.md`` holding ``::: <module>``), or
when the built page has no entry for one of the module's names.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import griffe

ROOT = pathlib.Path(__file__).resolve().parent.parent
API_LIST = ROOT / "packages" / "tinax-meta" / "public-api.txt"


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


def problems(site: pathlib.Path) -> list[str]:
    """Every missing docstring, API page or API entry, one line each."""
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
        html = built.read_text(encoding="utf-8")
        found.extend(
            f"{module_name}.{name}: missing from the API page"
            for name in names
            if f'id="{module_name}.{name}"' not in html
        )
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
    print(f"docs: every public name of {len(public_names())} modules is documented and on its API page")
    return 0


if __name__ == "__main__":
    sys.exit(main())
