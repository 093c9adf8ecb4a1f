"""Child executions in the API: ``parent`` and ``parent_step`` in an execution's
JSON, ``GET /executions?parent=``, and a child's step as a graph node of kind ``workflow``."""

from tests.api.conftest import API, assert_error
from workflows_app.states import OperationState, StepKind


def family(make_execution, make_operation):
    parent = make_execution()
    make_operation(OperationState.STARTED, parent, name="child0", kind=StepKind.WORKFLOW, operation="example", agent="")
    make_operation(OperationState.PENDING, parent, name="child1", kind=StepKind.WORKFLOW, operation="example", agent="")
    child = make_execution(parent=parent, parent_step="child0")
    grandchild = make_execution(parent=child, parent_step="sub")
    return parent, child, grandchild


def test_an_execution_names_its_parent_and_the_step_that_follows_it(api, make_execution, make_operation):
    parent, child, _ = family(make_execution, make_operation)
    body = api.get(f"{API}/executions/{child.pk}").json()
    assert (body["parent"], body["parent_step"]) == (str(parent.pk), "child0")
    body = api.get(f"{API}/executions/{parent.pk}").json()
    assert (body["parent"], body["parent_step"]) == (None, "")


def test_the_list_filters_the_children_of_an_execution(api, make_execution, make_operation):
    parent, child, grandchild = family(make_execution, make_operation)
    make_execution()  # unrelated
    assert [row["id"] for row in api.get(f"{API}/executions?parent={parent.pk}").json()["results"]] == [str(child.pk)]
    assert [row["id"] for row in api.get(f"{API}/executions?parent={child.pk}").json()["results"]] == [str(grandchild.pk)]
    assert api.get(f"{API}/executions?parent={grandchild.pk}").json()["count"] == 0
    assert_error(api.get(f"{API}/executions?parent=not-an-id"), 400, "invalid_parameters")


def test_a_childs_step_is_a_workflow_node_with_the_childs_id(api, make_execution, make_operation):
    parent, child, _ = family(make_execution, make_operation)
    make_operation(OperationState.PENDING, parent, name="plain", operation="op", agent="a1")
    nodes = {node["name"]: node for node in api.get(f"{API}/executions/{parent.pk}/graph").json()["nodes"]}
    assert nodes["child0"] == {"name": "child0", "kind": "workflow", "operation": "example", "agent": "",
                               "local": False, "state": "started", "child": str(child.pk)}
    assert (nodes["child1"]["kind"], nodes["child1"]["child"]) == ("workflow", None)  # not started yet
    assert (nodes["plain"]["kind"], nodes["plain"]["child"]) == ("operation", None)
