"""``execution_id`` on every log record: the execution a manager advances or an attempt of whose
runs, while it does (:func:`about`); None outside. A format string can name it
(``%(execution_id)s``), a JSON formatter or a log shipper finds it on the record.

It is set by a log record factory (:func:`install`, once per process, wrapping the factory in
place), not a filter: a filter sees only the records of the logger or handler it is attached to.
Since every record has the attribute, a ``logger.info(..., extra={"execution_id": ...})`` is
refused by ``logging`` (``KeyError``: it would overwrite it).

Works without OpenTelemetry.
"""

import contextvars
import logging
import threading
from contextlib import contextmanager

#: The attribute every record gets.
ATTRIBUTE = "execution_id"

_current = contextvars.ContextVar("switchyard_execution_id", default=None)
# The same, per thread. Hazard: a workflow function kept live between passes runs in a greenlet
# (``engine.live``), and a greenlet starts with empty context variables; it runs only while its
# pass switches to it, in the pass' thread, so the thread's value is the pass' execution.
_thread = threading.local()


def current():
    """The id (text) of the execution this thread or task works for now, or None."""
    value = _current.get()
    return value if value is not None else getattr(_thread, "execution_id", None)


@contextmanager
def about(execution_id):
    """Inside the block, log records carry ``execution_id`` (as text)."""
    value = str(execution_id)
    token = _current.set(value)
    previous, _thread.execution_id = getattr(_thread, "execution_id", None), value
    try:
        yield
    finally:
        _current.reset(token)
        _thread.execution_id = previous


def install():
    """Wrap the process' log record factory so that every record has :data:`ATTRIBUTE`. Once:
    a second call (a module imported again) leaves the wrapped factory alone."""
    wrapped = logging.getLogRecordFactory()
    if getattr(wrapped, "switchyard_execution_id", False):
        return

    def factory(*args, **kwargs):
        record = wrapped(*args, **kwargs)
        setattr(record, ATTRIBUTE, current())
        return record

    factory.switchyard_execution_id = True
    logging.setLogRecordFactory(factory)
