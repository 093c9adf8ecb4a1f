"""What the broker refuses, with a real manager and a real agent on the configured broker.

A step for a name the broker or Celery keeps (``celery.pidbox``, ``amq.…``) never reaches the
broker: the workflow's request is refused, and the execution fails saying why. Before, the
manager sent it, RabbitMQ refused the declare (or, with no manager's remote control declared yet,
took ``celery.pidbox`` as a direct exchange of the agent's), the operation stayed ``sending`` for
ever, and every manager's tick failed at the sweep for lost messages, which it then never ended.

A queue the broker refuses under a good name — on RabbitMQ one declared with other arguments
(PRECONDITION_FAILED), on Redis a key holding another type of value (WRONGTYPE) — fails the
operations sent to it, for good, while the rest of the execution and the managers' ticks go on."""

import uuid

import kombu
import pytest
from django.conf import settings

from tests.integration.harness import describe_execution
from tests.integration.test_engine import finish, operations
from workflows_app import services
from workflows_app.states import FailureMode

pytestmark = pytest.mark.integration


def rabbitmq() -> bool:
    return settings.CELERY_BROKER_URL.startswith(("amqp://", "amqps://", "pyamqp://"))


@pytest.fixture
def refusing_queue():
    """A good agent name whose queue the broker refuses: taken before by something else (on
    RabbitMQ a queue and exchange declared not durable, where Celery declares them durable; on
    Redis a string under its key). Deleted afterwards."""
    name = f"taken-{uuid.uuid4().hex[:8]}"
    with kombu.Connection(settings.CELERY_BROKER_URL, connect_timeout=5) as connection:
        if rabbitmq():
            kombu.Queue(name, kombu.Exchange(name, "direct", durable=False), routing_key=name,
                        durable=False)(connection.default_channel).declare()
        else:
            connection.default_channel.client.set(name, "taken by something else")
    yield name
    with kombu.Connection(settings.CELERY_BROKER_URL, connect_timeout=5) as connection:
        if rabbitmq():
            connection.default_channel.queue_delete(name)
            connection.default_channel.exchange_delete(name)
        else:
            connection.default_channel.client.delete(name)


@pytest.mark.django_db(transaction=True)
def test_a_refused_queue_fails_its_steps_and_a_reserved_name_never_reaches_the_broker(stack, refusing_queue):
    stack.start_manager(concurrency=2)
    host = stack.agent_name("host")
    stack.start_agent(host, concurrency=2)
    stack.wait_for_agent(host)

    # f000 and f002 on the agent, f001 and f003 on the refused queue; the fan-in after them all.
    execution = services.start("it_fan_out", {"n": 4, "agents": [host, refusing_queue]},
                               failure_mode=FailureMode.CONTINUE_WHILE_POSSIBLE)
    finish(stack, execution, "failed")
    ops = operations(execution)
    why = describe_execution(execution.pk)
    assert {name: op.state for name, op in ops.items()} == {
        "f000": "succeeded", "f001": "failed", "f002": "succeeded", "f003": "failed", "fan-in": "cancelled"}, why
    for name in ("f001", "f003"):
        error = ops[name].error
        assert error["type"] == "SendRefused" and ops[name].attempt == 1, why
        assert error["message"].startswith(f"the broker refused the message to agent {refusing_queue!r}: "), why
        assert ("PRECONDITION_FAILED" if rabbitmq() else "WRONGTYPE") in error["message"], why

    # Names the broker keeps are refused where the workflow asks for the step: nothing is sent.
    for name in ("celery.pidbox", "amq.gen-1"):
        refused = services.start("it_single", {"agent": name, "seconds": 0})
        done = finish(stack, refused, "failed")
        assert f"invalid agent name {name!r}" in done.error and not operations(refused), describe_execution(refused.pk)

    # The managers still carry everything on: their ticks did not stop at the refusals.
    after = services.start("it_fan_out", {"n": 2, "agents": [host]})
    finish(stack, after, "completed")
    manager_log = next(p for p in stack.processes if "run_manager" in p.argv).log_text()
    assert "tick failed" not in manager_log and "tick: " not in manager_log, manager_log[-3000:]
