"""The statements every operation runs are prepared on PostgreSQL (``workflows_app/db.py``):
planned once per connection instead of once per operation. Django's own queries are not, and
``DATABASE_PREPARE_THRESHOLD=none`` turns preparing off (a connection pooler that cannot keep
prepared statements)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from workflows_app import broker
from workflows_app.models import Execution, Operation
from workflows_app.registry import operation
from workflows_app.states import OperationState

ROOT = Path(__file__).resolve().parents[2]
RUNS = 6  # above the default threshold (5)

#: A piece of each statement on an operation's path, as it appears in its SQL.
HOT_STATEMENTS = {
    "claim": "WITH old AS",
    "the execution's lock, the transition and its event": "WITH ex AS",
    "countdown": '"pending_dependencies" - 1',
    "idle check": "SELECT EXISTS",
}


@operation(name="test_prepared_noop", max_retries=0)
def noop(ctx):
    return None


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setattr(broker, "send_advance", lambda pk, workflow_id=None: None)
    monkeypatch.setattr(broker, "send_operations", lambda ops: None)


def run_operations(agent_link, make_execution, make_operation, n=RUNS):
    execution = make_execution()
    # Graph steps (not awaited): each completion runs the idle check.
    ops = [make_operation(OperationState.SENT, execution, name=f"p{i}", operation="test_prepared_noop", attempt=1,
                          awaited=False) for i in range(n)]
    for op in ops:
        agent_link.deliver(op, 1)
    return ops


def prepared():
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)  # the idle check runs once the result commits
def test_an_operations_statements_are_prepared_and_djangos_are_not(agent_link, make_execution, make_operation):
    ops = run_operations(agent_link, make_execution, make_operation)
    assert {op.state for op in Operation.objects.filter(pk__in=[op.pk for op in ops])} == {OperationState.SUCCEEDED}
    for _ in range(RUNS):
        assert Execution.objects.filter(pk=ops[0].execution_id).count() == 1
    statements = prepared()
    missing = [name for name, piece in HOT_STATEMENTS.items() if not any(piece in s for s in statements)]
    assert missing == [], f"not prepared: {missing}; prepared: {statements}"
    assert not any("COUNT(*)" in s for s in statements), "Django's own queries bind on the client and are not prepared"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_with_no_threshold_nothing_is_prepared_and_operations_still_run(agent_link, make_execution, make_operation):
    connection.ensure_connection()
    raw = connection.connection
    threshold, raw.prepare_threshold = raw.prepare_threshold, None
    try:
        raw.execute("DEALLOCATE ALL")
        raw._prepared.clear()  # psycopg's own record of what it prepared, now gone
        ops = run_operations(agent_link, make_execution, make_operation)
        assert {op.state for op in Operation.objects.filter(pk__in=[op.pk for op in ops])} == {OperationState.SUCCEEDED}
        assert prepared() == []
    finally:
        raw.prepare_threshold = threshold


def settings_with(value):
    env = {**os.environ, "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/unused", "DATABASE_PREPARE_THRESHOLD": value}
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from django.conf import settings; "
                               "print(settings.DATABASES['default']['OPTIONS']['prepare_threshold'])"],
        cwd=ROOT, env={**env, "DJANGO_SETTINGS_MODULE": "switchyard.settings"}, capture_output=True, text=True, timeout=60)


@pytest.mark.processes
@pytest.mark.parametrize("value, expected", [("5", "5"), ("0", "0"), ("none", "None"), ("", "None")])
def test_the_threshold_comes_from_the_environment(value, expected):
    done = settings_with(value)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


@pytest.mark.processes
@pytest.mark.parametrize("value", ["-1", "soon"])
def test_a_bad_threshold_is_a_one_line_error(value):
    done = settings_with(value)
    assert done.returncode != 0
    assert "DATABASE_PREPARE_THRESHOLD must be a whole number or 'none'" in done.stderr


def test_fetch_loads_rows_as_djangos_raw_would(make_execution, make_operation):
    """``db.fetch`` (on either database): every field converted as Django loads it (JSON from text,
    UUIDs), a subset of fields in any column order with the rest deferred, extra columns as
    attributes."""
    from workflows_app import db

    execution = make_execution(failure_mode="continue_while_possible")
    op = make_operation(OperationState.SENT, execution, args=[1, {"a": [2, None]}], kwargs={"k": "v"}, attempt=3)
    q = connection.ops.quote_name
    table = q(Operation._meta.db_table)
    [loaded] = db.fetch(Operation, f"SELECT {db.columns(Operation)}, 7, 'x' FROM {table} WHERE {q('id')} = %s",
                        [Operation._meta.pk.get_db_prep_value(op.pk, connection)], extra=("seven", "x"))
    expected = Operation.objects.get(pk=op.pk)
    for field in Operation._meta.concrete_fields:
        assert getattr(loaded, field.attname) == getattr(expected, field.attname), field.name
    assert (loaded.args, loaded.kwargs, loaded.seven, loaded.x) == ([1, {"a": [2, None]}], {"k": "v"}, 7, "x")
    assert not loaded._state.adding

    names = ("failure_mode", "status", "id")
    sql = f"SELECT {', '.join(q(name) for name in names)} FROM {q(Execution._meta.db_table)} WHERE {q('id')} = %s"
    [partial] = db.fetch(Execution, sql, [Execution._meta.pk.get_db_prep_value(execution.pk, connection)], names=names)
    assert (partial.pk, partial.status, partial.failure_mode) == (execution.pk, "started", "continue_while_possible")
    assert partial.get_deferred_fields() == {f.attname for f in Execution._meta.concrete_fields} - set(names)
