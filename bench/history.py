"""A large history (issue 19, target 3): the throughput cases on a database that already holds
100,000 ended executions and 1,000,000 events, against the same cases on the database as it was.

The history is written by SQL (``generate_series``), in rows shaped like the engine's: each seeded
execution ended (97% ``completed``, 2% ``failed``, 1% ``cancelled``), with its operations (a
chain of ``OPERATIONS`` no-ops, ``succeeded`` or, for a failed one, the last ``failed``) and the
events the transitions write for them — ``workflow_started``, then per operation
``task_sending``, ``task_sent``, ``task_started`` and ``task_succeeded``/``task_failed``, then the
workflow's end: 2 + 4 × ``OPERATIONS`` events per execution, 10 with the default 2. Its
executions are spread over 100 days, as a long-lived installation's are. The seeded rows are
recognised by their workflow ids (``SEED_WORKFLOWS``) and deleted at the end of the case, so that
later cases run on the database as it was.

Each round measures the fan-out, fan-in and chain cases of ``bench/throughput.py`` (the same
workflows, ``services.start`` until ``completed``): all rounds before the history is written
("before"), then all rounds with it ("with history"), then all rounds once it is removed again
("after": a machine's load drifts, and the history cannot come and go between rounds — writing it
takes a minute). The ratio is "with" over the median of "before" and "after" (target: at most
1.2). The tables are analysed after the history is written and after it is removed, as autovacuum
would have, and a checkpoint writes the pages out before the cases run.
"""

import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.db import connection, transaction

from bench.throughput import DEFAULT_SIZES, _switchyard
from workflows_app import retention
from workflows_app.models import Event, Execution, Operation, OperationDependency, Wait

EXECUTIONS = 100_000
OPERATIONS = 2  # per seeded execution: 2 + 4 * 2 = 10 events each, 1,000,000 in all
SEED_WORKFLOWS = tuple(f"history-seed-{i:02d}" for i in range(20))
SEED_CREATED_BY = "bench.history"
TARGET = 1.2


@dataclass
class Row:
    case: str
    before: list = field(default_factory=list)
    with_history: list = field(default_factory=list)
    after: list = field(default_factory=list)

    def phase(self, name) -> list:
        return {"before": self.before, "with history": self.with_history, "after": self.after}[name]


@dataclass
class Result:
    rows: list
    seeded: dict  # rows written: executions, operations, events
    tables: dict  # what the tables held while measured "with history": events, executions
    seconds: dict  # how long the seed and its removal took


def run(stack, agent, rounds, sizes=None, executions=EXECUTIONS) -> Result:
    """The fan-out, fan-in and chain cases, ``rounds`` times before the history is written,
    ``rounds`` times with it, and ``rounds`` times once it is removed again (how much the machine
    drifted meanwhile); the history is removed even on failure."""
    sizes = {**DEFAULT_SIZES, **(sizes or {})}
    n, m = sizes["fanout"], sizes["chain"]
    cases = [
        (Row(f"fan-out: {n} no-ops"), "bench_fan_out", {"n": n, "agent": agent}),
        (Row(f"fan-in: {n} no-ops then a join"), "bench_fan_in", {"n": n, "agent": agent}),
        (Row(f"chain: {m} sequential no-ops"), "bench_chain", {"m": m, "agent": agent}),
    ]

    def measure(phase):
        for round_ in range(1, rounds + 1):
            for row, workflow, parameters in cases:
                row.phase(phase).append(_switchyard(workflow, parameters))
                print(f"round {round_}: {row.case}, {phase}: {row.phase(phase)[-1]:.3f} s", file=sys.stderr,
                      flush=True)

    _switchyard("bench_fan_in", {"n": 2, "agent": agent})  # warm-up, untimed
    measure("before")
    began = time.monotonic()
    try:
        seeded = seed(executions)
        seconds = {"seed": time.monotonic() - began}
        tables = counts()
        print(f"history: wrote {seeded} in {seconds['seed']:.1f} s; the tables hold {tables}", file=sys.stderr,
              flush=True)
        measure("with history")
    finally:
        began = time.monotonic()
        remove_seed()
    seconds["remove"] = time.monotonic() - began
    measure("after")
    return Result([row for row, _, _ in cases], seeded, tables, seconds)


def report(result) -> str:
    tables = result.tables
    lines = [f"| large history case | before (s) | with {tables['executions']:,} executions, {tables['events']:,} "
             f"events (s) | after, history removed (s) | ratio with / without | target ≤ {TARGET} |",
             "|---|---|---|---|---|---|"]
    for row in result.rows:
        before, with_history, after = (statistics.median(values) for values in (row.before, row.with_history, row.after))
        ratio = with_history / statistics.median(row.before + row.after)
        lines.append(f"| {row.case} | {before:.3f} | {with_history:.3f} | {after:.3f} | {ratio:.2f} | "
                     f"{'met' if ratio <= TARGET else 'not met'} |")
    seeded = result.seeded
    lines.append(f"\nThe history: {seeded['executions']:,} ended executions, {seeded['operations']:,} operations and "
                 f"{seeded['events']:,} events, written in {result.seconds['seed']:.1f} s and removed in "
                 f"{result.seconds['remove']:.1f} s. Medians of the rounds; \"without\" is the median of the "
                 "rounds before and after.")
    return "\n".join(lines)


def _tables():
    return {model.__name__: connection.ops.quote_name(model._meta.db_table)
            for model in (Event, Execution, Operation, OperationDependency, Wait)}


def events_per_execution(operations=OPERATIONS) -> int:
    return 2 + 4 * operations


#: The seeded executions, i = 1..executions (the newest last): 2% failed, 1% cancelled, 97% completed.
_SERIES = """
    generate_series(1, %(executions)s) AS i,
    LATERAL (SELECT md5('history-execution-' || i)::uuid AS id,
                    now() - interval '1 hour' - interval '100 days' * (1 - i::float / %(executions)s) AS created_at,
                    CASE WHEN i %% 100 < 2 THEN 'failed' WHEN i %% 100 = 2 THEN 'cancelled' ELSE 'completed' END AS status) AS e
"""


def seed(executions=EXECUTIONS, operations=OPERATIONS) -> dict:
    """Write ``executions`` ended executions with ``operations`` chained operations each and their
    events (PostgreSQL), then analyse the tables. Returns how many rows of each it wrote."""
    t = _tables()
    params = {"executions": executions, "operations": operations, "steps": events_per_execution(operations),
              "workflows": list(SEED_WORKFLOWS), "created_by": SEED_CREATED_BY}
    with transaction.atomic(), connection.cursor() as cursor, _bulk_load(cursor, *t.values()):
        cursor.execute(f"""
            INSERT INTO {t['Execution']} (id, workflow_id, deployment_id, parameters, status, failure_mode, timeout,
                wait_after_fail, payload, error, is_dry_run, created_by, created_at, started_at, ended_at, token_hash, patches)
            SELECT e.id, (%(workflows)s::text[])[1 + i %% 20], 'history-deployment-' || (i %% 1000),
                   jsonb_build_object('i', i), e.status, 'no_new_calls', NULL, 600, '{{}}'::jsonb,
                   CASE WHEN e.status = 'failed' THEN 'step-' || (%(operations)s - 1) || ' failed' ELSE '' END,
                   false, %(created_by)s, e.created_at, e.created_at + interval '10 ms',
                   e.created_at + interval '10 ms' * (%(steps)s + 1), '', '{{}}'::jsonb
            FROM {_SERIES}
        """, params)
        cursor.execute(f"""
            INSERT INTO {t['Operation']} (id, execution_id, name, operation, args, kwargs, agent, state, result, error,
                attempt, current_retries, max_retries, retry_interval, retry_backoff, next_attempt_at, timeout,
                pending_dependencies, input, awaited, failure_handled, incarnation, pending_at, sending_at, sent_at,
                started_at, rescheduled_at, succeeded_at, failed_at, cancelled_at, after)
            SELECT md5('history-operation-' || i || '-' || k)::uuid, e.id, 'step-' || k, 'bench_noop',
                   jsonb_build_array(k), '{{}}'::jsonb, 'history-agent', CASE WHEN f THEN 'failed' ELSE 'succeeded' END,
                   NULL, CASE WHEN f THEN '{{"type": "RuntimeError", "message": "seeded"}}'::jsonb END,
                   1, 0, 0, 5, 1, NULL, NULL, 0, NULL, false, false, 'history-incarnation',
                   at, at, at, at + interval '1 ms', NULL, CASE WHEN NOT f THEN at + interval '2 ms' END,
                   CASE WHEN f THEN at + interval '2 ms' END, NULL, '[]'::jsonb
            FROM {_SERIES}, generate_series(0, %(operations)s - 1) AS k,
                 LATERAL (SELECT e.status = 'failed' AND k = %(operations)s - 1 AS f,
                                 e.created_at + interval '40 ms' * k AS at) AS step
        """, params)
        cursor.execute(f"""
            INSERT INTO {t['OperationDependency']} (operation_id, depends_on_id)
            SELECT md5('history-operation-' || i || '-' || k)::uuid, md5('history-operation-' || i || '-' || (k - 1))::uuid
            FROM generate_series(1, %(executions)s) AS i, generate_series(1, %(operations)s - 1) AS k
        """, params)
        # The events of an execution of each status, as arrays, step by step; then each seeded
        # execution's, in order (unnest keeps it: event ids increase step by step), 10 ms apart.
        cursor.execute(f"""
            INSERT INTO {t['Event']} (execution_id, operation, type, message, data, timestamp)
            WITH step AS (
                SELECT s.status, n, CASE WHEN n = 0 OR n = %(steps)s - 1 THEN NULL ELSE 'step-' || ((n - 1) / 4) END AS operation,
                       CASE WHEN n = 0 THEN 'workflow_started' WHEN n = %(steps)s - 1 THEN 'workflow_' || s.status
                            WHEN (n - 1) %% 4 = 3 AND s.status = 'failed' AND n = %(steps)s - 2 THEN 'task_failed'
                            ELSE (ARRAY['task_sending', 'task_sent', 'task_started', 'task_succeeded'])[1 + (n - 1) %% 4]
                       END AS type,
                       CASE WHEN n = 0 THEN 'pending' WHEN n = %(steps)s - 1 THEN 'started'
                            ELSE (ARRAY['pending', 'sending', 'sent', 'started'])[1 + (n - 1) %% 4] END AS source,
                       CASE WHEN n = 0 THEN 'started' WHEN n = %(steps)s - 1 THEN s.status
                            WHEN s.status = 'failed' AND n = %(steps)s - 2 THEN 'failed'
                            ELSE (ARRAY['sending', 'sent', 'started', 'succeeded'])[1 + (n - 1) %% 4] END AS target
                FROM unnest(ARRAY['completed', 'failed', 'cancelled']) AS s(status),
                     generate_series(0, %(steps)s - 1) AS n
            ), template AS (
                SELECT status, array_agg(operation ORDER BY n) AS operations, array_agg(type ORDER BY n) AS types,
                       array_agg(source || ' -> ' || target ORDER BY n) AS messages,
                       array_agg(CASE WHEN operation IS NULL THEN jsonb_build_object('from', source, 'to', target)
                                      ELSE jsonb_build_object('from', source, 'to', target, 'attempt', 1) END
                                 ORDER BY n) AS data,
                       array_agg(interval '10 ms' * (n + 1) ORDER BY n) AS offsets
                FROM step GROUP BY status
            )
            SELECT e.id, ev.operation, ev.type, ev.message, ev.data, e.created_at + ev.offset_
            FROM {t['Execution']} AS e JOIN template USING (status),
                 LATERAL unnest(template.operations, template.types, template.messages, template.data,
                                template.offsets) AS ev(operation, type, message, data, offset_)
            WHERE e.workflow_id = ANY(%(workflows)s) AND e.created_by = %(created_by)s
            ORDER BY e.created_at
        """, params)
    analyze()
    return {"executions": executions, "operations": executions * operations,
            "events": executions * events_per_execution(operations)}


@contextmanager
def _bulk_load(cursor, *tables):
    """Load rows the way ``pg_restore`` does: the secondary indexes of ``tables`` (not those of a
    primary key or unique constraint) are dropped and built again once the rows are in — one
    sorted build instead of a random insert per row, 6× faster for the events — and the foreign
    keys are not checked row by row (the rows are consistent by construction). In the caller's
    transaction: nothing else sees the tables without their indexes."""
    cursor.execute("""
        SELECT i.indexname, i.indexdef FROM pg_indexes i
        WHERE i.schemaname = current_schema() AND i.tablename = ANY(%s)
          AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = (quote_ident(i.indexname))::regclass)
    """, [[table.strip('"') for table in tables]])
    indexes = cursor.fetchall()
    _skip_foreign_key_checks(cursor)
    for name, _ in indexes:
        cursor.execute(f"DROP INDEX {connection.ops.quote_name(name)}")
    yield
    for _, definition in indexes:
        cursor.execute(definition)


def _skip_foreign_key_checks(cursor):
    """For the rest of the transaction, when the role may (a superuser): foreign keys are checked
    by triggers, which a replica's session role does not fire."""
    cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
    if cursor.fetchone()[0]:
        cursor.execute("SET LOCAL session_replication_role = replica")


def remove_seed():
    """Delete what :func:`seed` wrote (``retention.discard``: the one way executions are deleted)."""
    retention.discard(Execution.objects.filter(workflow_id__in=SEED_WORKFLOWS, created_by=SEED_CREATED_BY))
    analyze()


def analyze():
    """VACUUM ANALYZE the engine's tables (outside a transaction: Django's autocommit), then, when
    the role may, CHECKPOINT: the pages just written go to disk now rather than in a checkpoint
    while the cases run, which would slow their commits (a real history was written long before)."""
    with connection.cursor() as cursor:
        for table in _tables().values():
            cursor.execute(f"VACUUM ANALYZE {table}")
        cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        if cursor.fetchone()[0]:
            cursor.execute("CHECKPOINT")


def counts() -> dict:
    """How many events and executions the tables hold."""
    t = _tables()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT (SELECT count(*) FROM {t['Event']}), (SELECT count(*) FROM {t['Execution']})")
        events, executions = cursor.fetchone()
    return {"events": events, "executions": executions}
