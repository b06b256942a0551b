"""Griffe extension for the API reference (mkdocs.yml loads it through mkdocstrings).

It changes what the site shows, never the sources:

- A Sphinx role in a docstring (``:func:`save_safetensors```, ``:class:`~a.B```,
  ``:meth:`title <C.m>```) becomes a Markdown cross-reference when its target
  is on an API page, and inline code otherwise. A target is looked up much as
  Sphinx looks it up: in the scope of the object whose docstring holds it (its
  members, its module's names and imports), as a full path, then as the name
  of exactly one public object. A private implementation path
  (``tinax._weights...``) links to the public name that re-exports it.
- A parameter whose default is a private constant (``cache_bytes=DEFAULT_CACHE_BYTES``)
  shows the constant's value as written in the source (``512 << 20``), since a
  reader cannot look the private name up.

The public names are those of packages/tinax-meta/public-api.txt, which the
test suite keeps equal to the modules' ``__all__``.
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Iterator
from typing import Any

import griffe

ROOT = pathlib.Path(__file__).resolve().parent.parent
API_LIST = ROOT / "packages" / "tinax-meta" / "public-api.txt"

# `:role:`body`` with an optional `py:` domain.
ROLE = re.compile(r":(?:py:)?(?P<role>[a-z]+):`(?P<body>[^`]+)`")
# The body `title <target>`.
_TITLED = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$")
# Roles whose target is called: Sphinx shows them with parentheses.
_CALLED = frozenset({"func", "meth"})


def public_names(api_list: pathlib.Path = API_LIST) -> list[str]:
    """The public names, `module.name`, from the checked-in list."""
    return [
        line.strip()
        for line in api_list.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]


class Documented:
    """Which paths have an entry on an API page, and the public path of each private one."""

    def __init__(self, collection: griffe.ModulesCollection, names: list[str]) -> None:
        self.collection = collection
        self.names = names
        # Entry path -> itself; implementation path -> the public entry path.
        self.entries: dict[str, str] = {}
        for name in names:
            module = name.rpartition(".")[0]
            self.entries[module] = module
            try:
                value = collection.get_member(name)
            except (KeyError, ValueError):
                continue
            target = _final(value)
            self.entries[name] = name
            if target is not None:
                self.entries.setdefault(target.path, name)
            if target is not None and target.is_class:
                for member_name in target.members:
                    if not member_name.startswith("_"):
                        self.entries[f"{name}.{member_name}"] = f"{name}.{member_name}"
                        self.entries.setdefault(f"{target.path}.{member_name}", f"{name}.{member_name}")

    def by_name(self, target: str) -> str | None:
        """The one public name called `target`, or None (none, or several)."""
        found = [name for name in self.names if name.rpartition(".")[2] == target]
        return found[0] if len(found) == 1 else None

    def entry(self, path: str) -> str | None:
        """The API page entry for `path` (public or implementation), or None."""
        if path in self.entries:
            return self.entries[path]
        try:
            value = self.collection.get_member(path)
        except (KeyError, ValueError):
            return None
        target = _final(value)
        return None if target is None else self.entries.get(target.path)


def _final(value: griffe.Object | griffe.Alias) -> griffe.Object | None:
    """The object an alias chain ends at (None when it leaves the loaded packages)."""
    try:
        return value.final_target if isinstance(value, griffe.Alias) else value
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def role_target(body: str) -> tuple[str, str]:
    """A role's body as (the text Sphinx shows, the target it names)."""
    body = body.strip()
    titled = _TITLED.match(body)
    if titled:
        return titled.group("title"), titled.group("target").lstrip("~!")
    target = body.lstrip("!")
    if target.startswith("~"):
        target = target[1:]
        return target.rpartition(".")[2], target
    return target, target


def resolve(scope: griffe.Object, target: str) -> str | None:
    """The full path `target` names, read in the scope of `scope`, as Sphinx reads it."""
    target = target.lstrip(".")
    if target.startswith(f"{scope.package.name}."):
        return target
    head, _, rest = target.partition(".")
    try:
        path = scope.resolve(head)
    except (griffe.NameResolutionError, ValueError, KeyError):
        return None
    return f"{path}.{rest}" if rest else path


def convert_roles(text: str, link: Any) -> str:
    """`text` with each Sphinx role replaced by Markdown.

    `link(target)` gives the identifier to link the role to, or None for
    inline code.
    """

    def replace(match: re.Match[str]) -> str:
        shown, target = role_target(match.group("body"))
        if match.group("role") in _CALLED and not shown.endswith(")"):
            shown += "()"
        identifier = None if match.group("body").lstrip().startswith("!") else link(target)
        return f"[`{shown}`][{identifier}]" if identifier else f"`{shown}`"

    return ROLE.sub(replace, text)


def _objects(obj: griffe.Object) -> Iterator[griffe.Object]:
    """`obj` and every object it defines (not what it imports), depth first."""
    yield obj
    for member in obj.members.values():
        if not isinstance(member, griffe.Alias) and (member.is_module or member.is_class or member.is_function):
            yield from _objects(member)
        elif not isinstance(member, griffe.Alias):
            yield member


def private_constant_value(default: Any, documented: Documented, package: str, depth: int = 0) -> Any:
    """The default to show: a private constant's value as written in the source, else `default`."""
    if depth > 4 or not isinstance(default, (griffe.ExprName, griffe.ExprAttribute)):
        return default
    path = default.canonical_path
    if not path.startswith(f"{package}.") or documented.entry(path) is not None:
        return default
    try:
        constant = _final(documented.collection.get_member(path))
    except (KeyError, ValueError):
        return default
    if constant is None or not constant.is_attribute or constant.value is None:
        return default
    return private_constant_value(constant.value, documented, package, depth + 1)


class TinaxAPI(griffe.Extension):
    """Rewrites roles and private default values once the package is loaded."""

    def __init__(self, package: str = "tinax", api_list: str | None = None) -> None:
        """Reads `package` with the public names listed in `api_list` (the checked-in list by default)."""
        super().__init__()
        self.package = package
        self.api_list = pathlib.Path(api_list) if api_list else API_LIST

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        """Rewrites every docstring and default of the package's own objects."""
        if pkg.name != self.package:
            return
        documented = Documented(loader.modules_collection, public_names(self.api_list))
        for obj in _objects(pkg):
            docstring = obj.docstring
            if docstring is not None and ROLE.search(docstring.value):

                def link(target: str, scope: griffe.Object = obj) -> str | None:
                    path = resolve(scope, target)
                    found = None if path is None else documented.entry(path)
                    # Like Sphinx, a name not in scope may still name one public object.
                    return found or documented.by_name(target.lstrip("."))

                docstring.value = convert_roles(docstring.value, link)
                # Parsed sections are cached; parse the new text.
                docstring.__dict__.pop("parsed", None)
            if obj.is_function:
                for parameter in obj.parameters:
                    parameter.default = private_constant_value(parameter.default, documented, self.package)
