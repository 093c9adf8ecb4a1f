"""Switchyard's database connections: SQLite set up for several writing processes, and the
statements on every operation's path planned once per connection (PostgreSQL).

**SQLite.** A manager, the web server and the commands (``start_execution``,
``resume_execution --wait``) write one database file at once. Django's stock SQLite settings
(``startproject``'s) do not allow for that: a transaction begins DEFERRED, takes the write lock
only at its first write, and when another process holds it then, SQLite fails it at once with
"database is locked" (waiting could deadlock), whatever the busy timeout. So, for the default
database when it is SQLite, :func:`configure_sqlite` (at the app's ``ready()``, before Switchyard
opens any connection) fills in the connection options Django documents, unless the project set
them itself: ``transaction_mode`` IMMEDIATE (a transaction takes the write lock as it begins,
so writers queue for it) and ``timeout`` (seconds a writer waits for it, Python's
``sqlite3.connect(timeout=)``); and each new connection switches the file to write-ahead logging
(``PRAGMA journal_mode=WAL``: readers never block the writer, nor it them) unless the project's
``init_command`` chose a journal mode. The options go into the project's ``DATABASES`` dict, where
Django reads them on every new connection: ``diffsettings`` shows them. A value the project set
that several writers cannot work with is the system check ``workflows.W004``'s.

**PostgreSQL.** Django binds parameters on the client (psycopg's ``ClientCursor``), which never prepares a
statement: PostgreSQL parses and plans every query again. For the few statements each
operation runs — the claim, a transition with its event, the countdown, the execution's lock,
the idle check — planning cost about as much as running them. Those go through :func:`cursor`
instead, which binds on the server, so psycopg prepares a statement once its connection has run
it ``prepare_threshold`` times (Django's ``OPTIONS``; ``DATABASE_PREPARE_THRESHOLD`` in
the demo project's settings). Every other query is Django's own, as before. On another database, or
with the threshold unset, this is Django's cursor.

A prepared statement's result columns are fixed, so these statements name their columns
(:func:`columns`) instead of ``*``: a column that a migration adds while workers run does not
break them.
"""

import functools
import logging
import random
import sqlite3
import time

from django.db import DEFAULT_DB_ALIAS, OperationalError, connection, connections
from django.db.backends.signals import connection_created
from django.db.models import DEFERRED

logger = logging.getLogger(__name__)

#: The connection options several writing processes need of SQLite, unless the project set them.
SQLITE_OPTIONS = {"transaction_mode": "IMMEDIATE", "timeout": 30}
#: The transaction modes that take the write lock as the transaction begins.
SQLITE_WRITING_MODES = ("IMMEDIATE", "EXCLUSIVE")
#: Below this many seconds of ``timeout``, a writer gives up while another one commits.
SQLITE_MIN_TIMEOUT = 5


def configure_sqlite():
    """Fill in :data:`SQLITE_OPTIONS` for the default database (the one Switchyard writes) when
    it is SQLite, and switch its new connections to write-ahead logging (see the module's
    docstring)."""
    wrapper = connections[DEFAULT_DB_ALIAS]
    if wrapper.vendor != "sqlite":
        return
    options = wrapper.settings_dict.setdefault("OPTIONS", {})
    for key, value in SQLITE_OPTIONS.items():
        options.setdefault(key, value)
    # A connection opened before now (an app's ready() that ran a query) began with the options
    # it was opened with: the next one takes these.
    if wrapper.connection is not None and not wrapper.in_atomic_block:
        wrapper.close()
    connection_created.connect(_write_ahead_logging, dispatch_uid="workflows_app.db.write_ahead_logging")


def _write_ahead_logging(sender, connection, **kwargs):
    if connection.vendor != "sqlite" or connection.alias != DEFAULT_DB_ALIAS:
        return
    if "journal_mode" in (connection.settings_dict["OPTIONS"].get("init_command") or "").lower():
        return  # the project chose its journal mode
    # Kept by the file once set: on a database in WAL already this only reads its header. On a new
    # file, processes that start together each try to set it: the change needs the file to
    # itself, and SQLite refuses one of two such at once without waiting ("database is locked"),
    # so it is tried again until the connection's own timeout.
    timeout = float(connection.settings_dict["OPTIONS"].get("timeout", SQLITE_OPTIONS["timeout"]))
    deadline = time.monotonic() + timeout
    while True:
        try:
            connection.connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(random.uniform(0.01, 0.05))


def sqlite_problems() -> list[str]:
    """What the project set on its SQLite database that several writing processes cannot work
    with, one sentence each (the options Switchyard fills in are fine)."""
    wrapper = connections[DEFAULT_DB_ALIAS]
    if wrapper.vendor != "sqlite":
        return []
    options = wrapper.settings_dict.get("OPTIONS") or {}
    where = f"DATABASES[{DEFAULT_DB_ALIAS!r}]['OPTIONS']"
    found = []
    mode = options.get("transaction_mode")
    if str(mode or "DEFERRED").upper() not in SQLITE_WRITING_MODES:
        found.append(f"{where}['transaction_mode'] is {mode!r}: with several processes writing the SQLite database "
                     "(the web server, managers, commands), a transaction that reads before it writes fails with "
                     f"'database is locked'; set it to 'IMMEDIATE', or remove it (Switchyard sets 'IMMEDIATE')")
    timeout = options.get("timeout")
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout < SQLITE_MIN_TIMEOUT:
        found.append(f"{where}['timeout'] is {timeout!r}: a writer that waits longer than that for another one fails "
                     f"with 'database is locked'; set it to {SQLITE_OPTIONS['timeout']} or more, or remove it "
                     f"(Switchyard sets {SQLITE_OPTIONS['timeout']})")
    return found


def cursor():
    """A cursor of the default connection whose statements PostgreSQL may prepare."""
    if connection.vendor != "postgresql":
        return connection.cursor()
    from django.db.backends.postgresql.base import ServerBindingCursor

    # What Django's connection.cursor() does, with a server-binding cursor.
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        connection.validate_thread_sharing()
        raw = ServerBindingCursor(connection.connection)
        return connection.make_debug_cursor(raw) if connection.queries_logged else connection.make_cursor(raw)


def fetch(model, sql, params, *, names=None, extra=()):
    """Run ``sql`` through :func:`cursor` and load its rows as ``model`` instances, with Django's
    converters (a ``JSONField`` arrives as text). The row's first columns are ``names`` (field
    names; default: every concrete field, :func:`columns`' order), then one column for each of
    ``extra``, set as an attribute of that name. What ``Model.objects.raw`` does, without working
    out again for every row which column is which."""
    names = tuple(names) if names is not None else None
    loaders = _loaders(model, names)
    with cursor() as c:
        c.execute(sql, params)
        rows = c.fetchall()
    order = None if names is None else _positions(model, names)
    loaded = []
    for row in rows:
        values = [convert(value) if convert else value for convert, value in zip(loaders, row)]
        if order is not None:  # in the model's field order, the others deferred
            values = [values[i] if i is not None else DEFERRED for i in order]
        instance = model.from_db(connection.alias, None, values)
        for name, value in zip(extra, row[len(loaders):]):
            setattr(instance, name, value)
        loaded.append(instance)
    return loaded


@functools.cache
def _positions(model, names):
    """For each concrete field of ``model``, its position in ``names``, or None."""
    return [names.index(field.attname) if field.attname in names else None for field in model._meta.concrete_fields]


@functools.cache
def _loaders(model, names):
    """For each of ``names`` (all concrete fields when None): a function from the column's value to
    the field's, or None when the value is the field's already."""
    fields = model._meta.concrete_fields if names is None else [model._meta.get_field(name) for name in names]
    loaders = []
    for field in fields:
        expression = field.get_col(model._meta.db_table)
        converters = connection.ops.get_db_converters(expression) + field.get_db_converters(connection)

        def load(value, converters=converters, expression=expression):
            for convert in converters:
                value = convert(value, expression, connection)
            return value

        loaders.append(load if converters else None)
    return loaders


@functools.cache
def columns(model, alias=None) -> str:
    """The model's concrete columns, quoted (``alias.``-qualified when given), comma-separated."""
    q = connection.ops.quote_name
    prefix = f"{alias}." if alias else ""
    return ", ".join(f"{prefix}{q(field.column)}" for field in model._meta.concrete_fields)


# --- aborted transactions ------------------------------------------------------------------------

#: PostgreSQL's codes of a transaction it aborted so that another could go on (a deadlock, a
#: serialization failure): it wrote nothing, and may simply run again.
TRANSIENT_SQLSTATES = {"40P01", "40001"}


def is_transient(exc) -> bool:
    """A transaction the database aborted and that may simply run again (on SQLite, "database is
    locked": another process held the write lock longer than the busy timeout)."""
    return isinstance(exc, OperationalError) and (
        getattr(exc.__cause__, "sqlstate", None) in TRANSIENT_SQLSTATES or "database is locked" in str(exc))


def again_if_aborted(work, *, tries, what, pause=0.0):
    """``work()`` (one transaction), run again while the database aborts it (:func:`is_transient`),
    ``tries`` times at most, ``pause`` times the try's number seconds apart; each abort is logged,
    naming ``what``. Any other error, and the last abort, go up. Returns what ``work`` returns."""
    for attempt in range(1, tries + 1):
        try:
            return work()
        except OperationalError as exc:
            if not is_transient(exc) or attempt == tries:
                raise
            logger.warning("%s: the database aborted it (%s); again", what, str(exc).splitlines()[0][:200])
            time.sleep(pause * attempt)
