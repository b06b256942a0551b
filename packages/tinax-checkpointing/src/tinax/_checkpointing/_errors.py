"""Exception classes that keep tinax 0.2's exception types while saying more.

tinax 0.2 let Orbax's own exceptions reach the caller: a ``ValueError`` for an
existing destination or an unsaveable value, a ``KeyError`` for a checkpoint
that lacks a name or does not fit a target, and whatever a background write
raised from ``result()``. Code written against 0.2 catches those types, so
each error raised here is also an instance of the type 0.2 raised, next to the
more precise type tinax documents (``FileExistsError``, ``TypeError``, ...).

:func:`upstream_failure` is the one translation of an operation Orbax or
Grain refused, used by the V1 save and load and by ``legacy.v0``, so the
same upstream failure gives the same tinax error on every path.
"""

from __future__ import annotations

import threading

__all__ = [
    "BrokenLinkDestinationError",
    "CheckpointExistsError",
    "CheckpointKeyError",
    "CheckpointNotFoundError",
    "MissingCheckpointFileError",
    "NoHandlerError",
    "NotAFolderDestinationError",
    "OutOfRangeStateError",
    "SaveFailedError",
    "TracedValueError",
    "UncreatableDestinationError",
    "UnsupportedLeafError",
    "UnwritableDestinationError",
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

    0.2 started such a save and failed with the ``OSError`` that creating the
    folder raised (in ``result()`` for a V1 save, at once for a legacy V0
    one); the subclasses below are also of that error's class, and every
    one carries its ``errno``.
    """

    def __str__(self) -> str:
        return BaseException.__str__(self)


class NotAFolderDestinationError(UncreatableDestinationError, NotADirectoryError):
    """A checkpoint destination whose way passes through a regular file (0.2 raised NotADirectoryError)."""


class UnwritableDestinationError(UncreatableDestinationError, PermissionError):
    """A checkpoint destination inside a folder that is not writable (0.2 raised PermissionError)."""


class BrokenLinkDestinationError(UncreatableDestinationError, FileNotFoundError):
    """A checkpoint destination whose way passes through a broken link (0.2 raised FileNotFoundError)."""


class UnsupportedLeafError(TypeError, ValueError):
    """A value or target leaf of a kind Orbax cannot handle (0.2 raised ValueError)."""


class CheckpointKeyError(ValueError, KeyError):
    """A checkpoint lacks a requested name, or Orbax or Grain refused an operation for another reason than a kind.

    0.2 raised Orbax's ``KeyError`` subclasses for a missing name and for
    values that do not fit a target, and let Orbax's ``ValueError`` through
    for a refused save. The message prints as written, not quoted the way
    ``KeyError`` quotes its key.
    """

    def __str__(self) -> str:
        return BaseException.__str__(self)


class MissingCheckpointFileError(CheckpointKeyError, FileNotFoundError):
    """A checkpoint folder that lacks a file Orbax needs to read it (0.2 let Orbax's FileNotFoundError through)."""


class OutOfRangeStateError(CheckpointKeyError, IndexError):
    """Stored state that points past what the pipeline holds (0.2 let Grain's IndexError through)."""


class NoHandlerError(TypeError, ValueError, KeyError):
    """Orbax or Grain has no handler for the kind of a value or restore target.

    Also a ``KeyError`` (0.2 let Orbax's lookup error through) and a
    ``ValueError`` (what a refused save or legacy V0 operation documents).
    """

    def __str__(self) -> str:
        return BaseException.__str__(self)


class TracedValueError(TypeError, AttributeError):
    """A traced value where a concrete one is needed (0.2 raised JAX's ``AttributeError``)."""


class SaveFailedError(RuntimeError):
    """A save failed in the background; its ``__cause__`` is the original error.

    ``result()`` raises a subclass that is also of the original error's class
    (``OSError``, ``ValueError``, ...), as 0.2 re-raised that error itself.
    """


_failure_classes: dict[type[BaseException], type[SaveFailedError]] = {}
# Which refusal keeps the class of the OSError that probing a destination gave.
_DESTINATION_REFUSALS: tuple[tuple[type[OSError], type[UncreatableDestinationError]], ...] = (
    (NotADirectoryError, NotAFolderDestinationError),
    (PermissionError, UnwritableDestinationError),
    (FileNotFoundError, BrokenLinkDestinationError),
)
_failure_classes_lock = threading.Lock()


def background_failure(message: str, error: BaseException) -> SaveFailedError:
    """Builds the error ``result()`` raises for a save that failed in the background.

    Args:
      message: What failed, for the reader.
      error: The error the background save raised. It becomes the cause.

    Returns:
      A :class:`SaveFailedError` that is also an instance of ``type(error)``
      where Python can combine the two classes and build the result from a
      message (it can for ``OSError``, ``ValueError``, ``KeyError`` and most
      other ``Exception`` classes), and a plain :class:`SaveFailedError`
      otherwise, for example for ``KeyboardInterrupt``.
    """
    failure = _failure_class(type(error))(message)
    failure.__cause__ = error
    return failure


def _failure_class(kind: type[BaseException]) -> type[SaveFailedError]:
    if not issubclass(kind, Exception) or issubclass(kind, SaveFailedError):
        return SaveFailedError
    with _failure_classes_lock:
        cached = _failure_classes.get(kind)
        if cached is None:
            # The message prints as written; KeyError would quote it.
            namespace = {"__module__": __name__, "__str__": BaseException.__str__}
            try:
                cached = type(f"SaveFailedError[{kind.__name__}]", (SaveFailedError, kind), namespace)
                cached("probe")  # Some classes combine, but cannot be built from one message.
            except TypeError:
                cached = SaveFailedError
            _failure_classes[kind] = cached
        return cached


def uncreatable_destination(message: str, error: OSError) -> UncreatableDestinationError:
    """Builds the error that refuses a destination the file system cannot create.

    Args:
      message: Why the destination cannot be created, for the reader.
      error: The ``OSError`` that probing the destination gave. Its
        ``errno``, ``strerror`` and ``filename`` carry over.

    Returns:
      An :class:`UncreatableDestinationError`, of the subclass that is also
      ``type(error)`` where ``error`` is a ``NotADirectoryError``,
      ``PermissionError`` or ``FileNotFoundError``.
    """
    kind = next(
        (refusal for cause, refusal in _DESTINATION_REFUSALS if isinstance(error, cause)), UncreatableDestinationError
    )
    refused = kind(message)
    refused.errno = error.errno
    refused.strerror = error.strerror
    refused.filename = error.filename
    return refused


def upstream_failure(message: str, error: BaseException) -> CheckpointKeyError | NoHandlerError:
    """Builds the error for an operation that Orbax or Grain refused, the same way on every path.

    The class follows the deepest cause of ``error``: a ``TypeError`` there
    means upstream refused a kind, and gives :class:`NoHandlerError`; a
    ``FileNotFoundError`` gives :class:`MissingCheckpointFileError`, an
    ``IndexError`` :class:`OutOfRangeStateError`, and any other failure
    :class:`CheckpointKeyError`. Each is a ``ValueError`` and a ``KeyError``,
    and the last three are also of the class of the root cause that picked
    them, so code written against 0.2, which let the upstream error
    through, still catches them.

    Args:
      message: What failed, for the reader; the root cause's class and text
        are appended.
      error: The upstream error. It becomes the cause.

    Returns:
      The error to raise (``raise upstream_failure(...) from error``).
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
