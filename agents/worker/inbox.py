"""A manager's inbox: the thread that takes the agents' reports from the broker in batches,
stores each batch in one transaction (``agents.intake``), answers the claims among them, and
only then acknowledges the messages.

Nothing is lost: a report is acknowledged after the transaction that stored it committed (and a
claim after its answer was sent). A manager that dies holding reports leaves them unacknowledged:
the broker gives them to another manager (RabbitMQ at once; on Redis a starting manager gives
back what the reports queue holds, :func:`workflows_app.broker.give_back_held`), and a report
stored twice changes nothing the second time.

A batch is what arrived by the time the inbox looks, up to BATCH reports: under load many
reports share a commit, and a lone report waits for nothing. While the database is unreachable
the batch waits for it (DATABASE_OUTAGE_TOLERANCE at most, then its messages go back to the
queue). A transaction the database aborted (a deadlock, SQLite's busy lock) is run again; a
report that fails by itself is stored alone, and one that cannot be stored at all is logged and
dropped, so it never blocks the rest.
"""

import logging
import socket
import threading
import time

import kombu
from django.db import OperationalError, close_old_connections

from agents import intake
from agents.worker.forks import no_fork_meanwhile
from workflows_app import broker, outages, wire
from workflows_app.errors import DatabaseUnavailable

logger = logging.getLogger(__name__)

#: The most reports one transaction stores.
BATCH = 200
#: How long the inbox waits for the first report of a batch before it looks whether to stop.
IDLE_SECONDS = 1.0
#: How long a draining inbox waits for one more report before it takes the queue for empty.
IDLE_DRAIN_SECONDS = 0.3
#: Tries of a batch whose transaction the database aborted (it wrote nothing).
TRIES = 5
TRANSIENT_SQLSTATES = {"40P01", "40001"}


def is_transient(exc) -> bool:
    """A transaction the database aborted and that may simply run again."""
    return isinstance(exc, OperationalError) and (
        getattr(exc.__cause__, "sqlstate", None) in TRANSIENT_SQLSTATES or "database is locked" in str(exc))


class Inbox(threading.Thread):
    """Takes reports until :attr:`stopped` is set, or, once :meth:`stop_when_idle` was called,
    until the queue has nothing more for it (a graceful shutdown: what its own pool processes
    handed back is stored before the manager exits)."""

    def __init__(self, take=None, queue=None):
        super().__init__(name="inbox", daemon=True)
        #: How a batch of report bodies is stored, returning the claims' answers: by default the
        #: intake's, on a connection of this thread, never while the manager forks (the test
        #: harness stores them in the test's own transaction instead).
        self.take = take or self._take
        #: The queue it takes them from (a callable returning a ``kombu.Queue``): by default the
        #: managers' reports queue.
        self.queue = queue or broker.reports_queue
        self.stopped = threading.Event()
        self.idle_stops = threading.Event()
        self.pending = []

    def stop_when_idle(self):
        self.idle_stops.set()

    def drain(self, seconds):
        """In the calling thread: store what the queue holds now (including what a dead manager
        held, once given back), for at most ``seconds``. A starting manager does, before it
        judges which started operations no worker runs: an attempt that ended reported its
        outcome before its worker stopped listing it as running."""
        self.idle_stops.set()
        timer = threading.Timer(seconds, self.stopped.set)
        timer.start()
        try:
            self._serve()
        except Exception as exc:  # the broker went away: what was not acknowledged is taken again later
            logger.warning("inbox: could not take the waiting reports (%s); going on without", exc)
        finally:
            timer.cancel()

    def run(self):
        while not self.stopped.is_set():
            try:
                self._serve()
            except Exception:  # the broker went away: connect again
                logger.exception("inbox: the connection to the broker failed; connecting again")
                self.pending = []  # unacknowledged: the broker gives them back
                self.stopped.wait(1.0)

    def _serve(self):
        queue = self.queue()
        with broker.reports_connection() as connection:
            connection.ensure_connection(max_retries=None)
            producer = kombu.Producer(connection, serializer="json")
            # Never cancelled: the connection is closed with the consumer still on. On Redis a
            # report that a pending BRPOP takes while the channel closes then reaches this
            # consumer, unacknowledged, and the channel gives it back as it closes; a cancelled
            # consumer would leave kombu nowhere to put it, and it would be lost.
            consumer = kombu.Consumer(connection.channel(), queues=[queue], callbacks=[self._on_report], accept=["json"],
                                      prefetch_count=BATCH, on_decode_error=refuse)
            consumer.consume()
            logger.info("inbox: taking reports from %s", queue.name)
            while not self.stopped.is_set():
                if not self._fill(connection):
                    if self.idle_stops.is_set():
                        self.stopped.set()
                    continue
                batch, self.pending = self.pending, []
                self._store(batch, producer)
            self.pending = []  # taken while it closes: given back, unacknowledged

    def _on_report(self, body, message):
        self.pending.append((body, message))

    def _fill(self, connection) -> bool:
        """Wait for a report, then take what else has arrived (BATCH at most); whether any came."""
        try:
            connection.drain_events(timeout=IDLE_DRAIN_SECONDS if self.idle_stops.is_set() else IDLE_SECONDS)
        except socket.timeout:
            return bool(self.pending)
        while len(self.pending) < BATCH:
            try:
                connection.drain_events(timeout=0.001)
            except socket.timeout:
                break
        return True

    def _store(self, batch, producer):
        try:
            answers = outages.ride_out(f"storing {len(batch)} report(s)", self.take, [body for body, _ in batch])
        except DatabaseUnavailable:
            for _, message in batch:
                message.requeue()
            return
        except Exception:  # one of them fails by itself: each alone, so that the others are stored
            logger.exception("inbox: a batch of %d report(s) failed; storing them one at a time", len(batch))
            answers = []
            for body, _ in batch:
                try:
                    answers += outages.ride_out("storing a report", self.take, [body])
                except DatabaseUnavailable:
                    raise
                except Exception:
                    logger.exception("inbox: a report could not be stored and is dropped: %.500r", body)
        for reply_to, answer in answers:
            try:
                producer.publish(answer, exchange="", routing_key=reply_to, delivery_mode=1, retry=True)
            except Exception:  # its claim waits in vain and is sent again: the attempt is then found started
                logger.exception("inbox: could not answer a claim on %s", reply_to)
        for _, message in batch:
            message.ack()

    def _take(self, bodies):
        for tries in range(1, TRIES + 1):
            try:
                with no_fork_meanwhile():
                    close_old_connections()
                    return intake.take(bodies)
            except OperationalError as exc:
                if not is_transient(exc) or tries == TRIES:
                    raise
                logger.warning("inbox: a batch was aborted (%s): trying again", exc)
                time.sleep(0.05 * tries)


def refuse(message, exc):
    """A message that is not JSON (or not readable as it): refused unread, logged, and dropped."""
    logger.warning("refused a message of type %s on %s, unread: %s", message.content_type,
                   message.delivery_info.get("routing_key"), exc)
    if not message.acknowledged:
        message.reject(requeue=False)


def prepare():
    """What a starting manager does first: declare the reports queue and its binding (so that an
    agent's report has somewhere to go before the inbox takes any) and, on Redis, put back the
    reports a dead manager took and never acknowledged (any manager stores them; one held by a
    live manager is then stored twice, which changes nothing)."""
    try:
        broker.declare_reports_queue()
        held = broker.give_back_held(wire.reports_queue())
    except Exception as exc:  # noqa: BLE001 — the broker is not up yet: the inbox declares it when it is
        logger.warning("could not prepare the reports queue: %s", exc)
        return
    if held:
        logger.warning("%d report(s) a manager took and never acknowledged given back", held)
