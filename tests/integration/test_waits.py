"""A workflow waiting for an event and a timer, end to end: a real manager (``run_manager``) on
the test's database and broker; the event is delivered through the service the API's
``POST /executions/{id}/events`` calls. While it waits the execution is only rows."""

import pytest

from tests.integration.harness import describe_execution
from workflows_app import services
from workflows_app.models import Wait
from workflows_app.states import EXECUTION_TERMINAL, ExecutionStatus, WaitOutcome

pytestmark = pytest.mark.integration

TERMINAL = [status.value for status in EXECUTION_TERMINAL]


def test_a_workflow_awaiting_an_event_completes_with_the_delivered_payload(stack):
    stack.start_manager(concurrency=2)
    execution = services.start("it_events", {"waits": [["approved", None], ["never", 1.0]]})

    def suspended():
        return Wait.objects.filter(execution_id=execution.pk, key="event:approved#1", outcome=WaitOutcome.WAITING).exists()

    stack.wait_for(suspended, timeout=60, what="the workflow to wait for 'approved'",
                   describe=lambda: describe_execution(execution.pk))
    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.STARTED

    services.send_event(execution.pk, "approved", {"user": "ann"})
    # "never" never comes: the manager's tick wakes the workflow at its 1 s timeout.
    done = stack.wait_for_status(execution.pk, TERMINAL, timeout=60)
    assert done.status == ExecutionStatus.COMPLETED, describe_execution(execution.pk)
    assert done.payload == {"got": [{"user": "ann"}, "timeout"]}
    assert [(w.key, w.outcome) for w in Wait.objects.filter(execution_id=execution.pk).order_by("id")] == [
        ("event:approved#1", WaitOutcome.RECEIVED), ("event:never#1", WaitOutcome.TIMED_OUT)]
