"""MkDocs hook: the repository files the site includes, and the inventories it links through.

The migration guide, the changelogs and the contributing guide are included
from their places in the repository: a page whose whole text is the line
``--8<-- "PATH"`` renders the file at PATH, which this hook reads. Their relative
links are written for a reader of the repository. Here a link to a file that is also a
page of the site (an included file, or a page under docs/) becomes a link to
that page, and a link to any other file of
the repository becomes its text followed by the path, since the site does not
carry that file. A link to a path that does not exist is left alone, so the
strict build still reports it.

mkdocs.yml lists an inventory for each project the API reference links to
(Python, NumPy, JAX, Grain, Orbax) as ``inventory:NAME``, with the project's
documentation root as ``base_url``. A build cannot download them, so this hook
builds each from the installed package (docs/inventories.py) into build/ and
points mkdocstrings at that file, before mkdocstrings reads the list.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re
import sys
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import event_priority

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Repository file -> the page that renders it.
PAGES = {
    "MIGRATION.md": "migration.md",
    "CONTRIBUTING.md": "contributing.md",
    **{
        f"packages/{folder}/CHANGELOG.md": f"changelog/{'tinax' if folder == 'tinax-meta' else folder}.md"
        for folder in (
            "tinax-core",
            "tinax-parallel",
            "tinax-data",
            "tinax-checkpointing",
            "tinax-weights",
            "tinax-meta",
        )
    },
}
# Where the built inventories are kept between builds (git-ignored).
INVENTORIES = ROOT / "build" / "docs-inventories"
_INVENTORY_SCHEME = "inventory:"
_INCLUDE = re.compile(r'--8<-- "([^"]+)"')
_LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s#]*)(#[^)\s]*)?\)")


def _rewrite(markdown: str, source: str, page: str) -> str:
    source_folder = pathlib.PurePosixPath(source).parent
    page_depth = len(pathlib.PurePosixPath(page).parent.parts)

    def replace(match: re.Match[str]) -> str:
        text, target, anchor = match.group(1), match.group(2), match.group(3) or ""
        if not target or "://" in target or target.startswith("mailto:"):
            return match.group(0)
        resolved = (ROOT / source_folder / target).resolve()
        if not resolved.exists():
            return match.group(0)
        relative = resolved.relative_to(ROOT).as_posix()
        if relative in PAGES:
            return f"[{text}]({'../' * page_depth}{PAGES[relative]}{anchor})"
        if relative.startswith("docs/") and relative.endswith(".md"):
            return f"[{text}]({'../' * page_depth}{relative.removeprefix('docs/')}{anchor})"
        return f"{text} (`{relative}` in the repository)"

    return _LINK.sub(replace, markdown)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Replaces an include line by the file's text, with its links rewritten."""
    match = _INCLUDE.fullmatch(markdown.strip())
    if match is None:
        return markdown
    source = match.group(1)
    text = (ROOT / source).read_text(encoding="utf-8")
    return _rewrite(text, source, page.file.src_uri)


def _inventories() -> Any:
    """docs/inventories.py, which mkdocs does not put on the import path."""
    name = "tinax_docs_inventories"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "inventories.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@event_priority(100)  # Before mkdocstrings reads the inventories (its on_config).
def on_config(config: MkDocsConfig, **_: Any) -> MkDocsConfig:
    """Builds each ``inventory:NAME`` inventory and gives mkdocstrings its file."""
    handler = config.plugins["mkdocstrings"].config.handlers.get("python", {})
    for inventory in handler.get("inventories", []):
        if isinstance(inventory, dict) and str(inventory.get("url", "")).startswith(_INVENTORY_SCHEME):
            project = inventory["url"].removeprefix(_INVENTORY_SCHEME)
            inventory["url"] = _inventories().write(project, INVENTORIES).as_uri()
    return config
