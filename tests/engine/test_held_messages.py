"""A message of the management queue that a manager took and died holding: Redis keeps it
unacknowledged for its visibility timeout (an hour), and only a manager that starts sends again
what was in flight. Where none starts (fewer managers now), the tick's sweep sends it again once it
waited longer than a claim does — unless a backlog of the queue explains the wait."""

from datetime import timedelta

from django.utils import timezone

from workflows_app import broker, wire
from workflows_app.conf import workflows_settings
from workflows_app.engine import tick
from workflows_app.models import Operation
from workflows_app.states import ExecutionStatus, OperationState


def held_since(make_execution, make_operation, seconds, agent=None, name="held"):
    """An operation ``sent`` ``seconds`` ago (to the management queue, or to ``agent``)."""
    execution = make_execution(status=ExecutionStatus.STARTED)
    operation = make_operation(OperationState.SENT, execution, name=name, attempt=1,
                               agent=agent or workflows_settings.MANAGEMENT_QUEUE)
    Operation.objects.filter(pk=operation.pk).update(sending_at=timezone.now() - timedelta(seconds=seconds))
    return operation


def test_a_management_operation_sent_longer_ago_than_a_claim_waits_is_sent_again_once(
        make_execution, make_operation, outbox, django_capture_on_commit_callbacks):
    """A manager that died holding its message (Redis keeps it an hour) and whose place no new
    manager took: the tick sends it again, once per claim timeout."""
    timeout = wire.claim_seconds()
    held_since(make_execution, make_operation, timeout + 5)
    held_since(make_execution, make_operation, timeout - 5, name="young")
    held_since(make_execution, make_operation, timeout + 5, agent="host-1", name="an-agents")
    with django_capture_on_commit_callbacks(execute=True):
        assert tick.resend_held_by_dead_managers(timezone.now()) == 1
        assert tick.resend_held_by_dead_managers(timezone.now()) == 0, "not again before another timeout"
    assert outbox["operation"] == ["held"]
    assert Operation.objects.get(name="held").state == OperationState.SENT, "the same attempt, sent again"


def test_one_behind_a_backlog_of_the_management_queue_is_not_sent_again(make_execution, make_operation, outbox,
                                                                       monkeypatch):
    held_since(make_execution, make_operation, wire.claim_seconds() + 5)
    monkeypatch.setattr(broker, "waiting_messages", lambda queue: 1)
    assert tick.resend_held_by_dead_managers(timezone.now()) == 0
    assert outbox["operation"] == []
