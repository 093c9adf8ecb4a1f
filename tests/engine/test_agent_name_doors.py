"""An agent name reaches the broker only if it can be one (``values.check_agent_name``): the
doors of workflow code — a step's ``agent`` (``ctx.execute``, a graph's ``add``), a canvas'
``.set(queue=...)``, a workflow parameter that names the agent — refuse it when the workflow asks
for the step, which fails the execution with the reason and stores nothing of the step. What gets
past the doors (a row stored before the check, a queue the broker refuses) is
``test_send_refusals.py``'s."""

import pytest

from workflows_app.states import ExecutionStatus

pytestmark = pytest.mark.usefixtures("with_the_test_workflows")


@pytest.mark.parametrize("workflow, parameters, name", [
    ("it_single", {"agent": "celery.pidbox", "seconds": 0}, "celery.pidbox"),                # ctx.await_execute
    ("it_fan_out", {"n": 3, "agents": ["host-1", "amq.gen-x"]}, "amq.gen-x"),               # a graph's add
    ("it_canvas", {"case": "routing", "agents": ["host-1", "celeryev"], "management_queue": "management"},
     "celeryev"),                                                                            # .set(queue=...)
    ("it_single", {"agent": "management.reports", "seconds": 0}, "management.reports"),      # the managers' reports
    ("it_single", {"agent": "host-1.replies.box.42", "seconds": 0}, "host-1.replies.box.42"),
    ("it_single", {"agent": "two words", "seconds": 0}, "two words"),
])
def test_a_step_for_an_agent_name_that_cannot_be_one_fails_the_execution_and_stores_nothing(
        switchyard, workflow, parameters, name):
    result = switchyard.run(workflow, parameters)
    assert result.status == ExecutionStatus.FAILED
    assert f"invalid agent name {name!r}" in result.execution.error
    assert result.operations == {}, "nothing of the step was stored, or sent"


def test_a_step_that_names_no_agent_runs_on_a_manager_and_an_agent_name_is_still_taken(switchyard):
    result = switchyard.run("it_fan_out", {"n": 2, "agents": ["host-1", "host-2.eu"]})
    assert result.status == ExecutionStatus.COMPLETED
    assert {op.agent for op in result.operations.values()} == {"host-1", "host-2.eu"}
