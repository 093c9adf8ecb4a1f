"""What every agent and manager shares on the broker, who declares it, and how an agent uses it
without declaring it.

On RabbitMQ an agent may have an account of its own (``agents.accounts``), which may configure
its own queues only. RabbitMQ's *configure* permission is what both declares and deletes a queue
or an exchange: an account that could declare a shared exchange could delete it too, and stop
every agent and manager. So what is shared is declared by the managers, with the administrator's
account, when they start (:func:`declare`):

* the reports exchange (``<management queue>.reporting``), bound to the reports queue;
* Celery's remote control: ``celery.pidbox``, where kills, cancels and questions are broadcast,
  and ``reply.celery.pidbox``, where the workers' answers go;
* Celery's events, ``celeryev``.

(The last three are named after Celery's ``control_exchange`` and ``event_exchange``.)

An agent only looks at them, with a *passive* declare, which RabbitMQ allows to any account and
which does not care how the exchange was declared. Before it registers it waits until they exist
(:func:`await_declared`): one that is missing it declares itself only when its account may (the
administrator's, as before agents had accounts of their own); with an account of its own it
waits for a manager. Its Celery worker then declares them passively (:func:`use_passively`).

RabbitMQ forgets the two remote-control exchanges when it restarts (Celery declares them not
durable): the managers' workers declare ``celery.pidbox`` again as they reconnect, and an agent's
worker, whose passive declare fails meanwhile, retries its connection until they have
(``agents.worker.pool.prepare`` makes a channel error one more reason to reconnect).
``reply.celery.pidbox`` is declared by whoever asks a question before it asks it.

On Redis (or any broker but RabbitMQ) there is nothing to do: it has no permissions, and kombu
keeps its exchanges itself.
"""

import logging
import time
from contextlib import contextmanager
from copy import copy

from amqp.exceptions import AccessRefused, NotFound
from celery import current_app
from celery.events.event import get_exchange
from kombu import Exchange

from workflows_app import broker

logger = logging.getLogger(__name__)

#: How often an agent looks again for the shared exchanges it waits for.
WAIT_SECONDS = 2.0
#: Tries to reach the broker before an agent that waits for them gives up (as a report's).
CONNECT_RETRIES = 20


def exchanges(app=None) -> dict:
    """The shared exchanges, as the managers declare them (name -> ``kombu.Exchange``): the
    reports', the remote control's broadcasts and replies, and the events'."""
    app = app or current_app._get_current_object()
    mailbox = app.control.mailbox
    with app.connection_for_write() as connection:  # its transport only says the events' type
        events = get_exchange(connection, name=app.conf.event_exchange)
    found = [broker.reports_queue().exchange, events, mailbox.reply_exchange, mailbox.exchange]
    return {exchange.name: _passive(exchange, False) for exchange in found}


def declare(app=None):
    """Declare the reports queue, its binding and every shared exchange (a starting manager does,
    before its worker starts). Declaring what exists, as it is, changes nothing. The reports'
    binding comes first and the broadcasts' exchange last: an agent that waits for all of them
    never finds the reports exchange without its queue."""
    app = app or current_app._get_current_object()
    broker.declare_reports_queue()
    if not on_rabbitmq(app):
        return
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        for exchange in exchanges(app).values():
            exchange(channel).declare()


def awaited(app=None) -> list:
    """What an agent needs before it starts: every shared exchange but the replies', which whoever
    asks a question declares before asking it."""
    app = app or current_app._get_current_object()
    replies = app.control.mailbox.reply_exchange.name
    return [exchange for name, exchange in exchanges(app).items() if name != replies]


def await_declared(agent, app=None, *, interval=WAIT_SECONDS):
    """Return once every exchange of :func:`awaited` exists. One that is missing is declared, if
    this account may; if it may not (an agent's own account), this waits for a manager to,
    saying so once, and looking again every ``interval`` seconds."""
    app = app or current_app._get_current_object()
    if not on_rabbitmq(app):
        return
    needed = awaited(app)
    may_declare, told = True, False
    with app.connection_for_write() as connection:
        connection.ensure_connection(max_retries=CONNECT_RETRIES, interval_start=0.1, interval_step=0.5,
                                     interval_max=2.0)
        while True:
            missing = [exchange for exchange in needed if not _exists(connection, exchange)]
            if not missing:
                if told:
                    logger.warning("agent %s: the managers declared what it waited for", agent)
                return
            if may_declare:
                may_declare = _declare(connection, missing)
                if may_declare:
                    continue
            if not told:
                told = True
                logger.warning("agent %s: waiting for a manager to declare the exchange(s) %s: its account may not "
                               "(a manager declares them when it starts)", agent,
                               ", ".join(exchange.name for exchange in missing))
            time.sleep(interval)


def on_rabbitmq(app) -> bool:
    """Whether ``app``'s broker speaks AMQP (RabbitMQ), whose accounts have permissions."""
    with app.connection_for_write() as connection:  # not connected: its transport is enough
        return connection.transport.driver_type == "amqp"


def _exists(connection, exchange) -> bool:
    channel = connection.channel()
    try:
        _passive(exchange, True)(channel).declare()
    except NotFound:
        return False  # the broker closed the channel
    _close(channel)
    return True


def _declare(connection, missing) -> bool:
    """Declare each of ``missing``; False once the account may not."""
    for exchange in missing:
        channel = connection.channel()
        try:
            exchange(channel).declare()
        except AccessRefused:
            return False
        _close(channel)
    return True


def _close(channel):
    try:
        channel.close()
    except Exception:  # noqa: BLE001 — only closing it
        pass


def use_passively(app=None):
    """Make ``app``'s worker — an agent's — declare every shared exchange passively: its
    remote-control queue's binding to the broadcasts, its answers to questions, its events.
    (Its reports are published to the reports exchange passively whoever sends them:
    ``workflows_app.broker.reports_route``.)"""
    app = app or current_app._get_current_object()
    if not on_rabbitmq(app):
        return
    mailbox = app.control.mailbox
    if not isinstance(mailbox, _PassiveMailbox):
        mailbox.__class__ = type(f"Passive{type(mailbox).__name__}", (_PassiveMailbox, type(mailbox)), {})
    mailbox.exchange = _passive(mailbox.exchange, True)
    mailbox.reply_exchange = _passive(mailbox.reply_exchange, True)
    dispatcher = app.events.Dispatcher
    if not issubclass(dispatcher, _PassiveEvents):
        app.events.Dispatcher = type(f"Passive{dispatcher.__name__}", (_PassiveEvents, dispatcher), {})


def _passive(exchange, passive):
    """A copy of ``exchange`` (unbound) that is declared passively, or not."""
    exchange = copy(exchange)
    exchange.passive = passive
    return exchange


class _PassiveMailbox:
    """A Celery remote-control mailbox whose publishes declare their exchanges passively: kombu's
    answer to a question declares the exchange it is sent to (``Mailbox._publish_reply``)."""

    @contextmanager
    def producer_or_acquire(self, producer=None, channel=None):
        with super().producer_or_acquire(producer, channel) as acquired:
            yield _DeclaresPassively(acquired)


class _DeclaresPassively:
    """A producer's ``publish`` with the exchanges it is told to declare declared passively."""

    def __init__(self, producer):
        self.producer = producer

    def publish(self, *args, declare=None, **kwargs):
        declare = [_passive(entity, True) if isinstance(entity, Exchange) else entity for entity in declare or ()]
        return self.producer.publish(*args, declare=declare, **kwargs)

    def __getattr__(self, name):
        return getattr(self.producer, name)


class _PassiveEvents:
    """Celery's event dispatcher, declaring the events' exchange passively before each publish."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.exchange = _passive(self.exchange, True)
