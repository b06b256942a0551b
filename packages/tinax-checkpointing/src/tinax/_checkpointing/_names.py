"""Checkpointable names that are safe as directory names on every file system.

Each checkpointable becomes a subdirectory of the checkpoint, next to the files
Orbax keeps there. A name must therefore be one path component that every
common file system stores unchanged, that no Orbax file or Windows device
shadows, and that no other name in the same checkpoint folds into on a
case-insensitive file system (macOS and Windows defaults).
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

#: Suffix Orbax gives the folder of a save in progress. It must match Orbax's
#: own constant; a test checks that it does.
ORBAX_TMP_SUFFIX = ".orbax-checkpoint-tmp"

# Windows refuses these as file or folder names, with or without an extension
# (COM0 and LPT0 are ordinary names there). They are compared without case.
_WINDOWS_DEVICE_STEMS = frozenset(
    {"aux", "con", "nul", "prn", "clock$", "conin$", "conout$"}
    | {f"com{digit}" for digit in range(1, 10)}
    | {f"lpt{digit}" for digit in range(1, 10)}
)
# Characters that Windows (and, for "/", every system) does not allow in a
# file name, so a checkpoint holding them could not be copied there.
_FORBIDDEN_CHARACTERS = frozenset('<>:"/\\|?*')
# Orbax's files and keys that a checkpointable folder would shadow, compared
# without case. tinax 0.2 refused exactly these; Orbax's other file names
# (_METADATA, commit_success.txt and the like) saved and restored as
# checkpointable names with 0.2's Orbax, so refusing them would break 0.2 users.
_SHADOWING_NAMES = frozenset({"_checkpoint_metadata", "auto", "metrics", "orbax.checkpoint"})
# Common limit on one path component (ext4, APFS, NTFS), in UTF-8 bytes.
_MAX_UTF8_BYTES = 255


def validate_checkpointable_name(name: object) -> str:
    """Checks that a checkpointable name is one folder name that Orbax and every common system keep.

    A valid name is one path component of at most 255 UTF-8 bytes. It holds
    none of the characters Windows forbids (``<>:"/|?*`` and the backslash)
    and no control or surrogate character, is not ``.`` or ``..``, and does
    not end with a space or a dot (Windows drops those). It does not name a Windows device (``CON``, ``NUL``,
    ``COM1`` to ``COM9``, ``LPT1`` to ``LPT9`` and the like, with or without
    an extension), and is not one of the names Orbax gives its own files and
    keys (``_CHECKPOINT_METADATA``, ``orbax.checkpoint``, ``metrics``,
    ``AUTO``). Devices and Orbax's names are compared without regard to case,
    because on a case-insensitive file system ``METRICS`` is the folder
    ``metrics``. Letters outside ASCII and inner spaces are allowed.

    Whether two names of one checkpoint collide on such a file system is a
    property of the whole mapping; :func:`save_checkpointables` checks it.

    Args:
      name: The proposed name.

    Returns:
      The name, unchanged.

    Raises:
      TypeError: If ``name`` is not a ``str``.
      ValueError: If ``name`` is empty, too long, not one portable path
        component, or reserved.

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
    """Whether a folder name is one Orbax gives a save in progress.

    Orbax names the folder of an unfinished save ``<name>.orbax-checkpoint-tmp``,
    possibly followed by more (``-<timestamp>``), and treats every folder whose
    name contains the suffix as such. Case is ignored, because a
    case-insensitive file system cannot tell the spellings apart.

    Args:
      name: One path component.

    Returns:
      True if ``name`` contains Orbax's temporary-folder suffix.
    """
    return ORBAX_TMP_SUFFIX in name.casefold()


def refuse_orbax_temporary_destination(destination: pathlib.Path) -> None:
    """Refuses a checkpoint destination whose folder name Orbax reserves for unfinished saves.

    Orbax would take such a checkpoint for a crashed save: its next save to the
    path without the suffix deletes it. The last component is checked as
    written (after ``.`` and ``..`` are resolved) and after symbolic links are
    followed, so ``tmp.orbax-checkpoint-tmp-1/.`` is refused too.

    Args:
      destination: The absolute destination path.

    Raises:
      ValueError: If the destination's folder name contains Orbax's reserved
        temporary suffix ``.orbax-checkpoint-tmp``, in any case.
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
    """Checks that no two names denote the same folder when case is ignored.

    Args:
      names: Names already checked by :func:`validate_checkpointable_name`.
      argument: The argument that holds them, for the message.

    Raises:
      ValueError: Naming the first pair that differs only in case.
    """
    seen: dict[str, str] = {}
    for name in names:
        # macOS stores names in one Unicode normalization, so "é" composed and
        # decomposed are one folder there too.
        folded = unicodedata.normalize("NFC", name).casefold()
        if folded in seen:
            raise ValueError(
                f"{argument} must not hold names that differ only in case, got {seen[folded]!r} and {name!r}: "
                "they are the same folder on case-insensitive file systems (Unicode normalization is ignored too)"
            )
        seen[folded] = name
