"""tinax 0.2's exception types, kept where 0.3 says more: every accommodation of 0.2 in this member.

tinax 0.2 let Orbax's and Grain's own exceptions reach the caller. Code
written against 0.2 catches those types, so each error tinax-checkpointing
raises is also of the type 0.2 raised, next to the more precise type 0.3
documents. Each class and builder says which 0.2 behaviour it keeps:

- a ``ValueError`` for an existing destination, a missing checkpoint or an
  unsaveable value (:class:`CheckpointExistsError`,
  :class:`CheckpointNotFoundError`, :class:`UnsupportedLeafError`);
- the ``OSError`` that creating a destination raised, now refused before
  the save starts (:func:`uncreatable_destination`);
- Orbax's ``KeyError`` for a checkpoint that lacks a name or does not fit a
  target, and Grain's errors, translated the same way on every path
  (:func:`upstream_failure`);
- the background error itself from ``result()`` (:func:`background_failure`);
- JAX's ``AttributeError`` for a traced value (:class:`TracedValueError`).

One accommodation cannot live here, because the runtime needs it in the
public module itself: 0.2's import path ``tinax.checkpointing.legacy.v0``.
``tinax/checkpointing.py`` sets its ``__path__`` to ``_public/`` of the
private package, and the ``.pyi`` stubs under ``tinax/checkpointing/`` state
the same names for type checkers (neither the module nor its submodules can
sit where 0.2 installed ``tinax/checkpointing/__init__.py``,
``legacy/__init__.py`` and ``legacy/v0.py``: pip deletes 0.2's recorded paths
after installing 0.3).
"""

from __future__ import annotations

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

    ``result()`` raises one of the declared subclasses below where the
    original error is an instance of its second base, as 0.2 re-raised that
    error itself; the first that matches, in the order of
    ``_FAILURE_CLASSES``. The cause keeps its own exact class.
    """

    def __str__(self) -> str:
        return BaseException.__str__(self)  # KeyError would quote the message.


# One declared subclass per builtin class a background failure keeps (the first that matches, in this order).
class _SaveFailedFileNotFoundError(SaveFailedError, FileNotFoundError): ...


class _SaveFailedPermissionError(SaveFailedError, PermissionError): ...


class _SaveFailedNotADirectoryError(SaveFailedError, NotADirectoryError): ...


class _SaveFailedIsADirectoryError(SaveFailedError, IsADirectoryError): ...


class _SaveFailedFileExistsError(SaveFailedError, FileExistsError): ...


class _SaveFailedOSError(SaveFailedError, OSError): ...


class _SaveFailedKeyError(SaveFailedError, KeyError): ...


class _SaveFailedIndexError(SaveFailedError, IndexError): ...


class _SaveFailedTypeError(SaveFailedError, TypeError): ...


class _SaveFailedValueError(SaveFailedError, ValueError): ...


_FAILURE_CLASSES: tuple[type[SaveFailedError], ...] = (
    _SaveFailedFileNotFoundError,
    _SaveFailedPermissionError,
    _SaveFailedNotADirectoryError,
    _SaveFailedIsADirectoryError,
    _SaveFailedFileExistsError,
    _SaveFailedOSError,
    _SaveFailedKeyError,
    _SaveFailedIndexError,
    _SaveFailedTypeError,
    _SaveFailedValueError,
)
# Which refusal keeps the class of the OSError that probing a destination gave.
_DESTINATION_REFUSALS: tuple[tuple[type[OSError], type[UncreatableDestinationError]], ...] = (
    (NotADirectoryError, NotAFolderDestinationError),
    (PermissionError, UnwritableDestinationError),
    (FileNotFoundError, BrokenLinkDestinationError),
)


def background_failure(message: str, error: BaseException) -> SaveFailedError:
    """Builds the error ``result()`` raises for a save that failed in the background.

    Args:
      message: What failed, for the reader.
      error: The error the background save raised. It becomes the cause.

    Returns:
      A :class:`SaveFailedError` that is also of the first builtin class of
      ``_FAILURE_CLASSES`` that ``error`` is an instance of (an ``OSError``
      or one of its common subclasses, ``KeyError``, ``IndexError``,
      ``TypeError``, ``ValueError``), or a plain one otherwise, for example
      for ``KeyboardInterrupt``.
    """
    kind = next((kind for kind in _FAILURE_CLASSES if isinstance(error, kind.__bases__[1])), SaveFailedError)
    failure = kind(message)
    failure.__cause__ = error
    return failure


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
