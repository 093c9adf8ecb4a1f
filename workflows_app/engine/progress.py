"""How an execution's graph moves on: sending the operations that may start, the tick's sweep
of due retries, and whether anything of the execution can still progress.

What an agent reports (a result, a failure) is recorded by :mod:`workflows_app.engine.reports`,
which calls back here to send what the report made ready.
"""

import functools

from django.db import connection, transaction

from workflows_app import broker, clock, db, values
from workflows_app.conf import workflows_settings
from workflows_app.engine import children, grants, policy
from workflows_app.flow.limits import governs
from workflows_app.local_steps import due, host
from workflows_app.errors import TransitionRefused
from workflows_app.models import Execution, Operation
from workflows_app.states import (
    OPERATION_IN_FLIGHT_OR_WAITING,
    ExecutionStatus,
    FailureMode,
    OperationState,
    StepKind,
)
from workflows_app.transitions import create_operation, operation_transition, operations_transition


def lock_execution(execution_id):
    """The execution, its row locked ``FOR NO KEY UPDATE`` until the transaction ends: it does
    not block the ``KEY SHARE`` lock that inserting an event (its foreign key) takes, so a
    transaction that writes an operation's state and event never waits for it while holding the
    operation's row."""
    return Execution.objects.select_for_update(no_key=True).get(pk=execution_id)


def send(operation):
    """pending/rescheduled -> sending, and the message after commit."""
    send_many([operation])


def send_many(operations):
    """pending/rescheduled -> sending for all of ``operations`` at once (one statement each for
    the rows and their events), and their messages after commit; returns those it moved. A
    child execution's step starts its child instead (``children.send``), each holding its
    execution (:func:`_holding`). A step whose operation has a limit is handed to the gate
    (``workflows_app.flow.gate``), which sends it once the limit allows."""
    steps = [op for op in operations if op.kind == StepKind.WORKFLOW]
    started = children.send(steps[0].execution, steps) if steps else []
    steps = [op for op in operations if op.kind != StepKind.WORKFLOW]
    return started + send_admitted(_hold(steps) if _hold is not None else steps)


#: ``hold(operations) -> the others``: the gate of operations' limits (``workflows_app.flow.gate``),
#: which takes the steps a limit governs and sends them through :func:`send_admitted` when the limit
#: allows. It sits above this module: the app hands it down (:func:`hold_with`).
_hold = None


def hold_with(hold):
    global _hold
    _hold = hold


def send_admitted(operations):
    """pending/rescheduled -> sending for ``operations`` (steps of operations, each holding its
    execution), their messages after commit — but local steps, which go on to ``sent`` with no
    message (:func:`send_local`); returns those it moved."""
    moved = operations_transition(operations, OperationState.SENDING)
    remote = [op for op in moved if not op.local]
    if remote:
        transaction.on_commit(lambda: publish(remote))
    if len(remote) != len(moved):
        send_local([op for op in moved if op.local])
    return moved


def send_local(operations):
    """Local steps ``sending`` (each holding its execution) -> ``sent``: no message carries them,
    a pass over their execution runs them (``workflows_app.local_steps``) — the pass this runs in,
    which notes them, or one an ``advance`` asks for once this commits."""
    woken = {}
    for op in operations_transition(operations, OperationState.SENT, message="a local step: its pass runs it"):
        if due.in_pass(op.execution_id):
            due.note([op])
        else:
            woken[op.execution_id] = op.execution
    for execution in woken.values():
        broker.send_advance_on_commit(execution)


#: Messages sent between two writes of their ``sent`` state: an agent that gets a message
#: before that write has to make it itself, so the writes keep close behind the sends.
SENT_BATCH = 50


def publish(operations):
    """Send each operation's current attempt (``broker.send_operations``), then record those
    still ``sending`` as ``sent`` (not one the agent or a cancel already moved on), a batch at a
    time. Run after commit, or from stored state (the tick, a manager that starts).

    An operation whose agent name cannot be one (``values.agent_name_problem``: a row stored before
    the name was checked) is not sent, and one whose message the broker refused
    (``broker.refusal``) is not sent again: each fails for good (:func:`fail_unsendable`), and the
    others go on. A broker that cannot be reached raises, as before: what stays ``sending`` is sent
    again by the tick."""
    operations = list(operations)
    local = [op for op in operations if op.local]
    if local:  # never a message: their executions are woken to run them (send_local)
        operations = [op for op in operations if not op.local]
        sent = {op.execution_id for op in local if op.state == OperationState.SENT}
        send_local([op for op in local if op.state == OperationState.SENDING])
        for execution_id in sent:
            broker.send_advance(execution_id)
    for start in range(0, len(operations), SENT_BATCH):
        batch, unsendable = [], []
        for op in operations[start:start + SENT_BATCH]:
            problem = None if op.agent == workflows_settings.MANAGEMENT_QUEUE else values.agent_name_problem(op.agent)
            if problem is None:
                batch.append(op)
            else:
                unsendable.append((op, f"not sent: invalid agent name {values.shown_name(op.agent)}: {problem}"))
        refused = broker.send_operations(batch, grants.grants(batch)) if batch else []
        unsendable += [(op, f"the broker refused the message to agent {values.shown_name(op.agent)}: {reason}")
                       for op, reason in refused or ()]
        gone = {id(op) for op, _ in unsendable}
        _record_sent([op for op in batch if op.state == OperationState.SENDING and id(op) not in gone])
        for op, message in unsendable:
            fail_unsendable(op, message)


#: Tries of a batch's ``sent`` record whose transaction the database aborted.
SENT_TRIES = 3


def _record_sent(operations):
    """Record ``operations`` (their messages left) ``sent`` — those the agent or a cancel already
    moved on are left out, as they should be. A transaction the database aborted (a deadlock with
    a writer that locked some of the same rows) is run again, before the next batch is sent: an
    abort that went up from here would leave every later batch unsent until the tick sent it
    again (a fan-out of 1,000 took 46 s instead of 5, the intake storing the first batch's reports
    meanwhile)."""
    db.again_if_aborted(lambda: operations_transition(operations, OperationState.SENT), tries=SENT_TRIES,
                        what=f"recording {len(operations)} operation(s) sent")


#: The error type of an operation that could not be sent (:func:`fail_unsendable`).
SEND_REFUSED = "SendRefused"


def fail_unsendable(operation, message) -> bool:
    """The attempt of ``operation`` (``sending``) that can never be sent fails for good, with the
    error ``SendRefused``: ``message`` says why. It is what ``reports.record_failure`` records of a
    failure that is not retried — the same transition and event, and the execution woken to see
    it — without what only a report needs (it never reached an agent). Whether it was recorded
    (not when a cancel or a resume moved the operation on meanwhile)."""
    error = values.clean_error({"type": SEND_REFUSED, "message": message, "traceback": ""})
    with transaction.atomic():
        execution = lock_execution(operation.execution_id)
        try:
            operation_transition(operation, OperationState.FAILED, attempt=operation.attempt, error=error,
                                 message=error["message"][:500], data={"error": error})
        except TransitionRefused:
            return False
        broker.send_advance_on_commit(execution)
    return True


def send_ready(execution, operations, failed=None):
    """Send those of ``operations`` whose dependencies all succeeded, if new calls may start;
    returns those sent. ``failed``: as for :func:`policy.allows_new_calls`."""
    ready = _ready(execution, operations, failed)
    return send_many(_holding(execution, ready)) if ready else []


def store(execution, operations, failed=None):
    """Insert the new steps ``operations`` (unsaved, pending) and send those that may start
    (:func:`send_ready`). A lone operation that may start is stored in ``sending`` at once, with
    its event (``transitions.create_operation``: one statement on PostgreSQL where the INSERT
    and the move took two): every step of an imperative workflow."""
    if (len(operations) == 1 and operations[0].kind == StepKind.OPERATION and not governs(operations[0])
            and _ready(execution, operations, failed)):
        if operations[0].local and due.in_pass(execution.pk) and due.nothing_noted():
            # The next step this pass runs, once it commits: stored started at once.
            fields, data = host.started()
            due.note([create_operation(operations[0], OperationState.STARTED,
                                       through=(OperationState.SENDING, OperationState.SENT), data=data, **fields)])
            return
        moved = [create_operation(operations[0], OperationState.SENDING)]  # it holds ``execution``
        if moved[0].local:
            send_local(moved)
        else:
            transaction.on_commit(lambda: publish(moved))
        return
    Operation.objects.bulk_create(operations)
    send_ready(execution, operations, failed)


def _ready(execution, operations, failed):
    """Those of ``operations`` that may be sent now: pending, every dependency succeeded, and
    new calls allowed."""
    ready = [op for op in operations if op.state == OperationState.PENDING and op.pending_dependencies == 0]
    return ready if ready and policy.allows_new_calls(execution, failed) else []


def _holding(execution, operations):
    """``operations``, each holding ``execution``: their messages are named after its workflow
    without a query (``broker.send_operations``)."""
    for operation in operations:
        operation.execution = execution
    return operations


def can_progress(execution) -> bool:
    """Something of the execution is in flight, waits for a retry, or may be sent now. One
    query (three lookups on the execution-and-state index): a completion asks it every time."""
    pk = Operation._meta.get_field("execution").get_db_prep_value(execution.pk, connection)
    params = [pk, *OPERATION_IN_FLIGHT_OR_WAITING, pk, OperationState.PENDING, pk, OperationState.FAILED, False]
    with db.cursor() as cursor:
        cursor.execute(_can_progress_sql(), params)
        in_flight, ready, failed = cursor.fetchone()
    if in_flight:
        return True
    may_call = execution.status == ExecutionStatus.STARTED and (
        execution.failure_mode == FailureMode.CONTINUE_WHILE_POSSIBLE or not failed)
    return bool(ready) and may_call


@functools.cache
def _can_progress_sql():
    """:func:`can_progress`'s query, built once per process."""
    meta = Operation._meta
    q = connection.ops.quote_name
    column = {name: q(meta.get_field(name).column)
              for name in ("execution", "state", "pending_dependencies", "failure_handled")}

    def exists(n_states, condition=""):
        return (f"EXISTS (SELECT 1 FROM {q(meta.db_table)} WHERE {column['execution']} = %s "
                f"AND {column['state']} IN ({', '.join(['%s'] * n_states)}){condition})")

    ready = f" AND {column['pending_dependencies']} = 0"
    unhandled = f" AND {column['failure_handled']} = %s"
    return f"SELECT {exists(len(OPERATION_IN_FLIGHT_OR_WAITING))}, {exists(1, ready)}, {exists(1, unhandled)}"


def send_due_retries(now=None, limit=500):
    """Send every rescheduled operation whose ``next_attempt_at`` has passed (the tick)."""
    now = now or clock.now()
    # One that a limit holds back waits for the gate, not for the tick.
    # A paused execution's are left to its unpause: picked now, they would only be passed over.
    due = (Operation.objects.filter(state=OperationState.RESCHEDULED, next_attempt_at__lte=now, flow_wait="",
                                    execution__status=ExecutionStatus.STARTED)
           .values_list("pk", "execution_id")[:limit])
    sent = 0
    for pk, execution_id in due:
        with transaction.atomic():
            execution = lock_execution(execution_id)
            operation = Operation.objects.get(pk=pk)
            if operation.state != OperationState.RESCHEDULED:
                continue
            # Otherwise the retry is a new call it may not make: another step's failure is not
            # handled yet (the dispatcher, woken by that failure, cancels this step under the
            # failure mode), or the execution is stopping (the stop cancels it).
            if policy.allows_new_calls(execution):
                send_many(_holding(execution, [operation]))
                sent += 1
    return sent
