"""100,000 executions: the list endpoint stays index-backed (SPEC §8, issue 6).

The rows are bulk-created and the table analysed; then ``GET /api/v1/executions?status=…``
(the default ordering, ``-created_at``) is called, its SQL captured, and PostgreSQL's plan for
each query is read: it must use an index on the execution table, never a sequential scan of it.
A plan, not a time: it does not depend on the machine.
"""

import json
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from workflows_app.models import Execution
from workflows_app.states import ExecutionStatus

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.slow]

ROWS = 100_000
TABLE = Execution._meta.db_table
#: One in a hundred failed, a few running, the rest completed: like a long-lived installation.
MIX = [(ExecutionStatus.FAILED, 1), (ExecutionStatus.STARTED, 2), (ExecutionStatus.COMPLETED, 97)]


@pytest.fixture
def many_executions(django_db_blocker, transactional_db):
    now = timezone.now()
    statuses = [status for status, share in MIX for _ in range(share)]
    batch = []
    for i in range(ROWS):
        created = now - timedelta(seconds=ROWS - i)
        batch.append(Execution(id=uuid.uuid4(), workflow_id=f"wf-{i % 20}", status=statuses[i % len(statuses)],
                               created_at=created))
        if len(batch) == 10_000:
            Execution.objects.bulk_create(batch)
            batch = []
    # created_at is auto_now_add: bulk_create sets it to now; spread it as a real history has.
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {TABLE} SET created_at = %s - (random() * interval '100 days')", [now])
        cursor.execute(f"VACUUM ANALYZE {TABLE}")
    yield ROWS


def plan(sql, params):
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        return cursor.fetchone()[0]


def nodes(node):
    yield node
    for child in node.get("Plans", []):
        yield from nodes(child)


def scans_of_table(explained):
    return [(node["Node Type"], node.get("Index Name")) for node in nodes(explained[0]["Plan"])
            if node.get("Relation Name") == TABLE]


@pytest.mark.parametrize("status", ["failed", "completed"])
def test_listing_100k_executions_by_status_with_the_default_ordering_is_index_backed(many_executions, status):
    user = get_user_model().objects.create_user("reader", password="x")
    client = APIClient()
    client.force_authenticate(user)
    with CaptureQueriesContext(connection) as captured:
        response = client.get("/api/v1/executions", {"status": status})
    assert response.status_code == 200, response.content
    body = response.json()
    assert len(body["results"]) == 100 and {r["status"] for r in body["results"]} == {status}
    created = [r["created_at"] for r in body["results"]]
    assert created == sorted(created, reverse=True), "newest first (the default ordering)"

    queries = [q for q in captured.captured_queries if f'"{TABLE}"' in q["sql"]]
    assert queries, "the list reads the execution table"
    for query in queries:
        explained = plan(query["sql"], ())
        scans = scans_of_table(explained)
        assert scans and all("Index" in kind for kind, _ in scans), (
            f"{query['sql']}\nscans {scans}\n{json.dumps(explained, indent=1)[:3000]}")
