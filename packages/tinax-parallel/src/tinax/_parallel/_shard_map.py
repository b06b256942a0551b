"""``shard_mapped``: manual sharding over the Manual axes of a mesh."""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar

import jax
from jax.sharding import AxisType, Mesh, PartitionSpec

from tinax._core.jax_compat import mesh_axis_types
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

    The mesh states the sharding policy up front: each axis that the call
    maps over by hand has to be typed ``AxisType.Manual``, so a reader of the
    mesh can tell which axes carry explicit collectives. Every argument is
    checked when this function is called, before ``function`` runs or
    anything is traced, so a bad spec fails where the wrapper is built.

    How it runs: ``jax.shard_map`` cannot lower a body over axes that are
    already ``Manual`` (the compiler rejects the program). The wrapper
    therefore hands ``jax.shard_map`` a mesh built from the same devices, in
    the same order, with the same axis names, where only the manual axes are
    retyped to ``AxisType.Auto``; the remaining axes keep their type. Auto
    axes place no requirement on the sharding that inputs already carry, so
    host arrays, uncommitted arrays and arrays on other layouts are all
    accepted and resharded as the specs say. Collectives in the body
    (``psum``, ``pmean``, ``all_gather``, ``ppermute``, ...) name the same
    axes as on the caller's mesh and run eagerly and under ``jax.jit``.
    Abstract evaluation also works: ``jax.eval_shape`` accepts
    ``jax.ShapeDtypeStruct`` inputs whose sharding is a ``NamedSharding`` over
    the caller's Manual mesh.

    One limit follows from this: the results are laid out on that Auto-typed
    copy of the mesh. JAX requires one mesh per computation, so inside a
    single ``jit`` they do not mix with arrays laid out on an Explicit mesh
    (for example by ``layout``), and differentiating through the call with
    Explicit-sharded inputs fails in JAX. Keep the data of such a step on an
    Auto mesh over the same devices, or move it between meshes with
    ``jax.device_put`` outside the step.

    Spec trees follow ``jax.shard_map``: each may be a pytree prefix of the
    arguments (or outputs), and its leaves must be
    ``jax.sharding.PartitionSpec`` instances. ``None`` inside a spec tree is
    an empty subtree, as in ``jax.shard_map``: in ``in_specs`` it marks the
    matching argument subtree as static, passed to ``function`` unmapped; in
    ``out_specs`` it only matches a ``None`` output. A top-level
    ``in_specs=None`` (which ``jax.shard_map`` reads as "every input is
    static") is refused, because it is nearly always a missing ``P()``.

    Args:
      function: The per-shard body. It receives the local block of every
        mapped argument and may issue collectives over the manual axes.
      mesh: A concrete ``jax.sharding.Mesh``. ``AbstractMesh`` is refused:
        running the call needs the devices.
      in_specs: Pytree prefix of the positional arguments whose leaves are
        ``PartitionSpec`` instances naming only manual axes.
      out_specs: Pytree prefix of the result whose leaves are
        ``PartitionSpec`` instances naming only manual axes.
      axis_names: A ``frozenset`` (or ``set``) of mesh axis names that the
        call is manual over. Empty means every mesh axis, as in
        ``jax.shard_map``. Other axes stay under the compiler's control.
      check_vma: Whether ``jax.shard_map`` checks that outputs replicated by
        ``out_specs`` really are invariant over the unmentioned axes. Must
        be a real ``bool``.

    Returns:
      A callable with the signature of ``function`` that runs it once per
      shard and assembles the global result as ``out_specs`` describes.

    Raises:
      TypeError: If ``function`` is not callable, ``mesh`` is not a
        ``jax.sharding.Mesh``, ``axis_names`` is not a set of ``str``,
        ``check_vma`` is not a ``bool``, ``in_specs`` is ``None``, or a spec
        leaf is not a ``PartitionSpec``.
      ValueError: If ``mesh`` is empty, an entry of ``axis_names`` is not a
        mesh axis, an axis the call is manual over is not
        ``AxisType.Manual``, or a spec names an axis outside that set.
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

    runnable_mesh = _with_manual_axes_as_auto(mesh, manual_axes)
    return jax.shard_map(
        function,
        mesh=runnable_mesh,
        in_specs=in_specs,
        out_specs=out_specs,
        axis_names=manual_axes,
        check_vma=check_vma,
    )


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
    for name, axis_type in zip(mesh_names, mesh_axis_types(mesh), strict=True):
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


def _with_manual_axes_as_auto(mesh: Mesh, manual_axes: frozenset[str]) -> Mesh:
    # jax.shard_map cannot lower over axes already typed Manual, so it runs over
    # the same devices and names with those axes typed Auto instead.
    axis_types = tuple(
        AxisType.Auto if name in manual_axes else axis_type
        for name, axis_type in zip(mesh.axis_names, mesh_axis_types(mesh), strict=True)
    )
    return Mesh(mesh.devices, mesh.axis_names, axis_types=axis_types)
