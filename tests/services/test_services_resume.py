"""Resume and force-resume on the database alone: what each resets, what it
leaves alone, the new token, and what each refuses. The messages they send go out on commit,
which these tests never reach. The processes' side is in tests/integration/test_restart.py."""

from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from workflows_app import services
from workflows_app.engine import policy
from workflows_app.errors import ActionRefused, StaleToken
from workflows_app.models import Event, Execution, Operation, OperationDependency
from workflows_app.states import ExecutionStatus, OperationState
from workflows_app.transitions import execution_transition
from tests import UNKNOWN_ID


ACTIONS = {"resume": services.resume, "force-resume": services.force_resume}
ALLOWED = {"resume": {"started", "cancelled", "failed"}, "force-resume": {"cancelled", "failed"}}
REFUSED = [(action, status.value) for action in ACTIONS for status in ExecutionStatus if status.value not in ALLOWED[action]]


def snapshot(execution):
    return (Execution.objects.filter(pk=execution.pk).values().get(),
            list(Operation.objects.filter(execution_id=execution.pk).order_by("name").values()),
            Event.objects.filter(execution_id=execution.pk).count())


def ops(execution):
    return {op.name: op for op in Operation.objects.filter(execution_id=execution.pk)}


@pytest.fixture
def failed(make_execution, make_operation):
    """A failed execution: ``a`` succeeded; ``b`` (after a) failed out of retries; ``c`` (after b)
    was cancelled without starting; ``d`` (after a) was cancelled while it ran."""
    now = timezone.now()
    execution = make_execution(status=ExecutionStatus.FAILED, token_hash="a" * 64, started_at=now, ended_at=now,
                               error="operation 'b' failed: boom")
    a = make_operation(OperationState.SUCCEEDED, execution, name="a", attempt=1, result=1, started_at=now)
    b = make_operation(OperationState.FAILED, execution, name="b", attempt=4, current_retries=3, started_at=now,
                       error={"type": "RuntimeError", "message": "boom", "traceback": ""})
    c = make_operation(OperationState.CANCELLED, execution, name="c", pending_dependencies=1)
    d = make_operation(OperationState.CANCELLED, execution, name="d", attempt=1, started_at=now)
    for op, dep in ((b, a), (c, b), (d, a)):
        OperationDependency.objects.create(operation=op, depends_on=dep)
    return execution


@pytest.mark.parametrize("action, status", REFUSED)
def test_a_refused_resume_changes_nothing_and_says_why(make_execution, make_operation, action, status):
    execution = make_execution(status=status, token_hash="b" * 64)
    make_operation(OperationState.FAILED, execution, name="x", attempt=1)
    before = snapshot(execution)
    with pytest.raises(ActionRefused) as refused:
        ACTIONS[action](execution.pk)
    text = str(refused.value)
    assert f"cannot {action}" in text and f"it is {status}" in text, text
    assert snapshot(execution) == before


@pytest.mark.parametrize("action", ACTIONS)
def test_resume_of_a_failed_execution_runs_what_failed_again_and_never_what_succeeded(failed, action):
    resumed = ACTIONS[action](failed.pk)
    row = Execution.objects.get(pk=failed.pk)
    assert (row.status, row.error, row.ended_at) == ("started", "", None)
    assert row.token_hash != "a" * 64 and resumed.issued_token, "a new token"
    steps = ops(failed)
    assert (steps["a"].state, steps["a"].attempt) == ("succeeded", 1)
    # b's dependency succeeded: it is sent at once as a new attempt, its retries counted from 0.
    assert (steps["b"].state, steps["b"].attempt, steps["b"].current_retries, steps["b"].error) == ("sending", 5, 0, None)
    # c waits for b again; d (after a) is sent again.
    assert (steps["c"].state, steps["c"].pending_dependencies) == ("pending", 1)
    assert (steps["d"].state, steps["d"].attempt) == ("sending", 2)
    resumed_events = Event.objects.filter(execution_id=failed.pk, type="workflow_resumed")
    assert resumed_events.count() == 1
    assert resumed_events.get().data["error"] == "operation 'b' failed: boom", "the error it had is kept in the event"


def test_resume_of_a_stuck_started_execution_awaits_what_is_in_flight(make_execution, make_operation):
    execution = make_execution(status=ExecutionStatus.STARTED, token_hash="c" * 64, started_at=timezone.now())
    make_operation(OperationState.SENT, execution, name="sent", attempt=1)
    make_operation(OperationState.STARTED, execution, name="running", attempt=2, started_at=timezone.now())
    make_operation(OperationState.RESCHEDULED, execution, name="waiting", attempt=1, current_retries=1,
                   next_attempt_at=timezone.now() + timedelta(hours=1))
    services.resume(execution.pk)
    row = Execution.objects.get(pk=execution.pk)
    assert row.status == "started" and row.token_hash != "c" * 64
    steps = ops(execution)
    assert (steps["sent"].state, steps["sent"].attempt) == ("sent", 1), "not sent again"
    assert (steps["running"].state, steps["running"].attempt) == ("started", 2), "awaited"
    assert (steps["waiting"].state, steps["waiting"].attempt, steps["waiting"].current_retries) == ("sending", 2, 0)
    assert Event.objects.filter(execution_id=execution.pk, type="workflow_resumed").count() == 1


def test_force_resume_also_resets_operations_left_in_flight(make_execution, make_operation):
    execution = make_execution(status=ExecutionStatus.CANCELLED, token_hash="d" * 64, started_at=timezone.now())
    for state, name in ((OperationState.SENDING, "sending"), (OperationState.SENT, "sent"), (OperationState.STARTED, "started")):
        make_operation(state, execution, name=name, attempt=1)
    services.force_resume(execution.pk)
    assert {name: (op.state, op.attempt) for name, op in ops(execution).items()} == {
        "sending": ("sending", 2), "sent": ("sending", 2), "started": ("sending", 2)}


def test_a_dispatcher_holding_the_token_from_before_a_resume_changes_nothing(make_execution):
    execution = make_execution(status=ExecutionStatus.STARTED, token_hash="e" * 64, started_at=timezone.now())
    old_dispatcher_view = Execution.objects.get(pk=execution.pk)
    services.resume(execution.pk)
    with pytest.raises(StaleToken):
        execution_transition(old_dispatcher_view, ExecutionStatus.COMPLETED, fence=old_dispatcher_view.token_hash)
    assert Execution.objects.get(pk=execution.pk).status == "started"


def test_a_resumed_execution_gets_its_whole_timeout_again(make_execution):
    long_ago = timezone.now() - timedelta(hours=2)
    execution = make_execution(status=ExecutionStatus.FAILED, token_hash="f" * 64, started_at=long_ago, timeout=3600)
    assert policy.timeout_due(execution)
    services.resume(execution.pk)
    execution.refresh_from_db()
    assert not policy.timeout_due(execution)
    assert policy.timeout_due(execution, timezone.now() + timedelta(seconds=3601))


def test_resume_execution_command_resumes_and_prints_the_status(failed, capsys):
    call_command("resume_execution", str(failed.pk))
    assert capsys.readouterr().out.strip() == f"{failed.pk} started"
    assert ops(failed)["b"].state == "sending"


@pytest.mark.parametrize("argv, says", [
    (["--force"], "cannot force-resume execution {pk}: it is started (force-resume is allowed from cancelled, failed)"),
    (["--reset-operations"], "cannot force-resume execution {pk}: it is started"),
])
def test_resume_execution_command_refuses_with_one_line(make_execution, argv, says):
    execution = make_execution(status=ExecutionStatus.STARTED, token_hash="g" * 64)
    before = snapshot(execution)
    with pytest.raises(CommandError) as refused:
        call_command("resume_execution", str(execution.pk), *argv)
    assert says.format(pk=execution.pk) in str(refused.value) and "\n" not in str(refused.value)
    assert snapshot(execution) == before


def test_resume_execution_command_refuses_a_completed_execution(make_execution):
    execution = make_execution(status=ExecutionStatus.COMPLETED)
    with pytest.raises(CommandError, match="cannot resume execution .*: it is completed"):
        call_command("resume_execution", str(execution.pk))
    assert Execution.objects.get(pk=execution.pk).status == "completed"


@pytest.mark.parametrize("execution_id", [UNKNOWN_ID, "not-a-uuid"])
def test_resume_execution_command_names_an_unknown_execution(db, execution_id):
    with pytest.raises(CommandError, match="no execution"):
        call_command("resume_execution", execution_id)
