"""One upstream failure, one tinax error: the V1 save and load, training loads and legacy V0 translate alike."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import grain
import numpy as np
import orbax.checkpoint as ocp_v0
import orbax.checkpoint.experimental.v1 as ocp_v1
import pytest

from tinax.checkpointing import (
    TrainingCheckpointNames,
    abstract_restore_target,
    load_checkpointables,
    load_training_checkpoint,
    save_checkpointables,
    save_training_checkpoint,
)
from tinax.checkpointing.legacy.v0 import (
    load_legacy_v0_grain_iterator,
    load_legacy_v0_pytree,
    save_legacy_v0_grain_iterator,
    save_legacy_v0_pytree,
)

STATE = {"w": np.arange(4.0)}


def _iterator() -> Any:
    return iter(grain.MapDataset.range(8).to_iter_dataset())


def _training_parts() -> dict[str, Any]:
    return {"model": STATE, "optimizer": {"count": np.asarray(1)}, "rng": {"seed": np.asarray(3)}}


def _v1_save(tmp_path: pathlib.Path) -> None:
    save_checkpointables(tmp_path / "v1", {"model": STATE})


def _v1_load(tmp_path: pathlib.Path) -> None:
    load_checkpointables(tmp_path / "saved-v1", {"model": abstract_restore_target(STATE)})


def _training_load(tmp_path: pathlib.Path) -> None:
    targets = [abstract_restore_target(part) for part in _training_parts().values()]
    load_training_checkpoint(tmp_path / "saved-training", *targets, None, _iterator())


def _v0_pytree_save(tmp_path: pathlib.Path) -> None:
    save_legacy_v0_pytree(tmp_path / "v0", STATE)


def _v0_pytree_load(tmp_path: pathlib.Path) -> None:
    load_legacy_v0_pytree(tmp_path / "saved-v0")


def _v0_iterator_save(tmp_path: pathlib.Path) -> None:
    save_legacy_v0_grain_iterator(tmp_path / "v0-iterator", _iterator())


def _v0_iterator_load(tmp_path: pathlib.Path) -> None:
    load_legacy_v0_grain_iterator(tmp_path / "saved-v0-iterator", _iterator())


PATHS: dict[str, Callable[[pathlib.Path], None]] = {
    "v1-save": _v1_save,
    "v1-load": _v1_load,
    "training-load": _training_load,
    "v0-pytree-save": _v0_pytree_save,
    "v0-pytree-load": _v0_pytree_load,
    "v0-iterator-save": _v0_iterator_save,
    "v0-iterator-load": _v0_iterator_load,
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("saved")
    save_checkpointables(root / "saved-v1", {"model": STATE}).result()
    save_training_checkpoint(root / "saved-training", 1, *_training_parts().values(), None, _iterator()).result()
    save_legacy_v0_pytree(root / "saved-v0", STATE)
    save_legacy_v0_grain_iterator(root / "saved-v0-iterator", _iterator())
    return root


def _fail_upstream(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    """Makes every Orbax entry point tinax calls raise ``error``, as if upstream refused the operation."""

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise error

    monkeypatch.setattr(ocp_v1, "save_checkpointables_async", fail)
    monkeypatch.setattr(ocp_v1, "load_checkpointables", fail)
    monkeypatch.setattr(ocp_v0.Checkpointer, "save", fail)
    monkeypatch.setattr(ocp_v0.Checkpointer, "restore", fail)


def _failure_on(path: str, saved: pathlib.Path, tmp_path: pathlib.Path) -> ValueError:
    (tmp_path / "saved-v1").symlink_to(saved / "saved-v1")
    for name in ("saved-training", "saved-v0", "saved-v0-iterator"):
        (tmp_path / name).symlink_to(saved / name)
    with pytest.raises(ValueError, match="upstream") as caught:
        PATHS[path](tmp_path)
    return caught.value


@pytest.mark.parametrize(
    ("upstream", "expected"),
    [
        (TypeError("upstream refused a kind"), "NoHandlerError"),
        (ValueError("upstream refused a value"), "CheckpointKeyError"),
        (KeyError("upstream lacks a key"), "CheckpointKeyError"),
        (IndexError("upstream ran out of entries"), "OutOfRangeStateError"),
        (FileNotFoundError("upstream found no file"), "MissingCheckpointFileError"),
    ],
    ids=["TypeError", "ValueError", "KeyError", "IndexError", "FileNotFoundError"],
)
@pytest.mark.parametrize("path", list(PATHS))
def test_the_same_upstream_failure_gives_the_same_error_on_every_path(
    saved, tmp_path, monkeypatch, path, upstream, expected
):
    _fail_upstream(monkeypatch, upstream)
    error = _failure_on(path, saved, tmp_path)
    assert type(error).__name__ == expected
    # What 0.3 documents for a refused operation, and what 0.2's callers caught.
    assert isinstance(error, ValueError)
    assert isinstance(error, KeyError)
    assert isinstance(error, TypeError) == isinstance(upstream, TypeError)
    # tinax 0.2 let the upstream error through: the error is also of its class.
    assert isinstance(error, type(upstream))
    assert type(upstream).__name__ in str(error)
    chain = []
    cause: BaseException | None = error
    while cause is not None:
        chain.append(cause)
        cause = cause.__cause__
    assert chain[-1] is upstream


def test_the_upstream_error_is_judged_by_its_root_cause(tmp_path, monkeypatch):
    wrapped = ValueError("Orbax wrapped it")
    wrapped.__cause__ = TypeError("the real refusal")
    _fail_upstream(monkeypatch, wrapped)
    with pytest.raises(TypeError, match="TypeError: the real refusal") as caught:
        _v1_save(tmp_path)
    assert caught.value.__cause__ is wrapped


def test_an_invalid_training_name_keeps_its_cause():
    with pytest.raises(ValueError, match="TrainingCheckpointNames.model") as caught:
        TrainingCheckpointNames(model="a/b")
    assert isinstance(caught.value.__cause__, ValueError)
