"""The dispatcher: one run of ``advance(execution_id)`` on a manager.

It takes the execution's row lock (one advancer at a time, on any manager), starts a pending
execution, applies the failure mode when an operation has failed, runs the workflow function
with durable replay until it returns or suspends, and ends the execution — cancelling every
operation that is not terminal first, and only then writing the terminal event.
"""

import logging
import traceback
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from workflows_app.engine import progress, stopping
from workflows_app.engine.context import Suspend, WorkflowCancelled, WorkflowContext, WorkflowFailed
from workflows_app.errors import RegistrationError, StepFailed
from workflows_app.models import Execution, Operation
from workflows_app.registry import get_workflow
from workflows_app.states import (
    EXECUTION_CANCELLING,
    OPERATION_ACTIVE,
    OPERATION_NOT_STARTED,
    ExecutionStatus,
    FailureMode,
    OperationState,
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
    if progress.timeout_due(execution, now):
        return end(execution, ExecutionStatus.TIMED_OUT, f"the execution's timeout of {execution.timeout}s passed")

    failed = sorted((op for op in operations if op.state == OperationState.FAILED), key=lambda op: op.failed_at)
    if failed and execution.failure_mode != FailureMode.CONTINUE_WHILE_POSSIBLE:
        return _stop_after_failure(execution, failed[0], now)

    try:
        definition = get_workflow(execution.workflow_id)
    except RegistrationError as exc:
        return end(execution, ExecutionStatus.FAILED, str(exc))
    ctx = WorkflowContext(execution, operations)
    try:
        definition.func(ctx, **execution.parameters)
    except Suspend:
        _save_payload(execution, ctx)
        return
    except WorkflowFailed as exc:
        _save_payload(execution, ctx)
        return end(execution, ExecutionStatus.FAILED, str(exc))
    except WorkflowCancelled as exc:
        _save_payload(execution, ctx)
        return end(execution, ExecutionStatus.CANCELLED, str(exc) or "cancelled by the workflow")
    except StepFailed as exc:
        _save_payload(execution, ctx)
        return end(execution, ExecutionStatus.FAILED, _failure_text(execution, exc.step, traceback.format_exc()))
    except Exception:
        _save_payload(execution, ctx)
        return end(execution, ExecutionStatus.FAILED, f"the workflow function raised:\n{traceback.format_exc()}")
    _save_payload(execution, ctx)
    end(execution, ExecutionStatus.COMPLETED)


def _stop_after_failure(execution, first_failure, now):
    """no_new_calls: nothing new starts, running operations are awaited (at most
    wait_after_fail); fail_fast: running operations are cancelled at once. Then failed."""
    progress.cancel_operations(execution, OPERATION_NOT_STARTED, f"not started: {first_failure.name} failed")
    waited_enough = first_failure.failed_at + timedelta(seconds=execution.wait_after_fail) <= now
    if execution.failure_mode == FailureMode.FAIL_FAST or waited_enough:
        reason = "fail_fast" if execution.failure_mode == FailureMode.FAIL_FAST else "wait_after_fail ran out"
        progress.cancel_operations(execution, [OperationState.STARTED], f"cancelled ({reason}): {first_failure.name} failed")
    if Operation.objects.filter(execution_id=execution.pk, state__in=OPERATION_ACTIVE).exists():
        return  # a running operation's end wakes the execution again; the tick watches wait_after_fail
    end(execution, ExecutionStatus.FAILED, _failure_text(execution, first_failure.name))


def _failure_text(execution, step, trace=""):
    operation = Operation.objects.filter(execution_id=execution.pk, name=step).first()
    error = (operation.error or {}) if operation else {}
    text = f"operation {step!r} failed: {error.get('type', '')}: {error.get('message', '')}".rstrip(": ")
    if error.get("traceback"):
        text += "\n" + error["traceback"]
    return text


def _save_payload(execution, ctx):
    if ctx._payload_changed:
        Execution.objects.filter(pk=execution.pk).update(payload=execution.payload)


def end(execution, status, error=""):
    """Cancel first, terminate after: every operation that is not terminal gets its terminal
    state and event (running ones are asked to stop: SIGTERM, then SIGKILL after
    KILL_GRACE_SECONDS), then the execution its terminal status and event."""
    progress.cancel_operations(execution, OPERATION_ACTIVE, f"the execution ends {status}")
    fields = {"error": error} if error else {}
    # The dispatcher's fence: only while the token it read is current (a kill or resume renews it).
    fence = execution.token_hash or None
    if status == ExecutionStatus.CANCELLED and execution.status == ExecutionStatus.STARTED:
        execution_transition(execution, ExecutionStatus.CANCELLING, message=error, fence=fence)
    execution_transition(execution, status, fence=fence, **fields)
