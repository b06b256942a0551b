"""tinax.weights (being built: public names are added here as they land)."""

from tinax.weights._manifest import TensorManifest, TensorRule
from tinax.weights._msgpack import load_msgpack, save_msgpack

__all__ = [
    "TensorManifest",
    "TensorRule",
    "load_msgpack",
    "save_msgpack",
]
