"""Lifecycle listeners run after the terminal event is committed; one that raises is recorded
as ``listener_failed`` and changes nothing."""

import pytest

from workflows_app import sdk
from workflows_app.engine import reactions
from workflows_app.models import Event, Execution
from workflows_app.states import EventType, ExecutionStatus
from workflows_app.transitions import execution_transition

calls = []


def listened(ctx):
    pass


listened = sdk.workflow(name="listener-test-wf")(listened)


@listened.on_success
def _on_success(status, ctx):
    calls.append(("success", status, ctx.execution_id, Execution.objects.get(pk=ctx.execution_id).status))


@listened.on_failure
def _on_failure(status, ctx):
    raise RuntimeError("listener broke")


@pytest.mark.django_db(transaction=True)
def test_on_success_sees_the_committed_status():
    calls.clear()
    execution = Execution.objects.create(workflow_id="listener-test-wf", status=ExecutionStatus.STARTED)
    execution_transition(execution, ExecutionStatus.COMPLETED)
    assert calls == [("success", ExecutionStatus.COMPLETED, execution.pk, "completed")]


@pytest.mark.django_db(transaction=True)
def test_a_failing_listener_is_recorded_and_changes_nothing():
    execution = Execution.objects.create(workflow_id="listener-test-wf", status=ExecutionStatus.STARTED)
    execution_transition(execution, ExecutionStatus.FAILED, error="boom")
    assert Execution.objects.get(pk=execution.pk).status == ExecutionStatus.FAILED
    failed = Event.objects.get(execution=execution, type=EventType.LISTENER_FAILED)
    assert "listener broke" in failed.message
    # The listener's failure comes after the terminal event it reacted to.
    terminal = Event.objects.get(execution=execution, type=EventType.WORKFLOW_FAILED)
    assert failed.id > terminal.id


@pytest.mark.django_db(transaction=True)
def test_status_listeners_can_be_registered_for_any_workflow_and_removed():
    seen = []

    def listener(status, ctx):
        seen.append(status)

    sdk.register_status_listener("cancelled", listener)
    try:
        execution = Execution.objects.create(workflow_id="not-registered", status=ExecutionStatus.PENDING)
        execution_transition(execution, ExecutionStatus.CANCELLED)
        assert seen == [ExecutionStatus.CANCELLED]
    finally:
        sdk.unregister_status_listener("cancelled", listener)
    execution = Execution.objects.create(workflow_id="not-registered", status=ExecutionStatus.PENDING)
    execution_transition(execution, ExecutionStatus.CANCELLED)
    assert seen == [ExecutionStatus.CANCELLED]


@pytest.mark.django_db(transaction=True)
def test_the_reactions_run_in_their_order_and_one_that_raises_stops_none_after_it(monkeypatch):
    """What follows a committed transition is ``reactions.AFTER_EXECUTION_TRANSITION``, in order:
    a reaction that raises is recorded as ``listener_failed`` and the next ones still run."""
    seen = []

    def first(execution, source, target, event):
        seen.append(("first", source, target, event.type))

    def broken(execution, source, target, event):
        raise RuntimeError("a reaction broke")

    def last(execution, source, target, event):
        seen.append(("last", Execution.objects.get(pk=execution.pk).status))

    monkeypatch.setattr(reactions, "AFTER_EXECUTION_TRANSITION", (first, broken, last))
    execution = Execution.objects.create(workflow_id="listener-test-wf", status=ExecutionStatus.STARTED)
    execution_transition(execution, ExecutionStatus.FAILED)
    assert seen == [("first", ExecutionStatus.STARTED, ExecutionStatus.FAILED, EventType.WORKFLOW_FAILED),
                    ("last", "failed")]
    [failure] = Event.objects.filter(execution_id=execution.pk, type=EventType.LISTENER_FAILED)
    assert "a reaction broke" in failure.message and failure.data["status"] == "failed"
