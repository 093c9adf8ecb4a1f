"""An agent's worker declares the exchanges it shares with the managers passively
(``workflows_app.broker.shared``): its account may not declare them, since the right to declare is the
right to delete. What RabbitMQ then allows is ``tests/integration/test_rabbitmq.py``'s; here,
what the agent's Celery asks of the broker, without a broker."""

import kombu
import pytest
from celery import Celery

from workflows_app.broker import shared
from workflows_app import broker


@pytest.fixture(autouse=True)
def own_broker_url(monkeypatch):
    """The apps here name their broker themselves: Celery prefers the environment's."""
    for variable in ("CELERY_BROKER_URL", "CELERY_BROKER_WRITE_URL"):
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture
def agent_app():
    """A Celery app on RabbitMQ, as an agent's, that never connects."""
    app = Celery("an-agent", broker="amqp://agent-1:secret@broker.invalid:5672/switchyard", set_as_current=False)
    shared.use_passively(app)
    return app


class Producer:
    def __init__(self):
        self.published = []

    def publish(self, body, **options):
        self.published.append((body, options))


def test_its_remote_control_queue_binds_to_the_broadcasts_without_declaring_them(agent_app):
    mailbox = agent_app.control.mailbox
    queue = mailbox.get_queue("host-1@box")
    assert (queue.name, queue.exchange.name, queue.exchange.passive) == ("host-1@box.celery.pidbox", "celery.pidbox", True)
    assert (mailbox.exchange.type, mailbox.exchange.durable) == ("fanout", False), "as Celery declares it"
    assert mailbox.reply_exchange.passive


def test_its_answers_to_remote_control_declare_the_reply_exchange_passively(agent_app):
    producer = Producer()
    agent_app.control.mailbox._publish_reply({"host-1@box": {"ok": "pong"}}, "reply.celery.pidbox", "1f2e3d4c",
                                              "a-ticket", channel=object(), producer=producer)
    [(body, options)] = producer.published
    assert body == {"host-1@box": {"ok": "pong"}} and options["routing_key"] == "1f2e3d4c"
    [declared] = options["declare"]
    assert (declared.name, declared.passive) == ("reply.celery.pidbox", True)


def test_its_events_declare_the_events_exchange_passively(agent_app):
    with agent_app.connection_for_write() as connection:
        dispatcher = agent_app.events.Dispatcher(connection, hostname="host-1@box", enabled=False)
    assert (dispatcher.exchange.name, dispatcher.exchange.type, dispatcher.exchange.passive) == ("celeryev", "topic", True)


def test_it_is_done_once_however_often_it_is_asked(agent_app):
    shared.use_passively(agent_app)
    mailbox_classes = [cls.__name__ for cls in type(agent_app.control.mailbox).__mro__]
    assert mailbox_classes.count("_PassiveMailbox") == 1
    assert [cls.__name__ for cls in agent_app.events.Dispatcher.__mro__].count("_PassiveEvents") == 1


def test_the_managers_declare_each_as_celery_does(agent_app):
    declared = shared.exchanges(agent_app)
    assert {name: (e.type, e.durable, e.passive) for name, e in declared.items()} == {
        "management.reporting": ("direct", True, False),
        "celeryev": ("topic", True, False),
        "reply.celery.pidbox": ("direct", False, False),
        "celery.pidbox": ("fanout", False, False),
    }
    assert list(declared)[-1] == "celery.pidbox", "the broadcasts' last: an agent waits for it with the others"
    assert [e.name for e in shared.awaited(agent_app)] == ["management.reporting", "celeryev", "celery.pidbox"]


def test_reports_go_to_the_reports_exchange_declared_passively(monkeypatch):
    monkeypatch.setattr(broker, "broker_is_redis", lambda: False)
    route = broker.reports_route()
    [exchange] = route["declare"]
    assert isinstance(exchange, kombu.Exchange) and (exchange.name, exchange.passive) == ("management.reporting", True)


def test_on_redis_nothing_changes():
    app = Celery("an-agent", broker="redis://127.0.0.1:1/0", set_as_current=False)
    shared.use_passively(app)
    assert not app.control.mailbox.exchange.passive and not shared.on_rabbitmq(app)
    with app.connection_for_write() as connection:
        assert not app.events.Dispatcher(connection, enabled=False).exchange.passive
