"""Snapshots, restores and clones of Flax NNX graphs with explicit copy policy.

:func:`snapshot_graph` captures a module so later changes to it do not show,
:func:`restore_graph` turns a snapshot back into a module of the same type,
sharing or copying its variables as asked, and :func:`clone_graph` copies a
module's variables while keeping shared submodules shared. These helpers
need the ``nnx`` extra of ``tinax-parallel`` and import flax only when they
are called.
"""

from tinax._core._command._versions import distribution_version as _distribution_version
from tinax._nn._graph import clone_graph as clone_graph
from tinax._nn._graph import restore_graph as restore_graph
from tinax._nn._graph import snapshot_graph as snapshot_graph

__all__ = [
    "clone_graph",
    "restore_graph",
    "snapshot_graph",
]

#: The version of the installed tinax-parallel distribution, which ships this module.
__version__: str = _distribution_version("tinax-parallel", __file__)
