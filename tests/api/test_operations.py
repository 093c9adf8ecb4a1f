"""GET /api/v1/executions/{id}/operations and /graph."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.api.conftest import API, openapi
from workflows_app.models import OperationDependency
from workflows_app.states import OperationState

OPERATION_FIELDS = {"id", "execution", "name", "operation", "args", "kwargs", "agent", "local", "state", "result",
                    "error", "attempt", "current_retries", "max_retries", "retry_interval", "next_attempt_at", "timeout",
                    "depends_on", "pending_at", "sending_at", "sent_at", "started_at", "rescheduled_at",
                    "succeeded_at", "failed_at", "cancelled_at"}


@pytest.fixture
def diamond(make_execution, make_operation):
    """a -> (b, c) -> d, plus an operation of another execution; b is a local step (it runs in
    the manager's pass: its agent is the managers' queue)."""
    execution = make_execution()
    ops = {name: make_operation(OperationState.PENDING, execution, name=name, operation=f"op_{name}",
                                agent="management" if name == "b" else f"ag-{name}", local=name == "b")
           for name in "abcd"}
    for before, after in [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]:
        OperationDependency.objects.create(operation=ops[after], depends_on=ops[before])
    make_operation(OperationState.PENDING, name="elsewhere")
    return execution, ops


def test_the_operations_of_an_execution_with_every_field_and_dependencies_as_names(api, diamond, make_operation):
    execution, ops = diamond
    now = timezone.now()
    ops["a"].__class__.objects.filter(pk=ops["a"].pk).update(
        state=OperationState.FAILED, attempt=2, current_retries=1, result=None, args=[1, "x"], kwargs={"k": None},
        error={"type": "ValueError", "message": "bad", "traceback": "..."}, failed_at=now,
        next_attempt_at=now + timedelta(seconds=5), timeout=9.5)
    response = api.get(f"{API}/executions/{execution.pk}/operations")
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 4
    rows = {row["name"]: row for row in body["results"]}
    assert set(rows) == set("abcd") and all(set(row) == OPERATION_FIELDS for row in rows.values())
    assert {name: sorted(row["depends_on"]) for name, row in rows.items()} == {
        "a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}
    a = rows["a"]
    assert (a["id"], a["execution"], a["operation"], a["agent"], a["state"], a["attempt"], a["current_retries"]) == (
        str(ops["a"].pk), str(execution.pk), "op_a", "ag-a", "failed", 2, 1)
    assert a["error"] == {"type": "ValueError", "message": "bad", "traceback": "..."}
    assert (a["args"], a["kwargs"], a["timeout"], a["result"]) == ([1, "x"], {"k": None}, 9.5, None)
    assert a["failed_at"].endswith("Z") and a["next_attempt_at"].endswith("Z") and a["succeeded_at"] is None
    assert {name: (row["agent"], row["local"]) for name, row in rows.items()} == {
        "a": ("ag-a", False), "b": ("management", True), "c": ("ag-c", False), "d": ("ag-d", False)}


def test_the_schema_shows_local_as_a_read_only_boolean_of_an_operation_and_of_a_graph_node():
    components = openapi()["components"]["schemas"]
    assert components["Operation"]["properties"]["local"]["type"] == "boolean"
    assert components["Operation"]["properties"]["local"]["readOnly"] is True
    assert "local" in components["Operation"]["required"]
    assert components["GraphNode"]["properties"]["local"]["type"] == "boolean"
    assert "local" in components["GraphNode"]["required"]


def test_the_operations_are_paginated(api, diamond):
    execution, _ = diamond
    first = api.get(f"{API}/executions/{execution.pk}/operations", {"limit": 3})
    assert first.json()["count"] == 4 and len(first.json()["results"]) == 3 and first.json()["next"]
    second = api.get(first.json()["next"])
    names = [r["name"] for r in first.json()["results"] + second.json()["results"]]
    assert names == list("abcd"), "in the order they were created"


def test_an_execution_without_operations_has_an_empty_list(api, make_execution):
    body = api.get(f"{API}/executions/{make_execution().pk}/operations").json()
    assert body == {"count": 0, "next": None, "previous": None, "results": []}


def test_the_graph_has_a_node_per_operation_and_an_edge_per_dependency(api, diamond):
    execution, ops = diamond
    ops["a"].__class__.objects.filter(pk=ops["a"].pk).update(state=OperationState.SUCCEEDED)
    response = api.get(f"{API}/executions/{execution.pk}/graph")
    assert response.status_code == 200
    body = response.json()
    assert sorted(body["nodes"], key=lambda n: n["name"]) == [
        {"name": "a", "kind": "operation", "operation": "op_a", "agent": "ag-a", "local": False, "state": "succeeded",
         "child": None},
        {"name": "b", "kind": "operation", "operation": "op_b", "agent": "management", "local": True, "state": "pending",
         "child": None},
        {"name": "c", "kind": "operation", "operation": "op_c", "agent": "ag-c", "local": False, "state": "pending",
         "child": None},
        {"name": "d", "kind": "operation", "operation": "op_d", "agent": "ag-d", "local": False, "state": "pending",
         "child": None},
    ]
    assert sorted(body["edges"]) == [["a", "b"], ["a", "c"], ["b", "d"], ["c", "d"]], "[from, to]: to depends on from"


def test_the_graph_of_an_execution_without_operations_is_empty(api, make_execution):
    assert api.get(f"{API}/executions/{make_execution().pk}/graph").json() == {"nodes": [], "edges": [], "order": []}
