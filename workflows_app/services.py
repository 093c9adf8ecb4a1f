"""The public operations on executions, used by every entry point (API, admin, commands).

Each returns the execution as it left it; a refused action raises ``ActionRefused`` (nothing
changed) and an unknown id ``Execution.DoesNotExist``.
"""

from django.db import transaction

from workflows_app import dispatch
from workflows_app.conf import workflows_settings
from workflows_app.engine import progress, stopping
from workflows_app.errors import ActionRefused, ParameterError
from workflows_app.models import Event, Execution
from workflows_app.registry import get_workflow
from workflows_app.states import (
    EXECUTION_TERMINAL,
    EXECUTION_TRANSITIONS,
    EXECUTION_WAITING,
    EventType,
    ExecutionStatus,
    FailureMode,
)
from workflows_app.transitions import execution_transition


def start(workflow_id, parameters=None, *, deployment_id=None, failure_mode=None, timeout=None,
          wait_after_fail=None, dry_run=False, created_by="") -> Execution:
    """Create an execution (``pending``) and, once committed, send it to a manager.

    Raises ``RegistrationError`` for an unknown workflow and ``ParameterError`` for
    parameters that do not fit it.
    """
    definition = get_workflow(workflow_id)
    parameters = {} if parameters is None else parameters
    definition.check_parameters(parameters)
    failure_mode = failure_mode or definition.failure_mode or workflows_settings.FAILURE_MODE
    if failure_mode not in FailureMode.values:
        raise ParameterError(f"failure_mode must be one of {FailureMode.values}, not {failure_mode!r}")
    with transaction.atomic():
        execution = Execution.objects.create(
            workflow_id=definition.name,
            parameters=parameters,
            deployment_id=deployment_id,
            failure_mode=failure_mode,
            timeout=timeout if timeout is not None else definition.timeout,
            wait_after_fail=wait_after_fail if wait_after_fail is not None else workflows_settings.WAIT_AFTER_FAIL,
            is_dry_run=dry_run,
            created_by=created_by,
        )
        Event.objects.create(execution=execution, type=EventType.LOG, message=f"created: {definition.name}",
                             data={"parameters": parameters})
        transaction.on_commit(lambda: dispatch.send_advance(execution.pk))
    return execution


def cancel(execution_id) -> Execution:
    """Cancel: ``cancelling``; nothing new starts, operations not started are cancelled, running
    ones see ``ctx.is_cancelled()`` and are awaited; then ``cancelled``. A ``pending`` or
    ``queued`` execution ends ``cancelled`` at once."""
    return _stop(execution_id, "cancel", ExecutionStatus.CANCELLING)


def force_cancel(execution_id) -> Execution:
    """Force-cancel: ``cancelled`` at once; every operation not terminal is cancelled without
    waiting for it (its processes are not signalled; what it reports later is a stale report)."""
    return _stop(execution_id, "force-cancel", ExecutionStatus.FORCE_CANCELLING)


def kill(execution_id) -> Execution:
    """Kill: ``kill_cancelling``; the dispatcher and the process group of every running operation,
    on every agent, get SIGTERM, then SIGKILL after KILL_GRACE_SECONDS; operations end
    ``cancelled`` (error "killed"); then ``cancelled``. Allowed from any status: on a terminal
    execution it only stops the processes of leftover operations, and the status stays."""
    execution = Execution.objects.get(pk=execution_id)
    if execution.status in EXECUTION_TERMINAL:
        progress.stop_attempts(execution.pk, stopping.leftover_attempts(execution), dispatcher=True)
        return execution
    # A dispatcher running the workflow function holds the row lock (an execution it is starting
    # still reads pending from outside): it is stopped first, which lets the lock go — its
    # transaction rolls back, and its redelivered message finds the execution cancelled.
    dispatch.broadcast_kill(execution.pk, dispatcher=True)
    with transaction.atomic():
        execution = _locked(execution_id)
        if execution.status in EXECUTION_WAITING:
            return execution_transition(execution, ExecutionStatus.CANCELLED, message="kill: cancelled before it started")
        if execution.status in EXECUTION_TERMINAL:  # it ended while we waited for the lock
            progress.stop_attempts(execution.pk, stopping.leftover_attempts(execution))
            return execution
        if execution.status != ExecutionStatus.KILL_CANCELLING:
            execution_transition(execution, ExecutionStatus.KILL_CANCELLING, renew_token=True, message="kill requested")
        stopping.carry_on(execution)
    return execution


def _stop(execution_id, action, target) -> Execution:
    with transaction.atomic():
        execution = _locked(execution_id)
        status = ExecutionStatus(execution.status)
        if status in EXECUTION_WAITING:
            return execution_transition(execution, ExecutionStatus.CANCELLED, message=f"{action}: cancelled before it started")
        if target not in EXECUTION_TRANSITIONS[status]:
            allowed = sorted(EXECUTION_WAITING) + sorted(s for s, targets in EXECUTION_TRANSITIONS.items() if target in targets)
            raise ActionRefused(action, execution.pk, status, allowed)
        execution_transition(execution, target, message=f"{action} requested")
        stopping.carry_on(execution)
    return execution


def _locked(execution_id) -> Execution:
    """The execution, its row locked until the transaction ends (one writer at a time)."""
    return Execution.objects.select_for_update().get(pk=execution_id)
