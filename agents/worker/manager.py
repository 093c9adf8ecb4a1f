"""A manager's own work beside its Celery worker: what it does when it starts, and
the tick it runs every half second.

When it starts, before it takes messages:

1. it SIGKILLs the operation process groups an earlier manager on this host left running
   (a manager killed at once leaves them; a new attempt is about to be sent in their place);
2. it reconciles ``started`` operations with the workers: each live agent and manager answers
   ``switchyard_running`` with its incarnation and the attempts it runs. An attempt its worker
   still runs is awaited; one that no live worker runs is a lost attempt, a retryable failure
   "lost during restart". A worker that does not answer in time but whose agent still
   heart-beats under that incarnation is left to its heartbeats, and so is an attempt such an
   agent claimed less than a claim's timeout ago (it may still wait for the answer, which a
   manager that died stored and never sent);
3. it carries on from the database (``engine.recovery``): what was in flight is sent again and
   every active execution is advanced.

Its tick (:class:`Tick`) is the engine's (``engine.tick.run``) plus the agents' liveness:
an agent silent for ``AGENT_OFFLINE_AFTER_SECONDS`` lost its started operations. After a
database outage it saw, the tick does what a starting manager does (2 and 3), once the agents
have had time to heart-beat again. It asks the workers, now and then, to send again the outcomes
of attempts still started here that ended on them a while ago (:class:`LostOutcomes`). With
``WORKFLOWS["RETENTION_DAYS"]`` set, it also starts the daily purge of old ended executions
(:class:`DailyPurge`).
"""

import logging
import signal
import threading
import time
from datetime import timedelta

import psutil
from django.db import connections, transaction
from django.db.models import Q
from django.utils import timezone

from agents.models import Agent
from agents.worker import control, inbox, link, local
from agents.worker.forks import no_fork_meanwhile
from workflows_app import broker, outages, retention
from workflows_app.conf import workflows_settings
from workflows_app.engine import recovery, reports, tick
from workflows_app.models import Operation
from workflows_app.states import EXECUTION_WITH_ATTEMPTS, OperationState, StepKind

logger = logging.getLogger(__name__)

#: How long a starting manager waits for the workers' answers.
REPLY_SECONDS = 2.0
#: How long, at most, it then stores the reports waiting before it judges what was lost.
DRAIN_SECONDS = 10.0
#: Seconds between two ticks.
TICK_SECONDS = 0.5
#: The first purge of RETENTION_DAYS comes this long after the manager's first tick — not while
#: it carries every active execution on after a start —, then one every PURGE_EVERY; one that
#: failed (the database was down) is tried again after PURGE_RETRY.
PURGE_FIRST_AFTER = timedelta(minutes=5)
PURGE_EVERY = timedelta(days=1)
PURGE_RETRY = timedelta(hours=1)
#: How often the tick asks for lost outcomes, and how many started attempts it names at a time.
RESEND_EVERY_SECONDS = 15.0
RESEND_BATCH = 1000


def on_start():
    """Everything a starting manager does before it takes messages (the database may be down
    for a while: it waits for it, DATABASE_OUTAGE_TOLERANCE at most)."""
    try:
        recovery.broker_watch.check(every=0)  # the broker as it is now: a later restart of it is noticed
    except Exception:  # the broker is not up yet: the tick looks again
        logger.exception("could not reach the broker")
    inbox.prepare()
    killed = kill_orphaned_operations()
    if killed:
        logger.warning("killed %d operation process group(s) an earlier manager on this host left: %s", len(killed), killed)
    outages.ride_out("carrying on after a start", carry_on)


def carry_on():
    """Reconcile started operations with the workers, send again what was in flight, advance
    every active execution."""
    # A child execution's step runs on no worker: its child is carried on as an execution.
    started = list(Operation.objects.filter(state=OperationState.STARTED, kind=StepKind.OPERATION,
                                            execution__status__in=EXECUTION_WITH_ATTEMPTS))
    try:
        answers = ask_workers() if started else {}
    except Exception:  # the broker is not up yet: heartbeats and the tick reconcile later
        logger.exception("could not ask the workers what they run; started operations are left to their heartbeats")
        started = []
    if started:
        # What ended reported before its worker stopped listing it as running: store those
        # reports first, or an attempt that ended would be taken for lost and run again.
        inbox.Inbox().drain(DRAIN_SECONDS)
    lost = reconcile_started(started, answers) if started else 0
    try:
        resent = recovery.resend_in_flight()
        executions = recovery.carry_on_executions()
    except Exception as exc:
        if outages.is_outage(exc):
            raise
        # The broker failed (it restarts): the tick's watch of the broker sends again what was in
        # flight once it is back, and its sweep what stays unsent; the manager goes on starting.
        logger.exception("could not send again what was in flight; the tick sends it once the broker answers")
        resent = executions = 0
    logger.info("carried on %d execution(s); %d operation message(s) sent again; %d started operation(s) lost",
                executions, resent, lost)


class Tick:
    """A manager's tick. The first pass after one that failed because the database was
    unreachable is the first since it came back; from then on:

    * the offline sweep waits AGENT_OFFLINE_AFTER_SECONDS, since no agent could heart-beat
      while the database was down, and their silence then says nothing about them;
    * after two heartbeat periods, when the agents have beaten again, it carries on as a
      starting manager does (:func:`carry_on`): an attempt whose report its agent gave up on
      after DATABASE_OUTAGE_TOLERANCE is no longer running anywhere, so it is lost (retryable).
    """

    def __init__(self):
        self.database_back_at = None
        self.carried_on = True
        self._database_was_down = False
        self.purge = DailyPurge()
        self.lost_outcomes = LostOutcomes()

    def __call__(self, now=None):
        if self._database_was_down:
            self.database_back_at, self.carried_on = time.monotonic(), False
        try:
            self._pass(now or timezone.now())
        except Exception as exc:
            self._database_was_down = outages.is_outage(exc)
            raise
        if self._database_was_down:
            self._database_was_down = False
            logger.warning("the database is back: agents are judged offline again in %ss, and what they run is "
                           "reconciled once they have heart-beaten", workflows_settings.AGENT_OFFLINE_AFTER_SECONDS)

    def _pass(self, now):
        tick.run(now)
        self.purge(now)
        self.lost_outcomes(now)
        since_back = None if self.database_back_at is None else time.monotonic() - self.database_back_at
        if not self.carried_on and since_back >= 2 * workflows_settings.AGENT_HEARTBEAT_SECONDS:
            self.carried_on = True
            carry_on()
        if since_back is None or since_back >= workflows_settings.AGENT_OFFLINE_AFTER_SECONDS:
            fail_operations_of_offline_agents(now)


class LostOutcomes:
    """Every RESEND_EVERY_SECONDS, asks every worker to send again the outcomes of up to
    RESEND_BATCH attempts started more than ``control.RESEND_AFTER_SECONDS`` ago, oldest first,
    going on from where the last look ended (so that long-running attempts, which are named on
    every turn, do not hide the others).

    Why: on Redis a consumer takes a message with BRPOP, which removes it from the queue as it
    hands it over; a manager killed at that moment takes the report with it, acknowledged or not.
    Its attempt would stay started for as long as its agent lives. The worker that ran it keeps
    its outcome for an hour (``local.remember_outcome``) and sends it again when asked; one that
    still runs it, or never did, has nothing to send."""

    def __init__(self):
        self.due_at = 0.0
        self.after = None  # (started_at, pk) of the last attempt named

    def __call__(self, now):
        if time.monotonic() < self.due_at:
            return None
        self.due_at = time.monotonic() + RESEND_EVERY_SECONDS
        started = Operation.objects.filter(state=OperationState.STARTED, kind=StepKind.OPERATION,
                                           started_at__lt=now - timedelta(seconds=control.RESEND_AFTER_SECONDS))
        if self.after is not None:
            at, pk = self.after
            started = started.filter(Q(started_at__gt=at) | Q(started_at=at, pk__gt=pk))
        batch = list(started.order_by("started_at", "pk").values_list("pk", "attempt", "started_at")[:RESEND_BATCH])
        self.after = (batch[-1][2], batch[-1][0]) if len(batch) == RESEND_BATCH else None
        if batch:
            broker.ask_resend_outcomes([(pk, attempt) for pk, attempt, _ in batch])
        return len(batch)


class DailyPurge:
    """``WORKFLOWS["RETENTION_DAYS"]``: once a day, delete the executions that ended more than that
    many days ago (``retention.purge``), in a thread of its own — a purge of a large history takes
    minutes, which the tick, due every half second, cannot wait for. Each batch is one short
    transaction, taken inside ``no_fork_meanwhile`` (a pool process forked in the middle of a
    SQLite write could never write); the pool forks freely between batches.

    Every manager purges once a day, counted from its own start: purges that meet share the work
    (retention's batches skip the executions another purge holds) and each counts only the rows
    it deleted itself, so nothing fails or is counted twice."""

    def __init__(self):
        self.due_at = None
        self.thread = None

    def __call__(self, now):
        """Start the purge if it is due and none is running; returns its thread, if started."""
        days = workflows_settings.RETENTION_DAYS
        if days is None or (self.thread is not None and self.thread.is_alive()):
            return None
        if self.due_at is None:
            self.due_at = now + PURGE_FIRST_AFTER
        if now < self.due_at:
            return None
        self.due_at = now + PURGE_EVERY
        self.thread = threading.Thread(target=self.run, args=(days, now), name="retention", daemon=True)
        self.thread.start()
        return self.thread

    def run(self, days, now):
        try:
            counts = retention.purge(days, now=now, guard=no_fork_meanwhile)
        except Exception:
            self.due_at = now + PURGE_RETRY
            logger.exception("the purge of executions ended over %s days ago failed; tried again in %s", days, PURGE_RETRY)
        else:
            logger.info("purged the executions ended over %s days ago: %d executions, %d operations, %d events "
                        "deleted; %d left with a tree still active", days, counts.executions, counts.operations,
                        counts.events, counts.kept)
        finally:
            connections.close_all()  # this thread's own connection (Django's are per thread)


def ask_workers(timeout=REPLY_SECONDS) -> dict:
    """(agent, incarnation) -> the attempt keys that worker runs, from every worker that answers
    with its agent's proof: one agent cannot answer for another's run."""
    return {(answer["agent"], answer["incarnation"]): set(answer.get("running") or ())
            for answer in broker.ask_running(timeout) if answer.get("incarnation")}


def reconcile_started(started, answers) -> int:
    """Record lost (retryable) each operation of ``started`` — read *before* the workers were
    asked, so none of them started after the question — that no live worker runs."""
    heart_beating = dict(Agent.objects.online().values_list("name", "incarnation"))
    claimed_since = timezone.now() - timedelta(seconds=link.claim_seconds())
    lost = 0
    for operation in started:
        running = answers.get((operation.agent, operation.incarnation))
        if running is not None and local.attempt_key(operation.pk, operation.attempt) in running:
            continue  # still running: awaited
        if running is None and operation.incarnation and heart_beating.get(operation.agent) == operation.incarnation:
            continue  # its agent lives but did not answer in time: its heartbeats watch it
        if running is not None and operation.started_at and operation.started_at > claimed_since \
                and heart_beating.get(operation.agent) == operation.incarnation:
            # Claimed by a live agent that may still wait for the answer (a manager that died may
            # have stored the claim and never sent it): once its claim times out, the message
            # comes again and the agent runs the attempt, which nothing ran.
            continue
        with transaction.atomic():
            current = Operation.objects.filter(pk=operation.pk, state=OperationState.STARTED, attempt=operation.attempt).first()
            if current is None:
                continue  # it reported meanwhile
            reports.record_lost(current, current.attempt, f"lost during restart: no live worker runs attempt "
                                                          f"{current.attempt} (it ran on {current.agent})")
        lost += 1
    return lost


def fail_operations_of_offline_agents(now):
    """An agent silent for AGENT_OFFLINE_AFTER_SECONDS: its started operations were lost."""
    threshold = now - timedelta(seconds=workflows_settings.AGENT_OFFLINE_AFTER_SECONDS)
    offline = Agent.objects.filter(last_heartbeat__lt=threshold).values("name")
    for operation in Operation.objects.filter(state=OperationState.STARTED, agent__in=offline):
        reports.record_lost(operation, operation.attempt, f"agent {operation.agent} went offline")


def kill_orphaned_operations() -> list[int]:
    """SIGKILL the operation process groups recorded under this host's management queue whose
    pool process outlived its manager (its parent is gone). Groups of live managers on this
    host are left alone."""
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
