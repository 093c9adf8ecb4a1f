"""A new execution, built from its workflow's definition: what a start from outside
(``services.start``) and a child's start (``engine.children``) share; and the deferred starts
(``run_after``), which the tick sends once they fall due."""

from contextlib import nullcontext
from datetime import timedelta

from django.db import transaction
from django.db.models import Min, Q

from workflows_app import broker, clock, values
from workflows_app.conf import workflows_settings
from workflows_app.engine import concurrency
from workflows_app.errors import ExistingRunningExecution, ParameterError, ValueRefused
from workflows_app.models import Event, Execution
from workflows_app.registry import get_workflow
from workflows_app.states import EventType, ExecutionStatus, FailureMode
from workflows_app.transitions import create_execution, execution_transition


def build(workflow_id, parameters=None, *, deployment_id=None, failure_mode=None, timeout=None, wait_after_fail=None,
          dry_run=False, created_by="", parent=None, parent_step="", rerun_of=None, rerun_from="", schedule=None,
          scheduled_for=None, run_after=None, priority=0) -> tuple[Execution, Event]:
    """The unsaved execution (``pending``) and its first event (``transitions.create_execution``
    stores both); ``rerun_of`` and ``rerun_from``: the execution and the step it runs again from
    (``engine.reruns`` stores what it keeps); ``schedule`` and ``scheduled_for``: the schedule that
    starts it and its slot (``engine.schedules``); ``run_after``: a deferred start (it stays
    ``pending`` until then: :func:`send_due`); ``priority``: -100 to 100, its operations' place in
    their agents' queues (``broker.message_priority``). Raises ``RegistrationError`` for an unknown workflow, ``ParameterError`` for
    parameters that do not fit it, an unknown failure mode or a value that cannot make its
    concurrency key (``engine.concurrency.key_of``), and ``ValueRefused`` (a ``ParameterError``)
    for parameters that may not be stored."""
    definition = get_workflow(workflow_id)
    parameters = {} if parameters is None else parameters
    definition.check_parameters(parameters)
    values.check(parameters, "parameters")
    if deployment_id is not None:
        problem = values.string_problem(str(deployment_id))
        longest = Execution._meta.get_field("deployment_id").max_length
        if problem is None and len(str(deployment_id)) > longest:
            problem = f"at most {longest} characters, not {len(str(deployment_id))}"
        if problem is not None:
            raise ValueRefused("deployment_id", problem)
    failure_mode = failure_mode or definition.failure_mode or workflows_settings.FAILURE_MODE
    if failure_mode not in FailureMode.values:
        raise ParameterError(f"failure_mode must be one of {FailureMode.values}, not {failure_mode!r}")
    execution = Execution(
        workflow_id=definition.name,
        parameters=parameters,
        deployment_id=deployment_id,
        failure_mode=failure_mode,
        timeout=timeout if timeout is not None else definition.timeout,
        wait_after_fail=wait_after_fail if wait_after_fail is not None else workflows_settings.WAIT_AFTER_FAIL,
        is_dry_run=dry_run,
        created_by=created_by,
        parent=parent,
        parent_step=parent_step,
        rerun_of=rerun_of,
        rerun_from=rerun_from,
        schedule=schedule,
        scheduled_for=scheduled_for,
        concurrency_key=concurrency.key_of(definition, parameters, deployment_id),
        run_after=run_after,
        priority=check_priority(priority),
    )
    data = {"parameters": parameters}
    if parent is not None:
        data.update(parent=str(parent.pk), parent_step=parent_step)
    if rerun_of is not None:
        data.update(rerun_of=str(rerun_of.pk), rerun_from=rerun_from)
    if schedule is not None:
        data.update(schedule=str(schedule.pk), scheduled_for=scheduled_for.isoformat())
    if run_after is not None:
        data.update(run_after=run_after.isoformat())
    created = Event(type=EventType.LOG, message=f"created: {definition.name}", data=data)
    return execution, created


def create(execution, created, *, queue=False, force=False) -> Execution:
    """Store ``execution`` and its first event (:func:`build`) and, once committed, send it to a
    manager — or leave it ``queued`` while its keys have no room (``engine.concurrency``): its
    workflow's limit, and its deployment (one active execution at a time). A start that would
    wait for its deployment is refused (``ExistingRunningExecution``, nothing stored) unless
    ``queue`` (it waits ``queued`` and starts when the deployment is free, in order) or ``force``
    (it runs beside the other; its workflow's limit still holds)."""
    # Kept with it: a forced execution that waits for its workflow's limit never waits for its
    # deployment (engine.concurrency.keys_of).
    execution.forced = bool(force and execution.deployment_id)
    keys = concurrency.keys_for_start(execution, force=force)
    # Without a key, the execution and its event are stored by one statement (create_execution),
    # which needs no transaction of its own; on_commit then sends at once (or, in a caller's
    # transaction, once it commits).
    with transaction.atomic() if keys else nullcontext():
        blocked = None
        if keys:
            concurrency.lock(keys)
            blocked = concurrency.admit(keys)
            if blocked is not None and blocked.is_deployment and not queue:
                raise ExistingRunningExecution(execution.deployment_id, blocked.behind)  # nothing was stored
        create_execution(execution, created)
        if blocked is not None:
            return execution_transition(execution, ExecutionStatus.QUEUED, message=blocked.message())
        if not execution.deferred(clock.now()):
            broker.send_advance_on_commit(execution)
    return execution


def check_priority(priority) -> int:
    """``priority`` if it is a whole number from -100 to 100, else ``ParameterError``."""
    if isinstance(priority, bool) or not isinstance(priority, int) or not -100 <= priority <= 100:
        raise ParameterError(f"priority must be a whole number from -100 to 100, not {priority!r}")
    return priority


# --- deferred starts ---------------------------------------------------------------------------

#: How far back a process' first look for due deferred starts reaches.
LOOK_BACK_SECONDS = 30
#: The end of the span of run_after times this process' tick has sent (None: none yet).
_sent_upto = None


def send_due(now):
    """Send the deferred executions whose ``run_after`` fell due since this process' last look
    (at first, within the last ``LOOK_BACK_SECONDS``) to a manager: the tick's part. One whose
    message was lost, or that fell due while no manager ran, is the sweep's
    (:func:`stale_unstarted`) and a manager's start's (``engine.recovery``)."""
    global _sent_upto
    since = _sent_upto if _sent_upto is not None and _sent_upto <= now else now - timedelta(seconds=LOOK_BACK_SECONDS)
    _sent_upto = now
    due = Execution.objects.filter(status=ExecutionStatus.PENDING, run_after__gt=since, run_after__lte=now)
    for pk, workflow_id in due.order_by("run_after").values_list("pk", "workflow_id"):
        broker.send_advance(pk, workflow_id)


def next_deadline(after):
    """The earliest ``run_after`` later than ``after`` of a pending execution, or None."""
    return (Execution.objects.filter(status=ExecutionStatus.PENDING, run_after__gt=after)
            .aggregate(at=Min("run_after"))["at"])


def startable(now):
    """The pending executions that may start by ``now``: all but those deferred past it."""
    return Execution.objects.filter(status=ExecutionStatus.PENDING).exclude(run_after__gt=now)


def stale_unstarted(stale):
    """The pending executions that should have started by ``stale`` and have not: created by
    then and not deferred, or deferred to it at the latest."""
    return (Execution.objects.filter(status=ExecutionStatus.PENDING)
            .filter(Q(run_after__isnull=True, created_at__lte=stale) | Q(run_after__lte=stale)))
