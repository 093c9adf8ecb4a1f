"""A manager's inbox: the thread that takes the agents' reports from the broker in batches,
stores each batch in one transaction (``agents.intake``), answers the claims among them, and
only then acknowledges the messages.

Nothing is lost: a report is acknowledged after the transaction that stored it committed (and a
claim after its answer was sent). A manager that dies holding reports leaves them unacknowledged:
the broker gives them to another manager (RabbitMQ at once; on Redis a starting manager gives
back what the reports queue holds, :func:`workflows_app.broker.give_back_held`), and a report
stored twice changes nothing the second time. On Redis the inbox takes a batch in one round
trip that also records it as held (``workflows_app.broker.batches``: kombu's transport takes one
message a round trip, and loses it if its consumer dies before the next), and acknowledges a
batch in one; RabbitMQ pushes up to BATCH, acknowledged with one multiple ``basic.ack``. The
answers to a batch's claims leave in one pipeline (kombu's publish batch).

A batch is what arrived by the time the inbox looks, up to BATCH reports: under load many
reports share a commit, and a lone report waits for nothing. While the database is unreachable
the batch waits for it (DATABASE_OUTAGE_TOLERANCE at most, then its messages go back to the
queue). A transaction the database aborted (a deadlock, SQLite's busy lock) is run again; a
report that fails by itself is stored alone, and one that cannot be stored at all is logged and
dropped, so it never blocks the rest.
"""

import contextlib
import logging
import socket
import threading

import kombu
from django.db import close_old_connections

from agents import intake
from workflows_app.broker import batches, shared
from agents.worker.forks import no_fork_meanwhile
from workflows_app import broker, outages, wire
from workflows_app.db import again_if_aborted
from workflows_app.errors import DatabaseUnavailable

logger = logging.getLogger(__name__)

#: The most reports one transaction stores.
BATCH = 200
#: The only content type a report may have.
ACCEPT = ["application/json"]
#: How long the inbox waits for the first report of a batch before it looks whether to stop.
IDLE_SECONDS = 1.0
#: How long a draining inbox waits for one more report before it takes the queue for empty.
IDLE_DRAIN_SECONDS = 0.3
#: Tries of a batch whose transaction the database aborted (it wrote nothing).
TRIES = 5


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
                self.stopped.wait(1.0)

    def _serve(self):
        queue = self.queue()
        with broker.reports_connection() as connection:
            connection.ensure_connection(max_retries=None)
            producer = kombu.Producer(connection, serializer="json")
            source = _source(connection, queue)
            logger.info("inbox: taking reports from %s", queue.name)
            try:
                while not self.stopped.is_set():
                    batch = source.fill(IDLE_DRAIN_SECONDS if self.idle_stops.is_set() else IDLE_SECONDS)
                    if not batch:
                        if self.idle_stops.is_set():
                            self.stopped.set()
                        continue
                    self._store(batch, producer, source)
            finally:
                source.close()

    def _store(self, batch, producer, source):
        try:
            answers = outages.ride_out(f"storing {len(batch)} report(s)", self.take, [body for body, _ in batch])
        except DatabaseUnavailable:
            source.give_back(batch)
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
        try:
            with _publishing_together(producer):
                for reply_to, answer in answers:
                    producer.publish(answer, exchange="", routing_key=reply_to, delivery_mode=1, retry=True)
        except Exception:  # their claims wait in vain and are sent again: the attempts are then found started
            logger.exception("inbox: could not answer %d claim(s)", len(answers))
        source.ack(batch)

    def _take(self, bodies):
        return again_if_aborted(lambda: self._take_once(bodies), tries=TRIES, what="inbox: a batch", pause=0.05)

    @staticmethod
    def _take_once(bodies):
        with no_fork_meanwhile():
            close_old_connections()
            return intake.take(bodies)


def _publishing_together(producer):
    """kombu's publish batch (on Redis one pipeline for all of them), where kombu has it (5.7)."""
    batch = getattr(producer, "batch", None)
    return batch() if batch is not None else contextlib.nullcontext()


def _source(connection, queue):
    """Where the inbox takes its reports: on Redis in batches (``workflows_app.broker.batches``),
    else from a kombu consumer (RabbitMQ pushes up to BATCH at a time)."""
    channel = connection.channel()
    if batches.usable(channel):
        return _Batches(channel, queue)
    return _Consumer(connection, channel, queue)


def _readable(queue, size, content_type, decode, refuse_unread):
    """The body ``decode()`` gives of a report of ``size`` bytes, read only when it is no longer
    than any report can be (one of 40 MB doubled a manager's memory) and JSON; else None: the
    report is refused unread (``refuse_unread()``), logged and dropped."""
    if size > wire.max_report_bytes():
        logger.warning("refused a report of %d bytes, unread: longer than any report (%d bytes)", size,
                       wire.max_report_bytes())
        refuse_unread()
        return None
    try:
        return decode()
    except Exception as exc:  # noqa: BLE001 — not JSON, or not a content type taken: whatever kombu raised
        logger.warning("refused a message of type %s on %s, unread: %s", content_type, queue, exc)
        refuse_unread()
        return None


class _Batches:
    """Reports taken from Redis a batch a round trip, recorded as held in the same step (a
    manager killed meanwhile loses none), acknowledged a batch a round trip."""

    def __init__(self, channel, queue):
        self.channel, self.batches = channel, batches.Batches(channel, queue.name)
        self.held = []  # tags taken and neither acknowledged nor given back

    def fill(self, timeout) -> list:
        while taken := self.batches.take(BATCH, wire.max_report_bytes(), timeout):
            self.held += [t.tag for t in taken]
            batch, refused = [], []
            for t in taken:
                body = _readable(self.batches.queue, t.size, (t.envelope or {}).get("content-type"),
                                 lambda: self.channel.Message(t.envelope, channel=self.channel, accept=ACCEPT).decode(),
                                 lambda: refused.append(t.tag))
                if body is not None:
                    batch.append((body, t.tag))
            self._settle(refused, self.batches.ack)
            if batch:
                return batch
        return []

    def ack(self, batch):
        self._settle([tag for _, tag in batch], self.batches.ack)

    def give_back(self, batch):
        self._settle([tag for _, tag in batch], self.batches.give_back)

    def _settle(self, tags, how):
        how(tags)
        settled = set(tags)
        self.held = [tag for tag in self.held if tag not in settled]

    def close(self):
        # The connection broke, or the inbox stops: what it holds goes back to the queue now
        # (if the broker can be reached; else a starting manager gives it back).
        if self.held:
            try:
                self.batches.give_back(self.held)
            except Exception as exc:  # noqa: BLE001
                logger.warning("inbox: %d report(s) held not given back (%s): a starting manager does", len(self.held), exc)
            self.held = []


class _Consumer:
    """Reports from a kombu consumer with a prefetch of BATCH: RabbitMQ pushes them, and a batch
    is acknowledged with one ``basic.ack`` (multiple)."""

    def __init__(self, connection, channel, queue):
        self.connection, self.pending = connection, []
        self.multiple = connection.transport.driver_type == "amqp"
        # Never cancelled: the connection is closed with the consumer still on. On Redis a
        # report that a pending BRPOP takes while the channel closes then reaches this
        # consumer, unacknowledged, and the channel gives it back as it closes; a cancelled
        # consumer would leave kombu nowhere to put it, and it would be lost.
        self.consumer = kombu.Consumer(channel, queues=[queue], on_message=self._on_message, accept=ACCEPT,
                                       prefetch_count=BATCH)
        self.consumer.consume()

    def _on_message(self, message):
        body = _readable(message.delivery_info.get("routing_key"), len(message.body or b""), message.content_type,
                         message.decode, lambda: message.reject(requeue=False))
        if body is not None:
            self.pending.append((body, message))

    def fill(self, timeout) -> list:
        """Wait for a report, then take what else has arrived (BATCH at most)."""
        try:
            self.connection.drain_events(timeout=timeout)
        except socket.timeout:
            pass
        else:
            while len(self.pending) < BATCH:
                try:
                    self.connection.drain_events(timeout=0.001)
                except socket.timeout:
                    break
        batch, self.pending = self.pending, []
        return batch

    def ack(self, batch):
        if self.multiple and batch:
            batch[-1][1].ack(multiple=True)  # and every one before it on the channel: all settled
        else:
            for _, message in batch:
                message.ack()

    def give_back(self, batch):
        for _, message in batch:
            message.requeue()

    def close(self):
        self.pending = []  # unacknowledged: the broker gives them back


def prepare():
    """What a starting manager does first: declare the reports queue and its binding (so that an
    agent's report has somewhere to go before the inbox takes any) and the other exchanges every
    agent uses and none may declare with an account of its own (``workflows_app.broker.shared``), and,
    on Redis, put back the reports a dead manager took and never acknowledged (any manager stores
    them; one held by a live manager is then stored twice, which changes nothing)."""
    try:
        shared.declare()
        held = broker.give_back_held(wire.reports_queue())
    except Exception as exc:  # noqa: BLE001 — the broker is not up yet: the inbox declares it when it is
        logger.warning("could not prepare the reports queue: %s", exc)
        return
    if held:
        logger.warning("%d report(s) a manager took and never acknowledged given back", held)
