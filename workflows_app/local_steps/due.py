"""Which local steps a pass is to run, and when its execution needs no ``advance`` for them.

A thread runs at most one pass at a time (``engine.dispatcher.run_pass``), which says so here
(:func:`pass_of`). A local step made ready during that pass, of that execution, is noted for it
(:func:`note`); one made ready anywhere else needs a pass, which an ``advance`` asks for
(:func:`needs_advance`). While the pass records what its own local step did
(:func:`recording`), the wake-ups that recording would send are not needed either: the same pass
goes on at once.
"""

import contextlib
import threading


class _State(threading.local):
    def __init__(self):
        self.execution_id = None  # the execution whose pass this thread runs
        self.noted = []  # its local steps made ready in the pass, in order
        self.recording = False
        self.fresh = set()  # ids of the rows this turn of the pass wrote last (``recorded``)


_current = _State()


@contextlib.contextmanager
def pass_of(execution_id):
    """This thread runs a pass over ``execution_id`` (and its loop of local steps) meanwhile."""
    outer = (_current.execution_id, _current.noted, _current.recording, _current.fresh)
    _current.execution_id, _current.noted, _current.recording, _current.fresh = str(execution_id), [], False, set()
    try:
        yield
    finally:
        _current.execution_id, _current.noted, _current.recording, _current.fresh = outer


def new_turn():
    """A new transaction of the pass begins: what the last one wrote may have changed since."""
    _current.fresh = set()


def recorded(operation):
    """``operation`` (this very instance) is as this turn's transaction wrote it, its row locked
    until it commits: reading it again in this turn would read the same."""
    _current.fresh.add(id(operation))


def is_fresh(operation) -> bool:
    return id(operation) in _current.fresh


def nothing_noted() -> bool:
    """Whether the pass has no local step to run yet: one it makes ready now may start at once."""
    return not _current.noted


def in_pass(execution_id) -> bool:
    return _current.execution_id is not None and _current.execution_id == str(execution_id)


def note(operations):
    """``operations`` (local, ``sent``) are the current pass' to run."""
    _current.noted.extend(operations)


def take_noted() -> list:
    noted, _current.noted = _current.noted, []
    return noted


def needs_advance(execution_id) -> bool:
    """Whether the execution must be woken for what was just recorded: not while the pass over it
    records its own local step's outcome (it goes on at once)."""
    return not (_current.recording and in_pass(execution_id))


@contextlib.contextmanager
def recording():
    _current.recording = True
    try:
        yield
    finally:
        _current.recording = False
