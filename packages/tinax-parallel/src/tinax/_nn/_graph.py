"""Snapshots, restores and clones of Flax NNX graphs.

flax (the ``nnx`` extra of ``tinax-parallel``) is imported inside each function, never with ``tinax.nn``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import jax
import numpy as np

from tinax._core import validation
from tinax._core.optional import import_optional

if TYPE_CHECKING:
    from flax import nnx

__all__ = ["clone_graph", "restore_graph", "snapshot_graph"]

T = TypeVar("T")

_INSTALL_HINT = 'pip install "tinax-parallel[nnx]"'


def _import_nnx(function: str) -> Any:
    """Imports ``flax.nnx`` on first use, naming the extra when it is missing."""
    return import_optional("flax.nnx", needed_by=f"tinax.nn.{function}", install_hint=_INSTALL_HINT)


def _require_module(flax_nnx: Any, module: object) -> None:
    validation.require_instance(module, "module", flax_nnx.Module, "a flax.nnx.Module")


def _private(value: T) -> T:
    """Copies the NumPy arrays in ``value`` (they can be written in place); shares the rest."""
    copied: T = jax.tree.map(lambda leaf: leaf.copy() if isinstance(leaf, np.ndarray) else leaf, value)
    return copied


def _detached(flax_nnx: Any, tree: T) -> T:
    """Rebuilds a state tree with new Variables (metadata and original order kept) and copied NumPy buffers."""

    def rebuild(leaf: Any) -> Any:
        if isinstance(leaf, flax_nnx.Variable):
            return leaf.copy(_private(leaf.get_raw_value()), _copy_ref=False)
        return _private(leaf)

    rebuilt: T = jax.tree.map(rebuild, tree, is_leaf=lambda leaf: isinstance(leaf, flax_nnx.Variable))
    return rebuilt


def snapshot_graph(module: T) -> nnx.GraphState[T]:
    """Captures a module's graph and state, independent of later changes to it.

    The snapshot holds the graph definition (types, structure, shared submodules and variables)
    and new Variable objects, so later assignments to the module do not change it. JAX arrays
    are shared, not copied: donating the module's buffers (``donate_argnums``) deletes them for
    the snapshot too. NumPy values are copied; the module is not modified.

    Args:
      module: A ``flax.nnx.Module``.

    Returns:
      A ``flax.nnx.GraphState`` that :func:`restore_graph` turns back into a module of the same type.

    Raises:
      TypeError: If ``module`` is not a ``flax.nnx.Module``.
      ImportError: If flax is not installed.

    Examples:
      >>> from flax import nnx
      >>> from tinax.nn import restore_graph, snapshot_graph
      >>> layer = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
      >>> snapshot = snapshot_graph(layer)
      >>> layer.bias[...] = layer.bias[...] + 1.0  # a later change does not reach the snapshot
      >>> float(restore_graph(snapshot, copy=True).bias[...].sum())
      0.0
    """
    flax_nnx = _import_nnx("snapshot_graph")
    _require_module(flax_nnx, module)
    snapshot: nnx.GraphState[T] = _detached(flax_nnx, flax_nnx.unpack(module))
    return snapshot


def restore_graph(snapshot: nnx.GraphState[T], *, copy: bool) -> T:
    """Builds a module from a snapshot, with its concrete type and aliases.

    Args:
      snapshot: A ``flax.nnx.GraphState``, such as one from :func:`snapshot_graph`.
      copy: True gives the module its own Variables (and NumPy buffers), so the snapshot can be
        restored again unchanged. False uses the snapshot's Variables: assigning to the module
        changes the snapshot and every other module restored from it with ``copy=False``.

    Returns:
      The restored module.

    Raises:
      TypeError: If ``snapshot`` is not a ``flax.nnx.GraphState`` of a module, or ``copy`` is not a bool.
      ImportError: If flax is not installed.

    Examples:
      >>> from flax import nnx
      >>> from tinax.nn import restore_graph, snapshot_graph
      >>> snapshot = snapshot_graph(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
      >>> first, second = restore_graph(snapshot, copy=True), restore_graph(snapshot, copy=True)
      >>> type(first).__name__, first is second
      ('Linear', False)
    """
    flax_nnx = _import_nnx("restore_graph")
    validation.require_instance(snapshot, "snapshot", flax_nnx.GraphState, "a flax.nnx.GraphState")
    validation.require_bool(copy, "copy")
    graphdef = getattr(snapshot, "_graphdef", None)
    nodes = getattr(graphdef, "nodes", None)
    root = getattr(nodes[0], "type", None) if nodes else None
    if not (isinstance(root, type) and issubclass(root, flax_nnx.Module)):
        validation.fail_type("snapshot", "a flax.nnx.GraphState that describes a flax.nnx.Module", snapshot)
    restored: T = flax_nnx.merge(_detached(flax_nnx, snapshot) if copy else snapshot)
    return restored


def clone_graph(module: T) -> T:
    """Copies a module with new Variables, keeping its type and shared parts.

    Shared submodules and variables stay shared the same way in the clone, and random streams
    continue from the same state; assigning to either module's variables does not affect the
    other. JAX arrays are shared (see :func:`snapshot_graph` about donation); NumPy values are copied.

    Args:
      module: A ``flax.nnx.Module``.

    Returns:
      The clone, of the same type as ``module``.

    Raises:
      TypeError: If ``module`` is not a ``flax.nnx.Module``.
      ImportError: If flax is not installed.

    Examples:
      >>> from flax import nnx
      >>> from tinax.nn import clone_graph
      >>> layer = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
      >>> twin = clone_graph(layer)
      >>> type(twin) is nnx.Linear, twin is layer
      (True, False)
    """
    flax_nnx = _import_nnx("clone_graph")
    _require_module(flax_nnx, module)
    clone: T = flax_nnx.merge(_detached(flax_nnx, flax_nnx.unpack(module)))
    return clone
