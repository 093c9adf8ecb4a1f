"""What the engine does when something fails: a step for good, or the workflow code.

**A step fails for good.** The failure mode says what happens to the *other* steps before the
workflow code sees the failure (:func:`before_replay`): ``no_new_calls`` cancels the steps not
started yet and awaits the running ones (at most ``wait_after_fail``, then cancels them);
``fail_fast`` cancels the running ones too, at once; ``continue_while_possible`` lets everything
run on but what depends on the failed step. Then the function is replayed, and the wait on the
step raises ``StepFailed``. If the code goes on — it caught it, or answered over it with
``any_of`` / ``none_of`` — the failure is *handled* (:func:`record_handled`): the operation stays
``failed``, and new calls may start again in every mode (a compensation, a fallback: the saga
pattern). A failure the code never saw fails the execution: in ``no_new_calls`` and
``fail_fast`` at the end of that replay, in ``continue_while_possible`` when the function returns.

**The workflow code raises.** A workflow declared ``@workflow(on_unhandled="retry")`` stays
``started`` and is run again from its last durable point after a backoff (``RETRY_INTERVAL``,
doubling, at most ten minutes): a stored wait of kind ``retry`` that the tick ends, so it
survives restarts (:func:`schedule_retry`, :func:`retry_due`).
"""

from datetime import timedelta

from workflows_app import values
from workflows_app.conf import workflows_settings
from workflows_app.engine import policy, reports, stopping, waits
from workflows_app.models import Event, Operation, Wait
from workflows_app.states import (
    OPERATION_NOT_STARTED,
    EventType,
    FailureMode,
    OperationState,
    StepKind,
    WaitKind,
    WaitOutcome,
)
from workflows_app.transitions import record_event


def before_replay(execution, operations, now) -> bool:
    """Apply the failure mode while a failure is unhandled; ``operations`` (the execution's, as
    the dispatcher loaded them) is updated in place to what it did. True when the replay must
    wait: running steps are awaited first (no_new_calls), the processes of those it cancelled
    must be gone (fail_fast); their end, the kill's report or the tick wakes it."""
    unhandled = [op for op in operations if op.state == OperationState.FAILED and not op.failure_handled]
    if not unhandled:
        return False
    if execution.failure_mode == FailureMode.CONTINUE_WHILE_POSSIBLE:
        if any(op.state == OperationState.PENDING for op in operations):
            stopping.cancel_dependents(execution, unhandled, {op.name: op for op in operations})
        return False
    first = earliest(unhandled)
    # Chosen by their state now, not as loaded: a step an agent started meanwhile is running.
    message = f"not started: {first.name} failed"
    stopping.cancel_in_states(execution, OPERATION_NOT_STARTED, message, error=stopping.cancelled_error(message, first.name))
    waited_enough = first.failed_at + timedelta(seconds=execution.wait_after_fail) <= now
    if execution.failure_mode == FailureMode.FAIL_FAST or waited_enough:
        reason = "fail_fast" if execution.failure_mode == FailureMode.FAIL_FAST else "wait_after_fail ran out"
        message = f"cancelled ({reason}): {first.name} failed"
        stopping.cancel_in_states(execution, [OperationState.STARTED], message, error=stopping.cancelled_error(message, first.name))
    operations[:] = Operation.objects.filter(execution_id=execution.pk)
    if any(not op.is_terminal for op in operations):
        return True
    return _still_stopping(execution, first, operations, now)


def earliest(failed):
    """The first to fail of ``failed`` (operations that failed): the failure the others follow."""
    return min(failed, key=lambda op: op.failed_at)


#: Seconds after KILL_GRACE_SECONDS (when SIGKILL went out) that the engine waits at most for an
#: agent to say the processes of a step it cancelled are gone.
STOP_MARGIN_SECONDS = 1.0


def stop_wait_seconds() -> float:
    """How long after a cancel the engine waits at most for a running step's processes to go."""
    return workflows_settings.KILL_GRACE_SECONDS + STOP_MARGIN_SECONDS


def _still_stopping(execution, first, operations, now) -> bool:
    """Whether a step this failure cancelled while it ran may still have processes: until its
    agent reports them gone (``reports.record_processes_gone``), or ``stop_wait_seconds`` passed
    since the cancel, the code is not shown the failure — so a compensation never runs beside
    the step it compensates."""
    limit = timedelta(seconds=stop_wait_seconds())
    recent = {op.name: op for op in operations
              if op.state == OperationState.CANCELLED and op.started_at is not None and op.kind == StepKind.OPERATION
              and (op.error or {}).get("cause") == first.name and op.cancelled_at + limit > now}
    if not recent:
        return False
    events = Event.objects.filter(execution_id=execution.pk, operation__in=recent)
    was_running = set(events.filter(type=EventType.TASK_CANCELLED, data__from=OperationState.STARTED.value)
                      .values_list("operation", flat=True))
    gone = {name for name, data in events.filter(type=EventType.LOG, data__has_key=reports.PROCESSES_GONE)
            .values_list("operation", "data") if data[reports.PROCESSES_GONE] == recent[name].attempt}
    return bool(was_running - gone)


def record_handled(execution, replay):
    """The failures this replay showed the code, which went on past them, are handled: they no
    longer stop new calls, and each gets a ``log`` event saying so."""
    names = sorted(replay.handled_failures())
    if not names:
        return
    Operation.objects.filter(execution_id=execution.pk, name__in=names, state=OperationState.FAILED).update(
        failure_handled=True)
    replay.mark_handled(names)
    Event.objects.bulk_create([
        Event(execution_id=execution.pk, operation=name, type=EventType.LOG, data={"failure_handled": True},
              message=f"the workflow was shown the failure of {name} (StepFailed) and went on: handled")
        for name in names])


def describe(execution, step) -> str:
    """The execution's error for a failure of ``step``: the step, its error and its traceback
    (and, for a step cancelled because another failed, that one's)."""
    operation = Operation.objects.filter(execution_id=execution.pk, name=step).first()
    error = (operation.error or {}) if operation else {}
    text = f"operation {step!r} failed: {error.get('type', '')}: {error.get('message', '')}".rstrip(": ")
    if error.get("traceback"):
        text += "\n" + error["traceback"]
    cause = error.get("cause")
    if cause and cause != step:
        text += "\n" + describe(execution, cause)
    return text


# --- the workflow code raised (on_unhandled="retry") -----------------------------------------

def retry_due(execution, now) -> bool:
    """Whether the workflow may run now: false while its next try waits for its backoff."""
    wait = Wait.objects.filter(execution_id=execution.pk, kind=WaitKind.RETRY, outcome=WaitOutcome.WAITING).first()
    if wait is None:
        return True
    return waits.settle(wait, now).outcome != WaitOutcome.WAITING


def schedule_retry(execution, trace) -> Wait:
    """The code raised: its next try after the backoff, as a stored wait the tick ends, with a
    ``workflow_retrying`` event (the traceback, the try, when it comes)."""
    tries = Wait.objects.filter(execution_id=execution.pk, kind=WaitKind.RETRY).count() + 1
    delay = policy.workflow_retry_delay(tries)
    wait = waits.open_wait(execution, f"retry#{tries}", WaitKind.RETRY, timeout=delay)
    record_event(execution.pk, EventType.WORKFLOW_RETRYING,
                 f"the workflow code raised; it runs again in {delay:g}s (retry {tries})",
                 {"traceback": values.clean_text(trace), "retry": tries, "delay": delay, "next_try_at": wait.deadline.isoformat()})
    return wait


def skip_backoff(execution):
    """Resume: a try that waits for its backoff runs now."""
    for wait in Wait.objects.filter(execution_id=execution.pk, kind=WaitKind.RETRY, outcome=WaitOutcome.WAITING):
        waits.cancel(wait)
