"""Checkpointable names: portable, unreserved, and distinct without case."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from tinax._checkpointing._names import ORBAX_RESERVED_NAMES, ORBAX_TMP_SUFFIX
from tinax.checkpointing import save_checkpointables, validate_checkpointable_name


@pytest.mark.parametrize(
    "name",
    ["model", "optimizer_state", "params-v2", "step.1", "A", "x" * 255, "_private", ".hidden", "-dash", "state"],
)
def test_portable_names_are_returned_unchanged(name):
    assert validate_checkpointable_name(name) == name


@pytest.mark.parametrize("name", [None, 3, b"model", ["model"], True])
def test_non_str_is_a_type_error(name):
    with pytest.raises(TypeError, match="checkpointable name must be a non-empty str"):
        validate_checkpointable_name(name)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "non-empty"),
        ("x" * 256, "at most 255"),
        ("a/b", "portable folder name"),
        ("a\\b", "portable folder name"),
        ("with space", "portable folder name"),
        ("caf\u00e9", "portable folder name"),
        ("tab\t", "portable folder name"),
        ("a:b", "portable folder name"),
        (".", "other than '.' and '..'"),
        ("..", "other than '.' and '..'"),
        ("model.", "does not end with '.'"),
        ("CON", "Windows device"),
        ("nul", "Windows device"),
        ("Com1", "Windows device"),
        ("lpt9.txt", "Windows device"),
        ("aux.tar.gz", "Windows device"),
        ("model" + ORBAX_TMP_SUFFIX, "temporary-folder suffix"),
        ("x.ORBAX-CHECKPOINT-TMP-1", "temporary-folder suffix"),
        ("_CHECKPOINT_METADATA", "reserved"),
        ("_checkpoint_metadata", "reserved"),
        ("orbax.checkpoint", "reserved"),
        ("commit_success.txt", "reserved"),
        ("_METADATA", "reserved"),
        ("metrics", "reserved"),
        ("METRICS", "reserved"),
        ("auto", "reserved"),
        ("_CHECKPOINT_DELETION", "reserved"),
    ],
)
def test_unportable_or_reserved_names_are_value_errors(name, reason):
    with pytest.raises(ValueError, match="checkpointable name must be") as caught:
        validate_checkpointable_name(name)
    assert reason in str(caught.value)


@pytest.mark.parametrize("name", ["console", "nullable", "com10", "lpt", "auxiliary", "prn_data", "metrics2"])
def test_names_that_only_resemble_reserved_ones_are_valid(name):
    assert validate_checkpointable_name(name) == name


def test_every_name_orbax_reserves_is_refused():
    # The reserved list is kept here so that validating imports nothing; this
    # catches an Orbax release that adds a name or renames a file.
    import importlib

    from orbax.checkpoint._src.metadata import checkpoint as orbax_metadata
    from orbax.checkpoint._src.path import atomicity_types
    from orbax.checkpoint.experimental.v1._src.layout import checkpoint_layout

    # Orbax moved some layout constants between 0.12.1 and 0.12.8; read each
    # from whichever module declares it in the installed release.
    def declared_anywhere(*places: tuple[str, str]) -> set[str]:
        found = set()
        for module_name, attribute in places:
            try:
                module = importlib.import_module(f"orbax.checkpoint.experimental.v1._src.{module_name}")
            except ImportError:
                continue
            if hasattr(module, attribute):
                found.add(getattr(module, attribute))
        assert found, f"no Orbax module declares any of {places}"
        return found

    layouts = ("layout.checkpoint_layout", "layout.orbax_layout")
    declared = {
        *checkpoint_layout.RESERVED_CHECKPOINTABLE_KEYS,
        *declared_anywhere(*((layout, "PYTREE_METADATA_FILE") for layout in layouts)),
        *declared_anywhere(*((layout, "ORBAX_CHECKPOINT_INDICATOR_FILE") for layout in layouts)),
        *declared_anywhere(
            ("metadata.serialization", "CHECKPOINT_METADATA_FILENAME"),
            *((layout, "CHECKPOINT_METADATA") for layout in layouts),
        ),
        atomicity_types.COMMIT_SUCCESS_FILE,
        orbax_metadata._ROOT_METADATA_FILENAME,
    }
    if hasattr(checkpoint_layout, "CHECKPOINT_DELETION_KEY"):  # Only some releases declare a deletion marker.
        declared.add(checkpoint_layout.CHECKPOINT_DELETION_KEY)
    assert declared <= ORBAX_RESERVED_NAMES
    assert atomicity_types.TMP_DIR_SUFFIX == ORBAX_TMP_SUFFIX
    for name in declared:
        with pytest.raises(ValueError, match="checkpointable name must be"):
            validate_checkpointable_name(name)


def test_save_refuses_names_that_differ_only_in_case(tmp_path):
    destination = tmp_path / "checkpoint"
    with pytest.raises(ValueError, match="differ only in case, got 'Model' and 'model'"):
        save_checkpointables(destination, {"Model": {"w": jnp.ones(2)}, "model": {"w": jnp.zeros(2)}})
    assert list(tmp_path.iterdir()) == []


def test_save_checks_every_name(tmp_path):
    with pytest.raises(ValueError, match="checkpointable name must be"):
        save_checkpointables(tmp_path / "checkpoint", {"model": {"w": jnp.ones(2)}, "a/b": {"w": jnp.ones(2)}})
    with pytest.raises(TypeError, match="keys of checkpointables must be str"):
        save_checkpointables(tmp_path / "checkpoint", {1: {"w": jnp.ones(2)}})
    assert list(tmp_path.iterdir()) == []
