"""``shard_mapped``: manual sharding over the Manual axes of a mesh."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import jax
import numpy as np
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec

from tinax._core.jax_compat import ambient_concrete_mesh, is_tracer
from tinax._core.validation import (
    describe,
    fail_type,
    fail_value,
    require_bool,
    require_callable,
    require_instance,
)

__all__ = ["shard_mapped"]

P = ParamSpec("P")
R = TypeVar("R")

_SPEC_EXPECTATION = "a jax.sharding.PartitionSpec"


def shard_mapped(
    function: Callable[P, R],
    *,
    mesh: Mesh,
    in_specs: object,
    out_specs: object,
    axis_names: frozenset[str] = frozenset(),
    check_vma: bool = True,
) -> Callable[P, R]:
    """Wraps a per-shard callable with ``jax.shard_map`` over Manual mesh axes.

    Each axis the call is manual over must be ``AxisType.Manual`` on ``mesh``; every argument is
    checked before anything is traced. Each call runs on the caller's devices with the axis types
    its context asks for (an ambient mesh, inputs on an Explicit mesh, or host arrays), so results
    mix with ``layout``-placed arrays inside one ``jit``. Spec trees follow ``jax.shard_map``, but a
    top-level ``in_specs=None`` is refused. See the user guide, "Hand-written collectives".

    Args:
      function: The per-shard body; gets the local block of each mapped argument and may issue
        collectives over the manual axes.
      mesh: A concrete ``jax.sharding.Mesh`` (``AbstractMesh`` is refused: running needs devices).
      in_specs: Pytree prefix of the positional arguments with ``PartitionSpec`` leaves naming
        only manual axes.
      out_specs: Pytree prefix of the result with ``PartitionSpec`` leaves naming only manual axes.
      axis_names: A ``frozenset`` (or ``set``) of mesh axes the call is manual over; empty means
        every axis, as in ``jax.shard_map``. Other axes stay with the compiler.
      check_vma: Whether ``jax.shard_map`` checks that outputs replicated by ``out_specs`` are
        invariant over the unmentioned axes. Must be a real ``bool``.

    Returns:
      A callable with ``function``'s signature (arguments by position only) that runs it once per
      shard and assembles the global result as ``out_specs`` describes.

    Raises:
      TypeError: If ``function`` is not callable, or another argument has the wrong type.
      ValueError: If ``mesh`` is empty or an axis or spec is unusable; a call raises it for inputs on another mesh.

    Examples:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> from jax.sharding import AxisType, PartitionSpec
      >>> from tinax.parallel import make_mesh, shard_mapped
      >>> mesh = make_mesh(jax.devices(), (jax.device_count(),), ("data",), axis_types=(AxisType.Manual,))
      >>> def total(block):
      ...     return jax.lax.psum(block.sum(), "data")  # this device's sum, added over 'data'
      >>> rows, whole = PartitionSpec("data"), PartitionSpec()
      >>> summed = shard_mapped(total, mesh=mesh, axis_names=frozenset({"data"}), in_specs=(rows,), out_specs=whole)
      >>> float(summed(jnp.ones(4 * jax.device_count()))) == 4 * jax.device_count()
      True
    """
    require_callable(function, "function")
    require_instance(mesh, "mesh", Mesh, "a jax.sharding.Mesh")
    if mesh.empty:
        fail_value("mesh", "a non-empty jax.sharding.Mesh", mesh)
    manual_axes = _manual_axes(mesh, axis_names)
    require_bool(check_vma, "check_vma")
    if in_specs is None:
        fail_type("in_specs", "a pytree of jax.sharding.PartitionSpec (use PartitionSpec() to replicate)", in_specs)
    _check_specs(in_specs, "in_specs", mesh, manual_axes)
    _check_specs(out_specs, "out_specs", mesh, manual_axes)

    runner = _Runner(function, mesh, manual_axes, in_specs, out_specs, check_vma)

    @functools.wraps(function)
    def mapped(*args: P.args, **kwargs: P.kwargs) -> R:
        if kwargs:
            # jax.shard_map maps positional arguments only; say so before it does.
            raise TypeError(
                f"a shard_mapped function takes its arguments by position only, got keywords {sorted(kwargs)}"
            )
        return runner(args)  # type: ignore[no-any-return]

    return mapped


def _manual_axes(mesh: Mesh, axis_names: object) -> frozenset[str]:
    if not isinstance(axis_names, (frozenset, set)):
        fail_type("axis_names", "a frozenset of mesh axis names", axis_names)
    mesh_names = tuple(mesh.axis_names)
    for name in sorted(axis_names, key=repr):
        if not isinstance(name, str):
            fail_type("axis_names", "a frozenset of str mesh axis names", name)
        if name not in mesh_names:
            fail_value("axis_names", f"a frozenset of axis names of the mesh {mesh_names}", name)
    selected = frozenset(axis_names) if axis_names else frozenset(str(name) for name in mesh_names)
    for name, axis_type in zip(mesh_names, mesh.axis_types, strict=True):
        if name in selected and axis_type != AxisType.Manual:
            raise ValueError(
                f"mesh axis {name!r} must be AxisType.Manual because the call is manual over it"
                f" (axis_names={sorted(selected)}), got {axis_type}"
            )
    return selected


def _check_specs(specs: object, name: str, mesh: Mesh, manual_axes: frozenset[str]) -> None:
    leaves = jax.tree_util.tree_flatten_with_path(specs, is_leaf=lambda leaf: isinstance(leaf, PartitionSpec))[0]
    manual_text = tuple(axis for axis in mesh.axis_names if axis in manual_axes)
    for path, leaf in leaves:
        leaf_name = name + jax.tree_util.keystr(path)
        if not isinstance(leaf, PartitionSpec):
            fail_type(leaf_name, _SPEC_EXPECTATION, leaf)
        for entry in leaf:
            for axis in entry if isinstance(entry, tuple) else (entry,):
                if axis is None or axis in manual_axes:
                    continue
                where = "a non-manual mesh axis" if axis in mesh.axis_names else "not a mesh axis"
                raise ValueError(
                    f"{leaf_name} must be a PartitionSpec over the manual axes {manual_text},"
                    f" but it references axis {axis!r} ({where}), got {describe(leaf)}"
                )


class _Runner:
    """Picks, per call, the mesh types ``jax.shard_map`` runs with: JAX needs one mesh per computation.

    Inputs on an Explicit mesh force that mesh's types (results then live there); otherwise manual axes run as Auto.
    """

    def __init__(
        self,
        function: Callable[..., Any],
        mesh: Mesh,
        manual_axes: frozenset[str],
        in_specs: object,
        out_specs: object,
        check_vma: bool,
    ) -> None:
        self._function = function
        self._mesh = mesh
        self._manual_axes = manual_axes
        self._in_specs = in_specs
        self._out_specs = out_specs
        self._check_vma = check_vma
        self._default_types = tuple(
            AxisType.Auto if name in manual_axes else axis_type
            for name, axis_type in zip(mesh.axis_names, mesh.axis_types, strict=True)
        )
        self._mapped: dict[tuple[AxisType, ...], tuple[Mesh, Callable[..., Any]]] = {}
        # Concrete meshes already found to hold the caller's devices in order.
        self._same_devices: set[Mesh] = {mesh}

    def __call__(self, args: tuple[Any, ...]) -> Any:
        types = self._ambient_types()
        inputs: list[tuple[str, Mesh | AbstractMesh]] = []
        for path, leaf in jax.tree_util.tree_flatten_with_path(args)[0]:
            leaf_mesh = _carried_mesh(leaf)
            if leaf_mesh is not None:
                where = "args" + jax.tree_util.keystr(path)
                self._require_same_mesh(leaf_mesh, f"{where} is laid out on")
                inputs.append((where, leaf_mesh))
        if types is None:
            types = self._types_from_inputs(inputs)
        runnable, mapped = self._mapped_over(types)
        if _is_explicit(runnable, self._manual_axes):
            args = self._place_unplaced(args, runnable)
        return mapped(*args)

    def _ambient_types(self) -> tuple[AxisType, ...] | None:
        # jax.shard_map requires its mesh to equal the ambient one, so that decides the types.
        ambient = jax.sharding.get_abstract_mesh()
        if ambient.empty:
            return None
        self._require_same_mesh(ambient, "the ambient mesh (jax.set_mesh) is")
        concrete = ambient_concrete_mesh()
        if concrete is not None:
            self._require_same_mesh(concrete, "the ambient mesh (jax.set_mesh) is")
        return tuple(ambient.axis_types)

    def _types_from_inputs(self, inputs: list[tuple[str, Mesh | AbstractMesh]]) -> tuple[AxisType, ...]:
        explicit = [(where, found) for where, found in inputs if _is_explicit(found, self._manual_axes)]
        if not explicit:
            return self._default_types
        first_where, first = explicit[0]
        for where, found in explicit[1:]:
            if tuple(found.axis_types) != tuple(first.axis_types):
                raise ValueError(
                    f"the inputs of a shard_mapped function must share one mesh: {first_where} is laid out on "
                    f"{_mesh_text(first)} and {where} on {_mesh_text(found)}, which types the axes differently"
                )
        return tuple(first.axis_types)

    def _require_same_mesh(self, found: Mesh | AbstractMesh, what: str) -> None:
        if isinstance(found, Mesh):
            if found in self._same_devices:
                return
            same = (
                tuple(found.axis_names) == tuple(self._mesh.axis_names)
                and found.devices.shape == self._mesh.devices.shape
                and np.array_equal(found.device_ids, self._mesh.device_ids)
            )
            if same:
                self._same_devices.add(found)
                return
        elif tuple(found.axis_names) == tuple(self._mesh.axis_names) and tuple(found.axis_sizes) == tuple(
            self._mesh.axis_sizes
        ):
            return
        raise ValueError(
            f"a shard_mapped function runs on the devices and axes of its mesh {_mesh_text(self._mesh)}, "
            f"but {what} {_mesh_text(found)}, which has other devices, axis names or axis sizes; "
            "lay the inputs out on a mesh of the same devices, in the same order, with the same axis names"
        )

    def _mapped_over(self, types: tuple[AxisType, ...]) -> tuple[Mesh, Callable[..., Any]]:
        entry = self._mapped.get(types)
        if entry is None:
            runnable = Mesh(self._mesh.devices, self._mesh.axis_names, axis_types=types)
            mapped = jax.shard_map(
                self._function,
                mesh=runnable,
                in_specs=self._in_specs,
                out_specs=self._out_specs,
                axis_names=self._manual_axes,
                check_vma=self._check_vma,
            )
            entry = self._mapped[types] = (runnable, mapped)
        return entry

    def _place_unplaced(self, args: tuple[Any, ...], runnable: Mesh) -> tuple[Any, ...]:
        # Explicit axes use an input's own layout as its in_spec: place host and uncommitted
        # values as in_specs say, and leave laid-out arrays for jax.shard_map to check.
        def is_spec(node: object) -> bool:
            return node is None or isinstance(node, PartitionSpec)

        try:
            specs = jax.tree.broadcast(self._in_specs, args, is_leaf=is_spec)
        except ValueError:
            return args  # Not a prefix of the arguments: jax.shard_map says so itself.

        def place(spec: PartitionSpec | None, subtree: Any) -> Any:
            if spec is None:
                return subtree  # A static argument, passed to the body as it is.
            return _place_leaf(subtree, NamedSharding(runnable, spec))

        placed: tuple[Any, ...] = jax.tree.map(place, specs, args, is_leaf=is_spec)
        return placed


def _place_leaf(leaf: Any, sharding: NamedSharding) -> Any:
    if _carried_mesh(leaf) is not None or not isinstance(
        leaf, (jax.Array, np.ndarray, np.generic, int, float, complex)
    ):
        return leaf
    return jax.device_put(leaf, sharding)


def _carried_mesh(leaf: object) -> Mesh | AbstractMesh | None:
    """The mesh an input is laid out on, or None for host and unplaced values."""
    if is_tracer(leaf):
        sharding = getattr(jax.typeof(leaf), "sharding", None)
    elif isinstance(leaf, jax.Array):
        sharding = leaf.sharding
    else:
        return None
    if not isinstance(sharding, NamedSharding) or sharding.mesh.empty:
        return None
    return sharding.mesh


def _is_explicit(mesh: Mesh | AbstractMesh, manual_axes: frozenset[str]) -> bool:
    return any(
        axis_type == AxisType.Explicit
        for name, axis_type in zip(mesh.axis_names, mesh.axis_types, strict=True)
        if name in manual_axes
    )


def _mesh_text(mesh: Mesh | AbstractMesh) -> str:
    axes = ", ".join(
        f"{name!r}: {size} ({kind.name})"
        for name, size, kind in zip(mesh.axis_names, mesh.axis_sizes, mesh.axis_types, strict=True)
    )
    if isinstance(mesh, Mesh):
        return f"Mesh({axes}; device ids {mesh.device_ids.tolist()})"
    return f"AbstractMesh({axes}; devices unknown inside a trace)"
