"""A worker's life, manager or agent: registering this run, starting its Celery worker,
heart-beating, shutting down gracefully, and — when an agent starts again — giving back the
messages its earlier runs took and never acknowledged (the managers, told of the new run,
declare lost what those runs left started). An agent says all of it through the broker
(``agents.worker.link``): it has no database."""

import logging
import os
import socket
import threading
import time
import uuid

from celery import current_app
from celery.signals import worker_ready, worker_shutdown, worker_shutting_down
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections, connections

from agents.worker import journal, link, local, pool
from agents.worker.forks import no_fork_meanwhile
from agents.worker.control import terminate
from workflows_app import broker, outages, wire
from workflows_app.conf import workflows_settings
from workflows_app.errors import RegistrationError
from workflows_app.registry import require_workflow_modules

logger = logging.getLogger(__name__)


def begin(name, *, register=True, concurrency=None) -> str:
    """Start a run of ``name``: a new incarnation id in this process' environment (inherited
    by its pool processes); for an agent, its registration and the clean-up of its earlier runs.
    An incarnation begins with the time the run began (16 hexadecimal digits of nanoseconds, then
    a dot), so that the managers tell a later run's registration from a replayed earlier one."""
    incarnation = f"{time.time_ns():016x}.{uuid.uuid4().hex[:15]}"
    os.environ[local.NAME_ENV] = name
    os.environ[local.INCARNATION_ENV] = incarnation
    if register:
        journal.forget_old(name)
        killed = local.kill_leftovers(name)
        if killed:
            logger.warning("killed %d operation process group(s) left by an earlier run of %s: %s", len(killed), name, killed)
        _register(name, concurrency)
    connections.close_all()  # never share a connection with the pool processes about to fork
    return incarnation


def _register(name, concurrency):
    # The managers record the new run and declare lost what earlier runs left started (agents.intake).
    link.report(wire.Kind.REGISTER, hostname=socket.gethostname(), pid=os.getpid(), concurrency=concurrency)
    # Messages the earlier run took from this queue and died holding, before its worker takes any.
    try:
        held = broker.give_back_held(name)
    except Exception as exc:  # noqa: BLE001 — best effort: the broker gives them back at its visibility timeout
        logger.warning("agent %s: could not give back the messages its earlier run held: %s", name, exc)
        return
    if held:
        logger.warning("agent %s: %d message(s) its earlier run took and never acknowledged given back", name, held)


def run_worker(label, *, queue, hostname, concurrency, loglevel, threads=(), stop_first=(), stop_last=()):
    """Run the project's Celery worker on ``queue`` until it shuts down: ``threads`` start once
    the pool has forked (so no pool process inherits their connections); SIGTERM shuts it down
    in phases (:class:`GracefulShutdown`, stopping ``stop_first`` first and ``stop_last`` last)."""
    app = current_app._get_current_object()
    pool.prepare(app)
    for thread in threads:
        worker_ready.connect(lambda thread=thread, **kwargs: thread.start(), weak=False)
    GracefulShutdown(label, stop_first=stop_first, stop_last=stop_last).install()
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
#: The shortest wait of a :class:`Ticker` that asked to run again sooner.
MIN_WAIT_SECONDS = 0.01
#: How often an agent's heartbeat thread also forgets the attempts that finished long ago: not at
#: every beat, since it looks at every finished record; they are kept an hour.
FORGET_EVERY_SECONDS = 60.0


class _Stop(threading.Event):
    """A :class:`Ticker`'s stop: setting it wakes the ticker too, which then ends."""

    def __init__(self, woken):
        super().__init__()
        self._woken = woken

    def set(self):
        super().set()
        self._woken.set()


class Ticker(threading.Thread):
    """Calls ``fn`` every ``interval`` seconds, logging (not dying of) its errors; sooner when
    ``fn`` returns the seconds until it has something to do again. While the database is
    unreachable it says so once (and once when it is back), and tries every
    ``OUTAGE_RETRY_SECONDS`` at most."""

    def __init__(self, fn, interval, name="tick"):
        super().__init__(name=name, daemon=True)
        self.fn, self.interval = fn, interval
        self.woken = threading.Event()
        self.stopped = _Stop(self.woken)
        self.database = outages.Watch(name)
        self.next_wait = interval

    def wake(self):
        """Call ``fn`` now (from any thread), not at the end of the wait."""
        self.woken.set()

    def run(self):
        while not self.stopped.is_set():
            self.woken.wait(min(self.interval, OUTAGE_RETRY_SECONDS) if self.database.down else self.next_wait)
            self.woken.clear()
            if self.stopped.is_set():
                return
            self.turn()

    def turn(self):
        self.next_wait = self.interval
        try:
            with no_fork_meanwhile():
                close_old_connections()
                due = self.fn()
        except Exception as exc:
            if not self.database.failed(exc):
                logger.exception("%s failed", self.name)
            return
        self.database.succeeded()
        if isinstance(due, (int, float)) and due >= 0:
            self.next_wait = min(self.interval, max(due, MIN_WAIT_SECONDS))


def heartbeat(name) -> Ticker:
    """A thread that reports a heartbeat every AGENT_HEARTBEAT_SECONDS (the managers store it
    while this run is the agent's current one), and, every FORGET_EVERY_SECONDS, forgets the
    attempts that finished here long ago (``local.forget_finished``, which looks at the record of
    every attempt of the last hour: a busy agent keeps hundreds of thousands)."""
    forget_at = 0.0

    def beat():
        nonlocal forget_at
        link.report(wire.Kind.HEARTBEAT, hostname=socket.gethostname())
        if time.monotonic() >= forget_at:
            forget_at = time.monotonic() + FORGET_EVERY_SECONDS
            local.forget_finished(name)

    return Ticker(beat, workflows_settings.AGENT_HEARTBEAT_SECONDS, name=f"heartbeat-{name}")


class GracefulShutdown:
    """SIGTERM to a manager or agent, in the phases of
    ``WORKFLOWS["SHUTDOWN_PHASE_TIMEOUTS"]``:

    1. ``stop_intake``: Celery's warm shutdown stops consuming at once; the threads in
       ``stop_first`` (the manager's tick, which sends work) are stopped and awaited.
    2. ``finish_running``: the operations and dispatchers this process runs may finish. Those
       still running when it is over are handed back: each attempt is recorded lost — a
       retryable failure, so another worker (or this one after its restart) runs it again — and
       its process group gets SIGTERM, then SIGKILL after KILL_GRACE_SECONDS; a dispatcher's
       message goes back to the queue.
    3. ``flush``: the threads in ``stop_last`` (a manager's inbox, which stores what was just
       handed back) stop once they have nothing left to do; with nothing running, Celery
       acknowledges, closes its connections and exits; a process that has not exited when this
       phase is over exits at once (status 1).

    The heartbeat goes on until the process exits, so the agent stays online while it finishes.
    """

    def __init__(self, label, *, stop_first=(), stop_last=()):
        self.label, self.stop_first, self.stop_last = label, list(stop_first), list(stop_last)
        self._started = threading.Event()
        self._flushed = threading.Event()

    def install(self):
        worker_shutting_down.connect(self._begin, weak=False)
        if self.stop_last:
            worker_shutdown.connect(self._await_flush, weak=False)

    def _await_flush(self, **kwargs):
        # Celery's main thread, about to exit once nothing runs: the threads of ``stop_last`` are
        # daemons, and would die with it before they stored what was just handed back.
        if self._started.is_set():
            self._flushed.wait(sum(workflows_settings.SHUTDOWN_PHASE_TIMEOUTS.values()))

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
        flush_deadline = time.monotonic() + phases["flush"]
        for thread in self.stop_last:
            thread.stop_when_idle()
        for thread in self.stop_last:
            if thread.is_alive():
                thread.join(max(0.0, flush_deadline - time.monotonic()))
        self._flushed.set()
        close_old_connections()
        connections.close_all()

        time.sleep(max(0.0, flush_deadline - time.monotonic()))
        logger.error("%s: still not stopped %ss after the last phase began: exiting now", self.label, phases["flush"])
        hard_exit(1)


def hand_back(keys, reason):
    """Report each running attempt of ``keys`` lost (retryable), then stop its process group."""
    for key in keys:
        attempt = local.parse_attempt_key(key)
        if attempt is None:
            continue  # a dispatcher: its message goes back to the queue
        try:
            link.report(wire.Kind.LOST, operation=attempt[0], attempt=attempt[1], message=reason)
        except Exception:
            logger.exception("could not hand back %s", key)
    terminate(keys, float(workflows_settings.KILL_GRACE_SECONDS))


class WorkerCommand(BaseCommand):
    """The base of ``run_manager`` and ``run_agent``: a process that runs workflows or their
    operations refuses to start without them, in one line (``CommandError``), before the system
    checks (whose report of the same problem takes five lines) and with ``--skip-checks`` too."""

    def execute(self, *args, **options):
        try:
            require_workflow_modules()
        except RegistrationError as exc:
            raise CommandError(str(exc)) from None
        return super().execute(*args, **options)
