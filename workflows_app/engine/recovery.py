"""Carrying on after a restart (SPEC §9): what a manager does when it starts, and what its tick
does when the broker comes back without the messages it held.

The database says what is to happen; messages are only ever sent again from it:

* every active execution gets an ``advance`` (any manager carries on any execution; a
  cancelling one is stopped again, a kill carried out again);
* operations ``sending`` or ``sent`` are sent again under the *same* attempt id: the agent that
  gets a second delivery of an attempt drops it (fencing), so a message that was never lost
  costs one dropped duplicate, and one that was lost runs once;
* operations ``started`` are reconciled with the workers: each live agent and manager answers
  ``switchyard_running`` with its incarnation and the attempts it runs. An attempt its worker
  still runs is awaited; one that no live worker runs is a lost attempt: a retryable failure
  "lost during restart". A worker that does not answer in time but whose agent still
  heart-beats under that incarnation is left to its heartbeats.
"""

import logging
import signal
import time

import psutil
from django.db import transaction

from agents import local
from agents.models import Agent
from workflows_app import dispatch
from workflows_app.conf import workflows_settings
from workflows_app.engine import reports
from workflows_app.models import Execution, Operation
from workflows_app.states import EXECUTION_RUNNING, ExecutionStatus, OperationState

logger = logging.getLogger(__name__)

#: How long a starting manager waits for the workers' answers.
REPLY_SECONDS = 2.0


def on_manager_start():
    """Everything a starting manager does before it takes messages: stop what an earlier
    manager on this host left running, then carry on every execution."""
    try:
        broker_watch.check(every=0)  # the broker as it is now: a later restart of it is noticed
        killed = kill_orphaned_operations()
        if killed:
            logger.warning("killed %d operation process group(s) an earlier manager on this host left: %s", len(killed), killed)
        started = list(Operation.objects.filter(state=OperationState.STARTED, execution__status__in=EXECUTION_RUNNING))
        lost = reconcile_started(started, ask_workers()) if started else 0
    except Exception:  # the broker is not up yet: heartbeats and the tick reconcile later
        logger.exception("could not ask the workers what they run; started operations are left to their heartbeats")
        lost = 0
    resent = resend_in_flight()
    executions = carry_on_executions()
    logger.info("carried on %d execution(s); %d operation message(s) sent again; %d started operation(s) lost",
                executions, resent, lost)


def carry_on_executions() -> int:
    """An ``advance`` for every execution that is pending, started or stopping."""
    active = [ExecutionStatus.PENDING, *EXECUTION_RUNNING]
    pks = list(Execution.objects.filter(status__in=active).values_list("pk", flat=True))
    for pk in pks:
        dispatch.send_advance(pk)
    return len(pks)


def resend_in_flight() -> int:
    """Send every ``sending`` or ``sent`` operation of a started execution again, same attempt."""
    in_flight = Operation.objects.filter(state__in=[OperationState.SENDING, OperationState.SENT],
                                         execution__status=ExecutionStatus.STARTED)
    operations = list(in_flight)
    dispatch.send_operations(operations)
    return len(operations)


def ask_workers(timeout=REPLY_SECONDS) -> dict:
    """incarnation -> the attempt keys that worker runs, from every worker that answers."""
    from agents.control import RUNNING_COMMAND
    from switchyard.celery import app

    answers = {}
    for reply in app.control.broadcast(RUNNING_COMMAND, reply=True, timeout=timeout) or []:
        for answer in reply.values():
            ok = answer.get("ok") if isinstance(answer, dict) else None
            if isinstance(ok, dict) and ok.get("incarnation"):
                answers[ok["incarnation"]] = set(ok.get("running") or ())
    return answers


def reconcile_started(started, answers) -> int:
    """Fail as lost (retryable) each operation of ``started`` — read *before* the workers were
    asked, so none of them started after the question — that no live worker runs."""
    heart_beating = dict(Agent.objects.online().values_list("name", "incarnation"))
    lost = 0
    for operation in started:
        running = answers.get(operation.incarnation)
        if running is not None and local.attempt_key(operation.pk, operation.attempt) in running:
            continue  # still running: awaited
        if running is None and operation.incarnation and heart_beating.get(operation.agent) == operation.incarnation:
            continue  # its agent lives but did not answer in time: its heartbeats watch it
        with transaction.atomic():
            current = Operation.objects.filter(pk=operation.pk, state=OperationState.STARTED, attempt=operation.attempt).first()
            if current is None:
                continue  # it reported meanwhile
            reports.record_failure(current, current.attempt, {
                "type": "WorkerLost", "traceback": "",
                "message": f"lost during restart: no live worker runs attempt {current.attempt} (it ran on {current.agent})"},
                retryable=True)
        lost += 1
    return lost


def kill_orphaned_operations() -> list[int]:
    """SIGKILL the operation process groups recorded under this host's management queue whose
    pool process outlived its manager (its parent is gone): a manager killed at once leaves them
    running, and a new attempt is about to be sent in their place. Groups of live managers on
    this host are left alone."""
    killed = []
    for entry in local.running_dir(workflows_settings.MANAGEMENT_QUEUE).iterdir():
        pgid = local.recorded_group(entry)
        if pgid is None or not local.group_alive(pgid):
            entry.unlink(missing_ok=True)
            continue
        try:
            orphaned = not _is_manager(psutil.Process(pgid).parent())
        except psutil.NoSuchProcess:  # its leader (the pool process) died: what is left is leftover
            orphaned = True
        if orphaned and local.signal_group(pgid, signal.SIGKILL):
            killed.append(pgid)
            entry.unlink(missing_ok=True)
    return killed


def _is_manager(process) -> bool:
    try:
        return process is not None and any("run_manager" in part for part in process.cmdline())
    except psutil.Error:
        return False


class BrokerWatch:
    """Notices that the broker came back as a new server (Redis' ``run_id`` changed: a restart,
    whose queues a Redis without persistence has lost) and then sends again, from the database,
    whatever was in flight. Brokers whose queues survive a restart (RabbitMQ's durable queues)
    are not watched."""

    def __init__(self):
        self.identity = None
        self.checked_at = 0.0

    def check(self, every=5.0):
        if time.monotonic() - self.checked_at < every:
            return False
        self.checked_at = time.monotonic()
        identity = broker_identity()
        previous, self.identity = self.identity, identity
        if previous is None or identity is None or identity == previous:
            return False
        logger.warning("the broker restarted (%s -> %s): sending again what was in flight", previous, identity)
        resend_in_flight()
        carry_on_executions()
        return True


#: The manager's watch, read at its start and then by its tick.
broker_watch = BrokerWatch()


def broker_identity():
    """The broker server's identity (Redis' run_id), or None for a broker that keeps its queues."""
    from switchyard.celery import app

    if not str(app.conf.broker_url or "").startswith(("redis://", "rediss://", "redis+socket://", "unix://")):
        return None
    with app.connection_for_write() as connection:
        return connection.default_channel.client.info("server").get("run_id")
