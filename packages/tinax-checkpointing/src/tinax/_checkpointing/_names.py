"""Checkpointable names that are safe as directory names on every file system.

A name is one path component that common file systems store unchanged, that no Orbax file or
Windows device shadows, and that no other name folds into on a case-insensitive system.
"""

from __future__ import annotations

import os
import pathlib
import unicodedata
from collections.abc import Iterable

from tinax._core import validation

__all__ = [
    "ORBAX_TMP_SUFFIX",
    "is_orbax_temporary_name",
    "refuse_orbax_temporary_destination",
    "require_distinct_on_case_insensitive_systems",
    "validate_checkpointable_name",
]

#: Suffix Orbax gives the folder of a save in progress (a test checks it against Orbax's constant).
ORBAX_TMP_SUFFIX = ".orbax-checkpoint-tmp"

# Windows device names, with or without an extension, in any case (COM0 and LPT0 are ordinary).
_WINDOWS_DEVICE_STEMS = frozenset(
    {"aux", "con", "nul", "prn", "clock$", "conin$", "conout$"}
    | {f"com{digit}" for digit in range(1, 10)}
    | {f"lpt{digit}" for digit in range(1, 10)}
)
# Characters Windows (and, for "/", every system) forbids in a file name.
_FORBIDDEN_CHARACTERS = frozenset('<>:"/\\|?*')
# Orbax names a checkpointable folder would shadow, in any case: exactly tinax 0.2's list, since
# Orbax's other file names (_METADATA, ...) worked as names with 0.2 and refusing them would break users.
_SHADOWING_NAMES = frozenset({"_checkpoint_metadata", "auto", "metrics", "orbax.checkpoint"})
# Common limit on one path component (ext4, APFS, NTFS), in UTF-8 bytes.
_MAX_UTF8_BYTES = 255


def validate_checkpointable_name(name: object) -> str:
    """Checks that a checkpointable name is one folder name that Orbax and every common system keep.

    A valid name is one path component of at most 255 UTF-8 bytes, without the
    characters Windows forbids (``<>:"/|?*``, backslash), control or surrogate
    characters, is not ``.`` or ``..`` and does not end with a space or dot. It is
    no Windows device (``CON``, ``NUL``, ``COM1``-``COM9``, ``LPT1``-``LPT9``, ...,
    with or without extension) nor one of Orbax's own names
    (``_CHECKPOINT_METADATA``, ``orbax.checkpoint``, ``metrics``, ``AUTO``), both
    in any case. Non-ASCII letters and inner spaces are allowed. Case collisions
    between names are checked by :func:`save_checkpointables`.

    Args:
      name: The proposed name.

    Returns:
      The name, unchanged.

    Raises:
      TypeError: If ``name`` is not a ``str``.
      ValueError: If ``name`` is empty, too long, not one portable path component, or reserved.

    Examples:
      >>> from tinax.checkpointing import validate_checkpointable_name
      >>> validate_checkpointable_name("params")
      'params'
      >>> validate_checkpointable_name("params/w")
      Traceback (most recent call last):
      ValueError: ...
    """
    text = validation.require_str(name, "checkpointable name")
    if len(text.encode("utf-8", "surrogatepass")) > _MAX_UTF8_BYTES:
        validation.fail_value("checkpointable name", f"at most {_MAX_UTF8_BYTES} UTF-8 bytes long", text)
    if text in {".", ".."}:
        validation.fail_value("checkpointable name", "a folder name other than '.' and '..'", text)
    if any(character in _FORBIDDEN_CHARACTERS for character in text):
        validation.fail_value(
            "checkpointable name", 'one portable folder name, without any of < > : " / \\ | ? *', text
        )
    if any(unicodedata.category(character) in {"Cc", "Cs"} for character in text):
        validation.fail_value("checkpointable name", "free of control and surrogate characters", text)
    if text.endswith((" ", ".")):
        validation.fail_value(
            "checkpointable name", "a name that does not end with a space or '.' (Windows drops them)", text
        )
    if text.split(".", 1)[0].casefold() in _WINDOWS_DEVICE_STEMS:
        validation.fail_value("checkpointable name", "not a Windows device name such as CON or NUL", text)
    if text.casefold() in _SHADOWING_NAMES:
        listed = ", ".join(sorted(_SHADOWING_NAMES))
        validation.fail_value("checkpointable name", f"none of Orbax's own names ({listed}), in any case", text)
    return text


def is_orbax_temporary_name(name: str) -> bool:
    """Whether a name contains Orbax's temporary suffix, as an unfinished save's does; case-insensitively."""
    return ORBAX_TMP_SUFFIX in name.casefold()


def refuse_orbax_temporary_destination(destination: pathlib.Path) -> None:
    """Refuses a destination whose folder name Orbax reserves for unfinished saves (its next save would delete it).

    The name is checked as written and with links resolved, so ``tmp.orbax-checkpoint-tmp-1/.`` is refused too.
    """
    spelled = os.path.basename(os.path.normpath(destination))
    resolved = os.path.basename(os.path.realpath(destination))
    for name in (spelled, resolved):
        if is_orbax_temporary_name(name):
            raise ValueError(
                f"path must not name a folder with Orbax's reserved temporary suffix {ORBAX_TMP_SUFFIX!r}, got "
                f"{str(destination)!r}: Orbax treats such a folder as an unfinished save and deletes it later"
            )


def require_distinct_on_case_insensitive_systems(names: Iterable[str], argument: str) -> None:
    """Refuses two names that are one folder when case (and Unicode normalization) is ignored."""
    seen: dict[str, str] = {}
    for name in names:
        # macOS stores one Unicode normalization: composed and decomposed "é" are one folder there.
        folded = unicodedata.normalize("NFC", name).casefold()
        if folded in seen:
            raise ValueError(
                f"{argument} must not hold names that differ only in case, got {seen[folded]!r} and {name!r}: "
                "they are the same folder on case-insensitive file systems (Unicode normalization is ignored too)"
            )
        seen[folded] = name
