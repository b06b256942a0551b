"""Counts the source lines of each distribution: all lines, and code lines.

Usage: python scripts/source_lines.py [ROOT]

ROOT is a checkout of this repository (default: this one). Code lines leave out
blank lines, comment-only lines and docstrings, so that a change to
documentation does not read as a change in code size. Only ``src/`` counts:
tests, scripts and examples are not shipped.
"""

from __future__ import annotations

import ast
import io
import pathlib
import sys
import tokenize


def _docstring_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def code_lines(source: str) -> int:
    """Returns the number of lines that hold code (not blank, comment or docstring)."""
    docstrings = _docstring_lines(ast.parse(source))
    with_code: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            continue
        if token.type == tokenize.ENDMARKER:
            continue
        with_code.update(range(token.start[0], token.end[0] + 1))
    return len(with_code - docstrings)


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    total_all = total_code = 0
    print(f"{'distribution':<22}{'files':>6}{'lines':>8}{'code':>8}")
    for package in sorted((root / "packages").iterdir()):
        sources = sorted((package / "src").rglob("*.py")) if (package / "src").is_dir() else []
        texts = [path.read_text(encoding="utf-8") for path in sources]
        lines = sum(text.count("\n") for text in texts)
        code = sum(code_lines(text) for text in texts)
        total_all += lines
        total_code += code
        print(f"{package.name:<22}{len(sources):>6}{lines:>8}{code:>8}")
    print(f"{'total':<22}{'':>6}{total_all:>8}{total_code:>8}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
