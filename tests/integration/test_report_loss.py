"""No report is lost with the manager that was taking it, on Redis.

Redis hands a waiting consumer a message by removing it from the queue. kombu's transport then
records it as held with a second command: a manager killed between the two took the report with
it (an agent's claim then waited its whole timeout for an answer; an outcome waited for the
tick to ask for it again). The managers now take reports with commands that keep each one either
in the queue or recorded as held, so the next manager to take reports stores it.

The race is made as it happens: the manager is frozen (SIGSTOP) while it waits for a report, a
report is sent, the broker hands it to the frozen manager, and the manager is killed.
"""

import os
import signal
import time
import uuid

import kombu
import pytest

from agents.models import Agent
from tests.integration.test_untrusted_agents import proved, publish
from workflows_app import broker, signing
from workflows_app.broker import batches

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not broker.broker_is_redis(),
                                 reason="RabbitMQ gives a dead consumer's unacknowledged messages back itself")]


def handed_to_frozen(stack, manager, client, queue, tries=10):
    """Freeze ``manager`` while its inbox waits for a report and send a heartbeat of a new agent;
    the name of that agent once the broker handed its heartbeat to the frozen manager (the queue
    emptied). A try whose wait had just timed out leaves the report queued: the manager is let go
    on (it stores it) and another try is made."""
    for _ in range(tries):
        name = stack.agent_name(f"ghost-{uuid.uuid4().hex[:6]}")
        os.killpg(manager.pid, signal.SIGSTOP)
        publish(stack, proved({"kind": "heartbeat", "agent": name, "incarnation": f"{time.time_ns():016x}.{'0' * 15}"},
                              signing.agent_key(name)))
        time.sleep(0.5)
        if not client.llen(queue):
            return name
        os.killpg(manager.pid, signal.SIGCONT)
        stack.wait_for(lambda: Agent.objects.filter(name=name).exists(), 30, "the heartbeat to be stored")
        time.sleep(0.2)
    raise AssertionError(f"no report was handed to the frozen manager in {tries} tries")


@pytest.mark.django_db(transaction=True)
def test_a_report_handed_to_a_manager_that_is_then_killed_is_stored_by_the_next_one(stack):
    manager = stack.start_manager()
    stack.wait_for(lambda: "inbox: taking reports from" in manager.log_text(), 60, "the manager's inbox")
    queue = f"{stack.management_queue}.reports"
    with broker.reports_connection() as connection:
        name = handed_to_frozen(stack, manager, connection.default_channel.client, queue)

    stack.kill(manager)
    assert not Agent.objects.filter(name=name).exists()
    stack.start_manager(name="manager-2")
    stack.wait_for(lambda: Agent.objects.filter(name=name).exists(), 30, f"the heartbeat of {name} to be stored")


@pytest.fixture
def channel():
    queue = f"test-batches-{uuid.uuid4().hex[:8]}"
    with broker.reports_connection() as connection:
        yield connection.default_channel, queue
        broker.give_back_held(queue)  # none left held in the broker's bookkeeping
        connection.default_channel.client.delete(queue, f"{queue}.taking")


def push(channel, queue, *bodies):
    producer = kombu.Producer(channel, serializer="json")
    for body in bodies:
        producer.publish(body, exchange="", routing_key=queue, declare=[kombu.Queue(queue)])


def test_a_batch_is_taken_in_one_step_held_until_acknowledged_and_given_back_when_asked(channel):
    channel, queue = channel
    assert batches.usable(channel)
    push(channel, queue, *({"n": n} for n in range(5)))
    taking = batches.Batches(channel, queue)
    first = taking.take(3, 10_000, timeout=1)
    assert [channel.Message(t.envelope, channel=channel).decode() for t in first] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert channel.client.llen(queue) == 2
    # Held as kombu holds a message: a starting manager gives back what a dead one held.
    assert broker.give_back_held(queue) == 3
    assert channel.client.llen(queue) == 5
    again = taking.take(10, 10_000, timeout=1)
    assert sorted(channel.Message(t.envelope, channel=channel).decode()["n"] for t in again) == [0, 1, 2, 3, 4]
    taking.ack([t.tag for t in again[:4]])
    taking.give_back([again[4].tag])
    assert broker.give_back_held(queue) == 0, "acknowledged or given back: none held"
    assert len(taking.take(10, 10_000, timeout=1)) == 1


def test_a_take_waits_for_the_first_message_and_drops_one_longer_than_asked_or_not_kombus(channel):
    channel, queue = channel
    taking = batches.Batches(channel, queue)
    began = time.monotonic()
    assert taking.take(10, 10_000, timeout=0.3) == []
    assert time.monotonic() - began >= 0.25
    push(channel, queue, {"long": "x" * 20_000}, {"short": 1})
    channel.client.lpush(queue, b"not json", b"[1, 2")
    taken = taking.take(10, 10_000, timeout=1)
    assert [(t.envelope is None, t.size > 20_000) for t in taken] == [(True, True), (False, False), (True, False),
                                                                      (True, False)]
    # Only the one kombu could give back is held; the broker's bookkeeping stays readable.
    assert broker.give_back_held(queue) == 1
