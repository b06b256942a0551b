"""The installed version of each tinax distribution, for each public module's ``__version__``.

Each public module sets ``__version__ = distribution_version("tinax-...",
__file__)`` with the distribution that ships it. Importing
:mod:`importlib.metadata` alone costs tens of milliseconds, several times
what a light module such as ``tinax.device`` costs, so the version is read
first where an installer puts it: the ``METADATA`` file of the one
``<name>-<version>.dist-info`` folder next to the module's ``tinax``
folder. Only where there is none (an editable install, whose modules stay
in the source tree) is :mod:`importlib.metadata` asked. Each distribution is
read once per process. This module imports only the standard library.
"""

from __future__ import annotations

import os
import re

__all__ = ["UNKNOWN_VERSION", "distribution_version"]

#: The version reported for a distribution whose metadata is not installed
#: (its source folder put on the path by hand): a valid version, lower than any release.
UNKNOWN_VERSION = "0+unknown"

_found: dict[str, str] = {}


def distribution_version(name: str, module_file: str | None = None) -> str:
    """Returns the installed version of the distribution ``name``, or :data:`UNKNOWN_VERSION` if it is not installed.

    Args:
      name: A distribution name, such as ``"tinax-core"``.
      module_file: The ``__file__`` of a module the distribution ships
        (``.../tinax/jit.py``), whose installed metadata is then looked for
        next to its ``tinax`` folder first.
    """
    version = _found.get(name)
    if version is None:
        version = _next_to(name, module_file) if module_file is not None else None
        if version is None:
            from importlib import metadata

            try:
                version = metadata.version(name)
            except metadata.PackageNotFoundError:
                version = UNKNOWN_VERSION
        _found[name] = version
    return version


def _next_to(name: str, module_file: str) -> str | None:
    """The ``Version`` in the METADATA of the one dist-info folder of ``name`` beside the module's ``tinax`` folder."""
    folder = os.path.dirname(os.path.dirname(os.path.abspath(module_file)))
    # Installers name the folder with the name's runs of -, _ and . as one _ (PEP 427, the binary distribution format).
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
