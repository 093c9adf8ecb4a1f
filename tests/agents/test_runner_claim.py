"""An agent's claim of a delivered attempt (``agents.runner.run_operation``), answered by the
managers' intake (``agents.intake``) on the database: fencing. On PostgreSQL the common case is one
statement (``transitions.claim_operation``); everything else, and every case on SQLite, goes the
long way. Both must say the same: these tests run on either database. The runner's reports reach
the intake in this process (the ``agent_link`` fixture)."""

import pytest

from workflows_app import broker
from workflows_app.models import Event
from workflows_app.registry import operation
from workflows_app.states import EventType, ExecutionStatus, OperationState

CALLS = []


@operation(name="test_runner_claim_probe", max_retries=0)
def probe(ctx, value):
    CALLS.append((ctx.operation_id, ctx.attempt, value))
    return value * 2


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    CALLS.clear()
    monkeypatch.setattr(broker, "send_advance", lambda pk, workflow_id=None: None)
    monkeypatch.setattr(broker, "send_operations", lambda ops: None)


def op_events(op):
    return list(Event.objects.filter(execution_id=op.execution_id, operation=op.name).order_by("id").values_list("type", flat=True))


def delivered(make_operation, state, execution=None, attempt=1):
    return make_operation(state, execution, operation="test_runner_claim_probe", args=[21], attempt=attempt)


def test_a_sent_attempt_starts_runs_and_records_its_result(agent_link, make_operation):
    op = delivered(make_operation, OperationState.SENT)
    agent_link.deliver(op, 1)
    op.refresh_from_db()
    assert (op.state, op.result, CALLS) == (OperationState.SUCCEEDED, 42, [(op.pk, 1, 21)])
    assert op_events(op) == [EventType.TASK_STARTED, EventType.TASK_SUCCEEDED]
    started = Event.objects.get(execution_id=op.execution_id, type=EventType.TASK_STARTED)
    assert started.data["from"] == "sent" and started.data["attempt"] == 1 and isinstance(started.data["pid"], int)
    assert op.started_at is not None and op.sent_at is None


def test_a_message_that_overtook_its_senders_write_of_sent_records_both_moves_in_order(agent_link, make_operation):
    op = delivered(make_operation, OperationState.SENDING)
    agent_link.deliver(op, 1)
    op.refresh_from_db()
    assert op.state == OperationState.SUCCEEDED and len(CALLS) == 1
    assert op_events(op) == [EventType.TASK_SENT, EventType.TASK_STARTED, EventType.TASK_SUCCEEDED]
    assert op.sent_at is not None and op.sent_at <= op.started_at


@pytest.mark.parametrize("status", [ExecutionStatus.CANCELLING, ExecutionStatus.KILL_CANCELLING, ExecutionStatus.CANCELLED])
def test_nothing_starts_unless_the_execution_is_started(agent_link, make_execution, make_operation, status):
    op = delivered(make_operation, OperationState.SENT, make_execution(status))
    agent_link.deliver(op, 1)
    op.refresh_from_db()
    assert op.state == OperationState.SENT and CALLS == []
    dropped = Event.objects.get(execution_id=op.execution_id, type=EventType.LOG)
    assert dropped.data == {"attempt": 1, "fenced": True} and str(status) in dropped.message


def test_a_superseded_attempt_is_dropped(agent_link, make_operation):
    op = delivered(make_operation, OperationState.SENT, attempt=2)
    agent_link.deliver(op, 1)
    op.refresh_from_db()
    assert (op.state, op.attempt, CALLS) == (OperationState.SENT, 2, [])
    assert "attempt 2 is current" in Event.objects.get(execution_id=op.execution_id, type=EventType.LOG).message


@pytest.mark.parametrize("state", [OperationState.PENDING, OperationState.CANCELLED, OperationState.SUCCEEDED])
def test_an_attempt_that_is_not_waiting_to_start_is_dropped(agent_link, make_operation, state):
    op = delivered(make_operation, state)
    agent_link.deliver(op, 1)
    op.refresh_from_db()
    assert op.state == state and CALLS == []
    assert op_events(op) == [EventType.LOG]


def test_a_dry_run_records_success_without_running_the_function(agent_link, make_execution, make_operation):
    op = delivered(make_operation, OperationState.SENT, make_execution(is_dry_run=True))
    agent_link.deliver(op, 1)
    op.refresh_from_db()
    assert (op.state, op.result, CALLS) == (OperationState.SUCCEEDED, None, [])
