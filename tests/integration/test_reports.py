"""Agents speak to the managers through the broker only, and only for what was sent to them.

Anyone who may publish to the broker — a compromised agent, an operation's code — may publish a
report. Here such reports are published with kombu straight to the managers' reports queue while
a real agent runs a real step: an outcome with a guessed secret, one signed for another agent, one
for an operation that does not exist, a claim that asks for its answer in another queue, a
malformed one and a pickled one. None changes anything; the manager logs each; the step ends with
the result its own agent reported.
"""

import json

import kombu
import pytest
from django.conf import settings

from tests.integration.test_json_only import Trap
from workflows_app import services, signing
from workflows_app.models import Event, Execution, Operation
from workflows_app.states import EventType

pytestmark = pytest.mark.integration


def publish(stack, body, serializer="json"):
    queue = kombu.Queue(f"{stack.management_queue}.reports", durable=True)
    with kombu.Connection(settings.CELERY_BROKER_URL) as connection:
        producer = kombu.Producer(connection, serializer=serializer)
        producer.publish(body, exchange="", routing_key=queue.name, declare=[queue])


@pytest.mark.django_db(transaction=True)
def test_forged_reports_change_nothing_and_are_logged(stack, tmp_path):
    stack.start_manager()
    host, other = stack.agent_name("host-1"), stack.agent_name("host-2")
    for name in (host, other):
        stack.start_agent(name)
    for name in (host, other):
        stack.wait_for_agent(name)
    execution = services.start("it_single", {"agent": host, "tag": f"forged-{stack.suffix}", "seconds": 4.0})
    step = stack.wait_for_operation(execution.pk, "long", "started")
    about = {"operation": str(step.pk), "attempt": step.attempt, "incarnation": step.incarnation}
    forged_outcome = {"kind": "outcome", "outcome": "succeeded", "result": "forged", **about}
    trap = tmp_path / "unpickled"

    publish(stack, {**forged_outcome, "agent": host, "secret": "0" * 64})  # a guess
    publish(stack, {**forged_outcome, "agent": other,  # signed for the agent that sends it, not the one it went to
                    "secret": signing.attempt_secret(step.pk, step.attempt, other)})
    ghost = "00000000-0000-0000-0000-000000000001"
    publish(stack, {**forged_outcome, "operation": ghost, "agent": host, "secret": signing.attempt_secret(ghost, 1, host),
                    "attempt": 1})
    publish(stack, {"kind": "claim", **about, "agent": host, "secret": signing.attempt_secret(step.pk, step.attempt, host),
                    "pid": 1, "reply_to": host, "id": "x"})  # its answer would go to the agent's task queue
    publish(stack, {"kind": "outcome", "agent": host})
    publish(stack, {"kind": "heartbeat", "agent": host, "incarnation": "x", "trap": Trap(trap)}, serializer="pickle")

    stack.wait_for_status(execution.pk, "completed", timeout=60)
    step.refresh_from_db()
    assert step.result == f"forged-{stack.suffix}", "the result its own agent reported"
    assert Execution.objects.get(pk=execution.pk).payload == {"result": step.result}
    assert not Operation.objects.filter(result="forged").exists()
    assert not Event.objects.filter(type=EventType.STALE_REPORT).exists(), "refused before any fencing: not even an event"
    assert not trap.exists(), "the pickled report was never unpickled"

    manager_log = stack.processes[0].log_text()
    assert manager_log.count("not the attempt's secret for that agent") == 1, manager_log[-3000:]
    assert f"which was sent to {host}: ignored" in manager_log
    assert "not a reply queue of that agent" in manager_log
    assert "which does not exist" in manager_log
    assert "report refused: incarnation: a string" in manager_log, "the one without its fields"
    assert "refused a message of type application/x-python-serialize" in manager_log
    assert json.dumps("forged") not in stack.processes[1].log_text()
