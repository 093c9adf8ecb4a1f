"""A worker process' line to the managers, through the broker only: the reports it publishes
(``workflows_app.wire``) and the answers to its claims. Agents hold no database credentials; a
manager's own pool processes use the same line, so an operation runs the same way wherever it runs.

Every report carries its proof under the agent's key (:func:`signed`); an answer to a claim is
taken only with the managers' proof for this agent: anyone may publish to a reply queue.

Each process has its own connection (a pool process makes one after the fork; the threads of a
main process — heartbeat, kill, shutdown — share one under a lock). A report is in the broker's
hands when :func:`report` returns: on RabbitMQ the connection uses publisher confirms, on Redis the
push is the write. A claim waits for its answer on the process' own reply queue, whose name starts
with the agent's (:func:`workflows_app.wire.reply_queue`), so an agent's broker account may read it.
"""

import logging
import os
import socket
import threading
import time
import uuid
from contextlib import contextmanager

import kombu

from agents.worker import local
from workflows_app import broker, wire
from workflows_app.wire import keys

logger = logging.getLogger(__name__)

#: Tries of a publish while the broker does not answer (kombu reconnects between them).
PUBLISH_RETRIES = 20
#: The longest pause between two of them.
PUBLISH_RETRY_MAX_SECONDS = 2.0
#: A ``started`` report waits this long for its attempt's outcome, to leave with it: an attempt
#: that ends sooner reports its start and its end in one message.
STARTED_DELAY_SECONDS = 0.05
#: A claim with no answer yet is sent again after this long, then after twice as long each time,
#: up to CLAIM_RESEND_MAX_SECONDS: a claim or its answer can be lost on the way (an answer is not
#: persistent, a broker restarts, a manager's answer fails to publish), and the pool process would
#: otherwise wait the claim's whole timeout.
CLAIM_RESEND_SECONDS = 5.0
CLAIM_RESEND_MAX_SECONDS = 30.0


class Unreachable(Exception):
    """The broker did not take a report (after PUBLISH_RETRIES tries)."""


class Link:
    """One process' connection to the managers. ``route``: where its reports are published (a
    callable returning ``Producer.publish`` options; by default the managers' reports queue)."""

    def __init__(self, route=None):
        self.route = route or broker.reports_route
        self.lock = threading.RLock()
        self.connection = None
        self.producer = None
        self.consumer = None
        self.reply_to = None
        self.waiting = None
        self.answer = None
        self.starts = {}  # (operation id, attempt) -> (when its started report leaves alone, its start)
        self.flusher = None

    # --- the connection ----------------------------------------------------------------------
    def _connect(self):
        if self.connection is None:
            self.connection = broker.reports_connection()
            self.producer = kombu.Producer(self.connection, serializer="json")
        return self.connection

    def close(self):
        for part in (self.consumer, self.connection):
            if part is not None:
                try:
                    part.close()
                except Exception:  # noqa: BLE001 — a broken connection is dropped all the same
                    pass
        self.connection = self.producer = self.consumer = None

    # --- reports -----------------------------------------------------------------------------
    def report(self, kind, **fields):
        """Publish a report of ``kind`` for this run of this agent; returns once the broker has it.
        :class:`Unreachable` when it does not take it. The outcome of an attempt whose ``started``
        report waits (:meth:`started`) carries it."""
        if kind in (wire.Kind.OUTCOME, wire.Kind.LOST):
            with self.lock:  # its start, not reported yet, goes with its end (which carries it)
                self.starts.pop((fields.get("operation"), fields.get("attempt")), None)
        self._publish(signed(kind, **fields), kind)

    def started(self, operation_id, attempt, began):
        """Report that this process started the attempt unasked at ``began`` (seconds since the
        epoch): on its own after STARTED_DELAY_SECONDS (a thread of this process sends it) unless
        its end is reported first — which carries its start (``started``, ``started_at``) whether
        or not this report left: two reports of one attempt may be stored in either order."""
        with self.lock:
            self.starts[(str(operation_id), attempt)] = (time.monotonic() + STARTED_DELAY_SECONDS, began)
            if self.flusher is None or not self.flusher.is_alive():
                self.flusher = threading.Thread(target=self._send_starts, name="switchyard-started", daemon=True)
                self.flusher.start()

    def _send_starts(self):
        while True:
            with self.lock:
                if not self.starts:
                    self.flusher = None
                    return
                now = time.monotonic()
                due = [(attempt, began) for attempt, (at, began) in self.starts.items() if at <= now]
                wait = min(at for at, _ in self.starts.values()) - now
                try:
                    for (operation_id, attempt), began in due:
                        self._publish(signed(wire.Kind.STARTED, operation=operation_id, attempt=attempt, pid=os.getpid(),
                                             at=began), wire.Kind.STARTED)
                        del self.starts[(operation_id, attempt)]
                except Unreachable as exc:  # sent with its outcome, or tried again
                    logger.warning("%s", exc)
                    wait = PUBLISH_RETRY_MAX_SECONDS
            time.sleep(max(0.005, wait))

    def _publish(self, body, kind):
        with self.lock:
            connection = self._connect()
            try:
                publish = connection.ensure(self.producer, self.producer.publish, max_retries=PUBLISH_RETRIES,
                                            interval_start=0.1, interval_step=0.5, interval_max=PUBLISH_RETRY_MAX_SECONDS,
                                            on_revive=self._revived)
                publish(body, delivery_mode=2, **self.route())
            except Exception as exc:
                self.close()
                raise Unreachable(f"the broker did not take a {kind} report: {exc}") from exc

    # --- claims ------------------------------------------------------------------------------
    def claim(self, operation_id, attempt, timeout):
        """Ask the managers whether this delivery may start the attempt; their answer (a dict with
        a ``verdict``), or None when none came within ``timeout`` seconds. The claim is sent again
        (the same claim: the first answer is taken) while no answer comes (CLAIM_RESEND_SECONDS)."""
        with self.lock:
            self.waiting, self.answer = uuid.uuid4().hex, None
            try:
                deadline = time.monotonic() + timeout
                pause, resend_at = CLAIM_RESEND_SECONDS, 0.0
                while self.answer is None and time.monotonic() < deadline:
                    if time.monotonic() >= resend_at:
                        if resend_at:
                            logger.warning("claim of attempt %s of %s sent again: no answer in %.0fs", attempt,
                                           operation_id, time.monotonic() - (deadline - timeout))
                        self._listen()
                        self.report(wire.Kind.CLAIM, operation=str(operation_id), attempt=attempt,
                                    pid=os.getpid(), reply_to=self.reply_to, id=self.waiting)
                        self._listen()  # again, if the publish had to connect anew
                        resend_at = time.monotonic() + pause
                        pause = min(2 * pause, CLAIM_RESEND_MAX_SECONDS)
                    try:
                        self.connection.drain_events(
                            timeout=min(1.0, max(0.01, min(deadline, resend_at) - time.monotonic())))
                    except socket.timeout:
                        continue
                return self.answer
            except Unreachable:
                logger.warning("claim of attempt %s of %s not sent: the broker is unreachable", attempt, operation_id)
                return None
            except Exception as exc:  # noqa: BLE001 — the connection broke: no answer, the message goes back
                logger.warning("claim of attempt %s of %s got no answer: %s", attempt, operation_id, exc)
                self.close()
                return None
            finally:
                self.waiting = None

    def _listen(self):
        if self.consumer is not None:
            return
        connection = self._connect()
        self.reply_to = wire.reply_queue(local.name() or "unnamed", socket.gethostname(), os.getpid())
        queue = kombu.Queue(self.reply_to, durable=False, auto_delete=True)
        self.consumer = kombu.Consumer(connection.channel(), queues=[queue], callbacks=[self._on_answer],
                                       accept=["json"], no_ack=True, on_decode_error=_refuse)
        self.consumer.consume()

    def _revived(self, channel):
        # kombu connected anew to publish: the reply consumer was on the connection that broke.
        self.consumer = None

    def _on_answer(self, body, message):
        # An answer to an earlier claim that came too late is not this one's: dropped. The claim may
        # have been sent more than once: its first answer is the one taken.
        if isinstance(body, dict) and self.waiting is not None and body.get("id") == self.waiting \
                and self.answer is None:
            if keys.proven(body.get("proof"), own_key(), keys.Purpose.ANSWER, keys.without_proof(body)):
                self.answer = keys.without_proof(body)
            else:
                logger.warning("ignored an answer to claim %s that no manager proved", self.waiting)


def own_key() -> str:
    return keys.own_key(local.name())


def signed(kind, **fields) -> dict:
    """The report of ``kind`` for this run of this agent, with its proof."""
    body = {"kind": str(kind), "agent": local.name(), "incarnation": local.incarnation(), **fields}
    body["proof"] = keys.prove(own_key(), keys.Purpose.REPORT, body)
    return body


def _refuse(message, exc):
    logger.warning("refused an answer of type %s, unread: %s", message.content_type, exc)


_link = Link()


def _forget_after_fork():
    # A pool process must never use its parent's connection: it makes its own.
    global _link
    _link = Link()


os.register_at_fork(after_in_child=_forget_after_fork)


@contextmanager
def through(line):
    """Inside the block this process' reports and claims go to ``line`` instead of the broker:
    its ``report(kind, **fields)`` and ``claim(operation_id, attempt, timeout)``, as a
    :class:`Link`'s (the test harness hands them to the managers' intake in the same process)."""
    global _link
    kept, _link = _link, line
    try:
        yield line
    finally:
        _link = kept


def report(kind, **fields):
    """:meth:`Link.report` on this process' link."""
    _link.report(kind, **fields)


def claim(operation_id, attempt, timeout):
    """:meth:`Link.claim` on this process' link."""
    return _link.claim(operation_id, attempt, timeout)


def started(operation_id, attempt, began):
    """:meth:`Link.started` on this process' link."""
    _link.started(operation_id, attempt, began)


#: How long a claim waits for its answer before its message goes back to the queue.
claim_seconds = wire.claim_seconds
