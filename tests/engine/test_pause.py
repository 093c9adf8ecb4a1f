"""Pause and unpause with the dispatcher run in this process (``services.start`` then
``dispatcher.run_pass`` as a manager would), on the database alone: what a paused execution
keeps back, what it keeps, and that it carries on from there once unpaused. The processes' side
(a step that runs through a pause, a manager restarted while paused) is in
tests/integration/test_pause.py."""

from datetime import timedelta

import pytest
from django.utils import timezone

from workflows_app import services
from workflows_app.engine import progress, reports, waits
from workflows_app.errors import ActionRefused, PermissionRefused, TransitionRefused
from workflows_app.models import Event, Execution, Operation, PausedWorkflow, Wait
from workflows_app.states import ExecutionStatus, OperationState, WaitOutcome
from tests.engine.passes import run_pass, succeed

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("with_the_test_workflows", "each_pass")]


def states(execution) -> dict:
    return dict(Operation.objects.filter(execution_id=execution.pk).values_list("name", "state"))


def event_types(execution) -> list:
    return list(Event.objects.filter(execution_id=execution.pk, type__startswith="workflow_")
                .order_by("id").values_list("type", flat=True))


def test_a_paused_execution_sends_no_new_step_and_carries_on_once_unpaused():
    execution = run_pass(services.start("it_chain", {"n": 2, "agents": ["h1"]}))
    assert states(execution) == {"c00": "sending", "c01": "pending"}
    assert services.pause(execution.pk).status == ExecutionStatus.PAUSED

    succeed(execution, "c00")  # the running step goes on: its outcome is stored
    assert run_pass(execution).status == ExecutionStatus.PAUSED
    assert states(execution) == {"c00": "succeeded", "c01": "pending"}, "the next step is not sent while paused"

    assert services.unpause(execution.pk).status == ExecutionStatus.STARTED
    run_pass(execution)
    assert states(execution) == {"c00": "succeeded", "c01": "sending"}
    succeed(execution, "c01")
    assert run_pass(execution).status == ExecutionStatus.COMPLETED
    assert event_types(execution) == ["workflow_started", "workflow_paused", "workflow_unpaused", "workflow_completed"]


def test_a_retry_that_falls_due_while_paused_is_sent_on_unpause():
    execution = run_pass(services.start("it_chain", {"n": 1, "agents": ["h1"]}))
    step = Operation.objects.get(execution_id=execution.pk, name="c00")
    Operation.objects.filter(pk=step.pk).update(state=OperationState.STARTED, max_retries=3)
    step.refresh_from_db()
    reports.record_failure(step, step.attempt, {"type": "RecoverableError", "message": "try again", "traceback": ""},
                           retryable=True)
    assert states(execution) == {"c00": "rescheduled"}
    services.pause(execution.pk)
    later = timezone.now() + timedelta(hours=1)
    assert progress.send_due_retries(later) == 0
    assert states(execution) == {"c00": "rescheduled"}
    services.unpause(execution.pk)
    assert progress.send_due_retries(later) == 1
    assert states(execution) == {"c00": "sending"}


def test_a_timer_keeps_its_deadline_and_fires_once_unpaused():
    execution = run_pass(services.start("it_sleep", {"seconds": 60}))
    (wait,) = Wait.objects.filter(execution_id=execution.pk)
    services.pause(execution.pk)
    after = wait.deadline + timedelta(seconds=1)
    assert execution.pk not in waits.due_executions(after)
    services.unpause(execution.pk)
    assert Wait.objects.get(pk=wait.pk).deadline == wait.deadline
    assert execution.pk in waits.due_executions(after)


def test_an_event_sent_while_paused_is_kept_for_the_unpause():
    execution = run_pass(services.start("it_events", {"waits": [["go", None]]}))
    services.pause(execution.pk)
    services.send_event(execution.pk, "go", {"user": "ann"})
    assert run_pass(execution).status == ExecutionStatus.PAUSED
    assert Wait.objects.get(execution_id=execution.pk).outcome == WaitOutcome.WAITING
    services.unpause(execution.pk)
    done = run_pass(execution)
    assert done.status == ExecutionStatus.COMPLETED and done.payload == {"got": [{"user": "ann"}]}


@pytest.mark.parametrize("action", ["cancel", "force-cancel", "kill"])
def test_a_paused_execution_is_stopped_as_a_started_one(action):
    paused, started = (run_pass(services.start("it_chain", {"n": 2, "agents": ["h1"]})) for _ in range(2))
    services.pause(paused.pk)
    for execution in (paused, started):
        services.ACTIONS[action](execution.pk)
    assert Execution.objects.get(pk=paused.pk).status == Execution.objects.get(pk=started.pk).status
    assert states(paused) == states(started) == {"c00": "cancelled", "c01": "cancelled"}


@pytest.mark.parametrize("status", sorted(set(ExecutionStatus) - {ExecutionStatus.STARTED}))
def test_only_a_started_execution_is_paused(make_execution, status):
    execution = make_execution(status=status)
    with pytest.raises(ActionRefused) as refused:
        services.pause(execution.pk)
    assert f"it is {status}" in str(refused.value)
    assert Execution.objects.get(pk=execution.pk).status == status


def test_only_a_paused_execution_is_unpaused(make_execution):
    execution = make_execution(status=ExecutionStatus.STARTED)
    with pytest.raises(ActionRefused):
        services.unpause(execution.pk)


def test_pause_needs_the_change_permission(make_execution, django_user_model):
    execution = make_execution(status=ExecutionStatus.STARTED)
    viewer = django_user_model.objects.create_user("viewer")
    with pytest.raises(PermissionRefused):
        services.pause(execution.pk, user=viewer)
    assert Execution.objects.get(pk=execution.pk).status == ExecutionStatus.STARTED


def test_the_actions_offered_follow_the_status():
    assert "pause" in services.actions_for("started") and "unpause" not in services.actions_for("started")
    assert services.actions_for("paused") == ["cancel", "force-cancel", "kill", "unpause"]


# --- a workflow as a whole -------------------------------------------------------------------------

def test_a_start_of_a_paused_workflow_waits_queued_and_starts_when_it_is_unpaused():
    services.pause_workflow("it_chain")
    execution = run_pass(services.start("it_chain", {"n": 1, "agents": ["h1"]}))
    assert execution.status == ExecutionStatus.QUEUED and states(execution) == {}
    other = run_pass(services.start("it_sleep", {"seconds": 60}))
    assert other.status == ExecutionStatus.STARTED, "another workflow is not paused"
    assert services.unpause_workflow("it_chain") == 1
    assert run_pass(execution).status == ExecutionStatus.STARTED
    assert states(execution) == {"c00": "sending"}


def test_a_workflows_running_executions_go_on_when_it_is_paused():
    execution = run_pass(services.start("it_chain", {"n": 2, "agents": ["h1"]}))
    services.pause_workflow("it_chain")
    succeed(execution, "c00")
    run_pass(execution)
    assert states(execution) == {"c00": "succeeded", "c01": "sending"}


def test_a_workflow_is_paused_once_and_unpaused_once(django_user_model):
    services.pause_workflow("it_chain")
    with pytest.raises(TransitionRefused) as refused:
        services.pause_workflow("it_chain")
    assert str(refused.value) == "cannot pause workflow it_chain: it is paused"
    services.unpause_workflow("it_chain")
    with pytest.raises(TransitionRefused, match="cannot unpause workflow it_chain: it is not paused"):
        services.unpause_workflow("it_chain")
    viewer = django_user_model.objects.create_user("viewer")
    with pytest.raises(PermissionRefused):
        services.pause_workflow("it_chain", user=viewer)
    assert not PausedWorkflow.objects.exists()
