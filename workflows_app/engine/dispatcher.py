"""The dispatcher: one run of ``advance(execution_id)`` on a manager.

It takes the execution's row lock (one advancer at a time, on any manager), starts a pending
execution, applies the failure mode while a step's failure is unhandled, runs the workflow
function with durable replay until it returns or suspends, and ends the execution — cancelling
every operation that is not terminal first, and only then writing the terminal event.
"""

import logging
import traceback

from django.db import transaction
from django.utils import timezone

from workflows_app import outages
from workflows_app.engine import failures, policy, stopping
from workflows_app.engine.context import WorkflowCancelled, WorkflowContext, WorkflowFailed
from workflows_app.engine.handles import Suspend
from workflows_app.engine.steps import cancel_in_states
from workflows_app.errors import RegistrationError, StepFailed
from workflows_app.models import Execution, Operation
from workflows_app.registry import get_workflow
from workflows_app.states import (
    EXECUTION_CANCELLING,
    OPERATION_ACTIVE,
    ExecutionStatus,
    FailureMode,
)
from workflows_app.transitions import execution_transition

logger = logging.getLogger(__name__)


def advance(execution_id):
    with transaction.atomic():
        execution = Execution.objects.select_for_update(no_key=True).filter(pk=execution_id).first()
        if execution is None:
            logger.warning("advance: execution %s does not exist", execution_id)
            return
        if execution.status == ExecutionStatus.PENDING:
            execution_transition(execution, ExecutionStatus.STARTED, renew_token=True)
        if execution.status == ExecutionStatus.STARTED:
            _run(execution)
        elif execution.status in EXECUTION_CANCELLING:
            stopping.carry_on(execution)
        # terminal or queued: nothing to do (a cancelled one never runs)


def _run(execution):
    operations = list(Operation.objects.filter(execution_id=execution.pk))
    now = timezone.now()
    if policy.timeout_due(execution, now):
        return end(execution, ExecutionStatus.TIMED_OUT, f"the execution's timeout of {execution.timeout}s passed")
    if failures.before_replay(execution, operations, now):
        return  # running steps are awaited before the code sees the failure
    try:
        definition = get_workflow(execution.workflow_id)
    except RegistrationError as exc:
        return end(execution, ExecutionStatus.FAILED, str(exc))
    retries = definition.on_unhandled == "retry"
    if retries and not failures.retry_due(execution, now):
        return  # the code raised: its next try waits for its backoff, which the tick ends

    ctx = WorkflowContext(execution, operations)
    raised, trace = None, ""
    try:
        definition.func(ctx, **execution.parameters)
    except Suspend as exc:
        raised = exc
    except Exception as exc:
        if outages.is_outage(exc):
            raise  # the database went away under the code, which did nothing wrong: the pass runs again
        raised, trace = exc, traceback.format_exc()
    _conclude(execution, ctx, raised, trace, retries)


def _conclude(execution, ctx, raised, trace, retries):
    """What the function's run (or replay) leads to. The payload it set is kept in every case."""
    _save_payload(execution, ctx)
    if ctx._nondeterminism is not None:  # even if the code caught it
        return end(execution, ExecutionStatus.FAILED, str(ctx._nondeterminism))
    if raised is None or isinstance(raised, Suspend):
        return _settle(execution, ctx, suspended=raised is not None)
    if isinstance(raised, WorkflowCancelled):
        return end(execution, ExecutionStatus.CANCELLED, str(raised) or "cancelled by the workflow")
    if isinstance(raised, WorkflowFailed):
        return end(execution, ExecutionStatus.FAILED, str(raised))
    if isinstance(raised, StepFailed):  # a step's failure the code did not catch: never retried
        return end(execution, ExecutionStatus.FAILED, failures.describe(execution, raised.step))
    if retries:
        return failures.schedule_retry(execution, trace)
    end(execution, ExecutionStatus.FAILED, f"the workflow function raised:\n{trace}")


def _settle(execution, ctx, *, suspended):
    """The function returned or suspended: what it showed and went on past is handled; a
    failure it never saw fails the execution — at once in no_new_calls and fail_fast (that
    replay was its chance), at its end in continue_while_possible (the rest runs on)."""
    failures.record_handled(execution, ctx)
    unseen = ctx._unhandled_failures()
    if unseen and not (suspended and execution.failure_mode == FailureMode.CONTINUE_WHILE_POSSIBLE):
        first = failures.earliest([ctx._operations[name] for name in unseen])
        return end(execution, ExecutionStatus.FAILED, failures.describe(execution, first.name))
    if not suspended:
        end(execution, ExecutionStatus.COMPLETED)


def _save_payload(execution, ctx):
    if ctx._payload_changed:
        Execution.objects.filter(pk=execution.pk).update(payload=execution.payload)


def end(execution, status, error=""):
    """Cancel first, terminate after: every operation that is not terminal gets its terminal
    state and event (running ones are asked to stop: SIGTERM, then SIGKILL after
    KILL_GRACE_SECONDS), then the execution its terminal status and event."""
    cancel_in_states(execution, OPERATION_ACTIVE, f"the execution ends {status}")
    fields = {"error": error} if error else {}
    # The dispatcher's fence: only while the token it read is current (a kill or resume renews it).
    fence = execution.token_hash or None
    if status == ExecutionStatus.CANCELLED and execution.status == ExecutionStatus.STARTED:
        execution_transition(execution, ExecutionStatus.CANCELLING, message=error, fence=fence)
    execution_transition(execution, status, fence=fence, **fields)
