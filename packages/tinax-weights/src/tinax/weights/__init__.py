"""tinax.weights (being built: public names are added here as they land)."""

from tinax.weights._header import SafetensorsInfo, TensorInfo
from tinax.weights._manifest import TensorManifest, TensorRule
from tinax.weights._msgpack import load_msgpack, save_msgpack
from tinax.weights._safetensors import LoadedSafetensors, inspect_safetensors, load_safetensors, save_safetensors

__all__ = [
    "LoadedSafetensors",
    "SafetensorsInfo",
    "TensorInfo",
    "TensorManifest",
    "TensorRule",
    "inspect_safetensors",
    "load_msgpack",
    "load_safetensors",
    "save_msgpack",
    "save_safetensors",
]
