"""Stopping an execution: what cancel, force-cancel and kill do once asked.

The services (``workflows_app.services``) decide whether the action is allowed; :func:`stop`
moves the execution into ``cancelling``, ``force_cancelling`` or ``kill_cancelling`` and calls
:func:`carry_on` in the same transaction. The dispatcher calls :func:`carry_on` again whenever it is woken for a stopping execution — an operation of a
cancelling execution ended, or a manager started and carries on every execution it finds
stopping — so a stop interrupted by a crash is finished by whoever comes next.

Every function here runs under the execution's row lock. Operations always get their terminal
state and event before the execution its terminal one (cancel first, terminate after).

Across a tree of executions a stop goes down: the parent's row is locked first, then
each child's, so a parent and a child never wait for each other's locks. A step whose child is
active is cancelled only once that child has stopped (:func:`stop_child`, from
``steps.cancel``), and a cancelling parent cancels its children and waits for them
(:func:`cancel_children`).
"""

from datetime import timedelta

from django.db.models import Max
from django.utils import timezone

from workflows_app import dispatch
from workflows_app.conf import workflows_settings
from workflows_app.engine import progress, steps
from workflows_app.models import Event, Execution, Operation
from workflows_app.states import (
    EXECUTION_ACTIVE,
    EXECUTION_CANCELLING,
    EXECUTION_TERMINAL,
    EXECUTION_TRANSITIONS,
    EXECUTION_WAITING,
    OPERATION_ACTIVE,
    OPERATION_NOT_STARTED,
    EventType,
    ExecutionStatus,
    OperationState,
    StepKind,
)
from workflows_app.transitions import execution_transition

#: The error of an operation a kill stopped: they end cancelled with error "killed".
KILLED = {"type": "Killed", "message": "killed", "traceback": ""}


def stop(execution, target, action):
    """What cancel, force-cancel and kill do once allowed (``target``: ``cancelling``,
    ``force_cancelling`` or ``kill_cancelling``; ``action`` names it in the events): one not
    started yet is ``cancelled`` at once; an active one moves to ``target`` — a kill with a new
    token, which its dispatcher no longer holds — unless it is past it already, and the stop is
    carried on. Returns the execution."""
    status = ExecutionStatus(execution.status)
    if status in EXECUTION_WAITING:
        return execution_transition(execution, ExecutionStatus.CANCELLED, message=f"{action}: cancelled before it started")
    if status in EXECUTION_TERMINAL:
        return execution
    if target in EXECUTION_TRANSITIONS[status]:
        execution_transition(execution, target, renew_token=target == ExecutionStatus.KILL_CANCELLING,
                             message=f"{action} requested")
    carry_on(execution)
    return execution


def carry_on(execution):
    """Move a stopping execution on: as far as it can go now, to ``cancelled`` when it may."""
    if execution.status == ExecutionStatus.CANCELLING:
        if cancel_timed_out(execution):
            execution_transition(execution, ExecutionStatus.KILL_CANCELLING, renew_token=True,
                                 message=f"still cancelling after CANCEL_TIMEOUT ({workflows_settings.CANCEL_TIMEOUT}s): killed")
        else:
            return _cancel(execution)
    if execution.status == ExecutionStatus.FORCE_CANCELLING:
        return _force_cancel(execution)
    if execution.status == ExecutionStatus.KILL_CANCELLING:
        return _kill(execution)


def _cancel(execution):
    """Nothing new starts; what has not started is cancelled; running operations are awaited
    (they see ``ctx.is_cancelled()``); once none runs, ``cancelled``."""
    steps.cancel_in_states(execution, OPERATION_NOT_STARTED, "cancelled: the execution is cancelling")
    cancel_children(execution)
    running = list(Operation.objects.filter(execution_id=execution.pk, state__in=OPERATION_ACTIVE, kind=StepKind.OPERATION)
                   .values_list("pk", "attempt"))
    if running:
        steps.ask_to_stop(running)  # again on every pass: a worker that missed the last ask hears this one
    elif not Operation.objects.filter(execution_id=execution.pk, state__in=OPERATION_ACTIVE).exists():
        execution_transition(execution, ExecutionStatus.CANCELLED, message="cancelled: no operation runs any more")


def _force_cancel(execution):
    """Every operation that is not terminal is cancelled at once, running or not, without
    signalling its processes; what they report later is kept as ``stale_report``."""
    steps.cancel_in_states(execution, OPERATION_ACTIVE, "cancelled: the execution was force-cancelled",
                           stop_processes=False)
    execution_transition(execution, ExecutionStatus.CANCELLED, message="force-cancelled")


def _kill(execution):
    """Operations end ``cancelled`` (running ones with error "killed"); the process groups of
    every attempt of the execution that may still run — including ones a force-cancel left
    running — get SIGTERM, then SIGKILL after KILL_GRACE_SECONDS, on every agent."""
    steps.cancel_in_states(execution, OPERATION_NOT_STARTED, "cancelled: the execution was killed")
    steps.cancel_in_states(execution, [OperationState.STARTED], "killed", error=KILLED, stop_processes=False)
    steps.stop_attempts(execution.pk, leftover_attempts(execution))
    execution_transition(execution, ExecutionStatus.CANCELLED, message="killed")


def leftover_attempts(execution):
    """(operation id, attempt) of every current attempt of the execution that started and did
    not succeed: whatever of them still runs somewhere is to be stopped."""
    started = Operation.objects.filter(execution_id=execution.pk, kind=StepKind.OPERATION, started_at__isnull=False)
    return list(started.exclude(state=OperationState.SUCCEEDED).values_list("pk", "attempt"))


def stop_child(parent, step):
    """Before ``step`` of ``parent`` is cancelled: its child, if it has one that is active, is
    killed (as a running step's processes are) — force-cancelled when the parent is being
    force-cancelled — its own children first."""
    child = Execution.objects.filter(parent_id=parent.pk, parent_step=step.name).only("pk", "status").first()
    if child is None or child.status in EXECUTION_TERMINAL:
        return
    if parent.status == ExecutionStatus.FORCE_CANCELLING:
        target, action = ExecutionStatus.FORCE_CANCELLING, "force-cancel"
    else:
        # Its dispatcher may hold its row lock while it runs the workflow code: stopped first, as
        # a kill of it from outside does (``services.kill``).
        dispatch.broadcast_kill(child.pk, dispatcher=True)
        target, action = ExecutionStatus.KILL_CANCELLING, "kill"
    stop(progress.lock_execution(child.pk), target, f"{action} with its parent's step {step.name}")


def cancel_children(parent):
    """A parent being cancelled cancels each child that is active and not stopping yet, and
    waits for them as for its running steps: the end of each wakes it."""
    for pk in (Execution.objects.filter(parent_id=parent.pk, status__in=EXECUTION_ACTIVE - EXECUTION_CANCELLING)
               .values_list("pk", flat=True)):
        stop(progress.lock_execution(pk), ExecutionStatus.CANCELLING, "cancel with its parent")


def cancelling_since(execution):
    """When the execution last started cancelling (its latest ``workflow_cancelling`` event)."""
    return (Event.objects.filter(execution_id=execution.pk, type=EventType.WORKFLOW_CANCELLING)
            .aggregate(since=Max("timestamp"))["since"])


def cancel_timed_out(execution, now=None) -> bool:
    since = cancelling_since(execution)
    limit = timedelta(seconds=workflows_settings.CANCEL_TIMEOUT)
    return since is not None and since + limit <= (now or timezone.now())
