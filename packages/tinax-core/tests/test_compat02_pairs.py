"""A 0.3 failure that is also the builtin 0.2 raised for it: one class per pair, which pickles as itself."""

from __future__ import annotations

import errno
import pickle
import threading

import pytest

from tinax._core._compat02 import MissingPathError, ValueOverflowError, also_raised_as


class QuietError(RuntimeError):
    """A failure kind with its own ``__str__``, as KeyError would quote the message."""

    def __str__(self) -> str:
        return BaseException.__str__(self)


class WriteFailedError(OSError, RuntimeError):
    """A failure kind that is an OSError, built from the system's ``(errno, message, filename)``."""


def test_the_pair_is_one_class_that_both_handlers_catch():
    twin = also_raised_as(QuietError, KeyError)
    assert also_raised_as(QuietError, KeyError) is twin
    assert also_raised_as(QuietError, IndexError) is not twin
    with pytest.raises(KeyError) as caught:
        raise twin("no 'entry' here")
    assert isinstance(caught.value, QuietError)
    assert not isinstance(caught.value, IndexError)
    assert str(caught.value) == "no 'entry' here"  # the kind's own __str__ comes first
    assert twin.__name__ == "QuietError"
    assert twin.__module__ == __name__


def test_a_kind_already_of_the_raised_type_is_itself():
    assert also_raised_as(ValueOverflowError, OverflowError) is ValueOverflowError
    assert also_raised_as(MissingPathError, FileNotFoundError) is MissingPathError


def test_threads_raising_a_pair_first_share_one_class():
    classes: list[type[BaseException]] = []
    start = threading.Barrier(8)

    def build() -> None:
        start.wait()
        classes.append(also_raised_as(QuietError, LookupError))

    threads = [threading.Thread(target=build) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(kind) for kind in classes}) == 1


@pytest.mark.parametrize(
    ("kind", "raised", "arguments"),
    [
        (WriteFailedError, PermissionError, (errno.EACCES, "cannot write", "/tmp/x")),
        (QuietError, TypeError, ("a message",)),
        (ValueOverflowError, TypeError, ("too many",)),
        (RuntimeError, MissingPathError, ("nothing there",)),
    ],
)
def test_a_pair_pickles_with_its_arguments_and_attributes(kind, raised, arguments):
    error = also_raised_as(kind, raised)(*arguments)
    error.add_note("while saving")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert copy.args == error.args
    assert copy.__notes__ == ["while saving"]
    if len(arguments) == 3:
        assert (error.errno, error.strerror, error.filename) == arguments
        assert (copy.errno, copy.strerror, copy.filename) == arguments
