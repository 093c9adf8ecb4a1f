"""Riding out a database outage: a PostgreSQL restart or fail-over is an ordinary event,
and no process of the stack may lose what it holds, run something again or crash-loop because of
one.

* :func:`is_outage` tells an unreachable database (refused, reset, shut down by its
  administrator, not accepting connections yet) from every other database error: a deadlock or
  a constraint is the caller's business, and SQLite, a file, has no outages.
* :func:`ride_out` calls a function until the database answers, at most
  ``WORKFLOWS["DATABASE_OUTAGE_TOLERANCE"]`` seconds after the first failure (then it logs at
  CRITICAL and raises :class:`~workflows_app.errors.DatabaseUnavailable`). The function runs
  whole each time: it must be one or more complete transactions, safe to run again — a report
  (fencing decides), a claim, a dispatcher's pass.
* :class:`Watch` is the same for a loop that simply tries again on its next turn (the tick, the
  heartbeat): one warning when the outage begins and one when it ends, not a traceback a turn.
"""

import logging
import time
from contextlib import suppress

from django.db import InterfaceError, OperationalError, connections

from workflows_app.conf import workflows_settings
from workflows_app.errors import DatabaseUnavailable

logger = logging.getLogger(__name__)

#: SQLSTATEs of a server that is going away or not there yet: class 08 (connection exception),
#: admin_shutdown, crash_shutdown, cannot_connect_now, database_dropped, idle_session_timeout.
OUTAGE_SQLSTATES = ("08", "57P01", "57P02", "57P03", "57P04", "57P05")
#: Longest pause between two tries.
MAX_PAUSE = 2.0


def is_outage(exc) -> bool:
    """Whether ``exc`` says the database could not be reached, rather than refused a statement."""
    if not isinstance(exc, (OperationalError, InterfaceError)):
        return False
    cause = exc.__cause__
    if not type(cause).__module__.startswith("psycopg"):
        return False  # SQLite's errors ("database is locked", a missing table) are not outages
    if isinstance(exc, InterfaceError):
        return True  # "the connection is closed"
    sqlstate = getattr(cause, "sqlstate", None)
    # Without a SQLSTATE the client itself failed: refused, reset, "server closed the connection".
    return sqlstate is None or sqlstate.startswith(OUTAGE_SQLSTATES)


def close_connections():
    """Drop every connection of this thread, so that the next query opens a new one (the old one
    may look open and be dead). Outside a transaction only: inside one, the outermost level
    rolls back and tries again."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            with suppress(Exception):
                connection.close()


def ride_out(what, fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, called again while the database is unreachable, for at most
    DATABASE_OUTAGE_TOLERANCE seconds from the first failure. ``what`` names the work in the
    log ("reporting attempt 2 of <id>"). Inside a transaction an outage is raised at once: only
    the outermost level may run the whole of it again."""
    tolerance = float(workflows_settings.DATABASE_OUTAGE_TOLERANCE)
    began = None
    pause = 0.1
    while True:
        try:
            result = fn(*args, **kwargs)
        except (OperationalError, InterfaceError) as exc:
            if not is_outage(exc) or any(c.in_atomic_block for c in connections.all(initialized_only=True)):
                raise
            now = time.monotonic()
            if began is None:
                began = now
                logger.warning("database unavailable while %s (%s): waiting for it, at most %ss", what, _first_line(exc), tolerance)
            down = now - began
            if down >= tolerance:
                logger.critical("database unavailable for %.0fs while %s: gave up (DATABASE_OUTAGE_TOLERANCE is %ss)",
                                down, what, tolerance)
                raise DatabaseUnavailable(what, down) from exc
            close_connections()
            time.sleep(min(pause, tolerance - down))
            pause = min(pause * 2, MAX_PAUSE)
            continue
        if began is not None:
            logger.warning("database back after %.1fs: %s done", time.monotonic() - began, what)
        return result


class Watch:
    """The database's availability as a loop sees it, one turn at a time::

        watch = Watch("tick")
        try:
            work()
        except Exception as exc:
            if not watch.failed(exc):
                raise
        else:
            seconds = watch.succeeded()   # how long it was down, when this turn ended an outage
    """

    def __init__(self, label):
        self.label = label
        self.down_since = None

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def failed(self, exc) -> bool:
        """Note a failed turn; False when ``exc`` is no outage (the caller's to report)."""
        if not is_outage(exc):
            return False
        if self.down_since is None:
            self.down_since = time.monotonic()
            logger.warning("%s: database unavailable (%s); trying again", self.label, _first_line(exc))
        close_connections()
        return True

    def succeeded(self) -> float | None:
        """Note a turn that worked; the length of the outage it ends, if it ends one."""
        if self.down_since is None:
            return None
        seconds, self.down_since = time.monotonic() - self.down_since, None
        logger.warning("%s: database back after %.1fs", self.label, seconds)
        return seconds


def _first_line(exc) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
