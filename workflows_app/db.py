"""The statements on every operation's path, planned once per connection (PostgreSQL).

Django binds parameters on the client (psycopg's ``ClientCursor``), which never prepares a
statement: PostgreSQL parses and plans every query again. For the few statements each
operation runs — the claim, a transition with its event, the countdown, the execution's lock,
the idle check — planning cost about as much as running them. Those go through :func:`cursor`
instead, which binds on the server, so psycopg prepares a statement once its connection has run
it ``prepare_threshold`` times (Django's ``OPTIONS``; ``DATABASE_PREPARE_THRESHOLD`` in
``switchyard.settings``). Every other query is Django's own, as before. On another database, or
with the threshold unset, this is Django's cursor.

A prepared statement's result columns are fixed, so these statements name their columns
(:func:`columns`) instead of ``*``: a column that a migration adds while workers run does not
break them.
"""

import functools

from django.db import connection
from django.db.models.query import RawQuerySet
from django.db.models.sql.query import RawQuery


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


class _PreparedRawQuery(RawQuery):
    """Django's raw query, run through :func:`cursor`."""

    def clone(self, using):
        return _PreparedRawQuery(self.sql, using, params=self.params)

    def _execute_query(self):
        adapt = connection.ops.adapt_unknown_value
        self.cursor = cursor()
        self.cursor.execute(self.sql, tuple(adapt(value) for value in self.params))


def raw(model, sql, params):
    """``model.objects.raw(sql, params)`` whose statement may be prepared (default database)."""
    return list(RawQuerySet(sql, model=model, query=_PreparedRawQuery(sql, connection.alias, params=tuple(params)),
                            params=params, using=connection.alias))


@functools.cache
def columns(model, alias=None) -> str:
    """The model's concrete columns, quoted (``alias.``-qualified when given), comma-separated."""
    q = connection.ops.quote_name
    prefix = f"{alias}." if alias else ""
    return ", ".join(f"{prefix}{q(field.column)}" for field in model._meta.concrete_fields)
