"""The order of imperative code as arrows of an execution's graph, and the groups of sibling
steps its picture draws as one box.

A step the workflow asks for after it awaited another is stored with that step as its ``after``:
``GET /executions/{id}/graph`` and the admin's picture show it as an arrow (``order``), and
nothing waits on it — a step asked for after a failure the code caught runs all the same. The
dispatcher runs here in this process, as in tests/engine/test_step_failures.py; the browser's view of
the same stories is tests/integration/test_browser_graph.py.
"""

import pytest
from django.urls import reverse

from workflows_app import queries, services
from workflows_app.admin import picture
from workflows_app.engine import reports
from workflows_app.models import Operation, OperationDependency
from workflows_app.states import ExecutionStatus, FailureMode, OperationState, StepKind
from tests.engine.passes import run_pass

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("with_the_test_workflows", "outbox")]

FAILED = {"type": "NonRecoverableError", "message": "pack-1 fails for good", "traceback": "Traceback: ..."}
PACKS = ["pack-1", "pack-2", "pack-3"]


def claimed(execution, name) -> Operation:
    operation = Operation.objects.get(execution_id=execution.pk, name=name)
    Operation.objects.filter(pk=operation.pk).update(state=OperationState.STARTED)
    operation.refresh_from_db()
    return operation


def succeed(execution, name):
    operation = claimed(execution, name)
    assert reports.record_success(operation, operation.attempt, name)
    return run_pass(execution)


def fail(execution, name):
    operation = claimed(execution, name)
    assert reports.record_failure(operation, operation.attempt, FAILED, retryable=False)
    return run_pass(execution)


def rows(execution) -> dict:
    return {op.name: op for op in Operation.objects.filter(execution_id=execution.pk)}


@pytest.mark.usefixtures("each_pass")
def test_each_step_of_imperative_code_comes_after_the_one_awaited_before_it(admin_client):
    execution = run_pass(services.start("it_packs", {"agent": "a1"}))
    for name in ["fetch", *PACKS]:
        execution = succeed(execution, name)
    execution = succeed(execution, "ship")
    assert execution.status == ExecutionStatus.COMPLETED
    assert {name: op.after for name, op in rows(execution).items()} == {
        "fetch": [], "pack-1": ["fetch"], "pack-2": ["pack-1"], "pack-3": ["pack-2"], "ship": ["pack-3"]}
    graph = queries.graph(execution.pk)
    assert graph["edges"] == []  # no step waited for another: the engine stored no dependency
    assert sorted(graph["order"]) == [["fetch", "pack-1"], ["pack-1", "pack-2"], ["pack-2", "pack-3"],
                                      ["pack-3", "ship"]]
    # The API and the admin's picture answer them beside the dependencies.
    api = admin_client.get(f"/api/v1/executions/{execution.pk}/graph").json()
    assert (api["edges"], sorted(api["order"])) == ([], sorted(graph["order"]))
    page = admin_client.get(reverse("admin:workflows_app_execution_graph", args=[execution.pk])).json()
    assert (page["edges"], sorted(page["order"]), page["groups"]) == ([], sorted(graph["order"]), [])
    # Every pass replayed the code from the top: each step was stored and sent once all the same.
    assert [(op.name, op.attempt) for op in sorted(rows(execution).values(), key=lambda op: op.name)] == [
        ("fetch", 1), ("pack-1", 1), ("pack-2", 1), ("pack-3", 1), ("ship", 1)]


@pytest.mark.usefixtures("each_pass")
def test_steps_asked_for_together_each_come_after_the_last_awaited_and_the_next_after_all_of_them():
    execution = run_pass(services.start("it_packs", {"agent": "a1", "parallel": True}))
    execution = succeed(execution, "fetch")
    assert {name: op.state for name, op in rows(execution).items() if name in PACKS} == dict.fromkeys(
        PACKS, OperationState.SENDING)
    for name in reversed(PACKS):
        execution = succeed(execution, name)
    execution = succeed(execution, "ship")
    assert execution.status == ExecutionStatus.COMPLETED
    after = {name: op.after for name, op in rows(execution).items()}
    assert after == {"fetch": [], "pack-1": ["fetch"], "pack-2": ["fetch"], "pack-3": ["fetch"], "ship": PACKS}


@pytest.mark.usefixtures("each_pass")
@pytest.mark.parametrize("mode", list(FailureMode))
def test_a_step_after_a_caught_failure_is_not_held_back_by_it(mode):
    execution = run_pass(services.start("it_packs", {"agent": "a1", "fail": "pack-1"}, failure_mode=mode))
    execution = succeed(execution, "fetch")
    execution = fail(execution, "pack-1")
    stored = rows(execution)
    # pack-2 comes after the failed pack-1 in the code and in the picture, and was sent at once.
    assert stored["pack-2"].after == ["pack-1"]
    assert stored["pack-2"].state == OperationState.SENDING and stored["pack-2"].pending_dependencies == 0
    assert not OperationDependency.objects.filter(operation__execution_id=execution.pk).exists()
    execution = succeed(execution, "pack-2")
    execution = succeed(execution, "pack-3")
    execution = succeed(execution, "ship")
    assert execution.status == ExecutionStatus.COMPLETED
    assert execution.payload == {"packed": [None, "pack-2", "pack-3"]}
    assert rows(execution)["pack-1"].state == OperationState.FAILED


@pytest.mark.usefixtures("each_pass")
def test_a_graph_comes_after_the_step_awaited_before_it_through_its_first_steps_only():
    """``ctx.graph()``'s steps that depend on none of it follow the code's last awaited step;
    the others follow those through their dependencies (no redundant arrow)."""
    execution = run_pass(services.start("it_saga", {"agent": "a1", "style": "graph"}))
    execution = succeed(execution, "reserve")
    after = {name: op.after for name, op in rows(execution).items()}
    assert after == {"reserve": [], "pack": [], "charge": [], "ship": []}
    graph = queries.graph(execution.pk)
    assert sorted(graph["edges"]) == [["charge", "ship"], ["pack", "ship"], ["reserve", "charge"], ["reserve", "pack"]]
    assert graph["order"] == []


def node(name, operation="it_add"):
    return {"name": name, "kind": "operation", "operation": operation, "agent": "a", "state": "sent", "child": None}


def test_siblings_are_grouped_in_name_order_and_counted_as_one_box():
    members = [f"m{i}" for i in range(40)]
    graph = {"nodes": [node("fetch"), *[node(m) for m in reversed(members)], node("join", "it_xsum"), node("odd", "it_mul")],
             "edges": [*[["fetch", m] for m in members], *[[m, "join"] for m in members], ["fetch", "odd"]],
             "order": []}
    groups = picture.groups(graph)
    assert groups == [{"members": members, "kind": "operation", "operation": "it_add"}]  # m2 before m10
    assert picture.boxes(graph, groups) == 4
    # Fewer than GROUP_FROM siblings are drawn one by one; so are steps with other neighbours.
    few = {**graph, "nodes": graph["nodes"][:picture.GROUP_FROM]}
    assert picture.groups(few) == []
    chain = {"nodes": [node(f"c{i}") for i in range(20)], "edges": [], "order": [[f"c{i}", f"c{i + 1}"] for i in range(19)]}
    assert picture.groups(chain) == [] and picture.boxes(chain, []) == 20


def test_a_fan_out_of_a_thousand_is_drawn_as_one_group(admin_client, make_execution):
    execution = make_execution(status=ExecutionStatus.STARTED)
    members = Operation.objects.bulk_create(Operation(execution=execution, name=f"m{i}", operation="noop", agent="a")
                                            for i in range(1000))
    join = Operation.objects.create(execution=execution, name="join", operation="sum", agent="a")
    OperationDependency.objects.bulk_create(OperationDependency(operation=join, depends_on=m) for m in members)
    page = admin_client.get(reverse("admin:workflows_app_execution_change", args=[execution.pk])).content.decode()
    assert 'id="sy-graph"' in page and 'id="sy-graph-summary"' not in page
    data = admin_client.get(reverse("admin:workflows_app_execution_graph", args=[execution.pk])).json()
    assert data["too_large"] is False and len(data["nodes"]) == 1001 and len(data["edges"]) == 1000
    assert data["groups"] == [{"members": [f"m{i}" for i in range(1000)], "kind": StepKind.OPERATION, "operation": "noop"}]
