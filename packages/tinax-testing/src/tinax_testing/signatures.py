"""Summarises a callable's signature, for tests that pin it to tinax 0.2's."""

from __future__ import annotations

import inspect

__all__ = ["parameter_summary"]


def parameter_summary(function: object) -> list[tuple[str, str, object]]:
    """Lists ``(name, kind, default)`` per parameter, for signature-compatibility tests.

    ``kind`` is the ``inspect.Parameter`` kind's name (for example
    ``"KEYWORD_ONLY"``), and ``default`` is None where there is none.
    """
    signature = inspect.signature(function)  # type: ignore[arg-type]
    summary: list[tuple[str, str, object]] = []
    for parameter in signature.parameters.values():
        default = None if parameter.default is inspect.Parameter.empty else parameter.default
        summary.append((parameter.name, parameter.kind.name, default))
    return summary
