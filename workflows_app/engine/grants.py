"""What an attempt needs to run, as the manager hands it to its agent: the **grant**.

The message that sends an attempt carries its grant (:func:`grants`), proved for its agent over
the whole of it (``workflows_app.broker.send_operations``), so that the agent may run it at once
without asking anyone: the operation and its arguments (after the input a canvas passes on),
its execution and step, whether it is a dry run, how many retries it has left, and when it was
sent and until when it may start unasked (``Operation.granted_until``, GRANT_SECONDS after). A
delivery that may not run unasked claims the attempt, and the claim's answer carries the same
(:func:`grant`) — see ``agents.worker.grants`` for which runs unasked.
"""

import time

from django.db import transaction
from django.db.models import Max

from workflows_app import broker, clock
from workflows_app.conf import workflows_settings
from workflows_app.engine import graph as graphs
from workflows_app.models import Execution, Operation
from workflows_app.errors import TransitionRefused
from workflows_app.states import EXECUTION_TERMINAL, OPERATION_AT_AGENT, OperationState
from workflows_app.transitions import operation_transition


def call_args(operation) -> list:
    """The positional arguments an attempt of ``operation`` runs with: its own, after the input a
    canvas passes on (a result, or a list of them, read from its dependencies) when it has one."""
    args = list(operation.args)
    if operation.input is not None:
        results = dict(Operation.objects.filter(execution_id=operation.execution_id,
                                                name__in=graphs.Input.from_json(operation.input).names())
                       .values_list("name", "result"))
        args.insert(0, graphs.resolve(operation.input, results))
    return args


def retries_left(operation) -> int:
    """How many more attempts retryable failures may bring (-1: no limit), as ``policy.retry_delay``
    counts them: the agent ends a retried attempt's Celery task as ``RETRY``, a final one as ``FAILURE``."""
    if operation.max_retries == -1:
        return -1
    return max(0, operation.max_retries - operation.current_retries)


def grant(operation, dry_run) -> dict:
    """What running the current attempt of ``operation`` takes, and nothing else."""
    return {"operation": operation.operation, "execution": str(operation.execution_id), "step": operation.name,
            "args": call_args(operation), "kwargs": operation.kwargs, "dry_run": bool(dry_run),
            "retries_left": retries_left(operation)}


def grants(operations) -> dict:
    """The grant each of ``operations`` (``sending``) travels with, by operation id: :func:`grant`
    and its times — ``granted`` (when it was sent) and ``deadline`` (until when it may start
    unasked), as seconds since the epoch. Their executions' dry-run flags in one query at most."""
    dry = {}
    missing = set()
    for operation in operations:
        if Operation.execution.is_cached(operation) and "is_dry_run" not in operation.execution.get_deferred_fields():
            dry[operation.execution_id] = operation.execution.is_dry_run
        else:
            missing.add(operation.execution_id)
    missing -= dry.keys()
    if missing:
        dry.update(Execution.objects.filter(pk__in=missing).values_list("pk", "is_dry_run"))
    found = {}
    for operation in operations:
        if not granted(operation):
            continue  # its delivery claims
        found[operation.pk] = {**grant(operation, dry.get(operation.execution_id, False)),
                               "granted": operation.sending_at.timestamp(),
                               "deadline": operation.granted_until.timestamp()}
    return found


def granted(operation) -> bool:
    """Whether the current attempt of ``operation`` travels with a grant: one sent to an agent (not
    a local step, nor one the managers run, which claim as they come) by a version that grants."""
    return (operation.granted_until is not None and operation.sending_at is not None and not operation.local
            and operation.agent != workflows_settings.MANAGEMENT_QUEUE)


# --- stopping granted attempts ----------------------------------------------------------------

#: ``hosts(agent names) -> {name: host name}``: where each agent runs (its worker is
#: ``<name>@<host>``), from the agents' registry, which sits above this module: the app hands it
#: down (:func:`hosts_with`).
_hosts = None


def hosts_with(hosts):
    global _hosts
    _hosts = hosts


def live(operations, now) -> list:
    """Those of ``operations`` whose grant runs at ``now``."""
    return [op for op in operations if granted(op) and op.granted_until > now]


def ask_to_stop(operations):
    """Before ``operations`` (``sending``/``sent``) are cancelled or superseded: the agents holding
    their granted attempts are asked, now, never to start them (:func:`stop_now`). One an agent
    answers that it runs, or ran, is ``started`` from here on, as its own report would make it (and
    stopped, or its outcome awaited, as a started one is); one it refused is released (its grant is
    over); one no agent answered for stays held until its grant expires (:func:`unanswered`).
    Returns those started."""
    now = clock.now()
    held = [op for op in live(operations, now) if op.state in OPERATION_AT_AGENT]
    if not held:
        return []
    answers = stop_now([(op.pk, op.attempt, op.agent) for op in held])
    for op in held:
        if (str(op.pk), op.attempt) not in answers:
            _unanswered_executions[op.execution_id] = time.monotonic()
    started, over = [], []
    for op in held:
        answer = answers.get((str(op.pk), op.attempt))
        if answer in ("running", "ended") and _start(op):  # it began there: its start is recorded
            started.append(op)
        elif answer is not None:
            over.append(op)
    if over:
        Operation.objects.filter(pk__in=[op.pk for op in over]).update(granted_until=None)
        for op in over:
            op.granted_until = None
    return started


def _start(operation) -> bool:
    try:
        if operation.state == OperationState.SENDING:
            operation_transition(operation, OperationState.SENT, attempt=operation.attempt)
        operation_transition(operation, OperationState.STARTED, attempt=operation.attempt,
                             data={"agent": operation.agent, "reported": "its agent's answer to a stop"})
    except TransitionRefused:
        operation.refresh_from_db()
    return operation.state == OperationState.STARTED


#: Attempts asked to stop whose agent did not answer, and when: not asked again for a while.
_unanswered = {}
#: The executions of those, and when (:func:`holds_end`).
_unanswered_executions = {}
ASK_AGAIN_SECONDS = 10.0


def stop_now(attempts) -> dict:
    """Ask the agents of ``attempts`` (operation id, attempt, agent) never to start them, now; their
    answers by ``(operation id as text, attempt)``: refused, running or ended. An agent that never
    registered nor heart-beat runs nothing: it answers "refused" here (when it starts, its broker
    connection is newer than every grant, so it claims them all). One whose host no report of it
    said yet cannot be asked, nor one asked in the last ASK_AGAIN_SECONDS that did not answer: no
    answer, their grants are waited for."""
    moment = time.monotonic()
    for key, at in list(_unanswered.items()):
        if moment - at > ASK_AGAIN_SECONDS:
            del _unanswered[key]
    attempts = [(pk, attempt, agent) for pk, attempt, agent in attempts if (str(pk), attempt) not in _unanswered]
    if not attempts:
        return {}
    hosts = _hosts({agent for _, _, agent in attempts}) if _hosts is not None else {}
    answers = {(str(pk), attempt): "refused" for pk, attempt, agent in attempts if agent not in hosts}
    asked = [(pk, attempt) for pk, attempt, agent in attempts if hosts.get(agent)]
    if asked:
        answers.update(broker.broadcast_stop(asked, hosts))
    for pk, attempt, agent in attempts:
        if (str(pk), attempt) not in answers:
            _unanswered[(str(pk), attempt)] = moment
    return answers


def release(answers):
    """The grants of the cancelled attempts an agent answered for (``{(operation id, attempt):
    answer}``, or pairs): none of them will start any more, so their executions need not wait for
    them — which are woken to see it."""
    attempts = {(str(pk), attempt) for pk, attempt in answers}
    if not attempts:
        return
    held = [(pk, attempt, execution_id) for pk, attempt, execution_id in
            Operation.objects.filter(pk__in={pk for pk, _ in attempts}, state=OperationState.CANCELLED,
                                     granted_until__isnull=False).values_list("pk", "attempt", "execution_id")
            if (str(pk), attempt) in attempts]
    if not held:
        return
    Operation.objects.filter(pk__in=[pk for pk, _, _ in held], state=OperationState.CANCELLED).update(granted_until=None)
    for execution_id in (Execution.objects.filter(pk__in={e for _, _, e in held}).exclude(status__in=EXECUTION_TERMINAL)
                         .values_list("pk", flat=True)):
        broker.send_advance(execution_id)


def unanswered(execution_id):
    """Until when the execution's end must wait for attempts that were cancelled before they
    started, whose grant runs and whose agent has not answered (they may still start, and be
    stopped): the latest such grant, or None when there is none."""
    held = Operation.objects.filter(execution_id=execution_id, state=OperationState.CANCELLED, local=False,
                                    granted_until__gt=clock.now()).exclude(agent=workflows_settings.MANAGEMENT_QUEUE)
    return held.aggregate(until=Max("granted_until"))["until"]


def holds_end(execution, *, steps_open=True) -> bool:
    """Whether the execution must not end yet (:func:`unanswered`); then it is woken when its last
    such grant expires, if no agent's answer wakes it first. ``steps_open``: False from the run of
    the workflow that ended every step itself, in this process: only a stop this process asked
    and no agent answered can hold it then, and none is read otherwise."""
    moment = time.monotonic()
    for pk, at in list(_unanswered_executions.items()):
        if moment - at > workflows_settings.GRANT_SECONDS + ASK_AGAIN_SECONDS:
            del _unanswered_executions[pk]
    if not steps_open and execution.pk not in _unanswered_executions:
        return False
    until = unanswered(execution.pk)
    if until is None:
        return False
    delay = max(0.0, (until - clock.now()).total_seconds())
    transaction.on_commit(lambda: broker.send_advance(execution.pk, execution.workflow_id, countdown=delay + 0.05))
    return True
