"""The engine's time: what "now" is for every deadline it stores and compares (durable sleeps,
retry back-off, event and execution timeouts, the timestamps of states and events).

It is the wall clock (``django.utils.timezone.now``), except inside :func:`using`, which the
test harness (``workflows_app.testing``) enters to give a test a clock of its own: there an
hour-long sleep elapses when the test moves its clock on, at once by default.
"""

from contextlib import contextmanager

from django.utils import timezone

_source = timezone.now


def now():
    """The current time, timezone-aware."""
    return _source()


@contextmanager
def using(source):
    """``source()`` is the engine's "now" inside the block (one at a time, in this process)."""
    global _source
    if _source is not timezone.now:
        raise RuntimeError("the engine's clock is already replaced: one test clock at a time")
    _source = source
    try:
        yield
    finally:
        _source = timezone.now
