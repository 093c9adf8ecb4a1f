"""The engine's tick: the safety net for every stored deadline and every lost message. A manager
runs it every half second, with the agents' own check for offline agents
(``agents.worker.manager.Tick``).

Each pass is idempotent (every change is a compare-and-set), so any number of managers may
tick at once.

A pass is made of parts (:func:`run`, :func:`run_deadlines`): due retries, timed-out operations,
due executions, deferred starts, schedules, the sweep for lost messages, the broker's watch.
In a manager each part runs whatever another one raised: its error is logged (once with its
traceback, then one line a pass until the part works again) and the pass goes on. Only an
unreachable database ends the pass (``outages.is_outage``): every part needs it, and the
manager's tick says so once rather than once a part.
"""

import logging
from datetime import timedelta

from django.db.models import Min

from workflows_app import broker, clock, outages, values, wire
from workflows_app.conf import workflows_settings
from workflows_app.engine import (
    children,
    concurrency,
    failures,
    policy,
    progress,
    recovery,
    reports,
    schedules,
    starts,
    stopping,
    waits,
)
from workflows_app.flow import gate
from workflows_app.local_steps import passes
from workflows_app.models import Execution, Operation
from workflows_app.models.operation import task_id_for
from workflows_app.transitions import grant_deadline
from workflows_app.pausing import workflows as workflow_pausing
from workflows_app.states import (
    EXECUTION_CANCELLING,
    ExecutionStatus,
    FailureMode,
    OperationState,
    StepKind,
)

logger = logging.getLogger(__name__)

#: A message older than this with nothing to show for it is sent again.
RESEND_AFTER_SECONDS = 30


#: The sweep for lost messages is heavier and rarely finds anything: not on every tick.
SWEEP_EVERY_SECONDS = 10
_last_sweep = None
#: Started executions the sweep looks at per pass, in the order of their id; the next pass
#: carries on after the last one (and from the first again once it reached the end). A pass's
#: work does not grow with the number of started executions (100,000 waiting for an event):
#: only the time until the sweep has looked at each of them, SWEEP_EVERY_SECONDS per batch
#: (500 s for 100,000). Small enough that PostgreSQL does not compile the batch's query (JIT).
SWEEP_BATCH = 2000
_sweep_after = None
#: Seconds between two looks at the broker's identity (a restarted Redis lost its queues).
BROKER_CHECK_SECONDS = 3


def run(now=None):
    """One pass of the tick (a manager runs one every half second), each part whatever another
    part raised (:func:`part`)."""
    global _last_sweep
    now = now or clock.now()
    run_deadlines(now, guarded=True)
    if _last_sweep is None or (now - _last_sweep).total_seconds() >= SWEEP_EVERY_SECONDS:
        _last_sweep = now
        part("resend_stuck_messages", resend_stuck_messages, now)
    # A broker that is down: the next pass looks again.
    part("broker_watch", recovery.broker_watch.check, every=BROKER_CHECK_SECONDS)


def run_deadlines(now, *, guarded=False):
    """What has fallen due by ``now``: retries whose back-off passed are sent, operations past
    their timeout fail, executions whose stored deadline passed are woken, deferred starts and
    schedules' slots that fell due start. ``guarded`` (a manager's pass): each part runs whatever
    another raised (:func:`part`); else the first error is raised (the test harness shows it)."""
    call = part if guarded else _call
    call("send_due_retries", progress.send_due_retries, now)
    call("flow.drain_waiting", gate.drain_waiting)  # steps a limit held back (the managers also look in between)
    call("fail_timed_out_operations", fail_timed_out_operations, now)
    call("wake_due_executions", wake_due_executions, now)
    call("starts.send_due", starts.send_due, now)
    call("schedules.fire_due", schedules.fire_due, now)


#: The parts of the pass whose last run failed: the next failure of one is logged without its
#: traceback (but at DEBUG), until it works again.
_failing_parts = set()


def part(name, function, *args, **kwargs) -> bool:
    """``function(*args, **kwargs)``, one part of a pass: whether it ran without an error. An
    error is logged — one line naming the part; its traceback the first time in a row (later ones
    at DEBUG) — and not raised, so that the pass goes on with the next part. But an unreachable
    database is raised (``outages.is_outage``): no part can run without it, and the manager's
    tick rides it out (``agents.worker.lifecycle.Ticker``)."""
    try:
        function(*args, **kwargs)
    except Exception as exc:
        if outages.is_outage(exc):
            raise
        if name in _failing_parts:
            logger.error("tick: %s failed again: %s: %s", name, type(exc).__name__, exc)
            logger.debug("tick: %s failed", name, exc_info=True)
        else:
            _failing_parts.add(name)
            logger.error("tick: %s failed: %s: %s (the pass goes on)", name, type(exc).__name__, exc, exc_info=True)
        return False
    if name in _failing_parts:
        _failing_parts.discard(name)
        logger.warning("tick: %s works again", name)
    return True


def _call(name, function, *args, **kwargs) -> bool:
    function(*args, **kwargs)
    return True


def next_deadline(after):
    """The earliest stored deadline later than ``after`` that :func:`run_deadlines` acts on, or
    ``None``: an open wait's (a sleep, an event wait's timeout, a workflow's retry), a retry's
    back-off, a started operation's or execution's timeout, a failure's wait for the running
    steps, a cancel's CANCEL_TIMEOUT, a schedule's next slot, a deferred start. The test harness moves its clock there."""
    found = [waits.next_deadline(after), schedules.next_deadline(after), starts.next_deadline(after),
             gate.next_deadline(after),
             Operation.objects.filter(state=OperationState.RESCHEDULED, next_attempt_at__gt=after)
             .aggregate(at=Min("next_attempt_at"))["at"]]
    for started_at, timeout in Operation.objects.filter(state=OperationState.STARTED, timeout__isnull=False) \
            .values_list("started_at", "timeout"):
        found.append(started_at + timedelta(seconds=timeout))
    for started_at, timeout in Execution.objects.filter(status=ExecutionStatus.STARTED, timeout__isnull=False) \
            .values_list("started_at", "timeout"):
        found.append(started_at + timedelta(seconds=timeout))
    stop_wait = failures.stop_wait_seconds()
    for failed_at, wait, mode in _failing().values_list("failed_at", "execution__wait_after_fail",
                                                         "execution__failure_mode"):
        found.append(failed_at + timedelta(seconds=stop_wait if mode == FailureMode.FAIL_FAST else wait))
    limit = timedelta(seconds=workflows_settings.CANCEL_TIMEOUT)
    for execution in Execution.objects.filter(status__in=EXECUTION_CANCELLING).only("pk"):
        since = stopping.cancelling_since(execution)
        if since is not None:
            found.append(since + limit)
    later = [at for at in found if at is not None and at > after]
    return min(later, default=None)


def _failing():
    """The failed operations whose failure is not handled yet, of started executions outside
    continue_while_possible: their execution waits for its running steps, within a limit."""
    return (Operation.objects.filter(execution__status=ExecutionStatus.STARTED, state=OperationState.FAILED,
                                     failure_handled=False)
            .exclude(execution__failure_mode=FailureMode.CONTINUE_WHILE_POSSIBLE))


def fail_timed_out_operations(now):
    """An operation's timeout, measured from its stored start, fails the attempt (retryable)."""
    overdue = Operation.objects.filter(state=OperationState.STARTED, timeout__isnull=False)
    for operation in overdue.select_related(None):
        # A local step's own pass interrupts it at its timeout: the tick fails one whose pass is gone.
        grace = passes.OVERDUE_GRACE_SECONDS if operation.local else 0
        if operation.started_at + timedelta(seconds=operation.timeout + grace) <= now:
            reports.record_failure(operation, operation.attempt, {
                "type": "OperationTimeout", "message": f"no result within its timeout of {operation.timeout}s", "traceback": ""},
                retryable=True, stop_process=True)


def wake_due_executions(now):
    """Executions whose own deadline passed (timeout, wait_after_fail, CANCEL_TIMEOUT) are
    advanced; so is one that can make no progress (its wake-up message was lost), and one with
    a stored wait (``sleep``, an event wait's timeout) whose deadline passed."""
    started = Execution.objects.filter(status=ExecutionStatus.STARTED)
    due = waits.due_executions(now)
    for execution in Execution.objects.filter(status=ExecutionStatus.CANCELLING).only("pk"):
        if stopping.cancel_timed_out(execution, now):
            due.add(execution.pk)
    # On the partial index of started executions with a timeout: those without one are not read.
    for execution in started.filter(timeout__isnull=False).order_by().only("pk", "started_at", "timeout"):
        if policy.timeout_due(execution, now):
            due.add(execution.pk)
    # A failure not handled yet, outside continue_while_possible, waits for the running steps
    # at most wait_after_fail (no_new_calls), and for the processes of those it cancelled at most
    # stop_wait_seconds (engine.failures); once handled it no longer does.
    stop_wait = failures.stop_wait_seconds()
    for execution_id, failed_at, wait, mode in _failing().values_list("execution_id", "failed_at",
                                                                   "execution__wait_after_fail", "execution__failure_mode"):
        if failed_at + timedelta(seconds=stop_wait if mode == FailureMode.FAIL_FAST else wait) <= now:
            due.add(execution_id)
    for pk in due:
        broker.send_advance(pk)


def resend_stuck_messages(now):
    """Lost messages are sent again from database state: a pending execution's start, an
    operation stuck in ``sending`` (same attempt: the agent drops a duplicate), a started
    execution that nothing in flight will ever wake (SWEEP_BATCH of the started ones a pass),
    and a parent whose child's end did not wake it."""
    stale = now - timedelta(seconds=RESEND_AFTER_SECONDS)
    progress.publish(Operation.objects.filter(state=OperationState.SENDING, sending_at__lte=stale))
    resend_held_by_dead_managers(now)
    resend_lost_from_agent_queues(now)
    unstarted = list(starts.stale_unstarted(stale).order_by().values_list("pk", flat=True))
    # One that only waits for an event or a timer is moved by the event's advance or the tick.
    after, upto = _next_batch()
    batch = Execution.objects.filter(status=ExecutionStatus.STARTED, started_at__lte=stale).order_by()
    batch = batch.filter(pk__gt=after) if after is not None else batch
    batch = batch.filter(pk__lte=upto) if upto is not None else batch
    idle = [execution.pk for execution in
            batch.exclude(waits.only_waiting(stale, after, upto)).only("pk", "status", "failure_mode")
            if not progress.can_progress(execution)]
    # A backlog (10,000 starts at once) is not a loss: while at least as many messages wait in
    # the management queue as there are executions to wake, their wake-ups are queued there, and
    # sending them again would only make the backlog longer.
    backlog = broker.waiting_messages(workflows_settings.MANAGEMENT_QUEUE)
    if unstarted or idle:
        if backlog is not None and backlog >= len(unstarted) + len(idle):
            logger.info("%s executions wait for a manager behind %s queued messages: not sent again",
                        len(unstarted) + len(idle), backlog)
        else:
            for pk in unstarted + idle:
                broker.send_advance(pk)
    concurrency.start_every_free_key()
    workflow_pausing.start_unpaused()
    schedules.start_every_free_buffered()
    children.wake_parents_of_ended()
    # A stopping execution that no running operation will ever wake (or whose stop was cut short).
    for pk in Execution.objects.filter(status__in=EXECUTION_CANCELLING).values_list("pk", flat=True):
        if not Operation.objects.filter(execution_id=pk, state=OperationState.STARTED).exists():
            broker.send_advance(pk)
    # The operations a cancel awaits are asked again to stop: a worker that did not hear the ask
    # (it was reconnecting, or started the attempt just after the ask) hears this one.
    awaited = list(Operation.objects.filter(execution__status=ExecutionStatus.CANCELLING, state=OperationState.STARTED,
                                            kind=StepKind.OPERATION).values_list("pk", "attempt"))
    if awaited:
        broker.broadcast_cancel(awaited)


def resend_held_by_dead_managers(now):
    """An operation of the management queue still ``sent`` a claim's whole timeout after it was
    sent is sent again (same attempt: a duplicate is dropped by fencing), and its time of sending
    moves on, so that it is sent at most once per timeout.

    Why: on Redis a message a manager took is held unacknowledged until the broker's visibility
    timeout (an hour) when that manager dies; a manager that starts sends again what was in flight,
    but one that died for good (fewer managers now) or whose place was taken by no new one leaves
    its messages held. Every manager consumes the management queue, so a message of it that waits
    longer than a claim's timeout — the longest a delivery waits for a claim's answer before it goes
    back to the queue — without a backlog in front of it was lost. An agent's queue has a single
    consumer, its agent, whose next run gives back what its last one held; what that run never
    held is :func:`resend_lost_from_agent_queues`'."""
    held_since = now - timedelta(seconds=wire.claim_seconds())
    overdue = list(Operation.objects.filter(state=OperationState.SENT, agent=workflows_settings.MANAGEMENT_QUEUE,
                                            sending_at__lte=held_since, execution__status=ExecutionStatus.STARTED))
    if not overdue:
        return 0
    backlog = broker.waiting_messages(workflows_settings.MANAGEMENT_QUEUE)
    if backlog is not None and backlog >= len(overdue):
        return 0  # behind a backlog, not lost
    again = _send_again(overdue, now)
    if again:
        logger.warning("%d operation(s) of the management queue sent again: still not started %ss after they were sent",
                       len(again), wire.claim_seconds())
    return len(again)


#: An agent's queue holding more messages than this is not read through by
#: :func:`resend_lost_from_agent_queues`: what is sent to it is behind a backlog, and looked for
#: once the backlog is shorter.
AGENT_QUEUE_READ_LIMIT = 2000


def resend_lost_from_agent_queues(now):
    """An operation ``sent`` to an agent RESEND_AFTER_SECONDS ago and still not started whose
    message is nowhere — neither waiting in the agent's queue nor held unacknowledged by a
    consumer of it — is sent again (same attempt: were it somewhere after all, its second
    delivery is dropped by fencing), and its time of sending moves on; returns how many.

    Why: on Redis a worker takes a message with ``BRPOP`` and only then records it as held
    (kombu's ``unacked`` hash). An agent killed (SIGKILL, the OOM killer) between the two loses
    the message: its next run gives back what it held, and this was not held. Redis only
    (:func:`broker.task_ids_held`): RabbitMQ gives a dead consumer's messages back itself."""
    stale = now - timedelta(seconds=RESEND_AFTER_SECONDS)
    overdue = list(Operation.objects.filter(state=OperationState.SENT, sending_at__lte=stale, kind=StepKind.OPERATION,
                                            execution__status=ExecutionStatus.STARTED)
                   .exclude(agent=workflows_settings.MANAGEMENT_QUEUE))
    lost = []
    for agent in sorted({op.agent for op in overdue}):
        held = broker.task_ids_held(agent, AGENT_QUEUE_READ_LIMIT)
        if held is not None:
            lost += [op for op in overdue if op.agent == agent and task_id_for(op.pk, op.attempt) not in held]
    again = _send_again(lost, now)
    if again:
        logger.warning("%d operation(s) sent again: still not started %ss after they were sent, and their messages are "
                       "in no agent's queue (%s)", len(again), RESEND_AFTER_SECONDS,
                       ", ".join(sorted({values.shown_name(op.agent) for op in again})))
    return len(again)


def _send_again(operations, now) -> list:
    """Send ``operations`` again under their attempt — those still ``sent`` in the attempt they were
    read in: one that started (or moved on) meanwhile is not —, and move their time of sending on,
    so that each is sent again at most once per wait. Returns those sent."""
    if not operations:
        return []
    still = set(Operation.objects.filter(pk__in=[op.pk for op in operations], state=OperationState.SENT)
                .values_list("pk", "attempt"))
    again = [op for op in operations if (op.pk, op.attempt) in still]
    if again:
        granted_until = grant_deadline(now)
        Operation.objects.filter(pk__in=[op.pk for op in again], state=OperationState.SENT).update(
            sending_at=now, granted_until=granted_until)
        for op in again:
            op.sending_at, op.granted_until = now, granted_until
        progress.publish(again)
    return again


def _next_batch():
    """The ids (``after``, ``upto``] of the next SWEEP_BATCH started executions after those of
    the sweep's last pass (None: no bound; from the first again once it reached the end): a
    range of the partial index of started executions, whose end one look-up in it finds."""
    global _sweep_after
    after = _sweep_after
    started = Execution.objects.filter(status=ExecutionStatus.STARTED).order_by("pk")
    if after is not None:
        started = started.filter(pk__gt=after)
    last = list(started.values_list("pk", flat=True)[SWEEP_BATCH - 1:SWEEP_BATCH])
    _sweep_after = last[0] if last else None
    return after, _sweep_after
