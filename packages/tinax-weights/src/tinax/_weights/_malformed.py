"""The error raised for malformed safetensors files.

It is a ValueError, as tinax reports every bad value, and also the upstream
``safetensors.SafetensorError``, which tinax 0.2 let through for such files,
so handlers written for either keep working. Importing this module imports
safetensors, so it is imported only when there is such an error to raise:
``import tinax.weights`` stays free of it.
"""

from __future__ import annotations

from safetensors import SafetensorError

__all__ = ["MalformedSafetensorsError"]


class MalformedSafetensorsError(ValueError, SafetensorError):
    """A safetensors file whose header or size breaks the format."""
