"""Meshes, layouts, placement and manual sharding with explicit policies.

Mesh construction and data placement are separate steps, every layout and
manual-axis call is validated against its mesh before anything is staged, and
process-local construction is never a hidden gather. The Flax NNX helpers need
the ``nnx`` extra and import flax only when they are called.
"""

from tinax._core._command._versions import distribution_version as _distribution_version
from tinax._parallel._mesh import layout, make_mesh
from tinax._parallel._nnx import abstract_sharded_state, eager_sharded_init, state_shardings
from tinax._parallel._payload import addressable_indices, addressable_payload_nbytes, logical_payload_nbytes
from tinax._parallel._placement import place_host_array
from tinax._parallel._process_local import from_process_local_data
from tinax._parallel._shard_map import shard_mapped

__all__ = [
    "abstract_sharded_state",
    "addressable_indices",
    "addressable_payload_nbytes",
    "eager_sharded_init",
    "from_process_local_data",
    "layout",
    "logical_payload_nbytes",
    "make_mesh",
    "place_host_array",
    "shard_mapped",
    "state_shardings",
]

#: The version of the installed tinax-parallel distribution, which ships this module.
__version__: str = _distribution_version("tinax-parallel", __file__)
