"""The dispatcher: one pass over an execution (:func:`run_pass`), on a manager, when an advance asks for it.

It takes the execution's row lock (one advancer at a time, on any manager), starts a pending
execution, applies the failure mode while a step's failure is unhandled, runs the workflow
function — resuming the live run this process kept of it (``engine.live``), or with durable
replay from the top — until it returns or suspends, and ends the execution — cancelling every
operation that is not terminal first, and only then writing the terminal event. The local steps
the pass makes ready run in it, one transaction each (``workflows_app.local_steps``).
"""

import functools
import logging
import traceback
import uuid

from django.db import connection, transaction

from workflows_app import clock, db, outages, values
from workflows_app.engine import children, failures, grants, live, policy, stopping
from workflows_app.engine.context import WorkflowCancelled, WorkflowFailed
from workflows_app.engine.handles import Suspend
from workflows_app.engine.replay import Replay
from workflows_app.errors import RegistrationError, StepFailed
from workflows_app.local_steps import due, passes
from workflows_app.models import Execution, Operation
from workflows_app.pausing import workflows as workflow_pausing
from workflows_app.registry import get_workflow
from workflows_app.states import (
    EXECUTION_CANCELLING,
    OPERATION_ACTIVE,
    ExecutionStatus,
    FailureMode,
)
from workflows_app.transitions import execution_transition

logger = logging.getLogger(__name__)


def run_pass(execution_id):
    """One pass over the execution, under its row lock (an advance message asks for it:
    ``tasks.advance``). A local step it starts runs once that commits, with no lock held, and
    the pass goes on in a new transaction that records it: a turn of the loop per local step
    (``workflows_app.local_steps``)."""
    for _ in turns(execution_id):
        pass


def turns(execution_id):
    """:func:`run_pass`, a turn at a time: yields once each turn's transaction has ended, before
    the local step it started runs. The test harness runs what a turn deferred to its commit
    there (its transaction is a savepoint of the test's, which never commits), as a commit would."""
    with due.pass_of(execution_id):
        finished = None
        while True:
            due.new_turn()
            with transaction.atomic():
                step = _turn(execution_id, finished)
            yield
            if step is None:
                return
            finished = passes.run(step)


def _turn(execution_id, finished):
    """One transaction of the pass: what the last local step did (``finished``), the pass, and
    the local step to run next, started, if there is one."""
    execution = _lock(execution_id)
    if execution is None:
        logger.warning("pass: execution %s does not exist", execution_id)
        return None
    if finished is not None:
        passes.record(finished)
    # A pending execution never ran: it has no steps to read.
    new = execution.status == ExecutionStatus.PENDING
    if new and execution.deferred(clock.now()):
        return None  # an early advance (a manager's start sends one to every pending execution)
    if new:
        if workflow_pausing.queue_if_paused(execution):
            return None  # it waits queued until its workflow is unpaused
        execution_transition(execution, ExecutionStatus.STARTED, renew_token=True)
    if execution.children_ended:
        children.follow(execution)
    if execution.status == ExecutionStatus.STARTED:
        run = live.take(execution)
        try:
            run = _run(execution, run, new=new)
        except BaseException:
            if run is not None:
                run.close()
            raise
        if run is not None:
            live.keep(run, execution)
    else:
        live.forget(execution.pk)
        if execution.status in EXECUTION_CANCELLING:
            stopping.carry_on(execution)
    # terminal or queued: nothing to do (a cancelled one never runs)
    return passes.start_next(execution, execution.local_waiting)


def _lock(execution_id):
    """The execution, locked for this pass (``FOR NO KEY UPDATE``, which an UPDATE of a column
    no key holds takes), and the pass counted in the same statement: a live run another process
    keeps (``engine.live``) knows from ``passes`` that it was overtaken. In the same statement,
    ``children_ended``: whether a child ended that a step still follows, and ``local_waiting``:
    whether a local step waits for a pass to run it. ``None``: no such row."""
    key = Execution._meta.pk.get_db_prep_value(uuid.UUID(str(execution_id)), connection)
    rows = db.fetch(Execution, _lock_sql(), [key], extra=("children_ended", "local_waiting"))
    return rows[0] if rows else None


@functools.cache
def _lock_sql():
    """:func:`_lock`'s statement, built once per process."""
    meta = Execution._meta
    table = connection.ops.quote_name(meta.db_table)
    pk = f"{table}.{connection.ops.quote_name(meta.pk.column)}"
    return (f"UPDATE {table} SET passes = passes + 1 WHERE {pk} = %s "
            f"RETURNING {db.columns(Execution)}, {children.ended_sql(pk)}, {passes.waiting_sql(pk)}")


def _run(execution, run, *, new=False):
    """One pass: ``run`` is the live run this process kept, brought up to date, or ``None``
    (the function runs from the top, in a new run). ``new``: the execution starts now (it has
    no steps). Returns the pass' run, if there was one."""
    now = clock.now()
    if policy.timeout_due(execution, now):
        end(execution, ExecutionStatus.TIMED_OUT, f"the execution's timeout of {execution.timeout}s passed")
        return run
    if run is None:
        # A new execution has no steps to read, but for those a rerun keeps (engine.reruns).
        fresh = new and not execution.rerun_from
        operations = [] if fresh else list(Operation.objects.filter(execution_id=execution.pk))
        if failures.before_replay(execution, operations, now):
            return None  # running steps are awaited before the code sees the failure
    try:
        definition = get_workflow(execution.workflow_id)
    except RegistrationError as exc:
        end(execution, ExecutionStatus.FAILED, str(exc))
        return run
    retries = definition.on_unhandled == "retry"
    if retries and not failures.retry_due(execution, now):
        return run  # the code raised: its next try waits for its backoff, which the tick ends

    if run is None:
        run = live.start(Replay(execution, operations), definition.func, execution.parameters)
    raised, trace = None, ""
    try:
        raised = run.step()
    except Exception as exc:
        if outages.is_outage(exc):
            raise  # the database went away under the code, which did nothing wrong: the pass runs again
        raised, trace = exc, traceback.format_exc()
    _conclude(execution, run.replay, raised, trace, retries)
    return run


def _conclude(execution, replay, raised, trace, retries):
    """What the function's run (or replay) leads to. The payload it set is kept in every case."""
    _save_payload(execution, replay)
    if replay.nondeterminism is not None:  # even if the code caught it
        return end(execution, ExecutionStatus.FAILED, str(replay.nondeterminism))
    if raised is None or isinstance(raised, Suspend):
        return _settle(execution, replay, suspended=raised is not None)
    if isinstance(raised, WorkflowCancelled):
        return end(execution, ExecutionStatus.CANCELLED, str(raised) or "cancelled by the workflow")
    if isinstance(raised, WorkflowFailed):
        return end(execution, ExecutionStatus.FAILED, str(raised))
    if isinstance(raised, StepFailed):  # a step's failure the code did not catch: never retried
        return end(execution, ExecutionStatus.FAILED, failures.describe(execution, raised.step))
    if retries:
        return failures.schedule_retry(execution, trace)
    end(execution, ExecutionStatus.FAILED, f"the workflow function raised:\n{trace}")


def _settle(execution, replay, *, suspended):
    """The function returned or suspended: what it showed and went on past is handled; a
    failure it never saw fails the execution — at once in no_new_calls and fail_fast (that
    replay was its chance), at its end in continue_while_possible (the rest runs on)."""
    failures.record_handled(execution, replay)
    unseen = replay.unhandled_failures()
    if unseen and not (suspended and execution.failure_mode == FailureMode.CONTINUE_WHILE_POSSIBLE):
        first = failures.earliest([replay.operations[name] for name in unseen])
        return end(execution, ExecutionStatus.FAILED, failures.describe(execution, first.name))
    if not suspended:
        # The pass read every step it had not seen end (``Replay.steps_open``): with none
        # left, there is nothing to cancel, and no query to ask.
        end(execution, ExecutionStatus.COMPLETED, steps_open=replay.steps_open)


def _save_payload(execution, replay):
    if replay.payload_changed:
        Execution.objects.filter(pk=execution.pk).update(payload=execution.payload)


def end(execution, status, error="", *, steps_open=True):
    """Cancel first, terminate after: every operation that is not terminal gets its terminal
    state and event (running ones are asked to stop: SIGTERM, then SIGKILL after
    KILL_GRACE_SECONDS), then the execution its terminal status and event. ``steps_open``:
    False when the caller knows that every step has ended."""
    error = values.clean_text(error)  # a reason or traceback from workflow code may quote anything
    if steps_open:
        stopping.cancel_in_states(execution, OPERATION_ACTIVE, f"the execution ends {status}")
    if grants.holds_end(execution, steps_open=steps_open):  # one cancelled unstarted may still start: not yet
        return execution
    fields = {"error": error} if error else {}
    # The dispatcher's fence: only while the token it read is current (a kill or resume renews it).
    fence = execution.token_hash or None
    if status == ExecutionStatus.CANCELLED and execution.status == ExecutionStatus.STARTED:
        execution_transition(execution, ExecutionStatus.CANCELLING, message=error, fence=fence)
    execution_transition(execution, status, fence=fence, **fields)
