"""Weight files for inference hosts: safetensors and Flax msgpack state dicts.

The plain loaders and savers exchange host NumPy arrays; ``load_sharded_safetensors`` and
``save_sharded_safetensors`` move global ``jax.Array`` s to and from safetensors files (single or
indexed multi-file), each process touching only its own shards' bytes. Loads are planned from the
header and refused before any payload is read when over the caller's byte budget; every dtype
comes back exactly (bfloat16 and float8 included); metadata is read and written only under an
explicit size limit; manifests rename, reshape and check tensors. Writes are atomic and replace a
file only when asked. flax is never imported, nor safetensors or msgpack on import.
"""

from tinax._core._command._versions import distribution_version as _distribution_version
from tinax._weights._manifest import TensorManifest, TensorRule
from tinax._weights._msgpack import load_msgpack, save_msgpack
from tinax._weights._safetensors._files import (
    LoadedSafetensors,
    inspect_safetensors,
    load_safetensors,
    save_safetensors,
)
from tinax._weights._safetensors._header import SafetensorsInfo, TensorInfo
from tinax._weights._safetensors._sharded_load import LoadedShardedSafetensors, load_sharded_safetensors
from tinax._weights._safetensors._sharded_save import save_sharded_safetensors

__all__ = [
    "LoadedSafetensors",
    "LoadedShardedSafetensors",
    "SafetensorsInfo",
    "TensorInfo",
    "TensorManifest",
    "TensorRule",
    "inspect_safetensors",
    "load_msgpack",
    "load_safetensors",
    "load_sharded_safetensors",
    "save_msgpack",
    "save_safetensors",
    "save_sharded_safetensors",
]

#: The version of the installed tinax-weights distribution, which ships this module.
__version__: str = _distribution_version("tinax-weights", __file__)
