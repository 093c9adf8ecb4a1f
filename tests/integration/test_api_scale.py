"""A large history: 100,000 ended executions and 1,000,000 events, and the lists stay
index-backed (issue 6, then issue 19's "a large history").

The history is the benchmark's (``bench.history.seed``: SQL ``generate_series``, rows shaped like
the engine's, the tables analysed), written once for the module. Each list request — every
filter and ordering of ``GET /api/v1/executions``, ``GET /api/v1/events`` with each of its filters,
and an execution's own pages — is made, its SQL captured, and PostgreSQL's plan for each query
read: every table it reads must be read through an index, never by a sequential scan. A plan,
not a time: it does not depend on the machine.

One query is left out: the count of a list with no filter at all (``SELECT COUNT(*)`` of the
whole table, for the pagination's ``count``). An exact count of every row reads every row, by an
index-only scan or a sequential one as the planner prefers; README's "A large history" gives its
time.
"""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from bench import history
from tests.api.conftest import VIEWER, make_user
from workflows_app.models import Event, Execution, Operation, OperationDependency

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.slow]

TABLES = {model._meta.db_table for model in (Event, Execution, Operation, OperationDependency)}
EXECUTION = Execution._meta.db_table
#: One seeded execution, its events and operations (seeded executions are named by their index).
SOME = 12_345


@pytest.fixture(scope="module")
def large_history(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        if connection.vendor != "postgresql":
            pytest.skip("the plans read here are PostgreSQL's")
        seeded = history.seed()
        assert history.counts() == {"events": seeded["events"], "executions": seeded["executions"]}
        with connection.cursor() as cursor:
            cursor.execute("SELECT md5(%s)::uuid, max(id) FROM " + connection.ops.quote_name(Event._meta.db_table),
                           [f"history-execution-{SOME}"])
            some, last_event = cursor.fetchone()
        yield {"execution": str(some), "last_event": last_event, **seeded}
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE " + ", ".join(connection.ops.quote_name(t) for t in sorted(TABLES)) + " CASCADE")


@pytest.fixture
def reader(db):
    user = make_user("reader", VIEWER, password="x")
    client = APIClient()
    client.force_authenticate(user)
    return client


def plan(sql):
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql)
        return cursor.fetchone()[0]


def nodes(node):
    yield node
    for child in node.get("Plans", []):
        yield from nodes(child)


def is_whole_table_count(sql):
    return any(sql == f'SELECT COUNT(*) AS "__count" FROM "{table}"' for table in TABLES)


EXECUTION_LISTS = [
    {}, {"status": "failed"}, {"status": "completed"}, {"status": "started"}, {"workflow_id": "history-seed-03"},
    {"deployment_id": "history-deployment-7"}, {"created_after": "{recent}"}, {"created_before": "{recent}"},
    *({"ordering": f"{sign}{field}"} for field in ("created_at", "started_at", "ended_at", "status", "workflow_id")
      for sign in ("", "-")),
    {"status": "failed", "ordering": "-ended_at"}, {"workflow_id": "history-seed-03", "ordering": "started_at"},
    {"status": "completed", "created_after": "{recent}", "ordering": "-started_at"}, {"offset": "50000"},
]
EVENT_LISTS = [
    {}, {"execution_id": "{execution}"}, {"after": "{last_event_but_50}"}, {"type": "workflow_failed"},
    {"type": "task_sent"}, {"type": "task_sent", "after": "{last_event_but_50}"},
    {"execution_id": "{execution}", "after": "1"}, {"execution_id": "{execution}", "type": "task_sent"},
]
REQUESTS = ([("/api/v1/executions", query) for query in EXECUTION_LISTS]
            + [("/api/v1/events", query) for query in EVENT_LISTS]
            + [(f"/api/v1/executions/{{execution}}{page}", {}) for page in ("", "/operations", "/graph")])


@pytest.mark.parametrize("path, query", REQUESTS, ids=[f"{p}?{json.dumps(q)}" for p, q in REQUESTS])
def test_every_list_reads_the_large_history_through_indexes(large_history, reader, path, query):
    values = {"execution": large_history["execution"], "last_event_but_50": large_history["last_event"] - 50}
    if any("{recent}" in value for value in query.values()):
        with connection.cursor() as cursor:  # a tenth of the history is newer than this
            cursor.execute(f"SELECT percentile_disc(0.9) WITHIN GROUP (ORDER BY created_at) FROM {EXECUTION}")
            values["recent"] = cursor.fetchone()[0].isoformat()
    path = path.format(**values)
    query = {name: value.format(**values) for name, value in query.items()}
    with CaptureQueriesContext(connection) as captured:
        response = reader.get(path, query)
    assert response.status_code == 200, response.content

    queries = [q["sql"] for q in captured.captured_queries
               if any(f'"{table}"' in q["sql"] for table in TABLES) and not is_whole_table_count(q["sql"])]
    assert queries, "the request reads the history"
    for sql in queries:
        explained = plan(sql)
        scans = [(node["Node Type"], node.get("Relation Name"), node.get("Index Name"))
                 for node in nodes(explained[0]["Plan"]) if node.get("Relation Name") in TABLES]
        assert scans and not [scan for scan in scans if scan[0] == "Seq Scan"], (
            f"{sql}\nscans {scans}\n{json.dumps(explained, indent=1)[:3000]}")


@pytest.mark.parametrize("status", ["failed", "completed"])
def test_listing_executions_by_status_shows_the_newest_first(large_history, reader, status):
    response = reader.get("/api/v1/executions", {"status": status})
    assert response.status_code == 200, response.content
    body = response.json()
    assert len(body["results"]) == 100 and {r["status"] for r in body["results"]} == {status}
    assert body["count"] == {"failed": 2, "completed": 97}[status] * large_history["executions"] // 100
    created = [r["created_at"] for r in body["results"]]
    assert created == sorted(created, reverse=True), "newest first (the default ordering)"


def test_an_executions_events_are_listed_in_the_order_they_happened(large_history, reader):
    response = reader.get("/api/v1/events", {"execution_id": large_history["execution"]})
    assert response.status_code == 200, response.content
    types = [event["type"] for event in response.json()["results"]]
    steps = ["task_sending", "task_sent", "task_started", "task_succeeded"]
    assert types == ["workflow_started", *steps * history.OPERATIONS, "workflow_completed"]
