"""The public operations on executions, used by every entry point (API, admin, commands).

Each returns the execution as it left it; a refused action raises ``ActionRefused`` (nothing
changed) and an unknown id ``Execution.DoesNotExist``. Each takes the ``user`` it acts for and
raises ``PermissionRefused`` (nothing changed) when that user may not (``workflows_app.permissions``);
``user=None``, the default, is the server's own access (the commands, the engine).
"""


from django.db import DatabaseError, transaction

from workflows_app import broker, permissions, values
from workflows_app.engine import reruns, resuming, starts, stopping, waits
from workflows_app.errors import ActionRefused, ParameterError, WorkflowActionRefused
from workflows_app.flow import idempotency
from workflows_app.models import Event, Execution, PausedWorkflow
from workflows_app.pausing import executions as pausing
from workflows_app.pausing import workflows as workflow_pausing
from workflows_app.registry import get_workflow
from workflows_app.states import (
    EXECUTION_FORCE_RESUMABLE,
    EXECUTION_RESUMABLE,
    EXECUTION_TERMINAL,
    EXECUTION_TRANSITIONS,
    EXECUTION_WAITING,
    OPERATION_FORCE_RESUMABLE,
    OPERATION_RESUMABLE,
    EventType,
    ExecutionStatus,
)
from workflows_app.transitions import record_event


def start(workflow_id, parameters=None, *, deployment_id=None, failure_mode=None, timeout=None,
          wait_after_fail=None, dry_run=False, created_by="", queue=False, force=False, run_after=None, priority=0,
          user=None, idempotency_key=None) -> Execution:
    """Create an execution (``pending``) and, once committed, send it to a manager — at
    ``run_after`` when that is later (a deferred start; the managers' tick sends it then).
    ``priority`` (-100 to 100): its operations go ahead of lower ones waiting in their agents' queues.

    A ``deployment_id`` that has an active execution refuses a new one
    (``ExistingRunningExecution``) unless ``queue`` (it waits ``queued`` and starts when the
    deployment is free, in order) or ``force`` (it runs beside the other).
    Raises ``RegistrationError`` for an unknown workflow and ``ParameterError`` for
    parameters that do not fit it. ``created_by`` defaults to the user's name.

    ``idempotency_key`` (``workflows_app.flow.idempotency``): the user's key of this start. The
    same key with the same request, within ``WORKFLOWS["IDEMPOTENCY_SECONDS"]``, starts nothing
    and returns the execution the first start with it started; with another request it raises
    ``IdempotencyConflict`` (a ``ValueRefused`` for a key that cannot be one). The execution
    returned says which: ``idempotent_replay`` is True for one started earlier, False for one
    this call started (with or without a key).
    """
    permissions.check(user, "start", workflow_id, target=f"workflow {str(workflow_id)[:100]!r}")
    if not created_by and user is not None:
        created_by = user.get_username()
    execution, created = starts.build(workflow_id, parameters, deployment_id=deployment_id, failure_mode=failure_mode,
                                      timeout=timeout, wait_after_fail=wait_after_fail, dry_run=dry_run,
                                      created_by=created_by, run_after=run_after, priority=priority)
    claim = idempotency.claim_for(user, idempotency_key, {
        "start": "start", "workflow_id": workflow_id, "parameters": {} if parameters is None else parameters,
        "deployment_id": deployment_id, "failure_mode": failure_mode, "timeout": _number(timeout),
        "wait_after_fail": _number(wait_after_fail), "dry_run": bool(dry_run), "queue": bool(queue),
        "force": bool(force), "run_after": run_after, "priority": priority})
    if claim is None:
        return _replayed(starts.create(execution, created, queue=queue, force=force), False)
    earlier = idempotency.earlier(claim)
    if earlier is not None:
        return _replayed(earlier, True)
    with transaction.atomic():  # the key and the execution: both or neither
        earlier = idempotency.take(claim, execution)
        if earlier is not None:
            return _replayed(earlier, True)
        return _replayed(starts.create(execution, created, queue=queue, force=force), False)


def rerun(execution_id, from_step, parameters=None, *, workflow_id=None, deployment_id=None, failure_mode=None,
          timeout=None, wait_after_fail=None, dry_run=False, created_by="", queue=False, force=False,
          user=None, idempotency_key=None) -> Execution:
    """Run an execution again from its step ``from_step``: a new execution of the same workflow,
    ``rerun_of`` the original, whose steps that succeeded keep their stored results and do not run
    again — all but ``from_step`` and what followed from it (``engine.reruns``). ``parameters``,
    the deployment, the failure mode and the timeouts are the original's unless given; it is a
    dry run if the original was or ``dry_run`` says so; ``queue`` and ``force`` as for a start;
    ``idempotency_key`` as for a start (a rerun is a start: the same key with the same rerun
    returns the rerun it started first).

    The user must be able to view the original and start its workflow. Raises
    ``Execution.DoesNotExist``, ``PermissionRefused``, ``ParameterError`` (a step the original
    does not have, parameters that do not fit, a ``workflow_id`` given that is not the
    original's), ``ExistingRunningExecution`` as a start does."""
    original = _check(user, "view", Execution.objects.get(pk=execution_id))
    permissions.check(user, "start", original.workflow_id, target=f"workflow {original.workflow_id[:100]!r}")
    if workflow_id is not None and workflow_id != original.workflow_id:
        raise ParameterError(f"execution {original.pk} is of the workflow {original.workflow_id!r}, "
                             f"not {str(workflow_id)[:100]!r}: a rerun runs the original's workflow")
    if not isinstance(from_step, str) or not from_step:
        raise ParameterError(f"from_step is the name of a step of execution {original.pk}, not {from_step!r}")
    kept = reruns.plan(original, from_step)  # before anything is stored: a step it does not have is refused
    if not created_by and user is not None:
        created_by = user.get_username()
    claim = idempotency.claim_for(user, idempotency_key, {
        "start": "rerun", "rerun_of": str(original.pk), "from_step": from_step, "parameters": parameters,
        "deployment_id": deployment_id, "failure_mode": failure_mode, "timeout": _number(timeout),
        "wait_after_fail": _number(wait_after_fail), "dry_run": bool(dry_run), "queue": bool(queue),
        "force": bool(force)})
    if claim is not None:
        earlier = idempotency.earlier(claim)
        if earlier is not None:
            return _replayed(earlier, True)
    with transaction.atomic():
        execution, created = starts.build(
            original.workflow_id, original.parameters if parameters is None else parameters,
            deployment_id=original.deployment_id if deployment_id is None else deployment_id,
            failure_mode=failure_mode or original.failure_mode,
            timeout=original.timeout if timeout is None else timeout,
            wait_after_fail=original.wait_after_fail if wait_after_fail is None else wait_after_fail,
            dry_run=dry_run or original.is_dry_run, created_by=created_by, rerun_of=original, rerun_from=from_step)
        earlier = None if claim is None else idempotency.take(claim, execution)
        if earlier is not None:
            return _replayed(earlier, True)
        execution = starts.create(execution, created, queue=queue, force=force)
        reruns.keep(execution, kept)
    return _replayed(execution, False)


def send_event(execution_id, name, payload=None, *, user=None) -> Event:
    """Deliver the external event ``name`` to an execution (``POST .../events``, ``manage.py
    send_event``): stored as an ``event_received`` event with data ``{"name", "payload"}`` and,
    once committed, the execution is woken. The event is kept until a wait for ``name`` takes it
    (``ctx.await_event``; the oldest first), so one sent before the workflow waits is not lost.

    Raises ``ParameterError`` for a name that is not a non-empty string (at most 255 characters),
    ``ValueRefused`` for a payload that may not be stored, and ``ActionRefused`` once the
    execution has ended.
    """
    try:
        waits.check_name(name)
    except (TypeError, ValueError) as exc:
        raise ParameterError(str(exc)) from None
    values.check(payload, "payload")
    with transaction.atomic():
        # No row lock: a dispatcher holds it while the workflow function runs; the advance sent
        # below runs after it and sees the event.
        execution = Execution.objects.only("id", "status", "workflow_id").get(pk=execution_id)
        _check(user, "send_event", execution)
        if execution.status in EXECUTION_TERMINAL:
            raise ActionRefused("send an event to", execution.pk, ExecutionStatus(execution.status),
                                sorted(set(ExecutionStatus) - EXECUTION_TERMINAL))
        event = record_event(execution.pk, EventType.EVENT_RECEIVED, f"event {name[:100]!r} received",
                             {"name": name, "payload": payload})
        broker.send_advance_on_commit(execution)
    return event


def cancel(execution_id, *, user=None) -> Execution:
    """Cancel: ``cancelling``; nothing new starts, operations not started are cancelled, running
    ones see ``ctx.is_cancelled()`` and are awaited; then ``cancelled``. A ``pending`` or
    ``queued`` execution ends ``cancelled`` at once."""
    return _stop(execution_id, "cancel", ExecutionStatus.CANCELLING, user)


def force_cancel(execution_id, *, user=None) -> Execution:
    """Force-cancel: ``cancelled`` at once; every operation not terminal is cancelled without
    waiting for it (its processes are not signalled; what it reports later is a stale report)."""
    return _stop(execution_id, "force-cancel", ExecutionStatus.FORCE_CANCELLING, user)


def kill(execution_id, *, user=None) -> Execution:
    """Kill: ``kill_cancelling``; the dispatcher and the process group of every running operation,
    on every agent, get SIGTERM, then SIGKILL after KILL_GRACE_SECONDS; operations end
    ``cancelled`` (error "killed"); then ``cancelled``. Allowed from any status: on a terminal
    execution it only stops the processes of leftover operations, and the status stays."""
    execution = _check(user, "kill", Execution.objects.get(pk=execution_id))
    if execution.status in EXECUTION_TERMINAL:
        stopping.stop_attempts(execution.pk, stopping.leftover_attempts(execution), dispatcher=True)
        return execution
    # A dispatcher running the workflow function holds the row lock (an execution it is starting
    # still reads pending from outside): it is stopped first, which lets the lock go — its
    # transaction rolls back, and its redelivered message finds the execution cancelled.
    broker.broadcast_kill(execution.pk, dispatcher=True)
    with transaction.atomic():
        execution = _locked(execution_id)
        if execution.status in EXECUTION_TERMINAL:  # it ended while we waited for the lock
            stopping.stop_attempts(execution.pk, stopping.leftover_attempts(execution))
            return execution
        return stopping.stop(execution, ExecutionStatus.KILL_CANCELLING, "kill")


def resume(execution_id, *, user=None) -> Execution:
    """Resume: ``started`` with a new token. Operations ``rescheduled``, ``failed`` and
    ``cancelled`` go back to ``pending`` (retries counted from 0) and are sent when their
    dependencies have succeeded; ``sent`` and ``started`` ones are awaited, not sent again;
    succeeded ones never run again. The workflow function replays from its durable state.

    Resuming a ``started`` execution (a stuck one) replaces its dispatcher: the old one holds
    the old token and can change nothing; one stuck in workflow code is stopped."""
    return _resume(execution_id, "resume", EXECUTION_RESUMABLE, OPERATION_RESUMABLE, user)


def force_resume(execution_id, *, user=None) -> Execution:
    """Force-resume (``cancelled``/``failed`` only): as resume, and operations left ``sending``,
    ``sent`` or ``started`` are reset to ``pending`` too and sent again as a new attempt (the
    processes of their old attempts, if any still run, are stopped)."""
    return _resume(execution_id, "force-resume", EXECUTION_FORCE_RESUMABLE, OPERATION_FORCE_RESUMABLE, user)


def pause(execution_id, *, user=None) -> Execution:
    """Pause a ``started`` execution: ``paused``; nothing new is sent (no step, no retry, no step a
    limit held back) until it is unpaused; what runs goes on and its outcome is stored; timers
    keep their deadlines and fire on unpause; events sent to it are kept."""
    return _move(execution_id, "pause", (ExecutionStatus.STARTED,), pausing.pause, user)


def unpause(execution_id, *, user=None) -> Execution:
    """Unpause a ``paused`` execution: ``started`` again; it carries on with what came meanwhile."""
    return _move(execution_id, "unpause", (ExecutionStatus.PAUSED,), pausing.unpause, user)


def pause_workflow(workflow_id, *, user=None) -> PausedWorkflow:
    """Pause the workflow ``workflow_id`` as a whole: its new executions wait ``queued`` and its
    schedules' slots are recorded ``skipped`` until it is unpaused; its running executions go on.
    ``RegistrationError`` for a workflow that is not registered; ``WorkflowActionRefused`` when it
    is paused already."""
    get_workflow(workflow_id)
    permissions.check(user, "pause", workflow_id, target=f"workflow {workflow_id}")
    with transaction.atomic():
        paused, created = workflow_pausing.pause(workflow_id, by=getattr(user, "username", "") or "")
        if not created:
            raise WorkflowActionRefused("pause", workflow_id, paused=True)
    return paused


def unpause_workflow(workflow_id, *, user=None) -> int:
    """Unpause the workflow ``workflow_id``: its queued executions start, in the order they were
    created (each when its concurrency keys have room); returns how many started.
    ``WorkflowActionRefused`` when it is not paused."""
    get_workflow(workflow_id)
    permissions.check(user, "unpause", workflow_id, target=f"workflow {workflow_id}")
    if not PausedWorkflow.is_paused(workflow_id):
        raise WorkflowActionRefused("unpause", workflow_id, paused=False)
    return workflow_pausing.unpause(workflow_id)


#: The actions on a workflow as a whole, by the name every entry point uses.
WORKFLOW_ACTIONS = {"pause": pause_workflow, "unpause": unpause_workflow}


#: The actions on an execution, by the name every entry point uses; each takes
#: the execution's id and, as a keyword, the ``user`` it acts for.
ACTIONS = {"cancel": cancel, "force-cancel": force_cancel, "kill": kill, "resume": resume, "force-resume": force_resume,
           "pause": pause, "unpause": unpause}
#: The actions that do not wait for the workflow: the admin asks for a confirmation first.
FORCE_ACTIONS = frozenset({"kill", "force-cancel", "force-resume"})


def actions_for(status) -> list[str]:
    """The actions an execution in ``status`` allows, in ACTIONS' order. The action itself decides
    again under the row lock: the status may have changed meanwhile. Kill, which on an ended
    execution only stops leftover processes, is offered while the execution is active."""
    status = ExecutionStatus(status)
    allowed = {
        "cancel": status in EXECUTION_WAITING or ExecutionStatus.CANCELLING in EXECUTION_TRANSITIONS[status],
        "force-cancel": status in EXECUTION_WAITING or ExecutionStatus.FORCE_CANCELLING in EXECUTION_TRANSITIONS[status],
        "kill": status not in EXECUTION_TERMINAL,
        "resume": status in EXECUTION_RESUMABLE,
        "force-resume": status in EXECUTION_FORCE_RESUMABLE,
        "pause": status == ExecutionStatus.STARTED,
        "unpause": status == ExecutionStatus.PAUSED,
    }
    return [action for action in ACTIONS if allowed[action]]


def _resume(execution_id, action, allowed, reset_states, user) -> Execution:
    # Both checks before any dispatcher is stopped.
    _refuse_unless(_check(user, action, Execution.objects.get(pk=execution_id)), action, allowed)
    with transaction.atomic():
        execution = _refuse_unless(_locked_or_stop_dispatcher(execution_id), action, allowed)
        return resuming.resume(execution, action, reset_states)


def _move(execution_id, action, allowed, move, user) -> Execution:
    """``move(execution)`` under the execution's row lock, once ``user`` may take ``action`` and
    the execution is in one of ``allowed``."""
    with transaction.atomic():
        return move(_refuse_unless(_check(user, action, _locked(execution_id)), action, allowed))


def _replayed(execution, replayed) -> Execution:
    """``execution``, marked: started earlier with the same idempotency key, or by this call."""
    execution.idempotent_replay = replayed
    return execution


def _number(value):
    """A number of seconds as a float (``30`` and ``30.0`` are one request's), else as it is."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def _check(user, action, execution) -> Execution:
    """The execution, once ``user`` may take ``action`` on it (else ``PermissionRefused``)."""
    permissions.check(user, action, execution.workflow_id, target=f"execution {execution.pk}")
    return execution


def _refuse_unless(execution, action, allowed) -> Execution:
    if execution.status not in allowed:
        raise ActionRefused(action, execution.pk, ExecutionStatus(execution.status), sorted(allowed))
    return execution


def _locked_or_stop_dispatcher(execution_id) -> Execution:
    """The execution, its row locked. A dispatcher running the workflow function holds that lock
    for as long as the function runs: when it is taken, the dispatcher is stopped (as a kill
    stops it: its transaction rolls back and its message is delivered again) and the lock awaited."""
    try:
        with transaction.atomic():  # a savepoint: the refused lock must not abort the outer transaction
            return Execution.objects.select_for_update(nowait=True, no_key=True).get(pk=execution_id)
    except DatabaseError:  # the lock is held (PostgreSQL: lock_not_available)
        pass
    broker.broadcast_kill(execution_id, dispatcher=True)
    return _locked(execution_id)


def _stop(execution_id, action, target, user) -> Execution:
    with transaction.atomic():
        execution = _check(user, action, _locked(execution_id))
        status = ExecutionStatus(execution.status)
        if status not in EXECUTION_WAITING and target not in EXECUTION_TRANSITIONS[status]:
            allowed = sorted(EXECUTION_WAITING) + sorted(s for s, targets in EXECUTION_TRANSITIONS.items() if target in targets)
            raise ActionRefused(action, execution.pk, status, allowed)
        return stopping.stop(execution, target, action)


def _locked(execution_id) -> Execution:
    """The execution, its row locked until the transaction ends (one writer at a time)."""
    return Execution.objects.select_for_update(no_key=True).get(pk=execution_id)
