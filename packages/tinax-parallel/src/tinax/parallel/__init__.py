"""Meshes, layouts, placement and manual sharding with explicit policies.

Mesh construction and data placement are separate steps, every layout and
manual-axis call is validated against its mesh before anything is staged, and
process-local construction is never a hidden gather.
"""

from tinax.parallel._mesh import layout, make_mesh
from tinax.parallel._placement import place_host_array
from tinax.parallel._shard_map import shard_mapped

__all__ = [
    "layout",
    "make_mesh",
    "place_host_array",
    "shard_mapped",
]
