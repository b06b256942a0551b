"""Flax NNX sharding helpers: abstract state, eager initialization, shardings.

flax (the ``nnx`` extra) is imported inside each function, never with ``tinax.parallel``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import jax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from tinax._core import validation
from tinax._core.jax_compat import is_tracer
from tinax._core.optional import import_optional
from tinax._parallel._mesh import require_homogeneous_mesh

if TYPE_CHECKING:
    from flax import nnx

__all__ = ["abstract_sharded_state", "eager_sharded_init", "state_shardings"]

T = TypeVar("T")
StateMapping = TypeVar("StateMapping", bound=Mapping[Any, Any])

_INSTALL_HINT = 'pip install "tinax-parallel[nnx]"'


def _import_nnx(function: str) -> Any:
    """Imports ``flax.nnx`` on first use, naming the extra when it is missing."""
    return import_optional("flax.nnx", needed_by=f"tinax.parallel.{function}", install_hint=_INSTALL_HINT)


def abstract_sharded_state(initializer: Callable[[], T], mesh: Mesh) -> nnx.GraphState[T]:
    """Describes the state an NNX initializer would build, without allocating it.

    The initializer is only traced (``nnx.get_abstract_model``). Each leaf is a
    ``jax.ShapeDtypeStruct`` with a ``NamedSharding`` over the concrete ``mesh``, laid out as the
    variable's partitioning annotation says (replicated without one): a complete restore target
    for Orbax without an ambient mesh, and ``nnx.merge`` turns it back into an abstract module.

    Args:
      initializer: A no-argument callable returning an NNX graph node (an ``nnx.Module``, or
        anything ``nnx.split`` splits: a dict or list of Variables and arrays, None).
      mesh: A ``jax.sharding.Mesh`` whose axes are all ``AxisType.Auto`` or all ``AxisType.Explicit``.

    Returns:
      A ``flax.nnx.GraphState`` pairing the graph definition with the abstract, sharded state.

    Raises:
      TypeError: If ``initializer`` is not callable, ``mesh`` is not a ``Mesh``, or the initializer returns no graph.
      ValueError: If ``mesh`` is empty, has a Manual axis, or mixes Auto and Explicit axes (nothing is traced then).
      ImportError: If flax is not installed.

    Examples:
      >>> import jax
      >>> from jax.sharding import AxisType
      >>> from tinax.parallel import layout, make_mesh
      >>> mesh = make_mesh(jax.devices(), (jax.device_count(),), ("model",), axis_types=(AxisType.Explicit,))
      >>> from flax import nnx
      >>> from jax.sharding import PartitionSpec
      >>> from tinax.parallel import abstract_sharded_state
      >>> def build():
      ...     init = nnx.with_partitioning(nnx.initializers.lecun_normal(), (None, "model"))
      ...     return nnx.Linear(2, 2 * jax.device_count(), kernel_init=init, rngs=nnx.Rngs(0))
      >>> state = abstract_sharded_state(build, mesh)  # nothing is allocated
      >>> kernel = state["kernel"].get_value()
      >>> isinstance(kernel, jax.ShapeDtypeStruct), kernel.sharding.spec == PartitionSpec(None, "model")
      (True, True)
    """
    validation.require_callable(initializer, "initializer")
    require_homogeneous_mesh(mesh)
    flax_nnx = _import_nnx("abstract_sharded_state")

    built: list[object] = []

    def build() -> T:
        node = initializer()
        built.append(node)
        return node

    graphdef, state = flax_nnx.get_abstract_model(build, mesh)
    # A lone array or number gives a bare leaf instead of a GraphDef and a State.
    if not isinstance(graphdef, flax_nnx.GraphDef) or not isinstance(state, Mapping):
        validation.fail_type("initializer()", "an NNX graph node such as an nnx.Module", built[-1] if built else state)
    abstract: nnx.GraphState[T] = flax_nnx.GraphState(graphdef, state)
    return abstract


def eager_sharded_init(initializer: Callable[[], T], mesh: Mesh) -> T:
    """Builds NNX state with every annotated variable already laid out on a mesh.

    The initializer runs once with ``mesh`` as the ambient mesh and Flax's eager sharding on,
    whatever the caller's setting, so each variable with a partitioning annotation (e.g. from
    ``nnx.with_partitioning``) is placed as soon as it exists; others are replicated.

    Args:
      initializer: A no-argument callable that builds and returns NNX state, such as an ``nnx.Module``.
      mesh: A ``jax.sharding.Mesh`` whose axes are all ``AxisType.Auto`` or all ``AxisType.Explicit``.

    Returns:
      Whatever ``initializer`` returns.

    Raises:
      TypeError: If ``initializer`` is not callable or ``mesh`` is not a ``jax.sharding.Mesh``.
      ValueError: If ``mesh`` is empty, has a Manual axis, or mixes Auto and Explicit axes (``initializer`` not called).
      ImportError: If flax is not installed.

    Examples:
      >>> import jax
      >>> from jax.sharding import AxisType
      >>> from tinax.parallel import layout, make_mesh
      >>> mesh = make_mesh(jax.devices(), (jax.device_count(),), ("model",), axis_types=(AxisType.Explicit,))
      >>> from flax import nnx
      >>> from jax.sharding import PartitionSpec
      >>> from tinax.parallel import eager_sharded_init
      >>> def build():
      ...     init = nnx.with_partitioning(nnx.initializers.lecun_normal(), (None, "model"))
      ...     return nnx.Linear(2, 2 * jax.device_count(), kernel_init=init, rngs=nnx.Rngs(0))
      >>> layer = eager_sharded_init(build, mesh)  # the kernel is created split over 'model'
      >>> layer.kernel[...].sharding.spec == PartitionSpec(None, "model")
      True
    """
    validation.require_callable(initializer, "initializer")
    require_homogeneous_mesh(mesh)
    flax_nnx = _import_nnx("eager_sharded_init")

    with jax.set_mesh(mesh), flax_nnx.use_eager_sharding(True):
        node = initializer()
    if all(kind == AxisType.Auto for kind in mesh.axis_types):
        _trim_variable_specs(flax_nnx, node, mesh)
    return node


def _trim_variable_specs(flax_nnx: Any, node: object, mesh: Mesh) -> None:
    """Drops trailing None spec entries, as 0.2's ``nnx.jit`` outputs over an Auto mesh had (``P()``).

    Same layout; arrays are rebuilt from their own buffers, nothing is copied.
    """
    for _, value in flax_nnx.graphlib.iter_graph(node):
        if not isinstance(value, flax_nnx.Variable):
            continue
        array = value.get_raw_value()
        if is_tracer(array) or not isinstance(array, jax.Array):
            continue
        sharding = array.sharding
        if not isinstance(sharding, NamedSharding) or sharding.mesh != mesh:
            continue
        entries = list(sharding.spec)
        if not entries or entries[-1] is not None:
            continue
        while entries and entries[-1] is None:
            entries.pop()
        spec = PartitionSpec(*entries)  # type: ignore[no-untyped-call]
        trimmed = NamedSharding(mesh, spec, memory_kind=sharding.memory_kind)
        shards = [shard.data for shard in array.addressable_shards]
        value.set_raw_value(jax.make_array_from_single_device_arrays(array.shape, trimmed, shards))


def state_shardings(state: StateMapping, mesh: Mesh) -> StateMapping:
    """Derives the ``NamedSharding`` of each leaf from partitioning annotations.

    Shardings come from the variables' metadata, not from where values live, so they are right
    even for state built with eager sharding off. Call it once per state (model, optimizer);
    leaves without an annotation are replicated.

    Args:
      state: A mapping of NNX state, such as ``nnx.state(model)``.
      mesh: A ``jax.sharding.Mesh`` whose axes are all ``AxisType.Auto`` or all ``AxisType.Explicit``.

    Returns:
      A mapping shaped like ``state`` whose leaves are ``jax.sharding.NamedSharding`` over ``mesh``.

    Raises:
      TypeError: If ``state`` is not a mapping or ``mesh`` is not a ``jax.sharding.Mesh``.
      ValueError: If ``mesh`` is empty, has a Manual axis, or mixes Auto and Explicit axes.
      ImportError: If flax is not installed.

    Examples:
      >>> import jax
      >>> from jax.sharding import AxisType
      >>> from tinax.parallel import layout, make_mesh
      >>> mesh = make_mesh(jax.devices(), (jax.device_count(),), ("model",), axis_types=(AxisType.Explicit,))
      >>> from flax import nnx
      >>> from jax.sharding import PartitionSpec
      >>> from tinax.parallel import eager_sharded_init, state_shardings
      >>> def build():
      ...     init = nnx.with_partitioning(nnx.initializers.lecun_normal(), (None, "model"))
      ...     return nnx.Linear(2, 2 * jax.device_count(), kernel_init=init, rngs=nnx.Rngs(0))
      >>> layer = eager_sharded_init(build, mesh)
      >>> shardings = state_shardings(nnx.state(layer), mesh)
      >>> shardings["kernel"].get_value().spec == PartitionSpec(None, "model")
      True
    """
    validation.require_instance(state, "state", Mapping, "a mapping of NNX state")
    require_homogeneous_mesh(mesh)
    flax_nnx = _import_nnx("state_shardings")

    shardings: StateMapping = flax_nnx.get_named_sharding(state, mesh)
    return shardings
