"""Stopping: an execution (what cancel, force-cancel and kill do once asked), its steps and
the processes of their attempts.

:func:`cancel` is the one way a step is cancelled, whoever asks: ``ctx.cancel_step``, a
failure mode, a stop, the end of the execution; :func:`stop_attempts` the one way the processes
of attempts are stopped.

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
:func:`cancel`), and a cancelling parent cancels its children and waits for them
(:func:`cancel_children`).
"""

from datetime import timedelta

from django.db import transaction
from django.db.models import Max

from workflows_app import broker, clock
from workflows_app.conf import workflows_settings
from workflows_app.engine import grants, progress
from workflows_app.errors import TransitionRefused, WorkflowError
from workflows_app.models import Event, Execution, Operation, OperationDependency
from workflows_app.models.operation import task_id_for
from workflows_app.states import (
    EXECUTION_ACTIVE,
    EXECUTION_CANCELLING,
    EXECUTION_TERMINAL,
    EXECUTION_TRANSITIONS,
    EXECUTION_WAITING,
    OPERATION_ACTIVE,
    OPERATION_AT_AGENT,
    OPERATION_NOT_STARTED,
    EventType,
    ExecutionStatus,
    OperationState,
    StepKind,
)
from workflows_app.transitions import execution_transition, lock_operations, operation_transition

#: How often a cancel reads a step again that an agent moved on meanwhile (sent -> started).
CANCEL_TRIES = 3

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
    cancel_in_states(execution, OPERATION_NOT_STARTED, "cancelled: the execution is cancelling")
    cancel_children(execution)
    running = list(Operation.objects.filter(execution_id=execution.pk, state__in=OPERATION_ACTIVE, kind=StepKind.OPERATION)
                   .values_list("pk", "attempt"))
    if running:
        ask_to_stop(running)  # again on every pass: a worker that missed the last ask hears this one
    elif not Operation.objects.filter(execution_id=execution.pk, state__in=OPERATION_ACTIVE).exists() \
            and not grants.holds_end(execution):
        execution_transition(execution, ExecutionStatus.CANCELLED, message="cancelled: no operation runs any more")


def _force_cancel(execution):
    """Every operation that is not terminal is cancelled at once, running or not, without
    signalling its processes; what they report later is kept as ``stale_report``."""
    cancel_in_states(execution, OPERATION_ACTIVE, "cancelled: the execution was force-cancelled",
                     stop_processes=False)
    if not grants.holds_end(execution):
        execution_transition(execution, ExecutionStatus.CANCELLED, message="force-cancelled")


def _kill(execution):
    """Operations end ``cancelled`` (running ones with error "killed"); the process groups of
    every attempt of the execution that may still run — including ones a force-cancel left
    running — get SIGTERM, then SIGKILL after KILL_GRACE_SECONDS, on every agent."""
    cancel_in_states(execution, OPERATION_NOT_STARTED, "cancelled: the execution was killed")
    cancel_in_states(execution, [OperationState.STARTED], "killed", error=KILLED, stop_processes=False)
    stop_attempts(execution.pk, leftover_attempts(execution))
    if not grants.holds_end(execution):
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
        broker.broadcast_kill(child.pk, dispatcher=True)
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
    return since is not None and since + limit <= (now or clock.now())


# --- steps ---------------------------------------------------------------------------------

def cancelled_error(message, cause=None):
    """The error a step cancelled by the engine keeps; ``cause``: the step whose failure (or
    cancel) it follows from, which the workflow code then sees as ``StepFailed.cause``."""
    error = {"type": "Cancelled", "message": message, "traceback": ""}
    if cause is not None:
        error["cause"] = cause
    return error


def cancel(execution, operations, message, *, error=None, stop_processes=True, dependents=False, known=None):
    """Cancel first, terminate after, for each of ``operations`` not terminal yet:
    ``cancelled`` with its event and ``error`` (default: :func:`cancelled_error`). The message of
    one not started is revoked (fencing refuses it anyway); one that was running is asked to
    stop — SIGTERM to its process group on every agent, SIGKILL after KILL_GRACE_SECONDS — once
    this commits (the child execution of a step is stopped first: :func:`stop_child`),
    unless ``stop_processes`` is false (force-cancel: what it reports later is kept
    as a ``stale_report`` event). With ``dependents``, the steps that wait for a cancelled one
    (directly or not) can never start and are cancelled too (``known``: as for
    :func:`cancel_dependents`). Returns those it cancelled."""
    error = error or cancelled_error(message)
    running, unsent, cancelled = [], [], []
    operations = list(operations)
    grants.ask_to_stop(operations)  # a granted one may have started unasked: its agent says
    lock_operations(op for op in operations if not op.is_terminal)  # then moved in step order
    for operation in operations:
        if operation.kind == StepKind.WORKFLOW and not operation.is_terminal:
            stop_child(execution, operation)  # a reset step (resume) may have a running child
        was = _cancel_one(operation, message, error)
        if was is None:
            continue  # it ended meanwhile: its own terminal event stands
        cancelled.append(operation)
        if was == OperationState.STARTED and operation.kind == StepKind.OPERATION:
            running.append(operation)
        elif was in (OperationState.SENDING, OperationState.SENT):
            unsent.append(operation)
    if unsent:
        task_ids = [op.task_id for op in unsent]
        transaction.on_commit(lambda: broker.revoke(task_ids))
    if running:
        ask_to_stop([(op.pk, op.attempt) for op in running])
    if running and stop_processes:
        stop_attempts(execution.pk, [(op.pk, op.attempt) for op in running])
    if dependents and cancelled:
        cancel_dependents(execution, cancelled, known)
    return cancelled


def cancel_in_states(execution, states, message, **options):
    """:func:`cancel` for every operation of the execution in one of ``states`` — but those an
    agent answers that it started unasked (``grants.ask_to_stop``), which are ``started`` now,
    when ``started`` is not one of ``states``: they are left to what the caller does with started ones."""
    operations = list(Operation.objects.filter(execution_id=execution.pk, state__in=states))
    started = grants.ask_to_stop(operations)
    if started and OperationState.STARTED not in states:
        operations = [op for op in operations if op not in started]
    return cancel(execution, operations, message, **options)


def _cancel_one(operation, message, error):
    """The state it was cancelled from, or None when it had ended. An agent may move it on while
    we look (sent -> started): then it is read again and cancelled from its new state."""
    for _ in range(CANCEL_TRIES):
        if operation.is_terminal:
            return None
        was = OperationState(operation.state)
        # Only an attempt cancelled at its agent keeps its grant: it may still start there.
        grant = {} if was in OPERATION_AT_AGENT else {"granted_until": None}
        try:
            operation_transition(operation, OperationState.CANCELLED, message=message, error=error, **grant)
            return was
        except TransitionRefused:
            operation.refresh_from_db(fields=["state", "attempt"])
    raise WorkflowError(f"step {operation.name!r} kept changing state; not cancelled")


def cancel_dependents(execution, roots, known=None):
    """Every pending step that waits, directly or not, for one of ``roots`` (steps that failed
    or were cancelled) can never start: ``cancelled``, naming its root as the cause. ``known``:
    the rows a replay holds (name -> operation), updated in place, so that it sees the cancels."""
    held = {op.pk: op for op in (known or {}).values()}
    cause = {op.pk: op for op in roots}
    while cause:
        edges = (OperationDependency.objects.filter(depends_on_id__in=cause, operation__state=OperationState.PENDING)
                 .values_list("operation_id", "depends_on_id"))
        root_of = {pk: cause[dep] for pk, dep in edges}
        following = {}
        missing = [pk for pk in root_of if pk not in held]
        loaded = list(Operation.objects.filter(pk__in=missing)) if missing else []
        for dependent in [held[pk] for pk in root_of if pk in held] + loaded:
            root = root_of[dependent.pk]
            why = "failed" if root.state == OperationState.FAILED else "was cancelled"
            message = f"not started: {root.name} {why}"
            if cancel(execution, [dependent], message, error=cancelled_error(message, root.name)):
                following[dependent.pk] = root
        cause = following


def ask_to_stop(attempts):
    """Once this commits: ``ctx.is_cancelled()`` becomes true in the processes running
    ``attempts`` (pairs of operation id and attempt), on whichever agent runs them."""
    attempts = list(attempts)
    if attempts:
        transaction.on_commit(lambda: broker.broadcast_cancel(attempts))


def stop_attempts(execution_id, attempts, *, dispatcher=False):
    """Once this commits: SIGTERM the process groups running ``attempts`` (and the execution's
    dispatcher), SIGKILL after KILL_GRACE_SECONDS, and revoke their Celery tasks."""
    attempts = list(attempts)

    def stop():
        broker.broadcast_kill(execution_id, attempts, dispatcher=dispatcher)
        broker.revoke([task_id_for(pk, attempt) for pk, attempt in attempts], terminate=True)

    transaction.on_commit(stop)
