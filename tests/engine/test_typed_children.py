"""A child workflow started from a parent's code is checked as every start is: with parameters
of the wrong type the parent fails naming why and no child is stored, as it does for a missing
or an unknown parameter; with the right ones, the child's function gets its dataclass
parameter as an instance. The dispatcher runs in this process; the messages it would send are
delivered here."""

import pytest

from workflows_app import services
from workflows_app.engine import dispatcher, live
from workflows_app.models import Execution, Operation
from workflows_app.states import ExecutionStatus, OperationState

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("with_the_test_workflows")]


@pytest.fixture(autouse=True)
def clear_runs():
    live.clear()
    yield
    live.clear()


def run(outbox, execution) -> Execution:
    """Deliver every advance until nothing moves (the child steps run no operation)."""
    for _ in range(50):
        if not outbox["advance"]:
            break
        dispatcher.run_pass(outbox["advance"].pop(0))
    execution.refresh_from_db()
    return execution


@pytest.mark.parametrize("params, says", [
    ({"n": "three"}, "workflow 'it_typed': parameter 'n': expected integer, got string \"three\""),
    ({"n": 1, "disk": {"size_gb": 1.5}},
     "workflow 'it_typed': parameter 'disk.size_gb': expected integer, got number 1.5"),
    ({}, "workflow 'it_typed': missing required parameter(s): n"),
])
def test_a_child_with_parameters_of_the_wrong_type_fails_its_parent_naming_why(outbox, params, says):
    parent = run(outbox, services.start("it_parent_of", {"workflow": "it_typed", "params": params}))
    assert parent.status == ExecutionStatus.FAILED
    assert says in parent.error
    assert not Execution.objects.filter(parent_id=parent.pk).exists()


def test_a_child_gets_its_dataclass_parameter_as_an_instance_and_stores_json(outbox):
    params = {"n": 2, "disk": {"size_gb": 10, "kind": "hdd"}, "tags": ["a"]}
    parent = run(outbox, services.start("it_parent_of", {"workflow": "it_typed", "params": params}))
    assert parent.status == ExecutionStatus.COMPLETED, parent.error
    child = Execution.objects.get(parent_id=parent.pk)
    assert child.parameters == params, "stored as JSON"
    assert parent.payload["disk"] == {"type": "Disk", "size_gb": 10, "kind": "hdd"}
    assert parent.payload["n"] == 2 and parent.payload["size"] == "small"
    assert Operation.objects.get(execution_id=parent.pk, name="child").state == OperationState.SUCCEEDED
