"""A worker's life, manager or agent: registering this run, starting its Celery worker,
heart-beating, shutting down gracefully, and — when an agent starts again — declaring lost what
its earlier runs left started and giving back the messages they took and never acknowledged."""

import logging
import os
import socket
import threading
import time
import uuid

from celery import current_app
from celery.signals import worker_ready, worker_shutting_down
from django.db import close_old_connections, connections
from django.utils import timezone

from agents.models import Agent
from agents.worker import local, pool
from agents.worker.forks import no_fork_meanwhile
from agents.worker.control import terminate
from workflows_app import dispatch, outages
from workflows_app.conf import workflows_settings
from workflows_app.engine import reports
from workflows_app.models import Operation
from workflows_app.states import OperationState

logger = logging.getLogger(__name__)


def begin(name, *, register=True, concurrency=None) -> str:
    """Start a run of ``name``: a new incarnation id in this process' environment (inherited
    by its pool processes); for an agent, its row and the clean-up of its earlier runs."""
    incarnation = uuid.uuid4().hex
    os.environ[local.NAME_ENV] = name
    os.environ[local.INCARNATION_ENV] = incarnation
    if register:
        killed = local.kill_leftovers(name)
        if killed:
            logger.warning("killed %d operation process group(s) left by an earlier run of %s: %s", len(killed), name, killed)
        outages.ride_out(f"registering agent {name}", _register, name, incarnation, concurrency)
    connections.close_all()  # never share a connection with the pool processes about to fork
    return incarnation


def _register(name, incarnation, concurrency):
    now = timezone.now()
    Agent.objects.update_or_create(name=name, defaults={
        "incarnation": incarnation, "hostname": socket.gethostname(), "pid": os.getpid(),
        "concurrency": concurrency, "started_at": now, "last_heartbeat": now})
    lost = Operation.objects.filter(agent=name, state=OperationState.STARTED).exclude(incarnation=incarnation)
    for operation in lost:
        reports.record_lost(operation, operation.attempt, f"lost: agent {name} started again")
    # Messages the earlier run took from this queue and died holding, before its worker takes any.
    try:
        held = dispatch.give_back_held(name)
    except Exception as exc:  # noqa: BLE001 — best effort: the broker gives them back at its visibility timeout
        logger.warning("agent %s: could not give back the messages its earlier run held: %s", name, exc)
        return
    if held:
        logger.warning("agent %s: %d message(s) its earlier run took and never acknowledged given back", name, held)


def run_worker(label, *, queue, hostname, concurrency, loglevel, threads=(), stop_first=()):
    """Run the project's Celery worker on ``queue`` until it shuts down: ``threads`` start once
    the pool has forked (so no pool process inherits their connections); SIGTERM shuts it down
    in phases (:class:`GracefulShutdown`, stopping ``stop_first`` first)."""
    app = current_app._get_current_object()
    pool.prepare(app)
    for thread in threads:
        worker_ready.connect(lambda thread=thread, **kwargs: thread.start(), weak=False)
    GracefulShutdown(label, stop_first=stop_first).install()
    # One message at a time per pool process: a message waiting behind a long operation in a
    # busy process' prefetch would wait for nothing while another process is free.
    argv = ["worker", "--queues", queue, "--hostname", hostname, "--loglevel", loglevel, "--prefetch-multiplier", "1",
            "--without-gossip", "--without-mingle", "--task-events"]
    if concurrency:
        argv += ["--concurrency", str(concurrency)]
    app.worker_main(argv)


#: How often a ticker tries while the database is down: an agent's first heartbeat after an
#: outage comes within this, not a whole heartbeat period later.
OUTAGE_RETRY_SECONDS = 1.0


class Ticker(threading.Thread):
    """Calls ``fn`` every ``interval`` seconds, logging (not dying of) its errors. While the
    database is unreachable it says so once (and once when it is back), and tries every
    ``OUTAGE_RETRY_SECONDS`` at most."""

    def __init__(self, fn, interval, name="tick"):
        super().__init__(name=name, daemon=True)
        self.fn, self.interval = fn, interval
        self.stopped = threading.Event()
        self.database = outages.Watch(name)

    def run(self):
        while not self.stopped.wait(min(self.interval, OUTAGE_RETRY_SECONDS) if self.database.down else self.interval):
            self.turn()

    def turn(self):
        try:
            with no_fork_meanwhile():
                close_old_connections()
                self.fn()
        except Exception as exc:
            if not self.database.failed(exc):
                logger.exception("%s failed", self.name)
            return
        self.database.succeeded()


def heartbeat(name, incarnation) -> Ticker:
    """A thread that writes ``last_heartbeat`` every AGENT_HEARTBEAT_SECONDS while this run is
    the current one."""
    def beat():
        if not Agent.objects.filter(name=name, incarnation=incarnation).update(last_heartbeat=timezone.now()):
            logger.warning("agent %s: a newer run has taken the name over", name)

    return Ticker(beat, workflows_settings.AGENT_HEARTBEAT_SECONDS, name=f"heartbeat-{name}")


class GracefulShutdown:
    """SIGTERM to a manager or agent (SPEC §9), in the phases of
    ``WORKFLOWS["SHUTDOWN_PHASE_TIMEOUTS"]``:

    1. ``stop_intake``: Celery's warm shutdown stops consuming at once; the threads in
       ``stop_first`` (the manager's tick, which sends work) are stopped and awaited.
    2. ``finish_running``: the operations and dispatchers this process runs may finish. Those
       still running when it is over are handed back: each attempt is recorded lost — a
       retryable failure, so another worker (or this one after its restart) runs it again — and
       its process group gets SIGTERM, then SIGKILL after KILL_GRACE_SECONDS; a dispatcher's
       message goes back to the queue.
    3. ``flush``: with nothing running, Celery acknowledges, closes its connections and exits; a
       process that has not exited when this phase is over exits at once (status 1).

    The heartbeat goes on until the process exits, so the agent stays online while it finishes.
    """

    def __init__(self, label, *, stop_first=()):
        self.label, self.stop_first = label, list(stop_first)
        self._started = threading.Event()

    def install(self):
        worker_shutting_down.connect(self._begin, weak=False)

    def _begin(self, sig=None, how=None, **kwargs):
        if how != "Warm" or self._started.is_set():
            return
        self._started.set()
        threading.Thread(target=self.run_phases, name="graceful-shutdown", daemon=True).start()

    def run_phases(self, hard_exit=os._exit):
        phases = workflows_settings.SHUTDOWN_PHASE_TIMEOUTS
        logger.warning("%s: shutting down (phase timeouts %s)", self.label, phases)
        for thread in self.stop_first:
            thread.stopped.set()
        for thread in self.stop_first:
            if thread.is_alive():
                thread.join(phases["stop_intake"])

        deadline = time.monotonic() + phases["finish_running"]
        while local.running_keys() and time.monotonic() < deadline:
            time.sleep(0.2)
        left = local.running_keys()
        if left:
            logger.warning("%s: still running after %ss, handed back: %s", self.label, phases["finish_running"], left)
            hand_back(left, f"handed back: {self.label} shut down before it finished")
        close_old_connections()
        connections.close_all()

        time.sleep(phases["flush"])
        logger.error("%s: still not stopped %ss after the last phase began: exiting now", self.label, phases["flush"])
        hard_exit(1)


def hand_back(keys, reason):
    """Record each running attempt of ``keys`` lost (retryable), then stop its process group."""
    for key in keys:
        if key.startswith(local.DISPATCHER_PREFIX):
            continue
        operation_id, _, attempt = key.rpartition(".")
        try:
            with no_fork_meanwhile():
                operation = Operation.objects.filter(pk=operation_id).first()
                if operation is not None and operation.attempt == int(attempt) and operation.state == OperationState.STARTED:
                    reports.record_lost(operation, operation.attempt, reason)
        except Exception:
            logger.exception("could not hand back %s", key)
    terminate(keys, float(workflows_settings.KILL_GRACE_SECONDS))
