"""How the containers of a pytree become the str-keyed maps of a flax state dict, and back.

tinax 0.2 used ``flax.serialization.to_bytes``/``from_bytes``, so users saved optax states,
lists and flax dataclasses in their state dicts; this keeps flax's mapping, so the same state
gives the same file. docs/guide/weights.md, section "The msgpack format", lists the mapping.
flax is never imported: only code that imported it can hold a flax-registered instance.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Container", "container_of", "legacy_namedtuple_entries"]

# The keys of the namedtuple form that flax wrote until 2022.
_LEGACY_NAMEDTUPLE_KEYS = frozenset({"name", "fields", "values"})


@dataclass(frozen=True)
class Container:
    """A value the file holds as a map.

    ``entries``: ``(file key, message label such as "[0]", item)``; ``exact``: the map needs exactly these keys.
    """

    entries: tuple[tuple[str, str, object], ...]
    rebuild: Callable[[dict[str, Any]], Any]
    exact: bool = False
    fields: tuple[str, ...] | None = None


def container_of(value: object) -> Container | None:
    """How ``value`` is stored as a map, or None for a leaf; a flax ``to_state_dict`` error propagates."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return _namedtuple(value)
    if type(value) is list or type(value) is tuple:
        return _sequence(value)
    partial = _partial_type()
    if partial is not None and type(value) is partial:
        return _partial(value)
    if type(value) is not dict:
        registered = _flax_registered(value)
        if registered is not None:
            return registered
    if isinstance(value, Mapping):
        return _mapping(value)
    return None


def legacy_namedtuple_entries(loaded: dict[Any, Any], fields: tuple[str, ...]) -> dict[Any, Any]:
    """Reads a namedtuple that flax stored before 2022 as ``{"name", "fields", "values"}``.

    Returns ``loaded`` itself when not in that form, or when those three are the namedtuple's own fields.
    """
    if set(loaded) != _LEGACY_NAMEDTUPLE_KEYS or set(fields) == _LEGACY_NAMEDTUPLE_KEYS:
        return loaded
    names, values = loaded["fields"], loaded["values"]
    if not (isinstance(names, dict) and isinstance(values, dict)):
        return loaded
    numbered = [str(index) for index in range(len(names))]
    if set(names) != set(numbered) or set(values) != set(numbered):
        return loaded
    return {names[index]: values[index] for index in numbered}


def _mapping(value: Mapping[Any, Any]) -> Container:
    keys = list(value.keys())
    entries = tuple((key if type(key) is str else str(key), f"[{key!r}]", value[key]) for key in keys)
    texts = [entry[0] for entry in entries]
    return Container(entries, lambda restored: {key: restored[text] for key, text in zip(keys, texts, strict=True)})


def _sequence(value: list[Any] | tuple[Any, ...]) -> Container:
    entries = tuple((str(index), f"[{index}]", item) for index, item in enumerate(value))
    kind = type(value)
    return Container(entries, lambda restored: kind(restored[str(index)] for index in range(len(entries))), exact=True)


def _namedtuple(value: tuple[Any, ...]) -> Container:
    fields = tuple(value._fields)  # type: ignore[attr-defined]
    entries = tuple((field, f".{field}", getattr(value, field)) for field in fields)
    kind = type(value)
    return Container(entries, lambda restored: kind(**restored), exact=True, fields=fields)


def _partial_type() -> type | None:
    # A Partial exists only once jax is imported, and this module must not import it.
    jax = sys.modules.get("jax")
    return None if jax is None else jax.tree_util.Partial


def _partial(value: Any) -> Container:
    args, keywords = tuple(value.args), dict(value.keywords)
    function = value.func
    partial = type(value)
    entries = (("args", ".args", args), ("keywords", ".keywords", keywords))
    return Container(entries, lambda restored: partial(function, *restored["args"], **restored["keywords"]), exact=True)


def _flax_registered(value: object) -> Container | None:
    serialization = sys.modules.get("flax.serialization")
    if serialization is None or not serialization.is_serializable(value):
        return None
    state = serialization.to_state_dict(value)
    if not isinstance(state, dict):
        return None
    entries = tuple((key, f"[{key!r}]", item) for key, item in state.items())
    return Container(entries, lambda restored: serialization.from_state_dict(value, restored))
