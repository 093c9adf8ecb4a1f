"""An agent is not trusted, and neither is anyone else who may use the broker.

Each attack here is made as an attacker makes it: with kombu (or Celery's own client) from outside
the agents, on the test's broker (Redis or RabbitMQ), while real agents run real steps. The
attacker may hold another agent's key (a compromised agent: ``manage.py agent_key`` prints it)
but never the key of the agent it speaks for, nor the master key. Every step ends with what its
own agent did; every forgery is logged, and none leaves a step running twice, stuck, or waiting.
"""

import json
import uuid

import kombu
import pytest
from celery import current_app
from django.conf import settings

from agents.models import Agent
from tests.integration.test_json_only import Trap
from workflows_app import broker, services, signing, wire
from workflows_app.models import Event, Execution, Operation
from workflows_app.states import EventType
from workflows_app.wire import keys

pytestmark = pytest.mark.integration


def publish(stack, body, serializer="json"):
    """A report, straight into the managers' reports queue."""
    queue = kombu.Queue(f"{stack.management_queue}.reports", durable=True)
    with kombu.Connection(settings.CELERY_BROKER_URL) as connection:
        producer = kombu.Producer(connection, serializer=serializer)
        producer.publish(body, exchange="", routing_key=queue.name, declare=[queue])


def proved(body, key):
    """``body`` with a proof made with ``key`` (the attacker's own agent's, or a guess)."""
    return {**body, "proof": keys.prove(key, keys.Purpose.REPORT, body)}


def peek(queue_name):
    """The first message waiting in ``queue_name``, read and put back (Redis' LRANGE, RabbitMQ's
    basic.get and reject): ``(args, kwargs)`` of the Celery task it carries."""
    with kombu.Connection(settings.CELERY_BROKER_URL) as connection:
        channel = connection.channel()
        message = channel.basic_get(queue_name, no_ack=False)
        assert message is not None, f"nothing waits in {queue_name}"
        args, kwargs, _ = json.loads(message.body)
        channel.basic_reject(message.delivery_tag, requeue=True)
        return args, kwargs


@pytest.mark.django_db(transaction=True)
def test_forged_and_replayed_reports_change_nothing_and_are_logged(stack, tmp_path):
    stack.start_manager()
    host, other = stack.agent_name("host-1"), stack.agent_name("host-2")
    stolen = signing.agent_key(other)  # what a compromised host-2 holds
    stack.start_agent(other)
    stack.wait_for_agent(other)
    tag = f"forged-{stack.suffix}"
    execution = services.start("it_single", {"agent": host, "tag": tag, "seconds": 4.0})
    waiting = stack.wait_for_operation(execution.pk, "long", "sent")

    # Its message waits in host-1's queue (host-1 is not up yet): read, it holds no secret — what
    # the attempt needs to run, and the managers' proof of it all.
    args, kwargs = peek(host)
    assert args == [str(waiting.pk), waiting.attempt] and set(kwargs) == {"proof", "grant"}
    assert set(kwargs["grant"]) == {"operation", "execution", "step", "args", "kwargs", "dry_run", "retries_left",
                                    "granted", "deadline"}
    about = {"agent": host, "incarnation": "x", "operation": str(waiting.pk), "attempt": waiting.attempt}
    claim = {"kind": "claim", **about, "pid": 1, "reply_to": f"{host}.replies.box.1", "id": "x"}
    publish(stack, {**claim, "proof": kwargs["proof"]})  # the message's proof, as a report's
    publish(stack, proved(claim, stolen))  # host-2's key, speaking for host-1
    publish(stack, proved({**claim, "reply_to": f"{other}.replies.box.1"}, stolen))  # ... and asking the answer
    publish(stack, proved({"kind": "claim", **about, "agent": other, "pid": 1, "reply_to": f"{other}.replies.b.1",
                           "id": "y"}, stolen))  # host-2 claiming, in its own name, a step sent to host-1
    forged_outcome = {"kind": "outcome", **about, "outcome": "succeeded", "result": "forged", "retryable": False,
                      "retry_after": None, "error": None}
    publish(stack, {**forged_outcome, "proof": "0" * 64})  # a guess
    publish(stack, proved(forged_outcome, stolen))
    publish(stack, {**forged_outcome, "secret": kwargs["proof"]})  # how reports proved their attempt before
    publish(stack, {"kind": "outcome", "agent": host})  # malformed
    # Longer than any report can be (a heartbeat of 40 MB doubled a manager's memory): not read.
    publish(stack, {"kind": "heartbeat", "agent": host, "incarnation": "x", "padding": "x" * wire.max_report_bytes()})
    publish(stack, {"kind": "heartbeat", "agent": host, "incarnation": "x", "trap": Trap(tmp_path / "unpickled")},
            serializer="pickle")

    stack.start_agent(host)
    step = stack.wait_for_operation(execution.pk, "long", "started")
    # A registration of another run while the step runs would make it lost, and run it again
    # beside this one: forged with host-2's key, and host-1's own earlier registration replayed.
    register = {"kind": "register", "agent": host, "hostname": "box", "pid": 1, "concurrency": 2}
    publish(stack, proved({**register, "incarnation": f"{2**63:016x}.{'0' * 15}"}, stolen))
    publish(stack, proved({**register, "incarnation": f"{1:016x}.{'0' * 15}"}, signing.agent_key(host)))

    stack.wait_for_status(execution.pk, "completed", timeout=60)
    step.refresh_from_db()
    assert step.result == tag, "the result its own agent reported"
    assert Execution.objects.get(pk=execution.pk).payload == {"result": step.result}
    assert len(stack.invocations(tag)) == 1, "it ran once"
    assert Agent.objects.get(name=host).incarnation == step.incarnation
    assert not Operation.objects.filter(result="forged").exists()
    assert not Event.objects.filter(type=EventType.STALE_REPORT).exists(), "refused before any fencing: not even an event"
    assert not (tmp_path / "unpickled").exists(), "the pickled report was never unpickled"

    manager_log = stack.processes[0].log_text()
    assert manager_log.count("not proved with that agent's key") == 6, manager_log[-3000:]
    assert f"which was sent to {host}: ignored" in manager_log, "host-2 in its own name"
    assert "report refused: outcome: no field 'secret'" in manager_log
    assert "report refused: proof: 64 hexadecimal digits are needed" in manager_log, "the malformed one"
    assert "did not begin after the current one" in manager_log, "the replayed registration"
    assert "refused a message of type application/x-python-serialize" in manager_log
    assert "unread: longer than any report" in manager_log
    assert "Traceback" not in manager_log


@pytest.mark.django_db(transaction=True)
def test_forged_operation_messages_and_commands_are_dropped_at_once(stack):
    stack.start_manager()
    host = stack.agent_name("host")
    stack.start_agent(host, concurrency=1)
    stack.wait_for_agent(host)
    app = current_app
    # Two operation messages no manager sent, ahead of a real one, with one pool process: each
    # waited 130 s for the answer to its claim (and came back), holding the agent.
    for proof in ("0" * 64, None):
        app.send_task(broker.RUNNER_TASK, args=[str(uuid.uuid4()), 1], kwargs={} if proof is None else {"proof": proof},
                      queue=host, serializer="json")
    tag = f"commands-{stack.suffix}"
    execution = services.start("it_single", {"agent": host, "tag": tag, "seconds": 3.0})
    step = stack.wait_for_operation(execution.pk, "long", "started", timeout=30)

    # A kill no manager asked for, as every kill was before (no proof), and with a guessed one.
    app.control.broadcast("switchyard_kill", arguments={
        "execution_id": str(execution.pk), "grace": 0.0,
        "attempts": [[str(step.pk), step.attempt], [str(step.pk), step.attempt, host, "0" * 64]]}, reply=False)
    app.control.broadcast("switchyard_cancel", arguments={"attempts": [[str(step.pk), step.attempt, host, "1" * 64]]},
                          reply=False)

    stack.wait_for_status(execution.pk, "completed", timeout=60)
    assert len(stack.invocations(tag)) == 1
    agent_log = stack.processes[-1].log_text()
    assert agent_log.count("that no manager proved for agent") == 2, agent_log[-3000:]
    assert "switchyard_kill: ignored 2 attempt(s) of 2, malformed or not proved by a manager" in agent_log.replace(
        "kill: ignored", "switchyard_kill: ignored")
    assert "cancel: ignored 1 attempt(s) of 1" in agent_log
    assert "Traceback" not in agent_log
