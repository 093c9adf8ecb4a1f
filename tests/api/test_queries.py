"""The lists run a constant number of queries, whatever the number of rows (no N+1)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import Agent
from tests.api.conftest import API, PERMISSION_QUERIES
from workflows_app.models import OperationDependency
from workflows_app.states import EventType, OperationState
from workflows_app.transitions import record_event


@pytest.fixture
def rows(request, make_execution, make_operation):
    """``n`` executions, ``n`` operations in a chain in the first one, ``n`` events, ``n`` agents
    with a started operation each."""
    n = request.param
    executions = [make_execution() for _ in range(n)]
    chain = [make_operation(OperationState.PENDING, executions[0], name=f"op-{i}") for i in range(n)]
    for before, after in zip(chain, chain[1:]):
        OperationDependency.objects.create(operation=after, depends_on=before)
    for i in range(n):
        record_event(executions[i].pk, EventType.LOG, f"event {i}")
        Agent.objects.create(name=f"agent-{i}", last_heartbeat=timezone.now() - timedelta(seconds=i))
        make_operation(OperationState.STARTED, executions[-1], name=f"run-{i}", agent=f"agent-{i}")
    return n, executions[0]


#: (path, queries): a count and a page; the operations also check the execution exists and
#: prefetch their dependencies (one query for the page). Each also reads the user's permissions.
LISTS = [
    ("/executions", 2),
    ("/executions?status=started&ordering=-started_at", 2),
    ("/executions/{id}/operations", 4),
    ("/events", 2),
    ("/events?type=log&after=0", 2),
    ("/agents", 2),
    ("/workflows", 1),  # the workflows paused as a whole
    ("/executions/{id}", 2),  # the execution, and one grouped count per state
    ("/executions/{id}/graph", 3),  # the execution, its operations, its dependencies
]


@pytest.mark.parametrize("rows", [3, 30], indirect=True)
@pytest.mark.parametrize("path, queries", LISTS)
def test_a_list_runs_the_same_number_of_queries_for_3_and_30_rows(api, rows, django_assert_num_queries, path,
                                                                   queries):
    n, first = rows
    with django_assert_num_queries(queries + PERMISSION_QUERIES):
        response = api.get(API + path.format(id=first.pk))
    assert response.status_code == 200
    body = response.json()
    if "results" in body and path != "/workflows":
        assert body["count"] == len(body["results"]) == n, "every row is on the page"


@pytest.mark.parametrize("rows", [30], indirect=True)
def test_the_operations_show_each_dependency_from_the_one_prefetch(api, rows):
    n, first = rows
    results = api.get(f"{API}/executions/{first.pk}/operations").json()["results"]
    assert [r["depends_on"] for r in results] == [[]] + [[f"op-{i}"] for i in range(n - 1)]
