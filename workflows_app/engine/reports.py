"""What the agents (and the tick, for lost or timed-out attempts) report about an attempt: its
result, its failure (with the retry policy), or that it stopped because its execution is
cancelling; the fan-in count of its dependents; and when the workflow function must run again.

A report is recorded under the execution's row lock, so that the count of dependencies cannot
race with a dispatcher adding steps. A success takes it ``FOR SHARE``, in its transition's
statement: successes of one execution do not wait for each other, and "nothing left in flight:
wake the workflow" is asked after the commit, where the later of two last completions sees
both. A failure and a cancel take it ``FOR NO KEY UPDATE`` (``progress.lock_execution``).

A report for an attempt that is no longer current changes nothing: it is kept as a
``stale_report`` event with what it said.
"""

import functools
from datetime import timedelta

from django.db import connection, transaction

from workflows_app import broker, clock, db, values, wire
from workflows_app.engine import outcomes, policy, progress, stopping
from workflows_app.errors import TransitionRefused, ValueRefused
from workflows_app.local_steps import due
from workflows_app.models import Operation, OperationDependency
from workflows_app.states import EventType, ExecutionStatus, FailureMode, OperationState
from workflows_app.transitions import operation_transition, record_event


def record_outcome(operation, attempt, outcome):
    """Record what an attempt did, as an agent reports it (``outcome``: the fields of an
    ``outcome`` report: ``outcome`` — succeeded, failed or cancelled — and ``result``, ``error``,
    ``retryable``, ``retry_after``), or as a local step's pass found it."""
    if outcome["outcome"] == wire.Outcome.SUCCEEDED:
        return record_success(operation, attempt, outcome.get("result"))
    if outcome["outcome"] == wire.Outcome.CANCELLED:
        return record_cancelled(operation, attempt, outcome["error"])
    return record_failure(operation, attempt, outcome["error"], retryable=outcome.get("retryable", False),
                          retry_after=outcome.get("retry_after"))


def record_success(operation, attempt, result):
    """Record an attempt's result; count down its dependents; send those now ready; wake the
    workflow if it waits on this step, or if its graph has nothing left in flight. A result that
    may not be stored (``values.check``) fails the attempt for good, naming why: retrying would
    only produce it again."""
    try:
        values.check(result, "result")
    except ValueRefused as refused:
        return record_failure(operation, attempt, outcomes.unstorable_result(refused), retryable=False)
    # No savepoint: no statement here fails and is carried on from (a refused transition changes
    # no row), so inside a batch of reports (``agents.intake``) a savepoint would be two more
    # statements per operation for nothing.
    with transaction.atomic(savepoint=False):
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
        sent = progress.send_ready(execution, ready, failed) if ready else []
        if operation.awaited:
            _wake(execution)
        elif not sent and not (still_waiting and execution.failure_mode != FailureMode.CONTINUE_WHILE_POSSIBLE):
            # Not idle when it just sent something, nor when a dependent still waits for another
            # dependency: that one is in flight, due for a retry, or failed — and outside
            # continue_while_possible a failure wakes the workflow itself, which cancels every
            # pending operation. (In continue_while_possible the dispatcher cancels the dependents
            # of a failed step; until it has, only the idle check can wake the workflow.)
            if due.needs_advance(execution.pk):
                transaction.on_commit(lambda: _wake_if_idle(execution))
    return True


def _wake(execution):
    """The workflow is to see what was recorded: an ``advance`` once this commits — unless the
    pass over it records its own local step, and goes on at once (``local_steps.due``)."""
    if due.needs_advance(execution.pk):
        broker.send_advance_on_commit(execution)


def _wake_if_idle(execution):
    """After a commit, in a fresh snapshot: of two last completions, each commits before it
    looks, so the later one to look sees both and wakes the workflow (both may: an advance with
    nothing to do is harmless)."""
    if not progress.can_progress(execution):
        broker.send_advance(execution.pk, execution.workflow_id)


def _count_down_dependents(operation):
    """One dependency fewer for each operation that depends on ``operation``; returns those now
    ready (pending, nothing left to wait for), loaded; whether one is still pending with
    dependencies left; and whether the execution has a failure not handled yet (None when
    nothing depends on ``operation``: then nothing is sent). One statement: most operations have
    no dependents, and this is on the path of every completion (in a chain, it also loads the
    next step, and whether it may be sent)."""
    op = Operation._meta
    dependents = db.fetch(Operation, _count_down_sql(), [op.pk.get_db_prep_value(operation.pk, connection),
                                                         op.get_field("execution").get_db_prep_value(operation.execution_id, connection),
                                                         OperationState.FAILED.value, False], extra=("execution_failed",))
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
    handled = q(op.get_field("failure_handled").column)
    return (f"UPDATE {table} SET {count} = {count} - 1 WHERE {pk} IN "
            f"(SELECT {q(dep.get_field('operation').column)} FROM {q(dep.db_table)} WHERE {q(dep.get_field('depends_on').column)} = %s) "
            f"RETURNING {db.columns(Operation)}, "
            f"EXISTS (SELECT 1 FROM {table} f WHERE f.{execution} = %s AND f.{state} = %s AND f.{handled} = %s)")


def record_failure(operation, attempt, error, *, retryable, retry_after=None, stop_process=False):
    """Record a failed attempt: ``rescheduled`` when the policy allows a retry, else ``failed``.

    ``error`` is ``{"type", "message", "traceback"}``. A retry is a new call: not while the
    execution is cancelling, nor in no_new_calls/fail_fast while a failure is unhandled.
    ``stop_process``: the attempt may still run (its timeout passed): kill its process group.
    """
    error = values.clean_error(error)
    with transaction.atomic():
        execution = progress.lock_execution(operation.execution_id)
        delay = policy.retry_delay(operation, retry_after) if retryable else None
        if delay is not None and policy.allows_new_calls(execution):
            target, fields = OperationState.RESCHEDULED, {
                "current_retries": operation.current_retries + 1,
                "next_attempt_at": clock.now() + timedelta(seconds=delay),
            }
        else:
            target, fields = OperationState.FAILED, {}
            if delay is not None:  # a retry it may not make: another step's failure stopped it
                error = _caused_by_another(execution, error)
        try:
            # The event keeps each attempt's error, which the next attempt's replaces on the operation.
            operation_transition(operation, target, attempt=attempt, error=error, message=error.get("message", "")[:500],
                                 data={"error": error}, **fields)
        except TransitionRefused as refused:
            return _stale(operation, attempt, refused, {"error": error})
        if stop_process:
            stopping.stop_attempts(execution.pk, [(operation.pk, attempt)])
        if target == OperationState.FAILED:
            _wake(execution)
    return True


def record_lost(operation, attempt, message):
    """Record an attempt lost with its worker: a retryable failure ``WorkerLost``."""
    return record_failure(operation, attempt, {"type": "WorkerLost", "message": message, "traceback": ""}, retryable=True)


def _caused_by_another(execution, error):
    """``error`` naming, as its ``cause``, the unhandled failure that keeps a step from being
    retried: the workflow code that is shown this step's failure is shown that one too."""
    cause = policy.first_unhandled_failure(execution) if execution.status == ExecutionStatus.STARTED else None
    return {**error, "cause": cause} if cause else error


def record_cancelled(operation, attempt, error):
    """A running attempt that stopped because its execution is cancelling (``OperationCancelled``)."""
    error = values.clean_error(error)
    with transaction.atomic():
        execution = progress.lock_execution(operation.execution_id)
        try:
            operation_transition(operation, OperationState.CANCELLED, attempt=attempt, error=error,
                                 message=error.get("message", "")[:500], granted_until=None)
        except TransitionRefused as refused:
            return _stale(operation, attempt, refused, {"error": error})
        _wake(execution)
    return True


#: The key of the ``log`` event data that says an attempt's processes are gone (its value: the attempt).
PROCESSES_GONE = "processes_gone"


def record_processes_gone(attempts):
    """The kill of these attempts (pairs of operation id and attempt) is over: their process
    groups are gone. Each gets a ``log`` event saying so; an execution whose failure mode
    cancelled running steps waits for it before its code sees the failure, and is woken."""
    attempt_of = {str(pk): attempt for pk, attempt in attempts}
    rows = Operation.objects.filter(pk__in=list(attempt_of)).values_list("pk", "name", "execution_id")
    for pk, name, execution_id in rows:
        attempt = attempt_of[str(pk)]
        record_event(execution_id, EventType.LOG, f"the processes of attempt {attempt} are gone",
                     {PROCESSES_GONE: attempt}, operation=name)
    waiting = (Operation.objects.filter(execution_id__in={execution_id for _, _, execution_id in rows},
                                        execution__status=ExecutionStatus.STARTED, state=OperationState.FAILED,
                                        failure_handled=False)
               .order_by().values_list("execution_id", flat=True).distinct())
    for execution_id in waiting:
        broker.send_advance(execution_id)


def record_log(execution_id, step, message, data):
    """An operation's ``ctx.log(message, **data)``: its message cleaned, its data checked
    (``ValueRefused``, raised in the operation's code)."""
    values.check(data, "the log's data")
    return record_event(execution_id, EventType.LOG, values.clean_text(message), data, operation=step)


def _stale(operation, attempt, refused, data):
    """A report that changes nothing: kept as a ``stale_report`` event with what it said."""
    record_event(operation.execution_id, EventType.STALE_REPORT, f"report for attempt {attempt} ignored: {refused}",
                 {"attempt": attempt, **data}, operation=operation.name)
    return False
