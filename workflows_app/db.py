"""The statements on every operation's path, planned once per connection (PostgreSQL).

Django binds parameters on the client (psycopg's ``ClientCursor``), which never prepares a
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

from django.db import connection
from django.db.models import DEFERRED


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
