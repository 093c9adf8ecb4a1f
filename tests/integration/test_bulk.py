"""A bulk cancel with a real manager and real agents: ``POST /executions/bulk`` outside any
transaction (as a web process runs it: several executions at once, each on its own connection),
and the running steps of every execution it selected hear the cancel through the broker."""

import pytest
from rest_framework.test import APIClient

from tests.api.conftest import OPERATOR, make_user
from tests.integration.test_engine import finish, operations, up
from workflows_app import services
from workflows_app.models import Execution

pytestmark = pytest.mark.integration


@pytest.mark.django_db(transaction=True)
def test_a_bulk_cancel_reaches_the_running_steps_of_every_execution_selected(stack):
    s = up(stack)
    executions = [services.start("it_stoppable", {"agent": agent, "on_cancel": "raise"}) for agent in (s.h1, s.h2)]
    for execution in executions:
        stack.wait_for_operation(execution.pk, "running", "started")
    stack.wait_for(lambda: len(stack.invocations("running")) == 2, 30, "both steps to run")
    client = APIClient()
    client.force_authenticate(make_user("ops", OPERATOR))

    response = client.post("/api/v1/executions/bulk", {"action": "cancel",
                                                       "filter": {"workflow_id": "it_stoppable", "status": "started"}},
                           format="json")

    assert response.status_code == 200, response.content
    assert (response.json()["matched"], response.json()["done"]) == (2, 2)
    for execution in executions:
        finish(stack, execution, "cancelled")
        assert operations(execution)["running"].state == "cancelled"
        assert operations(execution)["after"].state == "cancelled"
    assert len(stack.invocations("running-saw-cancel")) == 2, "each running step saw ctx.is_cancelled()"
    again = client.post("/api/v1/executions/bulk", {"action": "cancel", "filter": {"workflow_id": "it_stoppable"}},
                        format="json").json()
    assert (again["done"], again["skipped"]) == (0, {"count": 2, "statuses": {"cancelled": 2}})
    assert Execution.objects.filter(workflow_id="it_stoppable").count() == 2
