"""A step's failure in workflow code, the workflow code's own exceptions, and the determinism
guard, with the dispatcher run in this process: ``services.start`` then
``dispatcher.run_pass`` as a manager would, the agents' reports made here on the database, and
the messages the engine would send recorded instead (``outbox``). The same stories with real
managers and agents are in tests/integration/test_failures.py.
"""

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from workflows_app import clock, services
from workflows_app.engine import failures, live, policy, progress, reports, tick
from workflows_app.models import Event, Execution, Operation, Wait
from workflows_app.states import EventType, ExecutionStatus, FailureMode, OperationState, WaitKind, WaitOutcome
from tests.engine.passes import run_pass

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("outbox", "each_pass")]

MODES = [mode.value for mode in FailureMode]
FAILED = {"type": "NonRecoverableError", "message": "charge fails for good", "traceback": "Traceback: ..."}


@pytest.fixture(autouse=True)
def with_the_test_workflows_and_quick_retries():
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=["tests.workflows"], WORKFLOWS={"RETRY_INTERVAL": 0.2}):
        yield


def start(workflow, failure_mode=None, **parameters) -> Execution:
    return run_pass(services.start(workflow, parameters, failure_mode=failure_mode))


def op(execution, name) -> Operation:
    return Operation.objects.get(execution_id=execution.pk, name=name)


def states(execution) -> dict:
    return dict(Operation.objects.filter(execution_id=execution.pk).values_list("name", "state"))


def running(execution, name) -> Operation:
    """The agent's claim, on the database (test set-up: the state an agent's claim leaves)."""
    operation = op(execution, name)
    Operation.objects.filter(pk=operation.pk).update(state=OperationState.STARTED, started_at=timezone.now())
    operation.refresh_from_db()
    return operation


def succeed(execution, name, result=None):
    operation = running(execution, name) if op(execution, name).state != OperationState.STARTED else op(execution, name)
    assert reports.record_success(operation, operation.attempt, name if result is None else result)


def fail(execution, name, error=FAILED):
    operation = running(execution, name) if op(execution, name).state != OperationState.STARTED else op(execution, name)
    assert reports.record_failure(operation, operation.attempt, error, retryable=False)


def processes_gone(execution, name) -> Execution:
    """The agent's kill handler, once the cancelled step's process group is gone."""
    operation = op(execution, name)
    reports.record_processes_gone([(operation.pk, operation.attempt)])
    return run_pass(execution)


def saga(mode, style="execute", reraise=False) -> Execution:
    """``it_saga`` up to the charge's failure: reserve succeeded, pack runs, charge failed."""
    execution = start("it_saga", mode, agent="a1", style=style, reraise=reraise)
    succeed(execution, "reserve")
    execution = run_pass(execution)
    running(execution, "pack")
    fail(execution, "charge")
    return run_pass(execution)


# --- a failure the code catches: the saga ---------------------------------------------------

@pytest.mark.parametrize("style", ["execute", "graph", "canvas"])
@pytest.mark.parametrize("mode", MODES)
def test_a_caught_failure_runs_the_compensation_and_the_execution_completes(mode, style):
    execution = saga(mode, style)
    if mode == FailureMode.NO_NEW_CALLS:
        assert states(execution)["pack"] == "started", "the running step is awaited before the code sees the failure"
        assert "refund" not in states(execution)
        succeed(execution, "pack")
        execution = run_pass(execution)
    elif mode == FailureMode.CONTINUE_WHILE_POSSIBLE:
        assert "refund" not in states(execution), "the code sees the failure when it waits on it: after pack"
        succeed(execution, "pack")
        execution = run_pass(execution)
    else:
        assert states(execution)["pack"] == "cancelled", "fail_fast cancels the running step first"
        assert "refund" not in states(execution), "and shows the code the failure once its processes are gone"
        execution = processes_gone(execution, "pack")
    assert states(execution)["refund"] == "sending", "a step asked after the failure was caught is sent"
    succeed(execution, "refund", "refunded")
    execution = run_pass(execution)

    assert execution.status == ExecutionStatus.COMPLETED, execution.error
    assert execution.error == ""
    # Waiting on pack first, the code sees pack's StepFailed when fail_fast cancelled it: its
    # cause names the charge.
    seen_error = "Cancelled" if (mode, style) == ("fail_fast", "execute") else "NonRecoverableError"
    assert execution.payload == {"saw": {"failed": "charge", "error": seen_error}, "refund": "refunded"}
    charge = op(execution, "charge")
    assert (charge.state, charge.failure_handled, charge.error) == ("failed", True, FAILED), "the record keeps the failure"
    assert states(execution).get("ship") in (None, "cancelled"), "ship never ran"
    handled = Event.objects.filter(execution_id=execution.pk, operation="charge", type=EventType.LOG, data__failure_handled=True)
    assert handled.count() == 1


@pytest.mark.parametrize("style", ["execute", "graph", "canvas"])
def test_a_failure_the_code_records_and_raises_again_fails_the_execution_with_the_payload_kept(style):
    execution = saga(FailureMode.NO_NEW_CALLS.value, style, reraise=True)
    succeed(execution, "pack")
    execution = run_pass(execution)
    assert execution.status == ExecutionStatus.FAILED
    assert execution.payload == {"saw": {"failed": "charge", "error": "NonRecoverableError"}}
    assert execution.error.startswith("operation 'charge' failed: NonRecoverableError: charge fails for good\nTraceback: ...")
    assert not op(execution, "charge").failure_handled


def test_a_step_cancelled_by_fail_fast_raises_step_failed_naming_the_failure_it_follows_from():
    execution = processes_gone(saga(FailureMode.FAIL_FAST.value, "execute"), "pack")
    succeed(execution, "refund")
    execution = run_pass(execution)
    pack = op(execution, "pack")
    assert pack.error == {"type": "Cancelled", "message": "cancelled (fail_fast): charge failed", "traceback": "",
                          "cause": "charge"}
    # The code waited on pack first: its StepFailed names pack, and its cause names charge.
    assert execution.payload["saw"] == {"failed": "charge", "error": "Cancelled"}
    assert op(execution, "charge").failure_handled, "seeing the cancelled pack showed the code charge's failure"


def test_fail_fast_shows_the_failure_once_the_cancelled_steps_processes_are_gone_or_the_grace_passed(
        outbox, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        execution = saga(FailureMode.FAIL_FAST.value, "execute")
    pack = op(execution, "pack")
    assert outbox["kill"] == [[(str(pack.pk), pack.attempt)]], "its process group is signalled"
    assert run_pass(execution).status == ExecutionStatus.STARTED and "refund" not in states(execution)
    outbox["advance"].clear()
    tick.wake_due_executions(timezone.now())
    assert outbox["advance"] == [], "within the grace the tick leaves it to the agent's report"
    later = timezone.now() + timedelta(seconds=failures.stop_wait_seconds() + 0.1)
    tick.wake_due_executions(later)
    assert outbox["advance"] == [str(execution.pk)], "the tick wakes it once the grace is over"
    Operation.objects.filter(pk=pack.pk).update(cancelled_at=timezone.now() - timedelta(seconds=60))  # test set-up
    assert "refund" in states(run_pass(execution)), "past the grace it goes on without the report"


def test_the_report_that_a_cancelled_steps_processes_are_gone_wakes_a_waiting_execution(outbox):
    execution = saga(FailureMode.FAIL_FAST.value, "execute")
    outbox["advance"].clear()
    pack = op(execution, "pack")
    reports.record_processes_gone([(pack.pk, pack.attempt)])
    assert outbox["advance"] == [str(execution.pk)]
    gone = Event.objects.get(execution_id=execution.pk, operation="pack", type=EventType.LOG, data__processes_gone=1)
    assert gone.message == "the processes of attempt 1 are gone"


@pytest.mark.parametrize("mode", MODES)
def test_a_failure_the_code_never_waits_on_fails_at_its_replay_unless_the_rest_runs_on(mode):
    """The replay after the failure suspends on an event before it reaches the failed step. In
    no_new_calls and fail_fast that replay was the code's chance: the failure is not handled,
    nothing new may start, so the execution fails. In continue_while_possible it waits on."""
    execution = start("it_event_first", mode, agent="a1")
    fail(execution, "a")
    execution = run_pass(execution)
    if mode == FailureMode.CONTINUE_WHILE_POSSIBLE:
        assert execution.status == ExecutionStatus.STARTED
        services.send_event(execution.pk, "go")
        execution = run_pass(execution)
    assert execution.status == ExecutionStatus.FAILED
    assert execution.error.startswith("operation 'a' failed: NonRecoverableError: charge fails for good")


def test_in_continue_while_possible_a_failure_the_code_never_saw_fails_the_execution_when_it_returns():
    execution = start("it_ends_while_running", "continue_while_possible", agent="a1", how="return")
    fail(execution, "busy")  # never awaited
    execution = run_pass(execution)
    assert execution.status == ExecutionStatus.STARTED, "the rest runs on: it waits for quick"
    succeed(execution, "quick")
    execution = run_pass(execution)
    assert execution.status == ExecutionStatus.FAILED
    assert "operation 'busy' failed" in execution.error


def test_a_handled_failure_lets_retries_and_new_calls_happen_again_in_no_new_calls():
    execution = saga(FailureMode.NO_NEW_CALLS.value)
    execution = run_pass(execution)
    assert not policy.allows_new_calls(execution), "unhandled: nothing new may start"
    succeed(execution, "pack")
    execution = run_pass(execution)
    assert policy.allows_new_calls(execution), "handled: new calls may start"
    Operation.objects.filter(execution_id=execution.pk, name="refund").update(max_retries=3)  # test set-up
    refund = running(execution, "refund")
    assert reports.record_failure(refund, refund.attempt, {"type": "RecoverableError", "message": "later", "traceback": ""},
                                  retryable=True)
    assert op(execution, "refund").state == OperationState.RESCHEDULED, "a retry is a new call: allowed again"


def test_a_retry_another_failure_keeps_from_happening_names_it_and_showing_one_shows_both():
    """no_new_calls: pack could be retried, but charge's failure is unhandled, so it fails for
    good naming charge as its cause; the code waits on pack first and handles both."""
    execution = saga(FailureMode.NO_NEW_CALLS.value)
    Operation.objects.filter(execution_id=execution.pk, name="pack").update(max_retries=3)  # test set-up
    pack = op(execution, "pack")
    assert reports.record_failure(pack, pack.attempt, {"type": "RecoverableError", "message": "later", "traceback": ""},
                                  retryable=True)
    pack = op(execution, "pack")
    assert (pack.state, pack.error["cause"]) == (OperationState.FAILED, "charge")
    execution = run_pass(execution)
    succeed(execution, "refund", "refunded")
    execution = run_pass(execution)
    assert execution.status == ExecutionStatus.COMPLETED, execution.error
    assert execution.payload["saw"] == {"failed": "charge", "error": "RecoverableError"}
    assert op(execution, "pack").failure_handled and op(execution, "charge").failure_handled


def test_a_due_retry_that_another_failure_stopped_is_not_sent_and_the_failure_mode_cancels_it():
    execution = start("it_saga", "no_new_calls", agent="a1", style="execute")
    succeed(execution, "reserve")
    execution = run_pass(execution)
    Operation.objects.filter(execution_id=execution.pk, name="pack").update(max_retries=3)  # test set-up
    pack = running(execution, "pack")
    assert reports.record_failure(pack, pack.attempt, {"type": "RecoverableError", "message": "later", "traceback": ""},
                                  retryable=True, retry_after=0)
    fail(execution, "charge")  # before the dispatcher runs, the tick finds pack's retry due
    assert progress.send_due_retries(timezone.now() + timedelta(seconds=1)) == 0
    assert op(execution, "pack").state == OperationState.RESCHEDULED
    execution = run_pass(execution)
    pack = op(execution, "pack")
    assert (pack.state, pack.error["cause"]) == (OperationState.CANCELLED, "charge")


def test_the_dependents_of_a_failed_step_are_cancelled_at_once_in_continue_while_possible():
    execution = saga(FailureMode.CONTINUE_WHILE_POSSIBLE.value, "graph")
    ship = op(execution, "ship")
    assert ship.state == OperationState.CANCELLED and ship.error["cause"] == "charge"
    assert states(execution)["pack"] == "started", "what does not depend on it runs on"


# --- on_unhandled="retry" -------------------------------------------------------------------

def retries(execution):
    return list(Event.objects.filter(execution_id=execution.pk, type=EventType.WORKFLOW_RETRYING).order_by("id"))


def test_workflow_code_that_raises_is_tried_again_with_growing_gaps_and_completes_once_fixed(tmp_path):
    fixed = tmp_path / "fixed"
    execution = start("it_buggy", agent="a1", fixed_path=str(fixed))
    succeed(execution, "before")
    for attempt in range(1, 4):
        execution = run_pass(execution)
        assert execution.status == ExecutionStatus.STARTED
        assert len(retries(execution)) == attempt
        backoff = Wait.objects.get(execution_id=execution.pk, key=f"retry#{attempt}")
        assert retries(execution)[-1].data["next_try_at"] == backoff.deadline.isoformat()
        with clock.using(lambda: backoff.deadline - timedelta(milliseconds=1)):  # however slow the machine
            assert run_pass(execution).status == ExecutionStatus.STARTED and len(retries(execution)) == attempt, \
                "an advance before the backoff ends runs nothing"
        Wait.objects.filter(execution_id=execution.pk, kind=WaitKind.RETRY, outcome=WaitOutcome.WAITING).update(
            deadline=timezone.now())  # test set-up: the backoff is over
    delays = [event.data["delay"] for event in retries(execution)]
    assert delays == [0.2, 0.4, 0.8]
    first = retries(execution)[0]
    assert "RuntimeError: a bug in the workflow code" in first.data["traceback"]

    fixed.touch()  # the fix is deployed
    execution = run_pass(execution)
    succeed(execution, "after")
    execution = run_pass(execution)
    assert execution.status == ExecutionStatus.COMPLETED, execution.error
    assert execution.payload == {"after": "after"}
    assert op(execution, "before").attempt == 1, "a stored step never runs again"


def test_the_gap_between_tries_doubles_up_to_ten_minutes():
    assert [policy.workflow_retry_delay(n) for n in (1, 2, 3, 4)] == [0.2, 0.4, 0.8, 1.6]
    assert policy.workflow_retry_delay(20) == 600 and policy.workflow_retry_delay(10_000) == 600


def test_the_tick_ends_a_backoff_and_wakes_the_workflow(outbox, tmp_path):
    execution = start("it_buggy", agent="a1", fixed_path=str(tmp_path / "never"))
    succeed(execution, "before")
    run_pass(execution)
    outbox["advance"].clear()
    tick.wake_due_executions(timezone.now())
    assert outbox["advance"] == []
    tick.wake_due_executions(timezone.now() + timedelta(seconds=1))
    assert outbox["advance"] == [str(execution.pk)]


def test_cancel_stops_the_tries_and_resume_tries_at_once(tmp_path):
    fixed = tmp_path / "fixed"
    execution = start("it_buggy", agent="a1", fixed_path=str(fixed))
    succeed(execution, "before")
    run_pass(execution)
    assert services.cancel(execution.pk).status == ExecutionStatus.CANCELLED
    assert run_pass(execution).status == ExecutionStatus.CANCELLED and len(retries(execution)) == 1
    fixed.touch()
    services.resume(execution.pk)
    execution = run_pass(execution)
    assert execution.status == ExecutionStatus.STARTED and len(retries(execution)) == 1, "resumed: tried at once"
    assert op(execution, "after").state == OperationState.SENDING


def test_an_uncaught_step_failure_is_not_retried_even_with_on_unhandled_retry(tmp_path):
    execution = start("it_buggy", agent="a1", fixed_path=str(tmp_path / "never"))
    fail(execution, "before")
    execution = run_pass(execution)
    assert execution.status == ExecutionStatus.FAILED and retries(execution) == []


# --- the determinism guard ---------------------------------------------------------------------

@pytest.mark.parametrize("change, stored, asked", [
    ("operation", "it_step args=['x'] kwargs={'value': 1}", "it_where args=['x'] kwargs={}"),
    ("arguments", "it_step args=['x'] kwargs={'value': 1}", "it_step args=['x'] kwargs={'value': 2}"),
])
def test_a_replay_that_asks_for_a_stored_step_differently_fails_the_execution(tmp_path, change, stored, asked):
    changed = tmp_path / "changed"
    execution = start("it_changing", agent="a1", changed_path=str(changed), change=change)
    succeed(execution, "x")
    assert run_pass(execution).status == ExecutionStatus.STARTED  # waits for "go"
    changed.touch()  # a careless deploy: the new code runs in new processes, which keep no live run
    live.clear()
    services.send_event(execution.pk, "go")
    execution = run_pass(execution)
    assert execution.status == ExecutionStatus.FAILED
    assert execution.error == (f"non-deterministic workflow: step 'x' was stored as {stored}, and this replay asked "
                               f"for {asked}; workflow code must ask for the same steps, with the same operations "
                               "and arguments, in the same order on every run")


def test_a_replay_that_asks_for_the_same_call_is_not_refused(tmp_path):
    execution = start("it_changing", agent="a1", changed_path=str(tmp_path / "never"), change="none")
    succeed(execution, "x")
    assert run_pass(execution).status == ExecutionStatus.STARTED
    services.send_event(execution.pk, "go")
    assert run_pass(execution).status == ExecutionStatus.COMPLETED


def test_code_that_catches_the_guards_error_cannot_hide_it(tmp_path):
    execution = start("it_swallows_nondeterminism", agent="a1", changed_path=str(tmp_path / "changed"))
    (tmp_path / "changed").touch()  # a deploy: new processes, no live run
    live.clear()
    execution = run_pass(execution)
    assert execution.status == ExecutionStatus.FAILED
    assert "non-deterministic workflow: step 'x'" in execution.error


def test_a_tuple_argument_asks_for_the_call_stored_with_a_list():
    execution = start("it_tuple_args", agent="a1")
    assert run_pass(execution).status == ExecutionStatus.STARTED
    succeed(execution, "t")
    assert run_pass(execution).status == ExecutionStatus.COMPLETED
