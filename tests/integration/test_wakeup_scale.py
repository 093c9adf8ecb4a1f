"""100,000 executions waiting on an event: the tick and a wake-up read what they need through
indexes, never every waiting execution (issue 19, target 2).

Beside a history of 50,000 succeeded operations, one execution of ``it_events`` is started and
suspended on its wait by the engine, in this process; it is cloned in bulk into 100,000 (``bench.suspended.clone_waiting``: its execution,
wait and event rows), and the tables are analysed. Then 1,000 other executions get an event
their planner statistics have not seen yet (a burst of deliveries). One pass of a manager's tick
(with the sweep for lost wake-ups) and one delivery with its wake-up (``services.send_event``,
then the dispatcher as a manager runs it) are run with every statement recorded, and
PostgreSQL's plan of each is read: no sequential scan of the execution, operation, wait or event
tables; no query of the tick reads more of their rows than one batch of its sweep (run under
EXPLAIN ANALYZE); the wake-up looks for its event among its own execution's events only. A plan, not
a time: it does not depend on the machine.
"""

import json

import pytest
from django.db import connection
from django.test import override_settings

from agents.worker.manager import Tick
from bench.suspended import clone_waiting
from workflows_app import services
from workflows_app.engine import dispatcher, tick
from workflows_app.models import Event, Execution, Operation, Wait
from workflows_app.states import ExecutionStatus, OperationState, WaitOutcome

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.slow]

WAITING = 100_000
#: Succeeded operations of ended executions: a history, so that the planner sees a real table.
HISTORY = 50_000
#: Executions given an event after the tables were analysed.
BURST = 1_000
TABLES = {model._meta.db_table for model in (Execution, Operation, Wait, Event)}


def seed_history(make_execution, make_operation):
    """HISTORY succeeded operations of a completed execution: one made by the ORM, the others
    copies of it (each with its own id and name)."""
    ended = make_execution(status=ExecutionStatus.COMPLETED)
    template = make_operation(OperationState.SUCCEEDED, ended, name="step-0", attempt=1)
    meta, q = Operation._meta, connection.ops.quote_name
    columns = [f.column for f in meta.concrete_fields if f.column not in ("id", "name")]
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {q(meta.db_table)} (id, name, {', '.join(map(q, columns))}) "
                       f"SELECT gen_random_uuid(), 'step-' || n, {', '.join('t.' + q(c) for c in columns)} "
                       f"FROM {q(meta.db_table)} t, generate_series(1, %s) AS n WHERE t.id = %s",
                       [HISTORY - 1, template.pk])


@pytest.fixture
def many_waiting(transactional_db, outbox, make_execution, make_operation):
    if connection.vendor != "postgresql":
        pytest.skip("plans are PostgreSQL's")
    seed_history(make_execution, make_operation)
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=["tests.workflows"]):
        first = services.start("it_events", {"waits": [["go", None]]})
        dispatcher.run_pass(first.pk)
        assert Wait.objects.filter(execution_id=first.pk, outcome=WaitOutcome.WAITING).exists()
        ids = [first.pk, *clone_waiting(first.pk, WAITING - 1)]
        with connection.cursor() as cursor:
            for table in sorted(TABLES):
                cursor.execute(f"VACUUM ANALYZE {connection.ops.quote_name(table)}")
        for execution_id in ids[-BURST:]:
            services.send_event(execution_id, "other", None)
        yield ids


def recorded(run):
    """The statements ``run()`` executes, with their parameters."""
    statements = []

    def record(execute, sql, params, many, context):
        statements.append((sql, params, many))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        run()
    return statements


def plan(sql, params):
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        explained = cursor.fetchone()[0]
    return json.loads(explained) if isinstance(explained, str) else explained


def nodes(node):
    yield node
    for child in node.get("Plans", []):
        yield from nodes(child)


def scans(statements):
    """(statement, [(node type, table, index)]) for each statement that reads or writes rows."""
    explained = []
    for sql, params, many in statements:
        if many or not sql.lstrip().upper().startswith(("SELECT", "UPDATE", "INSERT", "DELETE", "WITH")):
            continue
        tree = plan(sql, params)[0]["Plan"]
        explained.append((sql, [(n["Node Type"], n.get("Relation Name"), n.get("Index Name"))
                                for n in nodes(tree) if n.get("Relation Name")]))
    return explained


def rows_read(statements):
    """(statement, the most rows one plan node read from the four tables) for each SELECT, run
    under EXPLAIN ANALYZE: what it returned and what its filters removed, over all its loops."""
    most = []
    for sql, params, many in statements:
        if many or not sql.lstrip().upper().startswith("SELECT"):
            continue
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
            explained = cursor.fetchone()[0]
        tree = (json.loads(explained) if isinstance(explained, str) else explained)[0]["Plan"]
        read = [(n["Actual Rows"] + n.get("Rows Removed by Filter", 0)) * n["Actual Loops"]
                for n in nodes(tree) if n.get("Relation Name") in TABLES]
        most.append((sql, max(read, default=0)))
    return most


def assert_no_sequential_scan(explained):
    sequential = [(sql, found) for sql, found in explained
                  if any(kind == "Seq Scan" and table in TABLES for kind, table, _ in found)]
    assert not sequential, "\n\n".join(f"{sql}\n{found}" for sql, found in sequential)


def test_a_tick_pass_and_a_wake_up_with_100k_waiting_read_through_indexes_only(many_waiting, outbox):
    tick._last_sweep = None  # this pass sweeps for lost wake-ups too
    statements = recorded(Tick())
    explained = scans(statements)
    read = {table for _, found in explained for _, table, _ in found}
    assert {Execution._meta.db_table, Wait._meta.db_table, Operation._meta.db_table} <= read, explained
    assert_no_sequential_scan(explained)
    assert tick._sweep_after is not None, "the sweep read one batch of the started executions, not all of them"
    # Its work does not grow with the number waiting: no statement reads them all.
    heavy = [(sql, read) for sql, read in rows_read(statements) if read > tick.SWEEP_BATCH + 100]
    assert not heavy, heavy

    execution_id = many_waiting[WAITING // 2]

    def deliver_and_wake():
        services.send_event(execution_id, "go", {"n": 1})
        with override_settings(SWITCHYARD_WORKFLOW_MODULES=["tests.workflows"]):
            dispatcher.run_pass(execution_id)

    explained = scans(recorded(deliver_and_wake))
    execution = Execution.objects.get(pk=execution_id)
    assert (execution.status, execution.payload) == (ExecutionStatus.COMPLETED, {"got": [{"n": 1}]})
    assert str(execution_id) in outbox["advance"]
    assert_no_sequential_scan(explained)
    # Its event is looked for among its own execution's events, not among every delivered one.
    events = [index for _, found in explained for kind, table, index in found
              if table == Event._meta.db_table and kind != "ModifyTable"]
    assert events and all(index in ("event_received_execution", "event_execution_id") for index in events), explained
