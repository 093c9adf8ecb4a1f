"""Events, timers and cancelling one step, with the dispatcher run in this process:
``services.start`` then ``dispatcher.run_pass`` as a manager would, on the database alone.

Messages the engine would send once a transaction commits (advances, revokes, kills) are
recorded instead (``outbox``); the processes' side is in tests/integration/test_waits.py.
"""

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from workflows_app import services
from workflows_app.engine import reports, tick
from workflows_app.errors import ActionRefused, ParameterError
from workflows_app.models import Event, Execution, Operation, Wait
from workflows_app.states import EventType, ExecutionStatus, OperationState, WaitOutcome
from tests.engine.passes import run_pass

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("with_the_test_workflows", "each_pass")]

#: Short enough to wait for in a test, long enough that a replay never races it.
SHORT = 0.3


def start(workflow, **parameters) -> Execution:
    return run_pass(services.start(workflow, parameters))


def waits_of(execution) -> list:
    return list(Wait.objects.filter(execution_id=execution.pk).order_by("id"))


def got(execution):
    assert execution.status == ExecutionStatus.COMPLETED, execution.error
    return execution.payload["got"]


# --- await_event -----------------------------------------------------------------------

def test_an_event_delivered_before_anyone_waits_is_kept_for_the_wait():
    execution = services.start("it_events", {"waits": [["go", None]]})
    services.send_event(execution.pk, "go", {"user": "ann"})  # before the workflow ever ran
    assert got(run_pass(execution)) == [{"user": "ann"}]
    (wait,) = waits_of(execution)
    assert (wait.key, wait.outcome, wait.payload) == ("event:go#1", WaitOutcome.RECEIVED, {"user": "ann"})
    assert wait.event.data == {"name": "go", "payload": {"user": "ann"}}


def test_a_waiting_execution_is_suspended_on_one_stored_wait_however_often_it_replays():
    execution = start("it_events", waits=[["go", None]])
    for _ in range(3):
        assert run_pass(execution).status == ExecutionStatus.STARTED
    assert [(w.key, w.outcome) for w in waits_of(execution)] == [("event:go#1", WaitOutcome.WAITING)]
    services.send_event(execution.pk, "go", 7)
    assert got(run_pass(execution)) == [7]


def test_two_waits_take_two_events_oldest_first():
    execution = start("it_events", waits=[["x", None], ["other", None], ["x", None]])
    for payload in ("first", "second"):
        services.send_event(execution.pk, "x", payload)
    services.send_event(execution.pk, "other", "o")
    assert got(run_pass(execution)) == ["first", "o", "second"]
    assert [w.key for w in waits_of(execution)] == ["event:x#1", "event:other#1", "event:x#2"]


def test_an_event_nobody_waits_for_stays_untaken():
    execution = start("it_events", waits=[["x", None]])
    services.send_event(execution.pk, "x", 1)
    services.send_event(execution.pk, "x", 2)
    assert got(run_pass(execution)) == [1]
    untaken = Event.objects.filter(execution_id=execution.pk, type=EventType.EVENT_RECEIVED, taken_by__isnull=True)
    assert [e.data["payload"] for e in untaken] == [2]


def test_a_timeout_raises_event_timeout_which_the_workflow_catches():
    execution = start("it_events", waits=[["late", SHORT]])
    assert execution.status == ExecutionStatus.STARTED
    time.sleep(SHORT + 0.1)
    assert got(run_pass(execution)) == ["timeout"]
    assert waits_of(execution)[0].outcome == WaitOutcome.TIMED_OUT


def test_a_timed_out_wait_stays_timed_out_and_a_later_event_goes_to_the_next_wait():
    execution = start("it_events", waits=[["a", SHORT], ["a", None], ["b", None]])
    time.sleep(SHORT + 0.1)
    services.send_event(execution.pk, "a", "late")  # after the first wait's deadline, before any replay
    execution = run_pass(execution)
    assert execution.status == ExecutionStatus.STARTED  # waiting for "b"
    first, second, _ = waits_of(execution)
    assert (first.outcome, first.event_id) == (WaitOutcome.TIMED_OUT, None)
    assert (second.outcome, second.payload) == (WaitOutcome.RECEIVED, "late")
    services.send_event(execution.pk, "a", "later still")  # a replay must not hand it to the timed-out wait
    assert run_pass(execution).status == ExecutionStatus.STARTED
    assert waits_of(execution)[0].outcome == WaitOutcome.TIMED_OUT
    services.send_event(execution.pk, "b", "B")
    assert got(run_pass(execution)) == ["timeout", "late", "B"]


# --- sleep and the tick ----------------------------------------------------------------

def test_sleep_suspends_and_the_tick_wakes_it_after_the_deadline(outbox):
    execution = start("it_sleep", seconds=SHORT)
    assert execution.status == ExecutionStatus.STARTED
    tick.wake_due_executions(timezone.now())
    assert str(execution.pk) not in outbox["advance"], "not due yet"
    assert run_pass(execution).status == ExecutionStatus.STARTED, "a replay before the deadline sleeps on"
    time.sleep(SHORT + 0.1)
    tick.wake_due_executions(timezone.now())
    assert outbox["advance"].count(str(execution.pk)) == 1
    execution = run_pass(execution)
    assert (execution.status, execution.payload) == (ExecutionStatus.COMPLETED, {"slept": SHORT})
    assert waits_of(execution)[0].outcome == WaitOutcome.ELAPSED


def test_an_ended_execution_is_not_woken_by_its_waits(outbox):
    ended = start("it_sleep", seconds=0.1)
    running = start("it_sleep", seconds=0.1)
    services.force_cancel(ended.pk)
    time.sleep(0.2)
    tick.wake_due_executions(timezone.now())
    assert outbox["advance"] == [str(running.pk)]
    assert waits_of(ended)[0].outcome == WaitOutcome.WAITING  # kept as it was: a resume replays it


def test_the_sweep_for_lost_wake_ups_leaves_waiting_executions_alone_unless_an_event_is_untaken(outbox):
    execution = start("it_events", waits=[["go", None]])
    Execution.objects.filter(pk=execution.pk).update(started_at=timezone.now() - timedelta(minutes=5))  # test set-up
    tick.resend_stuck_messages(timezone.now())
    assert outbox["advance"] == []
    services.send_event(execution.pk, "go", 1)  # its own advance was "lost" (never sent: no commit)
    tick.resend_stuck_messages(timezone.now())
    assert outbox["advance"] == [], "a fresh event's own advance is still on its way"
    later = timezone.now() + timedelta(seconds=tick.RESEND_AFTER_SECONDS + 1)
    tick.resend_stuck_messages(later)
    assert outbox["advance"] == [str(execution.pk)]


def test_a_workflow_that_never_waits_never_reads_the_waits():
    execution = services.start("it_single", {"agent": "nowhere"})
    with CaptureQueriesContext(connection) as queries:
        assert run_pass(execution).status == ExecutionStatus.STARTED
    assert not [q["sql"] for q in queries if "workflows_app_wait" in q["sql"]]


# --- cancel_step -----------------------------------------------------------------------

def _victim(execution) -> Operation:
    return Operation.objects.get(execution_id=execution.pk, name="victim")


@pytest.mark.parametrize("use_ctx", [False, True], ids=["handle.cancel", "ctx.cancel_step"])
@pytest.mark.parametrize("state", ["pending", "sending", "sent", "started"])
def test_cancel_step_cancels_one_step_at_once(outbox, django_capture_on_commit_callbacks, state, use_ctx):
    execution = start("it_cancel_step", agent="a1", after_first=state == "pending", use_ctx=use_ctx)
    victim = _victim(execution)
    assert victim.state == ("pending" if state == "pending" else "sending")
    if state in ("sent", "started"):
        Operation.objects.filter(pk=victim.pk).update(state=state)  # test set-up: the agent moved it on
    services.send_event(execution.pk, "cancel")
    with django_capture_on_commit_callbacks(execute=True):
        execution = run_pass(execution)

    victim.refresh_from_db()
    assert victim.state == OperationState.CANCELLED
    assert victim.error["message"] == "cancelled by the workflow (cancel_step)"
    assert execution.status == ExecutionStatus.COMPLETED, execution.error
    assert execution.payload == {"cancelled_now": True, "victim": "cancelled", "then": "cancelled"}
    then = Operation.objects.get(execution_id=execution.pk, name="then")
    assert then.error["message"] == "not started: victim was cancelled"
    revoked = {task_id: terminate for ids, terminate in outbox["revoke"] for task_id in ids}
    killed = [attempt for attempts in outbox["kill"] for attempt in attempts]
    if state == "started":
        assert killed == [(str(victim.pk), 1)]
        assert revoked[victim.task_id] is True, "its process is signalled"
    elif state in ("sending", "sent"):
        assert revoked == {victim.task_id: False} and killed == []
    else:
        assert victim.task_id not in revoked and victim.attempt == 0, "never sent"
    assert Event.objects.filter(execution_id=execution.pk, operation="victim", type=EventType.TASK_CANCELLED).count() == 1


def test_what_a_cancelled_step_reports_later_is_kept_as_a_stale_report(django_capture_on_commit_callbacks, outbox):
    execution = start("it_cancel_step", agent="a1")
    victim = _victim(execution)
    Operation.objects.filter(pk=victim.pk).update(state=OperationState.STARTED)  # test set-up
    services.send_event(execution.pk, "cancel")
    run_pass(execution)
    victim.refresh_from_db()
    assert reports.record_success(victim, victim.attempt, {"late": True}) is False
    stale = Event.objects.get(execution_id=execution.pk, type=EventType.STALE_REPORT)
    assert stale.data["result"] == {"late": True}
    victim.refresh_from_db()
    assert (victim.state, victim.result) == (OperationState.CANCELLED, None)


def _succeed(execution, name, result):
    """The agent's side, on the database: the step starts and succeeds."""
    operation = Operation.objects.get(execution_id=execution.pk, name=name)
    Operation.objects.filter(pk=operation.pk).update(state=OperationState.STARTED)  # test set-up
    operation.refresh_from_db()
    assert reports.record_success(operation, operation.attempt, result)


def test_cancelling_an_ended_step_is_a_no_op_and_so_is_its_replay():
    execution = start("it_cancel_step", agent="a1")
    _succeed(execution, "victim", 5)
    services.send_event(execution.pk, "cancel")
    assert run_pass(execution).status == ExecutionStatus.STARTED  # cancel_step did nothing; it waits for "then"
    _succeed(execution, "then", 6)
    execution = run_pass(execution)
    assert execution.payload == {"cancelled_now": False, "victim": "ran", "then": "ran"}
    assert not Event.objects.filter(execution_id=execution.pk, type=EventType.TASK_CANCELLED).exists()


# --- none_of ---------------------------------------------------------------------------

def test_none_of_is_false_as_soon_as_one_succeeds():
    execution = start("it_none_of", timeout=60)
    assert execution.status == ExecutionStatus.STARTED
    services.send_event(execution.pk, "also-yes", None)
    execution = run_pass(execution)
    assert execution.payload == {"none": False, "states": ["started", "succeeded"]}


def test_none_of_is_true_once_every_one_ended_without_succeeding():
    execution = start("it_none_of", timeout=SHORT)
    assert run_pass(execution).status == ExecutionStatus.STARTED, "none ended yet: it waits"
    time.sleep(SHORT + 0.1)
    execution = run_pass(execution)
    assert execution.payload == {"none": True, "states": ["failed", "failed"]}


# --- bad input -------------------------------------------------------------------------

@pytest.mark.parametrize("case, says", [
    ("name", "an event name is a string, not int (42)"),
    ("timeout", "timeout is a finite number of seconds, 0 or more, not -1"),
    ("sleep", "sleep is a number of seconds, not str ('soon')"),
    ("cancel", "cancel_step takes a step handle or a step name, not float"),
])
def test_a_wait_asked_with_bad_input_fails_the_execution_with_a_clear_error(case, says):
    execution = start("it_bad_wait", case=case)
    assert execution.status == ExecutionStatus.FAILED
    assert says in execution.error
    assert not waits_of(execution)


@pytest.mark.parametrize("name, payload, says", [
    (None, 1, "an event name is a string, not NoneType"),
    ("", 1, "an event name has 1 to 255 characters, not 0"),
    ("x" * 256, 1, "an event name has 1 to 255 characters, not 256"),
    ("x", {1, 2}, "payload: set is not a JSON value"),
    ("x", float("nan"), "payload: NaN and infinities are not JSON numbers"),
])
def test_send_event_refuses_bad_input_with_a_clear_error(name, payload, says):
    execution = services.start("it_events", {"waits": []})
    with pytest.raises(ParameterError, match=says.replace("(", r"\(").replace(")", r"\)")):
        services.send_event(execution.pk, name, payload)
    assert not Event.objects.filter(execution_id=execution.pk, type=EventType.EVENT_RECEIVED).exists()


def test_send_event_refuses_an_ended_execution():
    execution = start("it_events", waits=[])
    assert execution.status == ExecutionStatus.COMPLETED
    with pytest.raises(ActionRefused, match="cannot send an event to execution .*: it is completed"):
        services.send_event(execution.pk, "late", 1)
