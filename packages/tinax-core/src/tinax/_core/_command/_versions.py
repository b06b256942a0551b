"""The installed version of each tinax distribution, for each public module's ``__version__``.

Importing :mod:`importlib.metadata` costs tens of milliseconds, several times a light module, so
the version is first read from the one ``<name>-<version>.dist-info/METADATA`` beside the module's
``tinax`` folder; only without one (an editable install) is :mod:`importlib.metadata` asked.
Read once per process, with the standard library only.
"""

from __future__ import annotations

import os
import re

__all__ = ["UNKNOWN_VERSION", "distribution_version"]

#: Version of a distribution without installed metadata: valid, and lower than any release.
UNKNOWN_VERSION = "0+unknown"

_found: dict[str, str] = {}


def distribution_version(name: str, module_file: str | None = None) -> str:
    """The installed version of ``name`` (looked up beside ``module_file`` first), or :data:`UNKNOWN_VERSION`."""
    if name not in _found:
        version = _next_to(name, module_file) if module_file is not None else None
        if version is None:
            from importlib import metadata

            try:
                version = metadata.version(name)
            except metadata.PackageNotFoundError:
                version = UNKNOWN_VERSION
        _found[name] = version
    return _found[name]


def _next_to(name: str, module_file: str) -> str | None:
    """The ``Version`` in the METADATA of the one dist-info folder of ``name`` beside the ``tinax`` folder."""
    folder = os.path.dirname(os.path.dirname(os.path.abspath(module_file)))
    # Installers write runs of -, _ and . in the name as one _ (PEP 427).
    pattern = re.compile(re.sub(r"[-_.]+", "_", name) + r"-[^-]+\.dist-info", re.IGNORECASE)
    try:
        matches = [entry for entry in os.listdir(folder) if pattern.fullmatch(entry)]
    except OSError:
        return None
    if len(matches) != 1:
        return None  # none (an editable install) or several (a damaged one): let importlib.metadata decide
    try:
        with open(os.path.join(folder, matches[0], "METADATA"), encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    break  # the headers end at the first blank line
                field, _, value = line.partition(":")
                if field.strip().lower() == "version":
                    return value.strip() or None
    except OSError:
        return None
    return None
