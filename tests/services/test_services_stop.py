"""The stop services (cancel, force-cancel, kill) on the database alone: what each does to the
execution and its operations, in which order, and what each refuses.

Messages they would send (revokes, the kill broadcast) go out on commit; these tests run inside
a transaction that never commits, so they need no broker. The processes' side is in
tests/integration/test_stopping.py.
"""

import pytest
from django.core.management import CommandError, call_command

from workflows_app import services
from workflows_app.engine import stopping
from workflows_app.errors import ActionRefused, StaleToken
from workflows_app.models import Event, Execution, Operation
from workflows_app.states import EXECUTION_TERMINAL, ExecutionStatus
from workflows_app.transitions import execution_transition
from tests import UNKNOWN_ID


ACTIONS = {"cancel": services.cancel, "force-cancel": services.force_cancel, "kill": services.kill}
#: Where each stop action is allowed, besides pending and queued (which end cancelled).
ALLOWED = {
    "cancel": {"started", "paused"},
    "force-cancel": {"started", "paused", "cancelling"},
    "kill": {s.value for s in ExecutionStatus},
}


def snapshot(execution):
    return (Execution.objects.filter(pk=execution.pk).values().get(),
            list(Operation.objects.filter(execution_id=execution.pk).values()),
            Event.objects.filter(execution_id=execution.pk).count())


def event_types(execution):
    return [(e.type, e.operation) for e in Event.objects.filter(execution_id=execution.pk).order_by("id")]


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("status", ["pending", "queued"])
def test_any_stop_of_a_waiting_execution_ends_it_cancelled_at_once(make_execution, action, status):
    execution = make_execution(status=status)
    assert ACTIONS[action](execution.pk).status == "cancelled"
    assert Execution.objects.get(pk=execution.pk).status == "cancelled"
    assert event_types(execution) == [("workflow_cancelled", None)]


REFUSED = [(action, status.value) for action in ("cancel", "force-cancel") for status in ExecutionStatus
           if status.value not in ALLOWED[action] | {"pending", "queued"}]


@pytest.mark.parametrize("action, status", REFUSED)
def test_a_refused_stop_changes_nothing_and_says_why(make_execution, action, status):
    execution = make_execution(status=status)
    before = snapshot(execution)
    with pytest.raises(ActionRefused) as refused:
        ACTIONS[action](execution.pk)
    assert f"cannot {action}" in str(refused.value) and f"it is {status}" in str(refused.value)
    assert snapshot(execution) == before


def test_cancel_cancels_what_has_not_started_and_awaits_what_runs(running):
    assert services.cancel(running.pk).status == "cancelling"
    states = dict(Operation.objects.filter(execution_id=running.pk).values_list("name", "state"))
    assert states == {"done": "succeeded", "busy": "started", "next": "cancelled"}
    assert event_types(running)[-2:] == [("workflow_cancelling", None), ("task_cancelled", "next")]


def test_a_cancelling_execution_ends_cancelled_once_its_running_operation_ended(running):
    services.cancel(running.pk)
    busy = Operation.objects.get(execution_id=running.pk, name="busy")
    from workflows_app.engine import reports

    reports.record_success(busy, 1, "done anyway")
    execution = Execution.objects.get(pk=running.pk)
    stopping.carry_on(execution)  # what the dispatcher does when that report wakes it
    assert Execution.objects.get(pk=running.pk).status == "cancelled"
    assert Operation.objects.get(pk=busy.pk).state == "succeeded"
    assert event_types(running)[-2:] == [("task_succeeded", "busy"), ("workflow_cancelled", None)]


def test_a_retryable_failure_while_cancelling_is_not_retried(running):
    from workflows_app.engine import reports

    services.cancel(running.pk)
    busy = Operation.objects.get(execution_id=running.pk, name="busy")
    reports.record_failure(busy, 1, {"type": "RecoverableError", "message": "try again", "traceback": ""}, retryable=True)
    assert Operation.objects.get(pk=busy.pk).state == "failed"


@pytest.mark.parametrize("source", ["started", "cancelling"])
def test_force_cancel_ends_it_at_once_operations_first(running, source):
    if source == "cancelling":
        services.cancel(running.pk)
    assert services.force_cancel(running.pk).status == "cancelled"
    states = dict(Operation.objects.filter(execution_id=running.pk).values_list("name", "state"))
    assert states == {"done": "succeeded", "busy": "cancelled", "next": "cancelled"}
    types = event_types(running)
    assert types[-1] == ("workflow_cancelled", None)
    assert types.index(("task_cancelled", "busy")) < len(types) - 1


def test_a_late_report_after_force_cancel_is_kept_and_changes_nothing(running):
    from workflows_app.engine import reports

    services.force_cancel(running.pk)
    busy = Operation.objects.get(execution_id=running.pk, name="busy")
    assert reports.record_success(Operation.objects.get(pk=busy.pk), 1, {"late": True}) is False
    stale = Event.objects.get(execution_id=running.pk, type="stale_report")
    assert stale.operation == "busy" and stale.data["result"] == {"late": True}
    assert Operation.objects.get(pk=busy.pk).state == "cancelled"


@pytest.mark.parametrize("source", ["started", "cancelling", "force_cancelling", "kill_cancelling"])
def test_kill_cancels_running_operations_as_killed_and_renews_the_token(running, source):
    if source != "started":
        execution_transition(Execution.objects.get(pk=running.pk), source)
    old_hash = Execution.objects.get(pk=running.pk).token_hash
    killed = services.kill(running.pk)
    assert killed.status == "cancelled"
    stored = Execution.objects.get(pk=running.pk)
    ops = {op.name: op for op in Operation.objects.filter(execution_id=running.pk)}
    assert ops["busy"].state == "cancelled" and ops["busy"].error == stopping.KILLED
    assert ops["next"].state == "cancelled" and ops["done"].state == "succeeded"
    if source != "kill_cancelling":
        assert stored.token_hash != old_hash, "a kill issues a new token"
        assert ("workflow_cancelling", None) in event_types(running)
    assert event_types(running)[-1] == ("workflow_cancelled", None)


def test_a_dispatcher_holding_the_token_from_before_a_kill_changes_nothing(make_execution):
    execution = make_execution(status=ExecutionStatus.PENDING)
    execution_transition(execution, ExecutionStatus.STARTED, renew_token=True)
    dispatcher_view = Execution.objects.get(pk=execution.pk)  # what a dispatcher read
    services.kill(execution.pk)
    before = snapshot(execution)
    # Whatever the status now allows (cancelled -> started is resume's move), the token that
    # dispatcher holds no longer matches: it is refused.
    with pytest.raises(StaleToken):
        execution_transition(Execution.objects.get(pk=execution.pk), ExecutionStatus.STARTED,
                             fence=dispatcher_view.token_hash)
    assert snapshot(execution) == before


@pytest.mark.parametrize("status", sorted(s.value for s in EXECUTION_TERMINAL))
def test_kill_of_an_ended_execution_answers_success_and_changes_nothing(make_execution, status):
    execution = make_execution(status=status)
    before = snapshot(execution)
    assert services.kill(execution.pk).status == status
    assert snapshot(execution) == before


def test_a_cancelling_execution_past_cancel_timeout_is_killed(running, settings):
    services.cancel(running.pk)
    execution = Execution.objects.get(pk=running.pk)
    stopping.carry_on(execution)
    assert Execution.objects.get(pk=running.pk).status == "cancelling", "within CANCEL_TIMEOUT it waits"
    settings.WORKFLOWS = {"CANCEL_TIMEOUT": 0}
    stopping.carry_on(execution)
    assert Execution.objects.get(pk=running.pk).status == "cancelled"
    assert Operation.objects.get(execution_id=running.pk, name="busy").error == stopping.KILLED


# --- the command -------------------------------------------------------------------------------

def test_cancel_execution_command_cancels_and_prints_the_status(running, capsys):
    call_command("cancel_execution", str(running.pk))
    assert capsys.readouterr().out.strip() == f"{running.pk} cancelling"
    call_command("cancel_execution", str(running.pk), "--kill")
    assert capsys.readouterr().out.strip() == f"{running.pk} cancelled"


@pytest.mark.parametrize("argv, says", [
    (["--force"], "cannot force-cancel"),
    ([], "cannot cancel"),
])
def test_cancel_execution_command_refuses_with_one_line(make_execution, argv, says):
    execution = make_execution(status=ExecutionStatus.COMPLETED)
    with pytest.raises(CommandError) as refused:
        call_command("cancel_execution", str(execution.pk), *argv)
    assert says in str(refused.value) and "\n" not in str(refused.value)
    assert Execution.objects.get(pk=execution.pk).status == "completed"


@pytest.mark.parametrize("execution_id", [UNKNOWN_ID, "not-a-uuid"])
def test_cancel_execution_command_names_an_unknown_execution(db, execution_id):
    with pytest.raises(CommandError, match=f"no execution '{execution_id}'"):
        call_command("cancel_execution", execution_id)


def test_cancel_execution_command_takes_one_level_only(running):
    with pytest.raises(CommandError):
        call_command("cancel_execution", str(running.pk), "--force", "--kill")
