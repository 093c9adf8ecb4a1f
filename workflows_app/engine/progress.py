"""How an execution's graph moves on: sending ready operations, recording results and
failures with the retry policy, counting fan-in in the database, and deciding when the
workflow function must run again.

A result is recorded under the execution's row lock, so that the count of dependencies cannot
race with a dispatcher adding steps. A success takes it ``FOR SHARE``, in its transition's
statement: successes of one execution do not wait for each other, and "nothing left in flight:
wake the workflow" is asked after the commit, where the later of two last completions sees
both. A failure, a cancel and the retry sweep take it ``FOR NO KEY UPDATE``, which does not
block the ``KEY SHARE`` lock that inserting an event (its foreign key) takes on the execution's
row, so a transaction that writes an operation's state and event never waits for it while
holding the operation's row.
"""

import functools
import logging
from datetime import timedelta

from django.db import connection, transaction
from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from workflows_app import db, dispatch
from workflows_app.errors import TransitionRefused
from workflows_app.models import Event, Execution, Operation, OperationDependency
from workflows_app.models.operation import task_id_for
from workflows_app.states import (
    OPERATION_IN_FLIGHT_OR_WAITING,
    EventType,
    ExecutionStatus,
    FailureMode,
    OperationState,
)
from workflows_app.transitions import operation_transition, operations_transition, record_event

logger = logging.getLogger(__name__)

def has_failure(execution) -> bool:
    return Operation.objects.filter(execution_id=execution.pk, state=OperationState.FAILED).exists()


def allows_new_calls(execution, failed=None) -> bool:
    """Whether a new operation (or a retry, which is a new call) may start now (SPEC §7).
    ``failed``: whether an operation of the execution has failed, when the caller has read it."""
    if execution.status != ExecutionStatus.STARTED:
        return False
    if execution.failure_mode == FailureMode.CONTINUE_WHILE_POSSIBLE:
        return True
    return not (has_failure(execution) if failed is None else failed)


def send(operation):
    """pending/rescheduled -> sending, and the message after commit."""
    send_many([operation])


def send_many(operations):
    """pending/rescheduled -> sending for all of ``operations`` at once (one statement each for
    the rows and their events), and their messages after commit; returns those it moved."""
    moved = operations_transition(operations, OperationState.SENDING)
    if moved:
        transaction.on_commit(lambda: dispatch.send_operations(moved))
    return moved


def send_ready(execution, operations, failed=None):
    """Send those of ``operations`` whose dependencies all succeeded, if new calls may start;
    returns those sent. ``failed``: as for :func:`allows_new_calls`."""
    ready = [op for op in operations if op.state == OperationState.PENDING and op.pending_dependencies == 0]
    if ready and allows_new_calls(execution, failed):
        return send_many(ready)
    return []


def can_progress(execution) -> bool:
    """Something of the execution is in flight, waits for a retry, or may be sent now. One
    query (three lookups on the execution-and-state index): a completion asks it every time."""
    pk = Operation._meta.get_field("execution").get_db_prep_value(execution.pk, connection)
    params = [pk, *OPERATION_IN_FLIGHT_OR_WAITING, pk, OperationState.PENDING, pk, OperationState.FAILED]
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
    column = {name: q(meta.get_field(name).column) for name in ("execution", "state", "pending_dependencies")}

    def exists(n_states, ready_only=False):
        return (f"EXISTS (SELECT 1 FROM {q(meta.db_table)} WHERE {column['execution']} = %s "
                f"AND {column['state']} IN ({', '.join(['%s'] * n_states)})"
                + (f" AND {column['pending_dependencies']} = 0)" if ready_only else ")"))

    return f"SELECT {exists(len(OPERATION_IN_FLIGHT_OR_WAITING))}, {exists(1, ready_only=True)}, {exists(1)}"


def _lock_execution(execution_id):
    return Execution.objects.select_for_update(no_key=True).get(pk=execution_id)


def record_success(operation, attempt, result):
    """Record an attempt's result; count down its dependents; send those now ready; wake the
    workflow if it waits on this step, or if its graph has nothing left in flight."""
    with transaction.atomic():
        try:
            # The execution's row FOR SHARE (in the same statement on PostgreSQL): completions of
            # one execution do not wait for each other, but each waits for a writer of the
            # execution (a dispatcher storing steps and their dependencies, a status change), and
            # a writer waits for them — so the countdown below sees every dependency stored.
            operation_transition(operation, OperationState.SUCCEEDED, attempt=attempt, result=result, error=None,
                                 share_lock_execution=True)
        except TransitionRefused as refused:
            return _stale(operation, attempt, refused, {"result": result})
        execution = operation.execution
        ready, still_waiting, failed = _count_down_dependents(operation)
        sent = send_ready(execution, ready, failed) if ready else []
        if operation.awaited:
            transaction.on_commit(lambda: dispatch.send_advance(execution.pk))
        elif not sent and not (still_waiting and execution.failure_mode != FailureMode.CONTINUE_WHILE_POSSIBLE):
            # Not idle when it just sent something, nor when a dependent still waits for another
            # dependency: that one is in flight, due for a retry, or failed — and outside
            # continue_while_possible a failure wakes the workflow itself, which cancels every
            # pending operation. (In continue_while_possible a failed dependency never counts
            # down: its dependents wait for good, and only the idle check can wake the workflow.)
            transaction.on_commit(lambda: _wake_if_idle(execution))
    return True


def _wake_if_idle(execution):
    """After a commit, in a fresh snapshot: of two last completions, each commits before it
    looks, so the later one to look sees both and wakes the workflow (both may: an advance with
    nothing to do is harmless)."""
    if not can_progress(execution):
        dispatch.send_advance(execution.pk)


def _count_down_dependents(operation):
    """One dependency fewer for each operation that depends on ``operation``; returns those now
    ready (pending, nothing left to wait for), loaded; whether one is still pending with
    dependencies left; and whether an operation of the execution has failed (None when nothing
    depends on ``operation``: then nothing is sent). One statement: most operations have no
    dependents, and this is on the path of every completion (in a chain, it also loads the next
    step, and whether it may be sent)."""
    op = Operation._meta
    dependents = db.fetch(Operation, _count_down_sql(), [op.pk.get_db_prep_value(operation.pk, connection),
                                                         op.get_field("execution").get_db_prep_value(operation.execution_id, connection),
                                                         OperationState.FAILED.value], extra=("execution_failed",))
    ready = [o for o in dependents if o.pending_dependencies == 0 and o.state == OperationState.PENDING]
    still_waiting = any(o.pending_dependencies > 0 and o.state == OperationState.PENDING for o in dependents)
    return ready, still_waiting, (bool(dependents[0].execution_failed) if dependents else None)


@functools.cache
def _count_down_sql():
    """:func:`_count_down_dependents`' statement, built once per process."""
    op, dep = Operation._meta, OperationDependency._meta
    q = connection.ops.quote_name
    table, pk, count = q(op.db_table), q(op.pk.column), q(op.get_field("pending_dependencies").column)
    execution, state = q(op.get_field("execution").column), q(op.get_field("state").column)
    return (f"UPDATE {table} SET {count} = {count} - 1 WHERE {pk} IN "
            f"(SELECT {q(dep.get_field('operation').column)} FROM {q(dep.db_table)} WHERE {q(dep.get_field('depends_on').column)} = %s) "
            f"RETURNING {db.columns(Operation)}, EXISTS (SELECT 1 FROM {table} f WHERE f.{execution} = %s AND f.{state} = %s)")


def record_failure(operation, attempt, error, *, retryable, retry_after=None, stop_process=False):
    """Record a failed attempt: ``rescheduled`` when the policy allows a retry, else ``failed``.

    ``error`` is ``{"type", "message", "traceback"}``. A retry is a new call: not while the
    execution is cancelling, nor in no_new_calls/fail_fast once another operation failed.
    ``stop_process``: the attempt may still run (its timeout passed): kill its process group.
    """
    with transaction.atomic():
        execution = _lock_execution(operation.execution_id)
        out_of_retries = operation.max_retries != -1 and operation.current_retries >= operation.max_retries
        if retryable and not out_of_retries and allows_new_calls(execution):
            delay = retry_after if retry_after is not None else operation.retry_interval * operation.retry_backoff ** operation.current_retries
            target, fields = OperationState.RESCHEDULED, {
                "current_retries": operation.current_retries + 1,
                "next_attempt_at": timezone.now() + timedelta(seconds=max(0.0, delay)),
            }
        else:
            target, fields = OperationState.FAILED, {}
        try:
            operation_transition(operation, target, attempt=attempt, error=error, message=error.get("message", "")[:500], **fields)
        except TransitionRefused as refused:
            return _stale(operation, attempt, refused, {"error": error})
        if stop_process:
            stop_attempts(execution.pk, [(operation.pk, attempt)])
        if target == OperationState.FAILED:
            transaction.on_commit(lambda: dispatch.send_advance(execution.pk))
    return True


def _stale(operation, attempt, refused, data):
    """A report that changes nothing: kept as a ``stale_report`` event with what it said."""
    record_event(operation.execution_id, EventType.STALE_REPORT, f"report for attempt {attempt} ignored: {refused}",
                 {"attempt": attempt, **data}, operation=operation.name)
    return False


def send_due_retries(now=None, limit=500):
    """Send every rescheduled operation whose ``next_attempt_at`` has passed (the tick)."""
    now = now or timezone.now()
    due = Operation.objects.filter(state=OperationState.RESCHEDULED, next_attempt_at__lte=now).values_list("pk", "execution_id")[:limit]
    sent = 0
    for pk, execution_id in due:
        with transaction.atomic():
            execution = _lock_execution(execution_id)
            operation = Operation.objects.get(pk=pk)
            if operation.state != OperationState.RESCHEDULED:
                continue
            if allows_new_calls(execution):
                send(operation)
                sent += 1
            elif execution.status == ExecutionStatus.STARTED:
                # Another operation failed meanwhile: the retry is a new call it may not make.
                operation_transition(operation, OperationState.FAILED, message="not retried: another operation failed")
                transaction.on_commit(lambda: dispatch.send_advance(execution_id))
    return sent


def cancel_operations(execution, states, message, error=None, *, stop_processes=True):
    """Mark the execution's operations in ``states`` cancelled (cancel first, terminate after).

    Messages of those not started yet are revoked (fencing refuses them anyway). With
    ``stop_processes``, those that were running are asked to stop — SIGTERM to their process
    groups on every agent, SIGKILL after KILL_GRACE_SECONDS — once this commits; without it they
    run on and their reports are kept as ``stale_report`` events (force-cancel)."""
    running, unsent = [], []
    for operation in Operation.objects.filter(execution_id=execution.pk, state__in=states):
        was = operation.state
        fields = {"error": error} if error is not None else {}
        try:
            operation_transition(operation, OperationState.CANCELLED, message=message, **fields)
        except TransitionRefused:
            continue  # it finished meanwhile: its own terminal event stands
        if was == OperationState.STARTED:
            running.append(operation)
        elif was in (OperationState.SENDING, OperationState.SENT):
            unsent.append(operation)
    if unsent:
        task_ids = [op.task_id for op in unsent]
        transaction.on_commit(lambda: dispatch.revoke(task_ids))
    if running and stop_processes:
        stop_attempts(execution.pk, [(op.pk, op.attempt) for op in running])


def stop_attempts(execution_id, attempts, *, dispatcher=False):
    """Once this commits: SIGTERM the process groups running ``attempts`` (and the execution's
    dispatcher), SIGKILL after KILL_GRACE_SECONDS, and revoke their Celery tasks."""
    attempts = list(attempts)

    def stop():
        dispatch.broadcast_kill(execution_id, attempts, dispatcher=dispatcher)
        dispatch.revoke([task_id_for(pk, attempt) for pk, attempt in attempts], terminate=True)

    transaction.on_commit(stop)


def record_cancelled(operation, attempt, error):
    """A running attempt that stopped because its execution is cancelling (``OperationCancelled``)."""
    with transaction.atomic():
        execution = _lock_execution(operation.execution_id)
        try:
            operation_transition(operation, OperationState.CANCELLED, attempt=attempt, error=error,
                                 message=error.get("message", "")[:500])
        except TransitionRefused as refused:
            return _stale(operation, attempt, refused, {"error": error})
        transaction.on_commit(lambda: dispatch.send_advance(execution.pk))
    return True


def timeout_due(execution, now=None) -> bool:
    """Whether the execution's own ``timeout`` has passed, counted from when it last started to
    run: its start, or its latest resume (a resumed execution gets its whole timeout again)."""
    if execution.timeout is None or execution.started_at is None:
        return False
    now, limit = now or timezone.now(), timedelta(seconds=execution.timeout)
    if execution.started_at + limit > now:
        return False  # not due even counted from the start: no need to look for a resume (the tick's common case)
    resumed = (Event.objects.filter(execution_id=execution.pk, type=EventType.WORKFLOW_RESUMED)
               .order_by("-id").values_list("timestamp", flat=True).first())
    return resumed is None or resumed + limit <= now


def reset_operations(execution, states, message):
    """Resume's reset (SPEC §5): the execution's operations in ``states`` go back to ``pending``
    with ``current_retries = 0``; the dependencies still to succeed are counted again; every
    pending operation whose dependencies have all succeeded is sent. Whatever process of a reset
    attempt may still run is stopped once this commits (its attempt is over: a report from it
    is stale), so a step never runs twice at once."""
    superseded = []
    for operation in Operation.objects.filter(execution_id=execution.pk, state__in=states):
        if operation.started_at is not None:
            superseded.append((operation.pk, operation.attempt))
        operation_transition(operation, OperationState.PENDING, message=message, current_retries=0,
                             next_attempt_at=None, error=None, result=None)
    unfinished = (OperationDependency.objects.filter(operation_id=OuterRef("pk"))
                  .exclude(depends_on__state=OperationState.SUCCEEDED)
                  .order_by().values("operation_id").annotate(n=Count("pk")).values("n"))
    pending = Operation.objects.filter(execution_id=execution.pk, state=OperationState.PENDING)
    pending.update(pending_dependencies=Coalesce(Subquery(unfinished), 0))
    send_ready(execution, list(pending.filter(pending_dependencies=0)))
    if superseded:
        stop_attempts(execution.pk, superseded)
