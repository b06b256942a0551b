"""tinax 0.2's exception types, kept where 0.3 says more: every accommodation of 0.2 in this member.

0.2 let Orbax's and Grain's exceptions through, so each error raised here is also of the type 0.2
raised: ``ValueError`` for existing, missing or unsaveable; the ``OSError`` of an uncreatable
destination; Orbax's ``KeyError``; the background error from ``result()``; JAX's ``AttributeError``
for traced values. The one exception, 0.2's import path ``tinax.checkpointing.legacy.v0``, lives in
``tinax/checkpointing.py`` (its ``__path__``), since pip deletes the paths 0.2 installed.
"""

from __future__ import annotations

from tinax._core._compat02 import also_raised_as

__all__ = [
    "CheckpointExistsError",
    "CheckpointKeyError",
    "CheckpointNotFoundError",
    "MissingCheckpointFileError",
    "NoHandlerError",
    "NotAFolderDestinationError",
    "OutOfRangeStateError",
    "SaveFailedError",
    "UncreatableDestinationError",
    "background_failure",
    "root_cause",
    "root_message",
    "uncreatable_destination",
    "upstream_failure",
]


class CheckpointExistsError(FileExistsError, ValueError):
    """A checkpoint destination already exists (0.2 raised ValueError)."""


class CheckpointNotFoundError(FileNotFoundError, ValueError):
    """Nothing exists at a checkpoint path to load (0.2 raised ValueError)."""


class UncreatableDestinationError(ValueError, OSError):
    """A checkpoint destination that cannot be created, refused before the save starts.

    0.2 failed later with the creating ``OSError``; subclasses are also of its class and carry its ``errno``.
    """

    def __str__(self) -> str:
        return BaseException.__str__(self)


class NotAFolderDestinationError(UncreatableDestinationError, NotADirectoryError):
    """A checkpoint destination whose way passes through a regular file (0.2 raised NotADirectoryError)."""


class CheckpointKeyError(ValueError, KeyError):
    """A checkpoint lacks a requested name, or Orbax or Grain refused an operation for another reason than a kind.

    0.2 raised Orbax's ``KeyError`` (or let its ``ValueError`` through); the message prints unquoted.
    """

    def __str__(self) -> str:
        return BaseException.__str__(self)


class MissingCheckpointFileError(CheckpointKeyError, FileNotFoundError):
    """A checkpoint folder that lacks a file Orbax needs to read it (0.2 let Orbax's FileNotFoundError through)."""


class OutOfRangeStateError(CheckpointKeyError, IndexError):
    """Stored state that points past what the pipeline holds (0.2 let Grain's IndexError through)."""


class NoHandlerError(TypeError, ValueError, KeyError):
    """Orbax or Grain has no handler for the kind of a value or restore target.

    Also a ``KeyError`` (0.2 let Orbax's lookup error through) and a ``ValueError`` (what a refused save documents).
    """

    def __str__(self) -> str:
        return BaseException.__str__(self)


class SaveFailedError(RuntimeError):
    """A save failed in the background; its ``__cause__`` is the original error.

    Also of the first of ``_KEPT_BUILTINS`` the cause is an instance of, as 0.2 re-raised that error.
    """

    def __str__(self) -> str:
        return BaseException.__str__(self)  # KeyError would quote the message.


#: The builtin classes a background failure keeps, as 0.2 re-raised the error (the first that matches).
_KEPT_BUILTINS: tuple[type[Exception], ...] = (
    FileNotFoundError,
    PermissionError,
    NotADirectoryError,
    IsADirectoryError,
    FileExistsError,
    OSError,
    KeyError,
    IndexError,
    TypeError,
    ValueError,
)
# The classes of the OSError that probing a destination gave which its refusal keeps (the first that matches):
# a way through a regular file, a folder that is not writable, a way through a broken link.
_DESTINATION_CAUSES: tuple[type[OSError], ...] = (NotADirectoryError, PermissionError, FileNotFoundError)


def background_failure(message: str, error: BaseException) -> SaveFailedError:
    """Builds the error ``result()`` raises for a failed background save, also of the cause's builtin class."""
    kept = next((builtin for builtin in _KEPT_BUILTINS if isinstance(error, builtin)), None)
    failure = (SaveFailedError if kept is None else also_raised_as(SaveFailedError, kept))(message)
    failure.__cause__ = error
    return failure


def uncreatable_destination(message: str, error: OSError) -> UncreatableDestinationError:
    """Builds the refusal of an uncreatable destination, of the subclass matching ``error`` and with its errno."""
    cause = next((cause for cause in _DESTINATION_CAUSES if isinstance(error, cause)), OSError)
    # Through a regular file, the refusal keeps a class of its own: one that 0.3 declared and its tests name.
    kind = (
        NotAFolderDestinationError
        if cause is NotADirectoryError
        else also_raised_as(UncreatableDestinationError, cause)
    )
    refused = kind(message)
    refused.errno = error.errno
    refused.strerror = error.strerror
    refused.filename = error.filename
    return refused


def upstream_failure(message: str, error: BaseException) -> CheckpointKeyError | NoHandlerError:
    """Builds the error for an operation Orbax or Grain refused, the same way on every path.

    Its class follows the root cause (``TypeError``, ``FileNotFoundError``, ``IndexError``): 0.2 code still catches it.
    """
    root = root_cause(error)
    kind: type[CheckpointKeyError | NoHandlerError] = CheckpointKeyError
    if isinstance(root, TypeError):
        kind = NoHandlerError
    elif isinstance(root, FileNotFoundError):
        kind = MissingCheckpointFileError
    elif isinstance(root, IndexError):
        kind = OutOfRangeStateError
    failure = kind(f"{message}: {root_message(error)}")
    failure.__cause__ = error
    return failure


def root_cause(error: BaseException) -> BaseException:
    """The deepest error in the ``__cause__`` chain of ``error`` (``error`` itself if it has no cause)."""
    seen = {id(error)}
    while error.__cause__ is not None and id(error.__cause__) not in seen:
        error = error.__cause__
        seen.add(id(error))
    return error


def root_message(error: BaseException) -> str:
    """The class and text of the root cause of ``error``, as ``"Class: text"``."""
    root = root_cause(error)
    text = str(root).strip() or "no message"
    return f"{type(root).__name__}: {text}"
